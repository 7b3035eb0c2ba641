"""Runtime benchmark: the agent loop's own overhead per tool step, and its memory over a long run.

Run from the repository root:

    python bench/runtime_bench.py              # 1,000 tool steps (about 3 min on 2 cores, 2.5 of them tracemalloc)
    python bench/runtime_bench.py --quick      # 200 steps, a smoke run (about 20 s)
    python bench/runtime_bench.py --steps 3000
    python bench/runtime_bench.py --no-memory  # timing only, skips the slow tracemalloc run
    python bench/runtime_bench.py --profile    # also print a cProfile of one more run
    python bench/runtime_bench.py --what-if schema-cache,no-b64-scan   # try a suggested fix (see WHAT_IF)

Workload: `Agent(script=...)` with a script of N turns, each one call of a no-op tool (`noop(i)`, READ_ONLY,
autonomy L3, so no plan and no approval), then a final text turn; no step or model-call budget. The scripted
model is called directly (`nbagent.models.llm.complete` -> `nbagent.models.provider.local_completion`); with
`--what-if via-litellm` it goes through litellm as it did before the offline path (`litellm.acompletion` -> our
custom provider), and the tool, a sync function, runs in a worker thread (`asyncio.to_thread`). A 20-step warm-up run
comes first (imports, caches, the executor's threads).

What is timed, in one process and one event loop (`perf_counter`; the garbage collector stays on):

- every `nbagent.models.llm.complete` call (model time), and inside it `litellm.acompletion` and our offline
  provider's `acompletion`, so litellm's own per-call time can be shown;
- every `Agent._call_tool` call (tool time: tenacity's retry wrapper, `asyncio.wait_for`, the worker thread);
- every slice of every asyncio task whose coroutine is litellm's (a task factory wraps them): litellm logs each
  call in background tasks (`GLOBAL_LOGGING_WORKER` -> `async_success_handler`) that run on our event loop
  whenever it would otherwise wait, mostly while the tool's thread runs;
- `Store.append`, `Store.run_state` and garbage collections (`gc.callbacks`), to break the overhead down.

A step is one tool step plus the next model turn: from the return of model call k (the turn asking for tool
call k) to the return of model call k+1. Per step:

    loop overhead (nbagent) = wall - (model - litellm background inside it) - (tool - background inside it)
                              - all litellm background in the step
    naive overhead          = wall - model - tool   (counts litellm's background work as overhead only when
                              it runs outside the model and tool calls)

The bench's own bookkeeping at sample points (memory reads, progress lines) is timed and subtracted.

Memory: a second run of N steps with tracemalloc on (it slows allocation down ~6x, so it is never the timed
run). Every N/10 steps, after `gc.collect()`: traced memory, RSS, and the deep size (`sys.getsizeof` over the
object graph) of what the store holds for the run: the EventLog's raw events and indexes, and the folded
RunState. "Flat" means the growth per step does not increase: traced growth per step over steps N/2..N divided
by that over N/10..N/2 is at most 1.5. Some linear growth is expected: the log and the conversation grow. The
traced growth per step is also printed against the bytes the log grows per step on disk (issue 16: no growth per
step beyond the log itself, i.e. a ratio of at most 1).

Baseline, same process: N direct `await noop.call({"i": k})`, and the run's own step records (tool_call_started,
tool_call_completed, llm_called) appended again by `Store.append` to a fresh store, 3 per step.

`--what-if` patches the process before the runs (nbagent's files are untouched) to measure a suggested change
or a control; the header then says the numbers are not those of the shipped code. See WHAT_IF.

Targets: loop overhead p50 and p99 under 2 ms per step; memory growth ratio at most 1.5. The bench reports and
never fails: PASS/FAIL is printed and the exit status is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections.abc
import cProfile
import dataclasses
import gc
import io
import math
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
import tracemalloc
import types
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import nbagent.models.llm
import nbagent.runtime
from nbagent.events.model import LlmCalled, ToolCallCompleted, ToolCallStarted
from nbagent.gate.deciders import PolicyDecider
from nbagent.gate.policy import Budget
from nbagent.runtime import Agent
from nbagent.store import Store
from nbagent.tools.base import tool

DEFAULT_STEPS = 1_000
QUICK_STEPS = 200
WARMUP_STEPS = 20
TARGET_MS = 2.0  # loop overhead per step, p50 and p99, under (the first targets)
TARGET_P50_MS = 0.5  # issue 16: loop overhead p50 at most
TARGET_P99_MS = 2.0  # issue 16: loop overhead p99 at most
TARGET_FLAT = 1.2  # issue 16: loop overhead p50, last tenth of the run / first tenth, at most
TARGET_GROWTH = 1.5  # memory growth per step, second half / first half, at most

WHAT_IF = {
    "schema-cache": "Tool.schema() computed once per tool (the loop rebuilds every JSON schema every model turn)",
    "no-b64-scan": "MAX_BASE64_LENGTH_FOR_LOGGING=0 before litellm is imported (its logging task then skips the "
                   "walk over every message)",
    "gc-freeze": "gc.freeze() after importing litellm (full collections skip the import's objects)",
    "short-context": "control, not a fix: litellm gets only the first two and the last two messages (the scripted "
                     "model ignores them), so its work per call stays constant",
    "via-litellm": "NBAGENT_LOCAL_VIA_LITELLM=1: the scripted model's calls go through litellm, as before the "
                   "offline path (the baseline of that change)",
}

perf = time.perf_counter
_T0 = perf()


def progress(msg: str) -> None:
    print(f"[{perf() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


@tool(risk="READ_ONLY")
def noop(i: int) -> str:
    """Do nothing."""
    return "ok"


def make_agent(root: Path, n: int) -> Agent:
    root.mkdir(parents=True, exist_ok=True)
    turns: list[dict[str, Any]] = [{"tool_calls": [{"name": "noop", "arguments": {"i": k}}]} for k in range(n)]
    script = {"turns": [*turns, {"content": "done"}]}
    return Agent(script=script, tools=[noop], decider=PolicyDecider("all"), store=root / "nb.ipynb",
                 budget=Budget(max_steps=None, max_model_calls=None), autonomy="L3")


# --------------------------------------------------------------------------------------------- recording

Interval = tuple[float, float]


@dataclasses.dataclass
class Sample:
    step: int
    rss: int | None
    traced: int | None = None
    log_bytes: int | None = None  # deep size of the store's EventLog (raw events + indexes)
    state_bytes: int | None = None  # deep size of the store's folded RunStates


@dataclasses.dataclass
class Recorder:
    """What one instrumented run recorded: intervals in perf_counter seconds, and memory samples."""

    n_steps: int
    sample_every: int
    memory_run: bool = False  # samples only, no intervals (they would show up as growth)
    store: Store | None = None
    model_calls: int = 0
    complete: list[Interval] = dataclasses.field(default_factory=list)
    acompletion: list[Interval] = dataclasses.field(default_factory=list)
    provider: list[Interval] = dataclasses.field(default_factory=list)
    tool: list[Interval] = dataclasses.field(default_factory=list)
    background: list[Interval] = dataclasses.field(default_factory=list)
    append: list[Interval] = dataclasses.field(default_factory=list)
    run_state: list[Interval] = dataclasses.field(default_factory=list)
    gc: list[tuple[float, float, int]] = dataclasses.field(default_factory=list)  # start, end, generation
    bookkeeping: dict[int, float] = dataclasses.field(default_factory=dict)  # model call index -> seconds
    samples: list[Sample] = dataclasses.field(default_factory=list)

    def sample(self, step: int) -> None:
        s = Sample(step, rss_bytes())
        if self.memory_run:
            gc.collect()
            s.traced = tracemalloc.get_traced_memory()[0]
            s.rss = rss_bytes()
            if self.store is not None:
                s.log_bytes = deep_size(self.store._log)
                s.state_bytes = deep_size(self.store._states)
        self.samples.append(s)
        mem = f", traced {s.traced / 1e6:.1f} MB" if s.traced is not None else ""
        progress(f"  step {step:,}/{self.n_steps:,}{mem}, RSS {(s.rss or 0) / 1e6:.0f} MB")


class _Current:
    rec: Recorder | None = None


CURRENT = _Current()


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


_OPAQUE = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)


def deep_size(root: Any) -> int:
    """Bytes of the object graph under `root` (containers, __dict__s, __slots__-less objects), each counted once."""
    seen: set[int] = set()
    todo = [root]
    total = 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            todo.extend(obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, str | bytes | int | float):
            todo.append(vars(obj))
    return total


class _TimedCoro(collections.abc.Coroutine):  # type: ignore[type-arg]
    """Wraps a task's coroutine and records the wall time of every slice the event loop runs it for."""

    __slots__ = ("_coro",)

    def __init__(self, coro: Any) -> None:
        self._coro = coro

    def send(self, value: Any) -> Any:
        t0 = perf()
        try:
            return self._coro.send(value)
        finally:
            _background_slice(t0)

    def throw(self, *args: Any) -> Any:
        t0 = perf()
        try:
            return self._coro.throw(*args)
        finally:
            _background_slice(t0)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Any:
        return self

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        return self.send(None)


