"""A failed model call's line says what to do (issue 45; nbagent/models/errors.py).

- A misspelt provider (`opnai/gpt-4o-mini`) got litellm's "LLM Provider NOT provided": now one line naming the
  provider litellm does not know, the nearest one it knows (its shipped provider list, difflib) and how a model is
  written.
- A server that is down read `InternalServerError: Connection error.`: now the line names the address tried and the
  setting it came from (the api_base setting, model_params, OPENAI_BASE_URL or the like in the environment, the
  provider's default), with no password, query or key in it.

Through `Agent.run` and litellm's real HTTP path (a port on 127.0.0.1 that nothing listens on), in this process and
through a kernel's model process (nbagent/models/process.py), where the error crosses a process as a class name and
text.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbagent.models import errors as model_errors
from nbagent.models import llm
from nbagent.models import process as modelproc
from nbagent.runtime import Agent

KEY = "sk-test-errors-0123456789abcdefgh"
HOW = ("A model is written provider/name, e.g. openai/gpt-4o-mini, anthropic/claude-sonnet-4-5 or ollama/llama3.2 "
       "(the providers: https://docs.litellm.ai/docs/providers)")


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def failed(tmp_path: Path, model: str, **kw: Any) -> str:
    agent = Agent(model=model, api_key=KEY, store=tmp_path / "nb.ipynb", max_retries=0, retry_base=0.01,
                  timeout=5.0, **kw)
    try:
        result = asyncio.run(agent.run("hello"))
    finally:
        agent.store.close()
    assert result.status.value == "failed" and result.error is not None
    assert "\n" not in result.error and KEY not in result.error
    return result.error


@pytest.mark.parametrize(("model", "said"), [
    ("opnai/gpt-4o-mini", "'opnai' in opnai/gpt-4o-mini is not a provider litellm knows: did you mean 'openai' "
                          f"(openai/gpt-4o-mini)? {HOW}"),
    ("antropic/claude-sonnet-4-5", "'antropic' in antropic/claude-sonnet-4-5 is not a provider litellm knows: did "
                                   f"you mean 'anthropic' (anthropic/claude-sonnet-4-5)? {HOW}"),
    ("zzqxv/some-model", f"'zzqxv' in zzqxv/some-model is not a provider litellm knows. {HOW}"),
    ("gpt4o", f"litellm cannot tell which provider serves 'gpt4o' (did you mean gpt-4o?). {HOW}"),
])
def test_a_provider_litellm_does_not_know_is_named_with_the_nearest_it_knows(tmp_path: Path, model: str,
                                                                             said: str) -> None:
    error = failed(tmp_path, model)
    assert error == f"model call to {model} failed (not retried): BadRequestError: {said}"


def test_a_server_that_is_down_names_the_address_and_the_setting(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{closed_port()}/v1"
    error = failed(tmp_path, "openai/gpt-4o-mini", api_base=base)
    assert f"Connection error: nothing answered at {base} (from the api_base setting)" in error


def test_an_address_from_the_environment_is_named_without_its_password(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    port = closed_port()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://me:hunter2pass@127.0.0.1:{port}/v1?api-key=sekrit0123456789")
    error = failed(tmp_path, "openai/gpt-4o-mini")
    assert f"nothing answered at http://127.0.0.1:{port}/v1 (from OPENAI_BASE_URL in the environment)" in error
    assert "hunter2pass" not in error and "sekrit" not in error


def test_where_each_address_comes_from() -> None:
    def source(model: str, env: dict[str, str], **kw: Any) -> tuple[str | None, str]:
        with pytest.MonkeyPatch.context() as mp:
            for k in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL",
                      "OLLAMA_API_BASE"):
                mp.delenv(k, raising=False)
            for k, v in env.items():
                mp.setenv(k, v)
            return model_errors.address(llm.ModelSettings(model=model, **kw))
    assert source("openai/gpt-4o-mini", {}) == ("https://api.openai.com/v1", "openai's default address")
    assert source("openai/x", {"OPENAI_API_BASE": "http://h/v1"}) == ("http://h/v1",
                                                                     "OPENAI_API_BASE in the environment")
    assert source("anthropic/x", {"ANTHROPIC_BASE_URL": "http://a"}) == ("http://a", "ANTHROPIC_BASE_URL in the "
                                                                         "environment")
    assert source("ollama/llama3.2", {}) == ("http://localhost:11434", "ollama's default address")
    assert source("openai/x", {}, params={"api_base": "http://p/v1"}) == ("http://p/v1", "model_params' api_base")
    assert source("openai/x", {"OPENAI_BASE_URL": "http://env"}, api_base="http://arg") == \
        ("http://arg", "the api_base setting")


@pytest.fixture
def process(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[modelproc.ModelProcess, int]]:
    """A model process that this process's model calls go to, as a kernel's do; OPENAI_API_BASE at a closed port."""
    port = closed_port()
    monkeypatch.setenv("OPENAI_API_BASE", f"http://127.0.0.1:{port}/v1")
    p = modelproc.ModelProcess(("nbagent.models.llm",))
    monkeypatch.setattr(modelproc, "_process", p)
    p.loaded.result(120)
    yield p, port
    p.close()
    p.proc.wait(30)


def test_through_the_model_process_the_lines_are_the_same(process: tuple[modelproc.ModelProcess, int]) -> None:
    _, port = process
    settings = llm.ModelSettings(model="openai/gpt-4o-mini", api_key=KEY, max_retries=0)
    with pytest.raises(llm.ModelError) as down:
        asyncio.run(llm.complete(settings, [{"role": "user", "content": "hi"}], []))
    said = f"nothing answered at http://127.0.0.1:{port}/v1 (from OPENAI_API_BASE in the environment)"
    assert said in str(down.value)
    settings = llm.ModelSettings(model="opnai/gpt-4o-mini", api_key=KEY, max_retries=0)
    with pytest.raises(llm.ModelError) as unknown:
        asyncio.run(llm.complete(settings, [{"role": "user", "content": "hi"}], []))
    assert "'opnai' in opnai/gpt-4o-mini is not a provider litellm knows: did you mean 'openai'" in str(unknown.value)
