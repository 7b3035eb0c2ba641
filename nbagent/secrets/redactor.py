"""Keeping secrets out of everything that leaves the kernel.

One `Redactor` serves the log (`Agent._record`), streamed text (`StreamRedactor`, before the event bus, so the
live view's `streaming` trait and the notebook's saved widget state never see a secret), the static records
built from the log, and error messages shown in a cell or printed by `nbagent run`. It replaces with
"[REDACTED]":

- the exact values of secrets we know of: the API key the agent was given, and environment variables whose
  names say KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL;
- strings shaped like well-known credentials (`SHAPES`: OpenAI and Anthropic, Hugging Face, GitHub, GitLab,
  Databricks, Vault, Slack, Stripe, npm, PyPI, Google, AWS key ids, JWTs, bearer tokens, private key blocks);
- values assigned to names that say password, secret, token or key in config text (`ASSIGNMENTS`: .env, INI,
  YAML, JSON such as kaggle.json, netrc), so a credential file the agent was shown is not logged verbatim;
- credentials in a URL (`URL_CREDENTIALS`): the password of `scheme://user:password@host` (the user stays
  readable), and a user part alone that looks like a token (`https://<token>@github.com`), wherever the URL is
  (an MCP server's arguments, a `DATABASE_URL` it echoes, a traceback);
- in structured payloads, the string values of keys that name a secret (`api_key`, `authorization`...).

All these patterns are found as spans of the original text (`Redactor.spans`), which lets the stream
redactor redact a window of a growing text exactly as the whole text would be. Text that holds none of the
patterns' literal anchors costs a handful of substring searches (`Redactor.text` is on the hot path: every
recorded event).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

REDACTED = "[REDACTED]"
SECRET_KEY_NAMES = re.compile(r"(api[_-]?key|authorization|access[_-]?token|auth[_-]?token|refresh[_-]?token|"
                              r"secret|password|passwd|credential|private[_-]?key|^token$|[_-]token$)",
                              re.IGNORECASE)
_ENV_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
MIN_KNOWN = 8  # shorter values are too likely to be ordinary words to be replaced everywhere

# A token starts after something that is not part of a token, so "task-management-..." is not an "sk-" key.
_B = r"(?<![A-Za-z0-9_\-])"
_ANY = r"[A-Za-z0-9_\-]"

# (anchors, pattern): the pattern is tried where one of its literal anchors occurs, and must match from there
# (finding anchors with str.find and matching at each is far faster than a regex search over the whole text,
# and each occurrence is judged on its own, which keeps a window of a stream redacted as the whole text is).
# When a pattern has a group named "v", only that group is redacted (`password = ` stays readable).
SHAPES: list[tuple[tuple[str, ...], str]] = [
    (("sk-",), _B + r"sk-" + _ANY + r"{16,}"),  # OpenAI, Anthropic (sk-ant-), DeepSeek...
    (("sk_live_", "sk_test_", "rk_live_", "rk_test_"), _B + r"[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"),  # Stripe
    (("hf_",), _B + r"hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    (("github_pat_",), _B + r"github_pat_[A-Za-z0-9_]{22,}"),  # GitHub fine-grained tokens
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), _B + r"gh[pousr]_[A-Za-z0-9]{30,}"),  # GitHub classic, apps
    (("glpat-",), _B + r"glpat-" + _ANY + r"{20,}"),  # GitLab
    (("dapi",), _B + r"dapi[0-9a-f]{32}(?:-\d+)?"),  # Databricks
    (("hvs.", "hvb."), _B + r"hv[sb]\.[A-Za-z0-9_\-]{20,}"),  # HashiCorp Vault
    (("xoxa-", "xoxb-", "xoxo-", "xoxp-", "xoxr-", "xoxs-", "xapp-"),
     _B + r"(?:xox[abposr]|xapp)-[A-Za-z0-9\-]{10,}"),  # Slack tokens
    (("hooks.slack.com/services/",), r"hooks\.slack\.com/services/(?P<v>[A-Za-z0-9/]{20,})"),
    (("npm_",), _B + r"npm_[A-Za-z0-9]{36,}"),  # npm
    (("pypi-",), _B + r"pypi-[A-Za-z0-9_\-]{50,}"),  # PyPI upload tokens
    (("AIza",), _B + r"AIza[0-9A-Za-z_\-]{30,}"),  # Google API keys
    (("ya29.",), _B + r"ya29\.[0-9A-Za-z_\-]{20,}"),  # Google OAuth access tokens
    (("AKIA", "ASIA"), _B + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])"),  # AWS access key ids
    (("eyJ",), _B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),  # JWTs
    (("Bearer ", "bearer "), r"[Bb]earer (?P<v>[A-Za-z0-9._~+/\-]{16,}=*)"),
    # a private key block: the body goes, the BEGIN/END lines stay; a block cut short (a clipped preview) too
    (("-----BEGIN",), r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----(?P<v>[\s\S]*?)"
                      r"(?=-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----|\Z)"),
]

_STRONG = (r"(?:pass(?:word|wd|phrase)|pwd|secret|credentials?|api[_-]?key|apikey|access[_-]?key|private[_-]?key|"
           r"auth[_-]?token|access[_-]?token|refresh[_-]?token)")
_WEAK = r"(?:token|key|auth)"
_VALUE_END = r"(?=[\s\"'`,;}\]]|\Z)"
# a value that looks like a credential rather than a word or a reference: 16+ characters with a digit, or hex
_KEYISH = r"(?:(?=[A-Za-z0-9_\-./+=:]*\d)[A-Za-z0-9_\-./+=:]{16,}|[0-9a-fA-F]{24,})"
_PLAIN = r"[^\s\"'`,;(){}\[\]<>$%*]{6,}"
# unquoted, `settings.API_KEY` or `args.password` is code naming the secret, not the secret
_NOT_A_NAME = (r"(?:(?<=[\"'])|(?![A-Za-z_]\w*(?:\.\w+)*\.\w*(?:pass|pwd|secret|key|token|credential|auth)\w*"
               + _VALUE_END + r"))")
_SEP = r"[\"']?[ \t]{0,8}[:=][ \t]{0,8}[\"']?"
# `KeyFileError: /path/trust.key: ...` is an exception's class and its message, not a key's name and its value
_NOT_A_CLASS = r"(?-i:(?!(?:(?<=Error)|(?<=Exception)|(?<=Warning)): ))"
# each alternative of _STRONG and _WEAK starts with one of these (found case-insensitively)
_TRIGGERS = ("pass", "pwd", "secret", "credential", "api", "access", "private", "auth", "refresh", "token", "key")
ASSIGNMENTS: list[tuple[tuple[str, ...], str]] = [
    # password: hunter22 / "client_secret": "..." / aws_secret_access_key = ... / export API_KEY=...
    (_TRIGGERS, r"(?i)" + _STRONG + r"[A-Za-z0-9_.\-]{0,30}?" + _NOT_A_CLASS + _SEP + r"(?P<v>" + _NOT_A_NAME
     + _PLAIN + r")" + _VALUE_END),
    # "key": "<32 hex>" (kaggle.json) / token = ... / HF_TOKEN=hf_... : only credential-looking values
    (_TRIGGERS, r"(?i)" + _WEAK + r"[A-Za-z0-9_.\-]{0,12}?" + _NOT_A_CLASS + _SEP + r"(?P<v>" + _KEYISH + r")"
     + _VALUE_END),
    # netrc: "machine h login me password xyz", on one line or several
    (("login",), r"(?<![A-Za-z0-9_])login[ \t]+\S+\s+password[ \t]+(?P<v>\S+)"),
]

# The userinfo of a URL, matched from its "://" (so a window of a stream sees it as the whole text does). The
# password runs to the last "@" before the host (`admin:p@ss@db` has the password `p@ss`, as urlsplit reads it); a
# user part alone is a secret only when it looks like a token: 16 or more characters, with a letter and a digit.
_URL_TOKEN = r"(?=[A-Za-z0-9_\-.~%+=]*[0-9])(?=[A-Za-z0-9_\-.~%+=]*[A-Za-z])[A-Za-z0-9_\-.~%+=]{16,}"
URL_CREDENTIALS: list[tuple[tuple[str, ...], str]] = [
    (("://",), r"://[^\s:/?#\[\]\"'`<>]*?:(?P<v>[^\s/?#\"'`<>]+)@"),  # scheme://user:PASSWORD@host
    (("://",), r"://(?P<v>" + _URL_TOKEN + r")@"),  # https://TOKEN@github.com
]

_SHAPES = [(anchor, re.compile(pattern)) for anchors, pattern in SHAPES for anchor in anchors]
_PEM = _SHAPES[-1]
_URLS = [(anchor, re.compile(pattern)) for anchors, pattern in URL_CREDENTIALS for anchor in anchors]
_CASELESS = [re.compile(pattern) for anchors, pattern in ASSIGNMENTS if anchors is _TRIGGERS]
_NETRC = [("login", re.compile(pattern)) for anchors, pattern in ASSIGNMENTS if anchors == ("login",)]
# Every shape but a private key block is a run of 15 or more of these characters: text without one skips the
# shapes at the cost of one scan.
_LONG_RUN = re.compile(r"[A-Za-z0-9_\-./+=]{15,}")
# Quick tests before the per-anchor and per-trigger loops (which find nothing where these find nothing): any shape's
# anchor; any trigger word, in any case (a superset of the cases the loop looks for)
_ANY_ANCHOR = re.compile("|".join(re.escape(anchor) for anchor, _ in _SHAPES))
_ANY_TRIGGER = re.compile("|".join(re.escape(t) for t in _TRIGGERS), re.IGNORECASE)
_SHORTEST = 8  # no rule and no known secret matches less text
_CONTAINERS = (dict, list, tuple)
_CACHED = 512  # short strings recur (model and tool names, ids, hashes): their redaction is remembered
_CACHE_ENTRIES = 2048  # ...up to this many (then forgotten all at once: ids and hashes are new every step)


def env_secrets(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if _ENV_SECRET.search(k) and len(v) >= MIN_KNOWN]


@functools.lru_cache(maxsize=4096)
def secret_key(name: str) -> bool:
    """A dict key whose string value is a secret whatever it looks like (`api_key`, `Authorization`...)."""
    return SECRET_KEY_NAMES.search(name) is not None


def _search(rules: list[tuple[str, re.Pattern[str]]], s: str, pos: int, endpos: int,
            found: list[tuple[int, int]]) -> None:
    """Each rule's pattern, matched where its anchor occurs."""
    for anchor, pattern in rules:
        at = s.find(anchor, pos, endpos)
        while at >= 0:
            m = pattern.match(s, at, endpos)
            if m is not None:
                span = m.span("v") if "v" in pattern.groupindex else m.span()
                if span[1] > span[0]:
                    found.append(span)
            at = s.find(anchor, at + 1, endpos)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping spans become one (adjacent ones stay two: that keeps redaction local to each span)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def apply(text: str, spans: list[tuple[int, int]], start: int = 0, end: int | None = None) -> str:
    """`text[start:end]` with each span (merged, inside the range) replaced by REDACTED."""
    end = len(text) if end is None else end
    pieces, at = [], start
    for s, e in spans:
        pieces += [text[at:s], REDACTED]
        at = e
    pieces.append(text[at:end])
    return "".join(pieces)


