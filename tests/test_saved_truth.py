"""Issue 24: the saved notebook says what happened. A denied plan is not reported as done, every record shows the
run's effects beside its answer, an undone run says so, the undo preview shows conflicts before any button, the
panel's outcome is saved as HTML and text, and no absolute path of the folder is saved."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PauseDecider, PolicyDecider, Verdict
from nbagent.runtime import Agent
from nbagent.store import RunNotFound, Store
from nbagent.store.blobs import BlobStore
from nbagent.tools.files import FileTools
from nbagent.ui.record import bundle, render_html, render_markdown, render_text, undo_hint
from nbagent.ui.undo_view import UndoView, undo_offer
from nbagent.ui.viewstate import MIME, run_view
from nbagent.undo.files import UndoError, undo
from tests.agents import call, turns


def agent(folder: Path, *items: Any, autonomy: str = "L3", decider: Any = None) -> Agent:
    store = Store(folder / "nb.ipynb")
    tools = FileTools(folder, BlobStore.of_store(store.path)).tools()
    return Agent(script=turns(*items), tools=tools, store=store, autonomy=autonomy,
                 decider=decider or PolicyDecider("all"), retry_base=0.001, retry_cap=0.01)


def run(folder: Path, *items: Any, **kwargs: Any) -> str:
    return asyncio.run(agent(folder, *items, **kwargs).run("change files")).run_id


def view(folder: Path, run_id: str) -> dict[str, Any]:
    return run_view(Store(folder / "nb.ipynb"), run_id)


def shown(v: dict[str, Any]) -> str:
    """Everything a saved record carries, as one string: its text, its HTML, its JSON."""
    b = bundle(v)
    return str(b["text/plain"]) + str(b["text/html"]) + json.dumps(b[MIME])


# ---------------------------------------------------------------------------------------------- a denied write


def test_a_plan_denied_by_the_policy_ends_with_errors_and_the_record_contradicts_the_answer(tmp_path: Path) -> None:
    a = agent(tmp_path, [call("create_file", path="report.md", content="# Top\n")], "Wrote **report.md**.",
              autonomy="L1", decider=PolicyDecider("none"))
    result = asyncio.run(a.run("write the report"))
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS and not (tmp_path / "report.md").exists()
    v = view(tmp_path, result.run_id)
    assert v["effects"]["created"] == [] and v["effects"]["refused"] == [
        {"tool": "create_file", "target": "report.md", "by": "policy:none",
         "why": "denied by the headless policy (approve=none)", "kind": "plan"}]
    text, page = render_text(v), render_html(v)
    assert "effects: no file created, changed or deleted" in text
    assert "not done: create_file report.md: denied by the headless policy (approve=none)" in text
    assert text.index("not done:") < text.index("answer:")  # beside the answer, read before it
    assert "⚠ 1 tool call was denied" in text and "✓ completed" not in text
    assert '<h4 class="nbr-section">Effects</h4>' in page and "⊘ not done" in page
    assert page.index("Effects</h4>") < page.index("Answer</h4>")
    assert "### Effects" in render_markdown(v) and "not done: create\\_file report.md" in render_markdown(v)
    assert bundle(v)[MIME]["effects"]["refused"][0]["target"] == "report.md"


def test_a_plan_a_person_denied_is_an_error_of_the_run_too(tmp_path: Path) -> None:
    a = agent(tmp_path, [call("delete_file", path="keep.txt")], "Deleted keep.txt.", autonomy="L1",
              decider=PauseDecider())
    (tmp_path / "keep.txt").write_text("mine\n")
    waiting = asyncio.run(a.run("clean up"))
    assert waiting.status == RunStatus.WAITING
    done = asyncio.run(a.resume(waiting.run_id, verdict=Verdict.deny("not now", by="user")))
    assert done.status == RunStatus.COMPLETED_WITH_ERRORS and (tmp_path / "keep.txt").exists()
    text = render_text(view(tmp_path, done.run_id))
    assert "not done: delete_file keep.txt: plan denied by user: not now" in text
    assert "error: delete_file keep.txt: denied by user: not now" in text


def test_effects_list_each_file_created_changed_deleted_and_each_refusal(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("old\n")
    (tmp_path / "old.csv").write_text("a\n")
    rid = run(tmp_path, [call("create_file", path="new.md", content="n\n"),
                         call("write_file", path="notes.md", content="new\n"),
                         call("delete_file", path="old.csv"),
                         call("create_file", path="../outside.md", content="x\n")], "Done: four files.")
    v = view(tmp_path, rid)
    fx = v["effects"]
    assert (fx["created"], fx["changed"], fx["deleted"]) == (["new.md"], ["notes.md"], ["old.csv"])
    assert [(r["tool"], r["kind"]) for r in fx["refused"]] == [("create_file", "rule")]
    assert v["status"] == "completed_with_errors"
    text, page = render_text(v), render_html(v)
    assert "effects: created new.md · changed notes.md · deleted old.csv" in text
    assert "not done: create_file" in text and "denied (rule " in text
    for verb, path in (("created", "new.md"), ("changed", "notes.md"), ("deleted", "old.csv")):
        assert f'{verb}</span> <code>{path}</code>' in page


def test_a_sub_agents_changes_are_the_runs_and_a_file_made_then_removed_is_no_change(tmp_path: Path) -> None:
    rid = run(tmp_path, [call("spawn_agent", prompt="write", tools=["create_file"])],
              [call("create_file", path="child.md", content="c\n")], "child done",
              [call("create_file", path="tmp.md", content="t\n")], [call("delete_file", path="tmp.md")], "done")
    fx = view(tmp_path, rid)["effects"]
    assert fx["created"] == ["child.md"] and fx["deleted"] == [] and fx["changed"] == []


def test_a_read_only_run_says_it_changed_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("x\n")
    v = view(tmp_path, run(tmp_path, [call("read_file", path="a.csv")], "I wrote summary.md."))
    assert v["status"] == "completed" and "effects: no file created, changed or deleted" in render_text(v)
    assert "No file was created, changed or deleted." in render_html(v)


# ---------------------------------------------------------------------------------------------- undone by


def test_an_undone_run_says_undone_by_and_offers_no_undo_until_the_undo_is_undone(tmp_path: Path) -> None:
    rid = run(tmp_path, [call("create_file", path="a.txt", content="a\n"),
                         call("create_file", path="c.txt", content="c\n")], "Created a.txt and c.txt")
    store = Store(tmp_path / "nb.ipynb")
    before = view(tmp_path, rid)
    assert before["undone_by"] is None and undo_hint(before)
    first = undo(store, rid).undo_run_id
    after = view(tmp_path, rid)
    assert after["undone_by"] == first and after["revision"] > before["revision"]  # the newer record wins
    assert undo_hint(after) == "" and f"%agent undo {rid}" not in render_text(after) + render_html(after)
    assert f"↶ undone by run {first}" in render_text(after)
    assert f"effects: created a.txt, c.txt (put back since by undo run {first})" in render_text(after)
    assert f'data-undone-by="{first}"' in render_html(after) and "Undone by run" in render_html(after)
    assert f"undone by run {first}" in render_markdown(after)
    undo_view = view(tmp_path, first)
    assert undo_view["undoes"]["run_id"] == rid and undo_view["effects"]["deleted"] == ["c.txt", "a.txt"]
    assert f"undo of run {rid}" in render_text(undo_view)
    second = undo(store, first).undo_run_id  # the undo undone: the run's files are back, and so is Undo
    back = view(tmp_path, rid)
    assert back["undone_by"] is None and back["revision"] > after["revision"] and undo_hint(back)
    assert f"undone by run {first}, which run {second} undid" in render_text(back)
    assert view(tmp_path, first)["undone_by"] == second


def test_a_failed_or_refused_undo_does_not_mark_the_run(tmp_path: Path) -> None:
    rid = run(tmp_path, [call("create_file", path="a.txt", content="a\n")], "done")
    (tmp_path / "a.txt").write_text("edited\n")
    assert not undo(Store(tmp_path / "nb.ipynb"), rid).ok  # a conflict: nothing recorded
    assert view(tmp_path, rid)["undone_by"] is None


def test_views_and_undo_errors_name_the_log_relative_to_the_notebook(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a kernel's working folder is the notebook's
    rid = run(tmp_path, [call("create_file", path="a.txt", content="a\n")], "done")
    v = view(tmp_path, rid)
    assert v["log_path"] == "nb.nbagent" and str(tmp_path) not in shown(v)
    with pytest.raises(RunNotFound) as refused:
        undo(Store(tmp_path / "nb.ipynb"), "NOSUCHRUN")
    assert str(refused.value) == "nb.nbagent: no such run: 'NOSUCHRUN'; list runs with `nbagent runs nb.nbagent`"


# ---------------------------------------------------------------------------------------------- the preview


def test_the_preview_shows_a_conflict_first_and_offers_no_button(tmp_path: Path) -> None:
    rid = run(tmp_path, [call("create_file", path="summary.md", content="agent\n")], "done")
    (tmp_path / "summary.md").write_text("agent\nmy edit\n")
    offer = undo_offer(Store(tmp_path / "nb.ipynb"), rid)
    assert offer["state"] == "conflicts" and offer["button"] is None
    assert offer["changes"] == [{"path": "summary.md", "action": "removed", "overwrites_edit": False,
                                 "conflict": "changed since the run left it"}]
    assert "+my edit" in offer["conflicts"][0]["diff"] and f"%agent undo {rid} --force" in offer["why_not"]
    calls: list[int] = []
    panel = UndoView(offer, lambda: calls.append(1))
    panel._on_custom(panel, {"event": "undo"}, [])  # no button: a click anyway does nothing
    assert calls == [] and panel.result == {}
    panel.close()
    forced = undo_offer(Store(tmp_path / "nb.ipynb"), rid, force=True)
    assert forced["state"] == "ready" and forced["button"] == "Undo 1 change, overwriting 1 edited file"
    assert forced["changes"][0]["overwrites_edit"] is True


def test_the_preview_of_an_undone_run_says_so_and_undo_refuses_in_one_line(tmp_path: Path) -> None:
    rid = run(tmp_path, [call("create_file", path="a.txt", content="a\n"),
                         call("create_file", path="b.txt", content="b\n")], "done")
    store = Store(tmp_path / "nb.ipynb")
    first = undo(store, rid).undo_run_id
    offer = undo_offer(store, rid)
    assert offer["state"] == "undone" and offer["undone_by"] == first and offer["button"] is None
    assert offer["conflicts"] == [] and f"%agent undo {first}" in offer["why_not"]
    runs = len(store.run_ids())
    with pytest.raises(UndoError, match=f"already undone by run {first}"):
        undo(store, rid)
    assert len(store.run_ids()) == runs
    with pytest.raises(UndoError, match="no file changes to undo"):
        undo(store, rid, to=True)  # the folder is already as before the run
    cli = subprocess.run([str(tool("nbagent")), "undo", rid, "nb.ipynb"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120, check=False)
    assert cli.returncode == 2 and len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    assert f"already undone by run {first}; nothing was changed" in cli.stderr and str(tmp_path) not in cli.stderr


def test_a_ready_preview_says_what_the_button_does(tmp_path: Path) -> None:
    rid = run(tmp_path, [call("create_file", path="a.txt", content="a\n"),
                         call("create_file", path="b.txt", content="b\n")], "done")
    offer = undo_offer(Store(tmp_path / "nb.ipynb"), rid)
    assert offer["state"] == "ready" and offer["button"] == "Undo 2 changes" and offer["why_not"] is None
    assert {c["conflict"] for c in offer["changes"]} == {None}


# ---------------------------------------------------------------------------------------------- the panel's record


class Published:
    """What `update_display` was given, in a process without a kernel (IPython says one is there)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import IPython.display
        from IPython.core.interactiveshell import InteractiveShell

        self.updates: list[tuple[dict[str, Any], str]] = []
        monkeypatch.setattr(InteractiveShell, "initialized", classmethod(lambda cls: True))
        monkeypatch.setattr(IPython.display, "update_display",
                            lambda obj, *, display_id, raw=False: self.updates.append((obj, display_id)))


