"""The first run's imports, warmed up in a background thread once `%load_ext nbagent` has ended, in a real kernel:
nothing heavy in the loading cell, other cells neither waiting for the warm-up nor slowed by it, and the first
`%%agent` cell with a real provider saying what it waits for. Also the traitlets class's name (`NbAgent`) and the
note for the old `Agent` section."""

from __future__ import annotations

from pathlib import Path

from kernel_harness import RUN_MIME, Kernel, script

from nbagent.ipython.host import LOADING

# a module the warm-up imports after its own list, which returns only once the test creates `release`: the warm-up
# is then still running, for sure, when the next cell starts (no timing guess)
GATE = "import pathlib, time\nwhile not pathlib.Path('release').exists():\n    time.sleep(0.01)\n"
SLOW = "from nbagent.ipython import warmup\nwarmup.MODULES = warmup.MODULES + ('gate',)"


REAL = {"NBAGENT_MODEL": "openai/gpt-4o-mini"}  # a real provider configured: the warm-up loads litellm ahead


def test_the_warm_up_starts_after_the_loading_cell(tmp_path: Path) -> None:
    k = Kernel(tmp_path, env=REAL)
    try:
        load = k.run("import sys\n%load_ext nbagent\nprint('litellm' in sys.modules)", cell_id="c1")
        assert load.ok and load.stdout.strip() == "False"  # the loading cell itself imports nothing heavy
        # a cell that waits for the warm-up (here: joins it) uses no CPU, so the warm-up runs on meanwhile
        after = k.run("from nbagent.ipython import warmup\nwarmup.join()\ns = warmup.status()\n"
                      "print(s['started'], warmup.running(), 'litellm' in sys.modules, s['failed'])", cell_id="c2")
        assert after.stdout.split() == ["True", "False", "True", "[]"], after.stdout + after.stderr
    finally:
        k.close()


def test_a_kernel_for_the_offline_models_never_loads_litellm(tmp_path: Path) -> None:
    """No model configured but a script (and no key, no Ollama): the warm-up loads nbagent's own modules only, and
    a scripted run needs nothing more (the kernel stays ~200 MB lighter: docs/performance.md)."""
    script(tmp_path / "s.json", {"content": "Hello."})
    k = Kernel(tmp_path, env={"NBAGENT_SCRIPT": "s.json", "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "",
                              "GEMINI_API_KEY": "", "GOOGLE_API_KEY": "", "OLLAMA_API_BASE": "http://127.0.0.1:9"})
    try:
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        k.run("from nbagent.ipython import warmup\nwarmup.join()", cell_id="c2")
        cell = k.run("%%agent\nsay hello", cell_id="c3")
        assert cell.ok and [o["data"][RUN_MIME]["answer"] for o in cell.outputs if "data" in o] == ["Hello."]
        out = k.run("import sys\nprint('litellm' in sys.modules, warmup.status()['litellm'])", cell_id="c4").stdout
        assert out.startswith("False skipped: no real model configured"), out
    finally:
        k.close()


def test_the_warm_up_can_be_turned_off(tmp_path: Path) -> None:
    k = Kernel(tmp_path, env={"NBAGENT_WARMUP": "0"})
    try:
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        out = k.run("import sys\nfrom nbagent.ipython import warmup\n"
                    "print(warmup.status()['started'], 'litellm' in sys.modules)", cell_id="c2").stdout
        assert out.split() == ["False", "False"]
        script(tmp_path / "s.json", {"content": "Hello."})
        cell = k.run("%%agent --script s.json\nsay hello", cell_id="c3")
        assert cell.ok and [o["data"][RUN_MIME]["answer"] for o in cell.outputs if "data" in o] == ["Hello."]
        assert LOADING not in str(cell.outputs)
    finally:
        k.close()


def test_an_offline_cell_runs_during_the_warm_up_a_real_one_says_it_waits(tmp_path: Path) -> None:
    (tmp_path / "gate.py").write_text(GATE)
    script(tmp_path / "s.json", {"content": "Hello."})
    k = Kernel(tmp_path, env=REAL)
    try:
        assert k.run(SLOW, cell_id="c0").ok
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        # a scripted cell needs nothing of litellm's: it runs while the warm-up still imports it (gate closed)
        offline = k.run("%%agent --script s.json\nsay hello", cell_id="c2")
        outputs = [o for o in offline.outputs if "data" in o]
        assert offline.ok and len(outputs) == 1 and outputs[0]["data"][RUN_MIME]["answer"] == "Hello."
        assert LOADING not in str(offline.outputs)
        # a cell that may need the model library says it waits for it, then runs
        cell = k.submit("%agent status", cell_id="c3")
        while not any(o.get("data", {}).get("text/plain") == LOADING for o in cell.outputs):
            k.pump(0.1)
        assert cell.reply is None  # still waiting: the warm-up cannot end before `release` exists
        (tmp_path / "release").touch()
        k.wait(cell)
        assert cell.ok
    finally:
        k.close()


# a module the warm-up imports first, standing for a long import (litellm's runs ~1.5 s of module code in one
# import): Python work, counted, until the test creates `release`
SPIN = ("import pathlib\ncount = 0\n\n\ndef step():\n    global count\n    count += 1\n\n\n"
        "while not pathlib.Path('release').exists():\n    for _ in range(1000):\n        step()\n")