def _background_slice(t0: float) -> None:
    rec = CURRENT.rec
    if rec is not None and not rec.memory_run:
        rec.background.append((t0, perf()))


def task_factory(loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> asyncio.Task[Any]:
    """Time the tasks litellm starts (its logging worker); every other task is left alone."""
    code = getattr(coro, "cr_code", None)
    if code is not None and f"{os.sep}litellm{os.sep}" in code.co_filename:
        coro = _TimedCoro(coro)
    return asyncio.Task(coro, loop=loop, context=context)


def _timed_async(fn: Callable[..., Any], attr: str, hook: Callable[[Recorder], None] | None = None
                 ) -> Callable[..., Any]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = CURRENT.rec
        if hook is not None and rec is not None:
            hook(rec)
        if rec is None or rec.memory_run:
            return await fn(*args, **kwargs)
        t0 = perf()
        try:
            return await fn(*args, **kwargs)
        finally:
            getattr(rec, attr).append((t0, perf()))

    return wrapper


def _timed_sync(fn: Callable[..., Any], attr: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = CURRENT.rec
        if rec is None or rec.memory_run:
            return fn(*args, **kwargs)
        t0 = perf()
        try:
            return fn(*args, **kwargs)
        finally:
            getattr(rec, attr).append((t0, perf()))

    return wrapper


_gc_started = [0.0]


def _gc_callback(phase: str, info: dict[str, Any]) -> None:
    rec = CURRENT.rec
    if rec is None or rec.memory_run:
        return
    if phase == "start":
        _gc_started[0] = perf()
    else:
        rec.gc.append((_gc_started[0], perf(), int(info.get("generation", -1))))


def _before_model_call(rec: Recorder) -> None:
    """At model call i (after i tool steps): a memory sample every `sample_every` steps, timed and excluded."""
    i = rec.model_calls
    rec.model_calls += 1
    if rec.sample_every and i % rec.sample_every == 0:
        t0 = perf()
        rec.sample(i)
        rec.bookkeeping[i] = perf() - t0


def instrument(what_if: set[str]) -> None:
    """Install the timing wrappers (they record only while CURRENT.rec is set), and any --what-if patches."""
    import nbagent.models.provider as provider
    from nbagent.tools.base import Tool

    if "via-litellm" in what_if:
        os.environ["NBAGENT_LOCAL_VIA_LITELLM"] = "1"
    through_litellm = nbagent.models.llm.via_litellm()
    if "no-b64-scan" in what_if:
        os.environ["MAX_BASE64_LENGTH_FOR_LOGGING"] = "0"
    litellm = None
    if through_litellm:
        # first: it sets litellm's environment (local cost map) before import
        litellm = nbagent.models.llm.import_litellm()
        provider.ensure_registered()
    if "gc-freeze" in what_if:
        gc.collect()
        gc.freeze()
    if "schema-cache" in what_if:
        build_schema = Tool.schema
        schemas: dict[int, dict[str, Any]] = {}

        def cached_schema(self: Tool) -> dict[str, Any]:
            if id(self) not in schemas:
                schemas[id(self)] = build_schema(self)
            return schemas[id(self)]

        Tool.schema = cached_schema  # type: ignore[method-assign]
    # the module whose `complete` the loop calls (nbagent.runtime.loop; nbagent.runtime itself before the split)
    calls_model = getattr(nbagent.runtime, "loop", nbagent.runtime)
    complete = calls_model.complete
    if "short-context" in what_if:
        shipped = complete

        async def short_complete(settings: Any, messages: list[dict[str, Any]], tools: Any, **kwargs: Any) -> Any:
            return await shipped(settings, messages[:2] + messages[2:][-2:], tools, **kwargs)

        complete = short_complete
    calls_model.complete = _timed_async(complete, "complete", _before_model_call)
    Agent._call_tool = _timed_async(Agent._call_tool, "tool")  # type: ignore[method-assign]
    Store.append = _timed_sync(Store.append, "append")  # type: ignore[method-assign]
    Store.run_state = _timed_sync(Store.run_state, "run_state")  # type: ignore[method-assign]
    if litellm is not None:
        litellm.acompletion = _timed_async(litellm.acompletion, "acompletion")
        handler = next(p["custom_handler"] for p in litellm.custom_provider_map
                       if p.get("provider") == provider.PROVIDER)
        handler.acompletion = _timed_async(handler.acompletion, "provider")
    else:  # the offline path: llm.complete calls provider.local_completion (looked up at each call)
        provider.local_completion = _timed_async(provider.local_completion, "provider")  # type: ignore[assignment]
    gc.callbacks.append(_gc_callback)


# --------------------------------------------------------------------------------------------- analysis


class Intervals:
    """Sorted, non-overlapping intervals; total overlap with a window by bisection."""

    def __init__(self, items: list[Interval]) -> None:
        self.items = sorted(items)
        self.starts = [a for a, _ in self.items]

    def overlap(self, lo: float, hi: float) -> float:
        i = max(0, bisect.bisect_left(self.starts, lo) - 1)
        total = 0.0
        while i < len(self.items) and self.items[i][0] < hi:
            a, b = self.items[i]
            total += max(0.0, min(b, hi) - max(a, lo))
            i += 1
        return total


ROWS = {
    "wall": "step wall time",
    "model": "model: nbagent.models.llm.complete",
    "litellm": "  litellm.acompletion, its own part",
    "provider": "  our offline provider (scripted model)",
    "llm_py": "  llm.py around it (kwargs, parse, cost)",
    "tool": "tool: Agent._call_tool",
    "background": "litellm background logging tasks",
    "overhead": "LOOP OVERHEAD (nbagent)",
    "append": "  of which Store.append (3 calls)",
    "run_state": "  of which Store.run_state (8 calls)",
    "gc_loop": "  of which garbage collection",
    "naive": "naive overhead: wall - complete - _call_tool",
    "gc_all": "garbage collection, anywhere in the step",
}


def analyse(rec: Recorder, n: int) -> dict[str, list[float]]:
    """Per-step components in milliseconds (see the module docstring for the definitions)."""
    assert len(rec.complete) == n + 1, f"expected {n + 1} model calls, recorded {len(rec.complete)}"
    bg, tools = Intervals(rec.background), Intervals(rec.tool)
    # without litellm (the offline path) the provider is called by llm.complete itself
    acomp, prov = Intervals(rec.acompletion or rec.provider), Intervals(rec.provider)
    appends, states = Intervals(rec.append), Intervals(rec.run_state)
    gcs = Intervals([(a, b) for a, b, _ in rec.gc])
    out: dict[str, list[float]] = {c: [] for c in ROWS}
    for k in range(n):
        w0, w1 = rec.complete[k][1], rec.complete[k + 1][1]
        m0, m1 = rec.complete[k + 1]
        in_step = [t for t in tools.items[bisect.bisect_left(tools.starts, w0):] if t[0] < m0]
        assert len(in_step) == 1, f"step {k}: {len(in_step)} tool calls"
        t0, t1 = in_step[0]
        wall = w1 - w0 - rec.bookkeeping.get(k + 1, 0.0)
        model, tool_t = m1 - m0, t1 - t0
        bg_model, bg_tool, bg_all = bg.overlap(m0, m1), bg.overlap(t0, t1), bg.overlap(w0, w1)
        row = {
            "wall": wall,
            "model": model - bg_model,
            "litellm": acomp.overlap(m0, m1) - prov.overlap(m0, m1) - bg_model,
            "provider": prov.overlap(m0, m1),
            "llm_py": model - acomp.overlap(m0, m1),
            "tool": tool_t - bg_tool,
            "background": bg_all,
            "overhead": wall - (model - bg_model) - (tool_t - bg_tool) - bg_all,
            "append": appends.overlap(w0, w1),
            "run_state": states.overlap(w0, w1),
            "gc_loop": gcs.overlap(w0, w1) - gcs.overlap(m0, m1) - gcs.overlap(t0, t1),
            "naive": wall - model - tool_t,
            "gc_all": gcs.overlap(w0, w1),
        }
        for c in ROWS:
            out[c].append(row[c] * 1e3)
    return out


def pct(samples: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100.0 * len(s)) - 1))]


