"""The first run's imports, warmed up in a background thread once `%load_ext nbagent` has ended, in a real kernel:
nothing heavy in the loading cell, no cell overlapping the warm-up, and the first `%%agent` cell saying what it
waits for. Also the traitlets class's name (`NbAgent`) and the note for the old `Agent` section."""

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
        after = k.run("from nbagent.ipython import warmup\ns = warmup.status()\n"
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


def test_other_cells_wait_for_the_warm_up_before_they_run(tmp_path: Path) -> None:
    (tmp_path / "gate.py").write_text(GATE)
    k = Kernel(tmp_path, env=REAL)
    try:
        assert k.run(SLOW, cell_id="c0").ok
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        cell = k.submit("import sys\nprint(warmup.running(), 'gate' in sys.modules)", cell_id="c2")
        for _ in range(10):
            k.pump(0.1)
        assert cell.reply is None and cell.stdout == ""  # not started: its code would race the warm-up's imports
        (tmp_path / "release").touch()
        k.wait(cell)
        assert cell.ok and cell.stdout.split() == ["False", "True"]
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
