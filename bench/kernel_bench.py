"""Kernel benchmark: what `%load_ext nbagent` costs in a fresh kernel, and what the Jupyter layer adds to a run.

Run from the repository root:

    python bench/kernel_bench.py              # 5 fresh kernels for the load, 5 timed runs a side (about 40 s)
    python bench/kernel_bench.py --quick      # 2 kernels, 2 timed runs a side (about 25 s)
    python bench/kernel_bench.py --profile    # adds the Jupyter layer's breakdown: a cProfile of one more run in
                                              # the kernel (and one plain), and 3 runs with timing wrappers
    python bench/kernel_bench.py --steps 90   # longer runs (at most 99: the default model-call budget)
    python bench/kernel_bench.py --reps 9     # more load kernels and timed runs

Real kernels are started and driven like JupyterLab drives them, by the test suite's driver
(`tests/kernel_harness.py`): the `python3` kernel spec on ipc sockets, cell ids in the execute_request metadata,
display updates applied client side, and the run view answered with the "rendered" message its JavaScript sends
once drawn. The kernels' own stderr goes to a file.

Load. In each fresh kernel, one cell times `%load_ext nbagent` with `time.perf_counter()` inside the kernel and
lists the modules it imported; litellm, anywidget and ipywidgets must not be among them. `import nbagent` alone
is timed the same way in other fresh kernels, which then load the extension and time what the first run adds:
`import nbagent.ui.widget` (the live view: anywidget, ipywidgets) and litellm (`nbagent.models.llm.import_litellm()`).
One more kernel runs with PYTHONPROFILEIMPORTTIME=1 (its stderr to a file) to show where the load's time goes,
by package (self times; the tracing inflates them).

Run. A script of 20 turns, each one READ_ONLY tool call (`read_file` of a 12-line file and `list_variables`,
alternating), then a final answer. In one kernel: `%load_ext nbagent`, then cells
`%%agent --script s.json --approve all --autonomy L3 --new` with a new cell id each: one warm-up (the first run
imports litellm: "first run, cold"), then the timed runs. Each is timed on the client, from sending the
execute_request to receiving its execute_reply (the shell channel is polled every 2 ms, iopub drained meanwhile),
and inside the kernel, from IPython's pre_run_cell to its post_run_cell event (wall and process CPU time). The
baseline runs the agent the kernel's host builds (same script, file and kernel tools, autonomy, decider, budget
and streaming) in this process: `nbagent.runtime.Agent(...)` then `await agent.run(prompt,
previous_run_id=None)`, timed from the Agent's construction to the result, one warm-up then the timed runs, all
in one event loop (as in a kernel). Kernel and plain runs alternate, their order swapped every repetition, so
other load on the machine weighs on both alike.

Targets: `%load_ext nbagent` under 300 ms (median), with no litellm/anywidget/ipywidgets import. The
kernel/plain ratio and the Jupyter layer's cost per step, (kernel - plain) / steps, are reported, not judged. The
bench reports and never fails: PASS/FAIL is printed and the exit status is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import queue
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from kernel_harness import Cell  # noqa: E402 - the test suite's kernel driver
from kernel_harness import Kernel as HarnessKernel  # noqa: E402

RUN_MIME = "application/vnd.nbagent.run+json"

LOAD_TARGET_MS = 300.0
STEPS = 20  # tool steps a run (--steps; the default budget allows up to 99 model calls)
FORBIDDEN = ("litellm", "anywidget", "ipywidgets")  # must not be imported by the load
NOTED = ("pydantic", "pydantic_core", "tinydb", "filelock", "sqlite3", "tenacity", "nbagent.runtime",
         "nbagent.ui.record", "IPython.display")
PROMPT = "Look at notes.txt and at the session's variables, again and again."


def max_steps() -> int:
    return max(50, STEPS)  # the kernel's default step budget, raised for longer runs


def agent_cell() -> str:
    budget = f" --max-steps {max_steps()}" if STEPS > 50 else ""
    return f"%%agent --script s.json --approve all --autonomy L3 --new{budget}\n{PROMPT}"


# One cell times `code` inside the kernel and lists the modules it imported.
TIMED_CELL = """\
import json as _bj, sys as _bs, time as _bt
_b_pre = set(_bs.modules)
_b_t0 = _bt.perf_counter()
{code}
_b_dt = _bt.perf_counter() - _b_t0
print("NBBENCH " + _bj.dumps({{"s": _b_dt, "new": sorted(set(_bs.modules) - _b_pre)}}))
"""
LOAD_CELL = TIMED_CELL.format(code="%load_ext nbagent")
IMPORT_CELL = TIMED_CELL.format(code="import nbagent")
# After `import nbagent` and `%load_ext nbagent`, what the first run adds: the live view's widget module
# (anywidget, ipywidgets) and litellm (imported the way nbagent.models.llm imports it).
FIRST_RUN_IMPORTS = (("widget", "import nbagent.ui.widget"),
                     ("litellm", "import nbagent.models.llm\nnbagent.models.llm.import_litellm()"))

# Two tiny stdlib modules nothing else imports mark where the load starts and ends in the importtime log.
IMPORTTIME_CELL = "import colorsys\n%load_ext nbagent\nimport graphlib\n"

# IPython events time every cell inside the kernel (keyed by cell id); a cell with id "profile" is profiled.
HOOKS_CELL = """\
import time as _bt, cProfile as _bcp
_b_times, _b_start, _b_prof = {}, {}, {}
def _b_pre(info):
    _b_start[info.cell_id] = (_bt.perf_counter(), _bt.process_time())
    if info.cell_id == "profile":
        _b_prof["p"] = _bcp.Profile()
        _b_prof["p"].enable()