def fmt(v: float) -> str:
    return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"


# --------------------------------------------------------------------------------------------- the runs


async def run_agent(root: Path, n: int, rec: Recorder | None) -> tuple[Agent, Any, float]:
    agent = make_agent(root, n)
    if rec is not None:
        rec.store = agent.store
    gc.collect()
    CURRENT.rec = rec
    t0 = perf()
    try:
        result = await agent.run("go")
    finally:
        CURRENT.rec = None
    elapsed = perf() - t0
    if result.status.value != "completed" or result.steps != n:
        raise SystemExit(f"the run did not complete as scripted: {result.status.value}, {result.steps} steps, "
                         f"error {result.error!r}")
    return agent, result, elapsed


async def baseline(store: Store, run_id: str, n: int, root: Path) -> dict[str, list[float]]:
    """N direct tool calls, and the run's step records appended again to a fresh store (ms)."""
    calls: list[float] = []
    for k in range(n):
        t0 = perf()
        await noop.call({"i": k})
        calls.append((perf() - t0) * 1e3)
    events = store.run_events(run_id)
    llm = [e.payload for e in events if isinstance(e.payload, LlmCalled)]
    started = [e.payload for e in events if isinstance(e.payload, ToolCallStarted)]
    done = [e.payload for e in events if isinstance(e.payload, ToolCallCompleted)]
    fresh = Store(root / "baseline.nbagent")
    run = fresh.create_run(fresh.session("default").id, "go", model="nbagent/scripted")
    fresh.append(llm[0], run_id=run.id)
    one: list[float] = []
    three: list[float] = []
    gc.collect()
    for k in range(n):
        t_step = perf()
        for payload in (started[k], done[k], llm[k + 1]):
            t0 = perf()
            fresh.append(payload, run_id=run.id)
            one.append((perf() - t0) * 1e3)
        three.append((perf() - t_step) * 1e3)
    fresh.close()
    return {"tool_call": calls, "append": one, "append3": three}


