"""Where an `%%agent` cell's time goes beside its model call: the cell against the same call made alone, one kernel.

Run from the repository root, with nbagent's venv:

    python bench/second_cell_parts.py               # 25 rounds; ~3 min
    python bench/second_cell_parts.py --rounds 40

`bench/first_answer_bench.py` measures one second cell per fresh kernel against jupyter-ai's, and single cells on
this machine move by ±5 ms from kernel to kernel. This takes the kernel-to-kernel part out: one nbagent kernel (the
test suite's driver, `tests/kernel_harness.py`), the model `openai/gpt-4o-mini` through the kernel's model process
to `tests/stub_openai.py` on 127.0.0.1 (every answer "hello"), and these cells, each sent once a round in the same
order, each after an untimed `pass` cell:

- `%%agent`: `%%agent --new\\nsay hello`, the whole cell;
- `the call alone`: the request that cell's agent sent (its messages and tool schemas, as the server received them)
  through nbagent's model layer (`nbagent.models.llm.complete`: litellm, streamed, in the model process), the answer
  shown
  as Markdown: no run, no log, no gate, no record;
- the same without streaming, without the tools (only the prompt), and without either;
- `openai SDK in the kernel`: the prompt alone through the openai SDK's `AsyncOpenAI` in the kernel, not streamed,
  shown as Markdown: the path jupyter-ai's `%%ai` takes, without langchain;
- `x = 1`: the kernel's own round trip.

Wall time on the client, from the execute request to its reply; medians and quartiles. The differences between
rows are what each part costs: `%%agent` less the call alone is nbagent's own work around the call (the run, its
log, the gate, the record). Every cell must end `ok` and show "hello". No targets: it reports, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from kernel_harness import Kernel  # noqa: E402
from stub_openai import Reply, StubOpenAI  # noqa: E402

AGENT = "%%agent --new\nsay hello"
REQUEST = "agent-request.json"
SETUP = f"""import json as _json
import openai as _openai
from IPython.display import Markdown as _Markdown, display as _display
from nbagent.models.llm import ModelSettings as _Settings, complete as _complete
with open({REQUEST!r}, encoding="utf-8") as _f:
    _REQUEST = _json.load(_f)
async def _call(stream=True, tools=True):
    messages = _REQUEST["messages"] if tools else _REQUEST["messages"][-1:]
    reply = await _complete(_Settings(model="openai/gpt-4o-mini"), messages, _REQUEST["tools"] if tools else [],
                            on_token=(lambda text: None) if stream else None)
    _display(_Markdown(reply.content))
_client = _openai.AsyncOpenAI()
async def _sdk():
    reply = await _client.chat.completions.create(model="gpt-4o-mini", messages=_REQUEST["messages"][-1:])
    _display(_Markdown(reply.choices[0].message.content))
"""
CELLS = {"%%agent": AGENT, "the call alone": "await _call()", "not streamed": "await _call(stream=False)",
         "no tools": "await _call(tools=False)", "neither": "await _call(False, False)",
         "openai SDK in the kernel": "await _sdk()", "x = 1": "x = 1"}


def timed(k: Kernel, code: str) -> float:
    t0 = time.perf_counter()
    cell = k.submit(code, cell_id="timed")
    while cell.reply is None:
        k.pump(0.001)
    wall = time.perf_counter() - t0
    k.wait(cell, 60)
    if not cell.ok:
        raise SystemExit(f"cell failed: {code!r}: {cell.outputs}")
    if code != "x = 1" and "hello" not in json.dumps(cell.outputs):
        raise SystemExit(f"no 'hello' in the outputs of {code!r}: {json.dumps(cell.outputs)[:300]}")
    return 1000 * wall


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rounds", type=int, default=25)
    args = ap.parse_args()
    stub = StubOpenAI()
    stub.fallback = Reply(content="hello")
    stub.start()
    env = {"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": stub.base_url, "OPENAI_API_BASE": stub.base_url,
           "NBAGENT_MODEL": "openai/gpt-4o-mini"}
    times: dict[str, list[float]] = {name: [] for name in CELLS}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            k = Kernel(Path(tmp), env=env)
            try:
                k.run("%load_ext nbagent")
                k.run(AGENT, timeout=120)
                body = stub.completion_requests[-1].body
                (Path(tmp) / REQUEST).write_text(json.dumps({"messages": body["messages"], "tools": body["tools"]}))
                if not k.run(SETUP).ok:
                    raise SystemExit("the setup cell failed")
                for code in CELLS.values():  # each path's first use (imports, connections) untimed
                    timed(k, code)
                for _ in range(args.rounds):
                    for name, code in CELLS.items():
                        k.run("pass")
                        times[name].append(timed(k, code))
            finally:
                k.close()
    finally:
        stub.stop()
    print(f"\nOne kernel, {args.rounds} rounds, each cell once a round (ms, client wall; median, quartiles)\n")
    print("| cell | median | quartiles | ÷ openai SDK in the kernel |\n|---|---:|---:|---:|")
    sdk = statistics.median(times["openai SDK in the kernel"])
    for name, xs in times.items():
        q = statistics.quantiles(xs, n=4)
        print(f"| {name} | {statistics.median(xs):.1f} | {q[0]:.1f}-{q[2]:.1f} | {statistics.median(xs) / sdk:.2f}x |")
    own = statistics.median(times["%%agent"]) - statistics.median(times["the call alone"])
    print(f"\n%%agent less the call alone (nbagent's own work around the call): {own:.1f} ms")


if __name__ == "__main__":
    main()
