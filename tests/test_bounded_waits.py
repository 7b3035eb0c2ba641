"""Every wait is bounded (issue 45): a model call has a deadline on the whole call, streamed or not, in-process and
through the kernel's model process, and `nbagent run` ends at its `--timeout` and at Ctrl-C or SIGTERM, with the
run recorded as interrupted, the log verifying and the run resumable.

The server is tests/stub_openai.py on 127.0.0.1 with a `Trickle`: a reply that keeps coming, a piece every 50 ms,
for a minute, so that no read ever waits long and only a deadline on the call stops it. No test asserts a time:
each asserts the outcome (the error, the status, the exit code) and that the server saw the client leave before
the reply's end (`Recorded.client_left`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from stub_openai import Recorded, Reply, StubOpenAI, Trickle

from nbagent.models import llm
from nbagent.models import process as modelproc
from nbagent.models.llm import complete
from nbagent.models.reply import ModelError, ModelSettings
from nbagent.store import Store

MODEL = "openai/stub-model"
ASK = [{"role": "user", "content": "say hello"}]
ENDLESS = Trickle(every=0.05, seconds=60.0)  # a minute of pieces: far longer than any deadline below


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        server.fallback = Reply(content="hello from the stub")
        yield server


def settings(stub: StubOpenAI, **kw: Any) -> ModelSettings:
    # 6 s: the deadline covers a worker's first litellm call, imports and all, on a loaded machine (1.5 s did not)
    base: dict[str, Any] = dict(model=MODEL, api_base=stub.base_url, api_key="sk-test-bounded", max_retries=3,
                                retry_base=0.01, retry_cap=0.05, timeout=6.0)
    return ModelSettings(**{**base, **kw})


def left_early(record: Recorded, wait: float = 30.0) -> bool:
    """Whether the client closed the connection before the trickle's end (the server notices at its next piece)."""
    deadline = time.monotonic() + wait
    while record.client_left is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return record.client_left is True


def deadline_error(exc: ModelError, seconds: str, setting: str) -> None:
    """The one line a call that ran past its deadline fails with: a timeout, not retried, naming both."""
    text = str(exc)
    assert "\n" not in text and exc.error_type == "ModelTimeout" and not exc.transient, text
    assert "failed (not retried): ModelTimeout:" in text and f"within {seconds} s" in text, text
    assert setting in text, text


# ------------------------------------------------------------------------------------------ the model layer


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "not-streamed"])
def test_a_reply_that_trickles_forever_is_cut_off_at_the_calls_deadline(stub: StubOpenAI, streamed: bool) -> None:
    stub.push(ENDLESS)
    tokens: list[str] = []
    with pytest.raises(ModelError) as info:
        asyncio.run(complete(settings(stub), ASK, [], on_token=tokens.append if streamed else None))
    deadline_error(info.value, "6", "Agent(timeout=...)")
    [request] = stub.requests  # not retried: a retry would wait as long again for the same answer
    assert left_early(request) and request.trickled < 1200
    assert not streamed or tokens  # it was answering all along: each read was quick, only the call was long


def test_the_setting_named_is_the_one_the_deadline_came_from(stub: StubOpenAI) -> None:
    stub.push(ENDLESS)
    with pytest.raises(ModelError) as info:
        asyncio.run(complete(settings(stub, timeout=1, timeout_setting="NBAGENT_MODEL_TIMEOUT"), ASK, []))
    deadline_error(info.value, "1", "NBAGENT_MODEL_TIMEOUT")


def test_quick_failures_are_still_retried_within_the_deadline(stub: StubOpenAI) -> None:
    from stub_openai import HttpError

    stub.push(HttpError(503), Reply(content="fine now"))
    reply = asyncio.run(complete(settings(stub), ASK, [], on_token=lambda _: None))
    assert reply.content == "fine now" and reply.retry_count == 1