def test_the_panels_undo_replaces_the_widget_by_its_static_record(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    published = Published(monkeypatch)
    rid = run(tmp_path, [call("create_file", path="a.txt", content="a\n")], "done")
    store = Store(tmp_path / "nb.ipynb")
    done: list[Any] = []
    panel = UndoView(undo_offer(store, rid), lambda: undo(store, rid, folder=tmp_path, by="the Undo button"),
                     display_id="nbagent-undo-test", store=store)
    panel.on_done = done.append
    assert panel.undo() and not (tmp_path / "a.txt").exists()
    (static, display_id), = published.updates
    assert display_id == "nbagent-undo-test" and panel.ended == static and set(static) == {"text/plain", "text/html"}
    uid = panel.result["undo_run_id"]
    assert f"✓ undone: 1 file put back (undo run {uid})" in static["text/plain"]
    assert "a.txt — removed" in static["text/plain"] and f"%agent undo {uid} undoes it" in static["text/plain"]
    assert "<code>a.txt</code> — removed" in static["text/html"] and "<script" not in static["text/html"]
    assert [r.undo_run_id for r in done] == [uid]  # the host refreshes the undone run's records from here
    (record,) = panel.result["records"]  # and the page can, where the kernel cannot reach (shown by an earlier one)
    assert record[MIME]["run_id"] == rid and record[MIME]["undone_by"] == uid
    assert f"↶ undone by run {uid}" in record["text/plain"] and "Undone by run" in record["text/html"]
    panel.close()


def test_a_panel_with_nothing_to_confirm_is_saved_as_its_refusal_once_drawn(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    published = Published(monkeypatch)
    rid = run(tmp_path, [call("create_file", path="summary.md", content="agent\n")], "done")
    (tmp_path / "summary.md").write_text("mine\n")
    panel = UndoView(undo_offer(Store(tmp_path / "nb.ipynb"), rid), lambda: pytest.fail("nothing to confirm"))
    panel._on_custom(panel, {"event": "rendered"}, [])
    (static, display_id), = published.updates
    assert display_id == panel.display_id
    assert "⚠ undo refused: 1 file was changed since the run" in static["text/plain"]
    assert "conflict: summary.md: changed since the run left it" in static["text/plain"]
    assert "+mine" in static["text/plain"] and f"%agent undo {rid} --force" in static["text/html"]
    panel.close()


# ---------------------------------------------------------------------------------------------- nbagent run


def notebook(folder: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    path = folder / "analysis.ipynb"
    nbformat.write(nb, path)
    return path


def script(folder: Path, name: str, *items: Any) -> None:
    (folder / name).write_text(json.dumps(turns(*items)))


def tool(name: str) -> Path:
    return Path(sys.executable).with_name(name)


def nbagent_run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool("nbagent")), "run", str(path), *args], capture_output=True, text=True,
                          cwd=path.parent, timeout=300, check=False)


