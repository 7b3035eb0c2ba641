"""Hostile scenarios against the background warm-up (nbagent/ipython/warmup.py) in a real kernel. Each test asserts
the SAFE behaviour; each marked "was a HOLE" failed until warmup.py was mended, and says where the promise
("warming up never delays a cell the user runs meanwhile, never deadlocks, never breaks anything") did not hold.

The warm-up is held inside a long import deterministically: a `spin` module put first into `warmup.OWN_MODULES`
counts Python calls until a `release` file exists (as tests/test_kernel_warmup.py does). Deadlocks are bounded
by generous deadlines (the cell gives up, or the test stops waiting) so that a hole fails instead of hanging."""

from __future__ import annotations

import json
from pathlib import Path

from kernel_harness import Cell, Kernel, script

SPIN = ("import pathlib\ncount = 0\n\n\ndef step():\n    global count\n    count += 1\n\n\n"
        "while not pathlib.Path('release').exists():\n    for _ in range(1000):\n        step()\n")
SPIN_FIRST = "from nbagent.ipython import warmup\nwarmup.OWN_MODULES = ('spin',) + warmup.OWN_MODULES"
# no litellm phase (it costs seconds of CPU): the warm-up is nbagent's own modules only
NO_LITELLM = "\nwarmup._hooks.real_model = lambda: False"
REAL = {"NBAGENT_MODEL": "openai/gpt-4o-mini"}
SPIN_IN_LITELLM_PHASE = "from nbagent.ipython import warmup\nwarmup.MODULES = ('spin',) + warmup.MODULES"

# measured in one cell: how far the warm-up's `spin` got while the cell computed, then while it slept
PROBE = """
import sys as _s, time as _t
from nbagent.ipython import warmup as _w
while "spin" not in _s.modules:
    _t.sleep(0.01)
_spin = _s.modules["spin"]


def _compute(n):
    return sum(i * i % 7 for i in range(n))


_a = _spin.count
_compute(3_000_000)
_b = _spin.count
_t.sleep(0.3)
_c = _spin.count
print("PROBE", _b - _a, _c - _b, len(_w._holds), _w._waived)
"""
# after `release`: the warm-up ends and puts everything back
DONE = ("from nbagent.ipython import warmup\nimport sys\nwarmup.join()\n"
        "print('DONE', warmup.running(), sys.getswitchinterval(), sys.gettrace(), len(warmup._holds), warmup._waived)")


def probe(cell: Cell) -> tuple[int, int, str, str]:
    line = next(x for x in cell.stdout.splitlines() if x.startswith("PROBE"))
    _, computing, sleeping, depth, waived = line.split()
    return int(computing), int(sleeping), depth, waived


def yields(cell: Cell) -> bool:
    """The warm-up stood (nearly) still while the cell computed and ran while it slept."""
    computing, sleeping, _, _ = probe(cell)
    return computing * 10 < sleeping


def spin_kernel(tmp_path: Path, env: dict[str, str] | None = None, first: str = SPIN_FIRST,
                load: str = "%load_ext nbagent" + NO_LITELLM) -> Kernel:
    (tmp_path / "spin.py").write_text(SPIN)
    k = Kernel(tmp_path, env=env)
    assert k.run(first, cell_id="c0").ok
    c1 = k.run(load, cell_id="c1")
    assert c1.ok, c1.stderr
    return k