SPIN_FIRST = "from nbagent.ipython import warmup\nwarmup.OWN_MODULES = ('spin',) + warmup.OWN_MODULES"
# a cell that computes, sleeps, and computes again, counting how far the warm-up's import got in each phase
MEANWHILE = """import sys, time
from nbagent.ipython import warmup
running = warmup.running()
while "spin" not in sys.modules:  # the warm-up's thread has only just started
    time.sleep(0.01)
spin = sys.modules["spin"]  # half-way through its import


def compute(n):
    return sum(i * i % 7 for i in range(n))


get_ipython().run_cell("inner = 1")  # a cell run by this one (as %run does) ends: this one still runs
a = spin.count
compute(3_000_000)
b = spin.count
time.sleep(0.3)
c = spin.count
compute(3_000_000)
d = spin.count
print(running, b - a, c - b, d - c, warmup.running(), warmup.status()["pauses"] > 0)
"""


def test_a_cell_run_during_the_warm_up_starts_at_once_and_is_not_slowed(tmp_path: Path) -> None:
    """The cell does not wait for the warm-up, and while it computes the warm-up stands still (it would otherwise
    take about half the cell's time: one GIL); while the cell sleeps, the warm-up goes on."""
    (tmp_path / "spin.py").write_text(SPIN)
    k = Kernel(tmp_path)
    try:
        assert k.run(SPIN_FIRST, cell_id="c0").ok
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        cell = k.run(MEANWHILE, cell_id="c2", timeout=60)  # before, it waited for the warm-up: forever here
        assert cell.ok, cell.stderr
        running, computing, sleeping, computing_again, still, paused = cell.stdout.split()
        assert running == still == paused == "True"
        # in each computing phase the warm-up ran only until it saw the cell compute (a few ms); while the cell
        # slept it ran the whole time: far more steps, whatever the machine's speed
        assert int(computing) * 10 < int(sleeping), cell.stdout
        # after going on during the sleep it stops again: `spin` makes a system call every 1000 steps, which lets go
        # of the GIL and takes it back before the switch interval is up, so the computing cell never forces a switch
        # and gets ~8% of the CPU; only the warm-up's probes see it compute (before them: 2 in ~8 runs failed here)
        assert int(computing_again) * 10 < int(sleeping), cell.stdout
        assert warmup_probes(k) > 0
        (tmp_path / "release").touch()
        out = k.run("warmup.join()\nprint(warmup.running(), warmup.status()['failed'], sys.getswitchinterval(), "
                    "sys.gettrace())", cell_id="c3")
        assert out.stdout.split() == ["False", "[]", "0.005", "None"], out.stdout + out.stderr  # all put back
    finally:
        k.close()


def warmup_probes(k: Kernel) -> int:
    return int(k.run("print(warmup.status()['probes'])", cell_id="probes").stdout)


def test_a_cell_that_imports_what_the_warm_up_is_importing_gets_it(tmp_path: Path) -> None:
    """The cell waits on the module's lock, which the paused warm-up holds: a cell that waits uses no CPU, so the
    warm-up goes on and the import completes (no deadlock), once `spin` may end."""
    (tmp_path / "spin.py").write_text(SPIN)
    k = Kernel(tmp_path)
    try:
        assert k.run(SPIN_FIRST, cell_id="c0").ok
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        # (whether the warm-up paused first is a race: once this cell waits on `spin`'s lock it never pauses)
        cell = k.submit("import spin\nprint(spin.count > 0, warmup.running())", cell_id="c2")
        for _ in range(5):
            k.pump(0.1)
        assert cell.reply is None  # `spin` is not done: the cell waits for it, as any import from two threads
        (tmp_path / "release").touch()
        k.wait(cell, timeout=60)
        assert cell.ok and cell.stdout.split()[0] == "True", cell.stdout + cell.stderr
    finally:
        k.close()


FORK = """import os
pid = os.fork()
if pid == 0:  # the child: its `spin` must be whole, not half-imported with a lock nobody will release
    import spin
    os._exit(0 if spin.count > 0 else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_cell_that_forks_during_the_warm_up_leaves_the_child_whole_modules(tmp_path: Path) -> None:
    """A fork (multiprocessing's default on Linux) waits for the warm-up to finish; else the child would inherit
    a half-imported module and its import lock, and hang on its first import of it."""
    (tmp_path / "spin.py").write_text(SPIN)
    k = Kernel(tmp_path)
    try:
        assert k.run(SPIN_FIRST, cell_id="c0").ok
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        cell = k.submit(FORK, cell_id="c2")
        for _ in range(3):
            k.pump(0.1)
        (tmp_path / "release").touch()
        k.wait(cell, timeout=60)
        assert cell.ok and cell.stdout.split() == ["0"], cell.stdout + cell.stderr
    finally:
        k.close()


def test_settings_are_nbagents_own_traitlets_class(kernel: Kernel) -> None:
    assert kernel.run('%config NbAgent.autonomy = "L2"', cell_id="c1").ok
    out = kernel.run("%agent config", cell_id="c2")
    assert "autonomy   = 'L2'" in out.stdout and "(%config NbAgent)" in out.stdout and not out.stderr
    # the old name is not read (another library's `Agent` may own that section), and the cell says so once
    assert kernel.run('%config Agent.model = "openai/gpt-4o"', cell_id="c3").ok
    out = kernel.run("%agent config", cell_id="c4")
    assert "Agent.model in the IPython config is not read by nbagent" in out.stderr
    assert "%config NbAgent.model = ..." in out.stderr and "openai/gpt-4o" not in out.stdout
    assert not kernel.run("%agent config", cell_id="c5").stderr
