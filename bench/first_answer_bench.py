"""The first answer in a notebook: nbagent's `%%agent` against jupyter-ai's `%%ai`, in real kernels, on one server.

Run from the repository root, with nbagent's venv:

    python bench/first_answer_bench.py --setup              # create bench/.jai-venv (pinned below); ~1 min
    python bench/first_answer_bench.py                      # 9 kernels per product per scenario; ~13 min
    python bench/first_answer_bench.py --quick              # 3 kernels each; ~5 min
    python bench/first_answer_bench.py --baseline 04a31dc   # also nbagent at that revision, interleaved; ~20 min
    python bench/first_answer_bench.py --scenarios at-once,memory --kernels 5
    python bench/first_answer_bench.py --print-setup        # only print the commands --setup runs

jupyter-ai lives in its own virtual environment, `bench/.jai-venv` (git-ignored), made from the base interpreter of
nbagent's venv; `--setup` runs (the last three pinned to the versions in nbagent's venv, so both kernels import the
same numpy and matplotlib):

    python3 -m venv bench/.jai-venv
    bench/.jai-venv/bin/pip install -q jupyter-ai-magics==2.31.7 langchain-openai==0.3.35 \\
        ipykernel==7.4.0 numpy==2.4.6 matplotlib==3.11.2

which also brought: langchain 0.3.30, langchain-core 0.3.86, langchain-community
0.3.31, openai 2.54.0, pydantic 2.14.4, ipython 9.18.1 (Python 3.11.7). langchain-openai 0.3.x is the line that
works with jupyter-ai-magics 2.31.7 (it needs langchain < 0.4); the `openai-chat` provider imports it.

**Server.** `tests/stub_openai.py`, an OpenAI-compatible server on 127.0.0.1 that answers every request "hello"
(streamed when asked). Both kernels get `OPENAI_API_KEY=sk-bench` and `OPENAI_BASE_URL` = `OPENAI_API_BASE` = its
`.../v1`: litellm (nbagent, `NBAGENT_MODEL=openai/gpt-4o-mini`) and langchain-openai (jupyter-ai) both post to
`/v1/chat/completions` there.

**Products.** Each measurement is a fresh kernel driven by the test suite's driver (`tests/kernel_harness.py`, as
JupyterLab drives one): `nbagent` runs this venv's interpreter (kernel spec `python3`), the load cell
`%load_ext nbagent` and the AI cell `%%agent --new\\nsay hello` (autonomy L1, the default: a text answer needs no
approval); `jupyter-ai` runs `bench/.jai-venv/bin/python` (a kernel spec of its own in a temporary folder), the load
cell `%load_ext jupyter_ai_magics` and the AI cell `%%ai openai-chat:gpt-4o-mini\\nsay hello` (its default format,
markdown). `--baseline REV` adds `nbagent@REV`: the code of git revision REV (a `git worktree`, removed after) first
on the kernel's PYTHONPATH.

**Real answers only.** An AI cell counts only if its reply is `ok`, the server received a chat completion whose
body holds the prompt after the cell was sent, and the cell shows "hello" (nbagent: its run record is `completed`
with the answer "hello"; jupyter-ai: its markdown output). Anything else is reported as failed, never timed.

**README's flow** (`--readme`): nbagent's kernels get no `NBAGENT_MODEL`, and the AI cell names the model,
`%%agent --model openai/gpt-4o-mini --new\nsay hello`, as README shows it: the key in the environment is all that
tells `%load_ext` the agent will be used.

**Scenarios** (wall time on the client: from sending the execute request to its execute_reply, read as it
arrives; products interleaved in each round, in an order rotated per round, one kernel at a time):

- `at-once`: the load cell and the AI cell sent back to back (as Run All): from sending the load cell to the AI
  cell's reply;
- `idle`: the load cell, its reply, 6 s idle, then the AI cell; `second`: then a second AI cell (same kernel);
- `memory`: the kernel process's VmRSS (`/proc/PID/status`, read from outside) right after that first answer;
  `memory-tree`, the same plus every process the kernel started (nbagent's model process holds litellm), what the
  machine gives the notebook; and, for reference, a bare kernel of each product's interpreter (no extension
  loaded, one empty cell run);
- `computing`: the load cell, its reply, then at once a CPU-bound cell (`cpu`; timed on the client and inside the
  kernel with perf_counter), against the same cell in a kernel left idle 8 s after the load cell (background work
  done). Slowdown = median with ÷ median baseline. Also `imports` (`import numpy, matplotlib.pyplot`) when both
  interpreters have them.

**The call alone** (`second` only; a reference, not a product): an nbagent kernel whose second cell makes only the
model call nbagent's agent made in its first `%%agent` cell — the same messages and tool schemas, as the server
received them, through nbagent's model layer (`nbagent.models.llm.complete`: litellm, streamed, in the kernel's model
process) — and shows the answer as Markdown, as jupyter-ai does: no run, no log, no gate, no record. The request is
written beside the notebook and read by an untimed cell before the timed one. nbagent's second cell less this one
is what nbagent's own work around the call costs; this one ÷ jupyter-ai is what the call alone costs against
jupyter-ai's whole cell.

**Intervals.** Beside each target's ratio of medians, a 95% bootstrap interval (10,000 resamples of each side's kernels,
numpy's generator, seed 0): with 9 single cells a side, a ratio near its limit is not told apart from it.

**Targets** (nbagent ÷ jupyter-ai, medians): at once ≤ 2.0x, after 6 s idle ≤ 1.0x, second cell ≤ 2.0x, memory
after the first answer ≤ 1.5x; nbagent's computing cell slowed ≤ 1.5x (client wall). Prints PASS/FAIL, always
exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from jupyter_client import KernelManager  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from kernel_harness import Cell, Kernel  # noqa: E402
from stub_openai import Reply, StubOpenAI  # noqa: E402

JAI_VENV = HERE / ".jai-venv"
JAI_PYTHON = JAI_VENV / "bin" / "python"
JAI_REQUIREMENTS = ["jupyter-ai-magics==2.31.7", "langchain-openai==0.3.35"]
SAME_AS_NBAGENT = ("ipykernel", "numpy", "matplotlib")  # pinned to the versions of nbagent's venv
SCENARIOS = ("at-once", "idle", "second", "memory", "computing")
PROMPT = "say hello"
COMPUTE = {"cpu": "def f(n):\n    return sum(i * i % 7 for i in range(n))\n_ = [f(20_000) for _ in range(400)]",
           "imports": "import numpy, matplotlib.pyplot"}
TIMED = "import time as _t\n_t0 = _t.perf_counter()\n{code}\nprint(round(_t.perf_counter() - _t0, 4))"
CALL_REQUEST = "agent-request.json"
CALL_SETUP = f"""import json as _json
from IPython.display import Markdown as _Markdown, display as _display
from nbagent.models.llm import ModelSettings as _Settings, complete as _complete
with open({CALL_REQUEST!r}, encoding="utf-8") as _f:
    _REQUEST = _json.load(_f)
