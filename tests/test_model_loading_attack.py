"""Attacks on loading the model library in a real kernel (nbagent/ipython/loading.py, issue 26).

Each test asserts the safe behaviour. One that failed when written is marked `# was a HOLE (fixed): ...`. A kernel
loads litellm in its model process (nbagent/models/process.py); tests of the thread that does it where no process can be
started run with `THREAD` (`NBAGENT_MODEL_PROCESS=0`), and tests whose answer differs run in both (`where`). The two
`xfail(strict=True)` cases are limits of the thread that loading.py documents (a cell that swaps sys.stdout or the
warning filters, which are process-wide, catches what the import prints or warns meanwhile); in the process they hold.

Two ways of holding the loading thread deterministically:
- `gate` (tests/test_model_loading.py): a module put first in `loading.MODULES`, waiting for the file `release`;
- `HOLD_AT`: a finder on `sys.meta_path` whose loader, when it runs one module (inside that module's import lock),
  touches `at-<name>` and waits for `release-<name>`. Held at `litellm`, it keeps the loader inside
  `llm.import_litellm`'s window, where the three LITELLM variables are set.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_harness import Kernel
from stub_openai import Delay, Reply, StubOpenAI
from test_model_loading import GATE, HOLD, STATE, WAIT_READY, answered, entered, held_kernel, real_kernel, release

pytestmark = pytest.mark.kernel

HOLD_AT = '''
import os, sys, time, importlib.machinery
class _HoldAt:
    """Holds the first import of `name` in its module's own lock (in exec_module, as a slow module would), never
    in the interpreter's global import lock (which find_spec runs under, and which nothing can interrupt)."""
    def __init__(self, name):
        self.name = name
    def find_spec(self, name, path=None, target=None):
        if name != self.name or os.path.exists("release-" + name):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None:
            return None
        real = spec.loader
        class Held:
            def create_module(self, spec):
                return real.create_module(spec)
            def exec_module(self, module):
                open("at-" + name, "w").close()
                for _ in range(6000):
                    if os.path.exists("release-" + name):
                        break
                    time.sleep(0.01)
                module.__loader__ = module.__spec__.loader = real
                real.exec_module(module)
        spec.loader = Held()
        return spec
