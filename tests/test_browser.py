"""End to end in a real browser: JupyterLab on 127.0.0.1 driven by Playwright through Debian's chromium.

Notebooks run `%%agent` cells with the scripted model; a person clicks the plan card's buttons by their visible
text (the Approve button names the action: "Create report.md", "Delete old.txt"), types in the text boxes found
by their labels, and the run goes on. Several decisions in one run are the point: a decision used to be a widget
state sync, and JupyterLab's widget model held every sync after the first until the kernel reported idle, which
it does not while the cell awaits (nbagent/ui/widget.py). Each flow ends with the files on disk checked and the
completed record in the saved notebook. The first flow also reloads the page with no kernel: the record is drawn
by the project's lab extension (its own DOM class, not the text/html fallback). Screenshots of each stage go to
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

from nbagent.store import Store

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")

from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
RUN_MIME = "application/vnd.nbagent.run+json"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
RECORD = ".jp-OutputArea-output.jp-nbagent-RunRecord .nbagent-run"  # the kernel's HTML, shown by labextension/
ACTIVE = ".jp-NotebookPanel:not(.lm-mod-hidden)"

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM}")]


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


def shot_dark(page: Page, element: Any, name: str) -> None:
    """A screenshot of `element` in JupyterLab Dark, then back to the light theme."""
    command(page, "apputils:change-theme", {"theme": "JupyterLab Dark"})
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
    page.wait_for_timeout(500)
    element.scroll_into_view_if_needed()
    shot(page, name)
    command(page, "apputils:change-theme", {"theme": "JupyterLab Light"})
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'true'", timeout=30_000)


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
    # this notebook's kernels only: other tests' notebooks may still have theirs on the same server
    gone = {s["kernel"]["id"] for s in sessions if s.get("kernel")}
    wait_until(lambda: not gone & {k["id"] for k in lab.api("GET", "/api/kernels")}, 60,
               "the notebook's kernel shut down")
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


LIVE = f"{ACTIVE} .nbagent-live:not(.nbv-static)"
WAITING = f"{LIVE} .nbv-plan.nbv-plan-waiting"
REPORT = "# Sales report\n\n1. North\n2. South\n3. East\n"
DENIED = "completed_with_errors"  # a run that ended with a plan denied: its answer may claim what did not happen


def create(path: str, content: str = "hello\n", text: str = "I'll write the file.") -> dict[str, Any]:
    return {"content": text, "tool_calls": [{"name": "create_file", "arguments": {"path": path, "content": content}}]}


def delete(path: str, text: str = "That file is not needed any more.") -> dict[str, Any]:
    return {"content": text, "tool_calls": [{"name": "delete_file", "arguments": {"path": path}}]}


def ask(question: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "ask_human", "arguments": {"question": question}}]}


def write_flow(lab: Lab, name: str, turns: list[dict[str, Any]], files: dict[str, str] | None = None,
               prompt: str = "Tidy up the folder") -> Path:
    """A folder with the scripted model's turns, some files, and a notebook of two cells; returns the notebook."""
    folder = lab.root / name
    folder.mkdir()
    for rel, text in (files or {}).items():
        (folder / rel).write_text(text)
    (folder / "turns.json").write_text(json.dumps({"turns": turns}))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    magic = "%%agent --model nbagent/scripted --script turns.json --autonomy L1"
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbagent"), nbformat.v4.new_code_cell(f"{magic}\n{prompt}")]
    path = folder / "analysis.ipynb"
    nbformat.write(nb, path)
    return path


def start_flow(page: Page, lab: Lab, notebook: Path) -> None:
    open_notebook(page, lab, notebook)
    wait_kernel_idle(page, lab, notebook)
    command(page, "runmenu:run-all")


def waiting_card(page: Page, n: int, title: str) -> Any:
    """The live card of plan `n` once it waits for a decision, its title phrased by nbagent."""
    card = page.locator(WAITING)
    expect(card.locator(".nbv-plan-title")).to_have_text(f"Plan {n}: {title}", timeout=90_000)
    card.scroll_into_view_if_needed()
    return card


def button(page: Page, name: str) -> Any:
    b = page.locator(LIVE).get_by_role("button", name=name, exact=True)
    expect(b).to_be_enabled()
    return b


def finished_record(page: Page, status: str = "completed") -> Any:
    record = page.locator(f"{ACTIVE} {RECORD}")
    expect(record).to_be_visible(timeout=60_000)
    expect(record).to_have_class(re.compile(rf"\bnbr-status-{status}\b"))
    expect(page.locator(LIVE)).to_have_count(0)
    return open_record(record)


