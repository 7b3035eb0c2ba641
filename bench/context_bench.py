"""A long session's requests: today's nbagent (no context budget) against the new one (issue 28), measured in one run.

Run from the repository root, with nbagent's venv:

    python bench/context_bench.py              # 60 cells a side; a few minutes
    python bench/context_bench.py --quick      # 12 cells a side
    python bench/context_bench.py --baseline 68a7bf5 --cells 60 --window 16000

**Session.** One notebook session of N requests, each "Read data/part_NN.csv and tell me its first row and how many
lines it has" over a different ~200 KB CSV (tests/session_model.py writes them and plays the model: a `read_file`
call, then a short answer; a summary when asked to summarise). Each side runs in a fresh process, in-process
`nbagent.Agent(model="openai/gpt-4o-mini", api_base=<stub>, autonomy="L3", decider=PolicyDecider("all"))` (the file
tools of the folder by default; `context_window=--window` on the new side, where Agent takes it: the kernel reads
`NBAGENT_CONTEXT_WINDOW`, Agent does not), one `agent.run(prompt)` per cell in one session.

**Server.** tests/stub_openai.py on 127.0.0.1, counting every request's input tokens itself (tiktoken, o200k_base,
OpenAI's chat format; not litellm's count) and caching prompt prefixes as OpenAI does (cache=True: 128-token steps
from 1,024).

**Sides.**
- `baseline`: the code of git revision `--baseline` (default 68a7bf5, before issue 28), extracted with `git archive`
  and put first on the child's PYTHONPATH, against a server *without* a limit, so all N cells run and the requests'
  growth shows;
- `baseline@limit`: the same code against a server with the `--window` limit (16,000 tokens): what today's code
  does against such a model (a refused request fails its cell);
- `new`: the working tree, `NBAGENT_CONTEXT_WINDOW=--window`, against the server with that limit.

**Numbers.** Per side: requests, refused requests, cells completed; the server's input tokens per request at three
cells (N/6, N/2, N: 10, 30, 60 by default): the cell's largest request and its mean; cell N ÷ cell N/6 for each
(goal for `new`: within 1.3x); compactions recorded in the log; and the session's cost at gpt-4o-mini's published
prices ($0.15 per 1M input tokens, $0.075 per 1M cached input tokens, $0.60 per 1M output tokens), without caching
and with the server's cached tokens (refused requests are not billed). Also litellm's `token_counter` on the
requests of the measured cells against the server's count (nbagent counts with litellm). The table at the end is
markdown for docs/performance.md. Always exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

PRICE_IN, PRICE_CACHED, PRICE_OUT = 0.15e-6, 0.075e-6, 0.60e-6  # gpt-4o-mini, dollars per token
MODEL = "openai/gpt-4o-mini"
REQUEST = re.compile(r"Read data/part_(\d+)\.csv")
GOAL = 1.3


# ------------------------------------------------------------------------------------------- the child


def child(folder: Path, cells: int, api_base: str) -> None:
    """Run the session in this process (whichever nbagent is first on the path); one JSON line per cell."""
    import session_model as sm

    import nbagent
    from nbagent import Agent
    from nbagent.gate.deciders import PolicyDecider

    print(json.dumps({"nbagent": str(Path(nbagent.__file__).parent)}), flush=True)
    extra: dict[str, Any] = {}
    window = os.environ.get("NBAGENT_CONTEXT_WINDOW")
    if window and "context_window" in inspect.signature(Agent).parameters:  # the kernel reads the variable, Agent not
        extra["context_window"] = int(window)
    agent = Agent(model=MODEL, api_base=api_base, api_key="sk-bench", autonomy="L3", decider=PolicyDecider("all"),
                  store=folder / "agent.nbagent", **extra)

    async def session() -> None:
        for n in range(1, cells + 1):
            started = time.perf_counter()
            result = await agent.run(sm.prompt(n))
            print(json.dumps({"cell": n, "status": str(getattr(result.status, "value", result.status)),
                              "s": round(time.perf_counter() - started, 3)}), flush=True)

    asyncio.run(session())


# ------------------------------------------------------------------------------------------- one side


def extract(rev: str, into: Path) -> Path:
    """The `nbagent/` package of git revision `rev`, under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "nbagent"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def is_summary(r: Any) -> bool:
    messages = (r.body or {}).get("messages") or []
    return bool(messages) and str(messages[0].get("content") or "").startswith("You summarise")


def cell_of(requests: list[Any]) -> list[int]:
    """The cell each request belongs to: the latest request in its messages; a summary request, the next one's."""
    cells: list[int | None] = []
    for r in requests:
        messages = (r.body or {}).get("messages") or []
        found = None
        if not is_summary(r):
            for m in reversed(messages):
                if m.get("role") == "user" and isinstance(m.get("content"), str):
                    hit = REQUEST.search(m["content"])
                    if hit and m["content"].startswith("Read "):
                        found = int(hit.group(1))
                        break
        cells.append(found)
    out: list[int] = []
    following = 0
    for c in reversed(cells):
        following = c if c is not None else following
        out.append(following)
    return list(reversed(out))


