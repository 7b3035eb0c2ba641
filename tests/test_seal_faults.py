"""A decision is never lost to a seal (issue 45).

A grant is sealed with this user's key in the data folder (nbagent/store/seal.py). When that key cannot be used or made
(`trust.key` a symbolic link as dotfile managers make it, a folder, another user's; the data folder a file, or on a
read-only tree), the decision is recorded all the same: the calls it approved run, the grant is not given (the next
call of its kind is asked about again), and the decision's record says in one line why and what to fix, the key's
path shown whole (a path is not a secret). The store's anchors live in the same folder: they warn, once, and the run
goes on.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nbagent.gate.deciders import Answer, ApprovalRequest, Decider, QuestionRequest, Verdict
from nbagent.gate.grants import GrantSpec
from nbagent.runtime import Agent
from nbagent.secrets.redactor import REDACTED, Redactor
from nbagent.store import seal
from nbagent.tools.base import tool
from nbagent.ui.record_text import render_text
from nbagent.ui.viewstate import run_view

MADE: list[str] = []


@tool(risk="WRITE_LOW_RISK")
def make(path: str) -> str:
    """Make a file."""
    MADE.append(path)
    return f"made {path}"


class AllowForTheRun(Decider):
    """A person who says yes, and "for the rest of this run", each time asked."""

    def __init__(self) -> None:
        self.asked = 0

    async def decide(self, request: ApprovalRequest) -> Verdict:
        self.asked += 1
        return Verdict.approve(grant=GrantSpec(scope="run"))

    async def answer(self, request: QuestionRequest) -> Answer | None:
        return None


def _link(data: Path, tmp: Path) -> str:
    (data / "nbagent").mkdir(parents=True)
    real = tmp / "dotfiles" / "trust.key"
    real.parent.mkdir()
    real.write_bytes(os.urandom(32))
    real.chmod(0o600)
    (data / "nbagent" / "trust.key").symlink_to(real)
    return f"a symbolic link (to {real})"


def _folder(data: Path, tmp: Path) -> str:
    (data / "nbagent" / "trust.key").mkdir(parents=True)
    return "not a regular file (a folder)"


def _another_users(data: Path, tmp: Path) -> str:
    key = data / "nbagent" / "trust.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(key, 65534, 65534)
        return "owned by another user (uid 65534)"
    key.chmod(0)
    return "unreadable (Permission denied)"


def _data_folder_a_file(data: Path, tmp: Path) -> str:
    data.write_text("a file where the data folder should be")
    return "out of reach (Not a directory)"


FAULTS: dict[str, Callable[[Path, Path], str]] = {
    "link": _link, "folder": _folder, "another-users": _another_users, "data-folder-a-file": _data_folder_a_file}


def run_twice(folder: Path) -> tuple[Agent, Any, AllowForTheRun]:
    """A run that makes a.md, then makes it again (which the first decision's grant would answer)."""
    MADE.clear()
    person = AllowForTheRun()
    turns = {"turns": [{"tool_calls": [{"name": "make", "arguments": {"path": "a.md"}}]},
                       {"tool_calls": [{"name": "make", "arguments": {"path": "a.md"}}]}, {"content": "done"}]}
    agent = Agent(script=turns, tools=[make], decider=person, store=folder / "nb.ipynb", autonomy="L1")
    return agent, asyncio.run(agent.run("make a.md twice")), person


def check_kept(agent: Agent, result: Any, person: AllowForTheRun, *said: str) -> str:
    """The decisions stood and their calls ran; no grant; the record's line says why. Returns that line."""
    assert result.status.value == "completed", result.error
    assert MADE == ["a.md", "a.md"] and person.asked == 2  # no grant: the second call was asked about again
    assert not agent.store.query_events(types="grant_given")
    approved = [e.payload for e in agent.store.run_events(result.run_id) if e.type == "plan_approved"]
    assert len(approved) == 2 and all(p.grants == [] for p in approved)
    line = approved[0].grant_error
    assert line is not None and "\n" not in line and REDACTED not in line
    assert line.startswith("the grant was not given (it could not be sealed): ")
    for words in said:
        assert words in line, line
    shown = render_text(run_view(agent.store, result.run_id))
    assert line in shown  # the record shows it with the decision
    return line


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_grant_that_cannot_be_sealed_loses_no_decision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         fault: str) -> None:
    data = tmp_path / "user-data"
    why = FAULTS[fault](data, tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    agent, result, person = run_twice(tmp_path)
    try:
        key = data / "nbagent" / "trust.key"
        line = check_kept(agent, result, person, f"{key}: the trust key is {why}")
        if fault == "data-folder-a-file":
            assert f"make {key.parent} a folder this user can read and write, or set XDG_DATA_HOME" in line
        else:
            assert "nbagent did not use it: remove it and a new one is made" in line
    finally:
        agent.store.close()


def test_a_read_only_home_loses_no_decision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    home = Path("/sys/nbagent-home-of-a-test")  # sysfs: nobody, root included, makes a folder there
    try:
        home.mkdir()
    except OSError:
        pass
    else:
        home.rmdir()
        pytest.skip("no read-only tree to stand for a read-only home here")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(home))
    with caplog.at_level(logging.WARNING):
        agent, result, person = run_twice(tmp_path)
    try:
        key = home / ".local" / "share" / "nbagent" / "trust.key"
        line = check_kept(agent, result, person, f"{key}: the trust key is missing and cannot be made",
                          f"make {key.parent} a folder this user can write, or set XDG_DATA_HOME to one")
        assert "the trust key" in line
    finally:
        agent.store.close()
    # the anchors share the folder: one warning, saying what to do, and the run went on
    anchors = [r.getMessage() for r in caplog.records if "cannot write this store's anchor" in r.getMessage()]
    assert len(anchors) == 1 and "set XDG_DATA_HOME to one" in anchors[0]


