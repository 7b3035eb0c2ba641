"""Damaged and newer logs (issue 12): read what can be read, lose nothing recorded, and judge the chain.

Each test builds a store with the real Store API, damages it on disk the way a crash, a newer nbagent or a
person would, then reads it (Store, `nbagent runs/show/verify` as a subprocess) and writes to it again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import llm, new_run

from nbagent.events import model as E
from nbagent.events.model import canonical_json, compute_hash
from nbagent.events.state import RunStatus
from nbagent.store import Store

NB = "analysis.ipynb"


def build(folder: Path, name: str = NB) -> tuple[Path, str, str]:
    """A notebook's store with run A (completed) and run B (running); returns the store path and the run ids."""
    (folder / name).write_text("{}")
    store = Store(folder / name)
    a = new_run(store, "summarise sales.csv", cell_id="cell-1")
    b = new_run(store, "plot revenue", cell_id="cell-2")
    store.append(llm("North leads."), run_id=a)
    store.append(E.Thinking(text="looking at the columns"), run_id=b)
    store.append(E.AnswerReady(content="North leads."), run_id=a)
    store.append(E.Completed(summary="done"), run_id=a)
    store.close()
    return store.path, a, b


def events_file(store: Path) -> Path:
    return store / "events.jsonl"


def records(store: Path) -> list[dict[str, Any]]:
    """Every event on disk, the last line too even without its newline."""
    return [json.loads(line) for line in events_file(store).read_text().splitlines() if line.strip()]


def append_foreign(store: Path, run_id: str | None, type_: str, payload: Any, session_id: str | None = None,
                   **extra: Any) -> dict[str, Any]:
    """Append one correctly chained event as another (e.g. newer) nbagent would write it."""
    recs = records(store)
    if session_id is None:
        session_id = next(r["session_id"] for r in recs if r["run_id"] == run_id)
    chain = [r for r in recs if r["run_id"] == run_id and r["session_id"] == session_id]
    record = {
        "id": f"01FUTURE{len(recs):018d}", "session_id": session_id, "run_id": run_id, "type": type_,
        "ts": "2030-01-01T00:00:00.000000Z", "parent_event_id": None, "payload": payload,
        "seq": chain[-1]["seq"] + 1 if chain else 1, "prev_hash": chain[-1]["hash"] if chain else None, **extra,
    }
    record["hash"] = compute_hash(record)
    with open(events_file(store), "a") as f:
        f.write(canonical_json(record) + "\n")
    return record


def strip_final_newline(store: Path) -> None:
    data = events_file(store).read_bytes()
    assert data.endswith(b"\n")
    events_file(store).write_bytes(data[:-1])


def cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "nbagent.cli", *argv], cwd=cwd, capture_output=True,
                            text=True, check=False, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def runs_by_id(cwd: Path, store: Path) -> dict[str, dict[str, Any]]:
    result = cli(cwd, "runs", str(store), "--json")
    assert result.returncode == 0, result.stderr
    return {r["id"]: r for r in map(json.loads, result.stdout.splitlines())}


def verdict(cwd: Path, store: Path) -> tuple[int, str, str]:
    result = cli(cwd, "verify", str(store))
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout  # one verdict line per store
    return result.returncode, lines[0], result.stderr


# ------------------------------------------------------------------ 1. a whole last event missing its newline


def test_complete_last_event_without_newline_is_read_and_kept(tmp_path: Path) -> None:
    store_path, a, b = build(tmp_path)
    strip_final_newline(store_path)
    before = records(store_path)

    reader = Store(store_path, readonly=True)
    assert reader.run_state(a).status == RunStatus.COMPLETED  # not "running": the completed event counts
    assert [e.type for e in reader.run_events(a)][-1] == "completed"
    assert any("no final newline" in w for w in reader.warnings)

    assert runs_by_id(tmp_path, store_path)[a]["status"] == "completed"
    shown = cli(tmp_path, "show", a, str(store_path))
    assert shown.returncode == 0 and "status completed" in shown.stdout
    code, line, err = verdict(tmp_path, store_path)
    assert code == 0 and line.startswith("ok:") and "no final newline" in err

    # the next writer completes the line instead of cutting it
    writer = Store(store_path)
    writer.append(E.Thinking(text="still here"), run_id=b)
    c = new_run(writer, "a new run")
    writer.append(E.Completed(), run_id=c)
    writer.close()
    data = events_file(store_path).read_bytes()
    assert data.endswith(b"\n") and b"\n\n" not in data
    after = records(store_path)
    assert after[: len(before)] == before  # nothing recorded was lost or changed
    assert len(after) == len(before) + 3  # thinking, run_started, completed (the session already exists)
    assert Store(store_path, readonly=True).run_state(a).status == RunStatus.COMPLETED
    code, line, err = verdict(tmp_path, store_path)
    assert code == 0 and line.startswith("ok:") and "warning" not in err


