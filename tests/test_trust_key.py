"""This user's key (nbagent/store/seal.py, used by ipython/trust.py) is read without blocking and only when it is a good
key: a regular file of this user's, not a link, of at least 32 bytes (attack h10).

Was: `trust.key` was read with a plain read_bytes(), so a FIFO there hung the kernel at the first cell that checked an
MCP trust, and a file of fewer than 32 bytes was used as it was (an empty trust.key made every seal an HMAC with an
empty key, which anyone can compute). Now each is one line saying what is wrong, where, and "remove it and a new one
is made"; the key is never used. Subprocesses have a timeout as a guard against a hang, not as a timing.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbagent.ipython import trust
from nbagent.store import seal

ROOT = Path(__file__).resolve().parents[1]
NEW_ONE = "nbagent did not use it: remove it and a new one is made"


@pytest.fixture
def key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))  # read at call time: never the real key
    path = tmp_path / "user-data" / "nbagent" / "trust.key"
    path.parent.mkdir(parents=True)
    return path


def test_a_key_is_made_once_and_kept(key: Path) -> None:
    first = trust.seal("s", "/x/mcp.json", "d")
    assert key.stat().st_size == 32 and key.stat().st_mode & 0o777 == 0o600
    assert trust.seal("s", "/x/mcp.json", "d") == first == seal.seal("s", "/x/mcp.json", "d")
    assert trust.key_path() == key


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_at_the_key_is_refused_not_waited_on(key: Path) -> None:
    os.mkfifo(key)
    code = "from nbagent.ipython import trust; print(trust.seal('s', '/x/mcp.json', 'd'))"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode != 0 and done.stdout == ""
    assert f"{key}: the trust key is not a regular file (a named pipe (FIFO)); {NEW_ONE}" in done.stderr
    with pytest.raises(seal.KeyFileError, match="named pipe"):
        trust.seal("s", "/x/mcp.json", "d")


@pytest.mark.parametrize(("content", "why"), [(b"", "too short (0 bytes"), (b"k" * 31, "too short (31 bytes"),
                                              (b"k" * 5000, "too long")])
def test_a_short_or_bad_key_is_an_error_never_used(key: Path, content: bytes, why: str) -> None:
    key.write_bytes(content)
    key.chmod(0o600)
    with pytest.raises(seal.KeyFileError) as caught:
        trust.seal("s", "/x/mcp.json", "d")
    (line,) = str(caught.value).splitlines()
    assert line.startswith(f"{key}: the trust key is {why}") and line.endswith(NEW_ONE)
    assert key.read_bytes() == content  # left for the person to look at and remove
    key.unlink()
    made = trust.seal("s", "/x/mcp.json", "d")  # removed: a new one is made
    assert made != hmac.new(b"", b"s\0/x/mcp.json\0d", hashlib.sha256).hexdigest() and key.stat().st_size == 32


def test_a_key_that_is_a_link_is_refused(key: Path, tmp_path: Path) -> None:
    shipped = tmp_path / "project" / "key"
    shipped.parent.mkdir()
    shipped.write_bytes(b"k" * 32)
    os.symlink(shipped, key)
    with pytest.raises(seal.KeyFileError, match=f"the trust key is a symbolic link \\(to {shipped}\\); {NEW_ONE}"):
        trust.seal("s", "/x/mcp.json", "d")
    key.unlink()
    os.symlink(tmp_path / "nowhere", key)  # dangling: not made through it either
    with pytest.raises(seal.KeyFileError, match="symbolic link"):
        trust.seal("s", "/x/mcp.json", "d")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a file away")
def test_a_key_of_another_user_is_refused(key: Path) -> None:
    key.write_bytes(b"k" * 32)
    key.chmod(0o600)
    os.chown(key, 4242, -1)
    with pytest.raises(seal.KeyFileError, match=f"owned by another user \\(uid 4242\\); {NEW_ONE}"):
        trust.seal("s", "/x/mcp.json", "d")


def test_a_key_open_to_other_users_is_refused(key: Path) -> None:
    # Was (attack b13): a trust.key of mode 0644 sealed grants and trusts: anyone on the machine could read it and
    # seal in this user's name.
    key.write_bytes(b"k" * 32)
    key.chmod(0o644)
    with pytest.raises(seal.KeyFileError, match=f"open to other users \\(mode 644; it must be 600\\); {NEW_ONE}"):
        trust.seal("s", "/x/mcp.json", "d")
