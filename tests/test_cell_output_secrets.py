"""Secrets never reach the notebook file through nbagent's cells (issue 45): what the agent's code prints, displays,
returns or raises leaves the kernel redacted, for JupyterLab (which saves what IOPub carried) and for `nbagent run`
(which writes the agent's cells from IOPub); a person's own cell printing the same value is left as it is, and the
agent's output is otherwise intact (text, images, updated displays).

In a real kernel driven as JupyterLab drives it, with the scripted model and a key in the environment; then through
`nbagent run` and nbconvert's HTML; and, as a property over generated writes and flushes, the text a front end
receives for the cell's streams is exactly what the redactor makes of the whole text, however it was split.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import RecordingKernel, script

from nbagent.ipython import cell_redaction
from nbagent.ipython.cell_redaction import CellRedaction
from nbagent.secrets.redactor import REDACTED, Redactor

KEY = "s3cr3t-value-0123456789abcdef"  # in the environment under a name that says KEY
TOKEN = "ghp_" + "A1b2" * 9  # shaped like a GitHub token, computed by the cell (its source never holds it)
ENV = {"MY_SERVICE_API_KEY": KEY}
# a 1x1 PNG: its base64 bytes must reach the cell unchanged
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJ"
                       "RU5ErkJggg==")
PNG_B64 = base64.b64encode(PNG).decode()

PRINTS = f'''import os, sys, base64
from IPython.display import display, HTML, Markdown, JSON, Image
key = os.environ["MY_SERVICE_API_KEY"]
tok = "gh" + "p_" + "A1b2" * 9
print("visible text", key)
print("token:", tok, file=sys.stderr)
sys.stdout.write(key[:9]); sys.stdout.flush(); sys.stdout.write(key[9:] + " after a split\\n")
display(HTML("<b>" + key + "</b>"))
display(Markdown("**" + tok + "**"))
display(JSON({{"nested": {{"value": key}}}}))
display(Image(data=base64.b64decode("{PNG_B64}")))
handle = display("first", display_id=True)
handle.update("updated " + key)
os.system("echo from a subprocess $MY_SERVICE_API_KEY")
print("the end")
'''
RETURNS = '''import os
class Shows:
    def __repr__(self):
        return "repr of " + os.environ["MY_SERVICE_API_KEY"]
    def _repr_html_(self):
        return "<i>" + os.environ["MY_SERVICE_API_KEY"] + "</i>"
Shows()
'''
RAISES = '''import os
print("before the error")
raise ValueError("bad key " + os.environ["MY_SERVICE_API_KEY"])
'''
# a task the agent's cell leaves running prints after the cell ended, under the cell's parent: the kernel's hooks are
# gone by then; `nbagent run` redacts what it writes
LATE = '''import asyncio, os
async def later():
    await asyncio.sleep(0.3)
    print("late", os.environ["MY_SERVICE_API_KEY"])
left_running = asyncio.get_running_loop().create_task(later())
'''
AGENT = "%%agent --script s.json --approve all --autonomy L3 --new\ngo"


def call(code: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_cell", "arguments": {"code": code}}]}


def shown(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The outputs a front end ends up with for these IOPub messages (clear_output, updates, streams merged)."""
    from nbagent.cli.run_cells import outputs_from_messages

    plain = [{"header": {"msg_type": m["msg_type"]}, "msg_type": m["msg_type"], "content": m["content"],
              "parent_header": m["parent_header"]} for m in msgs]
    return [dict(o) for o in outputs_from_messages(plain)]


def texts(outputs: list[dict[str, Any]]) -> str:
    return json.dumps(outputs)


