"""An `%%agent` cell answers before its run's start and end are made durable (store/commits.py: `HELD`): the one
commit (the log's fsync, the runs row, the anchor) runs in the kernel just after the cell's reply, not while the
model call is in flight (on two cores that slowed the call) nor before the reply. What must hold, in a real
kernel: every event is in the log when the cell ends; the commit comes after the cell's own work, before anything
else runs; the next cell finds the run's row; a commit that fails says so and is made by the next cell."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kernel_harness import Kernel, answer, script

from nbagent.store import Store, store_path_for
from nbagent.store.verify import verify_store

pytestmark = pytest.mark.kernel

SPY = '''
import time as _time
from nbagent.store.store import Store as _S
_seen, _when = [], []
_commit = _S.commit
def _counted(self, _c=_commit):
    if self.pending():
        _seen.append("commit")
        _when.append(_time.time())
    return _c(self)
_S.commit = _counted
get_ipython().events.register("post_run_cell", lambda *a: _seen.append("post_run_cell"))
'''


def rows(folder: Path) -> dict:
    tables = store_path_for(folder / "test.ipynb") / "tables.json"
    return json.loads(tables.read_text()).get("runs", {}) if tables.exists() else {}


def test_the_cell_answers_first_and_its_run_is_committed_right_after(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", answer("hello"))
    assert kernel.run(SPY).ok
    cell = kernel.run("%%agent --script s.json\nsay hello", cell_id="c1")
    assert cell.ok
    store = Store(kernel.folder / "test.ipynb", readonly=True)
    (run_id,) = store.run_ids()
    assert [e.type for e in store.run_events(run_id)][-1] == "completed"  # in the log when the cell ended
    seen, when = kernel.run("print(_seen, _when)").stdout.split("] [")
    # the spy cell's own hook, the agent cell's work (to its post_run_cell), then its one commit
    assert seen == "['post_run_cell', 'post_run_cell', 'commit'"
    replied = cell.reply["header"]["date"]  # when the kernel made the reply (jupyter_client: an aware datetime)
    assert float(when.rstrip("]\n")) >= replied.timestamp()  # the commit came after the reply
    assert rows(kernel.folder)[run_id]["status"] == "completed"
    assert verify_store(Store(kernel.folder / "test.ipynb", readonly=True)).ok


def test_a_commit_that_fails_after_the_reply_says_so_and_the_next_cell_makes_it(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", answer("hello"))
    failing = '''
from nbagent.store.store import Store as _S
_real = _S._checkpoint
_fail = [True]
def _checkpoint(self, run_id, _r=_real):
    if _fail[0]:
        _fail[0] = False
        raise OSError(28, "No space left on device")
    return _r(self, run_id)
_S._checkpoint = _checkpoint
'''
    assert kernel.run(failing).ok
    first = kernel.run("%%agent --script s.json\nsay hello", cell_id="c1")
    assert first.ok
    deadline = time.monotonic() + 10
    while "could not be made durable" not in first.stderr and time.monotonic() < deadline:
        kernel.pump(0.1)
    assert "nbagent: the run's end is in the log but could not be made durable yet" in first.stderr
    assert "No space left on device" in first.stderr
    (run_id,) = Store(kernel.folder / "test.ipynb", readonly=True).run_ids()
    assert run_id not in rows(kernel.folder) or rows(kernel.folder)[run_id]["status"] != "completed"
    second = kernel.run("%%agent --script s.json\nsay hello again", cell_id="c2")
    assert second.ok
    store = Store(kernel.folder / "test.ipynb", readonly=True)
    assert all(rows(kernel.folder)[r]["status"] == "completed" for r in store.run_ids())
    assert verify_store(store).ok
