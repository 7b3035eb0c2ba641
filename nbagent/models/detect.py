"""Which model to use when none is given: the environment's keys, or an Ollama server on this machine.

Order (after the cell's option, `%agent config`, traitlets and `NBAGENT_MODEL`): an OpenAI key, an Anthropic
key, a Gemini key, then an Ollama server answering on 127.0.0.1:11434 (its first model). Nothing found is a
clear error listing every way to choose, the offline scripted model included.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

DEFAULTS = (
    ("OPENAI_API_KEY", "openai/gpt-4o-mini"),
    ("ANTHROPIC_API_KEY", "anthropic/claude-3-5-haiku-latest"),
    ("GEMINI_API_KEY", "gemini/gemini-1.5-flash"),
    ("GOOGLE_API_KEY", "gemini/gemini-1.5-flash"),
)
OLLAMA = os.environ.get("OLLAMA_API_BASE", "http://127.0.0.1:11434")


@dataclass
class Candidate:
    model: str | None
    why: str


def ollama_models(base: str = OLLAMA, timeout: float = 0.3) -> list[str]:
    """Models of a local Ollama server; [] when none answers (quickly: it is asked on loopback only)."""
    if not base.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
        return []
    import urllib.request  # here: `%load_ext` reads the keys (provider_key_set) and must stay light

    try:
        with urllib.request.urlopen(f"{base}/api/tags", timeout=timeout) as r:
            data = json.loads(r.read().decode("utf-8"))
    except (OSError, ValueError):
        return []
    return [m["name"] for m in data.get("models", []) if isinstance(m, dict) and m.get("name")]


def candidates(environ: dict[str, str] | None = None, *, probe_ollama: bool = True) -> list[Candidate]:
    env = os.environ if environ is None else environ
    found: list[Candidate] = []
    for key, model in DEFAULTS:
        if env.get(key):
            found.append(Candidate(model, f"{key} is set"))
    if probe_ollama:
        models = ollama_models()
        if models:
            found.append(Candidate(f"ollama_chat/{models[0]}", f"an Ollama server answers at {OLLAMA} "
                                                                f"({len(models)} model(s))"))
    return found


def provider_key_set(environ: dict[str, str] | None = None) -> str | None:
    """The first provider key of DEFAULTS set in the environment (its name), else None: a person who set one will
    call that provider, so `%load_ext` starts the model process ahead (ipython/loading.py)."""
    env = os.environ if environ is None else environ
    return next((key for key, _ in DEFAULTS if env.get(key)), None)


def detect(environ: dict[str, str] | None = None, *, probe_ollama: bool = True) -> Candidate | None:
    found = candidates(environ, probe_ollama=probe_ollama)
    return found[0] if found else None


# the traitlets section is NbAgent: `%config Agent.model` is not read (options.old_section_note says why)
NO_MODEL = (
    "no model: pass --model (any litellm model, e.g. openai/gpt-4o-mini), set a default (%agent config "
    "model=..., %config NbAgent.model = \"...\", or NBAGENT_MODEL), set an API key (OPENAI_API_KEY, "
    "ANTHROPIC_API_KEY, GEMINI_API_KEY), start Ollama locally, or use the offline scripted model: "
    "--script turns.json"
)
