"""How the reference filesystem server (npm `@modelcontextprotocol/server-filesystem`) reads a path, mirrored.

The server does not read a relative path from its working folder: it tries each of its allowed directories in
order and takes the first under which the path stays inside one of them (else the first directory); `~` and `~/x`
are the home folder; a Windows drive path is refused; an existing path is followed through its links, and a missing
one is matched component by component (a name equal to an entry under Unicode NFC is that entry). Its allowed
directories are its arguments (each `~`-expanded, resolved from its working folder, kept as written and with links
followed, existing folders only), replaced by the client's roots when the client declares the roots capability.
Mirrored from its dist/lib.js, path-utils.js, path-validation.js and roots-utils.js (version 2026.8.31); a test
compares this module with the server's own `validatePath` (tests/test_mcp_server_rules.py).

`resolve_path` answers the absolute path the server would act on, or why it refuses; nbagent's file scope then
judges that path, and the call is sent with the path nbagent decided (absolute), so what it acts on is exactly
what was decided whichever directories the server holds at that moment.
"""

from __future__ import annotations

import os
import posixpath
import re
import unicodedata
from collections.abc import Sequence

PACKAGE = "@modelcontextprotocol/server-filesystem"
BIN = "mcp-server-filesystem"
_DRIVE = re.compile(r"^[A-Za-z]:(?:[\\/]|$)")
# JavaScript's String.prototype.trim(): white space and line terminators (the scope refuses the rest anyway)
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028" \
            "\u2029\u202f\u205f\u3000\ufeff"


class Refused(ValueError):
    """The server would refuse this path (its own message, as it would say it)."""


def node_resolve(*parts: str) -> str:
    """Node's `path.resolve` on POSIX: joined from the right until absolute, normalised, no trailing slash."""
    joined = ""
    for part in reversed(parts):
        if not part:
            continue
        joined = part + ("/" + joined if joined else "")
        if part.startswith("/"):
            break
    if not joined.startswith("/"):
        joined = os.getcwd() + "/" + joined
    norm = posixpath.normpath(joined)
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def normalize(p: str) -> str:
    """The server's `normalizePath` on POSIX: trimmed, one surrounding quote off each end; an absolute path has its
    repeated slashes collapsed and a trailing slash removed; a relative one is `path.normalize`d."""
    p = re.sub(r"^[\"']|[\"']$", "", p.strip(_JS_SPACE))
    if p.startswith("/"):
        p = re.sub(r"/+", "/", p)
        return p[:-1] if len(p) > 1 and p.endswith("/") else p
    norm = posixpath.normpath(p) if p else "."
    return norm + "/" if p.endswith("/") and norm != "." else norm


def expand_home(p: str, home: str) -> str:
    return posixpath.join(home, p[1:].lstrip("/")) if p == "~" or p.startswith("~/") else p


def within(path: str, dirs: Sequence[str]) -> bool:
    """`isPathWithinAllowedDirectories`: the same folder or below one of them."""
    if not path or "\0" in path or not dirs:
        return False
    target = node_resolve(posixpath.normpath(path))
    for d in dirs:
        if not d or "\0" in d:
            continue
        top = node_resolve(posixpath.normpath(d))
        if target == top or (top == "/" and target.startswith("/")) or target.startswith(top + "/"):
            return True
    return False


def allowed_from_args(args: Sequence[str], cwd: str, home: str) -> list[str]:
    """The allowed directories the server starts with: each argument `~`-expanded, resolved from its working
    folder, as written and with links followed when that differs, existing folders only."""
    out: list[str] = []
    for arg in args:
        absolute = node_resolve(cwd, expand_home(arg, home))
        original = normalize(absolute)
        try:
            real = normalize(os.path.realpath(absolute, strict=True))
        except (OSError, ValueError):
            out.append(original)
            continue
        out += [original, real] if real != original else [real]
    return [d for d in out if os.path.isdir(d)]


def allowed_from_roots(roots: Sequence[str]) -> list[str]:
    """`getValidRootDirectories`: each root folder with its links followed, existing folders only."""
    out = []
    for root in roots:
        try:
            real = normalize(os.path.realpath(node_resolve(root), strict=True))
        except (OSError, ValueError):
            continue
        if os.path.isdir(real):
            out.append(real)
    return out


