"""End to end in a real browser: JupyterLab on 127.0.0.1 driven by Playwright through Debian's chromium.

A notebook runs a `%%agent` cell with the scripted model, which proposes a `create_file`; a person clicks
**Approve** (or **Deny**, with a reason) on the plan card; the run completes and the live view is replaced by
the static record; the notebook is saved, the kernel shut down, the page reloaded, and the record is drawn by
the project's lab extension (its own DOM class, not the text/html fallback). Screenshots of each stage go to
test-artifacts/browser/ at the repository root.

Needs the extension installed (`pip install -e .` builds it), chromium at /usr/bin/chromium (or $CHROMIUM) and
the `playwright` package; never `playwright install`: no browser is downloaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")

from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
RUN_MIME = "application/vnd.nbagent.run+json"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
RECORD = ".jp-OutputArea-output.jp-nbagent-RunRecord .nbagent-live.nbv-static"  # drawn by labextension/ only
ACTIVE = ".jp-NotebookPanel:not(.lm-mod-hidden)"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM}")


# ------------------------------------------------------------------------------------------------ the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Lab:
    """A JupyterLab server on 127.0.0.1 with a token, a temporary root and throwaway config/settings/runtime."""

    def __init__(self, base: Path) -> None:
        self.root = base / "root"
        self.home = base / "home"
        self.root.mkdir()
        self.token = uuid.uuid4().hex
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = self.home / "settings"
        notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        notification.parent.mkdir(parents=True)
        notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NBAGENT_", "JUPYTER", "JPY_"))}
        env.update({
            "JUPYTER_CONFIG_DIR": str(self.home / "config"), "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTER_RUNTIME_DIR": str(self.home / "runtime"), "JUPYTERLAB_WORKSPACES_DIR": str(self.home / "ws"),
            "JUPYTER_DATA_DIR": str(self.home / "data"), "IPYTHONDIR": str(self.home / "ipython"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        })
        self.log_path = base / "lab.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             "--ServerApp.port_retries=0", "--allow-root", f"--ServerApp.root_dir={self.root}",
             f"--IdentityProvider.token={self.token}", "--LabApp.expose_app_in_browser=True",
             "--ServerApp.terminals_enabled=False"],
            cwd=self.root, env=env, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status")
                break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"jupyter lab did not start in 90 s:\n{self.log_tail()}") from None
                time.sleep(0.3)

    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=15) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(OSError, urllib.error.URLError):  # already gone is fine
                    self.api("POST", "/api/shutdown")  # stops its kernels too
                try:
                    self.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.proc.terminate()
                    try:
                        self.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        self.proc.kill()
                        self.proc.wait(timeout=10)
        finally:
            self._log.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    server = Lab(tmp_path_factory.mktemp("lab"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser, lab: Lab, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(30_000)
    pg = context.new_page()
    failed_before = request.session.testsfailed
    try:
        yield pg
    finally:
        with contextlib.suppress(Exception):  # evidence for a failure must never mask it
            if request.session.testsfailed > failed_before:  # what the page showed when the test failed
                shot(pg, f"failed-{request.node.name}")
                print(f"--- jupyter lab log (tail) ---\n{lab.log_tail()}")
        context.close()


# ------------------------------------------------------------------------------------------------ helpers


def shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def write_case(lab: Lab, name: str, reply: str) -> Path:
    """A folder with the scripted model's turns and a notebook of two cells; returns the notebook."""
    folder = lab.root / name
    folder.mkdir()
    (folder / "s.json").write_text(json.dumps({"turns": [
        {"content": "I'll write the report.", "tool_calls": [{"name": "create_file", "arguments": {
            "path": "report.md", "content": "# Sales report\n\n1. North\n2. South\n3. East\n"}}]},
        {"content": reply},
    ]}))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --script s.json\nWrite the top three regions to report.md")]
    path = folder / "analysis.ipynb"
    nbformat.write(nb, path)
    return path


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.2)


KERNEL_IDLE = """(path) => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.context && w.context.path === path && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && w.sessionContext.kernelDisplayName !== 'No Kernel';
}"""


def open_notebook(page: Page, lab: Lab, notebook: Path) -> None:
    """Open the notebook in a workspace of its own (nothing restored from another test)."""
    rel = notebook.relative_to(lab.root).as_posix()
    workspace = notebook.parent.name
    page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/{rel}?token={lab.token}", wait_until="domcontentloaded",
              timeout=60_000)
    expect(page.locator(f"{ACTIVE} .jp-Notebook .jp-Cell").first).to_be_visible(timeout=60_000)