async def _call_alone():
    reply = await _complete(_Settings(model="openai/gpt-4o-mini"), _REQUEST["messages"], _REQUEST["tools"],
                            on_token=lambda text: None)
    _display(_Markdown(reply.content))
"""
TIMEOUT = 120.0
IDLE_S, SETTLE_S = 6.0, 8.0
CALL = "the call alone"  # a reference: see the module's docstring
STUB = StubOpenAI()
STUB.fallback = Reply(content="hello")
perf = time.perf_counter


class Failed(Exception):
    """A measurement that did not happen as it should: reported, never timed."""


class OtherPython(Kernel):
    """The harness's kernel, run by another interpreter: a kernel spec of its own, in a temporary folder."""

    specs: dict[str, str] = {}

    def __init__(self, python: Path, folder: Path, **kw: Any) -> None:
        self.python = python
        super().__init__(folder, **kw)

    def _start(self) -> None:
        if str(self.python) not in self.specs:
            d = Path(tempfile.mkdtemp(prefix="bench-kernelspec-"))
            (d / "bench").mkdir()
            argv = [str(self.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            (d / "bench" / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "bench",
                                                                  "language": "python"}))
            self.specs[str(self.python)] = str(d)
        ksm = KernelSpecManager(kernel_dirs=[self.specs[str(self.python)]])
        self.km = KernelManager(kernel_name="bench", kernel_spec_manager=ksm, transport="ipc", ip=self.km.ip)
        super()._start()


