"""`nbagent verify` catches an edited, cut, reordered or truncated log and names the first bad event."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import llm, new_run

from nbagent.cli.commands import main
from nbagent.events import model as E
from nbagent.store import Store


@pytest.fixture
def log(tmp_path: Path) -> tuple[Path, list[str], str]:
    """A store with two interleaved runs; returns the events file, its lines, and run A's id."""
    store = Store(tmp_path / "nb.ipynb")
    a = new_run(store, "a")
    b = new_run(store, "b")
    for i in range(4):
        store.append(E.Thinking(text=f"a{i}"), run_id=a)
        store.append(E.Thinking(text=f"b{i}"), run_id=b)
    store.append(llm("answer"), run_id=a)
    store.append(E.Completed(), run_id=a)
    store.append(E.Completed(), run_id=b)
    store.close()
    path = tmp_path / "nb.nbagent" / "events.jsonl"
    return path, path.read_text().splitlines(keepends=True), a


def lines_of(lines: list[str], run: str) -> list[int]:
    return [i for i, line in enumerate(lines) if json.loads(line)["run_id"] == run]


def verify(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["verify", str(path.parent)])
    return code, capsys.readouterr().out


def test_intact_log_verifies(log, capsys) -> None:
    path, _, _ = log
    code, out = verify(path, capsys)
    assert code == 0 and "ok:" in out and "2 run(s), 1 session(s), 14 event(s)" in out


def test_edited_payload_is_named(log, capsys) -> None:
    path, lines, a = log
    i = lines_of(lines, a)[2]
    record = json.loads(lines[i])
    record["payload"]["text"] = "something else"
    lines[i] = json.dumps(record) + "\n"
    path.write_text("".join(lines))
    code, out = verify(path, capsys)
    assert code == 1
    assert f"line {i + 1} event {record['id']} (run {a}): hash does not match" in out


def test_deleted_middle_line_is_named(log, capsys) -> None:
    path, lines, a = log
    i = lines_of(lines, a)[2]
    after = json.loads(lines[lines_of(lines, a)[3]])
    del lines[i]
    path.write_text("".join(lines))
    code, out = verify(path, capsys)
    assert code == 1 and f"event {after['id']} (run {a}): seq jumps from 2 to 4" in out


def test_swapped_lines_are_named(log, capsys) -> None:
    path, lines, a = log
    i, j = lines_of(lines, a)[1:3]
    lines[i], lines[j] = lines[j], lines[i]
    path.write_text("".join(lines))
    code, out = verify(path, capsys)
    assert code == 1 and "reordered" in out and f"run {a}" in out


def test_truncated_end_is_caught_by_the_checkpoint(log, capsys) -> None:
    path, lines, a = log
    for i in reversed(lines_of(lines, a)[-2:]):  # drop run A's answer and its `completed`
        del lines[i]
    path.write_text("".join(lines))
    code, out = verify(path, capsys)
    assert code == 1 and f"run {a}" in out and "2 event(s) were removed from the end" in out


def test_line_cut_in_the_middle_is_named(log, capsys) -> None:
    path, lines, _ = log
    lines[4] = lines[4][: len(lines[4]) // 2] + "\n"
    path.write_text("".join(lines))
    code, out = verify(path, capsys)
    assert code == 1 and "line 5: not a valid JSON event" in out


def test_torn_last_line_is_only_a_warning(log, capsys) -> None:
    path, _, _ = log
    with open(path, "a") as f:
        f.write('{"id": "01TORN", "seq"')
    code = main(["verify", str(path.parent)])
    captured = capsys.readouterr()
    assert code == 0 and "the last line is incomplete" in captured.err


def test_forged_hash_still_breaks_the_next_link(log, capsys) -> None:
    """Recomputing the edited event's own hash is not enough: the next event's prev_hash no longer matches."""
    from nbagent.events.model import compute_hash

    path, lines, a = log
    idx = lines_of(lines, a)
    record = json.loads(lines[idx[1]])
    record["payload"]["text"] = "forged"
    record["hash"] = compute_hash(record)
    lines[idx[1]] = json.dumps(record) + "\n"
    path.write_text("".join(lines))
    code, out = verify(path, capsys)
    nxt = json.loads(lines[idx[2]])
    assert code == 1 and f"event {nxt['id']} (run {a}): prev_hash does not match" in out