def wait_kernel_idle(page: Page, lab: Lab, notebook: Path) -> None:
    page.wait_for_function(KERNEL_IDLE, arg=notebook.relative_to(lab.root).as_posix(), timeout=60_000)
    expect(page.locator(f'{ACTIVE} .jp-Notebook-ExecutionIndicator[data-status="idle"]')).to_have_count(1)


def command(page: Page, name: str, args: dict[str, Any] | None = None) -> None:
    """Start a JupyterLab command; not awaited (Run All resolves only when the cells finish)."""
    page.evaluate("([name, args]) => { void window.jupyterapp.commands.execute(name, args); }", [name, args or {}])


def save(page: Page, notebook: Path) -> None:
    """Ctrl+S in command mode, then wait for the record to be on disk."""
    page.locator(f"{ACTIVE} .jp-Cell .jp-InputPrompt").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")

    def saved() -> bool:
        try:
            nb = json.loads(notebook.read_text())
        except (OSError, ValueError):
            return False
        return any(RUN_MIME in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))

    wait_until(saved, 20, "the saved notebook holds the static record")
    expect(page.locator(f"{ACTIVE} .jp-mod-dirty")).to_have_count(0, timeout=10_000)


def shut_down_kernel_and_reload(page: Page, lab: Lab, notebook: Path) -> None:
    """Shut the kernel down (REST), then reload the page with no kernel: JupyterLab's request for a new session
    is held unanswered, so the notebook shows what the saved file alone gives."""
    rel = notebook.relative_to(lab.root).as_posix()
    sessions = [s for s in lab.api("GET", "/api/sessions") if s["path"] == rel]
    assert sessions, lab.api("GET", "/api/sessions")
    for s in sessions:
        lab.api("DELETE", f"/api/sessions/{s['id']}")  # shuts its kernel down
    wait_until(lambda: not lab.api("GET", "/api/kernels"), 20, "no kernel left on the server")
    held: list[Route] = []

    def no_new_kernel(route: Route) -> None:
        if route.request.method == "POST":
            held.append(route)  # never answered: no kernel starts
        else:
            route.continue_()

    page.route(re.compile(r"/api/sessions(\?.*)?$"), no_new_kernel)
    page.reload(wait_until="domcontentloaded", timeout=60_000)
    expect(page.locator(f"{ACTIVE} .jp-Notebook .jp-Cell").first).to_be_visible(timeout=60_000)


# ------------------------------------------------------------------------------------------------ the tests


def run_to_plan_card(page: Page, lab: Lab, name: str, reply: str) -> Path:
    notebook = write_case(lab, name, reply)
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    command(page, "runmenu:run-all")
    card = page.locator(f"{ACTIVE} .nbagent-live .nbv-plan.nbv-plan-waiting")
    expect(card).to_be_visible(timeout=90_000)
    expect(card).to_contain_text("create_file")
    expect(card.locator(".nbv-add").first).to_contain_text("+# Sales report")
    page.get_by_role("button", name="Approve", exact=True).scroll_into_view_if_needed()
    return notebook


