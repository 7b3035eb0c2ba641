"""Kernel memory: what nbagent adds to a kernel's resident memory, and whether it grows per step.

Run from the repository root:

    python bench/kernel_memory.py            # 3 fresh kernels, each: bare, loaded + one run, 30 more runs
    python bench/kernel_memory.py --model    # the same with a real provider configured (NBAGENT_MODEL): litellm
                                             # is then loaded at %load_ext (nbagent/ipython/loading.py)
    python bench/kernel_memory.py --runs 60 --steady-after 300   # a longer steady state

Each kernel is real (the test suite's driver, `tests/kernel_harness.py`). Its RSS is read by the kernel itself
from /proc/self/status (VmRSS) at three points: bare (a first cell that imports nothing); after `%load_ext
nbagent` (and, with --model, litellm's loading), and one offline run of 20 read-only steps (the scripted model);
after five more such runs (100 steps); then after each further run, up to `--runs` runs after the first (600 steps
by default). Targets (issue 16): loaded + one run ≤ 100 MiB above the bare kernel; growth per step, beyond what the
log itself holds, about 0.

Growth over the first 100 steps includes caches filling up (the store keeps recently parsed events, up to 512 KiB
of their lines; the redactor remembers short strings); the steady state is the least-squares slope of RSS per step
over the steps after `--steady-after` (200), printed beside what the log (events.jsonl) grew per step over the
same steps, and their ratio: at most 1 means the kernel grows no faster than the log on disk (folded run states,
the conversation a next cell continues, stay in memory as long as the store is open; the log's index is ~100
bytes an event). Reports, never fails; Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from kernel_harness import Kernel  # noqa: E402

RSS = "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS')))"
STEPS = 20


def script(folder: Path) -> None:
    (folder / "notes.txt").write_text("\n".join(f"line {i}" for i in range(12)))
    turns = [{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]} for _ in range(STEPS)]
    (folder / "s.json").write_text(json.dumps({"turns": [*turns, {"content": "done"}]}))


def rss_kib(k: Kernel, n: int) -> int:
    cell = k.run(RSS, cell_id=f"rss{n}")
    return int(cell.stdout.strip())


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def one(model: bool, runs: int, steady_after: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script(folder)
        env = {"NBAGENT_MODEL": "openai/gpt-4o-mini"} if model else {
            "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "GEMINI_API_KEY": "", "GOOGLE_API_KEY": "",
            "OLLAMA_API_BASE": "http://127.0.0.1:9"}
        k = Kernel(folder, env=env)
        try:
            bare = rss_kib(k, 0)
            assert k.run("%load_ext nbagent", cell_id="load").ok
            k.run("import time\nfrom nbagent.ipython import loading\nwhile loading.status()['state'] == 'loading':\n"
                  "    time.sleep(0.05)", cell_id="join")
            cell = "%%agent --script s.json --approve all --autonomy L3 --new\nread the notes"
            assert k.run(cell, cell_id="run0").ok
            loaded = rss_kib(k, 1)
            for i in range(5):
                assert k.run(cell, cell_id=f"run{i + 1}").ok
            more = rss_kib(k, 2)
            log = sum(p.stat().st_size for p in (folder / "test.nbagent").rglob("*") if p.is_file())
            events = folder / "test.nbagent" / "events.jsonl"
            series = [(6 * STEPS, more, events.stat().st_size)]  # (steps so far, RSS KiB, log bytes)
            for i in range(6, runs + 1):
                assert k.run(cell, cell_id=f"run{i}").ok
                series.append(((i + 1) * STEPS, rss_kib(k, i + 2), events.stat().st_size))
        finally:
            k.close()
    steady = [p for p in series if p[0] >= steady_after] or series[-2:]
    rss_slope = slope([(x, r) for x, r, _ in steady])
    log_slope = slope([(x, b / 1024) for x, _, b in steady])
    return {"bare_mib": bare / 1024, "added_mib": (loaded - bare) / 1024,
            "growth_kib_per_step": (more - loaded) / (5 * STEPS), "log_kib_per_step": log / 1024 / (6 * STEPS),
            "steady_kib_per_step": rss_slope, "steady_log_kib_per_step": log_slope,
            "steady_from": steady[0][0], "steady_to": steady[-1][0], "rss_end_mib": series[-1][1] / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="store_true",
                        help="a real provider configured (litellm is loaded at %%load_ext)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30, help="runs of 20 steps after the first (default 30)")
    parser.add_argument("--steady-after", type=int, default=200, help="steps before the steady state (default 200)")
    args = parser.parse_args()
    rows = [one(args.model, max(args.runs, 5), args.steady_after) for _ in range(args.reps)]
    med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    setup = "a real provider configured (litellm loaded ahead)" if args.model else "offline (no model configured)"
    print(f"kernel memory, {setup}, median of {args.reps} kernels:")
    print(f"  bare kernel                        {med['bare_mib']:7.1f} MiB")
    print(f"  + nbagent loaded and one run       {med['added_mib']:7.1f} MiB   (target <= 100: "
          f"{'PASS' if med['added_mib'] <= 100 else 'FAIL'}, ratio {med['added_mib'] / 100:.2f})")
    print(f"  growth per step over 100 steps     {med['growth_kib_per_step']:7.2f} KiB  "
          f"(the log grows {med['log_kib_per_step']:.2f} KiB per step on disk)")
    ratio = med["steady_kib_per_step"] / med["steady_log_kib_per_step"] if med["steady_log_kib_per_step"] else 0.0
    each = ", ".join(f"{r['steady_kib_per_step']:.2f}" for r in rows)
    window = f"steps {med['steady_from']:.0f}-{med['steady_to']:.0f}"
    print(f"  steady state, {window:<20} {med['steady_kib_per_step']:7.2f} KiB per step (RSS slope; per kernel: "
          f"{each})")
    print(f"  the log over the same steps        {med['steady_log_kib_per_step']:7.2f} KiB per step   growth / log = "
          f"{ratio:.2f} (target: at most 1, i.e. no growth beyond the log itself: "
          f"{'PASS' if ratio <= 1 else 'FAIL'})")
    print(f"  RSS at the end                     {med['rss_end_mib']:7.1f} MiB")


if __name__ == "__main__":
    main()
