"""Loading the model library in a real kernel (nbagent/ipython/loading.py): behaviour, never timings.

Every kernel here has a real provider's model configured (`NBAGENT_MODEL=openai/gpt-4o-mini`, served by the stub
OpenAI server on 127.0.0.1), so `%load_ext nbagent` starts the kernel's model process (nbagent/models/process.py), which
imports litellm. To hold that import deterministically, a module `gate` in the notebook's folder (on the kernel's
PYTHONPATH, which the process inherits) is put first in `loading.MODULES`: once imported, it writes to stdout and
stderr and warns (as a library's import may), then waits until the test (or a cell) creates the file `release`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_harness import Kernel
from stub_openai import Reply, StubOpenAI

GATE = '''
import os, sys, time, warnings
open("entered", "w").close()
while not os.path.exists("go") and not os.path.exists("release"):
    time.sleep(0.01)
print("GATE-OUT")
print("GATE-ERR", file=sys.stderr)
warnings.warn("GATE-WARN")
open("printed", "w").close()
for _ in range(6000):
    if os.path.exists("release"):
        break
    time.sleep(0.01)
'''
HOLD = "from nbagent.ipython import loading\nloading.MODULES = ('gate',) + loading.MODULES"
# what nbagent must leave alone: the same objects and values before, while and after it loads its library. The
# import finders too, but for one: litellm imports importlib_metadata (the backport), whose import appends its own
# finder to sys.meta_path, as `import importlib_metadata` in a cell would; nothing else may be added or replaced.
GLOBALS = ("import sys, builtins, threading\n"
           "def _globals():\n"
           "    finders = [f for f in sys.meta_path if type(f).__module__.split('.')[0] != 'importlib_metadata']\n"
           "    return (id(sys.stdout), id(sys.stderr), id(builtins.__import__), sys.getswitchinterval(),\n"
           "            sys.gettrace(), sys.getprofile(), threading.gettrace(), threading.getprofile(),\n"
           "            [id(f) for f in finders], [id(h) for h in sys.path_hooks], sys.flags)\n")
STATE = "from nbagent.ipython import loading\nprint(loading.status()['state'])"
# waits for the library as an %%agent cell does (starting the loading if the kernel was never idle long enough)
WAIT_READY = "from nbagent.ipython import loading\nawait loading.wait()\nprint(loading.status()['state'])"


@pytest.fixture
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        server.fallback = Reply(content="hello from the stub")
        yield server


def real_kernel(folder: Path, stub: StubOpenAI, model: bool = True, **extra: str) -> Kernel:
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH", "")]))
    env = {"OPENAI_API_KEY": "sk-test-loading", "OPENAI_API_BASE": stub.base_url, "PYTHONPATH": path, **extra}
    if model:
        env["NBAGENT_MODEL"] = "openai/gpt-4o-mini"
    return Kernel(folder, env=env)


def held_kernel(folder: Path, stub: StubOpenAI) -> Kernel:
    """A kernel whose loading thread is held in `gate` (released by the file `release`)."""
    (folder / "gate.py").write_text(GATE)
    k = real_kernel(folder, stub)
    assert k.run(HOLD, cell_id="hold").ok
    return k


def entered(folder: Path, k: Kernel) -> None:
    """Wait until the loading thread has started (it is inside `gate`)."""
    deadline = time.monotonic() + 60
    while not (folder / "entered").exists() and time.monotonic() < deadline:
        k.pump(0.05)
    assert (folder / "entered").exists(), "loading did not start once the kernel was idle"


def release(folder: Path, k: Kernel) -> None:
    (folder / "release").touch()
    # (what the import prints is in this cell if this cell started it)
    assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")


def answered(cell: object) -> bool:
    return "hello from the stub" in str(getattr(cell, "outputs", ""))


def answers_and_leaves_the_globals(k: Kernel) -> None:
    """A first real run answers, and the kernel's globals are still those saved in `_before` (GLOBALS)."""
    first = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
    assert first.ok and answered(first), first.stderr
    assert k.run("print(_globals() == _before)", cell_id="end").stdout == "True\n"