def test_approve_in_the_browser_then_reload_without_kernel(page: Page, lab: Lab) -> None:
    notebook = run_to_plan_card(page, lab, "approve", "Wrote **report.md** with the three regions.")
    shot(page, "1-approve-plan-card")
    approve = page.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_enabled()
    approve.click()

    # the run goes on: its steps complete and the live view gives way to the static record
    record = page.locator(f"{ACTIVE} {RECORD}")
    expect(record).to_be_visible(timeout=60_000)
    expect(record).to_have_class(re.compile(r"\bnbv-status-completed\b"))
    expect(page.locator(f"{ACTIVE} .nbagent-live:not(.nbv-static)")).to_have_count(0)
    expect(record.locator(".nbv-step.nbv-k-tool.nbv-st-ok")).to_contain_text("create_file")
    expect(record.locator(".nbv-decisions")).to_contain_text("approved by user")
    expect(record.locator(".nbv-answer strong")).to_have_text("report.md")
    assert (notebook.parent / "report.md").read_text() == "# Sales report\n\n1. North\n2. South\n3. East\n"

    save(page, notebook)
    record.scroll_into_view_if_needed()
    shot(page, "2-approve-completed")

    shut_down_kernel_and_reload(page, lab, notebook)
    record = page.locator(f"{ACTIVE} {RECORD}")
    expect(record).to_be_visible(timeout=60_000)
    expect(record).to_have_class(re.compile(r"\bnbv-status-completed\b"))
    expect(record.locator(".nbv-run-id")).to_have_count(1)
    expect(record.locator(".nbv-log")).to_contain_text("analysis.nbagent")
    expect(record.locator(".nbv-add").first).to_contain_text("+# Sales report")
    expect(record.locator("button")).to_have_count(0)
    # the text/html fallback is not what is shown
    expect(page.locator(f"{ACTIVE} .jp-OutputArea-output .nbagent-run")).to_have_count(0)
    record.scroll_into_view_if_needed()
    shot(page, "3-approve-reloaded-static-record")
    assert not lab.api("GET", "/api/kernels"), "a kernel was started after the reload"

    # the same record in the dark theme
    command(page, "apputils:change-theme", {"theme": "JupyterLab Dark"})
    page.wait_for_function("() => document.body.dataset.jpThemeName === 'JupyterLab Dark'", timeout=30_000)
    page.wait_for_timeout(500)
    record.scroll_into_view_if_needed()
    shot(page, "4-approve-reloaded-dark-theme")
    command(page, "apputils:change-theme", {"theme": "JupyterLab Light"})
    assert not lab.api("GET", "/api/kernels")


def test_deny_with_a_reason_in_the_browser(page: Page, lab: Lab) -> None:
    notebook = run_to_plan_card(page, lab, "deny", "Understood: **nothing written**.")
    page.get_by_role("button", name="Deny", exact=True).click()
    reason = page.get_by_role("textbox", name="reason for denying")
    expect(reason).to_be_visible()
    reason.fill("not today")
    shot(page, "5-deny-reason")
    page.get_by_role("button", name="Send", exact=True).click()

    record = page.locator(f"{ACTIVE} {RECORD}")
    expect(record).to_be_visible(timeout=60_000)
    expect(record.locator(".nbv-decisions")).to_contain_text("denied by user")
    expect(record.locator(".nbv-decisions")).to_contain_text("reason: not today")
    assert not (notebook.parent / "report.md").exists()

    save(page, notebook)
    shut_down_kernel_and_reload(page, lab, notebook)
    record = page.locator(f"{ACTIVE} {RECORD}")
    expect(record).to_be_visible(timeout=60_000)
    expect(record.locator(".nbv-plan-head")).to_contain_text("denied")
    expect(record.locator(".nbv-answer strong")).to_have_text("nothing written")
    record.scroll_into_view_if_needed()
    shot(page, "6-deny-reloaded-static-record")
    assert not (notebook.parent / "report.md").exists() and not lab.api("GET", "/api/kernels")


def test_inserted_code_cell_appears_below_the_agent_cell(page: Page, lab: Lab) -> None:
    """insert_code_cell through the lab extension's comm target: the cell shows up in JupyterLab, not executed."""
    folder = lab.root / "insert"
    folder.mkdir()
    code = "import matplotlib\nsummary = {'North': 120, 'East': 95}"
    (folder / "s.json").write_text(json.dumps({"turns": [
        {"content": "Here is the code.", "tool_calls": [{"name": "insert_code_cell", "arguments": {
            "code": code, "explanation": "the numbers as a dict"}}]},
        {"content": "I put the code in a new cell below."},
    ]}))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"),
                nbformat.v4.new_code_cell("%%agent --script s.json --autonomy L2\nGive me the numbers as code"),
                nbformat.v4.new_markdown_cell("The end.")]
    notebook = folder / "analysis.ipynb"
    nbformat.write(nb, notebook)
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    command(page, "runmenu:run-all")
    cells = page.locator(f"{ACTIVE} .jp-Notebook .jp-Cell")
    expect(cells).to_have_count(4, timeout=90_000)
    inserted = cells.nth(2)
    expect(inserted).to_contain_text("# nbagent: proposed by run")
    expect(inserted).to_contain_text("summary = {'North': 120, 'East': 95}")
    expect(cells.nth(3)).to_contain_text("The end.")
    expect(cells.nth(1).locator(RECORD)).to_contain_text("I put the code in a new cell below.", timeout=60_000)
    expect(inserted.locator(".jp-InputPrompt")).not_to_contain_text("[1]")  # not executed
    shot(page, "7-inserted-code-cell")
