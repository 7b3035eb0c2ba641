"""The kernel warm-up: does it delay a cell the user runs meanwhile, and how long does it take while idle?

Run from the repository root:

    python bench/warmup_bench.py                       # 3 rounds, this checkout only
    python bench/warmup_bench.py --baseline REV        # also the code of git revision REV, interleaved

Each measurement is a fresh real kernel (the test suite's driver, `tests/kernel_harness.py`) with a real provider
configured (`NBAGENT_MODEL=openai/gpt-4o-mini`, no key needed: nothing is called), so the warm-up imports litellm
(~2.5 s of Python). The cell `%load_ext nbagent` runs, and the next cell is sent at once, while the warm-up has only
just started. That cell is one of:

- `cpu`: pure Python, a fixed amount of work (~0.5 s alone), the worst case for two threads sharing one GIL;
- `imports`: `import numpy, matplotlib.pyplot` (a researcher's usual first cell: ~0.5 s of module code);
- `sleep`: `time.sleep(0.5)`, a cell that waits (the warm-up can use that time);
- `agent`: a first `%%agent` cell with the scripted model (20 read-only steps, then an answer): it needs nbagent's
  own modules (the warm-up's first part), never litellm.

It is timed on the client, from sending the execute request to its reply, and in the kernel (the cell's own
code). The same cell in a kernel with the warm-up off (`NBAGENT_WARMUP=0`) is the baseline of the same round:
**delay ratio = wall with the warm-up ÷ wall without** (target: 1.0, "warming up never delays a cell"). Then,
in a kernel left idle after `%load_ext`, the warm-up's own duration (`warmup.status()["seconds"]`): how long a real
provider's first `%%agent` cell must have waited for, if it came sooner.

With `--baseline REV` the same is measured for the code at REV (a `git worktree` put first on the kernel's
PYTHONPATH), interleaved with this checkout in each round. Reports, never fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from kernel_harness import Cell, Kernel  # noqa: E402

REAL = {"NBAGENT_MODEL": "openai/gpt-4o-mini"}
CELLS = {
    "cpu": "def f(n):\n    return sum(i * i % 7 for i in range(n))\n_ = [f(20_000) for _ in range(400)]",
    "imports": "import numpy, matplotlib.pyplot",
    "sleep": "import time\ntime.sleep(0.5)",
    "agent": "%%agent --script s.json --approve all --autonomy L3 --new\nread the notes",
}
STEPS = 20  # the `agent` cell: a scripted run of 20 read-only steps, then an answer
TIMED = "import time as _t\n_t0 = _t.perf_counter()\n{code}\nprint(round(_t.perf_counter() - _t0, 4))"
STATUS = ("from nbagent.ipython import warmup\nwarmup.join()\ns = warmup.status()\n"
          "print(s['seconds'], s.get('pauses', '-'), s.get('paused_seconds', '-'))")


def kernel(folder: Path, src: Path | None, warmup: bool) -> Kernel:
    env = dict(REAL)
    if not warmup:
        env["NBAGENT_WARMUP"] = "0"
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH", "")]))
    return Kernel(folder, env=env)


def script(folder: Path) -> None:
    (folder / "notes.txt").write_text("\n".join(f"line {i}" for i in range(12)))
    turns = [{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]} for _ in range(STEPS)]
    (folder / "s.json").write_text(json.dumps({"turns": [*turns, {"content": "done"}]}))


def timed(k: Kernel, code: str) -> tuple[Cell, float, float]:
    """Run a cell; its wall time on the client (submit to reply, read as soon as it arrives, where the harness
    polls every 0.1 s) and in the kernel (the reply's `started` metadata to its header's date)."""
    started = time.perf_counter()
    cell = k.submit(code, cell_id="cell")
    while True:
        reply = k.kc.get_shell_msg(timeout=120)
        if reply["parent_header"].get("msg_id") == cell.msg_id:
            break
    wall = time.perf_counter() - started
    cell.reply = reply
    k.pump(0.3)
    from datetime import datetime

    began = reply["metadata"]["started"]
    began = datetime.fromisoformat(began) if isinstance(began, str) else began
    kernel_side = (reply["header"]["date"] - began).total_seconds()
    return cell, wall, kernel_side


def cell_during_warmup(src: Path | None, warmup: bool, name: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        k = kernel(Path(tmp), src, warmup)
        try:
            assert k.run("%load_ext nbagent", cell_id="load").ok
            if name == "agent":
                script(Path(tmp))
                cell, wall, kernel_side = timed(k, CELLS[name])
                inside = kernel_side  # a cell magic: the kernel's span is the cell's
            else:
                cell, wall, kernel_side = timed(k, TIMED.format(code=CELLS[name]))
                inside = float(cell.stdout.split()[-1])
            assert cell.ok, cell.stderr
            state = k.run(STATUS, cell_id="status").stdout.split() if warmup else ["-", "-", "-"]
        finally:
            k.close()
    return {"wall": wall, "kernel": kernel_side, "inside": inside, "pauses": state[1], "paused_s": state[2]}


def idle_warmup_seconds(src: Path | None) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        k = kernel(Path(tmp), src, True)
        try:
            assert k.run("%load_ext nbagent", cell_id="load").ok
            time.sleep(8)  # idle: nothing holds the warm-up
            return float(k.run(STATUS, cell_id="status").stdout.split()[0])
        finally:
            k.close()


def worktree(rev: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="nbagent-baseline-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", help="a git revision to measure too, interleaved (e.g. the last release)")
    parser.add_argument("--cells", default=",".join(CELLS), help=f"some of {','.join(CELLS)}")
    args = parser.parse_args()
    sides: dict[str, Path | None] = {"this": None}
    if args.baseline:
        sides = {args.baseline: worktree(args.baseline), "this": None}
    names = args.cells.split(",")
    rows: dict[tuple[str, str, bool], list[dict[str, float]]] = {}
    idle: dict[str, list[float]] = {side: [] for side in sides}
    try:
        for r in range(args.rounds):
            for name in names:
                for side, src in sides.items():
                    for on in (False, True):
                        rows.setdefault((side, name, on), []).append(cell_during_warmup(src, on, name))
            for side, src in sides.items():
                idle[side].append(idle_warmup_seconds(src))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for src in sides.values():
            if src is not None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(src)],
                               capture_output=True)

    def med(side: str, name: str, on: bool, key: str) -> float:
        return statistics.median(row[key] for row in rows[(side, name, on)])

    print(f"\nA cell sent right after `%load_ext nbagent` (real provider configured), median of {args.rounds}; "
          "wall = client side, submit to reply; ms")
    print(f"{'code':<10} {'cell':<8} {'warm-up off':>12} {'warm-up on':>11} {'delay ratio':>12} "
          f"{'in kernel':>10} {'cell code':>10} {'pauses':>8}")
    for side in sides:
        for name in names:
            off, on = med(side, name, False, "wall"), med(side, name, True, "wall")
            ratios = [med(side, name, True, key) / med(side, name, False, key) for key in ("kernel", "inside")]
            pauses = "/".join(str(row["pauses"]) for row in rows[(side, name, True)])
            print(f"{side:<10} {name:<8} {off * 1000:12.0f} {on * 1000:11.0f} {on / off:12.2f} {ratios[0]:10.2f} "
                  f"{ratios[1]:10.2f} {pauses:>8}")
    print("(delay ratio: client wall, on ÷ off; in kernel: the kernel's own span of the request; cell code: the "
          "cell's code alone)")
    print("\nThe warm-up's own duration, kernel idle after `%load_ext` (s; median, all runs):")
    for side, values in idle.items():
        print(f"  {side:<10} {statistics.median(values):.2f}   {', '.join(f'{v:.2f}' for v in values)}")


if __name__ == "__main__":
    main()
