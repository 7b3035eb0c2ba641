"""An image an earlier run sent ({Out[n]} to a vision model) is described, not re-sent, to a model without vision."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nbagent.llm import accepts_images as _takes_images
from nbagent.runtime import Agent, _has_images, _images_described

PNG = "data:image/png;base64,iVBORw0KGgo="
IMAGE_MSG = {"role": "user", "content": [{"type": "text", "text": "Out[3]:"},
                                         {"type": "image_url", "image_url": {"url": PNG}}]}


def test_images_in_history_are_described_for_a_text_model() -> None:
    history = [{"role": "system", "content": "s"}, IMAGE_MSG, {"role": "assistant", "content": "a chart"}]
    assert _has_images(history) and not _has_images(history[2:])
    described = _images_described(history)
    assert not _has_images(described) and described[1]["content"][0] == IMAGE_MSG["content"][0]
    assert "does not take images" in described[1]["content"][1]["text"]
    assert history[1] is IMAGE_MSG and IMAGE_MSG["content"][1]["type"] == "image_url"  # the log's copy untouched
    assert _takes_images("openai/gpt-4o") and not _takes_images("openai/gpt-3.5-turbo")
    assert not _takes_images("no-such-provider/model")


def test_a_later_run_of_a_text_model_gets_the_image_described(tmp_path: Path) -> None:
    first = Agent(script={"turns": [{"content": "a bar chart"}]}, store=tmp_path / "nb.ipynb")
    done = asyncio.run(first.run("what is this?", context=[IMAGE_MSG]))
    assert done.status.value == "completed"
    text_model = Agent(model="openai/gpt-3.5-turbo", store=first.store)
    later = first.store.create_run(text_model.session.id, "and now?", model=text_model.model,
                                   previous_run_id=done.run_id)
    prefix = text_model._prefix(later.id, first.store.run_state(later.id))
    assert not _has_images(prefix) and any("does not take images" in str(m["content"]) for m in prefix)
    vision = Agent(model="openai/gpt-4o", store=first.store)
    assert _has_images(vision._prefix(later.id, first.store.run_state(later.id)))
    # an offline model gets the history as recorded (a replay asks what was asked)
    assert _has_images(first._prefix(later.id, first.store.run_state(later.id)))
