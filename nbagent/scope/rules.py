"""The file scope: which paths the agent's file tools may touch, and how.

Deny by default. A path is allowed only if every check passes, and each denial names its rule and reason:

1. syntax: a non-empty string without NUL bytes, control or invisible characters, look-alikes of path syntax
   (a fullwidth solidus, a one-dot leader...), backslashes, a leading `~`, over-long names;
2. containment: the path, with `..` resolved and every symbolic link followed (realpath), is inside the root;
   a symlink loop is refused; the root itself is the notebook's folder or below it unless
   `allow_outside_base` says otherwise;
3. exclusion: gitignore-style patterns, matched on the path as written and as resolved, case-insensitively
   and in Unicode compatibility form (so `.ENV`, or `.env` spelt with a fullwidth letter, do not slip past
   `.env`): by default (`DEFAULT_EXCLUDES`) the nbagent store, `.git`, `.env` and its editor backups, keys,
   `.ssh`, `.jupyter`, cloud credentials, the token files of ML platforms (Kaggle, Hugging Face, GitHub CLI,
   Databricks, Vault...) and other secrets. A scope's `exclude` patterns come after these, so a negated
   pattern (`!token.json`) lets one back in; `default_excludes=False` drops them all;
4. policy: the operation (read, list, write, create, delete) is enabled, the path matches an include
   pattern and, when set, an allowed file type;
5. the file itself: a regular file (not a FIFO, device, socket or directory) for reads, writes and deletes;
   no other hard links (a hard link inside the folder can name a file outside it); size limits.

Checks run before the tool does anything (so a denial is an `authorization_denied` event). Then every use goes
through `nbagent.scope.beneath`: the checked path (symlinks already resolved) is reached from a descriptor of the root
without following any link (`openat2` with `RESOLVE_BENEATH`, or folder by folder with `O_NOFOLLOW`), the file is
opened, written, renamed or deleted relative to its folder's descriptor, and the opened file is compared with the
checked inode. A folder swapped for a link to somewhere outside, at any moment, makes the call fail ("changed");
it never makes it read or change anything outside.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import unicodedata
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Literal

import pathspec
from pydantic import BaseModel, ConfigDict, Field

from nbagent.scope.beneath import Beneath, Redirected
from nbagent.scope.links import LinkIndex
from nbagent.tools.base import ToolError

Operation = Literal["read", "list", "write", "create", "delete"]
ALL_OPERATIONS: frozenset[Operation] = frozenset({"read", "list", "write", "create", "delete"})

DEFAULT_EXCLUDES = [
    "*.nbagent/", "*.nbagent",  # the agent's own log
    ".git/", ".hg/", ".svn/",
    # .env and its editor backups and swap files (.env~, #.env#, .#.env, .env.swp, .env.bak), .envrc
    ".env*", "*.env", "\\#.env*#", ".#.env*", "..env*.sw?",
    ".ssh/", "id_*", "*.pem", "*.key", "*.p12", "*.pfx", "*.keystore", "*.jks", "*.gpg", "*.asc",
    ".jupyter/", ".ipython/", ".local/share/jupyter/",
    ".aws/", ".azure/", ".gcloud/", ".config/gcloud/", ".kube/", ".docker/", ".gnupg/",
    ".netrc", "_netrc", ".pgpass", ".pypirc", ".npmrc", ".git-credentials", "*credentials*",
    # token files of ML and cloud platforms: Kaggle, Hugging Face, GitHub CLI, Databricks, S3/boto, Vault, OAuth
    "kaggle.json", ".kaggle/", "**/huggingface/token", "**/huggingface/stored_tokens", ".huggingface/",
    "**/gh/hosts.yml", ".databrickscfg", ".boto", ".s3cfg", ".vault-token", "token.json", "token.pickle",
    "*service-account*.json", "*service_account*.json",
    "*secret*", "*.kdbx", ".bash_history", ".zsh_history", ".python_history",
]

# Characters that are, or look like, path syntax after Unicode compatibility normalisation...
_SYNTAX = set("/\\.~:")
# ...and look-alikes that normalisation leaves alone: slashes, dots and overlays drawn like them.
_LOOK_ALIKES = set("\u2044\u2215\u29f8\u2216\u29f5\u29f9\u3002\uff61\u2e31\u00b7\u2027\u0334\u0335\u0336\u0337"
                   "\u0338\u20e5\u20eb\u1735\u2cf9")
_MAX_NAME_BYTES = 255
_MAX_PATH_BYTES = 4096

# While a decided call runs (effects.bound): (operation, path as written) -> the path it resolved to when it was
# decided. A check that resolves it elsewhere now refuses: the call acts on what was decided, or not at all.
BOUND: ContextVar[dict[tuple[str, str], str] | None] = ContextVar("nbagent_bound_targets", default=None)


class ScopeDenied(ToolError):
    def __init__(self, rule: str, reason: str, path: str | None = None) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason
        self.path = path


class Scope(BaseModel):
    """Where and how the file tools may work. `root` defaults to the notebook's folder (`base`)."""

    model_config = ConfigDict(extra="forbid")
    root: Path
    base: Path | None = None  # the notebook's folder: the root may not be above it...
    allow_outside_base: bool = False  # ...unless this says so
    operations: set[Operation] = Field(default_factory=lambda: set(ALL_OPERATIONS))
    include: list[str] = Field(default_factory=lambda: ["**"])
    exclude: list[str] = Field(default_factory=list)
    default_excludes: bool = True
    file_types: list[str] | None = None  # e.g. [".csv", ".md"]: other suffixes are refused
    max_read_bytes: int = 2_000_000
    max_write_bytes: int = 2_000_000
    allow_hard_links: bool = False


