"""The file tools stay bounded on hostile input: a catastrophic regex, a 2 GB line, a huge folder (issue 12).

Calls that hung or ran out of memory before the fix run in a subprocess with a generous timeout, so a regression
fails instead of hanging the test run; the assertions are on the results, never on how long they took.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nbagent.scope.rules import Scope
from nbagent.tools import file_search, files
from nbagent.tools.base import ToolError
from nbagent.tools.files import FileTools

GUARD_SECONDS = 60  # only a guard against a hang; never asserted on
MEMORY_CAP = 1_200_000_000
GB2 = 2 * 1024**3


def run_child(code: str, *args: str) -> dict:
    """Run `code` in a fresh interpreter; its last line of output is JSON."""
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                              timeout=GUARD_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the call did not finish within {GUARD_SECONDS} s (the guard): it hangs")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


CATASTROPHIC = "(a+)+$"  # Python's re backtracks 2**40 times on 40 a's and a "!"


def test_catastrophic_regex_through_the_tool_finishes(tmp_path: Path) -> None:
    (tmp_path / "evil.txt").write_text("a" * 40 + "!\n" + "a" * 40 + "\n")
    out = run_child("""
        import json, sys
        from pathlib import Path
        from nbagent.scope.rules import Scope
        from nbagent.tools.files import FileTools
        root = Path(sys.argv[1])
        ft = FileTools(Scope(root=root, base=root))
        print(json.dumps([ft.search_content("(a+)+$", regex=True), ft.search_content("(a+)+!", regex=True)]))
    """, str(tmp_path))
    anchored, bang = out
    assert anchored["matches"] == [{"path": "evil.txt", "line": 2, "text": "a" * 40}]
    assert bang["matches"] == [{"path": "evil.txt", "line": 1, "text": "a" * 40 + "!"}]


def test_catastrophic_and_unsupported_regexes_through_the_agent_loop(tmp_path: Path) -> None:
    """A model's catastrophic pattern finishes; its backreference is an error it sees; the run goes on."""
    (tmp_path / "evil.txt").write_text("a" * 40 + "!\n")
    out = run_child("""
        import asyncio, json, sys
        from pathlib import Path
        from nbagent.runtime import Agent
        from nbagent.scope.rules import Scope
        from nbagent.tools.files import file_tools
        root = Path(sys.argv[1])
        turns = [
            {"tool_calls": [{"name": "search_content", "arguments": {"pattern": "(a+)+$", "regex": True}}]},
            {"tool_calls": [{"name": "search_content", "arguments": {"pattern": r"(a)\\1", "regex": True}}]},
            {"tool_calls": [{"name": "search_content", "arguments": {"pattern": "a!", "regex": True}}]},
            {"content": "searched"},
        ]
        agent = Agent(script={"turns": turns}, tools=file_tools(Scope(root=root, base=root)), autonomy="L1",
                      store=root / "nb.ipynb")
        result = asyncio.run(agent.run("search"))
        events = agent.store.run_events(result.run_id)
        state = agent.store.run_state(result.run_id)
        print(json.dumps({
            "status": str(result.status.value),
            "events": [[e.type, getattr(e.payload, "error", None)] for e in events
                       if e.type in ("tool_call_completed", "tool_call_failed")],
            "tool_messages": [m["content"] for m in state.messages if m["role"] == "tool"],
        }))
    """, str(tmp_path))
    assert out["status"] == "completed_with_errors"  # finished: the failed call is recorded, not fatal
    kinds = [kind for kind, _ in out["events"]]
    assert kinds == ["tool_call_completed", "tool_call_failed", "tool_call_completed"]
    error = out["events"][1][1]
    assert "RE2 does not support" in error and "backreferences" in error and "Simplify the pattern" in error
    seen = [json.loads(m) if m.startswith("{") else m for m in out["tool_messages"]]
    assert seen[0] == {"matches": [], "files_searched": 1}
    assert seen[1].startswith("Error: the regular expression '(a)\\\\1' uses syntax that RE2 does not support")
    assert "no backreferences" in seen[1]  # the model is told what is unsupported, and to simplify
    assert seen[2]["matches"] == [{"path": "evil.txt", "line": 1, "text": "a" * 40 + "!"}]