class FrontEndKernel(RecordingKernel):
    """The harness's kernel as JupyterLab starts it: ipykernel forwards what is written to the process's file
    descriptors (a subprocess's output) only where no pytest is said to run (`PYTEST_CURRENT_TEST`)."""

    def _start(self) -> None:
        self.env.pop("PYTEST_CURRENT_TEST", None)
        super()._start()


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecordingKernel]:
    """One kernel for the module: nbagent loaded, and a person's cell that prints the key (left as it printed)."""
    k = FrontEndKernel(tmp_path_factory.mktemp("secrets"), env=ENV)
    try:
        assert k.run("%load_ext nbagent", cell_id="setup").ok
        person = k.run("import os\nprint(os.environ['MY_SERVICE_API_KEY'])", cell_id="mine")
        assert person.stdout == KEY + "\n"  # the person's cell: not nbagent's business
        yield k
    finally:
        k.close()


def run_agent(k: RecordingKernel, *codes: str, cell_id: str) -> tuple[list[str], Any]:
    """An %%agent cell whose agent runs these cells (approved); their msg ids, and the %%agent cell."""
    before = len(k.comms())
    script(k.folder / "s.json", *(call(c) for c in codes), {"content": "done"})
    request = k.run(AGENT, cell_id=cell_id)
    assert request.ok, (request.stderr, request.outputs)
    k.pump(0.5)
    ids = [c["msg_id"] for c in k.comms()[before:]]
    assert len(ids) == len(codes), ids
    return ids, request


@pytest.fixture(scope="module")
def ran(kernel: RecordingKernel) -> tuple[RecordingKernel, list[str], Any]:
    ids, request = run_agent(kernel, PRINTS, RETURNS, RAISES, cell_id="ask")
    return kernel, ids, request


@pytest.mark.kernel
def test_what_the_agents_cell_prints_and_displays_leaves_the_kernel_redacted(
        ran: tuple[RecordingKernel, list[str], Any]) -> None:
    k, (printed, _, _), request = ran
    msgs = k.by_parent[printed]
    for m in msgs:  # every message of the cell, as it travelled
        assert KEY not in json.dumps(m["content"]) and TOKEN not in json.dumps(m["content"]), m
    outputs = shown(msgs)
    stdout = "".join(o["text"] for o in outputs if o.get("name") == "stdout")
    assert stdout == f"visible text {REDACTED}\n{REDACTED} after a split\nthe end\n", stdout
    assert "".join(o["text"] for o in outputs if o.get("name") == "stderr") == f"token: {REDACTED}\n"
    data = [o["data"] for o in outputs if o["output_type"] == "display_data"]
    assert data[0]["text/html"] == f"<b>{REDACTED}</b>"
    assert data[1]["text/markdown"] == f"**{REDACTED}**"
    assert data[2]["application/json"] == {"nested": {"value": REDACTED}}
    assert data[3]["image/png"].replace("\n", "") == PNG_B64  # the image, byte for byte
    assert data[4]["text/plain"] == f"'updated {REDACTED}'"  # the updated display, updated and redacted
    # a subprocess writes to the kernel's file descriptor: ipykernel puts that in the %%agent cell, redacted too
    assert f"from a subprocess {REDACTED}" in request.stdout and KEY not in request.stdout, request.stdout


@pytest.mark.kernel
def test_the_value_the_agents_cell_returns_leaves_the_kernel_redacted(
        ran: tuple[RecordingKernel, list[str], Any]) -> None:
    k, (_, returned, _), _ = ran
    msgs = k.by_parent[returned]
    assert all(KEY not in json.dumps(m["content"]) for m in msgs), msgs
    (result,) = [m for m in msgs if m["msg_type"] == "execute_result"]
    assert result["content"]["data"] == {"text/plain": f"repr of {REDACTED}", "text/html": f"<i>{REDACTED}</i>"}
    assert isinstance(result["content"]["execution_count"], int)