sys.meta_path.insert(0, _HoldAt({name!r}))
'''


THREAD = {"NBAGENT_MODEL_PROCESS": "0"}  # the kernel imports litellm in a thread: no model process


def mode(where: str) -> dict[str, str]:
    return THREAD if where == "thread" else {}


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        server.fallback = Reply(content="hello from the stub")
        yield server


def hold_at(name: str) -> str:
    return HOLD_AT.format(name=name)


def wait_file(path: Path, k: Kernel, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        k.pump(0.05)


def wait_output(cell: object, text: str, k: Kernel, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in str(getattr(cell, "outputs", "")):
        assert time.monotonic() < deadline, f"{text!r} never shown"
        k.pump(0.1)


def error_lines(cell: object) -> list[str]:
    reply = getattr(cell, "reply", None)
    return list(reply["content"].get("traceback", [])) if reply else []


# ------------------------------------------------------------------------------------------ os.environ


def test_variables_the_person_set_before_loading_are_kept(tmp_path: Path, stub: StubOpenAI) -> None:
    k = Kernel(tmp_path, env={"OPENAI_API_KEY": "sk-test-loading", "OPENAI_API_BASE": stub.base_url,
                              "NBAGENT_MODEL": "openai/gpt-4o-mini", "MAX_BASE64_LENGTH_FOR_LOGGING": "123",
                              "LITELLM_LOCAL_MODEL_COST_MAP": "True", **THREAD})
    try:
        assert k.run(hold_at("litellm"), cell_id="hold").ok
        assert k.run("%load_ext nbagent", cell_id="load").ok
        wait_file(tmp_path / "at-litellm", k)
        during = k.run("import os\nprint(sorted((x, os.environ.get(x)) for x in ('LITELLM_LOCAL_MODEL_COST_MAP', "
                       "'LITELLM_TELEMETRY', 'MAX_BASE64_LENGTH_FOR_LOGGING')))", cell_id="during")
        # while importing, nbagent's own values are there, but never over the person's
        assert "('MAX_BASE64_LENGTH_FOR_LOGGING', '123')" in during.stdout, during.stdout
        (tmp_path / "release-litellm").touch()
        assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")
        after = k.run("print(os.environ.get('MAX_BASE64_LENGTH_FOR_LOGGING'), "
                      "os.environ.get('LITELLM_LOCAL_MODEL_COST_MAP'), os.environ.get('LITELLM_TELEMETRY'))",
                      cell_id="after")
        assert after.stdout == "123 True None\n", after.stdout + after.stderr
    finally:
        k.close()


# was a HOLE (fixed): llm.import_litellm pops every variable it added when the import ends, whatever happened to it
# meanwhile: a cell run during loading that sets LITELLM_TELEMETRY (or the other two) has its value silently removed.
def test_a_variable_the_person_sets_during_loading_is_not_undone(tmp_path: Path, stub: StubOpenAI) -> None:
    k = real_kernel(tmp_path, stub, **THREAD)
    try:
        assert k.run(hold_at("litellm"), cell_id="hold").ok
        assert k.run("%load_ext nbagent", cell_id="load").ok
        wait_file(tmp_path / "at-litellm", k)
        assert k.run("import os\nos.environ['LITELLM_TELEMETRY'] = 'mine'\nos.environ['MY_OWN'] = 'x'",
                     cell_id="set").ok
        (tmp_path / "release-litellm").touch()
        assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")
        after = k.run("print(os.environ.get('LITELLM_TELEMETRY'), os.environ.get('MY_OWN'))", cell_id="after")
        assert after.stdout == "mine x\n", after.stdout + after.stderr
    finally:
        k.close()


# ------------------------------------------------------------------------------------------ cells meanwhile


def test_two_agent_cells_queued_while_loading_both_answer_each_in_its_own_cell(tmp_path: Path,
                                                                              stub: StubOpenAI) -> None:
    k = held_kernel(tmp_path, stub)
    try:
        load = k.run("%load_ext nbagent", cell_id="load")
        assert load.ok
        (tmp_path / "go").touch()
        first = k.submit("%%agent --new\nsay hello", cell_id="first")
        second = k.submit("%%agent --new\nsay hello again", cell_id="second")
        resume = k.submit("%agent resume", cell_id="resume")  # a line that drives a run, queued too
        wait_output(first, "loading the model library", k)
        (tmp_path / "release").touch()
        for cell in (first, second):
            k.wait(cell, timeout=120)
            assert cell.ok and answered(cell), cell.stderr
            assert "loading the model library" not in str(cell.outputs)
        k.wait(resume, timeout=120)
        assert "GATE" not in second.stdout + second.stderr + resume.stdout + resume.stderr
        assert len(error_lines(resume)) <= 1
        k.pump(0.5)
        # the import's output went to the model process's stderr, not to a cell
        assert "GATE" not in first.stdout + first.stderr + load.stdout + load.stderr
        runs = [r.get("run_id") for c in (first, second) for r in c.records]
        assert len(set(runs)) == 2, runs
    finally:
        k.close()


def test_reload_and_unload_ext_during_loading(tmp_path: Path, stub: StubOpenAI) -> None:
    k = held_kernel(tmp_path, stub)
    try:
        load = k.run("%load_ext nbagent", cell_id="load")
        assert load.ok
        entered(tmp_path, k)
        reload = k.run("%reload_ext nbagent\n" + STATE, cell_id="reload")
        assert reload.ok and reload.stdout.endswith("loading\n"), reload.stdout + reload.stderr
        assert k.run("%unload_ext nbagent", cell_id="unload").ok
        assert k.run("%load_ext nbagent", cell_id="load-again").ok
        (tmp_path / "go").touch()
        cell = k.submit("%%agent --new\nsay hello", cell_id="agent")
        wait_output(cell, "loading the model library", k)
        (tmp_path / "release").touch()
        k.wait(cell, timeout=120)
        assert cell.ok and answered(cell), cell.stderr
        assert "GATE" not in cell.stdout + cell.stderr
        k.pump(0.5)
        assert "GATE" not in load.stdout + load.stderr  # the model process's stderr has it
        assert k.run("import threading\nprint([t.name for t in threading.enumerate() if 'nbagent-load' in t.name])",
                     cell_id="threads").stdout == "[]\n"
    finally:
        k.close()


def test_a_kernel_restart_during_loading(tmp_path: Path, stub: StubOpenAI) -> None:
    k = held_kernel(tmp_path, stub)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        entered(tmp_path, k)
        assert k.run(STATE, cell_id="state").stdout == "loading\n"
        k.restart()
        (tmp_path / "release").touch()
        assert k.run("%load_ext nbagent", cell_id="load2").ok
        cell = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert cell.ok and answered(cell), cell.stderr
    finally:
        k.close()


@pytest.mark.parametrize("where", ["process", "thread"])
def test_the_import_output_of_an_interrupted_starting_cell_never_reaches_another_cell(tmp_path: Path,
                                                                                      stub: StubOpenAI,
                                                                                      where: str) -> None:
    (tmp_path / "gate.py").write_text(GATE)
    k = real_kernel(tmp_path, stub, model=False, **mode(where))
    try:
        assert k.run(HOLD, cell_id="hold").ok
        assert k.run("%load_ext nbagent\n" + STATE, cell_id="load").stdout == "not started\n"
        starter = k.submit("%%agent --model openai/gpt-4o-mini --new\nsay hello", cell_id="starter")
        wait_output(starter, "loading the model library", k)
        k.km.interrupt_kernel()
        k.wait(starter, timeout=60)
        assert not starter.ok
        later = k.run("import os, time\nopen('go', 'w').close()\nwhile not os.path.exists('printed'):\n"
                      "    time.sleep(0.01)\ntime.sleep(0.2)\nprint('later')", cell_id="later")
        assert later.stdout == "later\n" and later.stderr == "", later.stdout + later.stderr
        k.pump(0.5)
        if where == "thread":  # the cell that started the import has its output
            assert "GATE-OUT" in starter.stdout and "GATE-ERR" in starter.stderr
        else:  # no cell: the model process's stderr
            assert "GATE" not in starter.stdout + starter.stderr
        release(tmp_path, k)
        again = k.run("%%agent --model openai/gpt-4o-mini --new\nsay hello", cell_id="again", timeout=120)
        assert again.ok and answered(again) and "GATE" not in again.stdout + again.stderr
    finally:
        k.close()


# HOLE in the thread (documented limit): nbagent does not wrap sys.stdout, so a cell that swaps it (`%%capture`,
# contextlib.redirect_stdout) while the loader prints captures the import's output: it never reaches the cell that
# started the loading, against "what the import prints goes to the cell that started the loading". The model process
# prints into no cell at all.
@pytest.mark.parametrize("where", ["process", pytest.param("thread", marks=pytest.mark.xfail(
    strict=True, reason="documented limit (loading.py): %%capture catches the loader's prints"))])
def test_a_capturing_cell_does_not_take_the_import_output(tmp_path: Path, stub: StubOpenAI, where: str) -> None:
    (tmp_path / "gate.py").write_text(GATE)
    k = real_kernel(tmp_path, stub, **mode(where))
    assert k.run(HOLD, cell_id="hold").ok
    try:
        load = k.run("%load_ext nbagent", cell_id="load")
        entered(tmp_path, k)  # loading started once the kernel was idle
        cap = k.run("%%capture captured\nimport os, time\nopen('go', 'w').close()\n"
                    "while not os.path.exists('printed'):\n    time.sleep(0.01)\ntime.sleep(0.2)\nprint('mine')",
                    cell_id="capture")
        assert cap.ok
        shown = k.run("print(repr(captured.stdout))", cell_id="show")
        release(tmp_path, k)
        k.pump(0.3)
        assert shown.stdout.strip() == repr("mine\n"), shown.stdout
        assert ("GATE-OUT" in load.stdout) == (where == "thread")
    finally:
        k.close()


# HOLE in the thread (same cause as above): `warnings.catch_warnings` swaps the process's warning filters and
# showwarning, not the context's (Python < 3.14), so a cell recording warnings while the loader imports records the
# import's warning. The model process warns in no cell.
@pytest.mark.parametrize("where", ["process", pytest.param("thread", marks=pytest.mark.xfail(
    strict=True, reason="documented limit (loading.py): catch_warnings records the loader's"))])
def test_a_cell_recording_warnings_does_not_take_the_import_warnings(tmp_path: Path, stub: StubOpenAI,
                                                                     where: str) -> None:
    (tmp_path / "gate.py").write_text(GATE)
    k = real_kernel(tmp_path, stub, **mode(where))
    assert k.run(HOLD, cell_id="hold").ok
    try:
        load = k.run("%load_ext nbagent", cell_id="load")
        entered(tmp_path, k)  # loading started once the kernel was idle
        cell = k.run("import os, time, warnings\nwith warnings.catch_warnings(record=True) as w:\n"
                     "    warnings.simplefilter('always')\n    open('go', 'w').close()\n"
                     "    while not os.path.exists('printed'):\n        time.sleep(0.01)\n    time.sleep(0.2)\n"
                     "print([str(x.message) for x in w])", cell_id="record")
        release(tmp_path, k)
        k.pump(0.3)
        assert cell.stdout == "[]\n", cell.stdout
        assert ("GATE-WARN" in load.stderr) == (where == "thread")
    finally:
        k.close()


# was a HOLE (fixed): worse, a cell that turns warnings into errors for its own code (`simplefilter("error")` in
# catch_warnings, a common test idiom) while the loader imports turns a warning of the import into an exception in the
# loader: the load fails, and (see the no-retry hole) every %%agent cell of the kernel fails until a restart.
# litellm's current import warns nothing, but a dependency's deprecation warning at import is common.
def test_a_cell_turning_warnings_into_errors_does_not_break_loading(tmp_path: Path, stub: StubOpenAI) -> None:
    k = held_kernel(tmp_path, stub)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        cell = k.run("import os, time, warnings\nwith warnings.catch_warnings():\n"
                     "    warnings.simplefilter('error')\n    open('go', 'w').close()\n"
                     "    open('release', 'w').close()\n    from nbagent.ipython import loading\n"
                     "    while loading.status()['state'] == 'loading' and not os.path.exists('printed'):\n"
                     "        time.sleep(0.01)\nprint('done')", cell_id="strict")
        assert cell.ok and cell.stdout == "done\n"
        # the load may have failed on the cell's filter: the next cell that needs it tries again
        agent = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert agent.ok and answered(agent), agent.stderr
    finally:
        k.close()


# ------------------------------------------------------------------------------------------ imports and interrupts


def test_a_cell_importing_openai_and_litellm_while_the_thread_imports(tmp_path: Path, stub: StubOpenAI) -> None:
    k = real_kernel(tmp_path, stub, **THREAD)
    try:
        assert k.run(hold_at("litellm"), cell_id="hold").ok
        assert k.run("%load_ext nbagent", cell_id="load").ok
        wait_file(tmp_path / "at-litellm", k)
        # released by the cell itself: both threads import at once, the cell starting with openai
        cell = k.run("open('release-litellm', 'w').close()\nimport openai\nimport litellm\n"
                     "print(hasattr(openai, 'AsyncOpenAI'), hasattr(litellm, 'acompletion'))", cell_id="imports",
                     timeout=120)
        assert cell.ok and cell.stdout == "True True\n", cell.stdout + cell.stderr
        assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")
        agent = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert agent.ok and answered(agent), agent.stderr
    finally:
        k.close()


def test_an_interrupt_while_a_cell_import_waits_behind_the_loader(tmp_path: Path, stub: StubOpenAI) -> None:
    k = real_kernel(tmp_path, stub, **THREAD)
    try:
        assert k.run(hold_at("litellm"), cell_id="hold").ok
        assert k.run("%load_ext nbagent", cell_id="load").ok
        wait_file(tmp_path / "at-litellm", k)
        blocked = k.submit("import litellm", cell_id="blocked")  # waits on litellm's import lock, held by the loader
        k.pump(1.0)
        assert blocked.reply is None
        k.km.interrupt_kernel()
        k.wait(blocked, timeout=60)
        assert not blocked.ok
        assert k.run("print('alive')\n" + STATE, cell_id="alive").stdout == "alive\nloading\n"
        (tmp_path / "release-litellm").touch()
        assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")
        assert k.run("import litellm\nprint(hasattr(litellm, 'acompletion'))", cell_id="imp").stdout == "True\n"
        agent = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert agent.ok and answered(agent), agent.stderr
    finally:
        k.close()


def test_an_interrupt_while_the_main_thread_imports_litellm_leaves_it_loadable(tmp_path: Path,
                                                                                stub: StubOpenAI) -> None:
    """The `%agent` line path (no loader thread: nothing configured) imports litellm in the kernel's own thread."""
    k = real_kernel(tmp_path, stub, model=False)
    try:
        assert k.run(hold_at("openai"), cell_id="hold").ok  # openai is imported half-way through litellm's import
        assert k.run("%load_ext nbagent\n" + STATE, cell_id="load").stdout == "not started\n"
        cell = k.submit("from nbagent.models.llm import import_litellm\nimport_litellm()", cell_id="main-import")
        wait_file(tmp_path / "at-openai", k)
        k.km.interrupt_kernel()
        k.wait(cell, timeout=60)
        assert not cell.ok
        (tmp_path / "release-openai").touch()
        env = k.run("import os, sys\nprint([x for x in os.environ if x.startswith(('LITELLM_', 'MAX_BASE64'))], "
                    "'litellm' in sys.modules)", cell_id="env")
        assert env.stdout == "[] False\n", env.stdout + env.stderr
        agent = k.run("%%agent --model openai/gpt-4o-mini --new\nsay hello", cell_id="agent", timeout=120)
        assert agent.ok and answered(agent), agent.stderr
    finally:
        k.close()


# ------------------------------------------------------------------------------------------ tracing


@pytest.mark.parametrize("where", ["process", "thread"])
def test_trace_functions_the_person_set_are_kept_and_loading_works_under_them(tmp_path: Path, stub: StubOpenAI,
                                                                             where: str) -> None:
    (tmp_path / "gate.py").write_text(GATE)
    k = real_kernel(tmp_path, stub, **mode(where))
    assert k.run(HOLD, cell_id="hold").ok
    try:
        setup = ("import sys, threading\nseen = set()\n"
                 "def main_trace(frame, event, arg):\n    return None\n"
                 "def thread_trace(frame, event, arg):\n"
                 "    seen.add(threading.current_thread().name)\n    return None\n"
                 "threading.settrace(thread_trace)\nsys.settrace(main_trace)")
        assert k.run(setup, cell_id="trace").ok
        assert k.run("%load_ext nbagent", cell_id="load").ok
        (tmp_path / "go").touch()
        release(tmp_path, k)
        assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")
        check = k.run("print(sys.gettrace() is main_trace, threading.gettrace() is thread_trace, "
                      "'nbagent-load-model-library' in seen)", cell_id="check")
        # the thread runs under the person's thread tracer, as any thread does; the process is not traced here
        assert check.stdout == f"True True {where == 'thread'}\n", check.stdout + check.stderr
        agent = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert agent.ok and answered(agent), agent.stderr
        assert k.run("print(sys.gettrace() is main_trace, threading.gettrace() is thread_trace)",
                     cell_id="end").stdout == "True True\n"
    finally:
        k.close()


# ------------------------------------------------------------------------------------------ fork


# was a HOLE (fixed): loading.ready()/wait() compare the pid that started the thread with os.getpid() before looking
# at the future, so a child forked *after* loading finished (multiprocessing's fork, a cell's os.fork) is told "forked
# while the model library was loading" and cannot run the agent, though litellm is fully imported in it.
@pytest.mark.parametrize("where", ["process", "thread"])
def test_a_child_forked_after_loading_finished_has_the_library(tmp_path: Path, stub: StubOpenAI, where: str) -> None:
    k = real_kernel(tmp_path, stub, **mode(where))
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")
        fork = ("import os, json, asyncio, threading\nfrom nbagent.ipython import loading\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    out = {'ready': loading.ready(), 'state': loading.status()['state']}\n"
                "    def go():\n"
                "        try:\n"
                "            asyncio.run(loading.wait())\n"
                "            out['wait'] = 'ok'\n"
                "        except Exception as exc:\n"
                "            out['wait'] = type(exc).__name__ + ': ' + str(exc)\n"
                "    t = threading.Thread(target=go)\n    t.start()\n    t.join(30)\n"
                "    open('child.json', 'w').write(json.dumps(out))\n"
                "    os._exit(0)\n"
                "os.waitpid(pid, 0)\nprint(open('child.json').read())")
        out = k.run(fork, cell_id="fork", timeout=60)
        assert out.ok, out.stderr
        child = json.loads(out.stdout)
        if where == "thread":  # litellm is imported in the child too
            assert child == {"ready": True, "state": "ready", "wait": "ok"}, child
        else:  # the parent's process is the parent's: the child starts its own
            assert child == {"ready": False, "state": "forked", "wait": "ok"}, child
    finally:
        k.close()


# ------------------------------------------------------------------------------------------ failures

FLAKY = '''
import os
if not os.path.exists("fixed"):
    raise OSError("the disk was busy")