async def profiled(root: Path, n: int) -> str:
    """One more run under cProfile: nbagent's functions by cumulative time, then everything by own time."""
    agent = make_agent(root, n)
    prof = cProfile.Profile()
    prof.enable()
    try:
        await agent.run("go")
    finally:
        prof.disable()
        agent.store.close()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(r"nbagent[/\\]", 30)
    stats.sort_stats("tottime").print_stats(20)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------- report


def report_timing(n: int, rec: Recorder, rows: dict[str, list[float]], info: dict[str, Any]) -> None:
    print()
    elapsed = info["elapsed"]
    print(f"Timed run: {n:,} tool steps + 1 final turn in {elapsed:.2f} s ({n / elapsed:,.0f} steps/s), "
          f"{info['events']:,} events, log {info['log_bytes'] / 1e6:.2f} MB.")
    print("A step = one no-op tool call + the next model turn, from the return of model call k to the return of")
    print("model call k+1. Loop overhead = wall - model - tool - litellm background (see the module docstring).")
    print()
    w = max(len(v) for v in ROWS.values())
    hdr = f"{'per step, ms':<{w}} | {'p50':>8} {'p99':>8} {'mean':>8} {'max':>8} | {'total s':>8}"
    print(hdr)
    print("-" * len(hdr))
    for key, label in ROWS.items():
        v = rows[key]
        print(f"{label:<{w}} | {fmt(pct(v, 50)):>8} {fmt(pct(v, 99)):>8} {fmt(statistics.fmean(v)):>8} "
              f"{fmt(max(v)):>8} | {sum(v) / 1e3:>8.2f}")
    print(f"(per step: {len(rec.append) / (n + 1):.1f} Store.append and {len(rec.run_state) / (n + 1):.1f} "
          "Store.run_state calls, each wrapped by a timer)")
    bg_total = sum(rows["background"])
    if bg_total > 0:
        bg = Intervals(rec.background)
        in_tool = sum(bg.overlap(a, b) for a, b in rec.tool) * 1e3
        in_model = sum(bg.overlap(a, b) for a, b in rec.complete) * 1e3
        elsewhere = max(0.0, 1 - (in_tool + in_model) / bg_total)
        print(f"litellm background ran {in_tool / bg_total:.0%} inside the tool call (while its thread runs), "
              f"{in_model / bg_total:.0%} inside model calls, {elsewhere:.0%} elsewhere.")
    gen2 = [(b - a) * 1e3 for a, b, g in rec.gc if g == 2]
    counts = [sum(1 for *_, g in rec.gc if g == gen) for gen in (0, 1, 2)]
    print(f"garbage collections: {counts[0]:,} gen-0, {counts[1]:,} gen-1, {counts[2]:,} gen-2"
          + (f" (gen-2 median {statistics.median(gen2):.0f} ms, max {max(gen2):.0f} ms; "
             f"{info['gc_objects']:,} objects tracked before the run)" if gen2 else ""))
    print(f"CPU: main thread {info['cpu_main']:.1f} s, other threads {info['cpu_other']:.1f} s (litellm.acompletion "
          "runs litellm.completion in the\n     loop's default executor, as the tool's thread does)")

    print()
    blocks = 10
    size = n // blocks
    print(f"By block of {size} steps, p50 ms: loop overhead | Store.append | model | litellm background | wall")
    for b in range(blocks):
        lo, hi = b * size, (b + 1) * size
        cells = " | ".join(f"{pct(rows[c][lo:hi], 50):7.3f}" for c in ("overhead", "append", "model", "background"))
        print(f"  steps {lo + 1:>5}-{hi:<5} {cells} | {pct(rows['wall'][lo:hi], 50):7.2f}")