def _relative(rel: str, allowed: Sequence[str], cwd: str) -> str:
    if not allowed:
        return node_resolve(cwd, rel)
    for d in allowed:
        candidate = node_resolve(d, rel)
        if within(normalize(candidate), allowed):
            return candidate
    return node_resolve(allowed[0], rel)


def _unicode_equivalent(absolute: str, allowed: Sequence[str]) -> str:
    """`resolveUnicodeEquivalentPath`: a path that does not exist, walked from its allowed directory: each name
    that exists (or one entry equal to it under NFC) is followed through its links; the missing rest is appended."""
    by_length = sorted(allowed, key=len, reverse=True)
    top = next((d for d in by_length if within(normalize(absolute), [d])), None)
    if top is None:
        return absolute
    current = os.path.realpath(top, strict=True)
    parts = [p for p in posixpath.relpath(absolute, top).split("/") if p and p != "."]
    for i, part in enumerate(parts):
        entries = os.listdir(current)  # NotADirectoryError: the server fails too
        matches = [part] if part in entries else [e for e in entries if unicodedata.normalize("NFC", e)
                                                  == unicodedata.normalize("NFC", part)]
        if len(matches) > 1:
            raise Refused(f"Ambiguous Unicode path component: {part}")
        if not matches:
            return posixpath.join(current, *parts[i:])
        current = os.path.realpath(posixpath.join(current, matches[0]), strict=True)
        if not within(normalize(current), allowed):
            raise Refused(f"Access denied - symlink target outside allowed directories: {current}")
    return current


def resolve_path(requested: str, allowed: Sequence[str], cwd: str, home: str) -> str:
    """`validatePath`: the absolute path the server acts on for `requested`, or Refused with its reason."""
    expanded = expand_home(requested, home)
    if _DRIVE.match(expanded):
        raise Refused(f"Access denied - Windows-style path received on a POSIX host: {requested}")
    absolute = node_resolve(expanded) if expanded.startswith("/") else _relative(expanded, allowed, cwd)
    if not within(normalize(absolute), allowed):
        raise Refused(f"Access denied - path outside allowed directories: {absolute} not in {', '.join(allowed)}")
    try:
        real = os.path.realpath(absolute, strict=True)
    except FileNotFoundError:
        try:
            return _unicode_equivalent(absolute, allowed)
        except FileNotFoundError:
            raise Refused(f"Parent directory does not exist: {posixpath.dirname(absolute)}") from None
        except OSError as exc:
            raise Refused(f"{exc.strerror}: {absolute}") from None
    except OSError as exc:
        raise Refused(f"{exc.strerror}: {absolute}") from None
    if not within(normalize(real), allowed):
        raise Refused(f"Access denied - symlink target outside allowed directories: {real}")
    return real


def server_args(command: str, args: Sequence[str]) -> list[str] | None:
    """The arguments the reference filesystem server gets from this command line (its allowed directories), or
    None when the command does not run it: `npx -y @modelcontextprotocol/server-filesystem DIR...` (bunx, pnpm dlx,
    yarn dlx, npm exec, a version after `@`), `mcp-server-filesystem DIR...`, `node .../server-filesystem/dist/
    index.js DIR...`. The first word that is no option must name it (a wrapper that runs it is another server)."""
    name = posixpath.basename(command.replace("\\", "/")).lower()
    if name in (BIN, BIN + ".cmd"):
        return list(args)
    launcher = name in _LAUNCHERS
    if not launcher and not _NODE.fullmatch(name):
        return None
    for i, word in enumerate(args):
        if word.startswith("-") or (launcher and word in ("dlx", "exec", "x")):
            continue
        plain = word.replace("\\", "/")
        if launcher and (word in (PACKAGE, BIN) or word.startswith(PACKAGE + "@")):
            return list(args[i + 1:])
        if not launcher and plain.endswith(("/server-filesystem/dist/index.js", "/" + BIN)):
            return list(args[i + 1:])
        return None
    return None


_LAUNCHERS = frozenset({"npx", "npx.cmd", "bunx", "pnpx", "pnpm", "yarn", "npm", "npm.cmd"})
_NODE = re.compile(r"node(?:js)?(?:[0-9.]*)(?:\.exe)?")