@dataclass
class Product:
    name: str
    load: str
    ai: str
    answered: Callable[[Cell], bool]
    env: dict[str, str] = field(default_factory=dict)
    python: Path | None = None  # None: the harness's `python3` kernel spec, i.e. this venv

    @contextlib.contextmanager
    def kernel(self) -> Iterator[Kernel]:
        env = {"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": STUB.base_url, "OPENAI_API_BASE": STUB.base_url,
               **self.env}
        with tempfile.TemporaryDirectory() as tmp:
            kw: dict[str, Any] = {"env": env, "stderr": subprocess.DEVNULL}
            k = OtherPython(self.python, Path(tmp), **kw) if self.python else Kernel(Path(tmp), **kw)
            try:
                yield k
            finally:
                k.close()


# ============================================================================================ measuring


def reply_time(k: Kernel, cell: Cell) -> float:
    """perf_counter() when the cell's execute_reply arrived (iopub applied meanwhile, as a front end does). The
    client looks for the reply between reads of iopub 1 ms long: with 5 ms reads (before 2026-11-28, 08:00 UTC)
    every time was rounded up by 0-5 ms, which flattered the ratio of the slower product."""
    deadline = time.monotonic() + TIMEOUT
    while cell.reply is None:
        if time.monotonic() > deadline:
            raise Failed(f"no reply in {TIMEOUT:.0f} s")
        k.pump(0.001)
    return perf()


def must_be_ok(k: Kernel, cell: Cell, what: str) -> None:
    k.wait(cell, TIMEOUT)  # the outputs that trail the reply
    if not cell.ok:
        errors = [o["error"] for o in cell.outputs if "error" in o]
        raise Failed(f"{what} ended {cell.reply and cell.reply['content']['status']}: {errors} {cell.stderr[-300:]}")


def check_answer(p: Product, k: Kernel, cell: Cell, sent_before: int) -> None:
    must_be_ok(k, cell, "the AI cell")
    if not any(PROMPT in json.dumps(r.body) for r in STUB.completion_requests[sent_before:]):
        raise Failed("the server never received the AI cell's request")
    if not p.answered(cell):
        raise Failed(f"no 'hello' in the AI cell's output: {json.dumps(cell.outputs)[:300]}")


def timed_ai(p: Product, k: Kernel) -> float:
    sent_before = len(STUB.completion_requests)
    t0 = perf()
    cell = k.submit(p.ai, cell_id="ai")
    wall = reply_time(k, cell) - t0
    check_answer(p, k, cell, sent_before)
    return wall


def _vmrss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise Failed("no VmRSS")


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").iterdir():
            with contextlib.suppress(OSError):
                kids = [int(c) for c in (task / "children").read_text().split()]
                out += kids
                todo += kids
    return out


def rss_mb(k: Kernel, tree: bool = False) -> float:
    """The kernel's VmRSS; with `tree`, plus that of every process it started (nbagent's model process), the
    memory the machine gives the notebook."""
    pid = k.km.provisioner.process.pid  # type: ignore[union-attr]  # the kernel (checked below)
    if "ipykernel_launcher" not in Path(f"/proc/{pid}/cmdline").read_text():
        raise Failed(f"process {pid} is not the kernel")
    return _vmrss(pid) + (sum(_vmrss(c) for c in _descendants(pid)) if tree else 0.0)