def report_baseline(n: int, rows: dict[str, list[float]], base: dict[str, list[float]]) -> None:
    print()
    print("Baseline, same process, ms:")
    print(f"  {'':<46} {'p50':>8} {'p99':>8} {'mean':>8}")
    for key, label in (("tool_call", f"await noop.call(...) directly, x{n:,}"),
                       ("append", f"Store.append, one event, x{3 * n:,}"),
                       ("append3", f"Store.append x3 (one step's records), x{n:,}")):
        v = base[key]
        print(f"  {label:<46} {fmt(pct(v, 50)):>8} {fmt(pct(v, 99)):>8} {fmt(statistics.fmean(v)):>8}")
    ov50, a3 = pct(rows["overhead"], 50), pct(base["append3"], 50)
    print("Ratios (p50):")
    print(f"  loop overhead / 3 direct appends               {ov50 / a3:7.2f}x")
    print(f"  Store.append x3 in the loop / 3 direct appends {pct(rows['append'], 50) / a3:7.2f}x")
    tool_ratio = pct(rows["tool"], 50) / pct(base["tool_call"], 50)
    print(f"  Agent._call_tool / direct tool.call            {tool_ratio:7.2f}x")
    print(f"  model call / loop overhead                     {pct(rows['model'], 50) / ov50:7.2f}x")


