"""Store benchmark: append latency against log size, against TinyDB's default JSON storage as a baseline.

Run from the repository root:

    python bench/store_bench.py            # 100, 1k, 10k, 100k events (about 90 s on 2 cores)
    python bench/store_bench.py --quick    # up to 10k only, a smoke run

What it does, in one process:

1. Fills a store by appending for real: runs of ~200 events (thinking, tool call started and completed, model
   calls; 400-800 bytes a line), each opened by `create_run` and closed by a `completed` checkpoint; every 10th
   event of the fill goes to one long run instead, so that run holds a tenth of the log (the query test).
2. At each size N, times K single non-durable appends (the kinds a run writes between checkpoints), each with
   `perf_counter_ns`. The events continue the current run. A timed batch never grows the log by more than a
   fifth: for small N it is split into rounds, each on a fresh copy of the store at exactly N events.
   Each round starts with one untimed warm-up append (a kernel keeps its store open; this measures that).
3. Does the same for TinyDB's default storage (`TinyDB(path)`, `table.insert(doc)`) with the same documents
   (the store's own log lines), the file written directly at N documents.
4. At the largest size: durable appends (fsync), checkpoint appends, appends to the long run, one run's events
   by index and by TinyDB Query scan, and reopening the store read-only.

The garbage collector stays enabled (real numbers); `gc.collect()` runs before every timed batch. The bench
reports and never fails: PASS/FAIL against the targets is printed, the exit status is 0.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import os
import platform
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinydb import TinyDB
from tinydb import __version__ as tinydb_version

from nbagent.events import model as E
from nbagent.store import Store

DEFAULT_SIZES = (100, 1_000, 10_000, 100_000)
QUICK_SIZES = (100, 1_000, 10_000)
RUN_LENGTH = 200  # events in an ordinary run of the fill
BIG_RUN_SHARE = 10  # every 10th fill event goes to the long run
MAX_GROWTH = 5  # a timed batch adds at most N / MAX_GROWTH events (split into rounds below that)
TINY_K = {100: 100, 1_000: 100, 10_000: 100, 100_000: 5}  # TinyDB inserts timed per size (p99 of 100 = 2nd worst)
TINY_BUDGET_S = 60.0  # skip a TinyDB size whose predicted time is above this
SYNC_K = 500
BIG_RUN_K = 500
CHECKPOINT_K = 50
QUERY_REPS = 5
REOPEN_REPS = 3

TARGET_VS_TINYDB = 1000.0  # TinyDB default p99 at 10k / our p99 at 100k, at least
TARGET_FLAT = 3.0  # our p99 at 100k / our p99 at 100, at most
TARGET_REOPEN_S = 0.3  # issue 16: reopening 100k events, seconds, at most
TARGET_REOPEN_MB = 60.0  # issue 16: memory held by a store reopened on 100k events, MB, at most

_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- workload


class Payloads:
    """A deterministic stream of realistic event payloads (one model call, then thinking and tool calls)."""

    WORDS = ("the", "frame", "column", "value", "missing", "rows", "plot", "cell", "kernel", "merge", "index",
             "dtype", "mean", "group", "filter", "notebook", "load", "csv", "result", "check", "sum", "count")
    TOOLS = ("read_file", "run_cell", "list_cells", "inspect_variable", "search_files")

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0

    def text(self, lo: int, hi: int) -> str:
        target = self.rng.randint(lo, hi)
        out: list[str] = []
        size = 0
        while size < target:
            w = self.rng.choice(self.WORDS)
            out.append(w)
            size += len(w) + 1
        return " ".join(out)[:target]

    def next(self) -> E.Payload:
        self.n += 1
        kind = self.n % 7
        call_id = f"call_{self.n // 7:06d}"
        tool = self.TOOLS[(self.n // 7) % len(self.TOOLS)]
        if kind == 0:
            return E.LlmCalled(
                model="m", request={"messages": 12, "tools": 5}, response={"content": self.text(40, 120)},
                usage=E.Usage(prompt_tokens=1800, completion_tokens=120, total_tokens=1920),
                cost=0.0021, latency_ms=850.0,
            )
        if kind in (1, 4):
            return E.Thinking(text=self.text(100, 220))
        if kind in (2, 5):
            return E.ToolCallStarted(call_id=call_id, tool=tool, arguments={"path": "data/sales.csv",
                                                                           "query": self.text(20, 60)})
        return E.ToolCallCompleted(call_id=call_id, tool=tool, duration_ms=3.0, result=self.text(250, 350),
                                   preview=self.text(40, 80))


@dataclasses.dataclass
class Cursor:
    """Where the workload is: the session, the current ordinary run, the long run."""

    session_id: str
    run_id: str
    run_left: int
    big_run_id: str
    fill_count: int = 0
    runs: int = 1


class Workload:
    def __init__(self, store: Store, cursor: Cursor, payloads: Payloads) -> None:
        self.store = store
        self.cur = cursor
        self.payloads = payloads
        self.checkpoint_ns: list[int] = []

    @classmethod
    def create(cls, store: Store, payloads: Payloads) -> Workload:
        sess = store.session(notebook="nb.ipynb")
        big = store.create_run(sess.id, "a long autonomous run", model="m")
        run = store.create_run(sess.id, "prompt 1", model="m")
        return cls(store, Cursor(sess.id, run.id, RUN_LENGTH, big.id), payloads)

    def _rollover(self) -> None:
        """Close the current run and open the next one: two checkpoints (fsync, runs table rewrite)."""
        t0 = time.perf_counter_ns()
        self.store.append(E.Completed(summary="done"), run_id=self.cur.run_id)
        t1 = time.perf_counter_ns()
        self.cur.runs += 1
        run = self.store.create_run(self.cur.session_id, f"prompt {self.cur.runs}", model="m")
        t2 = time.perf_counter_ns()
        self.checkpoint_ns += [t1 - t0, t2 - t1]
        self.cur.run_id = run.id
        self.cur.run_left = RUN_LENGTH

    def fill_one(self) -> None:
        payload = self.payloads.next()
        self.cur.fill_count += 1
        if self.cur.fill_count % BIG_RUN_SHARE == 0:
            self.store.append(payload, run_id=self.cur.big_run_id)
            return
        if self.cur.run_left <= 0:
            self._rollover()
        self.store.append(payload, run_id=self.cur.run_id)
        self.cur.run_left -= 1

    def fill_to(self, n: int) -> None:
        while self.store_size() < n:
            self.fill_one()

    def store_size(self) -> int:
        return len(self.store.events)  # TinyDB's len(): the events in the log

    def timed(self, k: int, *, sync: bool | None = None, run_id: str | None = None) -> list[int]:
        """K appends to the current run (or `run_id`), each timed; rollovers happen untimed in between."""
        samples: list[int] = []
        append = self.store.append
        for _ in range(k):
            payload = self.payloads.next()
            target = run_id
            if target is None:
                if self.cur.run_left <= 0:
                    self._rollover()
                target = self.cur.run_id
                self.cur.run_left -= 1
            t0 = time.perf_counter_ns()
            append(payload, run_id=target, sync=sync)
            samples.append(time.perf_counter_ns() - t0)
        return samples


# --------------------------------------------------------------------------------------------- statistics


def pct(samples: list[int] | list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(samples)
    return float(s[min(len(s) - 1, max(0, math.ceil(q / 100.0 * len(s)) - 1))])


def us(ns: float) -> float:
    return ns / 1e3


def rss_mb() -> float | None:
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as f:  # no /proc: no RSS
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def median_time(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    """Median wall time in seconds of `reps` calls, and the last result."""
    times = []
    result = None
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


# --------------------------------------------------------------------------------------------- our store


@dataclasses.dataclass
class Row:
    size: int
    ours: list[int] = dataclasses.field(default_factory=list)
    ours_rounds: int = 0
    tiny: list[int] = dataclasses.field(default_factory=list)
    tiny_rounds: int = 0
    tiny_note: str = ""


def per_round(n: int) -> int:
    return max(10, n // MAX_GROWTH)


def bench_store_at(work: Workload, root: Path, n: int, k: int, is_last: bool) -> tuple[list[int], int]:
    """Time K appends at log size N; on copies of the store at N if the batch must be split into rounds."""
    chunk = per_round(n)
    if is_last and k <= chunk:
        work.store.append(work.payloads.next(), run_id=work.cur.run_id)  # warm-up, as in the rounds
        work.cur.run_left -= 1
        gc.collect()
        return work.timed(k), 1
    samples: list[int] = []
    rounds = 0
    left = k
    while left > 0:
        m = min(chunk, left)
        copy_dir = root / f"round-{n}-{rounds}.nbagent"
        shutil.copytree(work.store.path, copy_dir)
        store = Store(copy_dir)
        store.run_ids()  # parse the log before timing (opening is measured separately)
        clone = Workload(store, dataclasses.replace(work.cur), work.payloads)
        # warm-up: one untimed append (the writer's fd, lock file and caches, as in a long-lived kernel)
        store.append(work.payloads.next(), run_id=clone.cur.run_id)
        clone.cur.run_left -= 1
        gc.collect()
        samples += clone.timed(m)
        store.close()
        shutil.rmtree(copy_dir)
        rounds += 1
        left -= m
    return samples, rounds


# --------------------------------------------------------------------------------------------- TinyDB baseline


def read_docs(events_path: Path, n: int) -> list[dict[str, Any]]:
    docs = []
    with open(events_path, "rb") as f:
        for line in f:
            docs.append(json.loads(line))
            if len(docs) >= n:
                break
    return docs


def bench_tinydb_at(docs: list[dict[str, Any]], root: Path, n: int, k: int) -> tuple[list[int], int, int]:
    """Time K single inserts into a default TinyDB file holding N documents (written directly)."""
    chunk = per_round(n)
    samples: list[int] = []
    rounds = 0
    left = k
    path = root / f"tinydb-{n}.json"
    while left > 0:
        m = min(chunk, left)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"events": {str(i + 1): d for i, d in enumerate(docs[:n])}}, f)  # TinyDB's own format
        db = TinyDB(path)
        table = db.table("events")
        extra = iter(docs[n:])
        table.insert(next(extra))  # warm-up: TinyDB reads the table once more to find the next id
        gc.collect()
        for _ in range(m):
            doc = next(extra)
            t0 = time.perf_counter_ns()
            table.insert(doc)
            samples.append(time.perf_counter_ns() - t0)
        db.close()
        rounds += 1
        left -= m
    size = path.stat().st_size
    path.unlink()
    return samples, rounds, size


# --------------------------------------------------------------------------------------------- main


def fmt_us(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def reopen_part(path: Path) -> dict[str, Any]:
    """Reopen the store read-only (+ run_ids), REOPEN_REPS times: median seconds and RSS growth; and the baseline,
    every line parsed with json.loads and kept (what reopening cost at least before the lazy index)."""
    times, mems = [], []
    for _ in range(REOPEN_REPS):
        gc.collect()
        before = rss_mb()
        t0 = time.perf_counter()
        ro = Store(path, readonly=True)
        ro.run_ids()
        times.append(time.perf_counter() - t0)
        after = rss_mb()
        if before is not None and after is not None:
            mems.append(after - before)
        ro.close()
        del ro
    gc.collect()
    before = rss_mb()
    t0 = time.perf_counter()
    with open(path / "events.jsonl", "rb") as f:
        parsed = [json.loads(line) for line in f]
    base_s = time.perf_counter() - t0
    after = rss_mb()
    base_mb = (after - before) if before is not None and after is not None else None
    del parsed
    return {"reopen": statistics.median(times), "reopen_mb": statistics.median(mems) if mems else None,
            "reopen_base": base_s, "reopen_base_mb": base_mb}


def store_part(root: Path, sizes: tuple[int, ...], k: int, seed: int, rows: dict[int, Row],
               extra: dict[str, Any]) -> Path:
    """Our store: append latency at each size, then the measurements at the largest size."""
    top = sizes[-1]
    store = Store(root / "nb.ipynb")
    work = Workload.create(store, Payloads(seed))

    # ---- our store, append latency at each size
    for n in sizes:
        progress(f"store: filling to {n:,} events")
        t0 = time.perf_counter()
        work.fill_to(n)
        progress(f"store: filled to {n:,} in {time.perf_counter() - t0:.1f} s; timing {k} appends")
        rows[n].ours, rows[n].ours_rounds = bench_store_at(work, root, n, k, is_last=(n == top))
        r = rows[n]
        progress(f"store @ {n:,}: p50 {us(pct(r.ours, 50)):.0f} us, p99 {us(pct(r.ours, 99)):.0f} us "
                 f"({r.ours_rounds} round(s))")

    # ---- at the largest size: one run's events, durable appends, checkpoints, the long run, reopening
    big_run = work.cur.big_run_id
    progress(f"store @ {top:,}: querying one run")
    qlen = len(store.raw_events(big_run))
    extra["q_len"] = qlen
    extra["q_log"] = len(store.events)
    extra["q_raw"], _ = median_time(lambda: store.raw_events(big_run), QUERY_REPS)
    extra["q_index"], got = median_time(lambda: store.run_events(big_run), QUERY_REPS)
    assert len(got) == qlen
    extra["q_scan"], got = median_time(lambda: store.query_events(run_id=big_run), QUERY_REPS)
    assert len(got) == qlen
    del got

    progress(f"store @ {top:,}: {SYNC_K} durable appends")
    gc.collect()
    extra["sync"] = work.timed(SYNC_K, sync=True)
    progress(f"store @ {top:,}: {CHECKPOINT_K} checkpoint pairs (completed + create_run)")
    work.checkpoint_ns = []
    gc.collect()
    for _ in range(CHECKPOINT_K):
        work.cur.run_left = 0
        work.timed(1)
    extra["checkpoint"] = work.checkpoint_ns
    extra["runs"] = len(store.run_ids())
    extra["big_len"] = len(store.raw_events(big_run))
    progress(f"store @ {top:,}: {BIG_RUN_K} appends to the long run ({extra['big_len']:,} events)")
    gc.collect()
    extra["big"] = work.timed(BIG_RUN_K, run_id=big_run)

    # reopening
    events_path = store.events_path
    extra["file_mb"] = events_path.stat().st_size / 1e6
    extra["log_events"] = len(store.events)
    extra["line_bytes"] = events_path.stat().st_size / extra["log_events"]
    progress(f"store @ {top:,}: reopening read-only ({extra['file_mb']:.0f} MB)")
    extra.update(reopen_part(store.path))
    extra["peak_store_mb"] = peak_rss_mb()
    store.close()
    return events_path


def tinydb_part(root: Path, sizes: tuple[int, ...], events_path: Path, rows: dict[int, Row]) -> float | None:
    """TinyDB's default storage with the same documents (our log lines); returns its file size at the top, MB."""
    top = sizes[-1]
    need = top + max(TINY_K.get(n, 20) for n in sizes) + 10
    docs = read_docs(events_path, need)
    tiny_file_mb = None
    for n in sizes:
        kt = TINY_K.get(n, 20)
        measured = [m for m in sizes if m < n and rows[m].tiny]
        if measured:  # an insert costs about the file size: extrapolate from the largest size measured
            m = measured[-1]
            per_insert = pct(rows[m].tiny, 50) / 1e9 * n / m
            if per_insert * (kt + 1) > TINY_BUDGET_S:
                rows[n].tiny_note = (f"TinyDB default not measured at {n:,}: one insert rewrites the whole "
                                     f"file, ~{per_insert:.1f} s each (extrapolated from {m:,})")
                progress(rows[n].tiny_note)
                continue
        progress(f"tinydb: {kt} inserts at {n:,} documents")
        rows[n].tiny, rows[n].tiny_rounds, file_size = bench_tinydb_at(docs, root, n, kt)
        if n == top:
            tiny_file_mb = file_size / 1e6
        r = rows[n]
        progress(f"tinydb @ {n:,}: p50 {us(pct(r.tiny, 50)):,.0f} us, p99 {us(pct(r.tiny, 99)):,.0f} us")
    return tiny_file_mb


