"""Where a second AI cell's time goes, nbagent's beside jupyter-ai's: one timeline per cell, stamped on both sides.

Run from the repository root, with nbagent's venv (jupyter-ai's venv from `first_answer_bench.py --setup`):

    python bench/second_cell_timeline.py               # 30 rounds; ~2 min
    python bench/second_cell_timeline.py --rounds 60
    python bench/second_cell_timeline.py --kernels 9 --rounds 5   # the second AI cell in 9 fresh pairs; ~5 min

`bench/first_answer_bench.py` times whole cells from the client. This splits each cell at six points that every
product passes, stamped with `time.perf_counter()` (CLOCK_MONOTONIC on Linux: one clock for every process on the
machine): the client sends the execute request (`sent`); IPython's `pre_run_cell` fires (`pre`: the kernel has the
cell; a hook appended after the extension's own); the server has the request's line and headers (`received`,
`tests/stub_openai.py`'s `Recorded.received_at`) and has written its answer (`answered`); IPython's `post_run_cell`
fires (`post`: the cell's code has ended; a hook put before the extension's own); the execute reply reaches the
client (`reply`). The segments between them:

- `to the cell`: sent → pre, the kernel's dispatch (the same code in both products' kernels);
- `before the request`: pre → received, the product's work before its request reaches the server (for nbagent: the
  options, tools, agent, the run's creation and first events, the model process, litellm and the openai SDK);
- `the server`: received → answered, `tests/stub_openai.py` reading the body and writing "hello" (streamed for
  nbagent, whole for jupyter-ai);
- `after the answer`: answered → post, reading the answer and what the product does with it (for nbagent: litellm's
  end of stream, the way back from the model process, the `llm_called` event, the record and its display);
- `to the reply`: post → reply, the post-cell hooks (nbagent's own among them) and the kernel's reply.

Three cells, each sent once a round after an untimed `pass` cell, in a pair of kernels that live through `--rounds`
rounds (so both products see the same machine from one round to the next): `%%agent --new\\nsay hello` and the call
alone (see `first_answer_bench.py`: the request that cell's agent sent, through nbagent's model layer, shown as
Markdown; no run, log, gate or record) in an nbagent kernel, and `%%ai openai-chat:gpt-4o-mini\\nsay hello` in a
jupyter-ai kernel (left out, with a line saying so, when bench/.jai-venv is missing). Each kernel has run its load
cell, 6 s idle and one untimed AI cell first, so its first timed cell is its second AI cell, as `first_answer_bench.py`
times it (with a few small cells between); `--kernels N` runs N such pairs one after another and reports that cell
apart (the median over the pairs) as well as every cell. Every cell must end `ok`, show "hello", and have sent exactly
one request to the server. Medians in ms; no targets: it reports, and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import first_answer_bench as fab
from kernel_harness import Kernel

# `pre` after the extension's pre_run_cell hooks, `post` before its post_run_cell ones; the cell that reads them
# (it names _STAMPS) stamps nothing
HOOKS = """import time as _time
_STAMPS = {}
def _stamp_pre(info):
    if "_STAMPS" not in info.raw_cell: _STAMPS["pre"] = _time.perf_counter()
def _stamp_post(result):
    if "_STAMPS" not in result.info.raw_cell: _STAMPS["post"] = _time.perf_counter()
get_ipython().events.register("pre_run_cell", _stamp_pre)
get_ipython().events.callbacks["post_run_cell"].insert(0, _stamp_post)
"""
READ = "print(__import__('json').dumps(_STAMPS)); _STAMPS.clear()"
SEGMENTS = ("to the cell", "before the request", "the server", "after the answer", "to the reply")


def timeline(k: Kernel, p: fab.Product) -> dict[str, float]:
    """One cell of `p`'s (ms a segment), checked as `first_answer_bench` checks an answer, and one request only."""
    fab.must_be_ok(k, k.submit("pass"), "the cell before")
    before = len(fab.STUB.completion_requests)
    sent = time.perf_counter()
    cell = k.submit(p.ai, cell_id="timed")
    reply = fab.reply_time(k, cell)
    fab.check_answer(p, k, cell, before)
    requests = fab.STUB.completion_requests[before:]
    if len(requests) != 1:
        raise fab.Failed(f"the cell sent {len(requests)} requests to the server, not one")
    read = k.submit(READ)
    fab.must_be_ok(k, read, "the cell that reads the stamps")
    stamps = json.loads(read.stdout.strip().splitlines()[-1])
    received, answered = requests[0].received_at, requests[0].answered_at
    if received is None or answered is None:
        raise fab.Failed("the server did not stamp the request")
    points = [sent, stamps["pre"], received, answered, stamps["post"], reply]  # one more than SEGMENTS
    return {name: (points[i + 1] - points[i]) * 1000 for i, name in enumerate(SEGMENTS)}