@pytest.mark.parametrize(("pattern", "words"), [
    (r"(\w+) \1", "backreferences"),
    (r"(?P<x>a)(?P=x)", "backreferences"),
    (r"foo(?=bar)", "lookahead"),
    (r"(?<!x)y", "lookbehind"),
    (r"end\Z", r"\z"),
    (r"a++", "possessive"),
    (r"a{2000}", "repetition counts"),
])
def test_unsupported_regex_syntax_is_a_clear_tool_error(tmp_path: Path, pattern: str, words: str) -> None:
    (tmp_path / "t.txt").write_text("foobar\n")
    ft = FileTools(Scope(root=tmp_path, base=tmp_path))
    with pytest.raises(ToolError, match="RE2 does not support") as exc:
        ft.search_content(pattern, regex=True)
    assert words in str(exc.value) and "regex=false" in str(exc.value)
    assert ft.search_content(pattern, regex=False)["matches"] == []  # as plain text it is fine


def test_an_invalid_regex_is_called_invalid(tmp_path: Path) -> None:
    ft = FileTools(Scope(root=tmp_path, base=tmp_path))
    with pytest.raises(ToolError, match="invalid regular expression '\\(\\[': missing \\]"):
        ft.search_content("([", regex=True)


HUGE = """
    import json, resource, sys
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
    try:
        bytearray(1_500_000_000)
        raise SystemExit("the memory cap is not in force")
    except MemoryError:
        pass
    from nbagent.scope.rules import Scope
    from nbagent.tools.files import FileTools
    root = Path(sys.argv[1])
    with open(root / "one_line.txt", "wb") as f:  # 8 KB of text, then a hole: one line of 2 GB
        f.write(b"x" * 8192)
        f.truncate({size})
    with open(root / "lines.txt", "wb") as f:  # text lines, then the hole
        f.write(b"".join(b"row %05d\\n" % i for i in range(1000)))
        f.truncate({size})
    ft = FileTools(Scope(root=root, base=root))
    out = {{"blocks": (root / "one_line.txt").stat().st_blocks * 512}}
    for name in ("one_line.txt", "lines.txt"):
        out[name] = ft.read_file(name, start_line=1, end_line=1)
    out["search"] = ft.search_content("x")
    out["search_rows"] = ft.search_content("row 00099")
    print(json.dumps(out))
"""


def test_a_huge_line_is_read_and_searched_within_a_memory_cap(tmp_path: Path) -> None:
    out = run_child(HUGE.format(cap=MEMORY_CAP, size=GB2), str(tmp_path))
    assert out["blocks"] < 10_000_000  # sparse: the 2 GB take no disk
    line = out["one_line.txt"]
    assert line["content"] == "x" * 8192 and line["lines"] == "1-1"
    assert "binary data (a NUL byte) at byte 8,192" in line["truncated"]
    rows = out["lines.txt"]
    assert rows["content"] == "row 00000\n"
    assert rows["lines"].startswith("1-1 of at least 1,001 (counted in the first")
    found = out["search"]
    assert found["matches"] == [{"path": "one_line.txt", "line": 1, "text": "x" * 300}]
    assert "one_line.txt: binary data from byte 8,192; not searched past it" in found["partly_searched"]
    assert out["search_rows"]["matches"] == [{"path": "lines.txt", "line": 100, "text": "row 00099"}]


def test_a_line_longer_than_a_reply_is_cut_with_a_marker_and_start_byte_reads_on(tmp_path: Path) -> None:
    text = "é" * 30_000 + "x" * 50_000  # 110,000 bytes of UTF-8 in one line
    (tmp_path / "long.txt").write_text("first\n" + text + "\nlast\n")
    ft = FileTools(Scope(root=tmp_path, base=tmp_path))
    cut = ft.read_file("long.txt", start_line=2, end_line=3)
    assert cut["lines"] == "2-2" and cut["next_start_byte"] == 6 + 40_000
    assert cut["content"].startswith("é" * 20_000 + "\n[… line 2 is longer than one reply (40,000 bytes)")
    assert "read_file(path='long.txt', start_byte=40006) reads from there" in cut["content"]
    pieces, at = [cut["content"].split("\n[…")[0]], cut["next_start_byte"]
    while True:
        more = ft.read_file("long.txt", start_byte=at)
        pieces.append(more["content"])
        if "next_start_byte" not in more:
            break
        at = more["next_start_byte"]
    assert "".join(pieces) == text + "\nlast\n"  # byte offsets are exact, no character split or lost
    inside = ft.read_file("long.txt", start_byte=7)  # inside a 2-byte character: starts at the next one
    assert inside["bytes"].startswith("8-") and inside["content"].startswith("é")
    with pytest.raises(ToolError, match="start_byte"):
        ft.read_file("long.txt", start_line=2, start_byte=0)


