"""Images a cell the agent ran showed reach a model that takes images as image parts (after the tool's result),
and are described to one that does not; the log's results hold no image bytes; huge images are described only."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from kernel_harness import Kernel

from nbagent.store import Store

pytestmark = [pytest.mark.kernel, pytest.mark.slow]
AGENT = "%%agent --script s.json --approve all --autonomy L3 --new\n"
PLOT = "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3]);"
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="no matplotlib")


@pytest.fixture
def k(kernel: Kernel) -> Kernel:
    """conftest's kernel: nbagent loaded."""
    return kernel


def run(k: Kernel, code: str, *, images: bool) -> tuple[dict[str, Any], list[Any], str]:
    turns = [{"tool_calls": [{"name": "run_cell", "arguments": {"code": code}}]},
             {"content": "saw {images_received} image(s)"}]
    (k.folder / "s.json").write_text(json.dumps({"turns": turns, "images": images}))
    cell = k.run(AGENT + "plot it", cell_id="c1")
    assert cell.ok, (cell.stderr, cell.outputs)
    store = Store(k.folder / "test.nbagent", readonly=True)
    (run_id,) = store.run_ids()
    events = list(store.run_events(run_id))
    result = next(e.payload.result for e in events if e.type == "tool_call_completed")
    called = [e.payload for e in events if e.type == "llm_called"]
    answer = next(e.payload.content for e in events if e.type == "answer_ready")
    return result, called, answer


@needs_matplotlib
def test_a_plot_reaches_a_model_that_takes_images_as_an_image_part(k: Kernel) -> None:
    result, called, answer = run(k, PLOT, images=True)
    assert answer == "saw 1 image(s)"
    (image,) = result["images_for_model"]
    assert image["mime"] == "image/png" and image["about"].startswith("a PNG image, ")
    assert called[1].request["images_sent"] == [{"call_id": "nb1_0", "sha256": image["sha256"]}]
    assert "images_sent" not in called[0].request
    # the bytes are in the store's blobs, not in the log's result nor in the recorded messages
    assert (k.folder / "test.nbagent" / "blobs" / image["sha256"][:2] / image["sha256"][2:]).is_file()
    assert "base64" not in json.dumps(result) and "base64" not in json.dumps(called[1].request)


@needs_matplotlib
def test_a_model_that_takes_no_images_reads_the_description(k: Kernel) -> None:
    result, called, answer = run(k, PLOT, images=False)
    assert answer == "saw 0 image(s)" and "images_sent" not in called[1].request
    assert result["outputs"][0]["images"][0].startswith("a PNG image, ")
    tool = next(m for m in called[1].request["messages"] if m.get("role") == "tool")
    assert "a PNG image, " in tool["content"]


def test_a_huge_image_is_described_not_sent(k: Kernel) -> None:
    code = ("from IPython.display import Image, display\n"
            "head = bytes.fromhex('89504e470d0a1a0a0000000d49484452000001000000010008060000001f15c489')\n"
            "display(Image(data=head + b'\\0' * 3_000_000, format='png'))")
    result, _, answer = run(k, code, images=True)
    assert answer == "saw 0 image(s)" and "images_for_model" not in result
    assert "not sent: over the 1 MB limit" in result["outputs"][0]["images"][0]
    assert len(json.dumps(result)) < 45_000


def test_a_repr_that_raises_is_the_cells_business(k: Kernel) -> None:
    code = ("class Bad:\n    def _repr_png_(self):\n        raise RuntimeError('no picture')\n"
            "    def __repr__(self):\n        return 'Bad()'\nBad()")
    result, _, answer = run(k, code, images=True)
    assert answer == "saw 0 image(s)" and "images_for_model" not in result
    assert result["outputs"][-1]["text"] == "Bad()" and "_repr_" in result["display_error"]
