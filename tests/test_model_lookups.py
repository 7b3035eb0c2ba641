"""`llm.library` in a kernel with a model process: a model's table entries are asked of the process once, each
caller gets a copy of its own, and everything else (token counts, failures) is asked every time."""

from __future__ import annotations

from typing import Any

import pytest

from nbagent.models import llm
from nbagent.models import process as modelproc


class Process:
    """What `modelproc.current()` returns, counting the calls that reach it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, name: str, **kwargs: Any) -> Any:
        self.calls.append((name, kwargs))
        if kwargs.get("model") == "unknown/model":
            raise ValueError("This model isn't mapped yet")
        if name == "get_model_info":
            return {"max_input_tokens": 128000, "supported_openai_params": ["tools"]}
        if name == "supports_vision":
            return True
        return 7


@pytest.fixture
def process(monkeypatch: pytest.MonkeyPatch) -> Process:
    p = Process()
    monkeypatch.setattr(modelproc, "current", lambda: p)
    monkeypatch.setattr(llm, "_looked_up", {})
    return p


def test_a_models_table_entry_is_asked_once_and_each_caller_gets_its_own_copy(process: Process) -> None:
    first = llm.library("get_model_info", model="openai/gpt-4o-mini")
    first["supported_openai_params"].append("changed by a caller")
    second = llm.library("get_model_info", model="openai/gpt-4o-mini")
    assert second == {"max_input_tokens": 128000, "supported_openai_params": ["tools"]}
    assert llm.library("supports_vision", model="openai/gpt-4o-mini") is True
    assert llm.library("supports_vision", model="openai/gpt-4o-mini") is True
    assert [name for name, _ in process.calls] == ["get_model_info", "supports_vision"]
    llm.library("get_model_info", model="anthropic/claude-sonnet-4-5")  # another model: asked
    assert len(process.calls) == 3


def test_counts_and_failures_are_asked_every_time(process: Process) -> None:
    assert llm.library("token_counter", model="m", text="hi") == 7
    assert llm.library("token_counter", model="m", text="hi") == 7
    for _ in range(2):
        with pytest.raises(ValueError, match="isn't mapped"):
            llm.library("get_model_info", model="unknown/model")
    assert [name for name, _ in process.calls] == ["token_counter"] * 2 + ["get_model_info"] * 2