@pytest.mark.kernel
def test_the_error_the_agents_cell_raises_is_redacted_in_the_cell(ran: tuple[RecordingKernel, list[str], Any]) -> None:
    """ipykernel sends a cell's error itself, through no hook (zmqshell's `_showtraceback`): that one message goes
    out as raised, and the kernel then clears the cell and shows its outputs again, the error redacted, so what a
    front end shows, and saves, holds no secret."""
    k, (_, _, raised), _ = ran
    msgs = k.by_parent[raised]
    assert all(KEY not in json.dumps(m["content"]) for m in msgs if m["msg_type"] != "error"), msgs
    outputs = shown(msgs)
    assert KEY not in texts(outputs), outputs
    assert [o["output_type"] for o in outputs] == ["stream", "error"], outputs
    assert outputs[0]["text"] == "before the error\n"
    assert outputs[1]["ename"] == "ValueError" and outputs[1]["evalue"] == f"bad key {REDACTED}"
    assert any(REDACTED in line for line in outputs[1]["traceback"])
    assert msgs[-1]["msg_type"] == "error" and KEY not in json.dumps(msgs[-1]["content"])  # the last word: redacted


@pytest.mark.kernel
def test_the_model_and_the_persons_next_cell_are_as_before(ran: tuple[RecordingKernel, list[str], Any]) -> None:
    k, _, _ = ran
    after = k.run("import os\nprint('again', os.environ['MY_SERVICE_API_KEY'])", cell_id="mine2")
    assert after.stdout == f"again {KEY}\n"  # no hook left behind on the person's cells
    from nbagent.store import Store

    store = Store(k.folder / "test.nbagent", readonly=True)
    blob = "".join(p.read_text(errors="replace") for p in store.path.iterdir() if p.is_file())
    assert KEY not in blob and "visible text" in blob and "the end" in blob


# ------------------------------------------------------------------------------------------ an attack round

BY_CHARACTER = '''import os, sys
for ch in os.environ["MY_SERVICE_API_KEY"]:  # one write and one flush per character
    sys.stdout.write(ch); sys.stdout.flush()
print()
sys.stdout.write("no newline at the end")
'''
MANY_LINES = '''import os
print(("line " + os.environ["MY_SERVICE_API_KEY"] + "\\n") * 40_000, end="")
'''
A_THREAD = '''import os, threading
t = threading.Thread(target=lambda: print("a thread says", os.environ["MY_SERVICE_API_KEY"]))
t.start(); t.join()
print("pass" + "word: " + "hunter2-" + "not-in-the-environment")  # (its source does not look like one)
'''
DISPLAY_THEN_RAISE = '''import os
from IPython.display import display, HTML, Image
import base64
display(HTML("<p>kept</p>"))
display(Image(data=base64.b64decode(PNG)))
print("half a line", end="")
raise KeyError(os.environ["MY_SERVICE_API_KEY"])
'''.replace("PNG", repr(PNG_B64))
A_REPR_RAISES = '''import os
class Bad:
    def __repr__(self):
        raise ValueError("repr failed on " + os.environ["MY_SERVICE_API_KEY"])
Bad()
'''


@pytest.fixture(scope="module")
def attacked(kernel: RecordingKernel) -> tuple[RecordingKernel, list[str], Any]:
    ids, request = run_agent(kernel, BY_CHARACTER, MANY_LINES, A_THREAD, DISPLAY_THEN_RAISE, A_REPR_RAISES,
                             cell_id="ask2")
    return kernel, ids, request


