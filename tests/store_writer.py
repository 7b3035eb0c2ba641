"""A separate process that appends to a store, for the concurrency and crash tests.

    python store_writer.py STORE RUN_IDS N [--go FILE] [--new-runs-every K]

Appends N events, round-robin over the comma-separated RUN_IDS, and prints each event's id on stdout only
after `append` returned: a printed id is an acknowledged write. With --go it waits for FILE to exist first,
so several writers start together.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from nbagent.events import model as E
from nbagent.store import Store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("runs")
    ap.add_argument("n", type=int)
    ap.add_argument("--go")
    ap.add_argument("--new-runs-every", type=int, default=0)
    args = ap.parse_args()
    store = Store(args.store)
    runs = args.runs.split(",")
    session = store.get_run(runs[0]).session_id
    print("ready", flush=True)
    if args.go:
        while not os.path.exists(args.go):
            time.sleep(0.001)
    out = sys.stdout
    for i in range(args.n):
        run = runs[i % len(runs)]
        if args.new_runs_every and i % args.new_runs_every == args.new_runs_every - 1:
            # exercises the atomic rewrite of the runs table and an fsync'd checkpoint
            new = store.create_run(session, f"run {i}", model="m")
            out.write(f"{new.id}\n")
            ev = store.append(E.Completed(), run_id=new.id)
        else:
            ev = store.append(E.ToolCallCompleted(call_id=f"c{i}", tool="t", result="x" * 200, preview=f"#{i}"),
                              run_id=run)
        out.write(ev.id + "\n")
        out.flush()
    print("done", flush=True)


if __name__ == "__main__":
    main()
