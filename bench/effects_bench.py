"""What resolving a call's effect costs (issue 23), against the scope check the same call already made.

Run from the repository root:

    python bench/effects_bench.py                 # folders of 100, 10,000 and 100,000 files
    python bench/effects_bench.py --sizes 1000

A write is resolved before anything decides (effects.resolve): its target through the file scope, links followed,
and its other names (the folder's links that lead to it: links.py), and whether something runs it later. The link
index is read whole once (cold), then only folders whose modification time changed (warm). The baseline is
`ScopeGuard.check(path, "create")`, the check every create already made before this work, measured in the same
run on the same folder. Folders hold 100 files each, and 5 links. Times are medians of repeated calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from nbagent.gate.effects import resolve
from nbagent.scope.rules import Scope, ScopeGuard
from nbagent.tools.files import FileTools


def build(root: Path, files: int) -> None:
    per = 100
    for i in range(files):
        folder = root / f"d{i // per:05d}"
        if i % per == 0:
            folder.mkdir()
        (folder / f"f{i % per:03d}.csv").write_bytes(b"x")
    for i in range(5):
        os.symlink(f"d00000/f{i:03d}.csv", root / f"link{i}.csv")


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,10000,100000", help="comma-separated file counts")
    args = ap.parse_args()
    print(f"{'files':>8} {'check (base)':>13} {'resolve cold':>13} {'resolve warm':>13} {'warm / base':>12}")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            print(one_size(Path(tmp), size))


def one_size(root: Path, size: int) -> str:
    build(root, size)
    guard = ScopeGuard(Scope(root=root, base=root))
    create = {t.name: t for t in FileTools(root).tools()}["create_file"]
    call = {"path": "d00000/new.csv", "content": "a,b\n1,2\n"}
    base = median_ms(lambda: guard.check(call["path"], "create"), 50)
    t0 = time.perf_counter()
    resolve(create, call, guard)  # the first write of a session: the index is read whole
    cold = (time.perf_counter() - t0) * 1000
    warm = median_ms(lambda: resolve(create, call, guard), 20)
    return f"{size:>8,} {base:>11.3f}ms {cold:>11.1f}ms {warm:>11.2f}ms {warm / base:>11.1f}x"

if __name__ == "__main__":
    main()
