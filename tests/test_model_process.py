"""The kernel's model process (nbagent/models/process.py): litellm in a child process, called over JSON lines.

First through `llm.complete` in this process with a real child (the stub OpenAI server on 127.0.0.1 behind it):
answers, streamed tokens, errors under their own names (retries and refusals for length depend on them), a
cancelled call, the environment of each call. Then in real kernels: nothing of the library in the kernel, a key set
after loading, a killed process, a kernel that ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_harness import Kernel
from stub_openai import Delay, HttpError, Reply, StubOpenAI
from test_model_loading import STATE, WAIT_READY, answered, real_kernel

from nbagent.models import llm
from nbagent.models import process as modelproc


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        server.fallback = Reply(content="hello from the stub")
        yield server


@pytest.fixture
def process(stub: StubOpenAI, monkeypatch: pytest.MonkeyPatch) -> Iterator[modelproc.ModelProcess]:
    """A model process that this test process's model calls go to (as a kernel's do), ended after the test."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-process")
    monkeypatch.setenv("OPENAI_API_BASE", stub.base_url)
    p = modelproc.ModelProcess(("nbagent.models.llm",))
    monkeypatch.setattr(modelproc, "_process", p)
    p.loaded.result(120)
    yield p
    p.close()
    p.proc.wait(30)