@pytest.mark.kernel
def test_cells_run_after_load_ext_and_while_loading_get_their_own_output_only(tmp_path: Path,
                                                                                stub: StubOpenAI) -> None:
    k = held_kernel(tmp_path, stub)
    try:
        before = k.run(GLOBALS + "_before = _globals()", cell_id="before")
        assert before.ok, before.stderr
        load = k.submit("%load_ext nbagent", cell_id="load")
        # the cell right after (as Run All sends it): loading waits until the kernel is idle
        right_after = k.run("print('right after', _globals() == _before)\n" + STATE, cell_id="right-after")
        assert right_after.ok, right_after.stderr
        assert right_after.stdout == "right after True\nnot started\n" and right_after.stderr == ""
        assert right_after.outputs == []
        entered(tmp_path, k)
        # a cell run while loading: the loading thread prints, writes to stderr and warns while this cell runs
        meanwhile = k.run("import os, time\nopen('go', 'w').close()\nwhile not os.path.exists('printed'):\n"
                          "    time.sleep(0.01)\ntime.sleep(0.2)\nprint('meanwhile', _globals() == _before)\n"
                          + STATE, cell_id="meanwhile")
        assert meanwhile.ok, meanwhile.stderr
        assert meanwhile.stdout == "meanwhile True\nloading\n" and meanwhile.stderr == ""
        assert meanwhile.outputs == []
        k.pump(0.5)
        # what the import wrote went to the model process's stderr (the kernel's log): no cell shows it
        for cell in (load, right_after, meanwhile):
            assert "GATE" not in cell.stdout + cell.stderr + str(cell.outputs)
        release(tmp_path, k)
        after = k.run("print(_globals() == _before, 'litellm' in sys.modules, loading.status()['where'])",
                      cell_id="after")
        assert after.stdout == "True False process\n", after.stdout + after.stderr
        answers_and_leaves_the_globals(k)
    finally:
        k.close()


@pytest.mark.kernel
def test_an_agent_cell_waits_for_loading_and_an_interrupt_ends_it(tmp_path: Path, stub: StubOpenAI) -> None:
    k = held_kernel(tmp_path, stub)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        (tmp_path / "go").touch()
        cell = k.submit("%%agent --new\nsay hello", cell_id="wait")
        deadline = time.monotonic() + 60
        while "loading the model library" not in str(cell.outputs) and time.monotonic() < deadline:
            k.pump(0.1)
        assert "loading the model library" in str(cell.outputs)
        k.km.interrupt_kernel()
        k.wait(cell, timeout=60)
        assert not cell.ok
        assert "loading the model library" not in str(cell.outputs)  # the line is cleared when the wait ends
        assert k.run("print('alive')\n" + STATE, cell_id="alive").stdout == "alive\nloading\n"
        release(tmp_path, k)
        again = k.run("%%agent --new\nsay hello", cell_id="again", timeout=120)
        assert again.ok and answered(again), again.stderr
    finally:
        k.close()


@pytest.mark.kernel
def test_a_fork_during_loading_works(tmp_path: Path, stub: StubOpenAI) -> None:
    k = held_kernel(tmp_path, stub)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        entered(tmp_path, k)
        (tmp_path / "go").touch()
        fork = ("import os, json, math, multiprocessing\nfrom nbagent.ipython import loading\n"
                "assert loading.status()['state'] == 'loading'\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    code = 7 if loading.status()['state'] == 'forked' and json.dumps(math.sqrt(4)) == '2.0' else 1\n"
                "    os._exit(code)\n"
                "print('child', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
                "with multiprocessing.get_context('fork').Pool(2) as pool:\n"
                "    print('pool', pool.map(abs, [-1, -2, -3]))\n")
        out = k.run(fork, cell_id="fork", timeout=60)
        assert out.ok, out.stderr
        assert out.stdout == "child 7\npool [1, 2, 3]\n"
        release(tmp_path, k)
        first = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert first.ok and answered(first), first.stderr
    finally:
        k.close()