def report_reopen(extra: dict[str, Any], top: int) -> None:
    """Issue 16's targets for reopening (at 100k events)."""
    note = "" if top >= 100_000 else f"  (measured at {top:,} events; the targets are for 100k)"
    t, mb = extra["reopen"], extra["reopen_mb"]
    print(f"  reopen {t:.3f} s <= {TARGET_REOPEN_S:g} s{note}   {'PASS' if t <= TARGET_REOPEN_S else 'FAIL'}")
    if mb is not None:
        print(f"  reopen memory {mb:.0f} MB <= {TARGET_REOPEN_MB:g} MB{note}   "
              f"{'PASS' if mb <= TARGET_REOPEN_MB else 'FAIL'}")
    print(f"  reopen / baseline (json.loads of every line) = {t / extra['reopen_base']:.2f} (for information)")


def reopen_only(top: int, seed: int) -> int:
    print(f"nbagent store benchmark (bench/store_bench.py --reopen-only): fill to {top:,} events, then reopen")
    with tempfile.TemporaryDirectory(prefix="nbagent-bench-") as tmp:
        store = Store(Path(tmp) / "nb.ipynb")
        work = Workload.create(store, Payloads(seed))
        progress(f"filling to {top:,} events")
        t0 = time.perf_counter()
        work.fill_to(top)
        progress(f"filled in {time.perf_counter() - t0:.1f} s; reopening")
        extra: dict[str, Any] = {"file_mb": store.events_path.stat().st_size / 1e6, "log_events": len(store.events)}
        store.close()
        extra.update(reopen_part(store.path))
    print(f"  reopen: Store(readonly=True) + run_ids()     {extra['reopen']:8.3f} s  (median of {REOPEN_REPS}; "
          f"{extra['log_events']:,} events, {extra['file_mb']:.1f} MB)")
    print(f"  memory held by the reopened store            {extra['reopen_mb'] or 0:8.1f} MB  (RSS growth, median)")
    print(f"  baseline: json.loads of every line, kept     {extra['reopen_base']:8.3f} s, "
          f"{extra['reopen_base_mb'] or 0:.0f} MB")
    report_reopen(extra, top)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes up to 10k only (a smoke run)")
    ap.add_argument("--sizes", type=lambda s: tuple(int(x) for x in s.split(",")),
                    help="comma-separated log sizes, e.g. 100,1000,10000,100000")
    ap.add_argument("-k", type=int, default=2000, help="timed appends per size for our store (default 2000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reopen-only", action="store_true", help="fill to the largest size, then time reopening only")
    args = ap.parse_args(argv)
    sizes: tuple[int, ...] = tuple(sorted(set(args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES))))
    k: int = args.k
    top = sizes[-1]
    if args.reopen_only:
        return reopen_only(top if args.sizes else 100_000, args.seed)

    print("nbagent store benchmark (bench/store_bench.py)")
    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}, "
          f"{os.cpu_count()} cpus; tinydb {tinydb_version}; sizes {', '.join(f'{s:,}' for s in sizes)}")

    rows = {n: Row(n) for n in sizes}
    extra: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="nbagent-bench-") as tmp:
        root = Path(tmp)
        events_path = store_part(root, sizes, k, args.seed, rows, extra)
        gc.collect()
        tiny_file_mb = tinydb_part(root, sizes, events_path, rows)

    # ------------------------------------------------------------------------------------------ report
    print()
    print(f"Append latency, one event (~{extra['line_bytes']:.0f} bytes a line), microseconds; "
          "ours = Store.append, non-durable")
    print("(flushed write, no fsync); TinyDB = TinyDB(path).table('events').insert(doc), default JSONStorage")
    print("(rewrites the file and fsyncs on every insert). n = timed appends (rounds on fresh copies at N).")
    print()
    hdr = (f"{'log size':>9} | {'ours p50':>9} {'ours p99':>9} {'ours max':>9} {'n':>10} | "
           f"{'TinyDB p50':>11} {'TinyDB p99':>11} {'n':>7}")
    print(hdr)
    print("-" * len(hdr))
    for n in sizes:
        r = rows[n]
        ours_n = f"{len(r.ours)}" + (f"/{r.ours_rounds}r" if r.ours_rounds > 1 else "")
        if r.tiny:
            tp50, tp99 = fmt_us(us(pct(r.tiny, 50))), fmt_us(us(pct(r.tiny, 99)))
            tiny_n = f"{len(r.tiny)}" + (f"/{r.tiny_rounds}r" if r.tiny_rounds > 1 else "")
        else:
            tp50 = tp99 = tiny_n = "-"
        print(f"{n:>9,} | {fmt_us(us(pct(r.ours, 50))):>9} {fmt_us(us(pct(r.ours, 99))):>9} "
              f"{fmt_us(us(max(r.ours))):>9} {ours_n:>10} | "
              f"{tp50:>11} {tp99:>11} {tiny_n:>7}")
    for n in sizes:
        if rows[n].tiny_note:
            print(rows[n].tiny_note)
    print()
    print(f"At {top:,} events:")
    s, b, c = extra["sync"], extra["big"], extra["checkpoint"]
    print(f"  durable append (sync=True, fsync)            p50 {fmt_us(us(pct(s, 50)))} us, "
          f"p99 {fmt_us(us(pct(s, 99)))} us  (n={len(s)})")
    print(f"  checkpoint append (completed / run_started)  p50 {fmt_us(us(pct(c, 50)))} us, "
          f"p99 {fmt_us(us(pct(c, 99)))} us  (n={len(c)}; fsync + runs-table rewrite, {extra['runs']} runs)")
    label = f"append to a run of {extra['big_len']:,} events"
    print(f"  {label:<45}p50 {fmt_us(us(pct(b, 50)))} us, "
          f"p99 {fmt_us(us(pct(b, 99)))} us  (n={len(b)}; cost grows with the run's length)")
    print(f"  one run's events ({extra['q_len']:,} of {extra['q_log']:,}), median of {QUERY_REPS}:")
    print(f"    Store.raw_events (index, raw dicts)        {extra['q_raw'] * 1e3:8.1f} ms")
    print(f"    Store.run_events (index + parse)           {extra['q_index'] * 1e3:8.1f} ms")
    print(f"    Store.query_events(run_id=) (Query scan)   {extra['q_scan'] * 1e3:8.1f} ms")
    print(f"  reopen: Store(readonly=True) + run_ids()     {extra['reopen']:8.2f} s  (median of {REOPEN_REPS}; "
          f"{extra['log_events']:,} events, {extra['file_mb']:.1f} MB)")
    if extra["reopen_mb"] is not None:
        print(f"  memory held by the reopened store            {extra['reopen_mb']:8.0f} MB  (RSS growth, median)")
    print(f"  baseline: json.loads of every line, kept     {extra['reopen_base']:8.2f} s, "
          f"{extra['reopen_base_mb'] or 0:.0f} MB")
    print(f"  peak RSS after the store part                {extra['peak_store_mb']:8.0f} MB  (writer store + "
          "a reopened copy in one process)")
    if tiny_file_mb is not None:
        print(f"  TinyDB default file at {top:,} docs          {tiny_file_mb:8.1f} MB")
    print(f"  peak RSS of the whole run                    {peak_rss_mb():8.0f} MB")

    print()
    print("Ratios (measured in this run):")
    ours_top_p99 = pct(rows[top].ours, 99)
    r10k = rows.get(10_000)
    if r10k is not None and r10k.tiny:
        ratio = pct(r10k.tiny, 99) / ours_top_p99
        verdict = "PASS" if ratio >= TARGET_VS_TINYDB else "FAIL"
        print(f"  TinyDB default p99 @ 10k / ours p99 @ {top:,} = {ratio:,.0f}x   "
              f"(target >= {TARGET_VS_TINYDB:,.0f}x)  {verdict}")
        ratio_p50 = pct(r10k.tiny, 50) / pct(rows[top].ours, 50)
        print(f"  TinyDB default p50 @ 10k / ours p50 @ {top:,} = {ratio_p50:,.0f}x   (for information)")
        ratio_sync = pct(r10k.tiny, 99) / pct(extra["sync"], 99)
        print(f"  TinyDB default p99 @ 10k / ours durable p99 @ {top:,} = {ratio_sync:,.0f}x   "
              "(both fsync; for information)")
    else:
        print("  TinyDB default p99 @ 10k / ours p99: not measured (10k not among the sizes)")
    lo = sizes[0]
    flat = ours_top_p99 / pct(rows[lo].ours, 99)
    verdict = "PASS" if flat <= TARGET_FLAT else "FAIL"
    print(f"  ours p99 @ {top:,} / ours p99 @ {lo:,} = {flat:.2f}   (target <= {TARGET_FLAT:g}, flat)  {verdict}")
    report_reopen(extra, top)
    progress("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
