"""Which records may offer Undo… is the kernel's answer from this notebook's log (issue 45: the button was drawn for
any run id in a saved record, and then did nothing). Through the comm `nbagent.undo` as the lab extension uses it,
in a real kernel; the browser half is tests/test_browser_undo_offer.py."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kernel_harness import RecordingKernel, script

from nbagent.store import Store


def undo_comm(k: RecordingKernel) -> str:
    """The comm `%load_ext nbagent` opened to the front end."""
    found = [m["content"]["comm_id"] for msgs in k.by_parent.values() for m in msgs
             if m["msg_type"] == "comm_open" and m["content"].get("target_name") == "nbagent.undo"]
    assert len(found) == 1, found
    return str(found[0])


def ask(k: RecordingKernel, comm_id: str, run_ids: list[Any], n: int) -> dict[str, Any]:
    msg = k.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"id": n, "ask": run_ids}})
    k.kc.shell_channel.send(msg)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        k.pump(0.2)
        for m in k.by_parent.get(msg["header"]["msg_id"], []):
            if m["msg_type"] == "comm_msg" and m["content"]["data"].get("id") == n:
                return dict(m["content"]["data"]["offers"])
    raise TimeoutError("the kernel did not answer the ask")


def test_the_kernel_offers_undo_only_for_runs_this_log_can_undo(tmp_path: Path) -> None:
    script(tmp_path / "write.json", {"tool_calls": [{"name": "create_file",
                                                     "arguments": {"path": "a.md", "content": "a\n"}}]},
           {"content": "wrote a.md"})
    script(tmp_path / "read.json", {"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"content": "listed"})
    script(tmp_path / "cell.json", {"tool_calls": [{"name": "run_cell", "arguments": {"code": "x = 1"}}]},
           {"content": "ran x = 1"})
    k = RecordingKernel(tmp_path)
    try:
        assert k.run("%load_ext nbagent").ok
        comm = undo_comm(k)
        # no log yet: nothing to undo, and asking makes none
        (offer,) = ask(k, comm, ["01ABCDEFGH"], 1).values()
        assert offer == {"undo": False, "why": "not in this notebook's log: test.ipynb has none (test.nbagent); "
                                               "nothing here to undo"}
        assert not (tmp_path / "test.nbagent").exists()
        runs = {}
        for name, source in (("write", "--approve all --script write.json\nwrite a.md"),
                             ("read", "--script read.json\nlist"), ("cell", "--autonomy L3 --script cell.json\nx")):
            cell = k.run(f"%%agent --new {source}", cell_id=name)
            assert cell.ok, cell.stderr
            runs[name] = cell.records[-1]["run_id"]
        offers = ask(k, comm, [*runs.values(), "01NOTINTHISLOG", "../evil", 7], 2)
        assert set(offers) == {*runs.values(), "01NOTINTHISLOG"}  # only run ids are looked up
        write, read, cell = (offers[runs[n]] for n in ("write", "read", "cell"))
        assert write["undo"] is True
        assert write["line"] == f"%agent undo {runs['write']} undoes this run's changes (1 file)"
        assert cell["undo"] is True and cell["line"].endswith("(1 cell)")  # a run that only ran a cell: undo acts
        assert read == {"undo": False, "why": f"run {runs['read']}: no file changes to undo, nor cells"}
        assert offers["01NOTINTHISLOG"]["undo"] is False and "not in this notebook's log" in \
            offers["01NOTINTHISLOG"]["why"]
        # undone since (here by the command line's undo, which no record of this kernel saw): no more Undo…
        undone = subprocess.run([str(Path(sys.executable).with_name("nbagent")), "undo", runs["write"]], cwd=tmp_path,
                                capture_output=True, text=True, timeout=120, check=False)
        assert undone.returncode == 0, undone.stdout + undone.stderr
        assert not (tmp_path / "a.md").exists()
        again = ask(k, comm, [runs["write"]], 3)[runs["write"]]
        assert again["undo"] is False and again["why"].startswith("already undone by run ")
        # a file changed since: undo can still act (it shows the conflict and refuses), so Undo… stays
        assert k.run("%%agent --new --approve all --script write.json\nwrite a.md", cell_id="write2").ok
        rewrite = Store(tmp_path / "test.nbagent", readonly=True).list_runs()[-1].id
        (tmp_path / "a.md").write_text("edited\n")
        changed = ask(k, comm, [rewrite], 4)[rewrite]
        assert changed["undo"] is True and changed["conflicts"] == 1 and "changed since the run" in changed["title"]
    finally:
        k.close()


def test_a_cell_the_person_deleted_is_said_deleted_by_the_undo_not_restored_nor_removed(tmp_path: Path) -> None:
    """Issue 46: the kernel is told of no deletion, so an undo claimed it restored the code of a cell the person had
    deleted (the page skipped it: nothing came back). The page now says which cells its notebook holds, on the comm
    nbagent.undo.files (as labextension/src/undo.ts sends it): the offer, the panel, the log and the record say
    "deleted"."""
    script(tmp_path / "cells.json", {"tool_calls": [{"name": "run_cell", "arguments": {"code": "a = 1"}}]},
           {"tool_calls": [{"name": "run_cell", "arguments": {"code": "b = 2"}}]}, {"content": "set a and b"})
    k = RecordingKernel(tmp_path)
    try:
        assert k.run("%load_ext nbagent", cell_id="setup").ok
        comm = undo_comm(k)
        cell = k.run("%%agent --new --autonomy L3 --script cells.json\nset", cell_id="agent")
        assert cell.ok, cell.stderr
        run = cell.records[-1]["run_id"]
        store = Store(tmp_path / "test.nbagent", readonly=True)
        a, b = (e.payload.result for e in store.run_events(run)
                if e.type == "tool_call_completed" and e.payload.tool == "run_cell")
        assert ask(k, comm, [run], 1)[run]["line"].endswith("(2 cells)")  # the page has said nothing yet
        # the person deletes b's cell: the page says which cells the notebook holds now
        k.kc.shell_channel.send(k.kc.session.msg("comm_msg", {"comm_id": comm, "data": {
            "cells": ["setup", "agent", a["cell_id"], "undo"]}}))
        assert ask(k, comm, [run], 2)[run]["line"].endswith("(1 cell)")
        undo_cell = k.run(f"%agent undo {run}", cell_id="undo")
        assert undo_cell.ok, undo_cell.stderr
        panel = k.undo_panel()
        offer = k.widgets[panel]["offer"]
        gone = f"[{b['execution_count']}] b = 2"
        assert [(c["path"], c["action"]) for c in offer["changes"]] == [
            (gone, "not in the notebook any more (deleted since): nothing to undo"),
            (f"[{a['execution_count']}] a = 1", "removed (the agent added it)")]
        assert offer["button"] == "Undo 1 change" and "a cell you deleted stays deleted" in offer["question"]
        k.custom(panel, {"event": "undo"})
        deadline = time.monotonic() + 30
        while not k.widgets[panel].get("result") and time.monotonic() < deadline:
            k.pump(0.2)
        assert k.widgets[panel]["result"]["said"] == "2 cells: 1 removed, 1 gone (deleted since)"
        # nothing was sent for the deleted cell; the log says so; the record claims only what happened
        assert {"action": "remove", "cell_ids": [a["cell_id"]]} in k.comms()
        assert not [c for c in k.comms() if c.get("action") == "restore" or b["cell_id"] in (c.get("cell_ids") or [])]
        store = Store(tmp_path / "test.nbagent", readonly=True)
        (uid,) = [r for r in store.run_ids() if r != run]
        acted = {e.payload.result["cell_id"]: e.payload.result["action"] for e in store.run_events(uid)
                 if e.type == "tool_call_completed" and e.payload.tool == "restore_cell"}
        assert acted == {a["cell_id"]: "remove", b["cell_id"]: "gone"}
        from nbagent.ui.viewstate import run_view

        note = run_view(store, run)["words"]["undo_note"]
        assert f"{gone} was deleted since: nothing to undo" in note and "restored" not in note, note
    finally:
        k.close()
