"""The notebook itself as context: `{In[n]}`, `{Out[n]}`, `{Err}` and displayed images, reaching the recorded
request (docs/context.md). Real kernels; the vision cases go through litellm -> openai -> httpx to the stub
OpenAI server on 127.0.0.1, so the image part is checked in the request the server really received."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_harness import Kernel, script
from stub_openai import Reply, StubOpenAI

from nbagent.ipython import outputs as outputs_mod
from nbagent.ipython.outputs import OutputCapture, capture, read_image
from nbagent.ipython.references import BadReference, ImageRef, Notebook, expand_all, for_model, notebook_message
from nbagent.store import Store

# made in the kernel: a real PNG of w x h red pixels (no imaging library needed)
PNG_SOURCE = """import struct, zlib
def png(w, h):
    raw = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * w for _ in range(h))
    chunk = lambda t, d: struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))
    return (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
            + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
"""


def png(w: int, h: int) -> bytes:
    ns: dict[str, Any] = {}
    exec(PNG_SOURCE, ns)
    return ns["png"](w, h)  # type: ignore[no-any-return]


def events(k: Kernel, type_: str) -> list[Any]:
    store = Store(k.folder / "test.nbagent", readonly=True)
    run = store.list_runs()[-1]
    return [e.payload for e in store.run_events(run.id) if e.type == type_]


def error_line(cell: Any) -> str:
    assert not cell.ok
    assert len(cell.reply["content"]["traceback"]) == 1  # one line, no traceback
    (error,) = [o["error"] for o in cell.outputs if "error" in o]
    return str(error)


def no_runs(k: Kernel) -> bool:
    path = k.folder / "test.nbagent"
    return not path.exists() or not Store(path, readonly=True).run_ids()


def notebook(k: Kernel) -> None:
    """Cells [2]..[5]: a result, a print and a PNG display, a failing cell (cell [1] is %load_ext)."""
    assert k.run("x = 41\nx + 1", cell_id="c1").ok
    assert k.run(PNG_SOURCE + "from IPython.display import Image, display\nprint('hello')\n"
                 "display(Image(data=png(64, 32), format='png'))", cell_id="c2").ok
    assert not k.run("total = 10\ncount = 0\nmean = total / count", cell_id="c3").ok
    assert k.run("%%capture\ny = 1", cell_id="c4").ok  # a magic: {In[5]} is it as typed


# ------------------------------------------------------------------------------------------- in a real kernel


@pytest.mark.kernel
def test_in_out_err_and_an_image_reach_the_recorded_request_as_text_for_a_text_model(kernel: Kernel) -> None:
    notebook(kernel)
    script(kernel.folder / "s.json", {"content": "Seen."})
    cell = kernel.run("%%agent --script s.json\nExplain {In[2]}, {Out[2]}, {Out[3]}, {In[-1]} and {Err}",
                      cell_id="c6")
    assert cell.ok, cell.stderr
    # the image is described, not sent: the model is a text model, and the cell says so in one line
    assert not cell.stderr.strip()  # a note, not an error: a display, not stderr (pink)
    assert cell.notes == ["nbagent: Out[3]: a PNG image, 64\u00d732, 129 B, from cell [3] is described to "
                          "the model, not sent: nbagent/scripted does not take images (as litellm knows it)"]
    (assembled,) = events(kernel, "context_assembled")
    request = events(kernel, "llm_called")[0].request
    assert request["messages"][:1] == assembled.messages  # the context message is the request's first message
    context = assembled.messages[0]["content"]
    assert isinstance(context, str)  # no image part for a text model
    assert "`In[2]` (the source of cell [2]):\n```python\nx = 41\nx + 1\n```" in context
    assert 'returned: {"type": "int", "size_bytes": 28, "repr": "42"}' in context  # Out[2], summarised
    assert "printed:\n```\nhello\n```" in context
    assert "displayed a PNG image, 64\u00d732, 129 B, from cell [3]" in context and "base64" not in context
    assert "`In[5]` (the source of cell [5]):\n```python\n%%capture\ny = 1\n```" in context  # {In[-1]}
    assert "`Err` (the last error of this kernel): ZeroDivisionError: division by zero" in context
    assert "mean = total / count" in context and "Traceback (most recent call last)" in context
    prompt = request["messages"][1]["content"]
    assert prompt == "Explain `In[2]`, `Out[2]`, `Out[3]`, `In[5]` and `Err`"


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        yield server


@pytest.fixture
def openai_kernel(tmp_path: Path, stub: StubOpenAI) -> Iterator[Kernel]:
    """A kernel whose openai/... models are served by the stub (litellm reads OPENAI_API_BASE)."""
    k = Kernel(tmp_path, env={"OPENAI_API_KEY": "sk-test-context", "OPENAI_API_BASE": stub.base_url})
    assert k.run("%load_ext nbagent", cell_id="setup").ok
    yield k
    k.close()


@pytest.mark.kernel
def test_an_image_output_is_an_image_part_for_a_vision_model(openai_kernel: Kernel, stub: StubOpenAI) -> None:
    k = openai_kernel
    notebook(k)
    stub.push(Reply(content="A red rectangle."))
    cell = k.run("%%agent --model openai/gpt-4o\nWhat does {Out[3]} show?", cell_id="c6")
    assert cell.ok and not cell.stderr.strip(), cell.stderr
    # what the server received: an OpenAI user message with the PNG as a data URL image part
    (sent,) = stub.requests
    assert sent.body["model"] == "gpt-4o"
    system, first = sent.body["messages"][:2]  # the system prompt, then the context
    assert system["role"] == "system"
    assert first["role"] == "user" and isinstance(first["content"], list)
    images = [p for p in first["content"] if p["type"] == "image_url"]
    (image,) = images
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == png(64, 32)
    text = " ".join(p["text"] for p in first["content"] if p["type"] == "text")
    assert "displayed a PNG image, 64\u00d732, 129 B, from cell [3]:" in text and "printed:\n```\nhello" in text
    # and the log holds the same request: the context_assembled event and the llm_called request
    (assembled,) = events(k, "context_assembled")
    assert assembled.messages[0] == first
    assert events(k, "llm_called")[0].request["messages"][0] == first


@pytest.mark.kernel
def test_an_image_output_is_a_summary_for_a_model_without_vision(openai_kernel: Kernel, stub: StubOpenAI) -> None:
    k = openai_kernel
    notebook(k)
    stub.push(Reply(content="I cannot see it."))
    cell = k.run("%%agent --model openai/gpt-3.5-turbo\nWhat does {Out[3]} show?", cell_id="c6")
    assert cell.ok, cell.stderr
    assert "openai/gpt-3.5-turbo does not take images" in "".join(cell.notes) and not cell.stderr.strip()
    (sent,) = stub.requests
    first = sent.body["messages"][1]["content"]
    assert isinstance(first, str) and "a PNG image, 64\u00d732, 129 B, from cell [3]" in first
    assert "data:image" not in json.dumps(sent.body)
    assert events(k, "llm_called")[0].request["messages"][0]["content"] == first


@pytest.mark.kernel
def test_a_matplotlib_figure_reaches_a_vision_model(openai_kernel: Kernel, stub: StubOpenAI) -> None:
    k = openai_kernel
    probe = k.run("import matplotlib", cell_id="m0")
    if not probe.ok:
        pytest.skip("matplotlib is not installed in this environment")
    assert k.run("%matplotlib inline", cell_id="m1").ok
    assert k.run("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])", cell_id="m2").ok
    stub.push(Reply(content="A line."))
    cell = k.run("%%agent --model openai/gpt-4o\nDescribe {Out[-1]}", cell_id="m3")
    assert cell.ok, cell.stderr
    first = stub.requests[0].body["messages"][1]["content"]
    (image,) = [p for p in first if p["type"] == "image_url"]
    data = base64.b64decode(image["image_url"]["url"].split(",", 1)[1])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    text = " ".join(p["text"] for p in first if p["type"] == "text")
    assert "returned: " in text and "Line2D" in text and "displayed a PNG image" in text


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.kernel
def test_out_of_a_cell_without_output_is_one_line_naming_the_cells_that_have_one(kernel: Kernel) -> None:
    notebook(kernel)
    script(kernel.folder / "s.json", {"content": "never"})
    line = error_line(kernel.run("%%agent --script s.json\nLook at {Out[99]}", cell_id="c6"))
    assert line == ("BadReference: %%agent: {Out[99]}: cell [99] has not run yet (this cell is [6]); cells with "
                    "outputs: [2], [3]")
    line = error_line(kernel.run("%%agent --script s.json\nLook at {Out[5]}", cell_id="c7"))
    assert line.startswith("BadReference: %%agent: {Out[5]}: cell [5] has no output in this kernel (cells with "
                           "outputs: [2], [3])")
    assert no_runs(kernel)  # no model call, no run
    assert kernel.run("z = 2", cell_id="c8").ok  # the kernel carries on


@pytest.mark.kernel
def test_in_zero_and_err_before_any_error_are_one_line_each(kernel: Kernel) -> None:
    script(kernel.folder / "s.json", {"content": "never"})
    line = error_line(kernel.run("%%agent --script s.json\nLook at {In[0]}", cell_id="c1"))
    assert line == ("BadReference: %%agent: {In[0]}: there is no cell [0]; cells are numbered from [1], and "
                    "{In[-1]} is the cell run just before this one")
    line = error_line(kernel.run("%%agent --script s.json\nWhy {Err}?", cell_id="c2"))
    assert line == "BadReference: %%agent: {Err}: no cell has failed in this kernel yet, so there is no error to show"
    line = error_line(kernel.run("%%agent --script s.json\nLook at {In[-9]}", cell_id="c3"))
    assert line == "BadReference: %%agent: {In[-9]}: only 3 cell(s) ran before this one in this kernel"
    assert no_runs(kernel)


@pytest.mark.kernel
def test_an_image_of_50_mb_is_described_in_one_line_never_sent(openai_kernel: Kernel, stub: StubOpenAI) -> None:
    k = openai_kernel
    big = k.run(PNG_SOURCE + "from IPython.display import Image, display\n"
                "display(Image(data=png(64, 32)[:33] + b'\\0' * 50_000_000, format='png'))", cell_id="b1")
    assert big.ok, big.stderr
    stub.push(Reply(content="Too big to see."))
    cell = k.run("%%agent --model openai/gpt-4o\nWhat is {Out[2]}?", cell_id="b2")
    assert cell.ok, cell.stderr
    assert not cell.stderr.strip() and cell.notes == [
        "nbagent: Out[2]: a PNG image, 64\u00d732, 50.0 MB, from cell [2] is described to the model, not sent: over "
        "the 1 MB limit for an image sent to a model"]
    (sent,) = stub.requests
    assert len(json.dumps(sent.body)) < 50_000  # the 50 MB never went out (the tools and system prompt are 8 KB)
    content = sent.body["messages"][1]["content"]
    assert isinstance(content, str) and "not sent: over the 1 MB limit" in content
    # the kernel kept no copy of the bytes either
    held = k.run("c = get_ipython()._nbagent_outputs.cells[2].outputs[0].image\nprint(c.data is None, c.size)",
                 cell_id="b3")
    assert held.stdout.split() == ["True", "50000033"]


# ------------------------------------------------------------------------------------------- units


class _Shell:
    def __init__(self) -> None:
        self.execution_count = 1
        self.user_ns: dict[str, Any] = {"In": [""], "Out": {}}


def test_capture_files_displays_under_the_running_cell_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    shell = _Shell()
    cap = OutputCapture(shell)

    class Info:
        raw_cell = "plot()"
        store_history = True

    for n in range(1, outputs_mod.KEEP_CELLS + 6):
        shell.execution_count = n + 1  # IPython raises the count before the cell runs
        cap._pre(Info())
        cap._add("display_data", {"image/png": png(2, 2), "text/plain": "<Figure>"})
        cap._post(None)
    cap._add("display_data", {"text/plain": "between cells"})  # no cell running: not filed
    assert len(cap.cells) == outputs_mod.KEEP_CELLS and min(cap.cells) == 6
    assert cap.cell(6).outputs[0].image.width == 2  # type: ignore[union-attr]

    class Agent:
        raw_cell = "%%agent\nhi"
        store_history = True

    cap._pre(Agent())
    cap._add("display_data", {"text/plain": "a run view"})  # nbagent's own outputs are not kept
    assert cap.current is None


def test_read_image_describes_a_big_image_from_its_first_bytes_only() -> None:
    head = png(640, 480)[:33]
    img = read_image("image/png", base64.b64encode(head + b"\0" * 3_000_000).decode())
    assert img is not None and img.data is None and (img.width, img.height) == (640, 480)
    assert img.describe(5) == "a PNG image, 640\u00d7480, 3.0 MB, from cell [5]"
    small = capture("display_data", {"image/png": png(3, 4), "text/plain": "x" * 5000})
    assert small is not None and small.image is not None and small.image.data == png(3, 4)
    assert len(small.text or "") == outputs_mod.MAX_TEXT and small.text_truncated


def test_only_a_few_images_go_in_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nbagent.ipython.references.accepts_images", lambda model: True)
    image = read_image("image/png", png(2, 2))
    assert image is not None
    context = [{"role": "user", "content": ["intro", *[ImageRef(image, n) for n in range(1, 7)]]}]
    (message,), notes = for_model(context, "openai/gpt-4o")
    assert sum(p["type"] == "image_url" for p in message["content"]) == 4
    assert len(notes) == 2 and "only 4 images are sent in one request" in notes[0]


def test_variables_and_cells_together_and_literal_braces() -> None:
    nb = Notebook(current=3, inputs=["", "a = 1", "b"], results={2: 5})
    text, names, refs = expand_all("{{In[1]}} {In[1]} @a {Out[2]} {a}", {"a": 1}, nb)
    assert text == "{In[1]} `In[1]` `a` `Out[2]` `a`" and names == ["a"] and [r.name for r in refs] == ["In[1]",
                                                                                                      "Out[2]"]
    message = notebook_message(refs, nb)
    assert message is not None
    (final,), _ = for_model([message], "nbagent/scripted")
    assert "`In[1]` (the source of cell [1]):\n```python\na = 1\n```" in final["content"]
    with pytest.raises(BadReference, match=r"\{Out\[3\]\} is this %%agent cell itself"):
        expand_all("{Out[3]}", {}, nb)


def test_a_result_out_did_not_keep_is_given_in_its_text_form() -> None:
    cap = OutputCapture(_Shell())
    cap.current = 2
    cap._add("execute_result", {"text/plain": "<b>bold</b> as text", "text/html": "<b>bold</b>"})
    nb = Notebook(current=3, inputs=["", "a", "b"], results={}, captured=cap)  # Out's cache was off
    _, _, refs = expand_all("{Out[2]}", {}, nb)
    (final,), _ = for_model([notebook_message(refs, nb)], "nbagent/scripted")  # type: ignore[list-item]
    assert "returned (text/html; its text form):\n```\n<b>bold</b> as text\n```" in final["content"]
