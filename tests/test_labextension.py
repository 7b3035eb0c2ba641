"""The JupyterLab extension (labextension/): its frontend unit tests (vitest) run against run views made by the
real pipeline, and the built extension is what `jupyter labextension list` reports as enabled."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import InOrder, agent, call, turns

from nbagent.gate.deciders import Answer, PauseDecider, Verdict
from nbagent.runtime import Agent
from nbagent.tools.files import file_tools
from nbagent.ui.viewstate import view_state

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "labextension"
FIXTURES = EXT / "test" / "fixtures"
EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _view(a: Agent, run_id: str) -> dict[str, Any]:
    return view_state(a.store.run_state(run_id), a.store.run_events(run_id), log_path=str(a.store.path))


def make_views(folder: Path) -> dict[str, dict[str, Any]]:
    """Run views as the kernel builds them: a finished run with every kind of step, a run waiting for approval,
    and a long one; model and tool text carry markup that must stay text."""
    done = folder / "done"
    done.mkdir()
    (done / "sales.csv").write_text("region,revenue\nNorth,10\nSouth,7\nEast,3\n" + EVIL + ",0\n")
    script = turns(
        {"content": "Let me look at the data first " + EVIL, "tool_calls": [call("read_file", path="sales.csv")]},
        [call("read_file", path=".env")],
        [call("create_file", path="report.md", content="# Report\n\n1. North\n")],
        [call("create_file", path="report.md", content="# Sales report\n\n1. North\n2. South\n3. East\n")],
        [call("ask_human", question="Which currency should the report use?")],
        [call("delete_file", path="sales.csv")],
        "## Top regions\n\n**North** leads.\n\n- North\n- South\n- East\n\n"
        "See [the docs](https://example.com/a?b=1) and [bad](javascript:alert(1)). " + EVIL,
    )
    decider = InOrder(
        [Verdict.refine("list all three regions"), Verdict.approve(), Verdict.deny("keep the raw data")],
        [Answer(text="EUR")],
    )
    a = agent(done, script, tools=file_tools(done), decider=decider)
    full = _view(a, asyncio.run(a.run("Load sales.csv and write report.md " + EVIL, cell_id="cell-1")).run_id)

    wait = folder / "wait"
    wait.mkdir()
    (wait / "notes.md").write_text("# Notes\nold line\n")
    a = agent(wait, turns([call("write_file", path="notes.md", content="# Notes\nnew line\n")]),
              tools=file_tools(wait), decider=PauseDecider())
    waiting = _view(a, asyncio.run(a.run("update the notes")).run_id)

    long_ = folder / "long"
    long_.mkdir()
    for i in range(12):
        (long_ / f"f{i}.txt").write_text(f"line of file {i}\n" * (3 * i + 1))
    a = agent(long_, turns(*[[call("read_file", path=f"f{i}.txt")] for i in range(12)], "Read them all."),
              tools=file_tools(long_))
    long_view = _view(a, asyncio.run(a.run("read every file")).run_id)
    return {"full": full, "waiting": waiting, "long": long_view}


def write_views(folder: Path, views: dict[str, dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, view in views.items():
        (folder / f"{name}.json").write_text(json.dumps(view, indent=1, ensure_ascii=False) + "\n")


def test_committed_fixtures_have_the_current_view_shape(tmp_path: Path) -> None:
    """The unit tests' committed views keep the shape viewstate.py makes (regenerate them with
    `python tests/test_labextension.py` when it changes)."""
    views = make_views(tmp_path)
    for name, view in views.items():
        committed = json.loads((FIXTURES / f"{name}.json").read_text())
        assert set(committed) == set(view), name
        assert {s["kind"] for s in committed["steps"]} == {s["kind"] for s in view["steps"]}, name


def _npm() -> str | None:
    return shutil.which("npm")


@pytest.mark.skipif(not (EXT / "node_modules").is_dir() or _npm() is None,
                    reason="labextension/node_modules is absent (pip install builds it) or npm is missing")
def test_frontend_unit_tests_pass_on_pipeline_views(tmp_path: Path) -> None:
    write_views(tmp_path / "views", make_views(tmp_path))
    env = {**os.environ, "NBAGENT_VIEW_FIXTURES": str(tmp_path / "views"), "NBAGENT_PYTHON": sys.executable,
           "CI": "1", "NO_COLOR": "1"}
    result = subprocess.run([_npm(), "test", "--silent"], cwd=EXT, env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert " passed" in result.stdout and "failed" not in result.stdout.split("Tests")[-1], result.stdout[-2000:]


def test_the_extension_is_installed_and_enabled() -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    result = subprocess.run([str(jupyter), "labextension", "list"], capture_output=True, text=True, timeout=120,
                            check=False, env={**os.environ, "NO_COLOR": "1"})
    out = result.stdout + result.stderr
    line = next((ln for ln in out.splitlines() if "nbagent-labextension" in ln), "")
    assert "enabled" in line and "OK" in line and "(python, nbagent)" in line, out


if __name__ == "__main__":  # regenerate the committed fixtures
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    with tempfile.TemporaryDirectory() as tmp:
        views = json.loads(json.dumps(make_views(Path(tmp))).replace(tmp, "/home/me/project"))
        write_views(FIXTURES, views)
    print(f"wrote {sorted(p.name for p in FIXTURES.glob('*.json'))}")


def test_the_record_says_the_words_the_view_carries(tmp_path: Path) -> None:
    """`view["words"]` (what the live view and the lab extension show, labextension/test/words.test.ts) is what the
    saved record says: one source, nbagent/ui/record_words.py."""
    import html

    from nbagent.ui.record import answerable, render_html, render_text

    views = make_views(tmp_path)
    for name, view in views.items():
        page, text, w = render_html(view), render_text(view), view["words"]
        for key in ("totals", "timeline", "outcome", "pending", "pending_hint", "tree"):
            if w[key] and (key not in ("pending", "pending_hint") or answerable(view)):
                assert html.escape(w[key], quote=True) in page, (name, key)
        assert f"totals: {w['totals']}" in text, name
        for summary in w["plans"].values():
            assert html.escape(summary[:1].upper() + summary[1:], quote=True) in page, name
        if w["undo_hint"]:
            assert f"undo: {w['undo_hint']}" in text, name
    assert any(v["words"]["pending"] for v in views.values()) and any(v["words"]["plans"] for v in views.values())