def _b_post(result):
    end = (_bt.perf_counter(), _bt.process_time())
    cid = result.info.cell_id
    if cid == "profile" and "p" in _b_prof:
        _b_prof["p"].disable()
        _b_prof.pop("p").dump_stats("kernel.prof")
    if cid in _b_start:
        start = _b_start.pop(cid)
        _b_times[cid] = [end[0] - start[0], end[1] - start[1]]
get_ipython().events.register("pre_run_cell", _b_pre)
get_ipython().events.register("post_run_cell", _b_post)
"""

# --profile: the Jupyter layer's parts timed by wrappers (perf_counter around each call; no profiler overhead),
# over INSTRUMENTED_RUNS more runs. Async functions are timed from the call to the return (waits included).
INSTRUMENTED_RUNS = 3
PARTS = [
    ("%%agent cell (NotebookHost.run_cell)", "nbagent.ipython.host", "NotebookHost.run_cell"),
    ("  runtime Agent.run (the plain runtime's part)", "nbagent.runtime", "Agent.run"),
    ("  NotebookHost.make_agent (tools, Agent; plain has it too)", "nbagent.ipython.host", "NotebookHost.make_agent"),
    ("  Store.list_runs (the cell's earlier runs)", "nbagent.store.store", "Store.list_runs"),
    ("  LiveDisplay.__init__ (RunView, comm_open, display)", "nbagent.ipython.live", "LiveDisplay.__init__"),
    ("  LiveDisplay.on_bus (every event and token)", "nbagent.ipython.live", "LiveDisplay.on_bus"),
    ("  LiveDisplay._rebuild (view state from the store, push)", "nbagent.ipython.live", "LiveDisplay._rebuild"),
    ("    LiveDisplay.view (run_state, run_events, view_state)", "nbagent.ipython.live", "LiveDisplay.view"),
    ("  RunView._sync (trait sync: comm_msg)", "nbagent.ui.widget", "RunView._sync"),
    ("  LiveDisplay.finish (last view, record, update_display)", "nbagent.ipython.live", "LiveDisplay.finish"),
    ("    RunRecord._repr_mimebundle_ (the static record)", "nbagent.ui.record", "RunRecord._repr_mimebundle_"),
    ("  NotebookHost._refresh_superseded", "nbagent.ipython.host", "NotebookHost._refresh_superseded"),
    ("Session.send (every message of the kernel's main thread)", "jupyter_client.session", "Session.send"),
]
INSTRUMENT_CELL = """\
import functools as _bf, importlib as _bi, inspect as _bin, time as _bt
_b_parts = {{}}
def _b_wrap(module, qualname):
    owner = _bi.import_module(module)
    *path, name = qualname.split(".")
    try:
        for p in path:
            owner = getattr(owner, p)
        fn = getattr(owner, name)
    except AttributeError:  # renamed since: reported as not found
        return
    acc = _b_parts.setdefault(qualname, [0, 0.0])
    if _bin.iscoroutinefunction(fn):
        @_bf.wraps(fn)
        async def wrapper(*a, **kw):
            t = _bt.perf_counter()
            try:
                return await fn(*a, **kw)
            finally:
                acc[0] += 1
                acc[1] += _bt.perf_counter() - t
    else:
        @_bf.wraps(fn)
        def wrapper(*a, **kw):
            t = _bt.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                acc[0] += 1
                acc[1] += _bt.perf_counter() - t
    setattr(owner, name, wrapper)
