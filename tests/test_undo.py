"""Undo of what agent runs changed: creates, overwrites, deletes, child runs, conflicts, undo of an undo, --to."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PolicyDecider
from nbagent.runtime import Agent
from nbagent.store import Store, StoreError
from nbagent.store.blobs import BlobStore
from nbagent.store.verify import verify_store
from nbagent.tools.files import FileTools
from nbagent.tools.kernel import kernel_tools
from nbagent.undo.files import UNDO_MODEL, UndoError, undo
from tests.agents import call, turns


def store_of(tmp: Path) -> Store:
    return Store(tmp / "nb.ipynb")


def agent_run(tmp: Path, *items: Any, extra: list[Any] | None = None) -> str:
    """One run of a scripted agent with the real file tools (their writes saved for undo); its id."""
    store = store_of(tmp)
    tools = FileTools(tmp, BlobStore.of_store(store.path)).tools() + (extra or [])
    a = Agent(script=turns(*items), tools=tools, store=store, autonomy="L3", decider=PolicyDecider("all"),
              retry_base=0.001, retry_cap=0.01)
    result = asyncio.run(a.run("change files"))
    assert result.status == RunStatus.COMPLETED, result
    return result.run_id


def files(tmp: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(tmp.iterdir()) if p.is_file()}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "keep.txt").write_text("keep\n")
    (tmp_path / "notes.md").write_text("# Notes\nold\n")
    (tmp_path / "old.csv").write_text("a,b\n1,2\n")
    return tmp_path


def test_undo_restores_creates_overwrites_and_deletes(folder: Path) -> None:
    before = files(folder)
    run = agent_run(folder, [call("create_file", path="new.md", content="new\n"),
                             call("write_file", path="notes.md", content="# Notes\nrewritten\n"),
                             call("delete_file", path="old.csv")], "done")
    assert files(folder) != before
    store = store_of(folder)
    completed = [e.payload.result for e in store.run_events(run) if e.type == "tool_call_completed"]
    assert all(len(r["after_sha256"] or "x" * 64) == 64 for r in completed)  # hashes in the log, content beside it
    assert (store.path / "blobs").is_dir()
    report = undo(store, run)
    assert report.ok and files(folder) == before
    assert {r.path: r.action for r in report.restores} == {"new.md": "remove", "notes.md": "restore",
                                                          "old.csv": "recreate"}
    state = store.run_state(report.undo_run_id or "")
    assert state.model == UNDO_MODEL and state.status == RunStatus.COMPLETED
    assert [s.tool for s in state.steps.values()] == ["restore_file"] * 3
    assert verify_store(Store(store.path, readonly=True)).ok


def test_undo_covers_child_runs_newest_change_first(folder: Path) -> None:
    run = agent_run(folder,
                    [call("spawn_agent", prompt="write", tools=["write_file", "create_file"])],  # parent
                    [call("write_file", path="notes.md", content="child\n"),
                     call("create_file", path="child.md", content="c\n")],  # child
                    "child done",
                    [call("write_file", path="notes.md", content="parent\n")],  # parent again, after the child
                    "done")
    store = store_of(folder)
    assert store.run_state(run).children
    report = undo(store, run)
    assert report.ok and (folder / "notes.md").read_text() == "# Notes\nold\n" and not (folder / "child.md").exists()
    notes = next(r for r in report.restores if r.path == "notes.md")
    assert notes.changes == 2


def test_a_conflict_changes_nothing_and_force_passes(folder: Path) -> None:
    run = agent_run(folder, [call("write_file", path="notes.md", content="agent\n"),
                             call("create_file", path="new.md", content="new\n")], "done")
    (folder / "notes.md").write_text("agent\nand my edit\n")
    store = store_of(folder)
    runs_before = len(store.run_ids())
    report = undo(store, run)
    assert not report.ok and [c.path for c in report.conflicts] == ["notes.md"]
    assert "+and my edit" in report.conflicts[0].diff and "--force" in report.text()
    assert (folder / "notes.md").read_text() == "agent\nand my edit\n" and (folder / "new.md").exists()
    assert len(store.run_ids()) == runs_before  # nothing recorded either
    forced = undo(store, run, force=True)
    assert forced.ok and (folder / "notes.md").read_text() == "# Notes\nold\n" and not (folder / "new.md").exists()
    # the edit that --force overwrote is kept: undoing the undo brings it back
    assert undo(store, forced.undo_run_id or "").ok
    assert (folder / "notes.md").read_text() == "agent\nand my edit\n"


def test_undo_of_an_undo(folder: Path) -> None:
    run = agent_run(folder, [call("write_file", path="notes.md", content="agent\n"),
                             call("delete_file", path="old.csv")], "done")
    after = files(folder)
    store = store_of(folder)
    first = undo(store, run)
    assert (folder / "notes.md").read_text() == "# Notes\nold\n"
    second = undo(store, first.undo_run_id or "")
    assert second.ok and files(folder) == after
    assert verify_store(Store(store.path, readonly=True)).ok


def test_undo_to_restores_the_folder_before_a_run(folder: Path) -> None:
    before = files(folder)
    first = agent_run(folder, [call("write_file", path="notes.md", content="one\n")], "done")
    agent_run(folder, [call("write_file", path="notes.md", content="two\n"),
                       call("create_file", path="two.md", content="2\n")], "done")
    store = store_of(folder)
    assert not undo(store, first).ok  # alone, the first run's change conflicts with the later run's
    report = undo(store, first, to=True)
    assert report.ok and files(folder) == before and len(report.runs) == 2


def test_what_cannot_be_undone_is_listed(folder: Path) -> None:
    ns: dict[str, Any] = {}
    run = agent_run(folder, [call("run_python", code="x = 1"),
                             call("create_file", path="new.md", content="n\n")], "done", extra=kernel_tools(ns))
    report = undo(store_of(folder), run)
    assert report.ok and not (folder / "new.md").exists()
    assert [(n.tool, n.call_id) for n in report.not_undoable] == [("run_python", "nb1_0")]
    assert "not undoable: run_python" in report.text()
    answer = store_of(folder).run_state(report.undo_run_id or "").answer or ""
    assert "not undoable: run_python" in answer


def test_a_file_too_large_to_copy_is_changed_but_listed_as_not_undoable(folder: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleting a big data file must not first copy it beside the log: over the limit, no copy is kept, and undo
    says which change it cannot reverse (and still reverses the others)."""
    from nbagent.tools import files as file_tools_module

    monkeypatch.setattr(file_tools_module, "MAX_UNDO_COPY_BYTES", 5)
    run = agent_run(folder, [call("delete_file", path="old.csv"),
                             call("create_file", path="new.md", content="n\n")], "done")
    store = store_of(folder)
    deleted = next(e.payload.result for e in store.run_events(run)
                   if e.type == "tool_call_completed" and e.payload.tool == "delete_file")
    assert "before_sha256" not in deleted and "over 5 bytes" in deleted["undo"]
    assert not any((store.path / "blobs").rglob("*")) or all(
        p.stat().st_size != len("a,b\n1,2\n") for p in (store.path / "blobs").rglob("*") if p.is_file())
    report = undo(store, run)
    assert report.ok and not (folder / "new.md").exists() and not (folder / "old.csv").exists()
    assert [(n.tool, n.call_id) for n in report.not_undoable] == [("delete_file", "nb1_0")]
    assert "not saved for undo" in report.not_undoable[0].why


