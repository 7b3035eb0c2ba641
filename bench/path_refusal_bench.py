"""What refusing a huge path costs (issue 45): a path over the 4,096-byte limit is refused on its length, so the
refusal costs about the same whatever the path's length.

Run from the repository root:

    python bench/path_refusal_bench.py                        # 5,000 to 5,000,000 characters
    python bench/path_refusal_bench.py --lengths 100000 --repeat 3

Two measures per length: `ScopeGuard.check` alone (what every file tool and every effect resolution calls), and a
whole model turn of an offline run whose model asks `read_file` with that path (the gate, the effect, the tool, the
refusal recorded as `authorization_denied`), the whole run of two model turns. Paths are of "é" (two bytes, and
not ASCII: the slow case of a per-character look). Times are medians of `--repeat`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from nbagent.runtime import Agent
from nbagent.scope.rules import Scope, ScopeDenied, ScopeGuard


def check_ms(guard: ScopeGuard, path: str, repeat: int) -> tuple[float, str]:
    times, rule = [], ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            guard.check(path, "read")
        except ScopeDenied as exc:
            rule = exc.rule
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), rule


def turn_ms(folder: Path, path: str, repeat: int) -> tuple[float, str]:
    times, said = [], ""
    for n in range(repeat):
        def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
            if messages[-1]["role"] == "user":
                return {"tool_calls": [{"name": "read_file", "arguments": {"path": path}}]}
            return "done"
        store = folder / f"run{n}" / "nb.ipynb"
        store.parent.mkdir()
        agent = Agent(function=model, store=store, autonomy="L1")
        t0 = time.perf_counter()
        result = asyncio.run(agent.run("read it"))
        times.append((time.perf_counter() - t0) * 1000)
        denied = [e.payload for e in agent.store.run_events(result.run_id) if e.type == "authorization_denied"]
        said = denied[0].reason[:90] if denied else "(not refused)"
        agent.store.close()
    return statistics.median(times), said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[5_000, 50_000, 500_000, 5_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        guard = ScopeGuard(Scope(root=root, base=root))
        print(f"{'characters':>12} {'check ms':>10} {'turn ms':>10}  refusal")
        for n in args.lengths:
            path = "é" * n
            check, rule = check_ms(guard, path, args.repeat)
            folder = root / f"turns{n}"
            folder.mkdir()
            turn, said = turn_ms(folder, path, args.repeat)
            print(f"{n:>12,} {check:>10.2f} {turn:>10.1f}  {rule}: {said}")


if __name__ == "__main__":
    main()