for _b_m, _b_q in {targets}:
    _b_wrap(_b_m, _b_q)
"""

# The cell times, and the widgets still alive in the kernel (every run's RunView should be closed by then).
FETCH_CELL = """\
import json as _bj
from ipywidgets.widgets.widget import _instances as _bw
print("NBBENCH " + _bj.dumps({**_b_times, "_widgets": sorted(type(w).__name__ for w in _bw.values())}))
"""

perf = time.perf_counter
_T0 = perf()


def progress(msg: str) -> None:
    print(f"[{perf() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def ms(seconds: float) -> float:
    return seconds * 1e3


def stats(xs: list[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), max(xs)


def pkg_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


class Kernel(HarnessKernel):
    """The test suite's kernel driver (tests/kernel_harness.py), plus the kernel's stderr in a file and client-side
    timing of a cell with its iopub messages counted by type."""

    def __init__(self, folder: Path, notebook: str = "bench.ipynb", env: dict[str, str] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.stderr_path = folder / f"kernel-stderr-{time.monotonic_ns()}.txt"
        self._stderr = self.stderr_path.open("w")
        env = dict(env or {})
        try:
            super().__init__(folder, notebook, env, stderr=self._stderr)
        except RuntimeError as exc:
            self._stderr.close()
            raise RuntimeError("the kernel did not start; its stderr: "
                               + self.stderr_path.read_text()[-2000:]) from exc

    def close(self) -> None:
        super().close()
        self._stderr.close()

    def run(self, code: str, cell_id: str | None = None, timeout: float = 120) -> Cell:
        return self.timed(code, cell_id or "cell", timeout)[0]

    def timed(self, code: str, cell_id: str, timeout: float = 120) -> tuple[Cell, float, Counter[str]]:
        """Run a cell: the client-side time from sending it to receiving its execute_reply (the shell channel is
        polled every 2 ms, iopub drained meanwhile), and the cell's iopub messages by type."""
        counts: Counter[str] = Counter()
        t0 = perf()
        cell = self.submit(code, cell_id)
        elapsed = None
        deadline = time.monotonic() + timeout
        while elapsed is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"cell {cell_id} did not finish in {timeout} s; stderr: {cell.stderr[-2000:]}")
            try:
                reply = self.kc.get_shell_msg(timeout=0.002)
            except queue.Empty:
                reply = None
            if reply is not None and reply["parent_header"].get("msg_id") == cell.msg_id:
                elapsed = perf() - t0
                cell.reply = reply
            self.drain(counts, cell, 0)
        self.drain(counts, cell, 0.3)  # what trails the reply: the idle status (the record comes before it)
        return cell, elapsed, counts

    def drain(self, counts: Counter[str], cell: Cell, seconds: float) -> None:
        """Apply the iopub messages that have arrived, or arrive within `seconds`, counting the cell's by type."""
        deadline = perf() + seconds
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=max(0.0, deadline - perf()))
            except queue.Empty:
                return
            if msg["parent_header"].get("msg_id") == cell.msg_id:
                counts[msg["msg_type"]] += 1
            self._iopub(msg)


@contextlib.contextmanager
def kernel(folder: Path, **kw: Any) -> Iterator[Kernel]:
    k = Kernel(folder, **kw)
    try:
        yield k
    finally:
        k.close()


def bench_output(cell: Cell) -> Any:
    if not cell.ok:
        raise RuntimeError(f"cell failed: {cell.outputs} {cell.stderr[-2000:]}")
    for line in cell.stdout.splitlines():
        if line.startswith("NBBENCH "):
            return json.loads(line[len("NBBENCH "):])
    raise RuntimeError(f"no result in the cell's output: {cell.stdout[-2000:]} {cell.stderr[-2000:]}")


# --------------------------------------------------------------------------------------------- load


