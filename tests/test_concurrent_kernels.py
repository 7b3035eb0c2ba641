"""Two kernels on one notebook: a run in progress is never superseded by another process.

Found from outside: two `nbagent run` of the same notebook at once; the second forked the cell and marked the
first run `superseded` while it was still running, the first stopped after one model call, and both processes
exited 0. Now the process driving a run holds its lease (a file lock taken before the run is visible in the
log); a fork supersedes only runs no live process holds, so two kernels running the same cell at once
complete side by side, as siblings; and each `nbagent run` reports only the runs its own kernel made.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from agents import agent, call, turns
from test_runner import notebook, script

from nbagent.gate.deciders import PauseDecider
from nbagent.runtime import RunStateError
from nbagent.store import Store

ROUNDS = 20


@pytest.mark.kernel
def test_two_nbagent_runs_of_one_notebook_at_once(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("north,10\n")
    script(tmp_path, "read.json", {"tool_calls": [{"name": "read_file", "arguments": {"path": "data.txt"}}]},
           {"content": "North sold 10."})
    path = notebook(tmp_path, ["%load_ext nbagent", "%%agent --script read.json\nhow much did north sell?"])
    exe = str(Path(sys.executable).with_name("nbagent"))
    reported: list[str] = []
    for i in range(ROUNDS):
        procs = [subprocess.Popen([exe, "run", str(path), "--approve", "none", "-o", f"out{i}-{k}.ipynb"],
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for k in range(2)]
        for p in procs:
            out, err = p.communicate(timeout=300)
            lines = [line for line in out.splitlines() if line.startswith("run ")]
            assert p.returncode == 0, out + err
            assert len(lines) == 1 and "North sold 10." in lines[0], out  # its own run, and only that
            reported.append(lines[0].split()[1])
    assert len(set(reported)) == 2 * ROUNDS  # no two processes claimed the same run

    store = Store(tmp_path / "analysis.nbagent", readonly=True)
    order = {e.id: i for i, e in enumerate(store.query_events())}
    for run_id in store.run_ids():
        events = store.run_events(run_id)
        types = [e.type for e in events]
        assert "answer_ready" in types and "completed" in types, (run_id, types)  # every run did its work
        ended = next(order[e.id] for e in events if e.type == "completed")
        for e in events:
            if e.type == "run_superseded":  # only ever after the run had ended
                assert order[e.id] > ended, (run_id, types)


def test_a_run_driven_elsewhere_cannot_be_resumed_here(tmp_path: Path) -> None:
    a = agent(tmp_path, turns([call("delete_file", path="x")], "done"), decider=PauseDecider())
    first = asyncio.run(a.run("go"))
    other = Store(tmp_path / "nb.ipynb")  # another driver (a second kernel) holds the run's lease
    lease = other.lease(first.run_id)
    lease.acquire()
    try:
        assert a.store.in_progress(first.run_id)
        with pytest.raises(RunStateError, match="being run by another process"):
            asyncio.run(a.resume(first.run_id))
        assert [e.type for e in a.store.run_events(first.run_id)][-1] == "waiting_for_approval"  # nothing written
    finally:
        other.release_lease(first.run_id, lease)
    assert not a.store.in_progress(first.run_id)


def test_a_fork_supersedes_only_runs_nobody_is_running(tmp_path: Path) -> None:
    a = agent(tmp_path, turns("one", "two", "three"), decider=PauseDecider())
    first = asyncio.run(a.run("go", cell_id="c1"))
    other = Store(tmp_path / "nb.ipynb")
    lease = other.lease(first.run_id)
    lease.acquire()
    try:
        second = asyncio.run(a.run("go", cell_id="c1", fork_of=first.run_id))
    finally:
        other.release_lease(first.run_id, lease)
    assert a.store.run_state(first.run_id).status.value == "completed"  # in progress elsewhere: left alone
    third = asyncio.run(a.run("go", cell_id="c1", fork_of=second.run_id))
    assert a.store.run_state(second.run_id).status.value == "superseded"  # nobody runs it: forked away
    assert json.dumps(third.status.value) == '"completed"'