def per_step(samples: list[Sample], field: str, a: int, b: int) -> float | None:
    by_step = {s.step: getattr(s, field) for s in samples}
    va, vb = by_step.get(a), by_step.get(b)
    return None if va is None or vb is None or b <= a else (vb - va) / (b - a)


def report_memory(n: int, every: int, rec: Recorder, mem: dict[str, Any]) -> float | None:
    """Print the memory part; returns the growth ratio (second half / first half), if measurable."""
    mrec: Recorder = mem["rec"]
    print()
    print(f"Memory: a second {n:,}-step run with tracemalloc ({mem['elapsed']:.0f} s); gc.collect() before each "
          "sample. MB:")
    print(f"  {'step':>6} {'traced':>8} {'EventLog':>9} {'RunState':>9} {'RSS':>7} | {'RSS, timed run':>14}")
    timed_rss = {s.step: s.rss for s in rec.samples}
    for s in mrec.samples:
        t_rss = timed_rss.get(s.step)
        print(f"  {s.step:>6} {(s.traced or 0) / 1e6:>8.2f} {(s.log_bytes or 0) / 1e6:>9.2f} "
              f"{(s.state_bytes or 0) / 1e6:>9.2f} {(s.rss or 0) / 1e6:>7.1f} | "
              f"{(t_rss or 0) / 1e6 if t_rss is not None else float('nan'):>14.1f}")
    a, mid, end = every, (n // 2 // every) * every, n
    print(f"  growth, bytes per step:           steps {a}-{mid}   steps {mid}-{end}")
    ratio = None
    for field, label in (("traced", "traced (everything)"), ("log_bytes", "store EventLog (raw events)"),
                         ("state_bytes", "store RunState (conversation)"), ("rss", "RSS (for information)")):
        g1, g2 = per_step(mrec.samples, field, a, mid), per_step(mrec.samples, field, mid, end)
        if g1 is None or g2 is None:
            continue
        print(f"  {label:<32} {g1:>12,.0f} {g2:>14,.0f}")
        if field == "traced" and g1 > 0:
            ratio = g2 / g1
    g_t = per_step(mrec.samples, "traced", a, end) or 0.0
    g_l = per_step(mrec.samples, "log_bytes", a, end) or 0.0
    g_s = per_step(mrec.samples, "state_bytes", a, end) or 0.0
    print(f"  over steps {a}-{end}: {g_t:,.0f} B/step traced, of which the EventLog ~{g_l:,.0f} and the RunState "
          f"~{g_s:,.0f} (deep sizes),\n  the rest ~{g_t - g_l - g_s:,.0f} (litellm's copies of the latest request, "
          "allocator overhead)")
    log_per_step = mem["log_file"] / max(1, n)
    late = (per_step(mrec.samples, "traced", mid, end) or 0.0) / log_per_step
    print(f"  the log on disk grows {log_per_step:,.0f} B/step: traced growth / log = {g_t / log_per_step:.2f} over "
          f"steps {a}-{end}, {late:.2f} over steps {mid}-{end}\n"
          "  (at most 1: no growth per step beyond the log itself; the store's parse cache is bounded, the run's "
          "folded state is its conversation)")
    print(f"  at the end the store holds {mem['docs']:,} raw events ({mem['log_file'] / mem['docs']:,.0f} B a line "
          f"on disk) and the run state\n  {mem['turns']:,} conversation messages")
    return ratio


def report_verdict(rows: dict[str, list[float]], ratio: float | None, memory: bool) -> None:
    print()
    print("Verdict against the targets:")
    ov50, ov99 = pct(rows["overhead"], 50), pct(rows["overhead"], 99)
    print(f"  loop overhead p50 {ov50:6.3f} ms < {TARGET_MS:g} ms    {'PASS' if ov50 < TARGET_MS else 'FAIL'}")
    print(f"  loop overhead p99 {ov99:6.3f} ms < {TARGET_MS:g} ms    {'PASS' if ov99 < TARGET_MS else 'FAIL'}")
    first, last = (pct(rows["overhead"][lo:hi], 50) for lo, hi in
                   ((0, max(1, len(rows["overhead"]) // 10)), (len(rows["overhead"]) - len(rows["overhead"]) // 10,
                                                             len(rows["overhead"]))))
    flat = last / first if first > 0 else float("inf")
    print(f"  issue 16: loop overhead p50 {ov50:6.3f} ms <= {TARGET_P50_MS:g} ms    "
          f"{'PASS' if ov50 <= TARGET_P50_MS else 'FAIL'}")
    print(f"  issue 16: loop overhead p99 {ov99:6.3f} ms <= {TARGET_P99_MS:g} ms    "
          f"{'PASS' if ov99 <= TARGET_P99_MS else 'FAIL'}")
    print(f"  issue 16: flat, p50 last tenth / first tenth {last:.3f} / {first:.3f} = {flat:.2f} <= {TARGET_FLAT:g}    "
          f"{'PASS' if flat <= TARGET_FLAT else 'FAIL'}")
    if not memory:
        print("  memory: not measured (--no-memory)")
    elif ratio is None:
        print("  memory growth ratio: not measurable (no growth over the first half)")
    else:
        print(f"  memory growth per step, 2nd half / 1st half {ratio:.2f} <= {TARGET_GROWTH:g}    "
              f"{'PASS' if ratio <= TARGET_GROWTH else 'FAIL'}")
    print(f"  (information) naive overhead p50 {pct(rows['naive'], 50):.3f} ms, p99 {pct(rows['naive'], 99):.3f} ms;"
          f" step wall p50 {pct(rows['wall'], 50):.2f} ms, p99 {pct(rows['wall'], 99):.1f} ms")


# --------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"tool steps per run (default {DEFAULT_STEPS})")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps (a smoke run)")
    ap.add_argument("--no-memory", action="store_true", help="skip the (slow) tracemalloc run")
    ap.add_argument("--profile", action="store_true", help="also profile one more run with cProfile and print it")
    ap.add_argument("--durability", choices=("checkpoint", "step", "event"),
                    help="the store's fsync setting (NBAGENT_DURABILITY); default: checkpoint")
    ap.add_argument("--what-if", default="", help=f"comma-separated patches to measure: {', '.join(WHAT_IF)}")
    args = ap.parse_args(argv)
    n = QUICK_STEPS if args.quick else args.steps
    if n < 20:
        ap.error("--steps must be at least 20")
    if args.durability:
        os.environ["NBAGENT_DURABILITY"] = args.durability
    what_if = {w.strip() for w in args.what_if.split(",") if w.strip()}
    if what_if - set(WHAT_IF):
        ap.error(f"unknown --what-if {sorted(what_if - set(WHAT_IF))}; choose from {', '.join(WHAT_IF)}")
    return asyncio.run(amain(n, max(1, n // 10), memory=not args.no_memory, profile=args.profile, what_if=what_if))


async def amain(n: int, every: int, *, memory: bool, profile: bool, what_if: set[str]) -> int:
    asyncio.get_running_loop().set_task_factory(task_factory)
    print("nbagent runtime benchmark (bench/runtime_bench.py)")
    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} cpus; "
          f"litellm {version('litellm')}, pydantic {version('pydantic')}; {n:,} tool steps; store durability "
          f"{os.environ.get('NBAGENT_DURABILITY') or 'checkpoint'}")
    for w in sorted(what_if):
        print(f"WHAT-IF {w}: {WHAT_IF[w]}. Not the shipped behaviour.")
    progress("instrumenting (importing litellm only for --what-if via-litellm)")
    instrument(what_if)
    info: dict[str, Any] = {}
    mem: dict[str, Any] = {}
    prof_text = ""
    with tempfile.TemporaryDirectory(prefix="nbagent-rt-bench-") as tmp:
        root = Path(tmp)
        progress(f"warm-up run ({WARMUP_STEPS} steps)")
        agent, _, _ = await run_agent(root / "warmup", WARMUP_STEPS, None)
        agent.store.close()

        progress(f"timed run: {n:,} steps")
        rec = Recorder(n_steps=n, sample_every=every)
        info["gc_objects"] = len(gc.get_objects())
        cpu0, main0 = time.process_time(), time.thread_time()
        agent, result, info["elapsed"] = await run_agent(root / "timed", n, rec)
        info["cpu_main"] = time.thread_time() - main0
        info["cpu_other"] = time.process_time() - cpu0 - info["cpu_main"]
        rows = analyse(rec, n)
        info["log_bytes"] = agent.store.events_path.stat().st_size
        info["events"] = len(agent.store.run_events(result.run_id))
        progress(f"timed run: {info['elapsed']:.1f} s; loop overhead p50 {pct(rows['overhead'], 50):.3f} ms")

        progress(f"baseline: {n:,} direct tool calls, {3 * n:,} direct appends")
        base = await baseline(agent.store, result.run_id, n, root)
        agent.store.close()
        del agent

        if memory:
            progress(f"memory run: {n:,} steps with tracemalloc (slow)")
            tracemalloc.start()
            mrec = Recorder(n_steps=n, sample_every=every, memory_run=True)
            magent, mresult, melapsed = await run_agent(root / "memory", n, mrec)
            tracemalloc.stop()
            mem = {"rec": mrec, "elapsed": melapsed, "docs": magent.store._log.count(),
                   "turns": len(magent.store.run_state(mresult.run_id).messages),
                   "log_file": magent.store.events_path.stat().st_size}
            magent.store.close()
            progress(f"memory run: {melapsed:.1f} s")

        if profile:
            progress(f"profiled run: {n:,} steps under cProfile")
            prof_text = await profiled(root / "profiled", n)

    report_timing(n, rec, rows, info)
    report_baseline(n, rows, base)
    ratio = report_memory(n, every, rec, mem) if mem else None
    report_verdict(rows, ratio, memory)
    if prof_text:
        print()
        print("cProfile of one more run (times inflated by the profiler):")
        print(prof_text)
    progress("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