def test_reader_open_before_the_newline_is_added_keeps_counting_right(tmp_path: Path) -> None:
    """A long-lived reader that consumed the unterminated event sees the writer's next event, no phantom line."""
    store_path, a, b = build(tmp_path)
    strip_final_newline(store_path)
    reader = Store(store_path, readonly=True)
    assert reader.run_state(a).status == RunStatus.COMPLETED
    writer = Store(store_path)
    writer.append(E.Thinking(text="after"), run_id=b)
    writer.close()
    assert [e.payload.text for e in reader.run_events(b) if e.type == "thinking"] == ["looking at the columns",
                                                                                      "after"]
    assert not [w for w in reader.warnings if "not a valid event" in w]


def test_unterminated_line_that_does_not_chain_is_a_torn_tail(tmp_path: Path) -> None:
    """A whole JSON object that does not chain on (here: an edited copy) is not an event: skipped, then cut."""
    store_path, a, b = build(tmp_path)
    last = records(store_path)[-1]
    bogus = dict(last, payload={"summary": "forged"})  # same seq and prev_hash as the real last event
    with open(events_file(store_path), "a") as f:
        f.write(canonical_json(bogus))
    reader = Store(store_path, readonly=True)
    assert [e.payload.summary for e in reader.run_events(a) if e.type == "completed"] == ["done"]
    code, line, err = verdict(tmp_path, store_path)  # same rule as the readers: a torn tail, a warning
    assert code == 0 and line.startswith("ok:") and "does not chain" in err
    writer = Store(store_path)
    writer.append(E.Thinking(text="x"), run_id=b)
    writer.close()
    assert b"forged" not in events_file(store_path).read_bytes()
    assert verdict(tmp_path, store_path)[0] == 0


def test_torn_tail_is_ignored_then_cut_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    store_path, a, b = build(tmp_path)
    before = records(store_path)
    with open(events_file(store_path), "a") as f:
        f.write('{"id": "01TORN", "seq": 9, "pay')
    reader = Store(store_path, readonly=True)
    assert reader.run_state(a).status == RunStatus.COMPLETED and reader.run_state(b).status == RunStatus.RUNNING
    assert runs_by_id(tmp_path, store_path)[b]["status"] == "running"
    code, line, err = verdict(tmp_path, store_path)
    assert code == 0 and line.startswith("ok:") and "incomplete" in err
    writer = Store(store_path)
    writer.append(E.Completed(), run_id=b)
    writer.close()
    assert b"01TORN" not in events_file(store_path).read_bytes()
    assert records(store_path)[: len(before)] == before
    assert verdict(tmp_path, store_path)[0] == 0


# ------------------------------------------------------------------ 2. event types from a newer nbagent


def test_unknown_event_type_is_kept_shown_verified_and_does_not_stop_new_runs(tmp_path: Path) -> None:
    store_path, a, b = build(tmp_path)
    future = append_foreign(store_path, b, "tool_sandboxed", {"sandbox": "firecracker", "limits": {"cpu": 2}})
    session_id = future["session_id"]
    append_foreign(store_path, None, "session_renamed", {"name": "sales"}, session_id=session_id)

    reader = Store(store_path, readonly=True)
    unknown = [e for e in reader.run_events(b) if e.type == "tool_sandboxed"]
    assert len(unknown) == 1 and isinstance(unknown[0], E.UnknownEvent)
    assert unknown[0].payload == {"sandbox": "firecracker", "limits": {"cpu": 2}}
    assert reader.run_state(b).status == RunStatus.RUNNING  # folding skips what it does not know
    assert {e.type for e in reader.query_events()} >= {"tool_sandboxed", "session_renamed"}

    runs = runs_by_id(tmp_path, store_path)
    assert runs[a]["status"] == "completed" and runs[b]["status"] == "running"
    assert cli(tmp_path, "runs", str(store_path)).returncode == 0
    shown = cli(tmp_path, "show", b, str(store_path))
    assert shown.returncode == 0
    row = next(line for line in shown.stdout.splitlines() if "tool_sandboxed" in line)
    assert "firecracker" in row and "unknown" in row  # type name and a payload summary
    raw = json.loads(cli(tmp_path, "show", b, str(store_path), "--json").stdout)
    assert raw[-1] == future  # exactly as recorded
    code, line, err = verdict(tmp_path, store_path)
    assert code == 0 and line.startswith("ok:") and "tool_sandboxed" in err

    # new events and new runs go on, continuing from the run that holds the unknown event
    writer = Store(store_path)
    writer.append(E.Completed(), run_id=b)
    c = new_run(writer, "continue", previous_run_id=b)
    writer.append(E.Completed(), run_id=c)
    assert writer.run_state(b).status == RunStatus.COMPLETED
    assert writer.get_run(c).status == RunStatus.COMPLETED
    writer.close()
    assert future in records(store_path)
    assert verdict(tmp_path, store_path)[0] == 0


