"""`nbagent runs` and `nbagent verify` from a repository's root find the logs below it, skip what is not the user's
(.git, node_modules, virtual environments, hidden folders), stay bounded, and say what they found."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import llm, new_run

from nbagent.cli.commands import main, stores_below
from nbagent.events import model as E
from nbagent.store import Store


def make_store(notebook: Path, prompt: str = "hi") -> str:
    notebook.parent.mkdir(parents=True, exist_ok=True)
    notebook.write_text("{}")
    store = Store(notebook)
    run = new_run(store, prompt, cell_id="cell-1")
    store.append(llm("done"), run_id=run)
    store.append(E.Completed(), run_id=run)
    store.close()
    return run


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A checkout: notebooks two levels down, and logs in places that must not be searched."""
    runs = {
        "examples/quickstart.nbagent": make_store(tmp_path / "examples" / "quickstart.ipynb"),
        "docs/deep/er/analysis.nbagent": make_store(tmp_path / "docs" / "deep" / "er" / "analysis.ipynb"),
    }
    for hidden in (".git/x", ".venv/lib", "node_modules/pkg", "labextension/node_modules/p", ".ipynb_checkpoints",
                   "venv/share", "pkg/__pycache__"):
        make_store(tmp_path / hidden / "skipme.ipynb")
    (tmp_path / "README.md").write_text("a checkout")
    monkeypatch.chdir(tmp_path)
    return runs


def test_runs_from_the_root_lists_the_logs_below(repo: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs"]) == 0
    out = capsys.readouterr()
    headers = [line for line in out.out.splitlines() if line.startswith("== ")]
    assert [Path(h[3:]).as_posix().split("/")[-2:] for h in headers] == [["er", "analysis.nbagent"],
                                                                        ["examples", "quickstart.nbagent"]]
    for run in repo.values():
        assert run[:12] in out.out
    assert "skipme" not in out.out and "no agent logs" not in out.err


def test_verify_from_the_root_checks_every_log_below(repo: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(line.startswith("ok: ") for line in out)
    assert any("analysis.nbagent" in line for line in out) and any("quickstart.nbagent" in line for line in out)
    assert main(["verify", "docs"]) == 0  # a subfolder: only what is below it
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "analysis.nbagent" in out[0]


def test_a_tampered_log_below_fails_verify(repo: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    events = Path("docs/deep/er/analysis.nbagent/events.jsonl")
    events.write_text(events.read_text().replace('"done"', '"d0ne"', 1))  # the model's answer, edited
    assert main(["verify"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: " in out and "analysis.nbagent" in out and "ok: " in out  # the other log is still checked


def test_a_notebook_or_store_named_is_that_one_only(repo: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "examples/quickstart.ipynb"]) == 0
    out = capsys.readouterr().out
    assert repo["examples/quickstart.nbagent"][:12] in out and repo["docs/deep/er/analysis.nbagent"][:12] not in out
    assert "== " not in out  # the log the user named needs no header
    assert main(["verify", "examples/quickstart.nbagent"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_nothing_below_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    make_store(tmp_path / ".git" / "hidden.ipynb")
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    for command in ("runs", "verify"):
        assert main([command]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no agent logs here or below" in err and "node_modules" in err


def test_the_search_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path
    for i in range(12):
        deep = deep / f"d{i}"
    make_store(deep / "far.ipynb")
    make_store(tmp_path / "near.ipynb")
    found, cut = stores_below(tmp_path)
    assert [p.name for p in found] == ["near.nbagent"] and cut  # 12 levels down is past the bound
    found, cut = stores_below(tmp_path, max_depth=20)
    assert sorted(p.name for p in found) == ["far.nbagent", "near.nbagent"] and not cut
    for i in range(30):
        (tmp_path / f"wide{i:02}").mkdir()
    found, cut = stores_below(tmp_path, max_dirs=10, max_depth=20)
    assert cut and len(found) <= 2
    assert main(["verify", str(tmp_path)]) == 0
    assert "stopped searching" in capsys.readouterr().err