def at_once(p: Product, out: dict[str, float]) -> None:
    with p.kernel() as k:
        sent_before = len(STUB.completion_requests)
        t0 = perf()
        first = k.submit(p.load, cell_id="load")
        cell = k.submit(p.ai, cell_id="ai")
        wall = reply_time(k, cell) - t0
        must_be_ok(k, first, "the load cell")
        check_answer(p, k, cell, sent_before)
        out["at-once"] = wall


def idle_session(p: Product, out: dict[str, float], second: bool) -> None:
    with p.kernel() as k:
        must_be_ok(k, k.submit(p.load, cell_id="load"), "the load cell")
        time.sleep(IDLE_S)
        out["idle"] = timed_ai(p, k)
        out["memory"] = rss_mb(k)
        out["memory-tree"] = rss_mb(k, tree=True)
        if second:
            out["second"] = timed_ai(p, k)


def call_alone(p: Product, out: dict[str, float], agent: Product) -> None:
    """`second` for the call alone (see the module's docstring): `agent`'s load and first AI cell, its request
    written beside the notebook, an untimed cell that reads it, then the timed cell that sends it again."""
    with p.kernel() as k:
        must_be_ok(k, k.submit(agent.load, cell_id="load"), "the load cell")
        time.sleep(IDLE_S)
        sent_before = len(STUB.completion_requests)
        first = k.submit(agent.ai, cell_id="ai")
        reply_time(k, first)
        check_answer(agent, k, first, sent_before)
        set_up_call(k)
        out["second"] = timed_ai(p, k)


def set_up_call(k: Kernel) -> None:
    """The request the server received last (an agent's first), written beside `k`'s notebook and read by a cell
    there, ready for `await _call_alone()`."""
    body = STUB.completion_requests[-1].body
    if PROMPT not in json.dumps(body.get("messages")) or not body.get("tools"):
        raise Failed("the agent's request has no prompt or no tools")
    (k.folder / CALL_REQUEST).write_text(json.dumps({"messages": body["messages"], "tools": body["tools"]}))
    must_be_ok(k, k.submit(CALL_SETUP, cell_id="setup"), "the cell that reads the request")


def bare(p: Product, out: dict[str, float]) -> None:
    with p.kernel() as k:
        must_be_ok(k, k.submit("pass"), "an empty cell")
        out["bare"] = rss_mb(k)


def computing(p: Product, out: dict[str, float], variant: str, settle: bool) -> None:
    with p.kernel() as k:
        first = k.submit(p.load, cell_id="load")
        reply_time(k, first)  # then the cell at once, as soon as the load cell's reply is in (or after 8 s)
        if settle:
            time.sleep(SETTLE_S)
        t0 = perf()
        cell = k.submit(TIMED.format(code=COMPUTE[variant]), cell_id="compute")
        wall = reply_time(k, cell) - t0
        must_be_ok(k, first, "the load cell")
        must_be_ok(k, cell, f"the {variant} cell")
        key = f"{variant}/{'idle' if settle else 'load'}"
        out[key], out[key + "/in"] = wall, float(cell.stdout.split()[-1])


# ============================================================================================ setup, machine


def setup_commands() -> list[list[str]]:
    pins = []
    for dist in SAME_AS_NBAGENT:
        try:
            pins.append(f"{dist}=={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            if dist == "ipykernel":
                pins.append(dist)
    base = getattr(sys, "_base_executable", "") or "python3"
    return [[base, "-m", "venv", str(JAI_VENV)], [str(JAI_VENV / "bin" / "pip"), "install", "-q",
                                                   *JAI_REQUIREMENTS, *pins]]


def setup() -> bool:
    for cmd in setup_commands():
        print("$", " ".join(cmd), flush=True)
        try:
            subprocess.run(cmd, check=True, timeout=900)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            print(f"setup failed: {exc}", file=sys.stderr)
            return False
    return True


def ask(python: Path | str, code: str) -> str:
    try:
        return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60,
                              cwd="/").stdout.strip()
    except OSError:
        return ""


VERSIONS = ("import sys\nfrom importlib import metadata as m\nv = ['Python ' + sys.version.split()[0]]\n"
            "for d in {dists!r}:\n    try: v.append(d + ' ' + m.version(d))\n    except Exception: pass\n"
            "print(', '.join(v))")