def load_part(root: Path, n_load: int, n_import: int) -> dict[str, Any]:
    loads: list[float] = []
    starts: list[float] = []
    new_modules: list[list[str]] = []
    stderr: list[str] = []
    for i in range(n_load):
        t0 = perf()
        with kernel(root / f"load{i}") as k:
            starts.append(perf() - t0)
            cell = k.run(LOAD_CELL, cell_id="load")
            out = bench_output(cell)
            loads.append(out["s"])
            new_modules.append(out["new"])
            if cell.stderr.strip():
                stderr.append(cell.stderr.strip())
        progress(f"load {i + 1}/{n_load}: {ms(loads[-1]):.0f} ms, {len(out['new'])} modules")
    imports: list[float] = []
    import_new: list[int] = []
    later: dict[str, list[float]] = {}
    for i in range(n_import):
        with kernel(root / f"import{i}") as k:
            out = bench_output(k.run(IMPORT_CELL, cell_id="import"))
            imports.append(out["s"])
            import_new.append(len(out["new"]))
            if not k.run("%load_ext nbagent", cell_id="load").ok:
                raise RuntimeError("%load_ext nbagent failed")
            for key, code in FIRST_RUN_IMPORTS:
                out = bench_output(k.run(TIMED_CELL.format(code=code), cell_id=key))
                later.setdefault(key, []).append(out["s"])
                later.setdefault(key + "_new", []).append(len(out["new"]))
        progress(f"import nbagent {i + 1}/{n_import}: {ms(imports[-1]):.1f} ms; then widget module "
                 f"{ms(later['widget'][-1]):.0f} ms, litellm {ms(later['litellm'][-1]):.0f} ms")
    imported = set().union(*map(set, new_modules))
    return {"loads": loads, "starts": starts, "imports": imports, "import_new": import_new,
            "n_new": [len(m) for m in new_modules], "forbidden": sorted(m for m in imported
                                                                        if m.split(".")[0] in FORBIDDEN),
            "noted": [m for m in NOTED if m in imported], "stderr": stderr, "later": later}