@pytest.mark.kernel
def test_a_missing_package_is_one_line_naming_what_to_install(tmp_path: Path, stub: StubOpenAI) -> None:
    k = real_kernel(tmp_path, stub)
    try:
        assert k.run("from nbagent.ipython import loading\n"
                     "loading.MODULES = ('nbagent_provider_pkg_not_installed',)", cell_id="c0").ok
        assert k.run("%load_ext nbagent", cell_id="load").ok
        cell = k.run("%%agent --new\nsay hello", cell_id="agent", timeout=120)
        assert not cell.ok
        (error,) = [o["error"] for o in cell.outputs if "error" in o]
        assert "'nbagent_provider_pkg_not_installed' is missing" in error
        assert "pip install 'nbagent_provider_pkg_not_installed'" in error
        traceback = cell.reply["content"]["traceback"] if cell.reply else []
        assert len(traceback) == 1 and "LoadFailed" in traceback[0]
        assert k.run("print(1 + 1)", cell_id="next").stdout == "2\n"
        # an offline cell does not need the library
        (tmp_path / "s.json").write_text('{"turns": [{"content": "offline answer"}]}')
        offline = k.run("%%agent --script s.json --new\nsay hello", cell_id="offline", timeout=120)
        assert offline.ok and "offline answer" in str(offline.outputs), offline.stderr
    finally:
        k.close()


# the kernel's own child processes (its model process, if it started one), as the kernel sees them
CHILDREN = ("import os\nprint(sum(len(open(f'/proc/self/task/{t}/children').read().split())\n"
            "          for t in os.listdir('/proc/self/task')))")
NO_KEYS = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "GEMINI_API_KEY": "", "GOOGLE_API_KEY": ""}


@pytest.mark.kernel
def test_a_provider_key_starts_the_model_process_once_idle_for_the_model_named_in_the_cell(tmp_path: Path,
                                                                                          stub: StubOpenAI) -> None:
    """README's flow: `%load_ext nbagent`, a key in the environment, the model named only in the `%%agent` cell. The
    model process starts once the kernel is idle after `%load_ext`, so the cell seconds later does not wait for it;
    litellm never enters the kernel, and an offline run meanwhile still needs none of it."""
    k = real_kernel(tmp_path, stub, model=False)  # OPENAI_API_KEY set, no NBAGENT_MODEL
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        k.pump(1.5)  # no cell: the idle kernel starts the process (loading.IDLE_S) for the key it found
        started = k.run(STATE, cell_id="started").stdout.strip()
        assert started in ("loading", "ready"), started
        assert k.run(WAIT_READY, cell_id="ready", timeout=120).stdout.strip().endswith("ready")
        before = k.run("import sys\nprint('litellm' in sys.modules)\n" + CHILDREN, cell_id="idle")
        assert before.stdout == "False\n1\n", before.stdout + before.stderr
        (tmp_path / "s.json").write_text('{"turns": [{"content": "offline answer"}]}')
        offline = k.run("%%agent --script s.json --new\nsay hello", cell_id="offline", timeout=120)
        assert offline.ok and "offline answer" in str(offline.outputs)
        real = k.run("%%agent --model openai/gpt-4o-mini --new\nsay hello", cell_id="real", timeout=120)
        assert real.ok and answered(real), real.stderr
        assert "loading the model library" not in str(real.outputs)  # it had loaded: the cell did not wait
        assert k.run("print('litellm' in sys.modules)\n" + CHILDREN, cell_id="after").stdout == "False\n1\n"
    finally:
        k.close()


