"""Several processes on one store: nothing lost, nothing corrupt; and a writer killed at random moments."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import new_run

from nbagent.store import Store
from nbagent.store.verify import verify_store

WRITER = Path(__file__).with_name("store_writer.py")


def spawn(store: Path, runs: list[str], n: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(store), ",".join(runs), str(n), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def acked(stdout: str) -> list[str]:
    """Ids on complete lines only: a line cut by SIGKILL was never fully acknowledged."""
    lines = stdout.split("\n")[:-1]
    return [line for line in lines if line not in ("ready", "done")]


def test_two_processes_append_5000_each(tmp_path: Path) -> None:
    store = Store(tmp_path / "nb.ipynb")
    own_a, own_b, shared = new_run(store, "a"), new_run(store, "b"), new_run(store, "shared")
    go = tmp_path / "go"
    procs = [spawn(store.path, [own_a, shared], 5000, "--go", str(go)),
             spawn(store.path, [own_b, shared], 5000, "--go", str(go))]
    for p in procs:  # both are up before either starts writing
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    ids = [i for out, _ in outputs for i in acked(out)]
    assert len(ids) == 10_000

    fresh = Store(store.path, readonly=True)
    assert {e.id for e in fresh.query_events(types="tool_call_completed")} == set(ids)
    assert len(fresh.run_events(own_a)) == len(fresh.run_events(own_b)) == 2501
    assert [e.seq for e in fresh.run_events(shared)] == list(range(1, 5002))  # gap-free though two wrote it
    report = verify_store(fresh)
    assert report.ok, report.problems[:3]
    assert report.events == 10_000 + 3 + 1  # + three run_started + session_created


@pytest.mark.slow
def test_writer_sigkilled_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(20261122)  # deterministic kill schedule
    store = Store(tmp_path / "nb.ipynb")
    run = new_run(store)
    store.close()
    all_acked: list[str] = []
    killed_mid_run = 0
    for _ in range(50):
        proc = spawn(store.path, [run], 100_000, "--new-runs-every", "40")
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.12))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        killed_mid_run += "done" not in out
        all_acked += acked(out)

        reopened = Store(store.path)  # must always open, writable, torn tail or not
        present = {e.id for e in reopened.query_events()} | set(reopened.run_ids())
        lost = [i for i in all_acked if i not in present]
        assert not lost, f"{len(lost)} acknowledged events lost, e.g. {lost[:3]}"
        report = verify_store(reopened)
        assert report.ok, report.problems[:3]
        reopened.close()
    assert killed_mid_run == 50
    assert len(all_acked) > 1000  # the kills landed while writing, not before the first append
    assert not list(store.path.glob(".tables-*.tmp"))  # leftovers of killed table writes were cleaned up