def test_bad_input_is_one_clear_line_and_changes_nothing(folder: Path) -> None:
    run = agent_run(folder, [call("read_file", path="notes.md")], "read only")
    store = store_of(folder)
    with pytest.raises(UndoError, match="no file changes to undo"):
        undo(store, run)
    with pytest.raises(Exception, match="no such run"):
        undo(store, "01ZZZZZZZZ")
    made = agent_run(folder, [call("create_file", path="d.md", content="x\n")], "done")
    (folder / "d.md").unlink()
    (folder / "d.md").mkdir()
    with pytest.raises(UndoError, match="now a folder"):
        undo(store, made)
    assert (folder / "d.md").is_dir()


def test_undo_from_a_fresh_process_like_after_a_kernel_restart(folder: Path) -> None:
    before = files(folder)
    run = agent_run(folder, [call("write_file", path="notes.md", content="agent\n"),
                             call("create_file", path="new.md", content="n\n")], "done")
    cli = [sys.executable, "-m", "nbagent.cli", "undo"]
    (folder / "new.md").write_text("edited\n")
    refused = subprocess.run([*cli, run, str(folder / "nb.ipynb")], capture_output=True, text=True)
    assert refused.returncode == 1 and "conflict: new.md" in refused.stdout and "+edited" in refused.stdout
    (folder / "new.md").write_text("n\n")
    done = subprocess.run([*cli, run, str(folder / "nb.ipynb")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert files(folder) == before and "undo run" in done.stdout
    undo_run = done.stdout.split("undo run ")[1].split(":")[0]
    shown = subprocess.run([sys.executable, "-m", "nbagent.cli", "show", undo_run, str(folder / "nb.ipynb")],
                           capture_output=True, text=True)
    assert shown.returncode == 0 and "restore_file" in shown.stdout and UNDO_MODEL in shown.stdout
    unknown = subprocess.run([*cli, "01ZZZZ", str(folder / "nb.ipynb")], capture_output=True, text=True)
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1


def test_percent_agent_undo_in_the_notebook(folder: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`%agent undo` through the notebook host (no kernel): its file tools save content, and undo uses the log."""
    from traitlets.config import Configurable

    from nbagent.ipython import entry
    from nbagent.ipython import host as host_module
    from nbagent.ipython.entry import run_line
    from nbagent.ipython.options import UsageError

    shell = Configurable()
    shell.user_ns = {"__session__": str(folder / "nb.ipynb")}  # type: ignore[attr-defined]
    h = host_module.NotebookHost(shell)
    monkeypatch.setattr(entry, "_host", h)
    write = next(t for t in h.all_tools() if t.name == "write_file")
    a = Agent(script=turns([call("write_file", path="notes.md", content="agent\n")], "done"), tools=[write],
              store=h.store, autonomy="L3", decider=PolicyDecider("all"))
    run = asyncio.run(a.run("rewrite")).run_id
    assert (folder / "notes.md").read_text() == "agent\n"
    (folder / "notes.md").write_text("mine\n")
    with pytest.raises(UsageError, match="refused; nothing was changed"):
        asyncio.run(run_line(f"undo {run}"))
    assert "+mine" in capsys.readouterr().out and (folder / "notes.md").read_text() == "mine\n"
    asyncio.run(run_line(f"undo {run} --force"))
    assert (folder / "notes.md").read_text() == "# Notes\nold\n" and "restored notes.md" in capsys.readouterr().out
    with pytest.raises(StoreError, match="no such run"):  # one line in the cell, as for %agent show
        asyncio.run(run_line("undo 01ZZZZZZ"))


def test_a_restore_that_fails_puts_back_what_the_undo_had_restored(folder: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only file or folder met half-way: the undo rolls back its own restores, so nothing changes."""
    from nbagent.undo import files as undo_module

    run = agent_run(folder, [call("write_file", path="notes.md", content="agent\n"),
                             call("create_file", path="new.md", content="n\n"),
                             call("delete_file", path="old.csv")], "done")
    after = files(folder)
    real = undo_module._Folder.restore
    seen: list[str] = []

    def restore(self: Any, path: str, data: bytes | None) -> None:
        seen.append(path)
        if len(seen) == 2:
            raise PermissionError(13, "Permission denied", path)
        real(self, path, data)

    monkeypatch.setattr(undo_module._Folder, "restore", restore)
    store = store_of(folder)
    report = undo(store, run)
    assert not report.ok and "put back" in report.text() and "Permission denied" in report.failed[0]
    assert files(folder) == after
    state = store.run_state(report.undo_run_id or "")
    assert state.status == RunStatus.COMPLETED_WITH_ERRORS
    assert [(s.tool, s.status) for s in state.steps.values()] == [("restore_file", "ok"), ("restore_file", "failed"),
                                                                  ("restore_file", "ok")]


def test_a_file_now_a_symlink_or_a_damaged_copy_is_refused_and_nothing_changes(folder: Path) -> None:
    run = agent_run(folder, [call("write_file", path="notes.md", content="agent\n"),
                             call("create_file", path="new.md", content="n\n")], "done")
    store = store_of(folder)
    (folder / "new.md").unlink()
    (folder / "new.md").symlink_to(folder / "keep.txt")  # a link where the run left a file
    after = {p.name: (p.is_symlink(), p.read_text()) for p in folder.iterdir() if p.is_file()}
    with pytest.raises(UndoError, match=r"new.md: .*symbolic link; nothing was changed"):
        undo(store, run)
    assert {p.name: (p.is_symlink(), p.read_text()) for p in folder.iterdir() if p.is_file()} == after
    (folder / "new.md").unlink()
    (folder / "new.md").write_text("n\n")
    # the copy of notes.md's old content, altered on disk: never restored, and nothing else is either
    before_sha = next(e.payload.result["before_sha256"] for e in store.run_events(run)
                      if e.type == "tool_call_completed" and e.payload.tool == "write_file")
    blob = BlobStore.of_store(store.path).path(before_sha)
    blob.chmod(0o644)
    blob.write_bytes(b"# Notes\ntampered\n")
    with pytest.raises(UndoError, match=r"notes.md: .*nothing was changed"):
        undo(store, run)
    assert (folder / "notes.md").read_text() == "agent\n" and (folder / "new.md").read_text() == "n\n"
    assert [r for r in store.list_runs() if r.model == UNDO_MODEL] == []


# ---------------------------------------------------------------------------------------------- cells, as a property
# Issue 46: an undo of a run whose cell the person had edited said "cell removed" and logged `restore_cell … removed`
# while the cell stayed, and its record said "the files this run changed were put back" for a run that changed no
# file. Here runs add and replace cells (tools that do what run_cell/replace_cell do to the kernel's registry and
# tell a notebook as cells.ts applies the comm), a person edits and deletes cells between runs, and every claim the
# undo and the undone record make about a cell is checked against the notebook after the undo.

from examples import examples  # noqa: E402
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nbagent.ipython.agent_cells import Registry  # noqa: E402
from nbagent.tools.base import Tool  # noqa: E402
from nbagent.ui.viewstate import run_view  # noqa: E402
from nbagent.undo.cells import first_line, payloads  # noqa: E402
from nbagent.undo.files import undo_history  # noqa: E402


class Notebook:
    """The notebook a front end shows (cell id -> source), the kernel's registry of the agent's cells, and the
    execution count, as a kernel and JupyterLab keep them."""

    def __init__(self) -> None:
        self.cells: dict[str, str] = {}
        self.registry = Registry()
        self.count = 0
        self.next = 0
        self.deleted: set[str] = set()

    def tools(self) -> list[Tool]:
        def run_cell(code: str) -> dict[str, Any]:
            """Write a new cell and run it."""
            self.count += 1
            cell_id = f"cell{self.next}"
            self.next += 1
            source = f"# nbagent: run by run R\n{code}\n"
            self.cells[cell_id] = source
            result = {"ran": True, "cell_id": cell_id, "source": source, "execution_count": self.count,
                      "metadata": {"nbagent": {"run_id": "R"}}}
            self.registry.wrote(result)
            return result

        def replace_cell(cell: str, code: str) -> dict[str, Any]:
            """Replace a cell the agent wrote and run it."""
            held = self.registry.cells[cell]
            self.count += 1
            source = f"# nbagent: run by run R\n{code}\n"
            if cell in self.cells:  # (a cell the person deleted is skipped by the front end)
                self.cells[cell] = source
            result = {"ran": True, "cell_id": cell, "source": source, "execution_count": self.count, "metadata": {},
                      "replaced": True, "old_source": held.source, "old_metadata": held.metadata}
            self.registry.wrote(result, tool="replace_cell")
            return result

        return [Tool(run_cell), Tool(replace_cell)]

    def person_edits(self, cell_id: str) -> None:
        self.count += 1
        self.cells[cell_id] = f"mine = {self.count}\n"
        self.registry.before_cell(type("Info", (), {"cell_id": cell_id, "raw_cell": self.cells[cell_id]})(),
                                  self.count)

    def apply(self, payload: dict[str, Any]) -> None:
        """What labextension/src/cells.ts does with an undo's comm message (a cell not there is skipped)."""
        if payload["action"] == "remove":
            for cid in payload["cell_ids"]:
                self.cells.pop(cid, None)
        elif payload["action"] == "restore" and payload["cell_id"] in self.cells:
            self.cells[payload["cell_id"]] = payload["source"]


SEEN: list[tuple[str, ...]] = []  # what the examples undid (looked at by hand: every action is reached)
ops = st.lists(st.tuples(st.sampled_from(["add", "add", "replace", "replace", "edit", "delete", "run", "run"]),
                         st.integers(0, 9)), min_size=3, max_size=14)


@pytest.mark.slow
@pytest.mark.slow
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=ops, which=st.integers(0, 9))
@example(plan=[("add", 0), ("run", 0), ("replace", 0), ("add", 1)], which=0)  # restored, and removed
@example(plan=[("add", 0), ("add", 1), ("run", 0), ("replace", 0), ("edit", 1)], which=1)  # removed, and kept
@example(plan=[("add", 0), ("run", 0), ("edit", 0)], which=0)  # all the person's: nothing to undo
@example(plan=[("add", 0), ("run", 0), ("replace", 0), ("add", 1), ("run", 0), ("delete", 0)], which=0)  # gone
def test_every_claim_an_undo_makes_about_a_cell_holds_in_the_notebook(tmp_path_factory: Any, plan: Any,
                                                                      which: int) -> None:
    tmp = tmp_path_factory.mktemp("cells")
    nb = Notebook()
    store = store_of(tmp)
    runs: list[str] = []
    pending: list[Any] = []

    def flush() -> None:
        if not pending:
            return
        a = Agent(script=turns(*[[c] for c in pending], "done"), tools=nb.tools(), store=store, autonomy="L3",
                  decider=PolicyDecider("all"), retry_base=0.001, retry_cap=0.01)
        result = asyncio.run(a.run("cells"))
        assert result.status == RunStatus.COMPLETED, result
        runs.append(result.run_id)
        pending.clear()

    n_ids = 0
    for op, k in plan:
        live = [c for c in nb.registry.cells if not nb.registry.cells[c].edited and c in nb.cells
                and c not in nb.deleted]
        if op == "add":
            pending.append(call("run_cell", code=f"x{n_ids} = {k}"))
            n_ids += 1
        elif op == "replace" and live:
            pending.append(call("replace_cell", cell=live[k % len(live)], code=f"y = {k}"))
        elif op in ("edit", "delete"):
            flush()
            mine = [c for c in nb.cells if c in nb.registry.cells]
            if mine:
                cid = mine[k % len(mine)]
                if op == "edit":
                    nb.person_edits(cid)
                else:
                    del nb.cells[cid]
                    nb.deleted.add(cid)
        elif op == "run":
            flush()
    flush()
    if not runs:
        return
    target = runs[-1 - which % len(runs)]
    kept = {c for c, held in nb.registry.cells.items() if held.edited}
    gone = set(nb.registry.cells) - set(nb.cells)  # what the page says: the agent's cells it no longer holds
    try:
        report = undo(store, target, to=True, folder=tmp, kept=kept, gone=gone)
    except UndoError as exc:  # every cell is the person's or deleted: nothing to undo, and it says so per cell
        assert "nothing to undo: " in str(exc) and ("kept: you edited it since; it is yours" in str(exc)
                                                    or "deleted since" in str(exc)), exc
        return
    assert report.ok
    for p in payloads(report.cells):
        nb.apply(p)
    # what the undo recorded for each cell, and what its record then says, hold in the notebook
    (did,) = [h for h in undo_history(store, target) if h["run_id"] == report.undo_run_id]
    recorded = {c.cell_id: c for c in report.cells}
    assert did["files"] == 0 and len(did["cells"]) == len(recorded)
    for c in report.cells:
        if c.acted == "remove":
            assert c.cell_id not in nb.cells, c
        elif c.acted == "keep":
            assert c.cell_id in kept and nb.cells[c.cell_id].startswith("mine = "), c
        elif c.acted == "gone":
            assert c.cell_id in nb.deleted and c.cell_id not in nb.cells, c
        else:  # restored: the code from before
            assert c.acted == "restore" and nb.cells[c.cell_id] == c.source, c
            assert first_line(c.source) == first_line(nb.cells[c.cell_id])
    view = run_view(store, target)
    note = view["words"]["undo_note"]
    assert "file" not in note.split(" (")[0], note  # no file was changed: none is claimed
    said = note.split(": ", 1)[1].split(" (")[0].split("; ")  # a clause per action, and per kept cell
    for c in report.cells:
        clause = next(x for x in said if c.name in x)
        assert clause.endswith({"remove": " removed", "restore": "code from before",
                                "keep": "kept: you edited it since",
                                "gone": "was deleted since: nothing to undo"}[c.acted]) or (
            c.acted == "keep" and clause == f"{c.name} kept: you edited it since") or (
            c.acted == "remove" and clause.startswith(("cell ", "cells ")) and " removed" in clause), (c, note)
    SEEN.append(tuple(sorted(c.acted for c in report.cells)))
    fx = run_view(store, report.undo_run_id)["effects"]
    assert sorted((x["cell_id"], x["verb"]) for x in fx["cells"]) == sorted(
        (c.cell_id, {"remove": "removed", "restore": "restored", "keep": "kept", "gone": "gone"}[c.acted])
        for c in report.cells)


def test_a_run_that_only_wrote_cells_says_so_in_every_form_and_its_undo_panel_speaks_of_cells(tmp_path: Path) -> None:
    """Its Effects name each cell as the person sees it, its record offers the undo, the Undo panel counts cells (not
    "it changed 1 file", "Each file goes back"), a kept cell is no change, and undoing the undo is said not to bring
    cells back. With NBAGENT_WRITE_FIXTURES=1 the views are written for labextension/test/undocells.test.ts."""
    import json
    import os

    from nbagent.ui.record import render_html, render_markdown, render_text, undo_hint
    from nbagent.ui.undo_record import undo_bundle
    from nbagent.ui.undo_view import undo_offer, undo_result

    nb = Notebook()
    store = store_of(tmp_path)
    a = Agent(script=turns([call("run_cell", code="a = 1\nprint(a)")], [call("run_cell", code="b = 2")], "done"),
              tools=nb.tools(), store=store, autonomy="L3", decider=PolicyDecider("all"), retry_base=0.001,
              retry_cap=0.01)
    run = asyncio.run(a.run("cells")).run_id
    view = run_view(store, run)
    assert [(c["verb"], c["name"]) for c in view["effects"]["cells"]] == [("added", "[1] a = 1"),
                                                                           ("added", "[2] b = 2")]
    assert "effects: added [1] a = 1" in render_text(view) and "- effects: added \\[2\\] b = 2" in render_markdown(view)
    assert '<span class="nbr-verb nbr-ok">added</span> <code>[1] a = 1</code>' in render_html(view)
    assert "file by file" not in render_text(view)
    assert undo_hint(view) == f"%agent undo {run} undoes this run's changes (2 cells)"
    nb.person_edits("cell1")
    offer = undo_offer(store, run, folder=tmp_path, kept={"cell1"})
    assert offer["summary"] == "it changed 2 cells" and offer["button"] == "Undo 1 change"
    assert offer["question"] == ("Undo 1 change? Each cell of the agent's is removed or gets its old code back; a cell "
                                 "you edited since stays as it is: it is yours:")
    assert [(c["path"], c["action"]) for c in offer["changes"]] == [
        ("[2] b = 2", "kept: you edited it since; it is yours"), ("[1] a = 1", "removed (the agent added it)")]
    report = undo(store, run, folder=tmp_path, kept={"cell1"})
    result = undo_result(report)
    assert result["said"] == "2 cells: 1 removed, 1 kept as yours (you edited it since)"
    assert result["hint"] == (f"The undo is a recorded run: %agent undo {report.undo_run_id} undoes it, but the cells "
                              "do not come back (ask the agent to run them again).")
    saved = undo_bundle(offer, result)["text/plain"]
    assert (f"✓ undone: 2 cells: 1 removed, 1 kept as yours (you edited it since) (undo run {report.undo_run_id})"
            in saved)
    assert "[2] b = 2 — kept: you edited it since; it is yours" in saved and "file" not in saved.split("\n")[0]
    undone = run_view(store, run)
    note = (f"undone by run {report.undo_run_id}: cell [1] a = 1 removed; [2] b = 2 kept: you edited it since; it is "
            f"yours (undoing run {report.undo_run_id} does not bring cells back)")
    assert undone["words"]["undo_note"] == note and f"↶ {note}" in render_text(undone)
    assert f"Effects — undone since by undo run {report.undo_run_id}" in render_html(undone)
    assert undo_hint(undone) == ""
    undoer = run_view(store, report.undo_run_id)
    assert [(c["verb"], c["name"]) for c in undoer["effects"]["cells"]] == [("kept", "[2] b = 2"),
                                                                             ("removed", "[1] a = 1")]
    if os.environ.get("NBAGENT_WRITE_FIXTURES") == "1":
        out = Path(__file__).resolve().parents[1] / "labextension" / "test" / "undocells" / "views.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"run": view, "undone": undone, "undo_run": undoer, "offer": offer,
                                   "result": result}, indent=1, ensure_ascii=False) + "\n")