@pytest.mark.kernel
def test_a_kernel_that_loads_nbagent_without_a_key_starts_no_process(tmp_path: Path, stub: StubOpenAI) -> None:
    """No provider key, no model configured: nothing starts after `%load_ext`, however long the kernel is idle,
    nor for an offline run. A cell that sets a provider's key shows the agent will be used: the process starts at
    the next idle moment (litellm still never in the kernel)."""
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    k = Kernel(tmp_path, env={**NO_KEYS, "PYTHONPATH": path})
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        k.pump(2.0)  # idle four times as long as loading waits for (loading.IDLE_S)
        idle = k.run("import sys\nprint('litellm' in sys.modules)\n" + STATE + "\n" + CHILDREN, cell_id="idle")
        assert idle.stdout == "False\nnot started\n0\n", idle.stdout + idle.stderr
        (tmp_path / "s.json").write_text('{"turns": [{"content": "offline answer"}]}')
        offline = k.run("%%agent --script s.json --new\nsay hello", cell_id="offline", timeout=120)
        assert offline.ok and "offline answer" in str(offline.outputs), (offline.stderr, offline.outputs)
        k.pump(2.0)
        after = k.run("print('litellm' in sys.modules)\n" + STATE + "\n" + CHILDREN, cell_id="after")
        assert after.stdout == "False\nnot started\n0\n", after.stdout + after.stderr
        assert k.run("import os\nos.environ['OPENAI_API_KEY'] = 'sk-set-in-a-cell'", cell_id="key").ok
        k.pump(1.5)
        assert k.run(STATE, cell_id="started").stdout.strip() in ("loading", "ready")
        ready = k.run(WAIT_READY + "\nprint('litellm' in sys.modules)\n" + CHILDREN, cell_id="ready", timeout=120)
        assert ready.stdout == "ready\nFalse\n1\n", ready.stdout + ready.stderr
    finally:
        k.close()


@pytest.mark.kernel
def test_what_a_waiting_cell_imports_ahead_is_all_a_first_run_needs(tmp_path: Path, stub: StubOpenAI) -> None:
    """A `%%agent` cell that waits for the model process imports the run's own modules meanwhile (host._prepare,
    host.FIRST_RUN_MODULES; the idle kernel imports the same list); the list must stay whole, or the first answer
    pays for the rest after the wait. So: after it, a first run that writes a file (L3, no question), answers and
    shows its record and Undo imports no module of a package it names, and none of nbagent's but its models'."""
    stub.push(Reply(tool_calls=[{"name": "create_file", "arguments": {"path": "a.txt", "content": "a\n"}}]))
    k = held_kernel(tmp_path, stub)
    try:
        assert k.run("%load_ext nbagent\nimport sys\n_before = set(sys.modules)", cell_id="load").ok
        entered(tmp_path, k)
        ahead = k.run("from nbagent.ipython import entry, loading\n"
                      "assert loading.status()['state'] == 'loading'\n"
                      "await entry._prepare()\n_mods = set(sys.modules)\n"
                      "print(sorted({m.split('.')[0] for m in _mods - _before}))", cell_id="ahead")
        assert ahead.ok, ahead.stderr
        release(tmp_path, k)
        first = k.run("%%agent --new --autonomy L3\nwrite a.txt", cell_id="agent", timeout=120)
        assert first.ok and answered(first), first.stderr
        assert (tmp_path / "a.txt").read_text() == "a\n"
        new = k.run("print(sorted(set(sys.modules) - _mods))", cell_id="new").stdout
        packages = set(eval(ahead.stdout)) - {"nbagent"}  # what the modules it names import: ipywidgets...
        assert {"anywidget", "ipywidgets", "markdown_it", "nh3", "tinydb", "filelock"} <= packages, packages
        later = [m for m in eval(new) if m.split(".")[0] in packages
                 or (m.startswith("nbagent.") and not m.startswith("nbagent.models."))]
        assert later == [], f"imported only by the run, after the wait: {later}; add them to entry.FIRST_RUN_MODULES"
    finally:
        k.close()


# nbagent's modules a run needs and `%load_ext` must not import (the runtime and what it builds on)
RUN_ONLY = ("nbagent.runtime", "nbagent.store", "nbagent.events.model", "nbagent.events.state", "nbagent.gate.deciders",
            "nbagent.gate.grants", "nbagent.models.llm", "nbagent.ipython.live", "nbagent.ui.widget")