def test_edited_unknown_event_fails_verify(tmp_path: Path) -> None:
    """The hash chain covers unknown types too."""
    store_path, _, b = build(tmp_path)
    append_foreign(store_path, b, "tool_sandboxed", {"sandbox": "firecracker"})
    text = events_file(store_path).read_text().replace("firecracker", "none")
    events_file(store_path).write_text(text)
    code, line, _ = verdict(tmp_path, store_path)
    assert code == 1 and line.startswith("FAILED:") and "edited" in line


def test_unknown_fields_in_known_payloads_are_kept(tmp_path: Path) -> None:
    store_path, _, b = build(tmp_path)
    record = append_foreign(store_path, b, "thinking", {"text": "hmm", "tokens": 12}, confidence=0.5)
    reader = Store(store_path, readonly=True)
    event = reader.run_events(b)[-1]
    assert event.payload.text == "hmm" and event.payload.model_extra == {"tokens": 12}
    assert json.loads(cli(tmp_path, "show", b, str(store_path), "--json").stdout)[-1] == record
    assert verdict(tmp_path, store_path)[0] == 0
    writer = Store(store_path)
    writer.append(E.Completed(), run_id=b)
    writer.close()
    assert record in records(store_path)


# ------------------------------------------------------------------ 3. a damaged tables.json (a cache)

DAMAGED_TABLES = {
    "not json": '{"runs": {"01',
    "not an object": "[1, 2, 3]",
    "table not an object": '{"runs": [], "sessions": {}}',
    "row not an object": '{"runs": {"X": 5}, "sessions": {}}',
    "empty file": "",
}


@pytest.mark.parametrize("damage", list(DAMAGED_TABLES))
def test_damaged_tables_are_rebuilt_from_the_events(tmp_path: Path, damage: str) -> None:
    store_path, a, b = build(tmp_path)
    session_id = records(store_path)[0]["session_id"]
    (store_path / "tables.json").write_text(DAMAGED_TABLES[damage])

    reader = Store(store_path, readonly=True)
    assert {r.id: r.status for r in reader.list_runs()} == {a: RunStatus.COMPLETED, b: RunStatus.RUNNING}
    assert [s["name"] for s in reader.sessions.all()] == ["default"]
    assert any("damaged" in w for w in reader.warnings)

    table = cli(tmp_path, "runs", str(store_path))
    assert table.returncode == 0 and "default" in table.stdout and "damaged" in table.stderr
    assert cli(tmp_path, "show", a, str(store_path)).returncode == 0
    code, line, err = verdict(tmp_path, store_path)
    assert code == 0 and line.startswith("ok:") and "every chain intact" in line and "damaged" in err

    writer = Store(store_path)
    assert writer.session(notebook=NB).id == session_id  # the existing session, not a second default one
    c = new_run(writer, "after the damage")
    writer.close()
    tables = json.loads((store_path / "tables.json").read_text())  # rewritten whole
    assert set(tables["runs"]) == {a, b, c} and set(tables["sessions"]) == {session_id}
    assert tables["runs"][a]["status"] == "completed"
    code, line, err = verdict(tmp_path, store_path)
    assert code == 0 and "damaged" not in err


def test_damaged_row_falls_back_to_the_events(tmp_path: Path) -> None:
    store_path, a, _ = build(tmp_path)
    tables = json.loads((store_path / "tables.json").read_text())
    tables["runs"][a] = {"status": 17}
    (store_path / "tables.json").write_text(json.dumps(tables))
    assert Store(store_path, readonly=True).get_run(a).status == RunStatus.COMPLETED
    assert runs_by_id(tmp_path, store_path)[a]["status"] == "completed"
    assert verdict(tmp_path, store_path)[0] == 0


