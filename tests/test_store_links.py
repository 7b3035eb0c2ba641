"""The store never follows a symbolic link inside its folder, and its folder must not be one (attack h8, h8b).

A cloned repository can ship `NAME.nbagent/` with links in it: `events.jsonl -> /tmp/drop/log.jsonl` (dangling: it
was created on the first append, mode 0644, outside the project), `events.jsonl -> ../results.jsonl` (every event
appended to a data file of the project), `blobs -> /tmp/drop` (the content of every file the agent changed or
deleted copied there). Each file the store opens is opened with O_NOFOLLOW and each folder checked with lstat: a
link is refused in one line ("a symbolic link (to ...) ... remove the link") and its target is never created,
written or read. The store folder itself may not be a link either, for readers and writers alike.

Offline: the scripted model, the real file tools, the CLI in a subprocess with a timeout (a guard, not a timing).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent.gate.deciders import PolicyDecider
from nbagent.runtime import Agent
from nbagent.store import Store, StoreError
from nbagent.store.blobs import BlobError, BlobStore
from nbagent.store.verify import verify_store
from nbagent.tools.files import FileTools

ROOT = Path(__file__).resolve().parents[1]
REFUSED = "nbagent never follows a link inside its store folder"
SECRET = "patient,diagnosis\nA,confidential-7781\n"

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="POSIX links")


@pytest.fixture(autouse=True)
def _user_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))  # never the real user's anchors


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "nbagent.cli", *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=ROOT)


def shipped(tmp: Path) -> Path:
    """A project folder as a repository ships it: a notebook's store (meta.json) and a private data file."""
    project = tmp / "project"
    project.mkdir()
    (project / "private.csv").write_text(SECRET)
    Store(project / "nb.ipynb").close()
    for name in ("events.jsonl", "tables.json"):
        (project / "nb.nbagent" / name).unlink(missing_ok=True)
    return project


def run_agent(project: Path, *calls: dict[str, Any]) -> Any:
    store = Store(project / "nb.ipynb")
    tools = FileTools(project, BlobStore.of_store(store.path)).tools()
    turns = [{"tool_calls": [c]} for c in calls] + [{"content": "done"}]
    a = Agent(script={"turns": turns}, tools=tools, store=store, autonomy="L3", decider=PolicyDecider("all"),
              retry_base=0.0, retry_cap=0.0)
    try:
        return asyncio.run(a.run("look at the data"))
    finally:
        store.close()


def read_and_delete() -> tuple[dict[str, Any], dict[str, Any]]:
    return ({"name": "read_file", "arguments": {"path": "private.csv"}},
            {"name": "delete_file", "arguments": {"path": "private.csv"}})


def test_a_log_linked_out_of_the_project_is_refused_never_created(tmp_path: Path) -> None:
    # Was (h8): the dangling link's target was created on the first append (mode 0644, in a world-writable /tmp
    # folder) and received the prompt and every file the agent read.
    project = shipped(tmp_path)
    drop = tmp_path / "drop"
    drop.mkdir()
    os.symlink(drop / "log.jsonl", project / "nb.nbagent" / "events.jsonl")
    with pytest.raises(StoreError, match=REFUSED) as caught:
        run_agent(project, *read_and_delete())
    (line,) = str(caught.value).splitlines()
    assert "events.jsonl: a symbolic link (to " in line and line.endswith("remove the link")
    assert list(drop.iterdir()) == [] and (project / "private.csv").read_text() == SECRET
    for command in ("runs", "verify"):
        done = cli(command, str(project / "nb.ipynb"))
        assert done.returncode in (1, 2) and REFUSED in done.stdout + done.stderr, done
    assert list(drop.iterdir()) == []


def test_a_log_linked_to_a_data_file_of_the_project_is_never_appended_to(tmp_path: Path) -> None:
    # Was (h8b): `events.jsonl -> ../results.jsonl` appended every event of the run to the project's results file.
    project = shipped(tmp_path)
    (project / "results.jsonl").write_text("")
    os.symlink("../results.jsonl", project / "nb.nbagent" / "events.jsonl")
    with pytest.raises(StoreError, match=REFUSED):
        run_agent(project, {"name": "read_file", "arguments": {"path": "results.jsonl"}})
    assert (project / "results.jsonl").read_text() == ""