def run_side(name: str, pythonpath: Path, cells: int, limit: int | None, window: int | None) -> dict[str, Any]:
    import session_model as sm
    from stub_openai import Respond, StubOpenAI

    with tempfile.TemporaryDirectory(prefix=f"context-bench-{name.replace('@', '-')}-") as tmp:
        folder = Path(tmp)
        sm.write_data(folder, cells)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pythonpath), str(ROOT / "tests")])}
        for var in ("NBAGENT_CONTEXT_WINDOW", "NBAGENT_MODEL", "NBAGENT_APPROVE"):
            env.pop(var, None)
        if window:
            env["NBAGENT_CONTEXT_WINDOW"] = str(window)
        stub = StubOpenAI(max_input_tokens=limit, cache=True)
        stub.fallback = Respond(sm.respond)
        started = time.perf_counter()
        with stub:
            proc = subprocess.run([sys.executable, __file__, "--child", str(folder), "--cells", str(cells),
                                   "--api-base", stub.base_url], capture_output=True, text=True, env=env,
                                  timeout=3600, check=False)
        wall = time.perf_counter() - started
        lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
        if proc.returncode != 0:
            print(f"{name}: the session failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
        compactions, nbagent_counts = log_facts(folder)
    requests = stub.completion_requests
    return {"name": name, "requests": requests, "cells": cell_of(requests), "wall": wall,
            "where": next((x["nbagent"] for x in lines if "nbagent" in x), "?"),
            "statuses": [x["status"] for x in lines if "cell" in x], "compactions": compactions,
            "nbagent_counts": nbagent_counts, "limit": limit, "window": window}


def log_facts(folder: Path) -> tuple[int, list[tuple[int, bool] | None]]:
    """Compactions recorded in the session's log, and the input tokens nbagent counted per model call (issue 28's
    `llm_called.request.input_tokens`: (tokens, counted exactly or only bounded); None where the log has none), in
    the order of the calls."""
    from nbagent.store import Store

    path = folder / "agent.nbagent"
    if not path.exists():
        return 0, []
    store = Store(path, readonly=True)
    compactions, counts = 0, []
    events = sorted((e for rid in store.run_ids() for e in store.raw_events(rid)), key=lambda e: e["id"])
    for e in events:
        if e["type"] == "context_compacted":
            compactions += 1
        elif e["type"] == "llm_called":
            n = (e["payload"].get("request") or {}).get("input_tokens")
            exact = bool(n.get("exact", True)) if isinstance(n, dict) else True
            n = n.get("input_tokens") if isinstance(n, dict) else n  # a count, or an estimate that holds one
            counts.append((n, exact) if isinstance(n, int) else None)
    return compactions, counts


# ------------------------------------------------------------------------------------------- numbers


def at_cell(side: dict[str, Any], cell: int) -> tuple[int, float] | None:
    sizes = [r.input_tokens for r, c in zip(side["requests"], side["cells"], strict=True)
             if c == cell and not r.refused and r.input_tokens is not None]
    return (max(sizes), statistics.fmean(sizes)) if sizes else None


def cost(side: dict[str, Any]) -> tuple[float, float]:
    """(dollars without caching, with the server's cached tokens); refused requests are not billed."""
    served = [r for r in side["requests"] if not r.refused and r.input_tokens is not None]
    inp = sum(r.input_tokens for r in served)
    cached = sum(r.cached_tokens or 0 for r in served)
    out = sum(r.output_tokens or 0 for r in served)
    return inp * PRICE_IN + out * PRICE_OUT, (inp - cached) * PRICE_IN + cached * PRICE_CACHED + out * PRICE_OUT


def litellm_check(side: dict[str, Any], marks: list[int]) -> list[tuple[int, int, int]]:
    """(cell, server's count, litellm.token_counter's) for the served requests of the measured cells."""
    from nbagent.models.library import import_litellm

    litellm = import_litellm()
    out = []
    for r, c in zip(side["requests"], side["cells"], strict=True):
        if c in marks and not r.refused and r.input_tokens is not None:
            body = r.body or {}
            theirs = litellm.token_counter(model="gpt-4o-mini", messages=body.get("messages") or [],
                                           tools=body.get("tools") or None)
            out.append((c, r.input_tokens, int(theirs)))
    return out


def fmt_cell(v: tuple[int, float] | None) -> str:
    return "—" if v is None else f"{v[0]:,} / {v[1]:,.0f}"


def ratio(a: tuple[int, float] | None, b: tuple[int, float] | None) -> str:
    if a is None or b is None:
        return "—"
    return f"{b[0] / a[0]:.2f}x / {b[1] / a[1]:.2f}x"


def report(sides: list[dict[str, Any]], cells: int, marks: list[int]) -> None:
    print(f"\nA session of {cells} cells, each reading another ~200 KB CSV with read_file; model {MODEL} played by "
          "tests/session_model.py; input tokens counted by the server (tiktoken o200k_base, OpenAI's chat format)")
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    for s in sides:
        done = sum(1 for x in s["statuses"] if x == "completed")
        refused = sum(1 for r in s["requests"] if r.refused)
        print(f"- {s['name']}: nbagent from {s['where']}; server limit {s['limit'] or 'none'}, "
              f"NBAGENT_CONTEXT_WINDOW {s['window'] or 'unset'}; {len(s['requests'])} requests, {refused} refused, "
              f"{done}/{cells} cells completed, {s['compactions']} compactions; {s['wall']:.1f} s")
    head = " | ".join(f"cell {m}: max / mean" for m in marks)
    print(f"\n| code | server limit | requests (refused) | cells completed | {head} | cell {marks[-1]} ÷ cell "
          f"{marks[0]} (max / mean) | compactions | cost | cost with caching |")
    print("|---|---:|---:|---:|" + "---:|" * len(marks) + "---:|---:|---:|---:|")
    for s in sides:
        points = [at_cell(s, m) for m in marks]
        plain, cached = cost(s)
        refused = sum(1 for r in s["requests"] if r.refused)
        done = sum(1 for x in s["statuses"] if x == "completed")
        print(f"| {s['name']} | {s['limit'] or 'none'} | {len(s['requests'])} ({refused}) | {done}/{cells} | "
              + " | ".join(fmt_cell(p) for p in points)
              + f" | {ratio(points[0], points[-1])} | {s['compactions']} | ${plain:.4f} | ${cached:.4f} |")
    print(f"\ninput tokens per request, the server's count; cost at $0.15/1M input, $0.075/1M cached input, "
          f"$0.60/1M output (gpt-4o-mini); goal for new: cell {marks[-1]} ÷ cell {marks[0]} ≤ {GOAL}x")
    for s in sides:
        if s["name"] != "new":
            continue
        points = [at_cell(s, m) for m in marks]
        if points[0] and points[-1]:
            r = points[-1][0] / points[0][0]
            print(f"new: largest request cell {marks[-1]} ÷ cell {marks[0]} = {r:.2f}x: "
                  f"{'PASS' if r <= GOAL else 'FAIL'} (≤ {GOAL}x)")
        else:
            print(f"new: no served request at cell {marks[0]} or {marks[-1]}: FAIL")
        served = [r for r in s["requests"] if not r.refused and not is_summary(r)]  # summaries: no llm_called
        counts = s["nbagent_counts"]
        if len(counts) != len(served):
            print(f"new: {len(counts)} llm_called events for {len(served)} served requests: not compared")
            continue
        for kind, want in (("counted exactly", True), ("bounded (not counted)", False)):
            pairs = [(r.input_tokens, c[0]) for r, c in zip(served, counts, strict=True)
                     if c is not None and c[1] is want and r.input_tokens]
            if pairs:
                diffs = [(n - mine) / mine for mine, n in pairs]
                print(f"new: nbagent's input_tokens ({kind}) ÷ the server's - 1: mean {statistics.fmean(diffs):+.1%}, "
                      f"min {min(diffs):+.1%}, max {max(diffs):+.1%} over {len(pairs)} calls")
    for s in sides:
        checks = litellm_check(s, marks) if s["name"] != "baseline" else litellm_check(s, marks[:1])
        if checks:
            rel = [(t - m) / m for _c, m, t in checks]
            print(f"{s['name']}: litellm.token_counter ÷ the server's count - 1 on {len(checks)} requests of cells "
                  f"{sorted({c for c, _m, _t in checks})}: mean {statistics.fmean(rel):+.2%}, "
                  f"min {min(rel):+.2%}, max {max(rel):+.2%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--cells", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="12 cells a side")
    ap.add_argument("--window", type=int, default=16_000, help="the server's limit and NBAGENT_CONTEXT_WINDOW")
    ap.add_argument("--baseline", default="68a7bf5", help="git revision of today's code")
    ap.add_argument("--sides", default="baseline,baseline@limit,new")
    ap.add_argument("--new-code", default=str(ROOT), help="the folder holding the new side's nbagent/ (default: this "
                                                           "working tree)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--api-base", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # the nbagent and tests/ its PYTHONPATH names
        child(Path(args.child), args.cells, args.api_base)
        return
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this process reads the logs with the working tree's nbagent
    cells = 12 if args.quick else args.cells
    marks = sorted({max(1, cells // 6), max(1, cells // 2), cells})
    chosen = args.sides.split(",")
    sides = []
    with tempfile.TemporaryDirectory(prefix="context-bench-code-") as code:
        old = extract(args.baseline, Path(code))
        plan = {"baseline": (old, None, None), "baseline@limit": (old, args.window, None),
                "new": (Path(args.new_code), args.window, args.window)}
        for name in chosen:
            path, limit, window = plan[name]
            print(f"running {name} ({cells} cells)...", file=sys.stderr, flush=True)
            sides.append(run_side(name, path, cells, limit, window))
    report(sides, cells, marks)


if __name__ == "__main__":
    main()