@pytest.mark.kernel
def test_nbagent_run_of_a_denied_write_fails_and_its_saved_record_says_not_done(tmp_path: Path) -> None:
    script(tmp_path, "write.json", [call("create_file", path="report.md", content="# Top\n")],
           "Wrote **report.md** with the top three regions.")
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script write.json\nWrite report.md"])
    result = nbagent_run(path)  # --approve none, the default
    assert result.returncode == 1 and not (tmp_path / "report.md").exists(), result.stdout + result.stderr
    assert "completed_with_errors" in result.stdout and "create_file report.md: denied" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("FAILED: 1 run(s), 1 completed_with_errors")
    saved = nbformat.read(path, as_version=4)
    (out,) = [o for o in saved.cells[1].outputs if MIME in o.get("data", {})]
    assert "not done: create_file report.md" in out["data"]["text/plain"]
    assert "⊘ not done" in out["data"]["text/html"] and out["data"][MIME]["effects"]["refused"]
    assert nbagent_run(path, "--allow-tool-errors").returncode == 0


@pytest.mark.kernel
def test_a_saved_notebook_converted_to_html_shows_a_denial_an_undo_and_a_conflict(tmp_path: Path) -> None:
    script(tmp_path, "two.json", [call("create_file", path="a.txt", content="a\n"),
                                  call("create_file", path="c.txt", content="c\n")], "Created a.txt and c.txt")
    script(tmp_path, "denied.json", [call("create_file", path="report.md", content="# Top\n")], "Wrote report.md.")
    script(tmp_path, "summary.json", [call("create_file", path="summary.md", content="agent\n")],
           "Wrote summary.md.")
    ids = ("from nbagent.store import Store\n"
           "runs = [r.id for r in Store('analysis.ipynb', readonly=True).list_runs() if r.model != 'nbagent/undo']")
    path = notebook(tmp_path, [
        "%load_ext nbagent",
        "%%agent --script two.json --autonomy L3\nCreate a.txt and c.txt",
        "%%agent --script denied.json --new\nWrite report.md",
        ids + "\nfirst = runs[0]",
        "%agent undo {first}",
        "%%agent --script summary.json --autonomy L3 --new\nWrite summary.md",
        ids + "\nlast = runs[-1]\nopen('summary.md', 'a').write('my edit\\n')",
        "%agent undo {last}",
    ])
    result = nbagent_run(path)
    assert result.returncode == 1 and "a cell failed" in result.stderr, result.stdout + result.stderr
    assert not (tmp_path / "a.txt").exists() and (tmp_path / "summary.md").read_text() == "agent\nmy edit\n"
    saved = path.read_text(encoding="utf-8")
    assert str(tmp_path) not in saved and str(tmp_path.resolve()) not in saved  # no absolute path of the folder
    converted = subprocess.run([str(tool("jupyter")), "nbconvert", "--to", "html", str(path), "--output",
                                "converted.html"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                               check=False)
    assert converted.returncode == 0, converted.stderr
    page = (tmp_path / "converted.html").read_text(encoding="utf-8")
    assert "not done" in page and "create_file report.md: denied by the headless policy" in page  # the denial
    assert "created</span> <code>a.txt</code>" in page  # what the first run did
    assert "2 files put back" in page and "removed a.txt" in page  # the undo
    assert "undo refused: 1 file(s) changed since the run(s)" in page and "conflict: summary.md" in page
    assert "+my edit" in page
    assert str(tmp_path) not in page


@pytest.mark.kernel
def test_the_saved_record_of_an_undone_run_says_undone_by(tmp_path: Path) -> None:
    script(tmp_path, "two.json", [call("create_file", path="a.txt", content="a\n")], "Created a.txt")
    path = notebook(tmp_path, [
        "%load_ext nbagent",
        "%%agent --script two.json --autonomy L3\nCreate a.txt",
        "from nbagent.store import Store\nfirst = Store('analysis.ipynb', readonly=True).list_runs()[0].id",
        "%agent undo {first}",
    ])
    assert nbagent_run(path).returncode == 0
    (out,) = [o for o in nbformat.read(path, as_version=4).cells[1].outputs if MIME in o.get("data", {})]
    assert out["data"][MIME]["undone_by"] and "↶ undone by run" in out["data"]["text/plain"]
    assert "undoes this run's" not in out["data"]["text/plain"]  # no Undo hint (the banner names the undo run)


# ---------------------------------------------------------------------------------------------- in a real kernel


def made_files(k: Any) -> str:
    from kernel_harness import script as kernel_script

    kernel_script(k.folder / "s.json", {"tool_calls": [call("create_file", path="a.txt", content="a\n")]},
                  {"content": "Created a.txt"})
    cell = k.run("%%agent --script s.json --autonomy L3\ncreate a.txt", cell_id="c1")
    assert cell.ok, cell.stderr
    return str(cell.records[0]["run_id"])


@pytest.mark.kernel
def test_a_panel_clicked_in_a_kernel_leaves_its_outcome_as_html_and_text(kernel: Any) -> None:
    rid = made_files(kernel)
    cell = kernel.run("from nbagent.store import Store\nfrom nbagent.undo.files import undo\n"
                      "from nbagent.ui.undo_view import UndoView, undo_offer\n"
                      "store = Store('test.ipynb')\n"
                      f"panel = UndoView(undo_offer(store, {rid!r}), lambda: undo(store, {rid!r}))\n"
                      "panel.show()", cell_id="c2")
    assert cell.ok, cell.stderr
    assert WIDGET in cell.outputs[0]["data"]
    kernel.custom(kernel.undo_panel(), {"event": "undo"})  # what "Undo 1 change" sends

    def static() -> bool:
        kernel.pump(0.2)
        return WIDGET not in cell.outputs[0]["data"]

    import time

    deadline = time.monotonic() + 30
    while not static() and time.monotonic() < deadline:
        pass
    data = cell.outputs[0]["data"]
    assert set(data) == {"text/plain", "text/html"}, data  # what the saved notebook keeps: no widget
    assert "✓ undone: 1 file put back" in data["text/plain"] and "<code>a.txt</code> — removed" in data["text/html"]
    assert not (kernel.folder / "a.txt").exists()


@pytest.mark.kernel
def test_percent_agent_undo_leaves_the_panels_outcome_in_its_cell_and_marks_the_undone_record(kernel: Any) -> None:
    import time

    rid = made_files(kernel)
    cell = kernel.run(f"%agent undo {rid}", cell_id="c2")
    assert cell.ok, cell.stderr
    kernel.custom(kernel.undo_panel(), {"event": "undo"})
    deadline = time.monotonic() + 30
    while WIDGET in cell.outputs[0]["data"] and time.monotonic() < deadline:
        kernel.pump(0.2)
    assert not (kernel.folder / "a.txt").exists()
    assert set(cell.outputs[0]["data"]) == {"text/plain", "text/html"}
    assert "✓ undone: 1 file put back" in cell.outputs[0]["data"]["text/plain"]
    kernel.pump(0.5)
    first = next(c for c in kernel.cells.values() if c.records and c.records[0]["run_id"] == rid)
    record = first.outputs[-1]["data"]
    assert record[MIME]["undone_by"] and "↶ undone by run" in record["text/plain"]  # the run's record, updated
    assert f"%agent undo {rid}" not in record["text/plain"]


WIDGET = "application/vnd.jupyter.widget-view+json"