def open_record(record: Any) -> Any:
    """A finished run's record is folded to two lines (nbagent/ui/record_summary.py): open it as a person does, by a
    click on its summary, so what it holds can be seen and measured."""
    fold = record.locator("details.nbr-compact").first
    if fold.count() and fold.get_attribute("open") is None:
        fold.locator("summary.nbr-summary-line").first.click()
        expect(fold).to_have_attribute("open", "")
    return record


def saved_record(page: Page, notebook: Path, status: str = "completed") -> dict[str, Any]:
    """Save, then the record as the saved notebook holds it (with this status, nothing pending)."""
    save(page, notebook)
    nb = json.loads(notebook.read_text())
    records = [o["data"][RUN_MIME] for c in nb["cells"] for o in c.get("outputs", []) if RUN_MIME in o.get("data", {})]
    assert len(records) == 1, records
    assert records[0]["status"] == status and records[0]["pending"] is None
    widget_outputs = [o for c in nb["cells"] for o in c.get("outputs", [])
                      if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert not widget_outputs  # the live view was replaced, not left beside the record
    return records[0]


def logged_decisions(notebook: Path, run_id: str) -> list[tuple[str, str | None, str]]:
    """(kind, request id, text) of every decision in the run's log, in order."""
    state = Store(notebook.with_suffix(".nbagent"), readonly=True).run_state(run_id)
    return [(d.kind, d.request_id, d.text) for d in state.decisions]


class SentDecisions:
    """The decision messages that left the page on its kernel websockets (the bug was: none for a second click)."""

    def __init__(self, page: Page) -> None:
        self.frames: list[str] = []
        page.on("websocket", lambda ws: ws.on("framesent", self._sent))

    def _sent(self, payload: str | bytes) -> None:
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        if '"event":"decision"' in text:
            self.frames.append(text)

    def count(self, needle: str = "") -> int:
        return sum(needle in f for f in self.frames)


def request_id(card: Any) -> str:
    return str(card.locator(".nbv-decide").get_attribute("data-request-id"))


# ------------------------------------------------------------------------------------------------ the tests


def test_approve_in_the_browser_then_reload_without_kernel(page: Page, lab: Lab) -> None:
    notebook = write_flow(lab, "approve", [create("report.md", REPORT, "I'll write the report."),
                                           {"content": "Wrote **report.md** with the three regions."}],
                          prompt="Write the top three regions to report.md")
    start_flow(page, lab, notebook)
    card = waiting_card(page, 1, "Create report.md")
    expect(card).to_contain_text("create_file")
    expect(card.locator(".nbv-add").first).to_contain_text("+# Sales report")
    expect(card.locator(".nbv-decide-q")).to_have_text("Create report.md?")
    expect(card.locator(".nbv-purpose q")).to_have_text("I'll write the report.")  # the model's words, quoted
    expect(card.locator(".nbv-danger")).to_have_count(0)  # a create is not high risk
    shot(page, "1-approve-plan-card")
    button(page, "Create report.md").click()

    # the run goes on: its steps complete and the live view gives way to the static record
    record = finished_record(page)
    expect(record.locator(".nbr-step.nbr-k-tool.nbr-st-ok")).to_contain_text("create_file")
    expect(record.locator(".nbr-decisions")).to_contain_text("approved by you")
    expect(record.locator(".nbr-answer strong")).to_have_text("report.md")
    assert (notebook.parent / "report.md").read_text() == REPORT

    saved_record(page, notebook)
    record.scroll_into_view_if_needed()
    shot(page, "2-approve-completed")

    shut_down_kernel_and_reload(page, lab, notebook)
    record = page.locator(f"{ACTIVE} {RECORD}")
    expect(record).to_be_visible(timeout=60_000)
    expect(record).to_have_class(re.compile(r"\bnbr-status-completed\b"))
    expect(record.locator(".nbr-run-id")).to_have_count(1)
    expect(record.locator(".nbr-log")).to_contain_text("analysis.nbagent")
    expect(record.locator(".nbr-add").first).to_contain_text("+# Sales report")
    # what there is to click is a question: Undo… (a click would load nbagent in a kernel and run `%agent undo RUN`
    # below, which checks the log first: test_browser_undo_offer.py) and Reproduce (test_browser_reproduce.py);
    # showing them starts no kernel
    expect(record.locator("button")).to_have_count(2)
    expect(record.get_by_role("button", name="Undo…", exact=True)).to_be_visible()
    expect(record.get_by_role("button", name="Reproduce", exact=True)).to_be_visible()
    expect(record.locator(".nbr-undo")).to_contain_text("%agent undo ")
    # the record is the kernel's HTML, shown once, by the extension (not a second time by JupyterLab's HTML renderer)
    expect(page.locator(f"{ACTIVE} .jp-OutputArea-output .nbagent-run")).to_have_count(1)
    expect(page.locator(f"{ACTIVE} .jp-RenderedHTMLCommon .nbagent-run")).to_have_count(0)
    record.scroll_into_view_if_needed()
    shot(page, "3-approve-reloaded-static-record")
    assert not lab.api("GET", "/api/kernels"), "a kernel was started after the reload"

    # the same record in the dark theme
    shot_dark(page, record, "4-approve-reloaded-dark-theme")
    assert not lab.api("GET", "/api/kernels")


def test_deny_with_a_reason_in_the_browser(page: Page, lab: Lab) -> None:
    notebook = write_flow(lab, "deny", [create("report.md", REPORT), {"content": "Understood: **nothing written**."}])
    start_flow(page, lab, notebook)
    waiting_card(page, 1, "Create report.md")
    button(page, "Deny").click()
    reason = page.get_by_role("textbox", name="reason for denying")
    expect(reason).to_be_visible()
    reason.fill("not today")
    shot(page, "5-deny-reason")
    button(page, "Deny: create report.md").click()

    record = finished_record(page, DENIED)
    expect(record.locator(".nbr-decisions")).to_contain_text("denied by you")
    expect(record.locator(".nbr-decisions")).to_contain_text("reason: not today")
    assert not (notebook.parent / "report.md").exists()

    saved_record(page, notebook, DENIED)
    shut_down_kernel_and_reload(page, lab, notebook)
    record = page.locator(f"{ACTIVE} {RECORD}")
    expect(record).to_be_visible(timeout=60_000)
    expect(record.locator(".nbr-plan-head")).to_contain_text("denied")
    expect(record.locator(".nbr-answer strong")).to_have_text("nothing written")
    record.scroll_into_view_if_needed()
    shot(page, "6-deny-reloaded-static-record")
    assert not (notebook.parent / "report.md").exists() and not lab.api("GET", "/api/kernels")


def test_approve_then_approve_a_high_risk_delete(page: Page, lab: Lab) -> None:
    """(a) Two plans in one run, both approved by clicks; the second, a delete, looks and reads differently."""
    notebook = write_flow(lab, "approve-approve", [create("notes.md", "# Notes\n"), delete("old.txt"),
                                                   {"content": "Created notes.md and deleted old.txt."}],
                          files={"old.txt": "stale\n"})
    sent = SentDecisions(page)
    start_flow(page, lab, notebook)
    first = waiting_card(page, 1, "Create notes.md")
    expect(first).not_to_have_class(re.compile(r"\bnbv-plan-high\b"))
    shot(page, "a1-plan-1-create")
    button(page, "Create notes.md").click()

    second = waiting_card(page, 2, "Delete old.txt")
    assert (notebook.parent / "notes.md").read_text() == "# Notes\n"  # plan 1 ran before plan 2 was asked
    expect(second).to_have_class(re.compile(r"\bnbv-plan-high\b"))
    expect(second.locator(".nbv-danger")).to_contain_text("High risk")
    expect(second.locator(".nbv-danger")).to_contain_text("deletes old.txt")
    expect(second.locator(".nbv-decide-q")).to_have_text("Delete old.txt?")
    expect(second.locator(".nbv-purpose q")).to_have_text("That file is not needed any more.")
    delete_button = button(page, "Delete old.txt")  # the button names the action, not "Approve"
    expect(delete_button).to_have_class(re.compile(r"\bnbv-approve-danger\b"))
    assert page.locator(LIVE).get_by_role("button", name="Approve", exact=True).count() == 0
    shot(page, "a2-plan-2-delete-high-risk")
    shot_dark(page, second, "a2-plan-2-delete-high-risk-dark")
    delete_button.click()

    record = finished_record(page)
    assert (notebook.parent / "notes.md").exists() and not (notebook.parent / "old.txt").exists()
    record.scroll_into_view_if_needed()
    shot(page, "a3-completed")
    saved = saved_record(page, notebook)
    assert [d["kind"] for d in saved["decisions"]] == ["approved", "approved"]
    assert [p["status"] for p in saved["plans"]] == ["approved", "approved"]
    assert sent.count() == 2  # both clicks left the page as messages


def test_refine_then_approve(page: Page, lab: Lab) -> None:
    """(b) Refine with feedback, then approve the plan the model sends back."""
    notebook = write_flow(lab, "refine-approve", [create("report.md", REPORT),
                                                  create("summary.md", REPORT, "Renamed as you asked."),
                                                  {"content": "Wrote summary.md."}])
    start_flow(page, lab, notebook)
    waiting_card(page, 1, "Create report.md")
    button(page, "Refine").click()
    feedback = page.get_by_role("textbox", name="feedback for the model")
    expect(feedback).to_have_attribute("placeholder", re.compile("What should the model do differently"))
    feedback.fill("call it summary.md")
    shot(page, "b1-refine-feedback")
    button(page, "Send feedback").click()

    second = waiting_card(page, 2, "Create summary.md")
    expect(second.locator(".nbv-purpose q")).to_have_text("Renamed as you asked.")
    shot(page, "b2-plan-2-after-refine")
    button(page, "Create summary.md").click()

    finished_record(page)
    assert (notebook.parent / "summary.md").read_text() == REPORT and not (notebook.parent / "report.md").exists()
    saved = saved_record(page, notebook)
    assert [(d["kind"], d["text"]) for d in saved["decisions"]] == [("refined", "call it summary.md"),
                                                                    ("approved", "")]


def test_approve_answer_a_question_then_approve(page: Page, lab: Lab) -> None:
    """(c) Approve, answer the agent's question in its text box, approve again: three decisions in one run."""
    notebook = write_flow(lab, "approve-ask-approve", [create("a.md", "first\n"), ask("Which year should I use?"),
                                                       create("b.md", "2024\n", "Using 2024."),
                                                       {"content": "Both files written."}])
    start_flow(page, lab, notebook)
    waiting_card(page, 1, "Create a.md")
    button(page, "Create a.md").click()

    answer_box = page.locator(LIVE).get_by_placeholder("Your answer (Enter sends)")
    expect(answer_box).to_be_visible(timeout=60_000)
    expect(page.locator(f"{LIVE} .nbv-decide-q")).to_contain_text("Which year should I use?")
    assert (notebook.parent / "a.md").read_text() == "first\n"
    answer_box.fill("2024")
    shot(page, "c1-question")
    button(page, "Answer").click()

    waiting_card(page, 2, "Create b.md")
    shot(page, "c2-plan-2")
    button(page, "Create b.md").click()

    record = finished_record(page)
    expect(record.locator(".nbr-k-question")).to_contain_text("answer: 2024")
    assert (notebook.parent / "b.md").read_text() == "2024\n"
    saved = saved_record(page, notebook)
    assert [(d["kind"], d["text"]) for d in saved["decisions"]] == [("approved", ""), ("answered", "2024"),
                                                                    ("approved", "")]


def test_approved_denied_with_a_reason_approved(page: Page, lab: Lab) -> None:
    """(d) Three plans in one run: the middle one, a high-risk delete, denied with a reason."""
    notebook = write_flow(lab, "approve-deny-approve", [create("a.md"), delete("keep.txt"), create("c.md"),
                                                        {"content": "Kept keep.txt as you asked."}],
                          files={"keep.txt": "precious\n"})
    start_flow(page, lab, notebook)
    waiting_card(page, 1, "Create a.md")
    button(page, "Create a.md").click()

    waiting_card(page, 2, "Delete keep.txt")
    button(page, "Deny").click()
    page.get_by_role("textbox", name="reason for denying").fill("keep.txt is the raw data")
    shot(page, "d1-deny-the-delete")
    button(page, "Deny: delete keep.txt").click()

    waiting_card(page, 3, "Create c.md")
    button(page, "Create c.md").click()

    record = finished_record(page, DENIED)
    expect(record.locator(".nbr-decisions").nth(1)).to_contain_text("reason: keep.txt is the raw data")
    record.scroll_into_view_if_needed()
    shot(page, "d2-completed")
    folder = notebook.parent
    assert (folder / "keep.txt").read_text() == "precious\n"
    assert (folder / "a.md").exists() and (folder / "c.md").exists()
    saved = saved_record(page, notebook, DENIED)
    assert [(d["kind"], d["text"]) for d in saved["decisions"]] == [
        ("approved", ""), ("rejected", "keep.txt is the raw data"), ("approved", "")]
    assert [p["status"] for p in saved["plans"]] == ["approved", "rejected", "approved"]


SEND_ON_COMM = """([cell, content]) => {
  // what a stale page would send: the run view's own comm, the message its buttons send (run_view.js)
  const panel = window.jupyterapp.shell.currentWidget;
  const output = panel.content.model.cells.get(cell).outputs.get(0);
  const modelId = output.data['application/vnd.jupyter.widget-view+json'].model_id;
  const comm = panel.sessionContext.session.kernel._comms.get(modelId);
  comm.send({method: 'custom', content});
  return modelId;
}"""


def test_double_click_and_a_click_on_an_older_card_change_nothing(page: Page, lab: Lab) -> None:
    """(e) A double click on the Approve button and clicks on an already decided card: one decision per request."""
    notebook = write_flow(lab, "double-click", [create("a.md", "one\n"), create("b.md", "two\n"),
                                                {"content": "Done."}])
    sent = SentDecisions(page)
    start_flow(page, lab, notebook)
    first = waiting_card(page, 1, "Create a.md")
    first_request = request_id(first)
    button(page, "Create a.md").dblclick()
    expect(first.locator(".nbv-sent")).to_have_text(re.compile("approve sent|decision received"))

    second = waiting_card(page, 2, "Create b.md")
    second_request = request_id(second)
    assert second_request != first_request
    old = page.locator(f"{LIVE} .nbv-plan").first
    expect(old).to_contain_text("approved by you")
    expect(old.get_by_role("button")).to_have_count(0)  # a decided card has nothing left to click
    old.locator(".nbv-plan-title").click()
    old.locator(".nbv-decisions").dblclick()
    # a page that missed the update sends a decision for the old request again, and a contrary one
    for action in ("approve", "deny"):
        page.evaluate(SEND_ON_COMM, [1, {"event": "decision", "request_id": first_request, "action": action,
                                         "text": "stale", "nonce": f"stale-{action}"}])
    shot(page, "e1-after-double-click-and-stale-clicks")
    expect(second).to_be_visible()
    expect(button(page, "Create b.md")).to_be_enabled()
    button(page, "Create b.md").dblclick()
    # and a late contrary click for the request just decided
    page.evaluate(SEND_ON_COMM, [1, {"event": "decision", "request_id": second_request, "action": "deny",
                                     "text": "late", "nonce": "late"}])

    record = finished_record(page)
    record.scroll_into_view_if_needed()
    shot(page, "e2-completed")
    assert (notebook.parent / "a.md").read_text() == "one\n" and (notebook.parent / "b.md").read_text() == "two\n"
    saved = saved_record(page, notebook)
    assert [(d["kind"], d["request_id"]) for d in saved["decisions"]] == [("approved", first_request),
                                                                           ("approved", second_request)]
    assert logged_decisions(notebook, saved["run_id"]) == [("approved", first_request, ""),
                                                           ("approved", second_request, "")]
    # what left the page: one message per double click (the page sends one decision per request), the three
    # stale ones the kernel dropped
    assert sent.count(first_request) == 3 and sent.count("stale-") == 2 and sent.count('"nonce":"late"') == 1
    assert sent.count(second_request) == 2 and sent.count() == 5
    steps = [s for s in saved["steps"] if s["kind"] == "tool"]
    assert [(s["tool"], s["status"]) for s in steps] == [("create_file", "ok"), ("create_file", "ok")]


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
    # a cell is code that runs later: WRITE_HIGH_RISK, so a person approves exactly this code, even at L2
    card = waiting_card(page, 1, "Insert a cell")
    expect(card).to_have_class(re.compile(r"\bnbv-plan-high\b"))
    button(page, "Insert a cell").click()
    cells = page.locator(f"{ACTIVE} .jp-Notebook .jp-Cell")
    expect(cells).to_have_count(4, timeout=90_000)
    inserted = cells.nth(2)
    expect(inserted).to_contain_text("# nbagent: proposed by run")
    expect(inserted).to_contain_text("summary = {'North': 120, 'East': 95}")
    expect(cells.nth(3)).to_contain_text("The end.")
    expect(cells.nth(1).locator(RECORD)).to_contain_text("I put the code in a new cell below.", timeout=60_000)
    expect(inserted.locator(".jp-InputPrompt")).not_to_contain_text("[1]")  # not executed
    shot(page, "7-inserted-code-cell")
