"""Attacks on which saved records may offer Undo… (nbagent/ipython/undo_offers.py): a log that came with the
notebook (recorded by someone else, or on another machine, internally sound), a log edited to claim changes, an ask
of 10,000 run ids or of ids that are not strings, and the cost of answering a notebook of many records (asked when
`%load_ext nbagent` runs, on the kernel's main thread).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from kernel_harness import RecordingKernel
from test_undo_offers import ask, undo_comm

from nbagent.gate.deciders import PolicyDecider
from nbagent.ipython.undo_offers import offers
from nbagent.runtime import Agent
from nbagent.undo import files as undo


def write_runs(folder: Path, count: int, content: str = "benign = True\n") -> list[str]:
    """`count` runs that each created a file (approved), in the log of `folder/test.ipynb`."""
    ids = []
    for i in range(count):
        script = {"turns": [{"tool_calls": [{"name": "create_file",
                                             "arguments": {"path": f"f{i}.py", "content": content}}]},
                            {"content": "done"}]}
        agent = Agent(script=script, autonomy="L2", decider=PolicyDecider("all"), store=folder / "test.ipynb")
        ids.append(asyncio.run(asyncio.wait_for(agent.run("go"), 60)).run_id)
    return ids


def test_a_log_that_came_with_the_notebook_offers_no_undo_from_its_records(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A cloned repository's notebook, its log beside it, sound, recorded by someone else: its records' runs are in
    "this notebook's log", so Undo… was drawn; undo restores what that log says the files were (content its author
    chose). No anchor of this user's saw those runs: no Undo… from their records, one line saying why and that
    `%agent undo RUN` still shows what it would do. The same runs made by this user offer it."""
    theirs = tmp_path / "their-data"
    monkeypatch.setenv("XDG_DATA_HOME", str(theirs))  # the author's machine
    [run_id] = write_runs(tmp_path, 1)
    mine = tmp_path / "my-data"
    own = RecordingKernel(tmp_path, env={"XDG_DATA_HOME": str(mine)})
    try:
        assert own.run("%load_ext nbagent").ok
        offer = ask(own, undo_comm(own), [run_id], 1)[run_id]
        # Was: {"undo": True, "line": "%agent undo … undoes this run's changes (1 file)", ...}
        assert offer["undo"] is False, offer
        assert offer["why"].startswith(f"run {run_id} was not recorded by you here") and \
            f"%agent undo {run_id}" in offer["why"], offer
    finally:
        own.close()
    author = RecordingKernel(tmp_path, env={"XDG_DATA_HOME": str(theirs)})
    try:
        assert author.run("%load_ext nbagent").ok
        comm = undo_comm(author)
        assert ask(author, comm, [run_id], 1)[run_id]["undo"] is True  # the author's own run
        # held: a log edited to claim a change (the file's recorded contents before the run) offers nothing
        log = tmp_path / "test.nbagent" / "events.jsonl"
        lines = log.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if '"before_sha256"' in line)
        lines[at] = lines[at].replace('"before_sha256":null', '"before_sha256":"' + "0" * 64 + '"')
        assert lines[at] != log.read_text().splitlines()[at]
        log.write_text("\n".join(lines) + "\n")
        edited = ask(author, comm, [run_id], 2)[run_id]
        assert edited["undo"] is False and "fails verification" in edited["why"], edited
        # held: 10,000 ids, ids that are not strings, paths: at most 500 answered, only run ids, the kernel alive
        junk: list[object] = [7, None, {"x": 1}, ["a"], "../../etc", "a" * 65, *[f"01X{i:07d}" for i in range(10_000)]]
        many = ask(author, comm, junk, 3)
        assert len(many) == 500 and all(k.isalnum() and not v["undo"] for k, v in many.items())
        assert author.run("print('alive')").stdout == "alive\n"
    finally:
        author.close()


def test_the_records_of_a_notebook_are_answered_verifying_the_log_once(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lab extension asks for every record of the notebook when `%load_ext nbagent` runs; each offer reads the
    log as undo does, which verifies the whole log first. Counted, not timed: one verification for the ask."""
    ids = write_runs(tmp_path, 12)
    verified: list[int] = []
    real = undo.verify_store

    def counted(store: object) -> object:
        verified.append(1)
        return real(store)  # type: ignore[arg-type]

    monkeypatch.setattr(undo, "verify_store", counted)
    found = offers(tmp_path / "test.ipynb", ids, tmp_path)
    assert all(found[r]["undo"] for r in ids), json.dumps(found)[:500]
    # Was: 12, one per record (100 records of 8 events each took 6 s of the kernel's main thread, measured)
    assert len(verified) == 1
    assert os.environ.get("XDG_DATA_HOME")  # the session's own data folder (conftest), never the person's
