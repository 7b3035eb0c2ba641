"""Issue 46 in a real browser: a saved agent notebook reproduced in JupyterLab without asking again.

The notebook's run was recorded by `nbagent run --approve all` through litellm against the OpenAI-compatible stub on
127.0.0.1 (a run_cell, then an answer); JupyterLab's kernel gets that same stub as its model server, so a model call
from the page would be counted. Reopened in a new kernel: the record's **Reproduce** button runs the cell as recorded
(nbagent loaded first, the recorded approval, no card, no request to the stub), the agent's cell runs again in place
of the old one, and the record says it reproduced run R. Then the toolbar's **Reproduce all** runs every cell the
same way, and each `%%agent` cell's first line says it reproduces. JupyterLab, the browser and the helpers are
tests/test_browser.py's; screenshots go to test-artifacts/browser/ (reproduce-*.png).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from stub_openai import Reply, StubOpenAI, tool_call
from test_browser import (  # noqa: F401  (browser, page are fixtures)
    ACTIVE,
    RECORD,
    RUN_MIME,
    Lab,
    browser,
    expect,
    open_notebook,
    page,
    save,
    shot,
    wait_kernel_idle,
    wait_until,
)

pytest.importorskip("playwright.sync_api")

from playwright.sync_api import Page

pytestmark = pytest.mark.browser

CODE = "x = 40 + 2\nprint('x is', x)"
LIVE = f"{ACTIVE} .nbagent-live:not(.nbv-static)"


@pytest.fixture(scope="module")
def stub() -> Iterator[StubOpenAI]:
    with StubOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, stub: StubOpenAI) -> Iterator[Lab]:
    """tests/test_browser.py's server, its kernels given the stub as their OpenAI server (a model call is counted)."""
    saved = {k: os.environ.get(k) for k in ("OPENAI_API_BASE", "OPENAI_API_KEY")}
    os.environ.update({"OPENAI_API_BASE": stub.base_url, "OPENAI_API_KEY": "sk-test-reproduce"})
    try:
        server = Lab(tmp_path_factory.mktemp("lab"))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        yield server
    finally:
        server.close()


def recorded_notebook(lab: Lab, stub: StubOpenAI) -> Path:
    """A notebook whose `%%agent` cell ran a cell and answered, recorded by `nbagent run` through the stub."""
    folder = lab.root / "reproduce"
    folder.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --model openai/gpt-4o-mini\nCompute x and tell me what it is")]
    path = folder / "analysis.ipynb"
    nbformat.write(nb, path)
    stub.push(Reply(tool_calls=[tool_call("run_cell", {"code": CODE, "explanation": "the answer"})]),
              Reply(content="x is 42."))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NBAGENT_")},
           "OPENAI_API_BASE": stub.base_url, "OPENAI_API_KEY": "sk-test-reproduce"}
    done = subprocess.run([str(Path(sys.executable).with_name("nbagent")), "run", path.name, "--approve", "all"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return path


def records(path: Path) -> list[dict[str, Any]]:
    nb = json.loads(path.read_text())
    return [o["data"][RUN_MIME] for c in nb["cells"] for o in c.get("outputs", []) if RUN_MIME in o.get("data", {})]


def agent_cells(page: Page) -> Any:  # noqa: F811
    """The cells the agent wrote and ran (their source's first line names the run)."""
    return page.locator(f"{ACTIVE} .jp-Notebook .jp-CodeCell").filter(
        has=page.locator(".jp-InputArea-editor", has_text="# nbagent: run by run"))


def test_a_reopened_notebook_is_reproduced_from_its_record_and_the_toolbar(page: Page, lab: Lab,  # noqa: F811
                                                                            stub: StubOpenAI) -> None:
    path = recorded_notebook(lab, stub)
    (recorded,) = records(path)
    asked = len(stub.completion_requests)
    assert asked == 2 and recorded["status"] == "completed"

    open_notebook(page, lab, path)
    wait_kernel_idle(page, lab, path)
    record = page.locator(f"{ACTIVE} {RECORD}")
    expect(record).to_be_visible(timeout=60_000)
    expect(agent_cells(page)).to_have_count(1)
    reproduce = record.get_by_role("button", name="Reproduce", exact=True)
    expect(reproduce).to_be_enabled()
    reproduce.scroll_into_view_if_needed()
    shot(page, "reproduce-1-reopened")
    reproduce.click()

    # the cell runs again from the log: no card waits, the new record says what it reproduced
    said = f"Reproduced run {recorded['run_id'][:12]} from the log: no model call"
    done = page.locator(f"{ACTIVE} {RECORD}").filter(has_text=said)
    expect(done).to_be_visible(timeout=90_000)
    expect(page.locator(LIVE)).to_have_count(0)
    expect(page.locator(f"{ACTIVE} .nbv-plan-waiting")).to_have_count(0)
    expect(page.locator(f"{ACTIVE} .jp-OutputArea-output").filter(
        has_text=f"reproducing run {recorded['run_id'][:12]} from the log")).to_have_count(1)
    expect(agent_cells(page)).to_have_count(1)  # the agent's cell ran again, in place of the old one
    expect(agent_cells(page).first).to_contain_text("x is 42")
    done.scroll_into_view_if_needed()
    shot(page, "reproduce-2-from-the-record")
    assert len(stub.completion_requests) == asked  # not one model request
    (once,) = records_on_page(page)

    # the toolbar: every cell again, each %%agent cell reproducing its last recorded run
    page.locator(f"{ACTIVE} .jp-nbagent-ReproduceAll").click()
    first_line = page.locator(f"{ACTIVE} .jp-OutputArea-output").filter(has_text="reproducing run")
    expect(first_line).to_have_count(1, timeout=60_000)
    wait_until(lambda: records_on_page(page) not in ([], [once]), 90, "the %%agent cell's new record")
    expect(page.locator(f"{ACTIVE} .nbv-plan-waiting")).to_have_count(0)
    expect(agent_cells(page)).to_have_count(1)
    expect(page.locator(f"{ACTIVE} {RECORD}").filter(has_text=said)).to_have_count(1, timeout=60_000)
    page.locator(f"{ACTIVE} {RECORD}").scroll_into_view_if_needed()
    shot(page, "reproduce-3-reproduce-all")
    assert len(stub.completion_requests) == asked

    save(page, path)
    wait_until(lambda: records(path) and records(path)[-1]["run_id"] != recorded["run_id"], 20, "the saved record")
    (last,) = records(path)
    assert last["reproduces"] == recorded["run_id"] and last["status"] == "completed" and last["answer"] == "x is 42."
    saved = nbformat.read(path, as_version=4)
    ran = [c for c in saved.cells if (c.metadata.get("nbagent") or {}).get("ran")]
    assert len(ran) == 1 and ran[0].metadata["nbagent"]["run_id"] == last["run_id"], [c.source for c in ran]


def records_on_page(page: Page) -> list[str]:  # noqa: F811
    return [str(r) for r in page.locator(f"{ACTIVE} {RECORD}").evaluate_all(
        "(els) => els.map((e) => e.getAttribute('data-run-id'))")]

