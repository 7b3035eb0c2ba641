"""Attacks on "nothing the folder brings steers the model layer" (docs/configuration.md, "What nbagent reads"), and on
what its guard leaves behind: the person's own `LITELLM_MODE=DEV`, plain Python (`nbagent run`'s own process), a
variable a cell sets or removes (it reaches the model process at the next call), and the person's own
`load_dotenv()` while litellm is imported in a thread of the kernel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kernel_harness import Kernel

PROBE = ("from nbagent.models.llm import library\n"
         "print('missing:', library('validate_environment', model='anthropic/claude-3-5-haiku-20241022')"
         "['missing_keys'])")


@pytest.mark.kernel
def test_the_person_s_own_load_dotenv_while_litellm_is_imported_in_the_kernel_loads_their_file(tmp_path: Path
                                                                                              ) -> None:
    """Where litellm is imported in a thread of the kernel (no model process), the guard against litellm's own
    `load_dotenv()` is in `os.environ` for the seconds of the import. A notebook's usual second cell,
    `from dotenv import load_dotenv; load_dotenv()`, runs in that window: it must load the person's `.env`, and see
    none of nbagent's guard."""
    (tmp_path / ".env").write_text("MY_OWN_SETTING=from-my-env-file\n")
    k = Kernel(tmp_path, env={"NBAGENT_MODEL_PROCESS": "0"})
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        cell = k.run(
            "import os, time\n"
            "from nbagent.ipython import loading\n"
            "assert loading.start()\n"
            "until = time.monotonic() + 60\n"
            "while 'LITELLM_MODE' not in os.environ and loading.status()['state'] == 'loading' "
            "and time.monotonic() < until:\n"
            "    time.sleep(0.005)\n"
            "during = loading.status()['state']\n"
            "from dotenv import load_dotenv\n"
            "print(during, load_dotenv(), os.environ.get('MY_OWN_SETTING'), os.environ.get('PYTHON_DOTENV_DISABLED'))",
            cell_id="mine", timeout=120)
        assert cell.ok, cell.outputs
        # Was: "loading False None 1": PYTHON_DOTENV_DISABLED=1 made the person's own load_dotenv() do nothing
        assert cell.stdout.split() == ["loading", "True", "from-my-env-file", "None"], cell.stdout
    finally:
        k.close()


@pytest.mark.kernel
def test_held_a_variable_set_or_removed_in_a_cell_reaches_the_model_process_at_the_next_call(tmp_path: Path
                                                                                             ) -> None:
    """The kernel's environment, with the person's `LITELLM_MODE=DEV` (litellm's mode that reads `.env`) and a
    `.env` beside the notebook naming a key: the model process reads no `.env` whatever the mode, takes a key set in
    a cell at the next call, and drops it at the next call after the cell removed it."""
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-planted-0123456789abcdef\n")
    k = Kernel(tmp_path, env={"LITELLM_MODE": "DEV"})
    try:
        assert k.run("%load_ext nbagent", cell_id="load").ok
        first = k.run(PROBE, cell_id="p1", timeout=120)
        assert "'ANTHROPIC_API_KEY'" in first.stdout, first.stdout + first.stderr
        k.run("import os\nos.environ['ANTHROPIC_API_KEY'] = 'sk-ant-set-in-a-cell-0123456789'", cell_id="set")
        assert "missing: []" in k.run(PROBE, cell_id="p2").stdout
        k.run("del os.environ['ANTHROPIC_API_KEY']", cell_id="unset")
        assert "'ANTHROPIC_API_KEY'" in k.run(PROBE, cell_id="p3").stdout
        mode = k.run("print(os.environ.get('LITELLM_MODE'))", cell_id="mode")
        assert mode.stdout.strip() == "DEV"  # the person's own value, as they set it
    finally:
        k.close()


def test_held_plain_python_with_litellm_mode_dev_reads_no_dotenv(tmp_path: Path) -> None:
    """Plain Python (a script, `nbagent run`'s own process) imports litellm in-process: a `.env` in the working
    folder, with the person's `LITELLM_MODE=DEV`, fills nothing; the mode is theirs again afterwards."""
    (tmp_path / ".env").write_text("OPENAI_BASE_URL=http://127.0.0.1:9/attacker\nPLANTED_BY_DOTENV=1\n")
    code = ("import os\nfrom nbagent.models.llm import import_litellm\nimport_litellm()\n"
            "print(os.environ.get('OPENAI_BASE_URL'), os.environ.get('PLANTED_BY_DOTENV'), "
            "os.environ.get('LITELLM_MODE'), os.environ.get('PYTHON_DOTENV_DISABLED'))")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LITELLM_MODE": "DEV"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "None", "DEV", "None"], done.stdout