@pytest.fixture
def process(stub: StubOpenAI, monkeypatch: pytest.MonkeyPatch) -> Iterator[modelproc.ModelProcess]:
    """A model process this test process's calls go to, as a kernel's do."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-process")
    p = modelproc.ModelProcess(("nbagent.models.llm",))
    monkeypatch.setattr(modelproc, "_process", p)
    p.loaded.result(120)
    yield p
    p.close()
    p.proc.wait(30)


@pytest.mark.slow
def test_through_the_model_process_the_deadline_cancels_the_call_there(process: modelproc.ModelProcess,
                                                                       stub: StubOpenAI) -> None:
    stub.push(ENDLESS)
    tokens: list[str] = []
    with pytest.raises(ModelError) as info:
        asyncio.run(llm.complete(settings(stub), ASK, [], on_token=tokens.append))
    deadline_error(info.value, "6", "Agent(timeout=...)")
    [request] = stub.requests
    assert left_early(request) and tokens  # the process stopped reading that stream
    assert not process._pending and process.alive()
    reply = asyncio.run(llm.complete(settings(stub), ASK, [], on_token=lambda _: None))
    assert reply.content == "hello from the stub"  # and it answers the next call


@pytest.mark.kernel
def test_in_a_notebook_the_deadline_is_model_timeout_and_its_cell_fails(stub: StubOpenAI, tmp_path: Path) -> None:
    from kernel_harness import Kernel

    k = Kernel(tmp_path, env={"OPENAI_API_KEY": "sk-test-bounded", "OPENAI_API_BASE": stub.base_url,
                              "NBAGENT_MODEL": "openai/gpt-4o-mini"})
    try:
        assert k.run("%load_ext nbagent", cell_id="setup").ok
        bad = k.run("%agent config model_timeout=0", cell_id="bad")
        assert bad.reply["content"]["status"] == "error" and "more than 0" in bad.reply["content"]["evalue"]
        assert k.run("%agent config model_timeout=1.5", cell_id="cfg").ok
        stub.push(ENDLESS)
        cell = k.run("%%agent\nsay hello at length", cell_id="c1", timeout=120)
        reply = cell.reply["content"]  # type: ignore[index]
        assert reply["status"] == "error" and reply["ename"] == "RunFailed", reply
        assert "ModelTimeout: no complete reply within 1.5 s" in reply["evalue"], reply["evalue"]
        assert "%agent config model_timeout=SECONDS" in reply["evalue"]
        assert left_early(stub.requests[0])  # through the kernel's model process, which stopped reading
    finally:
        k.close()


# ------------------------------------------------------------------------------------------ nbagent run


def notebook(folder: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    path = folder / "slow.ipynb"
    nbformat.write(nb, path)
    return path


AGENT = ("%load_ext nbagent", "%%agent --model openai/stub-model\nsay hello at length",
         "open('after.txt', 'w').write('the next cell ran')")


def nbagent(stub: StubOpenAI, folder: Path, *args: str, stderr: Any = subprocess.PIPE) -> subprocess.Popen[str]:
    """`nbagent run` as a person starts it in a terminal: its own process group, as a shell gives each job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBAGENT_")}
    env.update(OPENAI_API_BASE=stub.base_url, OPENAI_API_KEY="sk-test-bounded")
    exe = Path(sys.executable).with_name("nbagent")
    return subprocess.Popen([str(exe), *args], cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=stderr, start_new_session=True)


def trickling(stub: StubOpenAI, proc: subprocess.Popen[str]) -> Recorded:
    """The request once its answer is coming (slowly)."""
    deadline = time.monotonic() + 120
    while not (stub.requests and stub.requests[0].trickled > 5):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return stub.requests[0]


def only_run(folder: Path) -> Any:
    store = Store(folder / "slow.nbagent", readonly=True)
    [run_id] = store.run_ids()
    return store.run_state(run_id)