def test_a_range_longer_than_a_reply_ends_at_a_line_and_says_where_to_go_on(tmp_path: Path) -> None:
    (tmp_path / "rows.txt").write_text("".join(f"{i:099d}\n" for i in range(1000)))  # 100 bytes a line
    ft = FileTools(Scope(root=tmp_path, base=tmp_path))
    part = ft.read_file("rows.txt", start_line=11, end_line=1000)
    assert part["lines"] == "11-410" and part["content"].endswith(f"{409:099d}\n")
    assert part["truncated"].endswith("lines 11-410 shown; read on with start_line=411")
    assert ft.read_file("rows.txt", start_line=999)["lines"] == "999-1,000 of 1,000"
    assert ft.read_file("rows.txt", start_line=2000)["lines"] == "none: the file has 1,000 lines"
    small = FileTools(Scope(root=tmp_path, base=tmp_path, max_read_bytes=250))
    assert small.read_file("rows.txt", start_line=5, end_line=9)["lines"] == "5-6"  # the scope's cap binds


def test_a_whole_read_cut_inside_a_line_says_how_to_read_on(tmp_path: Path) -> None:
    (tmp_path / "wide.csv").write_text("h\n" + "y" * 50_000 + "\n")
    whole = FileTools(Scope(root=tmp_path, base=tmp_path)).read_file("wide.csv")
    assert len(whole["content"]) == files.MAX_CONTENT_CHARS
    assert "cut inside line 2; read on with start_line=2, or start_byte=40000" in whole["truncated"]


def test_search_is_bounded_per_line_file_and_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_search, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(file_search, "MAX_SEARCH_FILE_BYTES", 1000)
    monkeypatch.setattr(file_search, "MAX_SEARCH_BYTES", 1500)
    (tmp_path / "a_long.txt").write_text("z" * 150 + "needle\n" + "needle here\n")  # 169 bytes
    (tmp_path / "b_big.txt").write_text("".join(f"row {i:05d}\n" for i in range(300)))  # 3,000 bytes
    (tmp_path / "c_more.txt").write_text("needle\n" + "filler line\n" * 42)  # 511 bytes
    (tmp_path / "d_never.txt").write_text("needle\n")
    ft = FileTools(Scope(root=tmp_path, base=tmp_path))
    out = ft.search_content("needle")
    assert out["matches"] == [{"path": "a_long.txt", "line": 2, "text": "needle here"},  # line 1's is past byte 100
                              {"path": "c_more.txt", "line": 1, "text": "needle"}]
    assert out["partly_searched"] == [
        "a_long.txt: 1 line longer than 100 bytes: only the first 100 bytes of each searched",
        "b_big.txt: searched the first 1,000 of 3,000 bytes (the limit per file)",
        "c_more.txt: searched the first 331 of 511 bytes (the limit of one search)",
    ]
    assert out["truncated"] == ("stopped after reading 1,500 bytes (the limit of one search); narrow the path or "
                                "the glob")
    assert out["files_searched"] == 3
    monkeypatch.setattr(file_search, "MAX_SEARCH_BYTES", 10**9)
    monkeypatch.setattr(file_search, "MAX_SEARCH_FILES", 2)
    capped = ft.search_content("needle")
    assert capped["files_searched"] == 2 and capped["truncated"].startswith("stopped after searching 2 files")
    assert len(ft.search_content("row", max_matches=10**6)["matches"]) == 100  # 1,000-byte cap: 100 rows
    with pytest.raises(ToolError, match="max_matches"):
        ft.search_content("row", max_matches=0)


def test_encoding_detection_looks_at_a_bounded_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import charset_normalizer

    seen: list[int] = []
    real = charset_normalizer.from_bytes

    def spy(data: bytes, *a: object, **kw: object) -> object:
        seen.append(len(data))
        return real(data, *a, **kw)

    monkeypatch.setattr(charset_normalizer, "from_bytes", spy)
    (tmp_path / "big.txt").write_bytes("café crème, déjà vu, naïve façade\n".encode("cp1252") * 100_000)  # 3.5 MB
    ft = FileTools(Scope(root=tmp_path, base=tmp_path))
    part = ft.read_file("big.txt", start_line=99_999, end_line=100_000)
    assert part["content"] == "café crème, déjà vu, naïve façade\n" * 2 and part["encoding"] == "cp1252"
    assert ft.search_content("DÉJÀ")["matches"][0] == {"path": "big.txt", "line": 1,
                                                       "text": "café crème, déjà vu, naïve façade"}
    assert seen and max(seen) <= files.SAMPLE_BYTES
