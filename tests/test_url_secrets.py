"""Credentials in URLs are redacted wherever they appear (nbagent/secrets/redactor.py `URL_CREDENTIALS`), and an MCP
server's
config makes the passwords of the URLs in its arguments, env and headers known secrets (nbagent/mcp.py
`ServerConfig`), so a server that echoes its `postgresql://admin:PW@db` or only `PW` on stderr never puts it in the
"did not start" line, `nbagent run`'s output or the saved notebook."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent import mcp
from nbagent.secrets.redactor import REDACTED, Redactor, StreamRedactor, url_secrets

# ---------------------------------------------------------------------------------------------- the rule


def test_the_password_of_a_url_goes_and_the_user_stays() -> None:
    r = Redactor()
    cases = {
        "postgresql://admin:Sh0rt@db/prod": f"postgresql://admin:{REDACTED}@db/prod",
        "DATABASE_URL=mysql://app:p%40ss@db:3306/x?ssl=1": f"DATABASE_URL=mysql://app:{REDACTED}@db:3306/x?ssl=1",
        "use postgresql://admin:p@ss@db/prod now": f"use postgresql://admin:{REDACTED}@db/prod now",  # the last @
        '["server.js", "redis://:hunter2@cache:6379/0"]': f'["server.js", "redis://:{REDACTED}@cache:6379/0"]',
        "git clone https://oauth2:tok3nValue@gitlab.example.org/g/r.git":
            f"git clone https://oauth2:{REDACTED}@gitlab.example.org/g/r.git",
        # a user part alone that looks like a token
        "https://0123456789abcdef0123abcd@github.com/o/r.git": f"https://{REDACTED}@github.com/o/r.git",
        "https://Zq8vT2mN4kL7pR1x@git.example.org/r": f"https://{REDACTED}@git.example.org/r",
    }
    for text, expected in cases.items():
        assert r.text(text) == expected, text


def test_urls_without_credentials_are_left_alone() -> None:
    r = Redactor()
    for text in ["https://git@github.com/o/r.git", "ssh://git@github.com:22/o/r", "http://127.0.0.1:8000/mcp",
                 "https://example.org/a:b@c", "https://x-access-token@github.com/o/r", "mailto:alice@example.org",
                 "see https://docs.python.org/3/library/reprlib.html and write to bob@example.org",
                 "https://firstname.lastname@host.example.org/"]:
        assert r.text(text) == text


def test_url_secrets_gives_each_password_as_written_and_decoded() -> None:
    assert url_secrets("postgresql://app:p%40ss-w0rd@db/x and https://u:two@h") == ["p%40ss-w0rd", "two",
                                                                                   "p@ss-w0rd"]
    assert url_secrets("https://git@github.com/o/r") == []


# ---------------------------------------------------------------------------------------------- streamed text


def _stream(r: Redactor, text: str, cuts: list[int]) -> tuple[list[str | None], str]:
    events: list[str | None] = []
    s = StreamRedactor(r, events.append, lambda: events.append(None))
    points = [0, *sorted({c for c in cuts if 0 < c < len(text)}), len(text)]
    for a, b in itertools.pairwise(points):
        s.feed(text[a:b])
    s.close()
    shown = ""
    for e in events:
        shown = "" if e is None else shown + e
    return events, shown


PASSWORD = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789%!$&*+=~_-", min_size=1, max_size=30)
USER = st.text("abcdefghijklmnopqrstuvwxyz", max_size=10)
FILLER = st.text("abcdefghijklmnopqrstuvwxyz .,;!?()\n", max_size=60)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(password=PASSWORD, user=USER, before=FILLER, after=FILLER, scheme=st.sampled_from(["postgresql", "https"]),
       tail=st.sampled_from(["", "/prod", ":5432/db?x=1"]), cuts=st.lists(st.integers(0, 200), max_size=40))
def test_a_stream_shows_no_url_password_and_ends_as_the_whole_text(password: str, user: str, before: str,
                                                                     after: str, scheme: str, tail: str,
                                                                     cuts: list[int]) -> None:
    url = f"{scheme}://{user}:{password}@db.example.org{tail}"
    text = f"{before} {url} {after}"
    r = Redactor()
    events, shown = _stream(r, text, cuts)
    assert shown == r.text(text)
    if not any(word in user for word in ("pass", "pwd", "secret", "credential", "api", "access", "private", "auth",
                                         "refresh", "token", "key")):
        # (a user named like a secret, "credential:0@host", is also an assignment: more is redacted, never less)
        assert f"{user}:{REDACTED}@db.example.org{tail}" in shown
    so_far = ""
    for e in events:  # nothing shown at any moment holds the password
        so_far = "" if e is None else so_far + e
        assert f":{password}@" not in so_far


# ---------------------------------------------------------------------------------------------- a real MCP server

# A stdio "server" that prints its arguments, its DATABASE_URL and the passwords alone to stderr, and exits 1 (how
# a database server that cannot connect fails).
SERVER = """\
import os, sys
from urllib.parse import unquote, urlsplit
urls = [sys.argv[1], os.environ["DATABASE_URL"]]
print("argv:", *sys.argv[1:], file=sys.stderr)
print("DATABASE_URL=" + urls[1], file=sys.stderr)
print("cannot log in with", *(unquote(urlsplit(u).password) for u in urls), file=sys.stderr)
sys.exit(1)
"""
ARG_PW = "Adm1n-Pa55w0rd-Q7x"
ENV_PW_WRITTEN, ENV_PW = "App%40S3cret-Value-99", "App@S3cret-Value-99"


def _config(folder: Path) -> dict[str, Any]:
    (folder / "echo_server.py").write_text(SERVER)
    return {"mcpServers": {"db": {
        "command": sys.executable, "args": [str(folder / "echo_server.py"), f"postgresql://admin:{ARG_PW}@db/prod"],
        "env": {"DATABASE_URL": f"postgresql://app:{ENV_PW_WRITTEN}@db:5432/app"}, "timeout": 10}}}


def _leaks(text: str) -> list[str]:
    return [pw for pw in (ARG_PW, ENV_PW_WRITTEN, ENV_PW) if pw in text]


def test_the_did_not_start_line_of_the_python_api_redacts_to_no_password(tmp_path: Path) -> None:
    """The line holds the command (with the URL argument) and the server's stderr (the URLs and the passwords
    alone); what nbagent shows of it (`Redactor().text`, as the cell and `nbagent run` do) holds no password."""
    problems: list[str] = []
    mcp.tools(_config(tmp_path), folder=tmp_path, on_problem=problems.append)
    (line,) = problems
    assert "did not start" in line and "its stderr ends" in line and "cannot log in with" in line
    shown = Redactor().text(line)
    assert _leaks(shown) == [], shown
    assert f"postgresql://admin:{REDACTED}@db/prod" in shown and f"postgresql://app:{REDACTED}@db:5432/app" in shown
    assert f"cannot log in with {REDACTED} {REDACTED}" in shown


def test_the_python_api_gives_on_problem_redacted_lines(tmp_path: Path) -> None:
    problems: list[str] = []
    mcp.tools(_config(tmp_path), folder=tmp_path, on_problem=problems.append)
    assert problems and _leaks(" ".join(problems)) == []


@pytest.mark.kernel
def test_nbagent_run_shows_and_saves_no_password_of_a_server_that_did_not_start(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text(json.dumps(_config(tmp_path)))
    (tmp_path / "s.json").write_text(json.dumps({"turns": [{"content": "Nothing to do."}]}))
    nb = nbformat.v4.new_notebook()
    # a server from a file starts once a person trusted it (docs/mcp.md): the trust's line is redacted too
    nb.cells = [nbformat.v4.new_code_cell(src) for src in ["%load_ext nbagent", "%agent trust db",
                                                           "%%agent --script s.json\nhello"]]
    nbformat.write(nb, tmp_path / "a.ipynb")
    exe = Path(sys.executable).with_name("nbagent")
    done = subprocess.run([str(exe), "run", "a.ipynb", "-o", "out.ipynb"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=400, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    saved = (tmp_path / "out.ipynb").read_text()
    cell = nbformat.reads(saved, as_version=4).cells[2]
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    line = next(x for x in text.splitlines() if "did not start" in x)
    assert line.startswith("nbagent: MCP server 'db'") and "cannot log in with" in line
    assert f"postgresql://admin:{REDACTED}@db/prod" in line and f"cannot log in with {REDACTED} {REDACTED}" in line
    log = b"".join(p.read_bytes() for p in (tmp_path / "a.nbagent").iterdir() if p.is_file()).decode()
    for where, content in {"cell": text, "notebook": saved, "log": log, "stdout": done.stdout,
                           "stderr": done.stderr}.items():
        assert _leaks(content) == [], where
