"""What an `%%agent` cell costs in a real kernel against how many runs the notebook's log holds, against a baseline.

Run from the repository root, with nbagent's venv:

    python bench/cell_growth_bench.py --baseline ad2b9d9                  # sizes 3, 100, 300; ~6 min
    python bench/cell_growth_bench.py --baseline REV --sizes 3,300 --cells 20

`bench/runs_bench.py` times `Agent.run` alone; this times the whole cell as a person meets it: a kernel driven by
the test suite's driver (`tests/kernel_harness.py`, with a cell id, as JupyterLab sends), the model
`openai/gpt-4o-mini` through the kernel's model process and litellm to `tests/stub_openai.py` on 127.0.0.1 (every
answer "hello", streamed), the cell `%%agent --new\\nsay hello` (a new conversation each time, so only the log grows).

**Sides.** `baseline`: the code of git revision `--baseline` (a `git worktree`, removed after) first on the
kernel's PYTHONPATH; `new`: the working tree. One kernel per side, both alive at once, cells alternating between them,
so the machine's drift is shared. Up to each size the cells are sent back to back (each waits for the previous
one's reply and outputs, as Run All does), untimed; then `--cells` cells per side are timed:

- `wall`: the client's execute request → its execute_reply (the cell sent at once after the previous cell's
  outputs, so a commit the previous cell left for after its reply is in it, as in Run All);
- `cell`: `pre_run_cell` → `post_run_cell` in the kernel (what nbagent's cell does, the model call included);
- `commit`: the store's commit after the reply (the log's fsync, the run's row in `tables.json`, the anchor).

Medians; new ÷ baseline at each size. No targets: it reports, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from kernel_harness import Kernel  # noqa: E402
from stub_openai import Reply, StubOpenAI  # noqa: E402

CELL = "%%agent --new\nsay hello"
HOOK = """
import time as _t, json as _j, nbagent.store.commits as _c
_growth = {"pre": [], "post": [], "commit": []}
get_ipython().events.register("pre_run_cell", lambda *a: _growth["pre"].append(_t.perf_counter()))
get_ipython().events.register("post_run_cell", lambda *a: _growth["post"].append(_t.perf_counter()))
_commit = _c.GroupedCommits.commit
def _timed_commit(self, *a, **k):
    t = _t.perf_counter()
    try:
        return _commit(self, *a, **k)
    finally:
        _growth["commit"].append(_t.perf_counter() - t)
_c.GroupedCommits.commit = _timed_commit
"""
REPORT = "print(_j.dumps(_growth)); [v.clear() for v in _growth.values()]"


def start(stub: StubOpenAI, path: Path | None) -> Kernel:
    env = {"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": stub.base_url, "OPENAI_API_BASE": stub.base_url,
           "NBAGENT_MODEL": "openai/gpt-4o-mini", **({"PYTHONPATH": str(path)} if path else {})}
    k = Kernel(Path(tempfile.mkdtemp(prefix="nbagent-growth-")), env=env)
    for code in ("%load_ext nbagent", HOOK):
        if not k.run(code).ok:
            raise SystemExit(f"the kernel refused {code.splitlines()[0]!r}")
    return k


def sent(k: Kernel) -> float:
    """One AI cell: ms from the request to its reply; then its outputs, as a front end waits for them."""
    t0 = time.perf_counter()
    cell = k.submit(CELL, cell_id="growth")
    while cell.reply is None:
        k.pump(0.001)
    wall = (time.perf_counter() - t0) * 1000
    k.wait(cell, 60)
    if not cell.ok:
        raise SystemExit(f"an AI cell failed: {cell.stderr[-500:]}")
    return wall


def measured(k: Kernel) -> dict[str, list[float]]:
    """The kernel's times since the last report: each cell's part, each commit (ms). The report cell's own
    `pre_run_cell` came before it cleared them, its `post_run_cell` after: that one is dropped."""
    got = json.loads(k.run(REPORT).stdout.strip().splitlines()[-1])
    pre, post = got["pre"], got["post"][1:]
    return {"cell": [(b - a) * 1000 for a, b in zip(pre, post, strict=False)],
            "commit": [c * 1000 for c in got["commit"]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="a git revision")
    ap.add_argument("--sizes", default="3,100,300", help="runs in the log at which cells are timed")
    ap.add_argument("--cells", type=int, default=12, help="timed cells per side at each size")
    args = ap.parse_args()
    tree = Path(tempfile.mkdtemp(prefix="nbagent-baseline-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.baseline], check=True,
                   capture_output=True)
    stub = StubOpenAI()
    stub.fallback = Reply(content="hello")
    stub.start()
    kernels: dict[str, Kernel] = {}
    try:
        kernels = {"baseline": start(stub, tree), "new": start(stub, None)}
        time.sleep(4)  # each model process loaded: the first cells are not what is measured
        made = 0
        print(f"one kernel per side, cells alternating; {args.cells} timed cells per side at each size (medians, ms)")
        print(f"{'runs in the log':>16} | {'side':8} | {'wall':>6} | {'cell':>6} | {'commit':>6}")
        for size in (int(s) for s in args.sizes.split(",")):
            while made < size:
                for k in kernels.values():
                    sent(k)
                made += 1
            for k in kernels.values():
                measured(k)  # cleared: only the timed cells below
            walls: dict[str, list[float]] = {n: [] for n in kernels}
            for _ in range(args.cells):
                for name, k in kernels.items():
                    walls[name].append(sent(k))
            made += args.cells
            rows = {}
            for name, k in kernels.items():
                got = measured(k)
                rows[name] = (statistics.median(walls[name]), statistics.median(got["cell"]),
                              statistics.median(got["commit"]))
                print(f"{size:>16} | {name:8} | " + " | ".join(f"{v:6.1f}" for v in rows[name]))
            ratio = [n / b for n, b in zip(rows["new"], rows["baseline"], strict=True)]
            print(f"{size:>16} | {'new÷base':8} | " + " | ".join(f"{r:5.2f}x" for r in ratio), flush=True)
    finally:
        for k in kernels.values():
            k.close()
        stub.stop()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


if __name__ == "__main__":
    main()