def importtime_part(root: Path) -> dict[str, Any]:
    """Self import times (µs) of the modules `%load_ext nbagent` imports, from the kernel's -X importtime log."""
    with kernel(root / "importtime", env={"PYTHONPROFILEIMPORTTIME": "1"}) as k:
        cell = k.run(IMPORTTIME_CELL, cell_id="importtime")
        if not cell.ok:
            raise RuntimeError(f"cell failed: {cell.outputs}")
        path = k.stderr_path
    selfs: dict[str, int] = {}
    inside = False
    for line in path.read_text().splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = [p.strip() for p in line[len("import time:"):].split("|")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        name = parts[2]
        if name == "colorsys":
            inside = True
            continue
        if name == "graphlib":
            break
        if inside:
            selfs[name] = int(parts[0])
    return selfs


PACKAGE_GROUPS = {"pydantic_core": "pydantic", "annotated_types": "pydantic", "typing_inspection": "pydantic",
                  "_sqlite3": "sqlite3"}


def import_groups(selfs: dict[str, int]) -> list[tuple[str, int, int, str]]:
    """(group, µs, modules, the heaviest modules) by package; nbagent's own modules one by one."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for name, us in selfs.items():
        top = name.split(".")[0]
        group = name if top == "nbagent" else PACKAGE_GROUPS.get(top, top)
        groups.setdefault(group, []).append((name, us))
    rows = []
    for group, mods in groups.items():
        mods.sort(key=lambda m: -m[1])
        heavy = ", ".join(f"{n} {us / 1e3:.0f}" for n, us in mods[:3] if us >= 3000 and n != group)
        rows.append((group, sum(us for _, us in mods), len(mods), heavy))
    rows.sort(key=lambda r: -r[1])
    return rows


# --------------------------------------------------------------------------------------------- runs


def make_folder(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("".join(f"line {i}: nothing to see here\n" for i in range(12)))
    turns: list[dict[str, Any]] = []
    for i in range(STEPS):
        call = {"name": "read_file", "arguments": {"path": "notes.txt"}} if i % 2 == 0 else \
            {"name": "list_variables", "arguments": {}}
        turns.append({"tool_calls": [call]})
    turns.append({"content": "done"})
    path = folder / "s.json"
    path.write_text(json.dumps({"turns": turns}))
    return path


def check_record(cell: Cell) -> str:
    if not cell.ok:
        return f"cell failed: {cell.outputs} {cell.stderr[-1000:]}"
    records = cell.records
    if not records:
        return f"no run record in the output: {cell.stderr[-1000:]}"
    r = records[-1]
    tools = [s for s in r.get("steps", []) if s.get("kind") == "tool" and s.get("status") == "ok"]
    if r.get("status") != "completed":
        return f"run status {r.get('status')}: {cell.stderr[-1000:]}"
    if len(tools) != STEPS:
        return f"{len(tools)} tool steps done, expected {STEPS}"
    return ""


class Plain:
    """The baseline: the kernel's agent, as the host builds it, in this process and one event loop."""

    def __init__(self, folder: Path) -> None:
        from nbagent.store import Store

        self.folder = folder
        self.script = make_folder(folder)
        self.store = Store(folder / "nb.ipynb")
        self.namespace: dict[str, Any] = {}
        self.loop = asyncio.new_event_loop()
        self.problems: list[str] = []
        self.cpu: list[float] = []  # process time of each run

    async def _one(self) -> float:
        from nbagent.gate.deciders import PolicyDecider
        from nbagent.gate.policy import Budget
        from nbagent.runtime import Agent
        from nbagent.scope.rules import Scope
        from nbagent.tools.files import file_tools
        from nbagent.tools.kernel import kernel_tools

        t0, c0 = perf(), time.process_time()
        tools = [*file_tools(Scope(root=self.folder, base=self.folder)), *kernel_tools(self.namespace)]
        agent = Agent(script=self.script, tools=tools, autonomy="L3", decider=PolicyDecider("all"), store=self.store,
                      budget=Budget(max_steps=max_steps()), stream=True)
        result = await agent.run(PROMPT, previous_run_id=None)
        dt = perf() - t0
        self.cpu.append(time.process_time() - c0)
        if result.status.value != "completed" or result.steps != STEPS:
            self.problems.append(f"plain run: status {result.status.value}, {result.steps} steps")
        return dt

    def run(self, prof: cProfile.Profile | None = None) -> float:
        if prof is not None:
            prof.enable()
        try:
            return self.loop.run_until_complete(self._one())
        finally:
            if prof is not None:
                prof.disable()

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()
        self.store.close()


def runs_part(root: Path, reps: int, profile: bool) -> dict[str, Any]:
    """Kernel runs and plain runs, alternated (and their order swapped every repetition), so that whatever else
    the machine is doing weighs on both alike; each kernel run is paired with the plain run next to it."""
    folder = root / "kernel"
    make_folder(folder)
    res: dict[str, Any] = {"client": [], "inside": [], "plain": [], "problems": [], "counts": Counter()}
    plain = Plain(root / "plain")
    try:
        with kernel(folder) as k:
            cell = k.run("%load_ext nbagent", cell_id="setup")
            if not cell.ok or cell.stderr.strip():
                res["problems"].append(f"%load_ext: {cell.stderr.strip()}")
            if not k.run(HOOKS_CELL, cell_id="hooks").ok:
                raise RuntimeError("could not register the timing hooks")

            def kernel_run(cell_id: str) -> float:
                cell, dt, counts = k.timed(agent_cell(), cell_id)
                if check_record(cell):
                    res["problems"].append(f"{cell_id}: " + check_record(cell))
                if cell_id.startswith("run-"):
                    res["counts"] += counts
                return dt

            res["cold"] = kernel_run("warmup")
            progress(f"kernel, first run (cold): {res['cold']:.2f} s")
            res["plain_cold"] = plain.run()
            plain.cpu.clear()
            progress(f"plain, first run (cold): {res['plain_cold']:.2f} s")
            for i in range(reps):
                if i % 2 == 0:
                    res["client"].append(kernel_run(f"run-{i}"))
                    res["plain"].append(plain.run())
                else:
                    res["plain"].append(plain.run())
                    res["client"].append(kernel_run(f"run-{i}"))
                progress(f"run {i + 1}/{reps}: kernel {ms(res['client'][-1]):.0f} ms, "
                         f"plain {ms(res['plain'][-1]):.0f} ms")
            if profile:
                res["profile_s"] = kernel_run("profile")
                res["profile"] = folder / "kernel.prof"
                prof = cProfile.Profile()
                plain.run(prof)
                res["plain_profile"] = root / "plain.prof"
                prof.dump_stats(res["plain_profile"])
                cell = k.run(INSTRUMENT_CELL.format(targets=[(m, q) for _, m, q in PARTS]), cell_id="instrument")
                if not cell.ok:
                    raise RuntimeError(f"could not instrument the kernel: {cell.outputs} {cell.stderr[-2000:]}")
                for i in range(INSTRUMENTED_RUNS):
                    kernel_run(f"inst-{i}")
                res["parts"] = bench_output(k.run('print("NBBENCH " + __import__("json").dumps(_b_parts))',
                                                  cell_id="parts"))
            out = bench_output(k.run(FETCH_CELL, cell_id="fetch"))
            res["runs_done"] = sum(1 for c in out if c.startswith(("run-", "inst-")) or c in ("warmup", "profile"))
            res["alive"] = out.pop("_widgets")
            res["client_widgets"] = sorted(str(w.get("_model_name")) for w in k.widgets.values())
            res["inside"] = [out[f"run-{i}"][0] for i in range(reps) if f"run-{i}" in out]
            res["inside_cpu"] = [out[f"run-{i}"][1] for i in range(reps) if f"run-{i}" in out]
            res["cold_inside"] = out["warmup"][0] if "warmup" in out else None
            res["per_run"] = {t: n / reps for t, n in sorted(res["counts"].items())}
    finally:
        plain.close()
    res["problems"] += plain.problems
    res["plain_cpu"] = plain.cpu[:reps]
    return res


# --------------------------------------------------------------------------------------------- profile

# (label, file path fragment, function name): the Jupyter layer's parts, as cumulative times in the profile
# (where several functions match, e.g. the module-level and the method `run_cell`, the outermost one).
LAYER = [
    ("%%agent cell: host run_cell, all of it", "nbagent/ipython/host.py", "run_cell"),
    ("  runtime Agent.run (the plain runtime's work)", "nbagent/runtime", "run"),
    ("  NotebookHost.make_agent (tools, Agent; plain has it too)", "nbagent/ipython/agent_cell.py", "make_agent"),
    ("  LiveDisplay.__init__ (RunView comm_open, display)", "nbagent/ipython/live.py", "__init__"),
    ("  LiveDisplay.on_bus (each event and token)", "nbagent/ipython/live.py", "on_bus"),
    ("  LiveDisplay._rebuild (view state from the store)", "nbagent/ipython/live.py", "_rebuild"),
    ("  RunView._sync (trait sync -> comm_msg)", "nbagent/ui/widget.py", "_sync"),
    ("  LiveDisplay.finish (last view, record, update_display)", "nbagent/ipython/live.py", "finish"),
    ("    RunRecord._repr_mimebundle_ (the static record)", "nbagent/ui/record.py", "_repr_mimebundle_"),
    ("  NotebookHost._refresh_superseded", "nbagent/ipython/notes.py", "_refresh_superseded"),
    ("Session.send (every message the kernel sends)", "jupyter_client/session.py", "send"),
]
JUPYTER_FILES = r"nbagent/ipython/|nbagent/ui/|ipykernel/|/comm/|jupyter_client/|anywidget/|ipywidgets/|traitlets/"


def layer_breakdown(path: Path) -> list[tuple[str, int, float]]:
    st = pstats.Stats(str(path), stream=io.StringIO())
    rows = []
    for label, fragment, func in LAYER:
        calls, cum = 0, 0.0
        for (file, _, name), (_, nc, _, ct, _) in st.stats.items():  # type: ignore[attr-defined]
            if name == func and file.replace(os.sep, "/").endswith(fragment) and ct >= cum:
                calls, cum = nc, ct
        rows.append((label, calls, cum))
    return rows


def print_profile(path: Path, title: str, n: int, restrict: str | None = None) -> None:
    out = io.StringIO()
    st = pstats.Stats(str(path), stream=out)
    st.sort_stats("cumulative")
    if restrict:
        st.print_stats(restrict, n)
    else:
        st.print_stats(n)
    print(f"--- {title} ---")
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "function calls" in line), 0)
    print("\n".join(line.replace(str(Path(sys.prefix)), "<venv>") for line in lines[start:] if line.strip()))


