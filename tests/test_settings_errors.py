"""Every NBAGENT_* setting read from the environment that nbagent cannot use is one line naming the variable, its
value and what it takes (issue 45: `NBAGENT_MAX_STEPS=abc` was a bare `ValueError: invalid literal for int()`).

In a real kernel (tests/kernel_harness.py): the `%%agent` cell stops before any run with that line, the kernel stays
alive, and the next cell runs once the variable is fixed. A flag read while `%load_ext` loads nbagent
(NBAGENT_MODEL_PROCESS) says so in one line and keeps its default, since failing there would stop nbagent loading.
Each setting's check is that of `%agent config`, so the two never disagree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernel_harness import Kernel, answer, script

from nbagent.ipython import options
from nbagent.ipython.options import SettingError, UsageError, env_flag, env_seconds, from_environment

FIX = "fix or unset it where the kernel (or `nbagent run`) starts"


@pytest.mark.parametrize(("name", "raw", "takes"), [
    ("max_steps", "abc", "a whole number"),
    ("max_steps", "2.5", "a whole number"),
    ("budget", "lots", "a number"),
    ("tool_timeout", "soon", "a number"),
    ("context_window", "12", "the model's input limit in tokens: 1000 or more"),
    ("autonomy", "L9", "L0, L1, L2 or L3"),
    ("approve", "maybe", "all, none, low or recorded"),
])
def test_each_setting_from_the_environment_is_checked_as_agent_config_checks_it(name: str, raw: str,
                                                                                takes: str) -> None:
    variable = f"NBAGENT_{name.upper()}"
    with pytest.raises(SettingError) as caught:
        from_environment(name, raw)
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith(f"{variable}={raw!r} in the environment is not a value nbagent can use: {variable} takes ")
    assert takes in line and line.endswith(FIX)
    with pytest.raises(UsageError):  # %agent config refuses the same value
        options.set_override({}, f"{name}={raw}")


def test_good_values_from_the_environment_are_used_as_before() -> None:
    assert [from_environment(n, v) for n, v in (("max_steps", "12"), ("budget", "0.5"), ("autonomy", "L2"),
                                                 ("model", "openai/gpt-4o-mini"), ("context_window", "0"))] == \
        [12, 0.5, "L2", "openai/gpt-4o-mini", 0]


def test_seconds_and_flags(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NBAGENT_FRONTEND_WAIT", "2.5")
    assert env_seconds("NBAGENT_FRONTEND_WAIT", 5.0) == 2.5
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv("NBAGENT_FRONTEND_WAIT", bad)
        with pytest.raises(SettingError, match=r"NBAGENT_FRONTEND_WAIT=.* takes a number of seconds, 0 or more"):
            env_seconds("NBAGENT_FRONTEND_WAIT", 5.0)
    monkeypatch.setenv("NBAGENT_TEST_FLAG", "Off")
    assert env_flag("NBAGENT_TEST_FLAG", True) is False
    monkeypatch.setenv("NBAGENT_TEST_FLAG", "flase")
    assert env_flag("NBAGENT_TEST_FLAG", True) is True and env_flag("NBAGENT_TEST_FLAG", True) is True
    said = capsys.readouterr().err.splitlines()
    assert said == ["nbagent: NBAGENT_TEST_FLAG='flase' in the environment is not a value nbagent can use: "
                    f"NBAGENT_TEST_FLAG takes one of 1, true, yes, on or 0, false, no, off; {FIX} (until then: on, "
                    "the default)"]  # once


@pytest.mark.kernel
def test_a_cell_says_which_variable_is_wrong_and_the_kernel_goes_on(tmp_path: Path) -> None:
    turns = script(tmp_path / "s.json", answer("All done."))
    kernel = Kernel(tmp_path, env={"NBAGENT_MAX_STEPS": "abc", "NBAGENT_MODEL_PROCESS": "flase"})
    try:
        loaded = kernel.run("%load_ext nbagent")
        assert loaded.ok
        assert "NBAGENT_MODEL_PROCESS='flase' in the environment is not a value nbagent can use" in loaded.stderr
        cell = kernel.run(f"%%agent --script {turns.name}\nsay something")
        (error,) = [o["error"] for o in cell.outputs if "error" in o]
        assert error == (f"SettingError: NBAGENT_MAX_STEPS='abc' in the environment is not a value nbagent can use: "
                         f"NBAGENT_MAX_STEPS takes a whole number; {FIX}")
        assert not cell.records  # no run was started
        fixed = kernel.run("import os\nos.environ['NBAGENT_MAX_STEPS'] = '5'\n"
                           "os.environ['NBAGENT_FRONTEND_WAIT'] = 'soon'")
        assert fixed.ok
        cell = kernel.run(f"%%agent --script {turns.name}\nsay something")
        (error,) = [o["error"] for o in cell.outputs if "error" in o]
        assert error.startswith("SettingError: NBAGENT_FRONTEND_WAIT='soon' in the environment is not a value "
                                "nbagent can use: NBAGENT_FRONTEND_WAIT takes a number of seconds, 0 or more")
        kernel.run("del os.environ['NBAGENT_FRONTEND_WAIT']")
        cell = kernel.run(f"%%agent --script {turns.name}\nsay something")
        assert cell.ok and "All done." in json.dumps(cell.records)
    finally:
        kernel.close()
