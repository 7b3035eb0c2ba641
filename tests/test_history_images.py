"""An image an earlier run sent ({Out[n]} to a vision model) is described, not re-sent, to a model without vision.

Seen where it matters: in the request a later run sends over HTTP (litellm -> the openai SDK -> `stub_openai` on
127.0.0.1), and in the messages an offline model is handed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_openai import Reply, StubOpenAI

from nbagent.models.llm import accepts_images
from nbagent.runtime import Agent

PNG = "data:image/png;base64,iVBORw0KGgo="
IMAGE_MSG = {"role": "user", "content": [{"type": "text", "text": "Out[3]:"},
                                         {"type": "image_url", "image_url": {"url": PNG}}]}


def has_images(messages: list[dict[str, Any]]) -> bool:
    return any(isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
               for m in messages)


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        yield server


def first_run(tmp_path: Path) -> Agent:
    first = Agent(script={"turns": [{"content": "a bar chart"}]}, store=tmp_path / "nb.ipynb")
    done = asyncio.run(first.run("what is this?", context=[IMAGE_MSG]))
    assert done.status.value == "completed"
    return first


def later_request(stub: StubOpenAI, first: Agent, model: str) -> list[dict[str, Any]]:
    """The messages a later run of `model` in the same session sends."""
    stub.requests.clear()
    stub.push(Reply(content="seen"))
    later = Agent(model, api_base=stub.base_url, api_key="sk-test-not-a-real-key", store=first.store,
                  retry_base=0.01, retry_cap=0.05, max_retries=0, timeout=5.0)
    result = asyncio.run(later.run("and now?"))
    assert result.status.value == "completed", result.errors
    [request] = stub.requests
    return request.body["messages"]


def test_which_models_take_images() -> None:
    assert accepts_images("openai/gpt-4o") and not accepts_images("openai/gpt-3.5-turbo")
    assert not accepts_images("no-such-provider/model") and not accepts_images("nbagent/scripted")


def test_a_later_run_of_a_text_model_gets_the_image_described(tmp_path: Path, stub: StubOpenAI) -> None:
    first = first_run(tmp_path)
    text = later_request(stub, first, "openai/gpt-3.5-turbo")
    assert not has_images(text)
    described = next(m for m in text if isinstance(m.get("content"), list)
                     and IMAGE_MSG["content"][0] in m["content"])  # the text part kept, the image described
    assert any("does not take images" in p.get("text", "") for p in described["content"])
    assert has_images(later_request(stub, first, "openai/gpt-4o"))  # a vision model gets the image
    # the log keeps the image as sent
    assert has_images(first.store.run_state(first.store.run_ids()[0]).messages)


def test_an_offline_model_gets_the_history_as_recorded(tmp_path: Path) -> None:
    """A replay asks what was asked: offline models get the image parts as the log has them."""
    first = first_run(tmp_path)
    seen: list[list[dict[str, Any]]] = []

    def model(messages: list[dict[str, Any]], tools: Any) -> str:
        seen.append(messages)
        return "done"

    later = Agent(function=model, store=first.store)
    assert asyncio.run(later.run("and now?")).status.value == "completed"
    assert seen and has_images(seen[0])