@contextlib.contextmanager
def ready(p: fab.Product) -> Iterator[Kernel]:
    """`p`'s kernel after its load cell, 6 s idle, its first AI cell (untimed) and the cell that stamps."""
    with p.kernel() as k:
        fab.must_be_ok(k, k.submit(p.load, cell_id="load"), "the load cell")
        time.sleep(fab.IDLE_S)
        fab.must_be_ok(k, k.submit(p.ai, cell_id="ai"), "the first AI cell")
        fab.must_be_ok(k, k.submit(HOOKS), "the cell that stamps")
        yield k


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30, help="cells per product in each kernel (default 30)")
    ap.add_argument("--kernels", type=int, default=1, help="kernels per product, one pair after another (default 1)")
    args = ap.parse_args()
    nb, call, jai = fab.NBAGENT, fab.CALL_ALONE, fab.JUPYTER_AI
    with_jai = fab.JAI_PYTHON.exists()
    if not with_jai:
        print("bench/.jai-venv is missing (first_answer_bench.py --setup): nbagent only", file=sys.stderr)
    products = [nb, call] + ([jai] if with_jai else [])
    runs: dict[str, list[list[dict[str, float]]]] = {p.name: [] for p in products}  # per kernel, per cell
    fab.STUB.start()
    try:
        for _ in range(args.kernels):
            with contextlib.ExitStack() as stack:
                k_nb = stack.enter_context(ready(nb))
                fab.set_up_call(k_nb)  # the call alone runs in the nbagent kernel, on its agent's first request
                kernels = {nb.name: k_nb, call.name: k_nb}
                if with_jai:
                    kernels[jai.name] = stack.enter_context(ready(jai))
                for rows in runs.values():
                    rows.append([])
                for _ in range(args.rounds):
                    for p in products:
                        runs[p.name][-1].append(timeline(kernels[p.name], p))
    finally:
        fab.STUB.stop()
    report(runs)


def report(runs: dict[str, list[list[dict[str, float]]]]) -> None:
    names = list(runs)
    cells = {n: [cell for kernel in runs[n] for cell in kernel] for n in names}
    nb, jai = fab.NBAGENT.name, fab.JUPYTER_AI.name
    kernels = len(runs[nb])
    print(f"\n{len(cells[nb])} cells per product ({kernels} kernel(s) each), medians (ms); the whole cell is "
          "the median of the sums")
    print(f"{'segment':<22}" + "".join(f"{n:>18}" for n in names))
    for seg in SEGMENTS:
        print(f"{seg:<22}" + "".join(f"{statistics.median(c[seg] for c in cells[n]):>18.2f}" for n in names))
    wholes = {n: statistics.median(sum(c.values()) for c in cells[n]) for n in names}
    firsts = {n: statistics.median(sum(kernel[0].values()) for kernel in runs[n]) for n in names}
    print(f"{'the whole cell':<22}" + "".join(f"{wholes[n]:>18.2f}" for n in names))
    print(f"{'the first timed cell':<22}" + "".join(f"{firsts[n]:>18.2f}" for n in names)
          + f"   (median of {kernels}: the second AI cell for nbagent and jupyter-ai)")
    if jai in wholes:
        for label, values in ((f"whole ÷ {jai}", wholes), (f"first ÷ {jai}", firsts)):
            print(f"{label:<22}" + "".join(f"{values[n] / values[jai]:>17.2f}x" for n in names))


if __name__ == "__main__":
    main()