# --------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    global STEPS
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 fresh kernels and 2 timed runs a side")
    ap.add_argument("--reps", type=int, help="timed runs a side and load kernels (default 5; --quick 2)")
    ap.add_argument("--steps", type=int, default=STEPS, help=f"tool steps a run (default {STEPS}; at most 99)")
    ap.add_argument("--profile", action="store_true", help="also profile one more run in the kernel and in-process")
    args = ap.parse_args(argv)
    STEPS = min(max(1, args.steps), 99)
    reps = args.reps or (2 if args.quick else 5)
    n_import = 1 if args.quick else 3
    os.chdir(ROOT)

    print("nbagent kernel benchmark (bench/kernel_bench.py)")
    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} cpus; "
          + ", ".join(f"{p} {pkg_version(p)}" for p in ("ipykernel", "ipython", "jupyter_client", "anywidget",
                                                          "litellm", "pydantic")))
    res: dict[str, Any] = {"loadavg": [os.getloadavg()]}
    try:
        with tempfile.TemporaryDirectory(prefix="nbagent-kbench-") as tmp:
            root = Path(tmp)
            res["load"] = load_part(root, reps, n_import)
            try:
                res["importtime"] = importtime_part(root)
            except Exception as exc:  # the breakdown is information; the rest of the bench still counts
                res["importtime_error"] = repr(exc)
            progress("importtime breakdown done")
            res["runs"] = runs_part(root, reps, args.profile)
            res["loadavg"].append(os.getloadavg())
            report(res, reps, args.profile)
    except Exception:
        traceback.print_exc()
        print("the benchmark did not complete (see the traceback above); nothing is judged")
    return 0


