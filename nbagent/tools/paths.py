"""Where a tool call's arguments name paths (tools/base.py's `Tool.paths` asks these).

Paths are found four ways (`Tool.paths`), and the runtime puts every one through the file scope: by type (a
parameter annotated `pathlib.Path`, alone or inside lists, dicts, dataclasses and pydantic models); by schema (a
property of the tool's JSON schema, at any depth, with `"format": "path"`, or a `uri` whose value is a `file:` URI:
an MCP server's tools declare no Python types); by name (a key naming a path in any spelling: `path`, `file_path`,
`absolutePath`, `repo-path`, `OutputDir`, `workingDirectory`, `cwd`, `dest`); and by value (a one-line string that
is an absolute path, `~...`, a `file:` URI or a Windows drive path, or that climbs with `..`, whatever its key).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel

# One word of a key that names a path (keys are split into words: absolutePath, repo-path, OutputDir, file_name).
PATH_NAME = re.compile(r"(?:file|dir|path|in|out|src|dst|dest|base|work|root|tmp|temp|log|data|home|sub|abs|rel|"
                       r"full)?(?:paths?|files?|dirs?|director(?:y|ies)|folders?|cwd|roots?|globs?)(?:names?|paths?)?"
                       r"|pathnames?|filenames?", re.IGNORECASE)
# Words that name where something comes from or goes to: a path when one line (`source`, `output_dir`), content
# when several (`input`, `source` holding a script)
WEAK_PATH_NAME = re.compile(r"(?:sources?|src|dst|dest|destinations?|inputs?|outputs?|targets?)", re.IGNORECASE)
# The last word of a key that holds content, not a path, whatever comes before (`fileContent`, `source_code`,
# `file_size`, `output_format`): only the value rule looks at it
NOT_A_PATH = frozenset({
    "content", "contents", "text", "texts", "code", "body", "data", "bytes", "base64", "string", "value", "values",
    "type", "types", "size", "sizes", "format", "formats", "encoding", "mode", "id", "ids", "hash", "count", "length",
    "language", "lang", "kind", "regex", "query", "message", "description", "title", "label", "template", "schema",
    "diff", "patch", "line", "lines", "offset", "limit", "ext", "extension", "url", "uri"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# A key written as one lowercase word (`savepath`, `outputdir`, `dbfile`, `fname`) names a path when it ends with one
# of these (or begins with one, below), so no spelling of a compound hides it from the scope
_COMPOUND_END = re.compile(r"(?:paths?|files?|(?:file|f)names?|dirs?|director(?:y|ies)|folders?|cwd|destinations?|"
                           r"locations?|roots?)$")
# ... and words that end so but name no path (`profile`, an XPath, `allocation`); `dest` ends superlatives (`oldest`,
# `closest`), so it counts only as a word of its own (`dest`, `destPath`)
_COMPOUND_NOT = re.compile(r"(?:profiles?|xpaths?|(?:al|col|geo)locations?)$")
# begins with one, the rest not a content word (`filelist`, `pathspec`; `filetype`, `filesize` are content). `dir`,
# `dest` and `root` do not count as beginnings: `direction`, `destroy`, `rooted`
_COMPOUND_START = re.compile(r"(?:paths?|files?|(?:file|f)names?|directory|folders?|cwd|destination|locations?)"
                             r"(?=[a-z])")
# where a call writes: `saveTo`, `save_as`, `exportTo`, `writeInto`
_WRITES_TO = re.compile(r"(?:save|write|export|output|out|dump|download|copy|move|extract|store|upload)(?:to|as|into)")
# a value that starts with an environment variable (`$HOME/x`, `${XDG_CONFIG_HOME}/x`, `%USERPROFILE%\x`): a server
# that expands it reads or writes outside the notebook's folder, and what it expands to is not known here
# (whatever its key: `$NAME` in capitals, then a separator, so `$price` or `$x/y$` is not one; under a key naming a
# path, any spelling and alone: `$home`, `%APPDATA%`)
_ENV_START = re.compile(r"\$(?:[A-Z_][A-Z0-9_]*|\{[^{}\s]+\})[\\/]|%[A-Za-z_][\w()]*%[\\/]")
_ENV_ANY = re.compile(r"\$(?:[A-Za-z_]\w*|\{[^{}]*\})(?:[\\/]|$)|%[A-Za-z_][\w()]*%(?:[\\/]|$)")
_ABSOLUTE = re.compile(r"/+(?:$|[^\s^$*+?()\[\]{}|\\/])|~[\w.-]*(?:$|[/\\])|file:|[A-Za-z]:[\\/]|\\\\",
                       re.IGNORECASE)
_CLIMBS = re.compile(r"(?:^|[\\/])\.\.(?:[\\/]|$)")
_PATH_FORMATS = frozenset({"path", "file-path", "directory-path"})
_URI_FORMATS = frozenset({"uri", "uri-reference", "iri", "iri-reference"})


def path_key(key: str) -> str | None:
    """"path" when the key names a path, "weak" when it names one only as a source or target (then a value of
    several lines is content), None otherwise."""
    return _path_key(key) if len(key) <= 200 else _path_key.__wrapped__(key)  # a huge key is not kept


@functools.lru_cache(maxsize=4096)
def _path_key(key: str) -> str | None:
    words = [w.lower() for w in _WORDS.findall(key)]
    if not words or (len(words) > 1 and words[-1] in NOT_A_PATH):
        return None
    if any(PATH_NAME.fullmatch(w) for w in words):
        return "path"
    joined = "".join(words).rstrip("0123456789")  # separators and case gone: `save_path`, `SAVEPATH`, `savepath2`
    if WEAK_PATH_NAME.fullmatch(joined):
        return "weak"
    if _compound_path(joined):
        return "path"
    return "weak" if any(WEAK_PATH_NAME.fullmatch(w) for w in words) else None


def _compound_path(joined: str) -> bool:
    """A key of run-together words that names a path (`savepath`, `cachedir`, `filelist`, `saveto`), not one that
    ends with a content word (`filetype`, `filesize`, `fileid`)."""
    if _WRITES_TO.fullmatch(joined):
        return True
    if _COMPOUND_END.search(joined):
        return _COMPOUND_NOT.search(joined) is None
    return _COMPOUND_START.match(joined) is not None and not any(joined.endswith(w) for w in NOT_A_PATH)


def path_shaped(value: str) -> bool:
    """A one-line string that is an absolute path (`/x`, `~/x`, `file:...`, `C:\\x`, `C:/x`), starts with an
    environment variable (`$HOME/x`, `${VAR}/x`, `%USERPROFILE%\\x`) or climbs with `..`: a path whatever its key (a
    regular expression or a script of several lines is not)."""
    return "\n" not in value and "\r" not in value and (_ABSOLUTE.match(value) is not None
                                                       or _ENV_START.match(value) is not None
                                                       or _CLIMBS.search(value) is not None)


def local_path(value: str) -> str:
    """A `file:` URI as the local path it names (`file:///etc/x` -> `/etc/x`, another host -> `//host/x`, so the
    scope refuses it); a path starting with an environment variable as an absolute one (`$HOME/x` -> `/$HOME/x`:
    outside the folder, whatever the server expands it to); any other string as it is."""
    if value[:1] in ("$", "%") and _ENV_ANY.match(value):
        return "/" + value
    if value[:5].lower() != "file:":
        return value
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(value)
    host = parts.netloc if parts.netloc.lower() not in ("", "localhost") else ""
    return (f"//{host}" if host else "") + unquote(parts.path)


def _named_path(key: str, value: str) -> bool:
    kind = path_key(key) if key else None
    return kind == "path" or (kind == "weak" and "\n" not in value and "\r" not in value)


def named_paths(value: Any, key: str = "", where: str = "", depth: int = 0) -> list[tuple[str, str]]:
    """(location, string) for every string under a key naming a path, at any depth (what the name rule sees)."""
    if depth > 64:
        return []
    if isinstance(value, str):
        return [(where, value)] if _named_path(key, value) else []
    if isinstance(value, dict):
        # under a path-like key, every string inside counts ({"path": {"x": "secret.md"}} names secret.md)
        return [hit for k, v in value.items() for hit in named_paths(
            v, key if key and path_key(key) else str(k), f"{where}.{k}".lstrip("."), depth + 1)]
    if isinstance(value, list | tuple):
        return [hit for i, v in enumerate(value) for hit in named_paths(v, key, f"{where}[{i}]", depth + 1)]
    return []


def valued_paths(value: Any, where: str = "", depth: int = 0) -> list[tuple[str, str]]:
    """(location, string) for every string shaped as a path (`path_shaped`) once stripped of surrounding
    whitespace (as a lenient server would read `" /etc/x\\n"`), whatever its key, at any depth."""
    if depth > 64:
        return []
    if isinstance(value, str):
        if value[:1].isspace() or value[-1:].isspace():  # (a copy only then: arguments may be megabytes)
            value = value.strip()
        return [(where, value)] if path_shaped(value) else []
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in valued_paths(v, f"{where}.{k}".lstrip("."), depth + 1)]
    if isinstance(value, list | tuple):
        return [hit for i, v in enumerate(value) for hit in valued_paths(v, f"{where}[{i}]", depth + 1)]
    return []


def schema_paths(schema: Any, value: Any, root: Any = None, where: str = "", depth: int = 0
                 ) -> list[tuple[str, str]]:
    """(location, string) for every string the JSON schema declares a path (`"format": "path"`, or a `uri` given
    a `file:` URI), following properties, items, additional and pattern properties, $ref and anyOf/oneOf/allOf."""
    root = schema if root is None else root
    for _ in range(16):  # a $ref to a $ref...: followed a bounded number of times
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#"):
            break
        schema = root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            schema = schema.get(part) if isinstance(schema, dict) else None
    if depth > 64 or not isinstance(schema, dict):
        return []
    found: list[tuple[str, str]] = []
    for branch in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(branch) or () if isinstance(schema.get(branch), list) else ():
            found += schema_paths(sub, value, root, where, depth + 1)
    if isinstance(value, str):
        fmt = schema.get("format")
        if fmt in _PATH_FORMATS or (fmt in _URI_FORMATS and value[:5].lower() == "file:"):
            found.append((where, value))
    elif isinstance(value, dict):
        props = _dict_at(schema, "properties")
        patterns = _dict_at(schema, "patternProperties")
        for k, v in value.items():
            subs = [props[k]] if k in props else [s for p, s in patterns.items() if _search(p, str(k))]
            if not subs and isinstance(schema.get("additionalProperties"), dict):
                subs = [schema["additionalProperties"]]
            for sub in subs:
                found += schema_paths(sub, v, root, f"{where}.{k}".lstrip("."), depth + 1)
    elif isinstance(value, list | tuple):
        prefix = _list_at(schema, "prefixItems")
        items = schema.get("items")
        if isinstance(items, list):  # the older tuple form
            prefix, items = items, schema.get("additionalItems")
        for i, v in enumerate(value):
            sub = prefix[i] if i < len(prefix) else items
            found += schema_paths(sub, v, root, f"{where}[{i}]", depth + 1)
    return found


def _dict_at(schema: dict[str, Any], key: str) -> dict[Any, Any]:
    """`schema[key]` when it is an object, else an empty one (a schema from a server may say anything)."""
    value = schema.get(key)
    return value if isinstance(value, dict) else {}


def _list_at(schema: dict[str, Any], key: str) -> list[Any]:
    """`schema[key]` when it is a list, else an empty one."""
    value = schema.get(key)
    return value if isinstance(value, list) else []


def _search(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False


def typed_paths(value: Any, where: str = "", depth: int = 0) -> list[tuple[str, str]]:
    """(location, path) for every PurePath inside validated arguments: lists, dicts, sets and models."""
    if depth > 64:
        return []
    if isinstance(value, PurePath):
        return [(where, str(value))]
    if isinstance(value, BaseModel):
        value = {k: getattr(value, k) for k in type(value).model_fields}
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in typed_paths(v, f"{where}.{k}".lstrip("."), depth + 1)]
    if isinstance(value, list | tuple | set | frozenset):
        return [hit for i, v in enumerate(value) for hit in typed_paths(v, f"{where}[{i}]", depth + 1)]
    return []
