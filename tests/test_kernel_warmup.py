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


def test_the_warm_up_starts_after_the_loading_cell(tmp_path: Path) -> None:
    k = Kernel(tmp_path)
    try:
        load = k.run("import sys\n%load_ext nbagent\nprint('litellm' in sys.modules)", cell_id="c1")
        assert load.ok and load.stdout.strip() == "False"  # the loading cell itself imports nothing heavy
        after = k.run("from nbagent.ipython import warmup\ns = warmup.status()\n"
                      "print(s['started'], warmup.running(), 'litellm' in sys.modules, s['failed'])", cell_id="c2")
        assert after.stdout.split() == ["True", "False", "True", "[]"], after.stdout + after.stderr
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


def test_a_first_agent_cell_says_it_waits_for_the_warm_up_then_runs(tmp_path: Path) -> None:
    (tmp_path / "gate.py").write_text(GATE)
    script(tmp_path / "s.json", {"content": "Hello."})
    k = Kernel(tmp_path)
    try:
        assert k.run(SLOW, cell_id="c0").ok
        assert k.run("%load_ext nbagent", cell_id="c1").ok
        cell = k.submit("%%agent --script s.json\nsay hello", cell_id="c2")
        while not any(o.get("data", {}).get("text/plain") == LOADING for o in cell.outputs):
            k.pump(0.1)
        assert cell.reply is None  # still waiting: the warm-up cannot end before `release` exists
        (tmp_path / "release").touch()
        k.wait(cell)
        # the run view took the loading line's place (same display id), and the static record took the view's
        outputs = [o for o in cell.outputs if "data" in o]
        assert cell.ok and len(outputs) == 1 and outputs[0]["data"][RUN_MIME]["answer"] == "Hello."
    finally:
        k.close()


def test_other_cells_wait_for_the_warm_up_before_they_run(tmp_path: Path) -> None:
    (tmp_path / "gate.py").write_text(GATE)
    k = Kernel(tmp_path)
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