# Secrets this process learned from configuration (an MCP server's `env` and `headers`): every Redactor made
# afterwards takes them out too, so a server echoing its token in an error never puts it in the log or the cell.
_REMEMBERED: list[str] = []


def remember(*values: str | None) -> None:
    """Treat these values as secrets from now on; of `Bearer abc…` also the token alone (a last word of 16+
    characters: shorter words of a passphrase would redact ordinary words everywhere)."""
    for value in values:
        if not isinstance(value, str):
            continue
        words = value.split()
        for candidate in (value, *(words[-1:] if len(words) > 1 and len(words[-1]) >= 16 else [])):
            if len(candidate) >= MIN_KNOWN and candidate not in _REMEMBERED:
                _REMEMBERED.append(candidate)


def url_secrets(text: str) -> list[str]:
    """The credentials of the URLs in `text` (passwords, token-like users), as written and percent-decoded: what
    `remember` takes from a server's configuration, so a server that prints only the password is redacted too."""
    from urllib.parse import unquote

    found: list[tuple[int, int]] = []
    if "://" in text and "@" in text:
        _search(_URLS, text, 0, len(text), found)
    values = [text[a:b] for a, b in found]
    return list(dict.fromkeys([*values, *(unquote(v) for v in values)]))


class Redactor:
    def __init__(self, known: Iterable[str | None] = ()) -> None:
        self._known: list[str] = []
        self._cache: dict[str, str] = {}
        for value in [*known, *env_secrets(), *_REMEMBERED]:
            self.add(value)

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= MIN_KNOWN and secret not in self._known:
            # longest first, so a secret that contains another is found whole
            self._known = sorted([*self._known, secret], key=len, reverse=True)
            self._cache.clear()

    @property
    def known(self) -> list[str]:
        return list(self._known)

    def spans(self, s: str, pos: int = 0, endpos: int | None = None) -> list[tuple[int, int]]:
        """Where the secrets in `s[pos:endpos]` are, merged and sorted. Each pattern is matched where its
        anchor occurs in the range, seeing the text before `pos` as context, as it would in the whole of `s`."""
        endpos = len(s) if endpos is None else endpos
        found: list[tuple[int, int]] = []
        for secret in self._known:
            at = s.find(secret, pos, endpos)
            while at >= 0:
                found.append((at, at + len(secret)))
                at = s.find(secret, at + len(secret), endpos)
        if endpos - pos < _SHORTEST:
            return _merge(found)
        if _LONG_RUN.search(s, pos, endpos) is not None:
            if _ANY_ANCHOR.search(s, pos, endpos) is not None:
                _search(_SHAPES, s, pos, endpos, found)
        elif s.find("-----BEGIN", pos, endpos) >= 0:
            _search([_PEM], s, pos, endpos, found)
        if (s.find("=", pos, endpos) >= 0 or s.find(":", pos, endpos) >= 0) \
                and _ANY_TRIGGER.search(s, pos, endpos) is not None:
            # names like password, token, key, in any case: found in lower case (same indices for ASCII text)
            low = s.lower() if s.isascii() else None
            for trigger in _TRIGGERS:
                for text, word in ((low, trigger),) if low is not None else \
                        ((s, trigger), (s, trigger.upper()), (s, trigger.capitalize())):
                    at = text.find(word, pos, endpos)
                    while at >= 0:
                        if s.find("=", at, at + 50) >= 0 or s.find(":", at, at + 50) >= 0:
                            for pattern in _CASELESS:
                                m = pattern.match(s, at, endpos)
                                if m is not None and m.end("v") > m.start("v"):
                                    found.append(m.span("v"))
                        at = text.find(word, at + 1, endpos)
        if s.find("login", pos, endpos) >= 0:
            _search(_NETRC, s, pos, endpos, found)
        if s.find("://", pos, endpos) >= 0 and s.find("@", pos, endpos) >= 0:
            _search(_URLS, s, pos, endpos, found)
        return _merge(found)

    def text(self, s: str) -> str:
        if len(s) < _SHORTEST:
            return s
        if len(s) <= _CACHED:
            done = self._cache.get(s)
            if done is None:
                spans = self.spans(s)
                done = apply(s, spans) if spans else s
                if len(self._cache) > _CACHE_ENTRIES:
                    self._cache.clear()
                self._cache[s] = done
            return done
        spans = self.spans(s)
        return apply(s, spans) if spans else s

    def redact(self, obj: Any) -> Any:
        """The same structure (dicts, lists; a tuple becomes a list) with every string redacted as `text` does,
        keys too, and the non-empty string value of a key that names a secret (`secret_key`) replaced whole.

        On the hot path (every recorded event): one walk, and a string already seen (the cache of `text`) is
        answered without a call. The result is exactly what the plain recursion gave."""
        if isinstance(obj, str):
            done = self.text(obj)
            return done if (done is obj or done == obj) and "\\u" not in obj else self._document(obj, done)
        if isinstance(obj, _CONTAINERS):
            return self._walk(obj)
        return obj

    def _document(self, s: str, done: str) -> str:
        """`s` redacted (`done`, as text) kept a JSON document when it is one: its values redacted and written out
        again. A tool call's arguments are such a text, read back from the log to run: redacted as prose, a
        password's value takes the backslash of `\\"` and the call no longer parses. A document with `\\u`
        escapes is read even when its text holds no secret (`\\u0073k-...` is `sk-...` once parsed)."""
        if s.lstrip()[:1] not in ("{", "["):
            return done
        try:
            value = json.loads(s)
        except (ValueError, RecursionError):
            return done
        if not isinstance(value, dict | list):
            return done
        walked = self._walk(value)
        if done == s and walked == value:
            return s  # nothing found, as text or as values
        again = json.dumps(walked, ensure_ascii=False)
        return again if self.text(again) == again else done  # nothing the text's own patterns would still find

    def _walk(self, obj: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> Any:
        cache, text, walk, shortest = self._cache, self.text, self._walk, _SHORTEST
        if isinstance(obj, dict):
            out: dict[Any, Any] = {}
            for k, v in obj.items():
                key = k
                if isinstance(k, str) and len(k) >= shortest:
                    named = cache.get(k)
                    if named is None:
                        named = text(k)
                    if named is not k and named != k:  # a secret as a key (a JSON display's): kept apart
                        key = named if named not in obj and named not in out else f"{named} ({len(out)})"
                if isinstance(v, str):
                    if v and isinstance(k, str) and secret_key(k):
                        out[key] = REDACTED
                    elif len(v) < shortest:
                        out[key] = v
                    else:
                        done = cache.get(v)
                        if done is None:
                            done = text(v)
                        out[key] = done if (done is v or done == v) and "\\u" not in v else self._document(v, done)
                elif isinstance(v, _CONTAINERS):
                    out[key] = walk(v)
                else:
                    out[key] = v
            return out
        items: list[Any] = []
        for v in obj:
            if isinstance(v, str):
                if len(v) < shortest:
                    items.append(v)
                else:
                    done = cache.get(v)
                    if done is None:
                        done = text(v)
                    items.append(done if (done is v or done == v) and "\\u" not in v else self._document(v, done))
            elif isinstance(v, _CONTAINERS):
                items.append(walk(v))
            else:
                items.append(v)
        return items


_PEM_BEGIN = "-----BEGIN"
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40}-----")
CONTEXT = 256  # how far before the emitted point a pattern may start (`password = ` before its value)


