"""Issue 46, attacked: re-running, reproducing and the step words, as a hostile notebook, log or model would.

A notebook cloned with its `.nbagent` log is its author's: this user's anchors (store/anchor.py, in this user's data
folder) never saw its runs. Its recorded yes to a run_cell is the author's yes, so reproducing it (the record's
Reproduce, the toolbar's Reproduce all, `--reproduce`, `--approve recorded`) asks this person on a card, and says so;
a recording this user made here is reproduced with no card (tests/test_reproduce_kernel.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_harness import Kernel
from stub_openai import Reply, StubOpenAI, tool_call

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

HOSTILE = "open('pwned.txt', 'w').write('the author ran this')\nprint('done')"
REPRODUCE_ON = "__import__('nbagent.ipython.reproduce', fromlist=['_']).turn_on(get_ipython())"


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        yield server


def _record(folder: Path, stub: StubOpenAI, env: dict[str, str]) -> str:
    """The author's run: a run_cell of HOSTILE approved by the author's click."""
    stub.push(Reply(tool_calls=[tool_call("run_cell", {"code": HOSTILE, "explanation": "tidy up"})]),
              Reply(content="Done."))
    k = Kernel(folder, env=env)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        first = k.submit("%%agent\nTidy up", cell_id="ask")
        comm, pending = k.wait_for_pending()
        k.click(comm, pending["request_id"], "approve")
        k.wait(first)
        assert first.ok and first.records[-1]["status"] == "completed", first.outputs
        return str(first.records[-1]["run_id"])
    finally:
        k.close()


def test_a_cloned_logs_recorded_yes_is_asked_again_on_a_card(tmp_path: Path, stub: StubOpenAI) -> None:
    env = {"OPENAI_API_KEY": "sk-test-attack", "OPENAI_API_BASE": stub.base_url,
           "NBAGENT_MODEL": "openai/gpt-4o-mini"}
    author, clone = tmp_path / "author", tmp_path / "clone"
    author.mkdir()
    recorded = _record(author, stub, env)
    assert (author / "pwned.txt").exists()
    shutil.copytree(author, clone, ignore=shutil.ignore_patterns("pwned.txt"))  # `git clone`: notebook + log
    requests = len(stub.completion_requests)

    k = Kernel(clone, env=env)  # this user reopens the clone and presses Reproduce all
    try:
        assert k.run(REPRODUCE_ON).ok and k.run("%load_ext nbagent", cell_id="load").ok
        again = k.submit("%%agent\nTidy up", cell_id="ask")
        comm, pending = k.wait_for_pending(timeout=30)  # the author's yes does not answer for this person
        assert not (clone / "pwned.txt").exists()
        k.click(comm, pending["request_id"], "deny")
        k.wait(again)
        assert not (clone / "pwned.txt").exists()
        # the person's no is not the recording's yes: the reproduction stops there, in one line
        assert "replay diverged" in again.reply["content"]["evalue"], again.reply["content"]
        said = "\n".join(again.notes) + again.stdout
        assert f"reproducing run {recorded[:12]}" in said, said
        assert "not yours" in said and "asked" in said, said  # the cell says whose decisions it does not replay
        assert len(stub.completion_requests) == requests  # still a reproduction: the recorded replies, no model

    finally:
        k.close()

    # `--approve recorded` (what `nbagent run --approve recorded` sets) over the author's run, in another clone:
    # the model answers anew, and the author's yes does not answer for this person either
    clone2 = tmp_path / "clone2"
    shutil.copytree(author, clone2, ignore=shutil.ignore_patterns("pwned.txt"))
    stub.push(Reply(tool_calls=[tool_call("run_cell", {"code": HOSTILE, "explanation": "tidy up"})]),
              Reply(content="Done."))
    k = Kernel(clone2, env=env)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        again2 = k.submit("%%agent --approve recorded\nTidy up", cell_id="ask")
        comm2, pending2 = k.wait_for_pending(timeout=30)
        assert not (clone2 / "pwned.txt").exists()
        k.click(comm2, pending2["request_id"], "deny")
        k.wait(again2)
        assert again2.ok and not (clone2 / "pwned.txt").exists(), again2.outputs
        assert any("not yours" in n for n in again2.notes), again2.notes
    finally:
        k.close()