@pytest.mark.kernel
def test_an_attack_round_on_the_agents_cells(attacked: tuple[RecordingKernel, list[str], Any]) -> None:
    k, (by_char, many, threaded, display_raise, bad_repr), request = attacked
    for msg_id in (by_char, many, threaded):  # no message of these cells carried it, as sent
        assert all(KEY not in json.dumps(m["content"]) for m in k.by_parent[msg_id])
    # a key written a character at a time, each flushed: held until its word ended, then redacted whole
    (out,) = [o for o in shown(k.by_parent[by_char]) if o.get("name") == "stdout"]
    assert out["text"] == f"{REDACTED}\nno newline at the end", out  # a last word without a newline: shown too
    # 1.8 MB of lines (past the stream redactor's segment): every line redacted, nothing lost
    text = "".join(o["text"] for o in shown(k.by_parent[many]) if o.get("name") == "stdout")
    assert text == f"line {REDACTED}\n" * 40_000
    # a thread's print goes under the %%agent cell's request (ipykernel's global parent): redacted while the cell
    # runs; a password no environment holds, found by its shape
    assert f"a thread says {REDACTED}" in request.stdout and KEY not in request.stdout
    assert [o["text"] for o in shown(k.by_parent[threaded])] == [f"password: {REDACTED}\n"]
    # an error after displays and a half line: the cell shown again, in order, images intact, the error redacted
    outputs = shown(k.by_parent[display_raise])
    assert KEY not in texts(outputs)
    assert [o["output_type"] for o in outputs] == ["display_data", "display_data", "stream", "error"], outputs
    assert outputs[1]["data"]["image/png"].replace("\n", "") == PNG_B64 and outputs[2]["text"] == "half a line"
    assert outputs[3]["ename"] == "KeyError" and outputs[3]["evalue"] == f"'{REDACTED}'"
    # a repr that raises while the value is shown: ipykernel's error of the display hook, corrected the same way
    outputs = shown(k.by_parent[bad_repr])
    assert KEY not in texts(outputs) and any(o["output_type"] == "error" for o in outputs), outputs


# ------------------------------------------------------------------------------------------ nbagent run


@pytest.mark.kernel
def test_nbagent_run_saves_and_converts_no_secret_of_the_agents_cells(tmp_path: Path) -> None:
    script(tmp_path / "s.json", call(PRINTS), call(RETURNS), call(RAISES), call(LATE), {"content": "done"})
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("import os\nprint(os.environ['MY_SERVICE_API_KEY'])"),
                nbformat.v4.new_code_cell("%%agent --script s.json --autonomy L3\ngo"),
                nbformat.v4.new_code_cell("import asyncio\nawait asyncio.sleep(1)  # the agent's task prints now")]
    for cell, cid in zip(nb.cells, ["load", "mine", "ask", "wait"], strict=True):
        cell.id = cid
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    exe = Path(sys.executable).with_name("nbagent")
    done = subprocess.run([str(exe), "run", str(path), "--approve", "all", "--allow-tool-errors"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=400, check=False, env={**_env(), **ENV})
    saved = nbformat.read(path, as_version=4)
    ran_cells = [c for c in saved.cells if (c.metadata.get("nbagent") or {}).get("ran")]
    assert len(ran_cells) == 4, (done.stdout, done.stderr)
    mine = next(c for c in saved.cells if c.id == "mine")
    assert mine.outputs[0]["text"] == KEY + "\n"  # the person's cell, as it printed
    others = json.dumps([c for c in saved.cells if c.id != "mine"])
    assert KEY not in others and TOKEN not in others
    assert REDACTED in others and "visible text" in others and PNG_B64 in others.replace("\\n", "")
    error = next(o for o in ran_cells[2].outputs if o.output_type == "error")
    assert error.evalue == f"bad key {REDACTED}"
    assert [o.get("text") for o in ran_cells[3].outputs] == [f"late {REDACTED}\n"]
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter().from_notebook_node(saved)
    assert html.count(KEY) == 1 and TOKEN not in html  # the person's cell's line only


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("NBAGENT_")}


# ------------------------------------------------------------------------------------------ the property


def _stream_msg(text: str, parent: str, name: str = "stdout") -> dict[str, Any]:
    """A stream message as ipykernel's OutStream._flush makes it."""
    return {"header": {"msg_type": "stream", "msg_id": "x"}, "msg_type": "stream", "parent_header": {"msg_id": parent},
            "content": {"name": name, "text": text}, "metadata": {}}


_pieces = st.one_of(st.sampled_from([KEY, TOKEN, "password = hunter2hunter2", " ", "\n", "ok ", "sk-", "x" * 20]),
                    st.text(alphabet="ab -_:=\n\t./@", max_size=12))