class StreamRedactor:
    """Redacts a streamed reply before anyone sees it: `feed(delta)` per piece, `close()` at the end.

    Secrets hold no whitespace, so the text after the last whitespace (the word being written) is held back
    until it is complete; so is an open private key block and a tail that may be the start of a known secret
    with whitespace in it. Only redacted text is emitted, and each emitted piece is final: what the whole text
    redacts to, up to that point. If a redaction ever changes text already emitted (it should not), or at
    `close()` the emitted text differs from `redactor.text(whole)`, `emit_reset()` is called and the whole
    redacted text emitted again. `reset()` drops everything (a retried model call) and calls `emit_reset()`.
    """

    def __init__(self, redactor: Redactor, emit_token: Callable[[str], None],
                 emit_reset: Callable[[], None] | None = None) -> None:
        self.redactor = redactor
        self.emit_token = emit_token
        self.emit_reset = emit_reset
        self._clear()

    def _clear(self) -> None:
        self._parts: list[str] = []  # every delta since the last reset
        self._buf = ""  # the raw text from `_origin` on (older text is final and dropped)
        self._origin = 0
        self._size = 0  # raw characters fed since the last reset
        self._done = 0  # raw text before this is emitted, redacted
        self._ws = 0  # just after the last whitespace fed
        self._emitted: list[str] = []

    @property
    def held(self) -> int:
        """Characters fed and not yet emitted (the word being written, an open private key block...)."""
        return self._size - self._done

    def feed(self, delta: str) -> None:
        if not delta:
            return
        start = self._size
        self._parts.append(delta)
        self._buf += delta
        self._size += len(delta)
        i = len(delta)
        while i and not delta[i - 1].isspace():
            i -= 1
        if i:
            self._ws = start + i
        cut = self._cut()
        if cut > self._done:
            self._emit_upto(cut)

    def close(self) -> None:
        """The reply is complete: emit what was held back (redacted), so the text equals `redactor.text`."""
        final = self.redactor.text("".join(self._parts))
        shown = "".join(self._emitted)
        if final.startswith(shown):
            if len(final) > len(shown):
                self.emit_token(final[len(shown):])
        else:
            self._reset_to(final)
        self._clear()

    def reset(self) -> None:
        """The streamed reply was abandoned (the call is retried): forget it, and tell the listeners."""
        self._clear()
        if self.emit_reset is not None:
            self.emit_reset()

    def _reset_to(self, text: str) -> None:
        if self.emit_reset is not None:
            self.emit_reset()
        if text:
            self.emit_token(text)
        self._emitted = [text]

    def _cut(self) -> int:
        """How far the raw text can be emitted: never inside a word, a private key block or a known secret."""
        cut = self._ws
        base = self._done - self._origin
        pending = self._buf[base:]
        at = pending.find(_PEM_BEGIN)
        while at >= 0 and self._done + at < cut:
            end = _PEM_END.search(pending, at)
            if end is None or self._done + end.end() > cut:
                cut = self._done + at  # an open block, or one the cut would split: hold it whole
                break
            at = pending.find(_PEM_BEGIN, end.end())
        spaced = [secret for secret in self.redactor.known if any(c.isspace() for c in secret)]
        for secret in spaced:  # (the others are held back as a word anyway)
            for i in range(max(0, len(pending) - len(secret) + 1), len(pending)):
                if secret.startswith(pending[i:]):  # the tail may be the start of this secret
                    cut = min(cut, self._done + i)
                    break
        moved = True
        while moved:  # the cut, moved back, may now split a complete occurrence: back to its start, until none
            moved = False
            for secret in spaced:
                at = pending.find(secret)
                while at >= 0 and self._done + at < cut:
                    if cut < self._done + at + len(secret):
                        cut, moved = self._done + at, True
                        break
                    at = pending.find(secret, at + 1)
        return cut

    def _line_start(self, at: int) -> int:
        """A place in `_buf` at or before `at` to start a pattern search: a line start if one is near."""
        at = max(0, at)
        nl = self._buf.rfind("\n", max(0, at - CONTEXT), at)
        return nl + 1 if nl >= 0 else at

    def _emit_upto(self, cut: int) -> None:
        done, origin = self._done, self._origin
        found = self.redactor.spans(self._buf, self._line_start(done - origin - CONTEXT), cut - origin)
        spans = [(s, e) for s, e in found if e + origin > done]
        if spans and spans[0][0] + origin < done:  # a secret across text already shown: show it all again
            self._reset_to(self.redactor.text("".join(self._parts)[:cut]))
        else:
            text = apply(self._buf, spans, done - origin, cut - origin)
            if text:
                self.emit_token(text)
                self._emitted.append(text)
        self._done = cut
        keep = self._line_start(cut - origin - 2 * CONTEXT)
        if keep > 0:  # final text well before the emitted point is not needed any more
            self._buf = self._buf[keep:]
            self._origin += keep


__all__ = ["REDACTED", "Redactor", "StreamRedactor", "apply", "env_secrets", "remember",
           "secret_key", "url_secrets"]