def submit_silent(k: Kernel, code: str) -> Cell:
    content = {"code": code, "silent": True, "store_history": False, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": False}
    msg = k.kc.session.msg("execute_request", content)
    k.kc.shell_channel.send(msg)
    cell = Cell(msg["header"]["msg_id"])
    k.cells[cell.msg_id] = cell
    return cell


def finished(k: Kernel, cell: Cell, timeout: float) -> bool:
    try:
        k.wait(cell, timeout=timeout)
    except TimeoutError:
        return False
    return True


def assert_done(k: Kernel, tmp_path: Path) -> None:
    (tmp_path / "release").touch()
    out = k.run(DONE, cell_id="done", timeout=60)
    assert out.stdout.split() == ["DONE", "False", "0.005", "None", "1", "False"], out.stdout + out.stderr


# ---------------------------------------------------------------------------------------------- the hold's count


def test_odd_executions_leave_the_hold_counted_right(tmp_path: Path) -> None:
    """A cell that raises, a syntax error, an empty cell, silent executions (a variable inspector's), `%load_ext`
    twice and `%reload_ext`: the next cell still holds the warm-up exactly once, and it still yields."""
    k = spin_kernel(tmp_path)
    try:
        assert not k.run("raise ValueError('boom')", cell_id="c2").ok
        assert not k.run("def f(:\n  pass", cell_id="c3").ok
        assert k.run("", cell_id="c4").ok
        assert k.run("   \n", cell_id="c5").ok
        for code in ("x = 1", "", "raise KeyError(1)", "get_ipython().run_cell('y = 2')"):
            k.wait(submit_silent(k, code))
        assert k.run("%load_ext nbagent", cell_id="c6").ok
        assert k.run("%reload_ext nbagent", cell_id="c7").ok
        hooks = k.run("ip = get_ipython()\nprint(sum(getattr(f, '__qualname__', '') == 'Hooks.pre_run_cell' "
                      "for f in ip.events.callbacks['pre_run_cell']))", cell_id="c8")
        assert hooks.stdout.split() == ["1"], hooks.stdout + hooks.stderr  # one set of hooks
        cell = k.run(PROBE, cell_id="c9", timeout=60)
        assert cell.ok, cell.stderr
        assert probe(cell)[2:] == ("1", "False") and yields(cell), cell.stdout
        assert_done(k, tmp_path)
    finally:
        k.close()


def test_a_nested_empty_cell_does_not_end_the_outer_cells_hold(tmp_path: Path) -> None:
    """`get_ipython().run_cell("")` inside a cell: IPython fires post_execute for an empty cell it never started
    (no pre_execute), so the outer cell must still hold the warm-up afterwards."""
    k = spin_kernel(tmp_path)
    try:
        cell = k.run("get_ipython().run_cell('')\n" + PROBE, cell_id="c2", timeout=60)
        assert cell.ok, cell.stderr
        # was a HOLE: release() counts the unmatched post_execute of the nested empty cell: depth 0, the outer cell
        #   unheld
        assert probe(cell)[2] == "1" and yields(cell), cell.stdout
    finally:
        k.close()


def test_run_of_a_notebook_ending_with_an_empty_cell_keeps_the_hold(tmp_path: Path) -> None:
    """The realistic form of the above: `%run other.ipynb` (its last code cell empty, as notebooks often are),
    then the cell computes."""
    cells = [{"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": None}
             for src in ("z = 3", "")]
    (tmp_path / "other.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 4}))
    k = spin_kernel(tmp_path)
    try:
        cell = k.run("%run other.ipynb\nprint('z', z)\n" + PROBE, cell_id="c2", timeout=60)
        assert cell.ok and "z 3" in cell.stdout, cell.stderr
        # was a HOLE: %run runs each notebook cell with run_cell; the empty one's unmatched post_execute ends the hold
        assert probe(cell)[2] == "1" and yields(cell), cell.stdout
    finally:
        k.close()


def test_the_warm_up_never_starts_inside_the_loading_cell(tmp_path: Path) -> None:
    """The docstring: the warm-up starts when the loading cell ends, never during it. A loading cell that runs a
    cell itself (run_cell, as `%rerun` or a setup helper does) ends that inner cell first."""
    k = spin_kernel(tmp_path, load="%load_ext nbagent" + NO_LITELLM +
                    "\nget_ipython().run_cell('inner = 1')\nprint('STARTED', warmup.status()['started'])")
    try:
        out = k.run("print('after', warmup.status()['started'])", cell_id="c2")
        started = next(c for c in k.cells.values() if "STARTED" in c.stdout).stdout.split()
        assert out.stdout.split() == ["after", "True"]
        # was a HOLE: the inner cell's post_run_cell starts the warm-up while the loading cell still runs (and unheld)
        assert started == ["STARTED", "False"], started
    finally:
        k.close()


def test_top_level_await_threads_and_a_pool_still_pause_the_warm_up(tmp_path: Path) -> None:
    """Computing in a worker thread (concurrent.futures) and around a top-level await counts as the cell's."""
    k = spin_kernel(tmp_path)
    try:
        code = PROBE.replace("_compute(3_000_000)\n_b",
                             "import concurrent.futures as _cf\nwith _cf.ThreadPoolExecutor(1) as _ex:\n"
                             "    _ex.submit(_compute, 3_000_000).result()\n_b")
        code = code.replace("_t.sleep(0.3)", "import asyncio as _aio\nawait _aio.sleep(0.3)")
        cell = k.run(code, cell_id="c2", timeout=60)
        assert cell.ok, cell.stderr
        assert yields(cell), cell.stdout
        assert_done(k, tmp_path)
    finally:
        k.close()


def test_a_cells_own_tracer_and_switch_interval_are_left_alone(tmp_path: Path) -> None:
    """A debugger-like tracer in the cell's thread and a switch interval the cell sets during the warm-up stay;
    the warm-up still yields."""
    k = spin_kernel(tmp_path)
    try:
        setup = ("import sys, threading\nsys.setswitchinterval(0.002)\n"
                 "def tracer(frame, event, arg):\n    return None\n"
                 "threading.settrace(tracer)\n")
        assert k.run(setup, cell_id="c2").ok
        cell = k.run(PROBE, cell_id="c3", timeout=60)
        assert cell.ok and yields(cell), cell.stdout + cell.stderr
        (tmp_path / "release").touch()
        out = k.run("warmup.join()\nsys.settrace(tracer)\nprint(sys.getswitchinterval(), sys.gettrace() is tracer)\n"
                    "sys.settrace(None)\nthreading.settrace(None)", cell_id="c4", timeout=60)
        assert out.stdout.split() == ["0.002", "True"], out.stdout + out.stderr
    finally:
        k.close()


# ---------------------------------------------------------------------------------------------- deadlocks

BUSY_WAIT = """import sys, threading, time, pathlib
while "spin" not in sys.modules:
    time.sleep(0.01)
done = []
threading.Thread(target=lambda: (__import__("spin"), done.append(1)), daemon=True).start()
pathlib.Path("release").touch()  # `spin` may end now: its import needs only the warm-up to go on a moment
end = time.monotonic() + 6  # generous: a few ms are enough once the warm-up goes on
while not done and time.monotonic() < end:
    pass  # polling, as `while not future.done(): pass` does
print("IMPORTED", bool(done))
"""


def test_a_cell_that_polls_for_an_import_the_warm_up_holds(tmp_path: Path) -> None:
    """A cell that waits on the module the paused warm-up holds, but by polling (it computes), not blocking."""
    k = spin_kernel(tmp_path)
    try:
        cell = k.run(BUSY_WAIT, cell_id="c2", timeout=60)
        assert cell.ok, cell.stderr
        # was a HOLE: the poll uses CPU, so the warm-up stays paused holding `spin`'s import lock: livelock until
        #   timeout
        assert cell.stdout.split() == ["IMPORTED", "True"], cell.stdout
    finally:
        k.close()


def test_a_cell_that_imports_what_the_warm_up_holds_while_another_thread_computes(tmp_path: Path) -> None:
    """An earlier cell left a thread computing (a simulation, a server) until this cell's import is done; this cell
    blocks (no CPU) on the module the paused warm-up holds. The rest of the process still computes."""
    k = spin_kernel(tmp_path)
    try:
        bg = ("import threading\nstop = []\n\n\ndef work():\n    while not stop:\n"
              "        sum(i * i for i in range(10_000))\n\n\nthreading.Thread(target=work, daemon=True).start()")
        assert k.run(bg, cell_id="c2").ok
        cell = k.submit("import pathlib\npathlib.Path('release').touch()\nimport spin\nstop.append(1)\n"
                        "print('IMPORTED', spin.count > 0)", cell_id="c3")
        # was a HOLE: the warm-up measures the whole process's CPU, so a busy background thread keeps it paused forever
        # while the cell waits on the import lock it holds: deadlock (until the background thread stops)
        assert finished(k, cell, timeout=10), "the cell never got `spin`"
        assert cell.ok and cell.stdout.split() == ["IMPORTED", "True"], cell.stdout + cell.stderr
    finally:
        k.close()


# a module the warm-up imports first that takes a lock of another library's (logging's, say, during getLogger) and
# works inside it until `release` exists
HOLDER = ("import pathlib, sharedlock\ncount = 0\n\n\ndef step():\n    global count\n    count += 1\n\n\n"
          "with sharedlock.LOCK:\n    while not pathlib.Path('release').exists():\n        for _ in range(1000):\n"
          "            step()\n")
BACKGROUND = ("import threading\nstop = []\n\n\ndef work():\n    while not stop:\n"
              "        sum(i * i for i in range(10_000))\n\n\nthreading.Thread(target=work, daemon=True).start()")


def test_a_cell_waiting_on_a_library_lock_the_paused_warm_up_holds_while_another_thread_computes(
        tmp_path: Path) -> None:
    """Not a module lock (those the warm-up sees): a plain lock, taken by code the warm-up runs, that the cell then
    needs, while a thread of an earlier cell computes, so the process is busy and the cell's wait does not show."""
    (tmp_path / "sharedlock.py").write_text("import threading\nLOCK = threading.Lock()\n")
    (tmp_path / "holder.py").write_text(HOLDER)
    k = spin_kernel(tmp_path, first="import sharedlock\nfrom nbagent.ipython import warmup\n"
                                    "warmup.OWN_MODULES = ('holder',) + warmup.OWN_MODULES")
    try:
        assert k.run(BACKGROUND, cell_id="c2").ok
        cell = k.submit("import pathlib, sys, time\nwhile 'holder' not in sys.modules:\n    time.sleep(0.01)\n"
                        "pathlib.Path('release').touch()\nwith sharedlock.LOCK:\n    pass\nstop.append(1)\n"
                        "print('GOT', sys.modules['holder'].count > 0)", cell_id="c3")
        # was a HOLE: the warm-up stayed paused inside `with LOCK` as long as the background thread computed (the
        #   process looked busy), and the cell waited on LOCK forever
        assert finished(k, cell, timeout=20), "the cell never got the lock"
        assert cell.ok and cell.stdout.split() == ["GOT", "True"], cell.stdout + cell.stderr
        # (which rule let it go on is a race: usually PATIENCE, the cell's thread standing still; sometimes the
        # background thread, starved by the import's convoy, looks idle; without PATIENCE it hung in every try)
    finally:
        k.close()


FINDER = """import sys, pathlib


class SlowFinder:  # stands for a slow file system: finding a module takes a while, under the global import lock
    def find_spec(self, name, path=None, target=None):
        if name == "findme":
            while not pathlib.Path("release").exists():
                sum(range(1000))
        return None


sys.meta_path.insert(0, SlowFinder())
"""


def test_a_cell_importing_while_the_warm_up_finds_a_module_under_the_global_import_lock(tmp_path: Path) -> None:
    """Python holds one global import lock while a finder looks for a module; every import of a module not yet
    loaded needs it. The cell's wait on it is not a module lock's (not seen in importlib's `_blocking_on`)."""
    (tmp_path / "findme.py").write_text("VALUE = 1\n")
    k = spin_kernel(tmp_path, first=FINDER + "from nbagent.ipython import warmup\n"
                                            "warmup.OWN_MODULES = ('findme',) + warmup.OWN_MODULES")
    try:
        assert k.run(BACKGROUND, cell_id="c2").ok
        cell = k.submit("import pathlib, time\ntime.sleep(0.3)\npathlib.Path('release').touch()\n"
                        "import json.tool, findme\nstop.append(1)\nprint('IMPORTED', findme.VALUE)", cell_id="c3")
        # was a HOLE: the warm-up paused inside the finder, holding the global import lock, while the background
        #   thread computed: the cell's `import json.tool` waited for ever
        assert finished(k, cell, timeout=20), "the cell's import never ran"
        assert cell.ok and cell.stdout.split() == ["IMPORTED", "1"], cell.stdout + cell.stderr
        out = k.run("print(warmup.status()['gave_way'])", cell_id="c4")
        assert out.stdout.split() == ["0"], out.stdout + out.stderr  # it never paused holding that lock
    finally:
        k.close()


PKG_INIT = (SPIN.replace("count = 0", "count = 0\nopen('runs.txt', 'a').write('pkg\\n')")
            + "from .sub import VALUE  # noqa\n")
PKG_SUB = "import pkg  # noqa: a package's usual cycle (litellm.utils imports litellm)\n" \
          "open('runs.txt', 'a').write('sub\\n')\nVALUE = 1\n"
CIRCULAR = """import sys, threading, time, pathlib, importlib._bootstrap as boot
while "pkg" not in sys.modules:
    time.sleep(0.01)
main = threading.get_ident()


def opener():  # lets `pkg` end once this cell is blocked on its lock
    while getattr(boot._blocking_on.get(main), "name", None) != "pkg":
        time.sleep(0.005)
    pathlib.Path("release").touch()


threading.Thread(target=opener, daemon=True).start()
import pkg.sub
print("VALUE", pkg.sub.VALUE, pathlib.Path("runs.txt").read_text().split())
"""


def test_a_cell_importing_a_submodule_of_the_package_the_warm_up_is_inside(tmp_path: Path) -> None:
    """`import litellm.utils` while the warm-up is inside litellm's `__init__`: two threads in one package's
    circular import. Without the warm-up, the cell imports the package once, whole."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(PKG_INIT.replace("count", "pcount").replace("step", "pstep"))
    (tmp_path / "pkg" / "sub.py").write_text(PKG_SUB)
    k = spin_kernel(tmp_path, first="from nbagent.ipython import warmup\n"
                                    "warmup.OWN_MODULES = ('pkg',) + warmup.OWN_MODULES")
    try:
        cell = k.run(CIRCULAR, cell_id="c2", timeout=60)
        # was a HOLE: Python's import-lock deadlock detection fails one side of the two-thread cycle; the package is
        # half-imported, removed, and re-run (or the cell's import fails)
        assert cell.ok and cell.stdout.split() == ["VALUE", "1", "['pkg',", "'sub']"], str(cell.outputs)
    finally:
        k.close()


FORKER = """import os, pathlib
pathlib.Path("release").touch()  # the warm-up goes on to import this module next, and waits for its lock
pid = os.fork()  # as a module that starts a worker process when imported
if pid == 0:
    os._exit(0)
_, status = os.waitpid(pid, 0)
CODE = os.waitstatus_to_exitcode(status)
"""


def test_a_fork_inside_an_import_the_warm_up_waits_for(tmp_path: Path) -> None:
    """A fork waits for the warm-up to finish; the warm-up waits for the module lock the forking cell holds."""
    (tmp_path / "forker.py").write_text(FORKER)
    k = spin_kernel(tmp_path, first="from nbagent.ipython import warmup\n"
                                    "warmup.OWN_MODULES = ('spin', 'forker') + warmup.OWN_MODULES")
    try:
        cell = k.submit("import forker\nprint('CODE', forker.CODE)", cell_id="c2")
        # was a HOLE: _before_fork joins the warm-up, which is blocked on `forker`'s import lock held by the forking
        # thread: deadlock
        assert finished(k, cell, timeout=10), "the forking cell never ended"
        assert cell.stdout.split() == ["CODE", "0"], cell.stdout + cell.stderr
    finally:
        k.close()


def test_spawn_and_subprocess_during_the_warm_up(tmp_path: Path) -> None:
    """Processes that do not fork this one (multiprocessing's spawn, subprocess) neither wait for the warm-up
    nor break."""
    k = spin_kernel(tmp_path)
    try:
        code = ("import multiprocessing as mp, subprocess, sys\n"
                "with mp.get_context('spawn').Pool(1) as p:\n    r = p.map(abs, [-3])\n"
                "out = subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True, text=True).stdout\n"
                "print('R', r[0], out.strip(), warmup.running())")
        cell = k.run(code, cell_id="c2", timeout=60)
        assert cell.ok and cell.stdout.split() == ["R", "3", "7", "True"], cell.stdout + cell.stderr
        assert_done(k, tmp_path)
    finally:
        k.close()


# ---------------------------------------------------------------------------------------------- interrupts


def test_a_warm_up_module_that_exits_or_raises(tmp_path: Path) -> None:
    """A module that raises is left for the run; one that raises SystemExit kills the warm-up's thread: the
    switch interval is put back, and offline runs go on."""
    (tmp_path / "bad.py").write_text("raise RuntimeError('bad module')\n")
    (tmp_path / "dies.py").write_text("raise SystemExit(3)\n")
    script(tmp_path / "s.json", {"content": "Hello."})
    k = Kernel(tmp_path)
    try:
        assert k.run("from nbagent.ipython import warmup\n"
                     "warmup.OWN_MODULES = ('bad', 'dies') + warmup.OWN_MODULES", cell_id="c0").ok
        assert k.run("%load_ext nbagent" + NO_LITELLM, cell_id="c1").ok
        out = k.run("import sys\nwarmup.join()\ns = warmup.status()\nprint(s['failed'][:1], sys.getswitchinterval(),"
                    " warmup.running(), warmup.offline_ready())", cell_id="c2")
        assert out.stdout.split() == ["['bad:", "bad", "module']", "0.005", "False", "True"], out.stdout + out.stderr
        cell = k.run("%%agent --script s.json\nsay hello", cell_id="c3")
        assert cell.ok and [r["answer"] for r in cell.records] == ["Hello."], cell.stdout + cell.stderr
        bad = k.run("import bad", cell_id="c4")
        assert not bad.ok and "bad module" in str(bad.outputs)  # the user sees the error where they import it
    finally:
        k.close()


NOISY = ("import pathlib, time, warnings, sys\nwhile not pathlib.Path('speak').exists():\n    time.sleep(0.01)\n"
         "print('NOISE-OUT')\nprint('NOISE-ERR', file=sys.stderr)\nwarnings.warn('NOISE-WARN')\n")


def test_an_offline_run_during_the_warm_up_records_what_it_records_without_it(tmp_path: Path) -> None:
    script(tmp_path / "s.json", {"tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]},
           {"content": "Done."})
    answers = []
    for env in ({"NBAGENT_WARMUP": "0"}, None):
        # the warm-up held inside its litellm phase (an offline run waits only for nbagent's own modules)
        k = spin_kernel(tmp_path, env=REAL, first=SPIN_IN_LITELLM_PHASE, load="%load_ext nbagent") \
            if env is None else Kernel(tmp_path, env=env)
        try:
            if env is not None:
                assert k.run("%load_ext nbagent", cell_id="c1").ok
            cell = k.run("%%agent --script s.json --approve all\nlist the files", cell_id="c2", timeout=60)
            assert cell.ok, cell.stderr
            answers.append(([r.get("answer") for r in cell.records], sorted(cell.records[-1]) if cell.records
                            else [], cell.stderr))
        finally:
            k.close()
    assert answers[0] == answers[1], answers



# ---------------------------------------------------------------------------------------------- interrupting a wait

LOADING = "nbagent: loading the model library (first run in this kernel)…"


def shows(cell: Cell, text: str) -> bool:
    return any(o.get("data", {}).get("text/plain") == text for o in cell.outputs)


def interrupted(k: Kernel, code: str, cell_id: str) -> Cell:
    """Runs `code`, which awaits the warm-up (it says so), interrupts it, and waits (generously) for its reply."""
    cell = k.submit(code, cell_id=cell_id)
    for _ in range(600):
        if shows(cell, LOADING) or cell.reply is not None:
            break
        k.pump(0.1)
    assert shows(cell, LOADING) and cell.reply is None, str(cell.outputs) + cell.stderr
    k.km.interrupt_kernel()
    assert finished(k, cell, timeout=60), "the interrupted cell never ended"
    return cell


def test_interrupting_a_cell_that_awaits_the_warm_up_ends_it(tmp_path: Path) -> None:
    """`%agent status` and a real provider's `%%agent` cell await the warm-up; the stop button ends the wait (as
    ipykernel ends any awaiting cell: CancelledError), the loading line goes, and the kernel runs the next cell
    while the warm-up goes on. So does a cell blocked on the module the paused warm-up is importing."""
    k = spin_kernel(tmp_path, env=REAL)
    try:
        for n, code in enumerate(("%agent status", "%%agent\nsay hello")):
            cell = interrupted(k, code, cell_id=f"i{n}")
            # was a HOLE: the wait left the warm-up running freely until the cell ended, so the rest of the cell
            #   (the traceback: thousands of stat calls, each giving up the GIL to an import that takes it back within
            #   the switch interval) crawled for minutes: the cell did not end
            assert not cell.ok and cell.reply["content"]["ename"] in ("CancelledError", "KeyboardInterrupt")
            assert not shows(cell, LOADING), cell.outputs  # was a HOLE: the loading line stayed
            after = k.run("print('NEXT', warmup.running())", cell_id=f"n{n}", timeout=60)
            assert after.stdout.split() == ["NEXT", "True"], after.stdout + after.stderr
        # blocked (no await) on `spin`'s import lock, which the warm-up holds: Python's lock waits are interruptible
        cell = k.submit("import spin", cell_id="imp")
        for _ in range(5):
            k.pump(0.1)
        assert cell.reply is None
        k.km.interrupt_kernel()
        assert finished(k, cell, timeout=60), "the cell waiting on the import lock never ended"
        assert cell.reply["content"]["ename"] == "KeyboardInterrupt", cell.reply["content"]
        assert_done(k, tmp_path)
    finally:
        k.close()


CAUGHT = """import asyncio
from nbagent.ipython import host
try:
    await host.run_line("status")
except asyncio.CancelledError:
    print("INTERRUPTED")
""" + PROBE


def test_a_cell_whose_wait_for_the_warm_up_was_interrupted_holds_it_again(tmp_path: Path) -> None:
    """What runs in the cell after the interrupt (its own code, IPython's traceback) is yielded to, like any cell."""
    k = spin_kernel(tmp_path, env=REAL)
    try:
        cell = interrupted(k, CAUGHT, cell_id="c2")
        assert cell.ok and "INTERRUPTED" in cell.stdout, cell.stdout + cell.stderr
        # was a HOLE: waived until the cell ended, the warm-up ran on while the cell computed
        assert probe(cell)[2:] == ("1", "False") and yields(cell), cell.stdout
        assert_done(k, tmp_path)
    finally:
        k.close()


# ---------------------------------------------------------------------------------------------- output

# collects what nbagent logs at debug level (the warm-up's output goes there)
LOG = ("import logging\nrecords = []\n\n\nclass Keep(logging.Handler):\n    def emit(self, record):\n"
       "        records.append(record.getMessage())\n\n\nlogger = logging.getLogger('nbagent.ipython')\n"
       "logger.setLevel(logging.DEBUG)\nlogger.addHandler(Keep())\n")
SPEAKS = """import pathlib, sys, threading
print("CELL-OUT")
pathlib.Path("speak").touch()  # the warm-up's module prints, warns, and ends
warmup.join()
print("CELL-ERR", file=sys.stderr)
t = threading.Thread(target=lambda: print("THREAD-OUT"))
t.start()
t.join()
"""


def test_what_a_module_prints_while_the_warm_up_imports_it_stays_out_of_the_cells(tmp_path: Path) -> None:
    """ipykernel sends a thread's writes to the cell running at that moment: a module the warm-up imports would
    print into whatever cell the user runs. The cell's own output (its thread and any other) still shows."""
    (tmp_path / "noisy.py").write_text(NOISY)
    k = spin_kernel(tmp_path, first=LOG + "from nbagent.ipython import warmup\n"
                                          "warmup.OWN_MODULES = ('noisy',) + warmup.OWN_MODULES")
    try:
        cell = k.run(SPEAKS, cell_id="c2", timeout=60)
        assert cell.ok, cell.stderr
        # was a HOLE: NOISE-OUT, NOISE-ERR and the NOISE-WARN warning showed in this cell
        assert "NOISE" not in cell.stdout + cell.stderr + str(cell.outputs), cell.stdout + cell.stderr
        assert cell.stdout.split() == ["CELL-OUT", "THREAD-OUT"] and cell.stderr.split() == ["CELL-ERR"]
        out = k.run("import sys\nprint(type(sys.stdout).__name__, type(sys.stderr).__name__)\n"
                    "print(*[r.split(': ', 1)[1] for r in records if r.startswith('warm-up std')], sep='|')",
                    cell_id="c3")
        lines = out.stdout.splitlines()
        assert lines[0] == "OutStream OutStream", out.stdout + out.stderr  # put back
        logged = lines[1].split("|")
        assert logged[:2] == ["NOISE-OUT", "NOISE-ERR"] and "NOISE-WARN" in logged[2], logged  # in the log instead
        assert "NOISE" not in str([c.stdout + c.stderr + str(c.outputs) for c in k.cells.values() if c is not out])
    finally:
        k.close()