@settings(max_examples=examples(150), deadline=None)
@given(writes=st.lists(st.tuples(_pieces, st.booleans()), max_size=25), cuts=st.lists(st.integers(0, 40), max_size=6))
def test_a_stream_split_anywhere_reaches_the_front_end_as_the_whole_text_redacts(
        writes: list[tuple[str, bool]], cuts: list[int]) -> None:
    """However the cell's text is written and flushed (a secret split across two writes, a flush between them), the
    stream text the front end receives is exactly `Redactor.text` of everything printed; messages of other parents
    (another thread's print, another cell) pass unchanged."""
    redactor = Redactor([KEY])
    r = CellRedaction(redactor, "M", streams_of=("R",))
    raw, sent, other = "", [], []
    pending = ""
    for i, (piece, flush) in enumerate(writes):
        # a piece cut somewhere: two writes (the secret split), with or without a flush between
        at = cuts[i % len(cuts)] % (len(piece) + 1) if cuts else len(piece)
        for part in (piece[:at], piece[at:]):
            raw += part
            pending += part
            if flush and pending:
                sent.append(r.stream(_stream_msg(pending, "M"))["content"]["text"])
                pending = ""
        if i % 4 == 3:
            msg = _stream_msg("another cell's " + KEY, "P")
            other.append(r.stream(msg) is msg)
    if pending:
        sent.append(r.stream(_stream_msg(pending, "M"))["content"]["text"])
    sent += [m["content"]["text"] for m in r.finish_streams()]
    assert "".join(sent) == redactor.text(raw)
    assert all(other)


def test_the_correction_shows_the_cell_again_in_order_and_says_what_it_could_not_keep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a correction sends (no kernel): a clear, the outputs as they were sent, redacted, the text printed just
    before the error ahead of it; past the size kept, one line says what is not shown again."""
    def display(data: dict[str, Any]) -> dict[str, Any]:
        return {"header": {"msg_type": "display_data"}, "parent_header": {"msg_id": "M"},
                "content": {"data": data, "metadata": {}, "transient": {}}}

    r = CellRedaction(Redactor([KEY]), "M")
    r.stream(_stream_msg("one " + KEY + "\nhalf", "M"))
    assert r.display(display({"text/html": f"<b>{KEY}</b>", "image/png": PNG_B64}))["content"]["data"] == \
        {"text/html": f"<b>{REDACTED}</b>", "image/png": PNG_B64}
    r.finish_streams("M")  # as before the error: the half line goes first
    sent = {"ename": "KeyError", "evalue": repr(KEY), "traceback": [f"KeyError: {KEY!r}"]}
    assert r.error(sent)["evalue"] == f"'{REDACTED}'" and r.corrects
    assert r.correction() == [
        ("clear_output", {"wait": False}),
        ("stream", {"name": "stdout", "text": f"one {REDACTED}\n"}),
        ("display_data", {"data": {"text/html": f"<b>{REDACTED}</b>", "image/png": PNG_B64}, "metadata": {},
                          "transient": {}}),
        ("stream", {"name": "stdout", "text": "half"}),
        ("error", {"ename": "KeyError", "evalue": f"'{REDACTED}'", "traceback": [f"KeyError: '{REDACTED}'"]})]
    monkeypatch.setattr(cell_redaction, "MAX_KEPT", 500)
    small = CellRedaction(Redactor([KEY]), "M")
    small.stream(_stream_msg("kept\n", "M"))
    small.display(display({"text/plain": "x" * 1_000}))
    small.error({"ename": "ValueError", "evalue": KEY, "traceback": []})
    kinds = [(kind, c.get("text", "")[:40]) for kind, c in small.correction()]
    assert kinds == [("clear_output", ""), ("stream", "kept\n"), ("stream", "[nbagent: 1 output(s) of this cell are n"),
                     ("error", "")]
    assert CellRedaction(Redactor([KEY]), "M").corrects is False  # nothing to correct: nothing sent again
