"""Keeping secrets out of the log.

Everything the runtime records passes through `Redactor.redact`: values of keys that name a secret
(`api_key`, `authorization`, `token`...), strings shaped like well-known credentials (OpenAI, Anthropic,
Google, GitHub, Slack, AWS, bearer tokens), and the exact values of secrets we know of (the API key the agent
was given, and environment variables whose names say KEY, TOKEN, SECRET or PASSWORD) become "[REDACTED]".
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[REDACTED]"
SECRET_KEY_NAMES = re.compile(r"(api[_-]?key|authorization|access[_-]?token|auth[_-]?token|secret|password|"
                              r"passwd|credential|private[_-]?key)", re.IGNORECASE)
SECRET_SHAPES = re.compile(
    r"(sk-ant-[A-Za-z0-9_\-]{16,}|sk-[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|xox[baprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|(?<=Bearer )[A-Za-z0-9._\-]{16,})"
)
_ENV_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)


def env_secrets(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if _ENV_SECRET.search(k) and len(v) >= 8]


class Redactor:
    def __init__(self, known: Iterable[str | None] = ()) -> None:
        values = {v for v in [*known, *env_secrets()] if v and len(v) >= 8}
        # longest first, so a secret that contains another is replaced whole
        self._known = sorted(values, key=len, reverse=True)

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= 8 and secret not in self._known:
            self._known = sorted([*self._known, secret], key=len, reverse=True)

    def text(self, s: str) -> str:
        for secret in self._known:
            if secret in s:
                s = s.replace(secret, REDACTED)
        return SECRET_SHAPES.sub(REDACTED, s) if ("sk-" in s or "AIza" in s or "gh" in s or "xox" in s
                                                  or "AKIA" in s or "Bearer " in s) else s

    def redact(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {k: (REDACTED if isinstance(k, str) and SECRET_KEY_NAMES.search(k) and isinstance(v, str) and v
                        else self.redact(v)) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.redact(v) for v in obj]
        return obj
