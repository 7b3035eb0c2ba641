"""README's first command, as a newcomer runs it: in a fresh clone, twice. Both runs must tell the truth (every
run completed, report.md really written) and leave `git status` clean (only ignored paths appear).

The first test does not repeat the install part of the command (`python3 -m venv .venv && .venv/bin/pip install -e
".[test]"`): the clone gets a `.venv/bin/nbagent` that is this environment's (a real folder, as pip would make, so
`.venv/` in .gitignore covers it), and everything after the install runs exactly as README says. The `install` tests
(minutes each; `-m "not install"` leaves them out) run the whole line, install included, and build a wheel from
the sdist without npm.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && '


def readme_first_command() -> str:
    block = (ROOT / "README.md").read_text().split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    (line,) = [x for x in block.splitlines() if x.startswith("python3 -m venv")]
    assert line.startswith(INSTALL), line
    return line[len(INSTALL):]


def git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=clone, capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
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


# ------------------------------------------------------------------------------------------- install included


def fresh_clone(tmp_path: Path) -> Path:
    clone = tmp_path / "nbagent"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    return clone


def clean_env() -> dict[str, str]:
    """The environment a newcomer's shell has: none of nbagent's settings, no virtualenv of ours active."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBAGENT_") and k not in ("VIRTUAL_ENV",
                                                                                               "PYTHONPATH")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


@pytest.mark.install
@pytest.mark.install
@pytest.mark.skipif(shutil.which("npm") is None, reason="README's install builds the lab extension with npm")
def test_readme_first_command_as_written_with_its_install_leaves_the_checkout_clean(tmp_path: Path) -> None:
    """The whole line, install included: the build installs the lab extension's packages from the tracked
    package-lock.json (`npm ci`), so nothing tracked changes; before, its `npm install` rewrote the lock."""
    clone = fresh_clone(tmp_path)
    block = (clone / "README.md").read_text().split("## Two commands", 1)[1].split("```bash", 1)[1].split("```")[0]
    (line,) = [x for x in block.splitlines() if x.startswith("python3 -m venv")]
    done = subprocess.run(["bash", "-c", line], cwd=clone, env=clean_env(), capture_output=True, text=True,
                          timeout=1800, check=False)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith("ok: 2 run(s); executed notebook written to "), done.stdout
    assert git(clone, "status", "--porcelain") == "", git(clone, "diff", "--stat")
    assert (clone / "nbagent" / "labextension" / "static" / "style.js").is_file()  # it was built, from the lock


@pytest.mark.install
@pytest.mark.install
@pytest.mark.skipif(shutil.which("npm") is None, reason="building the sdist builds the lab extension with npm")
def test_a_wheel_built_from_the_sdist_needs_no_npm(tmp_path: Path) -> None:
    """The sdist ships the built extension; a wheel built from it (pip install nbagent-X.tar.gz) uses that and
    needs neither node nor npm (hatch-jupyter-builder's skip-if-exists: PKG-INFO and the built files)."""
    clone = fresh_clone(tmp_path)
    tools = tmp_path / "tools"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True, timeout=300)
    python = str(tools / "bin" / "python")

    def run(*cmd: str, env: dict[str, str] | None = None) -> None:
        done = subprocess.run(list(cmd), cwd=tmp_path, env=env or clean_env(), capture_output=True, text=True,
                              timeout=1200, check=False)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    run(python, "-m", "pip", "install", "--quiet", "build")
    run(python, "-m", "build", "--sdist", "--outdir", str(tmp_path / "dist"), str(clone))
    (sdist,) = (tmp_path / "dist").glob("nbagent-*.tar.gz")
    assert git(clone, "status", "--porcelain") == ""  # the sdist's build installed from the lock, too
    no_npm = tmp_path / "bin"  # a PATH with neither node nor npm on it
    no_npm.mkdir()
    run(python, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path / "wheels"), str(sdist),
        env={**clean_env(), "PATH": str(no_npm)})
    (wheel,) = (tmp_path / "wheels").glob("nbagent-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shared = "share/jupyter/labextensions/nbagent-labextension/"
    for built in ("static/style.js", "package.json", "install.json"):
        assert any(n.endswith(shared + built) for n in names), built
