"""What one run costs against how many runs the notebook's log holds already, today's code against a baseline's.

Run from the repository root, with nbagent's venv:

    python bench/runs_bench.py                      # baseline a9ab87f~2 (before the runs table was read once)
    python bench/runs_bench.py --sizes 10,100,300 --baseline REV

**What is timed.** One process per side, driving `Agent.run` with the offline scripted model (one text answer, no
tools called) on one store, as a kernel does cell after cell: each run is a new conversation of its own (a cell's
`--new`), so the model's input does not grow and what grows is only the log: its events and its runs table. At
each size N (runs in the log), 10 runs are timed (`perf_counter`, median) and one `Store.list_runs()` (what every
run asks, to find the run it continues). The runs up to N are made by the same code, untimed.

**Sides.** `baseline`: the code of git revision `--baseline`, extracted with `git archive` and put first on the
child's PYTHONPATH; `new`: the working tree. Both run in this machine's same run, baseline first, then new; the
ratio at the end is new ÷ baseline at each size. No targets: it reports, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import asyncio, itertools, json, statistics, sys, tempfile, time
from pathlib import Path
from nbagent.runtime.agent import Agent
from nbagent.store.store import Store

sizes = [int(x) for x in sys.argv[1].split(",")]
folder = Path(tempfile.mkdtemp())
script = folder / "script.json"
script.write_text(json.dumps({"turns": [{"content": "hello"}] * 10}))
store = Store(folder / "analysis.nbagent")
names = itertools.count()

def agent():
    return Agent(model="nbagent/scripted", script=str(script), store=store, scope=str(folder),
                 session=f"cell-{next(names)}")

async def main():
    made, out = 0, {}
    for n in sizes:
        while made < n - 10:
            await agent().run("say hello")
            made += 1
        times = []
        for _ in range(10):
            a = agent()
            t = time.perf_counter()
            await a.run("say hello")
            times.append(time.perf_counter() - t)
            made += 1
        t = time.perf_counter()
        store.list_runs()
        out[n] = {"run_ms": statistics.median(times) * 1e3, "list_ms": (time.perf_counter() - t) * 1e3}
    print(json.dumps(out))

asyncio.run(main())
"""


def extract(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "nbagent"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def side(path: Path, sizes: str) -> dict[str, dict[str, float]]:
    env = dict(os.environ, PYTHONPATH=str(path))
    out = subprocess.run([sys.executable, "-c", CHILD, sizes], env=env, capture_output=True, text=True, check=True,
                         cwd=path)
    result: dict[str, dict[str, float]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10,100,300,600", help="runs in the log at which to time (comma-separated)")
    ap.add_argument("--baseline", default="a9ab87f~2", help="git revision to compare with")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = side(extract(args.baseline, Path(tmp)), args.sizes)
    new = side(ROOT, args.sizes)
    print(f"\nOne run (offline model, a new conversation) against the runs already in the log; baseline "
          f"{args.baseline}, median of 10 runs\n")
    print("| runs in the log | baseline: a run | new: a run | new ÷ baseline | baseline: list_runs | new: list_runs |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in base:
        b, w = base[n], new[n]
        print(f"| {int(n):,} | {b['run_ms']:.1f} ms | {w['run_ms']:.1f} ms | {w['run_ms'] / b['run_ms']:.2f}x "
              f"| {b['list_ms']:.1f} ms | {w['list_ms']:.1f} ms |")


if __name__ == "__main__":
    main()