'''
MULTILINE = '''
raise ImportError("IMPORTANT: PLEASE READ THIS FOR ADVICE ON HOW TO SOLVE THIS ISSUE!\\n\\n"
                  "Importing the C extension failed.\\nOriginal error was: libfoo.so: cannot open shared object")
'''
EXITS = '''
raise SystemExit(3)
'''


def failing_kernel(folder: Path, stub: StubOpenAI, module: str, text: str) -> Kernel:
    (folder / f"{module}.py").write_text(text)
    k = real_kernel(folder, stub)
    assert k.run(f"from nbagent.ipython import loading\nloading.MODULES = ({module!r},) + loading.MODULES",
                 cell_id="c0").ok
    assert k.run("%load_ext nbagent", cell_id="load").ok
    return k


def test_an_ordinary_failure_is_one_line(tmp_path: Path, stub: StubOpenAI) -> None:
    k = failing_kernel(tmp_path, stub, "flaky", FLAKY)
    try:
        cell = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert not cell.ok
        (line,) = error_lines(cell)
        assert "LoadFailed" in line and "OSError: the disk was busy" in line
        assert "loading the model library" not in str(cell.outputs)
        assert k.run("print(1 + 1)", cell_id="next").stdout == "2\n"
    finally:
        k.close()


# was a HOLE (fixed): a failed load is kept for the kernel's life (start() returns False once a future exists in this
# pid), so after an ordinary (transient) failure every later %%agent cell repeats the same error, and the line does
# not say that only a restart clears it (only the missing-package line does).
def test_after_an_ordinary_failure_a_later_cell_retries_or_says_to_restart(tmp_path: Path, stub: StubOpenAI) -> None:
    k = failing_kernel(tmp_path, stub, "flaky", FLAKY)
    try:
        first = k.run("%%agent --new\nsay hello", cell_id="first", timeout=120)
        assert not first.ok
        (tmp_path / "fixed").touch()  # whatever failed is gone
        second = k.run("%%agent --new\nsay hello", cell_id="second", timeout=120)
        assert (second.ok and answered(second)) or "restart" in " ".join(error_lines(first)).lower(), \
            error_lines(second)
    finally:
        k.close()


# was a HOLE (fixed): loading.failure() formats `{type}: {exc}` as is, so an exception whose message has several lines
# (numpy's and other C extensions' ImportError do) gives a multi-line "one line".
def test_a_failure_with_a_multiline_message_is_still_one_line(tmp_path: Path, stub: StubOpenAI) -> None:
    k = failing_kernel(tmp_path, stub, "cext", MULTILINE)
    try:
        cell = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert not cell.ok
        (line,) = error_lines(cell)
        assert "LoadFailed" in line and "ImportError" in line
        assert "\n" not in line.rstrip("\n"), line
    finally:
        k.close()


# was a HOLE (fixed): loading._run stores any BaseException, but wait() turns only `Exception` into LoadFailed: a
# module that calls sys.exit() at import (some do on an unsupported Python) makes the %%agent cell raise SystemExit
# itself (IPython's "An exception has occurred, use %tb..." and `SystemExit: 3`), not the one nbagent line. The kernel
# lives.
def test_a_systemexit_raised_by_the_import_is_one_line_and_the_kernel_lives(tmp_path: Path, stub: StubOpenAI) -> None:
    k = failing_kernel(tmp_path, stub, "exits", EXITS)
    try:
        cell = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert not cell.ok
        assert k.run("print(1 + 1)", cell_id="next").stdout == "2\n"
        assert "loading the model library" not in str(cell.outputs)
        lines = error_lines(cell)
        assert len(lines) == 1 and "LoadFailed" in lines[0], lines
    finally:
        k.close()


@pytest.mark.parametrize("where", ["process", "thread"])
def test_a_graceful_shutdown_during_loading_is_clean(tmp_path: Path, stub: StubOpenAI, where: str) -> None:
    """The loader (a daemon thread, or the model process) is inside an import, and printing, when the kernel exits;
    the model process ends with it."""
    (tmp_path / "gate.py").write_text(GATE)
    log = (tmp_path / "kernel-stderr.txt").open("w")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    k = Kernel(tmp_path, env={"OPENAI_API_KEY": "sk-test-loading", "OPENAI_API_BASE": stub.base_url,
                              "NBAGENT_MODEL": "openai/gpt-4o-mini", "PYTHONPATH": path, **mode(where)}, stderr=log)
    try:
        assert k.run(HOLD, cell_id="hold").ok
        assert k.run("%load_ext nbagent", cell_id="load").ok
        (tmp_path / "go").touch()
        wait_file(tmp_path / "printed", k)
        assert k.run(STATE, cell_id="state").stdout == "loading\n"
        child = k.run("from nbagent.models import process as modelproc\n"
                      "p = modelproc.existing()\nprint(p.proc.pid if p else 0)",
                      cell_id="pid").stdout.strip()
        k.kc.stop_channels()
        k.km.shutdown_kernel(now=False)
    finally:
        log.close()
        if k.km.has_kernel:
            k.km.shutdown_kernel(now=True)
    text = (tmp_path / "kernel-stderr.txt").read_text()
    assert "Fatal Python error" not in text and "Traceback" not in text, text[-3000:]
    if where == "process":  # it ends with the kernel, even half-way through its import
        from test_model_process import ended

        ended(int(child))


# was a HOLE (fixed): `%agent resume` (approve, answer...) waits for the loader only if loading started or a model is
# *configured* (host.line_needs_model_library). After a restart, a run whose model came from the cell's --model is
# resumed with nothing configured: the line imports litellm in the kernel's own thread (llm.import_litellm from
# complete), ~2.5 s with no "loading" line and the kernel not handling messages, the very thing the loader exists to
# avoid.
def test_resume_after_a_restart_of_a_run_whose_model_came_from_the_cell_uses_the_loader(tmp_path: Path,
                                                                                       stub: StubOpenAI) -> None:
    k = real_kernel(tmp_path, stub, model=False)
    try:
        stub.push(Delay(3.0, then=Reply(content="too late")))
        assert k.run("%load_ext nbagent", cell_id="load").ok
        first = k.submit("%%agent --model openai/gpt-4o-mini --new\nsay hello", cell_id="first")
        deadline = time.monotonic() + 60
        while not stub.requests and time.monotonic() < deadline:
            k.pump(0.1)
        k.km.interrupt_kernel()
        k.wait(first, timeout=60)
        k.restart()
        assert k.run("%load_ext nbagent\n" + STATE, cell_id="load2").stdout == "not started\n"
        resume = k.run("%agent resume", cell_id="resume", timeout=120)
        assert resume.ok and answered(resume), (resume.stdout, resume.stderr, resume.outputs)
        assert k.run(STATE, cell_id="state").stdout == "ready\n"  # the loader imported it, the kernel waited
    finally:
        k.close()


# ------------------------------------------------------------------------------------------ the working folder

PLANTED = '''
open("ran-{name}", "w").close()
'''


def test_a_cloned_repository_module_never_runs_in_the_model_process(tmp_path: Path, stub: StubOpenAI) -> None:
    # the process runs `python -P`: the working folder is not on its path, so the installed litellm is the one loaded
    for name in ("litellm", "tiktoken"):
        (tmp_path / f"{name}.py").write_text(PLANTED.format(name=name))
    k = Kernel(tmp_path, env={"OPENAI_API_KEY": "sk-test-loading", "OPENAI_API_BASE": stub.base_url,
                              "NBAGENT_MODEL": "openai/gpt-4o-mini"})
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        cell = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert cell.ok and answered(cell), cell.stderr
        assert not list(tmp_path.glob("ran-*")), "a module from the working folder ran"
    finally:
        k.close()


def test_a_cloned_repository_module_never_runs_when_nbagent_loads_its_library(tmp_path: Path,
                                                                                  stub: StubOpenAI) -> None:
    # was a HOLE (fixed): the kernel's working folder is on sys.path before site-packages, so a `litellm.py` (or
    # any package litellm requires: tiktoken.py here) beside the notebook ran when the background load imported
    # litellm after %load_ext: code nobody chose to run (the thread, where there is no model process)
    for name in ("litellm", "tiktoken"):
        (tmp_path / f"{name}.py").write_text(PLANTED.format(name=name))
    k = Kernel(tmp_path, env={"OPENAI_API_KEY": "sk-test-loading", "OPENAI_API_BASE": stub.base_url,
                              "NBAGENT_MODEL": "openai/gpt-4o-mini", **THREAD})
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        deadline = time.monotonic() + 60
        while k.run(STATE, cell_id="state").stdout != "failed\n":  # the background load refused, once idle
            assert time.monotonic() < deadline, "the background load never ended"
            time.sleep(0.2)
        cell = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert not cell.ok
        (error,) = [o["error"] for o in cell.outputs if "error" in o]
        assert "litellm.py" in error and "'litellm', 'tiktoken'" in error and "Rename or move it" in error
        assert len(error_lines(cell)) == 1
        assert not list(tmp_path.glob("ran-*")), "a module from the working folder ran"
        assert k.run("import sys\nprint('litellm' in sys.modules)", cell_id="none").stdout == "False\n"
        for name in ("litellm", "tiktoken"):
            (tmp_path / f"{name}.py").rename(tmp_path / f"{name}_planted.py")
        again = k.run("%%agent --new\nsay hello", cell_id="again", timeout=120)
        assert again.ok and answered(again), again.stderr
        assert not list(tmp_path.glob("ran-*"))
    finally:
        k.close()