def test_a_blob_folder_linked_out_of_the_project_receives_nothing(tmp_path: Path) -> None:
    # Was (h8): `blobs -> /tmp/drop` received the content of the file the agent deleted (saved for undo).
    project = shipped(tmp_path)
    drop = tmp_path / "drop"
    drop.mkdir()
    os.symlink(drop, project / "nb.nbagent" / "blobs")
    result = run_agent(project, *read_and_delete())
    failed = [e.payload for e in Store(project / "nb.ipynb", readonly=True).run_events(result.run_id)
              if e.type == "tool_call_failed"]
    assert [(f.tool, REFUSED in f.error) for f in failed] == [("delete_file", True)]
    assert list(drop.rglob("*")) == [] and (project / "private.csv").read_text() == SECRET  # not deleted unsaved


@pytest.mark.parametrize("name", ["meta.json", "lock", "leases", "leases/RUN.lock", "blobs/SHARD", "blobs/SHA"])
def test_no_link_inside_the_store_is_written_through(tmp_path: Path, name: str) -> None:
    """Each file or folder the store writes: a link there is refused in one line and its target left as it was."""
    project = shipped(tmp_path)
    first = run_agent(project, {"name": "create_file", "arguments": {"path": "a.md", "content": "a\n"}})
    store_dir = project / "nb.nbagent"
    sha = next(iter(BlobStore.of_store(store_dir).folder.rglob("*"))).name  # the one shard: its name
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "file").write_text("untouched\n")
    rel = (name.replace("RUN", first.run_id).replace("SHARD", sha))
    if name == "blobs/SHA":
        (blob,) = [p for p in (store_dir / "blobs").rglob("*") if p.is_file()]
        rel = str(blob.relative_to(store_dir))
    link = store_dir / rel
    if link.is_dir():
        for p in sorted(link.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        link.rmdir()
    else:
        link.unlink(missing_ok=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target if name in ("leases", "blobs/SHARD") else target / "file", link)
    try:
        store = Store(project / "nb.ipynb")
        BlobStore.of_store(store_dir).put(b"a\n")
        BlobStore.of_store(store_dir).get(BlobStore.of_store(store_dir).put(b"b\n"))
        store.in_progress(first.run_id)
        store.create_run(store.session().id, "p", lease=True)
        store.close()
    except (StoreError, BlobError) as exc:
        (line,) = str(exc).splitlines()
        assert REFUSED in line and line.endswith("remove the link"), line
    else:
        assert name == "blobs/SHA"  # a blob's own name: the link is replaced by the blob, its target untouched
        assert not link.is_symlink()
    assert sorted(p.name for p in target.iterdir()) == ["file"] and (target / "file").read_text() == "untouched\n"


def test_a_linked_tables_file_is_damage_replaced_never_written_through(tmp_path: Path) -> None:
    project = shipped(tmp_path)
    (project / "data.json").write_text('{"mine": {}}')
    os.symlink("../data.json", project / "nb.nbagent" / "tables.json")
    result = run_agent(project, {"name": "read_file", "arguments": {"path": "private.csv"}})
    assert result.status.value == "completed"
    assert (project / "data.json").read_text() == '{"mine": {}}'
    assert not (project / "nb.nbagent" / "tables.json").is_symlink()


def test_a_store_folder_that_is_a_link_is_refused_by_readers_and_writers(tmp_path: Path) -> None:
    """A repository could ship `nb.nbagent -> /tmp/drop` as well as links inside it: nbagent opens a store only by
    its own path. The folder it points to is a store like any other, named as itself."""
    project = shipped(tmp_path)
    run_agent(project, {"name": "read_file", "arguments": {"path": "private.csv"}})
    real = tmp_path / "kept-elsewhere.nbagent"
    os.replace(project / "nb.nbagent", real)
    os.symlink(real, project / "nb.nbagent")
    for readonly in (True, False):
        with pytest.raises(StoreError, match="the store folder is a symbolic link") as caught:
            Store(project / "nb.ipynb", readonly=readonly)
        assert "remove the link, or name the folder it points to" in str(caught.value)
    for command in ("runs", "verify"):
        done = cli(command, str(project / "nb.ipynb"))
        assert done.returncode == 2 and done.stdout == "", done
        (line,) = done.stderr.splitlines()
        assert "nb.nbagent: the store folder is a symbolic link (to " in line
    assert verify_store(Store(real, readonly=True)).ok
    assert cli("verify", str(real)).returncode == 0