class Resolved(BaseModel):
    real: Path  # every symlink followed
    rel: str  # posix, relative to the root: what the model and the log see
    exists: bool
    kind: Literal["file", "dir", "other", "missing"]
    size: int = 0
    inode: tuple[int, int] | None = None


def _kind(st: os.stat_result) -> Literal["file", "dir", "other"]:
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "other"


def _what(st: os.stat_result) -> str:
    mode = st.st_mode
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


@functools.lru_cache(maxsize=64)
def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec[pathspec.Pattern]:
    """Compiled once per list of patterns: every run guards its folder anew, with the same few lists, and compiling
    the default excludes is most of what making a guard costs. A compiled spec is only read after."""
    return pathspec.PathSpec.from_lines("gitignore", patterns)


class ScopeGuard:
    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        root = Path(os.path.realpath(scope.root))
        if not root.is_dir():
            raise ValueError(f"the scope's root {scope.root} is not a folder")
        if scope.base is not None and not scope.allow_outside_base:
            base = Path(os.path.realpath(scope.base))
            if root != base and base not in root.parents:
                raise ValueError(f"the scope's root {root} is outside the notebook's folder {base}; set "
                                 "allow_outside_base=True to allow that explicitly")
        self.root = root
        self.fs = Beneath(root)
        self._links: LinkIndex | None = None  # the folder's links, for the other names of a written file
        patterns = (DEFAULT_EXCLUDES if scope.default_excludes else []) + list(scope.exclude)
        self._exclude = _spec(tuple(patterns))
        self._include = _spec(tuple(scope.include))

    def other_names(self, rel: str) -> tuple[list[str], bool]:
        """The other names the file `rel` is reached by (links leading to it or to a folder holding it), and
        whether the folder's links could all be looked at (links.py)."""
        if self._links is None:
            self._links = LinkIndex(self.root)
        names = self._links.names_of(rel)
        return names, not self._links.partial

    # ------------------------------------------------------------------ checks

    def check(self, path: object, op: Operation, *, max_bytes: int | None = None) -> Resolved:
        """Resolve `path` for `op` or raise ScopeDenied naming the rule."""
        if op not in self.scope.operations:
            raise ScopeDenied("operation", f"{op} is switched off in this scope", str(path))
        text, real, rel = self.contain(path)
        decided = (BOUND.get() or {}).get((op, text))
        if decided is not None and decided != rel:
            raise ScopeDenied("changed", f"{text!r} now leads to {rel!r}, not to {decided!r} as when the call was "
                                         "decided (a link changed meanwhile); nothing was done", text)
        try:
            st = self.fs.lstat(rel)  # through descriptors: what is there now, links not followed
        except OSError as exc:
            raise self._unreachable(exc, text, real) from None
        if st is not None and stat.S_ISLNK(st.st_mode):  # the realpath left a link: a loop, or it changed since
            raise self._unreachable(Redirected(errno.ELOOP, "a symbolic link", rel), text, real)
        resolved = Resolved(real=Path(real), rel=rel, exists=st is not None,
                            kind=_kind(st) if st is not None else "missing", size=st.st_size if st else 0,
                            inode=(st.st_dev, st.st_ino) if st else None)
        self._fits(resolved, st, op, text, max_bytes)
        return resolved

    def contain(self, path: object) -> tuple[str, str, str]:
        """Syntax, containment, exclusion and include: (path as given, realpath, path relative to the root)."""
        text = self._syntax(path)
        candidate = Path(text) if os.path.isabs(text) else self.root / text
        lexical = os.path.normpath(candidate)
        if not self._inside(lexical):
            raise ScopeDenied("outside", f"{text!r} is outside the notebook's folder", text)
        real = self._realpath(candidate, text)
        if not self._inside(real):
            raise ScopeDenied("symlink_escape", f"{text!r} leads outside the notebook's folder through a symbolic "
                                                "link", text)
        rel_lexical = os.path.relpath(lexical, self.root)
        rel = Path(os.path.relpath(real, self.root)).as_posix()
        for candidate_rel in {Path(rel_lexical).as_posix(), rel}:
            self._not_excluded(candidate_rel, text)
        if rel != "." and not self._matches(self._include, rel, is_dir=False):
            raise ScopeDenied("include", f"{text!r} is not in the folders this scope includes", text)
        return text, real, rel

    def _syntax(self, path: object) -> str:
        if not isinstance(path, str):
            raise ScopeDenied("syntax", f"a path must be a string, not {type(path).__name__}")
        # the length first: each look below walks the path, and a path of millions of characters is refused at once
        long = f"{len(path):,} characters" if len(path) > _MAX_PATH_BYTES else \
            f"{n:,} bytes" if (n := len(path.encode("utf-8", "surrogatepass"))) > _MAX_PATH_BYTES else None
        if long is not None:
            raise ScopeDenied("too_long", f"the path is {long} long, over the {_MAX_PATH_BYTES:,} bytes a path may "
                                          "have", path[:80] + "…")
        if not path.strip():
            raise ScopeDenied("syntax", "the path is empty")
        if "\x00" in path:
            raise ScopeDenied("nul_byte", "the path contains a NUL byte", path)
        for ch in path:
            category = unicodedata.category(ch)
            if category in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp"):
                raise ScopeDenied("invisible_character", f"the path contains an invisible or control character "
                                                         f"(U+{ord(ch):04X})", path)
            if ch in _LOOK_ALIKES or (ch not in _SYNTAX and set(unicodedata.normalize("NFKC", ch)) & _SYNTAX):
                raise ScopeDenied("look_alike", f"the path contains {ch!r} (U+{ord(ch):04X}), a look-alike of "
                                                "path syntax", path)
        if "\\" in path:
            raise ScopeDenied("syntax", "the path contains a backslash; use / between folders", path)
        if path.startswith("~"):
            raise ScopeDenied("home", "paths starting with ~ are not expanded; give a path relative to the "
                                      "notebook's folder", path)
        if any(len(part.encode("utf-8")) > _MAX_NAME_BYTES for part in path.split("/")):
            raise ScopeDenied("too_long", "a name in the path is longer than 255 bytes", path[:80] + "…")
        return path

    def _inside(self, path: str | Path) -> bool:
        p = os.path.normpath(path)
        return p == str(self.root) or p.startswith(str(self.root).rstrip("/") + "/")

    def _realpath(self, candidate: Path, text: str) -> str:
        try:
            return os.path.realpath(candidate, strict=False)
        except OSError as exc:  # pragma: no cover - realpath(strict=False) rarely raises
            raise ScopeDenied("unresolvable", f"{text!r} cannot be resolved ({exc.strerror})", text) from None

    @staticmethod
    def _matches(spec: pathspec.PathSpec[pathspec.Pattern], rel: str, *, is_dir: bool) -> bool:
        return spec.match_file(rel + "/" if is_dir else rel)

    def _not_excluded(self, rel: str, text: str) -> None:
        if rel in (".", ""):
            return
        variants = {rel, rel.casefold(), unicodedata.normalize("NFKC", rel).casefold()}
        for v in variants:
            parts = v.split("/")
            # a pattern for a folder (".git/") must also catch the folder itself and anything under it
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            if self._exclude.match_file(v) or any(self._exclude.match_file(p + "/") for p in prefixes):
                raise ScopeDenied("excluded", f"{text!r} is excluded from the agent's reach (secrets, version "
                                              "control and the agent's own log are off limits)", text)

    def _fits(self, r: Resolved, st: os.stat_result | None, op: Operation, text: str, max_bytes: int | None
              ) -> None:
        s = self.scope
        if (op in ("read", "write", "create") and s.file_types is not None and r.kind != "dir"
                and Path(r.rel).suffix.lower() not in {t.lower() for t in s.file_types}):
            raise ScopeDenied("file_type", f"{text!r}: only {', '.join(s.file_types)} files are allowed", text)
        if op == "create":
            if r.exists or os.path.lexists(r.real):
                raise ScopeDenied("exists", f"{text!r} already exists; use write_file to change it", text)
            return
        if op == "list":
            if st is None:
                raise ScopeDenied("missing", f"{text!r} does not exist", text)
            if r.kind != "dir":
                raise ScopeDenied("not_a_folder", f"{text!r} is not a folder", text)
            return
        if st is None:
            raise ScopeDenied("missing", f"{text!r} does not exist"
                              + ("; use create_file for a new file" if op == "write" else ""), text)
        if r.kind != "file":
            raise ScopeDenied("not_a_file", f"{text!r} is {_what(st)}, not a regular file", text)
        if st.st_nlink > 1 and not s.allow_hard_links:
            raise ScopeDenied("hard_link", f"{text!r} has other hard links, which may be outside the folder", text)
        limit = max_bytes if max_bytes is not None else s.max_read_bytes
        if op == "read" and limit and st.st_size > limit:
            raise ScopeDenied("too_large", f"{text!r} is {st.st_size:,} bytes, over the {limit:,}-byte limit for "
                                           "a whole-file read; read a line range instead", text)

    def _unreachable(self, exc: OSError, text: str, real: str) -> ScopeDenied:
        """Why a checked path could not be reached through descriptors: a loop, a file used as a folder, or (the
        realpath said there was no link on the way, and now there is one) the folder changed meanwhile."""
        try:
            os.stat(real)  # only to name the reason: nothing is read, and the answer grants no access
            why: int | None = 0
        except OSError as again:
            why = again.errno
        if why == errno.ELOOP:
            return ScopeDenied("symlink_loop", f"{text!r} is a symbolic link loop", text)
        if why == errno.ENOTDIR:
            return ScopeDenied("unreadable", f"{text!r} cannot be examined (a name on the way is not a folder)", text)
        if isinstance(exc, Redirected):
            return ScopeDenied("changed", f"{text!r} changed while it was being checked (a folder on the way was "
                                          "replaced by a link or moved); nothing was done; try again", text)
        return ScopeDenied("unreadable", f"{text!r} cannot be examined ({exc.strerror})", text)

    def check_write_size(self, content: str, text: str) -> None:
        size = len(content.encode("utf-8"))
        if size > self.scope.max_write_bytes:
            raise ScopeDenied("too_large", f"writing {size:,} bytes to {text!r} is over the "
                                           f"{self.scope.max_write_bytes:,}-byte limit", text)

    # ------------------------------------------------------------------ safe use

    def open_read(self, r: Resolved) -> IO[bytes]:
        """Open a checked file through descriptors (see `nbagent.scope.beneath`), re-checking the opened file: same
        inode,
        regular, one link."""
        try:
            fd = self.fs.open(r.rel, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise self.changed(r, exc) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != r.inode or (
                st.st_nlink > 1 and not self.scope.allow_hard_links):
            os.close(fd)
            raise ScopeDenied("changed", f"{r.rel!r} changed between the check and the read; try again", r.rel)
        return os.fdopen(fd, "rb")

    def recheck(self, r: Resolved) -> None:
        """Right before a write or delete: the path still names the file that was checked (same inode, a single
        link, not a symlink), or ScopeDenied."""
        self.open_read(r).close()

    @staticmethod
    def changed(r: Resolved, exc: OSError) -> ScopeDenied:
        """The error for a checked path that could not be used as checked."""
        return ScopeDenied("changed", f"{r.rel!r} could not be used safely ({exc.strerror or exc}); it or a folder "
                                      "on the way was replaced or moved meanwhile, and nothing was done; try again",
                           r.rel)

    def write(self, r: Resolved, data: bytes, *, create: bool) -> int:
        """Write a checked file atomically through descriptors: `create` makes missing folders and refuses an
        existing name; otherwise the file must still be the one checked."""
        try:
            return self.fs.write(r.rel, data, exclusive=create, expect=None if create else r.inode,
                                 create_parents=create)
        except FileExistsError:
            raise ToolError(f"{r.rel!r} was created by someone else meanwhile; nothing written") from None
        except OSError as exc:
            raise self.changed(r, exc) from None

    def delete(self, r: Resolved) -> None:
        """Delete a checked file through its folder's descriptor, if it is still the file checked."""
        try:
            self.fs.unlink(r.rel, expect=r.inode)
        except OSError as exc:
            raise self.changed(r, exc) from None
