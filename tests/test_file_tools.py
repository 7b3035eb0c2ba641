"""The file tools doing their jobs: listing, reading (ranges, encodings, binary), searching, writing."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from nbagent.events.state import RunStatus
from nbagent.gate.deciders import PolicyDecider
from nbagent.runtime import Agent
from nbagent.scope.rules import Scope, ScopeDenied
from nbagent.tools.base import ToolError
from nbagent.tools.files import FileTools


@pytest.fixture
def ft(tmp_path: Path) -> FileTools:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sales.csv").write_text("region,revenue\nNorth,10\nSouth,7\nEast,3\n")
    (tmp_path / "latin1.txt").write_bytes("café crème, déjà vu, naïve façade — ".encode("cp1252") * 20)
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfwith a BOM\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (tmp_path / "notes.md").write_text("# Notes\nrevenue grew\nREVENUE fell\n")
    return FileTools(Scope(root=tmp_path, base=tmp_path, max_read_bytes=10_000))


def test_list_files_with_depth_pattern_and_sizes(ft: FileTools) -> None:
    top = ft.list_files()
    assert [e["path"] for e in top["entries"]] == ["bom.txt", "data/", "image.png", "latin1.txt", "notes.md"]
    deep = ft.list_files(".", pattern="*.csv", depth=2)["entries"]
    assert {"path": "data/sales.csv", "type": "file", "size": 39} in deep


def test_read_whole_file_and_line_ranges(ft: FileTools) -> None:
    whole = ft.read_file("data/sales.csv")
    assert whole["lines"] == "1-4 of 4" and whole["content"].startswith("region")
    part = ft.read_file("data/sales.csv", start_line=2, end_line=3)
    assert part["content"] == "North,10\nSouth,7\n" and part["lines"] == "2-3 of 4"
    with pytest.raises(ToolError, match="start_line"):
        ft.read_file("data/sales.csv", start_line=0)


def test_encoding_detection_and_bom(ft: FileTools) -> None:
    latin = ft.read_file("latin1.txt")
    assert "café crème" in latin["content"] and latin["encoding"].lower().replace("-", "") in (
        "cp1252", "windows1252", "latin1", "iso88591")
    assert ft.read_file("bom.txt")["content"] == "with a BOM\n"


def test_binary_files_are_refused_for_text_reads(ft: FileTools) -> None:
    with pytest.raises(ToolError, match="binary"):
        ft.read_file("image.png")
    assert ft.get_file_metadata("image.png")["kind"] == "binary"


def test_size_limit_and_ranged_read_of_a_large_file(ft: FileTools, tmp_path: Path) -> None:
    (tmp_path / "big.log").write_text("".join(f"line {i}\n" for i in range(5000)))
    with pytest.raises(ScopeDenied, match="over the 10,000-byte limit"):
        ft.read_file("big.log")
    assert ft.read_file("big.log", start_line=4999, end_line=5000)["content"] == "line 4998\nline 4999\n"


def test_search_plain_regex_case_and_limits(ft: FileTools) -> None:
    plain = ft.search_content("revenue")
    assert {(m["path"], m["line"]) for m in plain["matches"]} == {("data/sales.csv", 1), ("notes.md", 2),
                                                                  ("notes.md", 3)}
    cased = ft.search_content("revenue", case_sensitive=True, glob="*.md")["matches"]
    assert [m["line"] for m in cased] == [2]
    rx = ft.search_content(r"^\w+,\d$", regex=True)["matches"]
    assert [m["text"] for m in rx] == ["South,7", "East,3"]
    assert ft.search_content("e", max_matches=2)["truncated"] == "stopped at 2 matches"
    with pytest.raises(ToolError, match="invalid regular expression"):
        ft.search_content("(", regex=True)


def test_plain_search_is_literal_and_case_folds_unicode(ft: FileTools, tmp_path: Path) -> None:
    """Plain text is matched literally (RE2's literal mode), so regex syntax in it means nothing special."""
    (tmp_path / "odd.txt").write_text("cost (a+b)*2 [usd]\r\nCafé CRÈME\nend\\Z\n")
    assert [m["line"] for m in ft.search_content("(a+b)*2 [", glob="odd.txt")["matches"]] == [1]
    assert ft.search_content("a.b", glob="odd.txt")["matches"] == []
    assert ft.search_content("café crème", glob="odd.txt")["matches"] == [
        {"path": "odd.txt", "line": 2, "text": "Café CRÈME"}]
    assert ft.search_content("café crème", glob="odd.txt", case_sensitive=True)["matches"] == []
    assert ft.search_content("usd]", glob="odd.txt")["matches"][0]["text"] == "cost (a+b)*2 [usd]"  # no \r
    assert [m["line"] for m in ft.search_content("end\\Z", glob="odd.txt")["matches"]] == [3]
    assert [m["line"] for m in ft.search_content(r"^caf\pL", regex=True, glob="odd.txt")["matches"]] == [2]
    assert ft.search_content(r"^caf\w", regex=True, glob="odd.txt")["matches"] == []  # RE2's \w is ASCII (docs)
    assert ft.search_content(r"(?i)^CAF", regex=True, case_sensitive=True, glob="odd.txt")["matches"][0]["line"] == 2
    assert ft.search_content("with a BOM", glob="bom.txt")["matches"] == [
        {"path": "bom.txt", "line": 1, "text": "with a BOM"}]
    assert ft.search_content("crème", glob="latin1.txt")["matches"][0]["path"] == "latin1.txt"  # decoded first


def test_metadata(ft: FileTools) -> None:
    meta = ft.get_file_metadata("data/sales.csv")
    assert meta["size"] == 39 and meta["lines"] == 4 and meta["kind"] == "text" and len(meta["sha256"]) == 64


def test_create_refuses_an_existing_path_and_makes_folders(ft: FileTools, tmp_path: Path) -> None:
    assert ft.create_file("reports/q1/summary.md", "# Q1\n") == {"created": "reports/q1/summary.md", "bytes": 5}
    assert (tmp_path / "reports/q1/summary.md").read_text() == "# Q1\n"
    with pytest.raises(ScopeDenied, match="already exists; use write_file"):
        ft.create_file("notes.md", "x")
    assert (tmp_path / "notes.md").read_text().startswith("# Notes")


def test_write_replaces_atomically_and_keeps_the_mode(ft: FileTools, tmp_path: Path) -> None:
    target = tmp_path / "notes.md"
    os.chmod(target, 0o640)
    inode = target.stat().st_ino
    ft.write_file("notes.md", "new text\n")
    assert target.read_text() == "new text\n" and oct(target.stat().st_mode & 0o777) == "0o640"
    assert target.stat().st_ino != inode  # a new file renamed over the old one: never half-written
    assert not [p for p in tmp_path.iterdir() if "nbagent-tmp" in p.name]
    made = ft.write_file("missing.md", "x")  # a file that is not there yet is created (issue 46)
    assert made == {"written": "missing.md", "bytes": 1, "created": True}
    assert (tmp_path / "missing.md").read_text() == "x"


def test_a_write_file_to_a_missing_file_is_a_create_on_its_card_in_effects_and_for_undo(tmp_path: Path) -> None:
    """Issue 46: the card said "Overwrite notes.md?" for a file that did not exist, and the approved call failed."""
    from nbagent.gate.deciders import PauseDecider
    from nbagent.gate.effects import call_digest, resolve
    from nbagent.store import Store
    from nbagent.store.blobs import BlobStore
    from nbagent.ui.record_words import high_risk_effects
    from nbagent.ui.viewstate import run_view
    from nbagent.undo.files import undo
    from tests.agents import call, turns

    store = Store(tmp_path / "nb.ipynb")
    tools = FileTools(tmp_path, BlobStore.of_store(store.path)).tools()
    script = turns([call("write_file", path="notes.md", content="new\n")], "wrote it")
    paused = asyncio.run(Agent(script=script, tools=tools, store=store, decider=PauseDecider()).run("write notes"))
    view = run_view(store, paused.run_id)
    (plan,) = view["plans"]
    assert view["words"]["plans"][plan["plan_id"]] == "create notes.md"
    assert high_risk_effects(plan) == ["creates notes.md"] and plan["steps"][0]["preview"].startswith("--- /dev/null")
    # the decision binds to the create: once a file is there, the same call is another effect (an overwrite)
    write = next(t for t in tools if t.name == "write_file")
    args = {"path": "notes.md", "content": "new\n"}
    before = call_digest("write_file", args, resolve(write, args, None))
    (tmp_path / "notes.md").write_text("appeared\n")
    assert call_digest("write_file", args, resolve(write, args, None)) != before
    (tmp_path / "notes.md").unlink()
    done = asyncio.run(Agent(script=script, tools=tools, store=store, autonomy="L3",
                             decider=PolicyDecider("all")).run("write notes"))
    assert done.status == RunStatus.COMPLETED and (tmp_path / "notes.md").read_text() == "new\n"
    assert run_view(store, done.run_id)["effects"]["created"] == ["notes.md"]
    assert undo(store, done.run_id, folder=tmp_path).ok and not (tmp_path / "notes.md").exists()


def test_write_and_delete_refuse_hard_links(ft: FileTools, tmp_path: Path) -> None:
    os.link(tmp_path / "notes.md", tmp_path / "twin.md")
    for call in (lambda: ft.write_file("twin.md", "x"), lambda: ft.delete_file("notes.md")):
        with pytest.raises(ScopeDenied, match="hard links"):
            call()
    assert (tmp_path / "twin.md").read_text().startswith("# Notes")


def test_delete(ft: FileTools, tmp_path: Path) -> None:
    assert ft.delete_file("notes.md")["deleted"] == "notes.md" and not (tmp_path / "notes.md").exists()


def test_write_size_limit(tmp_path: Path) -> None:
    ft = FileTools(Scope(root=tmp_path, max_write_bytes=10))
    with pytest.raises(ScopeDenied, match="over the 10-byte limit"):
        ft.create_file("x.txt", "this is longer than ten bytes")
    assert not (tmp_path / "x.txt").exists()


def test_previews_are_unified_diffs(ft: FileTools) -> None:
    create = ft.preview_create({"path": "new.md", "content": "a\nb\n"})
    assert create.startswith("--- /dev/null\n+++ b/new.md\n") and "+a\n+b\n" in create
    write = ft.preview_write({"path": "notes.md", "content": "# Notes\nrevenue grew a lot\nREVENUE fell\n"})
    assert "-revenue grew\n+revenue grew a lot\n" in write and write.startswith("--- a/notes.md\n+++ b/notes.md")
    delete = ft.preview_delete({"path": "data/sales.csv"})
    assert "+++ /dev/null" in delete and "-North,10" in delete


def test_the_approval_card_carries_the_diff(ft: FileTools, tmp_path: Path) -> None:
    script = {"turns": [{"tool_calls": [{"name": "write_file",
                                         "arguments": {"path": "notes.md", "content": "# Notes\nrewritten\n"}}]},
                        {"content": "rewritten"}]}
    agent = Agent(script=script, tools=ft.tools(), decider=PolicyDecider("none"), store=tmp_path / "nb.ipynb")
    result = asyncio.run(agent.run("rewrite the notes"))
    plan = next(e for e in agent.store.run_events(result.run_id) if e.type == "plan_proposed").payload
    step = plan.steps[0]
    assert step.risk == "WRITE_HIGH_RISK" and step.target == "notes.md"
    assert "-revenue grew\n" in step.preview and "+rewritten\n" in step.preview
    assert (tmp_path / "notes.md").read_text().startswith("# Notes\nrevenue")  # denied: unchanged
    assert result.status == RunStatus.COMPLETED_WITH_ERRORS


def test_every_attempt_is_an_event_with_target_decision_reason_and_duration(ft: FileTools, tmp_path: Path) -> None:
    script = {"turns": [{"tool_calls": [{"name": "read_file", "arguments": {"path": "data/sales.csv"}},
                                        {"name": "read_file", "arguments": {"path": "../etc/passwd"}}]},
                        {"content": "ok"}]}
    agent = Agent(script=script, tools=ft.tools(), store=tmp_path / "nb.ipynb")
    result = asyncio.run(agent.run("read"))
    events = agent.store.run_events(result.run_id)
    started = next(e for e in events if e.type == "tool_call_started").payload
    assert (started.target, started.decision) == ("data/sales.csv", "allowed")
    assert started.reason == "READ_ONLY runs without asking at autonomy L1"
    assert next(e for e in events if e.type == "tool_call_completed").payload.duration_ms > 0
    denied = next(e for e in events if e.type == "authorization_denied").payload
    assert denied.target == "../etc/passwd" and denied.reason
    assert denied.rule in ("path_traversal", "scope.outside")


def test_a_missing_file_is_an_error_not_a_denial(ft: FileTools, tmp_path: Path) -> None:
    """Denial is for policy (outside, excluded, not approved); what the folder says (missing, exists, a folder
    where a file is needed) fails the call as an error the model sees, and nothing runs."""
    (tmp_path / "there.txt").write_text("x\n")
    script = {"turns": [{"tool_calls": [{"name": "read_file", "arguments": {"path": "nope.txt"}},
                                        {"name": "create_file", "arguments": {"path": "there.txt", "content": "y"}},
                                        {"name": "read_file", "arguments": {"path": "data"}},
                                        {"name": "read_file", "arguments": {"path": ".env"}}]},
                        {"content": "ok"}]}
    agent = Agent(script=script, tools=ft.tools(), store=tmp_path / "nb.ipynb", autonomy="L2",
                  decider=PolicyDecider("all"))
    result = asyncio.run(agent.run("read"))
    events = agent.store.run_events(result.run_id)
    failed = {e.payload.call_id: e.payload for e in events if e.type == "tool_call_failed"}
    denied = {e.payload.call_id: e.payload for e in events if e.type == "authorization_denied"}
    assert {c: f.error_type for c, f in failed.items()} == {
        "nb1_0": "scope.missing", "nb1_1": "scope.exists", "nb1_2": "scope.not_a_file"}
    assert "does not exist" in failed["nb1_0"].error
    assert list(denied) == ["nb1_3"] and denied["nb1_3"].rule == "scope.excluded"
    assert not any(e.type == "tool_call_started" for e in events)  # nothing ran
    state = agent.store.run_state(result.run_id)
    assert state.steps["nb1_0"].status == "failed" and state.steps["nb1_3"].status == "denied"
    assert (tmp_path / "there.txt").read_text() == "x\n"
    messages = [m["content"] for m in state.turns if m.get("role") == "tool"]
    assert messages[0].startswith("Error:") and messages[3].startswith("Denied by policy:")
