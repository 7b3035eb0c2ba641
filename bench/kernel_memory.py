"""Kernel memory: what nbagent adds to a kernel's resident memory, and whether it grows per step.

Run from the repository root:

    python bench/kernel_memory.py            # 3 fresh kernels, each: bare, loaded + one run, five more runs
    python bench/kernel_memory.py --model    # the same with a real provider configured (NBAGENT_MODEL): the
                                             # warm-up then loads litellm ahead, as a real first cell needs

Each kernel is real (the test suite's driver, `tests/kernel_harness.py`). Its RSS is read by the kernel itself
from /proc/self/status (VmRSS) at three points: bare (a first cell that imports nothing); after `%load_ext
nbagent`, the warm-up, and one offline run of 20 read-only steps (the scripted model); after five more such runs
(100 steps). Targets (issue 16): loaded + one run ≤ 100 MiB above the bare kernel; growth per step, beyond what the
log itself holds, about 0. The log's size is printed beside the growth, since folded run states live in memory as
long as the store is open. Reports, never fails; Linux only (/proc).
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


def one(model: bool) -> dict[str, float]:
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
            k.run("from nbagent.ipython import warmup\nwarmup.join()", cell_id="join")
            cell = "%%agent --script s.json --approve all --autonomy L3 --new\nread the notes"
            assert k.run(cell, cell_id="run0").ok
            loaded = rss_kib(k, 1)
            for i in range(5):
                assert k.run(cell, cell_id=f"run{i + 1}").ok
            more = rss_kib(k, 2)
            log = sum(p.stat().st_size for p in (folder / "test.nbagent").rglob("*") if p.is_file())
        finally:
            k.close()
    return {"bare_mib": bare / 1024, "added_mib": (loaded - bare) / 1024,
            "growth_kib_per_step": (more - loaded) / (5 * STEPS), "log_kib_per_step": log / 1024 / (6 * STEPS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="store_true", help="a real provider configured (the warm-up loads litellm)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rows = [one(args.model) for _ in range(args.reps)]
    med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    setup = "a real provider configured (litellm loaded ahead)" if args.model else "offline (no model configured)"
    print(f"kernel memory, {setup}, median of {args.reps} kernels:")
    print(f"  bare kernel                        {med['bare_mib']:7.1f} MiB")
    print(f"  + nbagent loaded and one run       {med['added_mib']:7.1f} MiB   (target <= 100: "
          f"{'PASS' if med['added_mib'] <= 100 else 'FAIL'}, ratio {med['added_mib'] / 100:.2f})")
    print(f"  growth per step over 100 steps     {med['growth_kib_per_step']:7.2f} KiB  "
          f"(the log grows {med['log_kib_per_step']:.2f} KiB per step on disk)")


if __name__ == "__main__":
    main()