def ended(pid: int, timeout: float = 30) -> None:
    """Wait until process `pid` is gone (or a zombie its parent has not reaped): a model process after its kernel."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text():
        assert time.monotonic() < deadline, f"process {pid}, the model process, outlived its kernel"
        time.sleep(0.1)


SETTINGS = llm.ModelSettings(model="openai/gpt-4o-mini", max_retries=2, retry_base=0.01)
ASK = [{"role": "user", "content": "say hello"}]


@pytest.mark.slow
def test_a_streamed_answer_its_cost_and_the_library_calls(process: modelproc.ModelProcess) -> None:
    tokens: list[str] = []
    reply = asyncio.run(llm.complete(SETTINGS, ASK, [], on_token=tokens.append))
    assert reply.content == "hello from the stub" and "".join(tokens) == reply.content and len(tokens) == 4
    assert reply.usage.prompt_tokens == 11 and reply.cost is not None and reply.cost > 0
    assert llm.library("token_counter", model="openai/gpt-4o-mini", text="hello world") == 2
    assert llm.library("decode", model="openai/gpt-4o-mini",
                       tokens=llm.library("encode", model="openai/gpt-4o-mini", text="a b c")) == "a b c"
    assert llm.accepts_images("openai/gpt-4o-mini") is True
    assert process.alive()


@pytest.mark.slow
def test_errors_keep_their_names_so_retries_and_refusals_read_the_same(process: modelproc.ModelProcess,
                                                                       stub: StubOpenAI) -> None:
    stub.push(HttpError(400, message="This model's maximum context length is 16000 tokens (context_length_exceeded)"))
    with pytest.raises(llm.ModelError) as refused:
        asyncio.run(llm.complete(SETTINGS, ASK, []))
    assert refused.value.error_type == "ContextWindowExceededError" and not refused.value.transient
    assert "maximum context length is 16000 tokens" in str(refused.value)
    stub.push(HttpError(429), HttpError(503))
    reply = asyncio.run(llm.complete(SETTINGS, ASK, [], on_token=lambda _: None))
    assert reply.content == "hello from the stub" and reply.retry_count == 2
    stub.push(HttpError(401, message="Incorrect API key provided"))
    with pytest.raises(llm.ModelError, match=r"AuthenticationError: .*Incorrect API key"):
        asyncio.run(llm.complete(SETTINGS, ASK, []))


@pytest.mark.slow
def test_a_cancelled_call_is_cancelled_in_the_process_and_the_next_one_answers(process: modelproc.ModelProcess,
                                                                                stub: StubOpenAI) -> None:
    stub.push(Delay(3.0, then=Reply(content="too late")))

    async def cancelled() -> None:
        call = asyncio.ensure_future(llm.complete(SETTINGS, ASK, [], on_token=lambda _: None))
        while not stub.requests:
            await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(cancelled())
    reply = asyncio.run(llm.complete(SETTINGS, ASK, []))
    assert reply.content == "hello from the stub"
    assert not process._pending  # nothing left waiting


@pytest.mark.slow
def test_each_call_takes_the_environment_as_it_is_then(process: modelproc.ModelProcess, stub: StubOpenAI,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    asyncio.run(llm.complete(SETTINGS, ASK, []))
    assert stub.requests[-1].headers["authorization"] == "Bearer sk-test-process"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-later")
    asyncio.run(llm.complete(SETTINGS, ASK, []))
    assert stub.requests[-1].headers["authorization"] == "Bearer sk-set-later"
    assert llm.library("token_counter", model="openai/gpt-4o-mini", messages=ASK) > 0
    monkeypatch.delenv("OPENAI_API_KEY")  # one the kernel removed is removed there
    found = llm.library("validate_environment", model="openai/gpt-4o-mini")
    assert "OPENAI_API_KEY" in found["missing_keys"]


@pytest.mark.slow
def test_the_process_environment_is_exactly_the_kernel_s(stub: StubOpenAI, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever sets a variable in the model process that the kernel never had (a dotfile a library reads at
    import, a module's own default) is gone by the first call: the process works with the kernel's environment
    only (modelproc.LIBRARY_OWN aside)."""
    (tmp_path / "sets_variables.py").write_text(
        "import os\nos.environ['ANTHROPIC_API_KEY'] = 'sk-ant-set-in-the-process'\n"
        "os.environ['OPENAI_BASE_URL'] = 'http://127.0.0.1:9/v1'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-process")
    monkeypatch.setenv("OPENAI_API_BASE", stub.base_url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    p = modelproc.ModelProcess(("sets_variables", "nbagent.models.llm"))
    monkeypatch.setattr(modelproc, "_process", p)
    try:
        p.loaded.result(120)
        found = llm.library("validate_environment", model="anthropic/claude-3-5-haiku-20241022")
        assert "ANTHROPIC_API_KEY" in found["missing_keys"]
        asyncio.run(llm.complete(SETTINGS, ASK, []))  # to the kernel's server, not the one the module named
        assert stub.requests[-1].headers["authorization"] == "Bearer sk-test-process"
    finally:
        p.close()
        p.proc.wait(30)


@pytest.mark.slow
def test_a_process_that_cannot_load_says_which_package_is_missing(stub: StubOpenAI) -> None:
    p = modelproc.ModelProcess(("nbagent_provider_pkg_not_installed", "nbagent.models.llm"))
    with pytest.raises(ModuleNotFoundError) as missing:
        p.loaded.result(60)
    assert missing.value.name == "nbagent_provider_pkg_not_installed"
    assert p.proc.wait(30) != 0


# ------------------------------------------------------------------------------------------ in a kernel


@pytest.mark.kernel
def test_the_kernel_never_imports_the_library_and_a_key_set_later_is_used(tmp_path: Path, stub: StubOpenAI) -> None:
    k = real_kernel(tmp_path, stub)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")
        first = k.run("%%agent --new\nsay hello", cell_id="first", timeout=120)
        assert first.ok and answered(first), first.stderr
        inside = k.run("import os, sys\nfrom nbagent.models import process as modelproc\n"
                       "print(sorted(m for m in ('litellm', 'openai', 'tiktoken', 'aiohttp') if m in sys.modules), "
                       "modelproc.existing().proc.pid != os.getpid(), loading.status()['where'])", cell_id="inside")
        assert inside.stdout == "[] True process\n", inside.stdout + inside.stderr
        assert k.run("os.environ['OPENAI_API_KEY'] = 'sk-set-in-a-cell'", cell_id="key").ok
        second = k.run("%%agent --new\nsay hello", cell_id="second", timeout=120)
        assert second.ok and answered(second)
        assert stub.requests[-1].headers["authorization"] == "Bearer sk-set-in-a-cell"
    finally:
        k.close()


@pytest.mark.kernel
def test_a_killed_model_process_is_started_again_and_ends_with_its_kernel(tmp_path: Path, stub: StubOpenAI) -> None:
    k = real_kernel(tmp_path, stub)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        first = k.run("%%agent --new\nsay hello", cell_id="first", timeout=120)
        assert first.ok and answered(first), first.stderr
        pid = int(k.run("from nbagent.models import process as modelproc\nprint(modelproc.existing().proc.pid)",
                        cell_id="pid").stdout)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while k.run(STATE, cell_id="state").stdout != "ended\n":
            assert time.monotonic() < deadline, "the kernel never saw its model process end"
            time.sleep(0.1)
        again = k.run("%%agent --new\nsay hello", cell_id="again", timeout=120)
        assert again.ok and answered(again), again.stderr
        pid = int(k.run("print(modelproc.existing().proc.pid)", cell_id="pid2").stdout)
    finally:
        k.close()
    ended(pid)


@pytest.mark.kernel
def test_a_kernel_killed_outright_takes_its_model_process_with_it(tmp_path: Path, stub: StubOpenAI) -> None:
    k = Kernel(tmp_path, env={"OPENAI_API_KEY": "sk-test", "OPENAI_API_BASE": stub.base_url,
                              "NBAGENT_MODEL": "openai/gpt-4o-mini"})
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")
        pid = int(k.run("from nbagent.models import process as modelproc\nprint(modelproc.existing().proc.pid)",
                        cell_id="pid").stdout)
        os.kill(k.km.provisioner.process.pid, signal.SIGKILL)  # type: ignore[union-attr]  # no shutdown, no atexit
        ended(pid)
    finally:
        k.close()


@pytest.mark.kernel
def test_an_interpreter_embedded_in_another_program_loads_in_a_thread(tmp_path: Path, stub: StubOpenAI) -> None:
    """Where `sys.executable` is not a Python (a program embedding the interpreter), no model process can be
    started: the kernel imports litellm in a thread instead, and the agent answers."""
    k = real_kernel(tmp_path, stub)
    try:
        assert k.run("import sys\nsys.executable = '/usr/bin/env'", cell_id="embedded").ok  # what embedding looks like
        assert k.run("%load_ext nbagent", cell_id="load").ok
        agent = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert agent.ok and answered(agent), agent.stderr
        where = k.run("from nbagent.ipython import loading\nprint(loading.status()['where'], 'litellm' in sys.modules)",
                      cell_id="where")
        assert where.stdout == "thread True\n", where.stdout + where.stderr
    finally:
        k.close()