def report(res: dict[str, Any], reps: int, profile: bool) -> None:
    load, kern = res["load"], res["runs"]
    print()
    print("load average (1, 5, 15 min) at start " + " / ".join(f"{x:.2f}" for x in res["loadavg"][0])
          + ", at end " + " / ".join(f"{x:.2f}" for x in res["loadavg"][-1])
          + f" on {os.cpu_count()} cpus: other work on the machine inflates and scatters every time below")
    print()
    print(f"Load: measured inside fresh kernels with time.perf_counter(), ms ({len(load['loads'])} kernels for "
          f"%load_ext, {len(load['imports'])} for import nbagent)")
    print()
    hdr = f"{'':<36} {'median':>8} {'min':>8} {'max':>8}"
    print(hdr)
    print("-" * len(hdr))
    later = load["later"]
    for label, xs in (("%load_ext nbagent", load["loads"]), ("import nbagent (alone)", load["imports"]),
                      ("kernel start (client side, info)", load["starts"]),
                      ("first run adds: nbagent.ui.widget", later.get("widget")),
                      ("first run adds: litellm", later.get("litellm"))):
        if xs:
            m, lo, hi = stats(xs)
            print(f"{label:<36} {ms(m):>8.1f} {ms(lo):>8.1f} {ms(hi):>8.1f}")
    print()
    print(f"modules imported by %load_ext: {statistics.median(load['n_new']):.0f} (import nbagent alone: "
          f"{statistics.median(load['import_new']):.0f}; then, after the load, nbagent.ui.widget: "
          f"{statistics.median(later.get('widget_new') or [0]):.0f}, litellm: "
          f"{statistics.median(later.get('litellm_new') or [0]):.0f})")
    print(f"litellm / anywidget / ipywidgets imported by the load: "
          f"{', '.join(load['forbidden']) if load['forbidden'] else 'none'}")
    print(f"imported by the load (of {', '.join(NOTED)}): {', '.join(load['noted']) or 'none'}")
    for err in load["stderr"][:1]:
        print(f"stderr of the load cell: {err[:300]}")
    if "importtime" in res:
        selfs = res["importtime"]
        total = sum(selfs.values())
        print()
        print(f"Where the load's time goes: self import times by package in one more fresh kernel run with "
              f"-X importtime ({len(selfs)} modules, {total / 1e3:.0f} ms in all; the tracing inflates them):")
        for group, us, n, heavy in import_groups(selfs)[:12]:
            extra = f"  ({heavy})" if heavy else ""
            print(f"  {group:<34} {us / 1e3:7.1f} ms {100 * us / max(total, 1):5.1f}%  {n:>3} modules{extra}")
    else:
        print(f"importtime breakdown failed: {res.get('importtime_error')}")

    print()
    print(f"{STEPS}-step scripted run ({STEPS} READ_ONLY tool calls + a final answer; --approve all --autonomy L3 "
          f"--new; stream=True), ms, {reps} timed runs a side after a warm-up,\nkernel and plain runs alternated")
    print()
    hdr = f"{'':<50} {'median':>8} {'min':>8} {'max':>8} {'per step':>9}"
    print(hdr)
    print("-" * len(hdr))
    rows = [("kernel, client (submit -> execute_reply)", kern["client"]),
            ("kernel, inside (pre_run_cell -> post_run_cell)", kern["inside"]),
            ("plain runtime (Agent(...) + agent.run, in-process)", kern["plain"]),
            ("CPU time: kernel process, inside the cell", kern.get("inside_cpu")),
            ("CPU time: plain runtime (this process)", kern.get("plain_cpu"))]
    for label, xs in rows:
        if xs:
            m, lo, hi = stats(xs)
            print(f"{label:<50} {ms(m):>8.0f} {ms(lo):>8.0f} {ms(hi):>8.0f} {ms(m) / STEPS:>9.1f}")
    cold_inside = kern.get("cold_inside")
    print(f"{'first run, cold: kernel (client side)':<50} {ms(kern['cold']):>8.0f}"
          + (f"   (inside: {ms(cold_inside):.0f})" if cold_inside else ""))
    print(f"{'first run, cold: plain runtime':<50} {ms(kern['plain_cold']):>8.0f}")
    print()
    k_med, p_med = statistics.median(kern["client"]), statistics.median(kern["plain"])
    paired = [c / p for c, p in zip(kern["client"], kern["plain"], strict=True)]
    print(f"ratio kernel/plain (client-side medians): {k_med / p_med:.2f}  (paired runs: median "
          f"{statistics.median(paired):.2f}, min {min(paired):.2f}, max {max(paired):.2f})")
    if kern["inside"]:
        i_med = statistics.median(kern["inside"])
        print(f"ratio kernel/plain (inside the kernel):   {i_med / p_med:.2f}")
    print(f"Jupyter layer per step: (kernel - plain) / {STEPS} = {ms(k_med - p_med) / STEPS:.1f} ms "
          f"({ms(k_med - p_med):.0f} ms a run)")
    if kern.get("inside_cpu") and kern.get("plain_cpu"):
        kc, pc = statistics.median(kern["inside_cpu"]), statistics.median(kern["plain_cpu"])
        print(f"in CPU time (less sensitive to other load on the machine): kernel/plain {kc / pc:.2f}, "
              f"{ms(kc - pc) / STEPS:.1f} ms a step ({ms(kc - pc):.0f} ms a run; the kernel's figure includes its "
              "iopub and heartbeat threads)")
    if kern["inside"]:
        print(f"messaging outside the cell (client - inside, median of runs): "
              f"{ms(statistics.median(c - i for c, i in zip(kern['client'], kern['inside'], strict=False))):.1f} ms")
    print("iopub messages per run: " + ", ".join(f"{t} {n:g}" for t, n in kern["per_run"].items()))
    alive = Counter(kern["alive"])
    print(f"widgets still open in the kernel after its {kern['runs_done']} runs: "
          + (", ".join(f"{n} {t}" for t, n in sorted(alive.items())) or "none")
          + f" (the client holds {len(kern['client_widgets'])} widget models)")

    load_med = ms(statistics.median(load["loads"]))
    ok_time = load_med < LOAD_TARGET_MS
    ok_mods = not load["forbidden"]
    print()
    print(f"target: %load_ext nbagent median {load_med:.0f} ms < {LOAD_TARGET_MS:.0f} ms: "
          f"{'PASS' if ok_time else 'FAIL'}")
    print(f"target: no litellm/anywidget/ipywidgets import at load: {'PASS' if ok_mods else 'FAIL'}")
    problems = load["stderr"] + kern["problems"]
    for p in problems:
        print(f"PROBLEM: {p[:500]}")

    if profile:
        print()
        if kern.get("profile") and Path(kern["profile"]).exists():
            print(f"Profiled kernel run ({ms(kern['profile_s']):.0f} ms client side under cProfile; cumulative "
                  "times on the kernel's main thread, tool threads not included):")
            rows = layer_breakdown(kern["profile"])
            for label, calls, cum in rows:
                if calls:
                    print(f"  {label:<60} {calls:>6} calls {ms(cum):>8.1f} ms")
            print(f"  {'host run_cell minus Agent.run':<60} {'':>12} {ms(rows[0][2] - rows[1][2]):>8.1f} ms")
            if kern.get("parts"):
                print()
                print(f"The same parts timed by wrappers (perf_counter, no profiler), per run, mean of "
                      f"{INSTRUMENTED_RUNS} more runs:")
                for label, _, qualname in PARTS:
                    if qualname not in kern["parts"]:
                        print(f"  {label:<60} (not found: {qualname})")
                        continue
                    calls, total = kern["parts"][qualname]
                    print(f"  {label:<60} {calls / INSTRUMENTED_RUNS:>6.1f} calls "
                          f"{ms(total) / INSTRUMENTED_RUNS:>8.1f} ms")
                cell_t = kern["parts"].get("NotebookHost.run_cell", [0, 0.0])[1]
                run_t = kern["parts"].get("Agent.run", [0, 0.0])[1]
                print(f"  {'NotebookHost.run_cell minus Agent.run':<60} {'':>12} "
                      f"{ms(cell_t - run_t) / INSTRUMENTED_RUNS:>8.1f} ms")
                print()
            print_profile(kern["profile"], "kernel run: the Jupyter layer's functions (nbagent.ipython, "
                          "nbagent.ui, ipykernel, comm, jupyter_client, anywidget, traitlets)", 25, JUPYTER_FILES)
        if kern.get("plain_profile") and Path(kern["plain_profile"]).exists():
            print_profile(kern["plain_profile"], "plain runtime run, for comparison", 15)
        print()


if __name__ == "__main__":
    sys.exit(main())