def worktree(rev: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="nbagent-baseline-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    return path


# ============================================================================================ report

Results = dict[tuple[str, str], list[float]]


def table(names: list[str], results: Results, fails: dict[tuple[str, str], list[str]], variants: list[str]) -> None:
    rows = [("at-once", "at once: load + AI cell sent together", "s"), ("idle", "AI cell after 6 s idle", "s"),
            ("second", "second AI cell", "s"), ("memory", "kernel RSS after the first answer", "MiB"),
            ("memory-tree", "kernel + the processes it started, RSS after the first answer", "MiB"),
            ("bare", "kernel RSS, bare kernel (reference)", "MiB")]
    for v in variants:
        rows += [(f"{v}/load", f"{v} cell right after the load cell", "s"),
                 (f"{v}/load/in", f"{v} cell right after the load cell, in kernel", "s"),
                 (f"{v}/idle", f"{v} cell, kernel idle 8 s after the load (baseline)", "s"),
                 (f"{v}/idle/in", f"{v} cell, baseline, in kernel", "s")]
    print("\n| scenario | unit | " + " | ".join(names) + " |\n|---|---|" + "---:|" * len(names))
    for key, label, unit in rows:
        if any(results.get((key, n)) or fails.get((key, n)) for n in names):
            cells = []
            for n in names:
                xs, bad, d = results.get((key, n), []), fails.get((key, n), []), 0 if unit == "MiB" else 3
                text = f"{statistics.median(xs):.{d}f} ({min(xs):.{d}f}-{max(xs):.{d}f})" if xs else "—"
                cells.append(text + (f", {len(bad)} failed" if bad else ""))
            print(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    print("\nmedian (min-max); s = client wall, from sending the execute request to its reply")


def ratios(names: list[str], results: Results, variants: list[str]) -> None:
    def med(key: str, n: str) -> float | None:
        return statistics.median(results[(key, n)]) if results.get((key, n)) else None

    def show(a: float | None, b: float | None, limit: float | None, key: str = "", n: str = "") -> str:
        if a is None or not b:
            return "n/a"
        low_high = interval(results.get((key, n), []), results.get((key, jai), [])) if key else None
        return f"{a / b:.2f}x" + (f" [{low_high[0]:.2f}-{low_high[1]:.2f}]" if low_high else "") \
            + ("" if limit is None else (" PASS" if a / b <= limit else " FAIL"))

    mine, jai = [n for n in names if n != "jupyter-ai"], "jupyter-ai"
    print("\n| target | " + " | ".join([*mine, jai]) + " | limit |\n|---|" + "---:|" * (len(mine) + 2))
    for label, key, limit in [("at once", "at-once", 2.0), ("after 6 s idle", "idle", 1.0),
                              ("second cell", "second", 2.0), ("memory after first answer", "memory", 1.5),
                              ("memory with the kernel's child processes (not a target)", "memory-tree", None)]:
        if any(results.get((key, n)) for n in names):
            cells = [show(med(key, n), med(key, jai), None if n == CALL else limit, key, n) for n in mine]
            print(f"| {label}, ÷ jupyter-ai | " + " | ".join(cells) + " | — | "
                  + (f"≤ {limit:.1f}x |" if limit else "info |"))
    for v in variants:
        for suffix, slow, where in (("", 1.5, "client wall"), ("/in", None, "in kernel")):
            cells = [show(med(f"{v}/load{suffix}", n), med(f"{v}/idle{suffix}", n), slow if n != jai else None)
                     for n in [*mine, jai]]
            print(f"| {v} cell slowed by the load ({where}), with ÷ baseline | " + " | ".join(cells)
                  + f" | {f'≤ {slow:.1f}x (nbagent)' if slow else 'info'} |")
    alone = med("second", CALL)
    for n in [m for m in mine if m != CALL]:
        whole = med("second", n)
        if whole is not None and alone is not None:
            print(f"\n{n}'s second cell less the call alone (nbagent's own work around the call): "
                  f"{1000 * (whole - alone):.1f} ms (medians)")


def interval(mine: list[float], theirs: list[float], n: int = 10_000) -> tuple[float, float] | None:
    """A 95% percentile-bootstrap interval of median(mine) ÷ median(theirs), each side resampled on its own."""
    if len(mine) < 3 or len(theirs) < 3:
        return None
    import numpy as np

    rng = np.random.default_rng(0)
    a = np.median(rng.choice(np.asarray(mine), (n, len(mine))), axis=1)
    b = np.median(rng.choice(np.asarray(theirs), (n, len(theirs))), axis=1)
    low, high = np.percentile(a / b, [2.5, 97.5])
    return float(low), float(high)


# ============================================================================================ main


def shows_hello(cell: Cell) -> bool:
    """jupyter-ai's answer, and the call alone's: "hello" in a Markdown output."""
    return any("hello" in str(o.get("data", {}).get("text/markdown", "")) for o in cell.outputs)


NBAGENT = Product("nbagent", "%load_ext nbagent", f"%%agent --new\n{PROMPT}",  # its record: completed, "hello"
                  lambda c: any(r.get("status") == "completed" and "hello" in str(r.get("answer")) for r in c.records),
                  {"NBAGENT_MODEL": "openai/gpt-4o-mini"})
JUPYTER_AI = Product("jupyter-ai", "%load_ext jupyter_ai_magics", f"%%ai openai-chat:gpt-4o-mini\n{PROMPT}",
                     shows_hello, python=JAI_PYTHON)
CALL_ALONE = Product(CALL, NBAGENT.load, "await _call_alone()", shows_hello, NBAGENT.env)  # after set_up_call
# README's own flow (--readme): the model named only in the cell, no NbAgent.model, the key in the environment
NBAGENT_README = Product("nbagent", NBAGENT.load, f"%%agent --model openai/gpt-4o-mini --new\n{PROMPT}",
                         NBAGENT.answered)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--setup", action="store_true", help="create bench/.jai-venv with jupyter-ai, then run")
    ap.add_argument("--print-setup", action="store_true", help="print the commands --setup runs and exit")
    ap.add_argument("--kernels", type=int, default=9, help="kernels per product per scenario (default 9)")
    ap.add_argument("--quick", action="store_true", help="3 kernels each")
    ap.add_argument("--baseline", help="a git revision of nbagent to measure too, interleaved (e.g. 04a31dc)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"some of {','.join(SCENARIOS)}")
    ap.add_argument("--no-call", action="store_true", help="without the call alone (a reference for `second`)")
    ap.add_argument("--readme", action="store_true",
                    help="nbagent as README shows it: the model named only in the %%agent cell (no NBAGENT_MODEL)")
    args = ap.parse_args()
    if args.print_setup:
        print("\n".join(" ".join(cmd) for cmd in setup_commands()))
        return
    if args.setup and not setup():
        return
    n, chosen = 3 if args.quick else args.kernels, args.scenarios.split(",")
    nb, jai, call = NBAGENT_README if args.readme else NBAGENT, JUPYTER_AI, CALL_ALONE
    products = [nb] + ([jai] if JAI_PYTHON.exists() else [])
    if not JAI_PYTHON.exists():
        print("bench/.jai-venv is missing: run with --setup (or see --print-setup); nbagent only", file=sys.stderr)
    probe = "import numpy, matplotlib; print('ok')"
    variants = ["cpu"] + (["imports"] if all(ask(p.python or sys.executable, probe) == "ok" for p in products)
                          else [])
    Unit = tuple[list[str], Callable[[Product, dict[str, float]], None]]
    units: list[Unit] = []
    alone: list[Unit] = []  # the call alone's (measured once a round, after the products')
    if "at-once" in chosen:
        units.append((["at-once"], at_once))
    if {"idle", "second", "memory"} & set(chosen):
        second = "second" in chosen
        units.append((["idle", "memory", *(["second"] if second else [])], partial(idle_session, second=second)))
    if "second" in chosen and not args.no_call:
        alone.append((["second"], partial(call_alone, agent=nb)))
    if "memory" in chosen:
        units.append((["bare"], bare))
    for v in variants if "computing" in chosen else []:
        for settle in (False, True):
            key = f"{v}/{'idle' if settle else 'load'}"
            units.append(([key, key + "/in"], partial(computing, variant=v, settle=settle)))
    load_start = os.getloadavg()
    results: Results = defaultdict(list)
    fails: dict[tuple[str, str], list[str]] = defaultdict(list)
    src: Path | None = None
    STUB.start()
    try:
        if args.baseline:
            src = worktree(args.baseline)
            path = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH", "")]))
            products.insert(1, Product(f"nbagent@{args.baseline}", nb.load, nb.ai, nb.answered,
                                       {**nb.env, "PYTHONPATH": path}))
        for p in products:  # which interpreter and which code each product's kernel really runs
            with p.kernel() as k:
                where = "import sys, importlib.util as u\nprint(sys.executable, u.find_spec({!r}).origin)"
                mod = "nbagent" if p.name.startswith("nbagent") else "jupyter_ai_magics"
                print(f"{p.name} kernel: {k.run(where.format(mod), timeout=TIMEOUT).stdout.strip()}", file=sys.stderr)
        for r in range(n):
            rotated = products[r % len(products):] + products[:r % len(products)]
            for keys, fn, who in [(k, f, rotated) for k, f in units] + [(k, f, [call]) for k, f in alone]:
                for p in who:
                    out: dict[str, float] = {}
                    try:
                        fn(p, out)
                    except Exception as exc:  # a failed measurement is reported, never timed
                        for key in set(keys) - set(out):
                            fails[(key, p.name)].append(str(exc))
                        print(f"  {p.name} {keys[0]}: FAILED: {type(exc).__name__}: {str(exc)[:400]}",
                              file=sys.stderr)
                    for key, value in out.items():
                        results[(key, p.name)].append(value)
            print(f"round {r + 1}/{n} done", file=sys.stderr, flush=True)
    finally:
        STUB.stop()
        if src is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(src)], capture_output=True)
        for d in OtherPython.specs.values():
            shutil.rmtree(d, ignore_errors=True)
    print(f"\nFirst answer, nbagent `%%agent` vs jupyter-ai `%%ai`, one local OpenAI-compatible server; {n} fresh "
          "kernels per product per scenario")
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores; load average at start "
          f"{' '.join(f'{x:.2f}' for x in load_start)}, at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"nbagent venv: {ask(sys.executable, VERSIONS.format(dists=('ipykernel', 'litellm', 'openai')))}")
    if JAI_PYTHON.exists():
        dists = ("ipykernel", "jupyter-ai-magics", "langchain-openai", "langchain", "openai")
        print(f"jupyter-ai venv: {ask(JAI_PYTHON, VERSIONS.format(dists=dists))}")
    names = [p.name for p in products]
    if results.get(("second", CALL)) or fails.get(("second", CALL)):
        names.insert(names.index("jupyter-ai") if "jupyter-ai" in names else len(names), CALL)
    table(names, results, fails, variants if "computing" in chosen else [])
    if "jupyter-ai" in names:
        ratios(names, results, variants if "computing" in chosen else [])
    for name, reason in sorted({(key[1], r) for key, rs in fails.items() for r in rs}):
        print(f"failed ({name}): {reason[:300]}")
    paths = sorted({r.path for r in STUB.requests})
    print(f"requests the server answered: {STUB.completions} (paths: {', '.join(paths)}); every timed answer was "
          "checked: reply ok, the server got its prompt, the cell shows 'hello'")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # killed: still stop the kernels, remove the worktree
    try:
        main()
    except SystemExit:  # --help, or killed: argparse and the handler above already said what they had to
        raise
    except BaseException:  # a benchmark reports; it never fails
        traceback.print_exc()
    sys.exit(0)