def verify(folder: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("nbagent")
    return subprocess.run([str(exe), "verify", "slow.ipynb"], cwd=folder, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.kernel
def test_nbagent_run_timeout_covers_a_model_wait(stub: StubOpenAI, tmp_path: Path) -> None:
    stub.push(ENDLESS)
    notebook(tmp_path, *AGENT)
    proc = nbagent(stub, tmp_path, "run", "slow.ipynb", "--timeout", "15")  # long past the kernel's start, loaded
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    assert "a cell ran past --timeout 15 s and was interrupted: RunInterrupted" in err, err
    assert "interrupted" in out and out.strip().splitlines()[-1].startswith("FAILED")
    assert left_early(stub.requests[0])  # the answer was not waited for to its end
    assert only_run(tmp_path).status.value == "interrupted" and not (tmp_path / "after.txt").exists()


@pytest.mark.kernel
def test_sigterm_ends_nbagent_run_the_log_verifies_and_the_run_resumes(stub: StubOpenAI, tmp_path: Path) -> None:
    stub.push(ENDLESS)
    notebook(tmp_path, *AGENT)
    proc = nbagent(stub, tmp_path, "run", "slow.ipynb")
    request = trickling(stub, proc)
    proc.terminate()  # SIGTERM: what CI sends a job it cancels
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert out.strip().splitlines()[-1].startswith("STOPPED by SIGTERM") and "stopped by SIGTERM" in err
    assert left_early(request) and not (tmp_path / "after.txt").exists()
    state = only_run(tmp_path)
    assert state.status.value == "interrupted"
    checked = verify(tmp_path)
    assert checked.returncode == 0 and checked.stdout.startswith("ok:"), checked.stdout + checked.stderr
    saved = nbformat.read(tmp_path / "slow.ipynb", as_version=4)  # written as far as it got
    assert [o["output_type"] for o in saved.cells[1].outputs][-1] == "error"
    notebook(tmp_path, "%load_ext nbagent", f"%agent resume {state.run_id}")  # the stub answers at once now
    again = nbagent(stub, tmp_path, "run", "slow.ipynb")
    out, err = again.communicate(timeout=180)
    assert again.returncode == 0, out + err
    resumed = only_run(tmp_path)
    assert resumed.run_id == state.run_id and resumed.status.value == "completed"
    assert resumed.answer == "hello from the stub"
    assert verify(tmp_path).returncode == 0


@pytest.mark.kernel
def test_ctrl_c_ends_nbagent_run_in_any_cell(stub: StubOpenAI, tmp_path: Path) -> None:
    notebook(tmp_path, "open('started.txt', 'w').write('x')\nimport time\ntime.sleep(60)",
             "open('after.txt', 'w').write('the next cell ran')")
    proc = nbagent(stub, tmp_path, "run", "slow.ipynb")
    deadline = time.monotonic() + 120
    while not (tmp_path / "started.txt").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal: the whole foreground job
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, out + err
    assert "stopped by SIGINT: KeyboardInterrupt" in err and not (tmp_path / "after.txt").exists()
    saved = json.loads((tmp_path / "slow.ipynb").read_text())
    assert saved["cells"][0]["outputs"][-1]["ename"] == "KeyboardInterrupt"


@pytest.mark.kernel
def test_ctrl_c_twice_stops_at_once_and_the_log_still_says_interrupted(stub: StubOpenAI, tmp_path: Path) -> None:
    """The impatient second Ctrl-C shuts the kernel down at once, maybe before the run recorded its interrupt:
    `nbagent run` then records it, so the log never says `running` for a run nothing runs."""
    stub.push(ENDLESS)
    notebook(tmp_path, *AGENT)
    log = tmp_path / "stderr.txt"
    with log.open("w") as err_file:
        proc = nbagent(stub, tmp_path, "run", "slow.ipynb", stderr=err_file)
        request = trickling(stub, proc)
        os.killpg(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 60
        while "interrupting the kernel" not in log.read_text():  # the first one was taken: two, not one merged
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    err = log.read_text()
    assert proc.returncode == 128 + signal.SIGINT, out + err
    # The second Ctrl-C shuts the kernel down, unless the first had already ended the cell when it came (on a loaded
    # machine this test can be slower than the kernel's interrupt): either way the log says interrupted.
    assert "SIGINT again: shutting the kernel down now" in err or "was interrupted; it is saved" in err, err
    assert left_early(request) and not (tmp_path / "after.txt").exists()
    assert only_run(tmp_path).status.value == "interrupted"
    assert verify(tmp_path).returncode == 0
