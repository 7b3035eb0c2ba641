"""README's first command, as a newcomer runs it: in a fresh clone, twice. Both runs must tell the truth (every
run completed, report.md really written) and leave `git status` clean (only ignored paths appear).

The install part of the command (`python3 -m venv .venv && .venv/bin/pip install -e ".[test]"`) is not repeated:
the clone gets a `.venv/bin/nbagent` that is this environment's (a real folder, as pip would make, so `.venv/` in
.gitignore covers it). Everything after the install runs exactly as README says.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && '


def readme_first_command() -> str:
    block = (ROOT / "README.md").read_text().split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    (line,) = [x for x in block.splitlines() if x.startswith("python3 -m venv")]
    assert line.startswith(INSTALL), line
    return line[len(INSTALL):]


def git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=clone, capture_output=True, text=True, check=True).stdout


def test_readme_first_command_twice_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "nbagent"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / ".venv" / "bin" / "nbagent").symlink_to(Path(sys.executable).with_name("nbagent"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBAGENT_")}
    command = readme_first_command()
    folders = []
    for attempt in (1, 2):
        done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=600, check=False)
        assert done.returncode == 0, f"run {attempt}:\n{done.stdout}\n{done.stderr}"
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 3, done.stdout
        assert all(" completed " in line for line in lines[:2]), done.stdout  # not completed_with_errors
        assert "North** sold the most" in lines[0] and "Wrote **report.md**" in lines[1]
        assert lines[2].startswith("ok: 2 run(s); executed notebook written to ")
        executed = Path(lines[2].split("written to ", 1)[1])
        folder = executed.parent
        assert folder.parent == clone / "runs" and executed.name == "quickstart.ipynb"
        # what the answer claims happened, happened, here
        assert (folder / "report.md").read_text().startswith("# Top regions by revenue\n\n1. North: 120")
        assert (folder / "quickstart.nbagent" / "events.jsonl").is_file()
        folders.append(folder)
        assert git(clone, "status", "--porcelain") == "", f"run {attempt} changed the checkout"
        ignored = git(clone, "status", "--porcelain", "--ignored").splitlines()
        assert sorted(ignored) == ["!! .venv/", "!! runs/"], ignored
    assert folders[0] != folders[1]  # each run starts in a fresh folder
    assert not (clone / "notebooks" / "report.md").exists()
    assert not (clone / "notebooks" / "quickstart.nbagent").exists()