def test_an_older_tables_file_is_behind_the_events_and_no_alarm(tmp_path: Path) -> None:
    """tables.json is not fsynced (the log is, first): after a power cut it may be a version from before the last
    checkpoints. Its rows are behind the events, so the events say each run's state, and `verify` finds nothing
    removed or replaced (a row never names an event the log lost)."""
    (tmp_path / NB).write_text("{}")
    store = Store(tmp_path / NB)
    a = new_run(store, "summarise sales.csv", cell_id="cell-1")
    older = (store.path / "tables.json").read_bytes()  # a's row says "running", at its first checkpoint
    store.append(llm("North leads."), run_id=a)
    store.append(E.AnswerReady(content="North leads."), run_id=a)
    store.append(E.Completed(summary="done"), run_id=a)
    b = new_run(store, "plot revenue", cell_id="cell-2")
    store.close()
    (store.path / "tables.json").write_bytes(older)  # the renames after it never reached the disk

    reader = Store(tmp_path / NB, readonly=True)
    assert {r.id: r.status for r in reader.list_runs()} == {a: RunStatus.COMPLETED, b: RunStatus.RUNNING}
    assert not reader.warnings  # an older cache is not damage: it is behind, and the events are read
    assert runs_by_id(tmp_path, store.path)[a]["status"] == "completed"
    code, line, err = verdict(tmp_path, store.path)
    assert code == 0 and line.startswith("ok:") and "every chain intact" in line, (line, err)
    writer = Store(tmp_path / NB)
    c = new_run(writer, "after the power cut")
    assert {r.id: r.status for r in writer.list_runs()} == {
        a: RunStatus.COMPLETED, b: RunStatus.RUNNING, c: RunStatus.RUNNING}  # b: no row until its next checkpoint
    writer.close()
    assert {a, c} <= set(json.loads((store.path / "tables.json").read_text())["runs"])


def test_damaged_tables_do_not_hide_an_edited_log(tmp_path: Path) -> None:
    store_path, _, _ = build(tmp_path)
    (store_path / "tables.json").write_text("garbage")
    events_file(store_path).write_text(events_file(store_path).read_text().replace("North leads.", "South leads."))
    code, line, err = verdict(tmp_path, store_path)
    assert code == 1 and line.startswith("FAILED:") and "edited" in line and "damaged" in err


# ------------------------------------------------------------------ 4. one verdict line per damaged store


def damage_torn(store: Path, a: str, b: str) -> None:
    with open(events_file(store), "a") as f:
        f.write('{"id": "01TORN"')


def damage_newline(store: Path, a: str, b: str) -> None:
    strip_final_newline(store)


def damage_unknown(store: Path, a: str, b: str) -> None:
    append_foreign(store, b, "tool_sandboxed", {"sandbox": "x"})


def damage_tables(store: Path, a: str, b: str) -> None:
    (store / "tables.json").write_text("{")


def damage_edit(store: Path, a: str, b: str) -> None:
    events_file(store).write_text(events_file(store).read_text().replace("looking at", "ignoring"))


def damage_truncate(store: Path, a: str, b: str) -> None:
    """Cut run A's last two events (its answer and its end, both checkpointed) off the log."""
    lines = events_file(store).read_text().splitlines(keepends=True)
    events_file(store).write_text("".join(lines[:-2]))


VERDICTS = [(damage_torn, 0), (damage_newline, 0), (damage_unknown, 0), (damage_tables, 0), (damage_edit, 1),
            (damage_truncate, 1)]


@pytest.mark.parametrize(("damage", "code"), VERDICTS, ids=[d.__name__ for d, _ in VERDICTS])
def test_verify_verdict_per_damage(tmp_path: Path, damage: Any, code: int) -> None:
    store_path, a, b = build(tmp_path)
    damage(store_path, a, b)
    got, line, _ = verdict(tmp_path, store_path)
    assert got == code and line.startswith("ok:" if code == 0 else "FAILED:")


def test_verify_a_folder_gives_one_line_per_store(tmp_path: Path) -> None:
    for i, (damage, _) in enumerate(VERDICTS):
        store_path, a, b = build(tmp_path, f"nb{i}.ipynb")
        damage(store_path, a, b)
    result = cli(tmp_path, "verify")
    lines = result.stdout.splitlines()
    assert result.returncode == 1 and len(lines) == len(VERDICTS)
    assert [line.split(":")[0] for line in lines] == ["ok" if c == 0 else "FAILED" for _, c in VERDICTS]


def test_agent_runs_on_after_a_newer_nbagent_wrote_to_the_notebook(tmp_path: Path) -> None:
    """The runtime's own path (previous runs listed, the conversation continued) is not stopped by unknown types."""
    from agents import agent, run, turns

    a = agent(tmp_path, turns("first answer", "second answer"))
    first = run(a, "first")
    a.store.close()
    store_path = tmp_path / "nb.nbagent"
    future = append_foreign(store_path, first.run_id, "memory_compacted", {"kept": 3})
    b = agent(tmp_path, turns("second answer"))
    second = run(b, "second")
    assert b.store.get_run(second.run_id).status == RunStatus.COMPLETED
    assert b.store.get_run(second.run_id).previous_run_id == first.run_id
    b.store.close()
    assert future in records(store_path)
    assert verdict(tmp_path, store_path)[0] == 0