LEFT = ("import sys\nfrom nbagent.ipython import entry\n"
        "print([m for m in entry.FIRST_RUN_MODULES if m not in sys.modules])")


@pytest.mark.kernel
def test_load_ext_is_light_and_the_idle_kernel_imports_the_first_run_ahead(tmp_path: Path, stub: StubOpenAI) -> None:
    """`%load_ext` imports none of the runtime (its events, store, deciders and model layer: ~0.4 s). Once the model
    process is loading, the idle kernel imports them (host.FIRST_RUN_MODULES), a module per turn of its loop and only
    while no cell runs, so a first real cell after a pause pays for neither; each cell meanwhile runs as it would
    (a cell pauses the imports, the next idle moment goes on), and the kernel's globals stay as they were."""
    k = held_kernel(tmp_path, stub)
    try:
        before = k.run(GLOBALS + "_before = _globals()", cell_id="before")
        assert before.ok, before.stderr
        load = k.run(f"%load_ext nbagent\nprint([m for m in {RUN_ONLY!r} if m in sys.modules])", cell_id="load")
        assert load.ok and load.stdout == "[]\n", load.stdout + load.stderr
        entered(tmp_path, k)
        left: list[str] = ["?"]
        deadline = time.monotonic() + 60
        while left and time.monotonic() < deadline:
            k.pump(1.0)  # no cell: the idle kernel imports (each check below is a cell, which pauses it)
            check = k.run(LEFT + "\nprint(_globals() == _before)\n" + STATE, cell_id="check")
            assert check.ok and check.stderr == "" and check.outputs == [], check.stderr
            listed, same, state = check.stdout.splitlines()
            left = eval(listed)
            assert (same, state) == ("True", "loading")  # the process is held: only the kernel's side went on
        assert left == [], f"never imported while the kernel was idle: {left}"
        release(tmp_path, k)
        answers_and_leaves_the_globals(k)
    finally:
        k.close()


@pytest.mark.kernel
def test_the_idle_kernel_imports_nothing_ahead_from_the_working_folder(tmp_path: Path, stub: StubOpenAI) -> None:
    """A module in the notebook's folder that would stand in for one of nbagent's dependencies (an `nh3.py` from a
    cloned repository) is never run by the imports the idle kernel makes ahead: nobody chose to run it. They wait
    for a cell that runs the agent."""
    (tmp_path / "nh3.py").write_text("open('ran-nh3', 'w').close()\n")
    k = held_kernel(tmp_path, stub)
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        entered(tmp_path, k)  # the model process is loading: the idle kernel would import ahead now
        k.pump(3.0)
        check = k.run(LEFT + "\n" + STATE, cell_id="check")
        listed, state = check.stdout.splitlines()
        assert state == "loading" and "nbagent.runtime" in eval(listed), check.stdout + check.stderr
        assert not (tmp_path / "ran-nh3").exists()
    finally:
        k.close()


def test_an_interrupt_that_lands_in_an_import_ahead_stops_it_and_stays_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT is the default handler while a kernel handles any request (a silent one, a comm message), so an
    interrupt may land in an import the idle kernel makes ahead: that stops the imports, and never leaves the task,
    where it would end the kernel's event loop."""
    import asyncio
    import importlib
    from types import SimpleNamespace

    from nbagent.ipython import loading

    registered: list[object] = []
    events = SimpleNamespace(register=lambda _name, cb: registered.append(cb),
                             unregister=lambda _name, cb: registered.remove(cb))

    def interrupted(name: str) -> None:
        raise KeyboardInterrupt

    async def go() -> None:
        idle = loading._Idle(SimpleNamespace(events=events), asyncio.get_running_loop(),
                             ahead=("nbagent_test_not_a_module",))
        assert len(registered) == 2
        monkeypatch.setattr(importlib, "import_module", interrupted)
        await idle.import_ahead()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        pytest.fail("the interrupt left the import-ahead task")
    assert registered == []  # stopped: no more idle moments are waited for