def test_grants_answer_again_once_the_key_is_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "user-data"
    _link(data, tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    agent, result, person = run_twice(tmp_path / "first")
    agent.store.close()
    assert person.asked == 2
    (data / "nbagent" / "trust.key").unlink()  # what the line says to do
    agent, result, person = run_twice(tmp_path / "second")
    try:
        assert result.status.value == "completed" and MADE == ["a.md", "a.md"]
        assert person.asked == 1 and len(agent.store.query_events(types="grant_given")) == 1
    finally:
        agent.store.close()


def test_the_key_files_line_shows_its_path_and_still_redacts_secrets(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell shows nbagent's errors as `Class: message`, redacted (ipython/host.py): `KeyFileError: <path>: ...`
    is not a key's name and its value, so the path it tells the person to remove is shown whole."""
    data = tmp_path / "user-data-7f3a9c21d0e4b8a6"  # digits in the path: what a credential's value looks like
    _link(data, tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    with pytest.raises(seal.KeyFileError) as caught:
        seal.key()
    line = f"{type(caught.value).__name__}: {caught.value}"
    assert Redactor().text(line) == line
    assert str(data / "nbagent" / "trust.key") in Redactor().text(line)
    for secret in ("api_key: 0123456789abcdef0123", "KEY=0123456789abcdef0123abcd", "token: abcd1234efgh5678ijkl"):
        assert REDACTED in Redactor().text(f"KeyFileError: {secret}")
        assert REDACTED in Redactor().text(secret)


def test_a_grant_given_under_a_good_key_still_verifies(tmp_path: Path) -> None:
    """The faults change nothing where the key is good: the grant is given, sealed, and answers the next call."""
    agent, result, person = run_twice(tmp_path)
    try:
        assert result.status.value == "completed" and person.asked == 1 and MADE == ["a.md", "a.md"]
        approved = next(e.payload for e in agent.store.run_events(result.run_id) if e.type == "plan_approved")
        assert approved.grant_error is None and len(approved.grants) == 1
    finally:
        agent.store.close()


@pytest.mark.parametrize("line", [
    "KeyError: 'sk-proj-0123456789abcdefghijklmnop'", "TokenError: ghp_0123456789abcdefghijklmnopqrstuvwxyz",
    "KeyFileError: /tmp/x: key=0123456789abcdef0123456789", "api_keyError = 0123456789abcdef0123"])
def test_an_exceptions_name_hides_no_secret_behind_it(line: str) -> None:
    """An attack on the change above: a secret after `SomeError:` is still found by its shape or its own name."""
    assert REDACTED in Redactor().text(line)
