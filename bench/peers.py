"""nbagent against its peers on the same work: per-step wall time, cold start, import + first answer.

Run from the repository root:

    python bench/peers.py --setup          # create bench/.peers-venv with the peers (pinned below); ~1 min
    python bench/peers.py                  # N = 50, 200, 1000; 3 interleaved rounds; about 15 min
    python bench/peers.py --quick          # N = 50, 200; 1 round; about 1 min
    python bench/peers.py --sizes 50 --rounds 5 --targets nbagent,pydantic-ai
    python bench/peers.py --print-setup    # only print the commands --setup runs

The peers live in their own virtual environment, `bench/.peers-venv` (git-ignored), so they never touch
nbagent's; nbagent runs with this interpreter (`sys.executable`, the repository's venv). The commands:

    python3 -m venv bench/.peers-venv
    bench/.peers-venv/bin/pip install "langgraph==1.2.*" "langgraph-checkpoint-sqlite==3.1.*" \\
        "pydantic-ai-slim==2.68.*" "llm==0.36"

**Workload** (the same for every target): a read-only no-op tool `noop(i) -> "ok"` called N times, one call per
model turn, by an offline fake model that counts its turns (O(1) per turn: it does not look at the history),
then a final text turn: N + 1 model turns, N tool calls.

- `nbagent`: `Agent(function=...)` (the function model), autonomy L3 (no approval), no budgets, its event log
  in a fresh temporary folder. `nbagent-litellm` is the same with `NBAGENT_LOCAL_VIA_LITELLM=1`, which sends the
  offline model's calls through litellm as before the offline path (the baseline of that change).
- `langgraph`: `langgraph.prebuilt.create_react_agent` with a `BaseChatModel` subclass as the fake model and
  `SqliteSaver` (langgraph-checkpoint-sqlite) on a file: a checkpoint per super-step.
- `pydantic-ai`: `Agent(FunctionModel(...))`, `run_sync`, no request limit, no log.
- `llm`: an `llm.Model` subclass with `supports_tools`, `model.chain(..., tools=[noop])`, every response
  logged to a SQLite database (`response.log_to_db`, with llm's migrations) as the chain yields it.

**Method.** Every measurement is a fresh process (`--worker`). A per-step measurement imports, runs a 3-step
warm-up run (its own log or thread), then times one N-step run: per-step wall = run wall / N. Cold start times,
inside the process from before the first import: `import` (the modules the workload needs) and `import + first
answer` (build the agent and run one model turn that answers with text, no tool call; nbagent with the scripted
model, as in `%%agent --script`). Interpreter start-up (the same for everyone) is not included. Rounds are
interleaved: each round runs every target at every size once, in an order rotated per round, so load on the
machine weighs on all. Medians over rounds are printed, and the peak RSS of each kind of process.

**Targets** (issue 16), as ratios to the peers measured in the same run: nbagent's per-step wall ≤ 0.7x every
peer at N = 50 and 200 and ≤ 0.5x at N = 1000; import + first answer ≤ 600 ms. The bench prints PASS/FAIL and
always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_VENV = HERE / ".peers-venv"
# the versions measured in docs/performance.md (pydantic-ai 2.68 as in issue 16)
PEER_REQUIREMENTS = ["langgraph==1.2.*", "langgraph-checkpoint-sqlite==3.1.*", "pydantic-ai-slim==2.68.*", "llm==0.36"]
PEERS = ("langgraph", "pydantic-ai", "llm")
TARGETS = ("nbagent", "nbagent-litellm", *PEERS)
BEFORE: dict[str, str] = {}  # --before PATH: the target "nbagent-before" imports nbagent from PATH
LABELS = {
    "nbagent": "nbagent (function model, offline path)",
    "nbagent-litellm": "nbagent (function model through litellm)",
    "nbagent-before": "nbagent before (--before)",
    "langgraph": "LangGraph + SQLite checkpointer",
    "pydantic-ai": "pydantic-ai (FunctionModel, no log)",
    "llm": "simonw/llm (SQLite log)",
}
DISTS = {"langgraph": "langgraph", "pydantic-ai": "pydantic-ai-slim", "llm": "llm"}
WARMUP = 3
TARGET_RATIO = {50: 0.7, 200: 0.7, 1000: 0.5}
FIRST_ANSWER_MS = 600.0

perf = time.perf_counter
_T0 = perf()


# ============================================================================================== workers
# Each runs in a fresh process and prints one JSON line. They import only what their target needs.


def _maxrss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Counter:
    """The fake models' state: which turn of the current run this is, and how many tool calls to ask for."""

    def __init__(self) -> None:
        self.k = 0
        self.n = 0

    def reset(self, n: int) -> None:
        self.k, self.n = 0, n

    def next(self) -> int | None:
        """The tool call's argument for this turn, or None: answer with text."""
        self.k += 1
        return self.k if self.k <= self.n else None


TURNS = Counter()


def _nbagent(tmp: Path, *, scripted_answer: bool = False) -> Any:
    from nbagent.gate.deciders import PolicyDecider
    from nbagent.gate.policy import Budget
    from nbagent.runtime import Agent
    from nbagent.tools.base import tool

    @tool(risk="READ_ONLY")
    def noop(i: int) -> str:
        """Do nothing."""
        return "ok"

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        k = TURNS.next()
        return "done" if k is None else {"tool_calls": [{"name": "noop", "arguments": {"i": k}}]}

    kw: dict[str, Any] = {"script": {"turns": [{"content": "done"}]}} if scripted_answer else {"function": model}
    agent = Agent(**kw, tools=[noop], decider=PolicyDecider("all"), store=tmp / "nb.ipynb",
                  budget=Budget(max_steps=None, max_model_calls=None), autonomy="L3")

    def run(n: int) -> str:
        import asyncio

        TURNS.reset(n)
        result = asyncio.run(agent.run("go", previous_run_id=None))
        if result.status.value != "completed":
            raise RuntimeError(f"nbagent run ended {result.status.value}: {result}")
        return str(result.answer)

    return run


def _langgraph(tmp: Path) -> Any:
    import sqlite3
    import warnings

    warnings.filterwarnings("ignore", message=".*create_react_agent.*")
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.prebuilt import create_react_agent

    @tool
    def noop(i: int) -> str:
        """Do nothing."""
        return "ok"

    class FakeModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "fake"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            k = TURNS.next()
            if k is None:
                msg = AIMessage(content="done")
            else:
                msg = AIMessage(content="", tool_calls=[{"name": "noop", "args": {"i": k}, "id": f"call_{k}"}])
            return ChatResult(generations=[ChatGeneration(message=msg)])

    conn = sqlite3.connect(str(tmp / "checkpoints.sqlite"), check_same_thread=False)
    graph = create_react_agent(FakeModel(), [noop], checkpointer=SqliteSaver(conn))
    threads = iter(range(10**6))

    def run(n: int) -> str:
        TURNS.reset(n)
        config = {"configurable": {"thread_id": f"t{next(threads)}"}, "recursion_limit": 2 * n + 10}
        out = graph.invoke({"messages": [("user", "go")]}, config)
        return str(out["messages"][-1].content)

    return run


def _pydantic_ai(tmp: Path) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import UsageLimits

    def model(messages: Any, info: Any) -> ModelResponse:
        k = TURNS.next()
        if k is None:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("noop", {"i": k}, tool_call_id=f"call_{k}")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def noop(i: int) -> str:
        """Do nothing."""
        return "ok"

    def run(n: int) -> str:
        TURNS.reset(n)
        return str(agent.run_sync("go", usage_limits=UsageLimits(request_limit=None)).output)

    return run


def _llm(tmp: Path) -> Any:
    import llm
    import sqlite_utils
    from llm.migrations import migrate

    def noop(i: int) -> str:
        """Do nothing."""
        return "ok"

    class FakeModel(llm.Model):
        model_id = "fake-bench"
        supports_tools = True
        can_stream = False

        def execute(self, prompt: Any, stream: bool, response: Any, conversation: Any) -> Any:
            k = TURNS.next()
            if k is None:
                yield "done"
            else:
                response.add_tool_call(llm.ToolCall(name="noop", arguments={"i": k}))

    db = sqlite_utils.Database(str(tmp / "logs.db"))
    migrate(db)
    model = FakeModel()

    def run(n: int) -> str:
        TURNS.reset(n)
        text = ""
        for response in model.conversation(chain_limit=0).chain("go", tools=[noop]).responses():
            text = response.text()
            response.log_to_db(db)
        return text

    return run


BUILDERS = {"nbagent": _nbagent, "nbagent-litellm": _nbagent, "nbagent-before": _nbagent, "langgraph": _langgraph,
            "pydantic-ai": _pydantic_ai, "llm": _llm}


def worker(target: str, mode: str, n: int) -> dict[str, Any]:
    t0 = perf()
    tmp = Path(tempfile.mkdtemp(prefix=f"peers-{target}-"))
    try:
        if mode == "import":
            (tmp / "a").mkdir()
            BUILDERS[target](tmp / "a")
            return {"ms": (perf() - t0) * 1000, "rss_mb": _maxrss_mb()}
        if mode == "first":
            (tmp / "a").mkdir()
            if target.startswith("nbagent"):
                run = _nbagent(tmp / "a", scripted_answer=True)
            else:
                run = BUILDERS[target](tmp / "a")
            t_import = perf()
            answer = run(0)
            assert answer == "done", answer
            return {"ms": (perf() - t0) * 1000, "import_ms": (t_import - t0) * 1000, "rss_mb": _maxrss_mb()}
        (tmp / "warm").mkdir()
        (tmp / "a").mkdir()
        if target.startswith("nbagent"):
            BUILDERS[target](tmp / "warm")(WARMUP)
            run = BUILDERS[target](tmp / "a")
        else:
            run = BUILDERS[target](tmp / "a")
            run(WARMUP)
        t1 = perf()
        answer = run(n)
        wall = perf() - t1
        assert answer == "done", answer
        return {"per_step_ms": wall * 1000 / n, "wall_s": wall, "rss_mb": _maxrss_mb()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ============================================================================================== driver


def peers_python() -> Path:
    return PEERS_VENV / "bin" / "python"


def setup_commands() -> list[list[str]]:
    return [[sys.executable, "-m", "venv", str(PEERS_VENV)],
            [str(PEERS_VENV / "bin" / "pip"), "install", "-q", *PEER_REQUIREMENTS]]


def setup(timeout: float) -> bool:
    for cmd in setup_commands():
        print("$", " ".join(cmd), flush=True)
        try:
            subprocess.run(cmd, check=True, timeout=timeout)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            print(f"setup failed: {exc}", file=sys.stderr)
            return False
    return True


def interpreter(target: str) -> Path | None:
    if target.startswith("nbagent"):
        return Path(sys.executable)
    py = peers_python()
    return py if py.exists() else None


def spawn(target: str, mode: str, n: int, timeout: float) -> dict[str, Any] | None:
    py = interpreter(target)
    if py is None:
        return None
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("NBAGENT_LOCAL_VIA_LITELLM", None)
    if target == "nbagent-litellm":
        env["NBAGENT_LOCAL_VIA_LITELLM"] = "1"
    env["PYTHONPATH"] = (BEFORE["path"] if target == "nbagent-before" else str(ROOT)) if target.startswith("nbagent") \
        else ""
    cmd = [str(py), str(Path(__file__).resolve()), "--worker", target, "--mode", mode, "--n", str(n)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        print(f"  {target} {mode} {n}: timed out after {timeout:.0f} s", file=sys.stderr)
        return None
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        print(f"  {target} {mode} {n}: failed: {' | '.join(tail)}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def versions(target: str) -> str:
    py = interpreter(target)
    if py is None:
        return "not installed"
    dist = "nbagent" if target.startswith("nbagent") else DISTS[target]
    code = f"from importlib.metadata import version; print(version({dist!r}))"
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT) if target.startswith("nbagent") else ""})
    return out.stdout.strip() or "?"


def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def progress(msg: str) -> None:
    print(f"[{perf() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--setup", action="store_true", help="create bench/.peers-venv with the peers, then run")
    ap.add_argument("--setup-only", action="store_true", help="create bench/.peers-venv and exit")
    ap.add_argument("--print-setup", action="store_true", help="print the commands that create the peers' venv")
    ap.add_argument("--setup-timeout", type=float, default=900.0)
    ap.add_argument("--quick", action="store_true", help="N = 50, 200; 1 round")
    ap.add_argument("--sizes", default="50,200,1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold-rounds", type=int, default=None, help="rounds of cold-start processes (default: --rounds"
                                                                  " + 2)")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per measurement process")
    ap.add_argument("--before", metavar="PATH", help="also measure nbagent imported from PATH (e.g. an earlier commit: "
                    "git archive COMMIT nbagent | tar -x -C PATH) as the target nbagent-before")
    ap.add_argument("--worker", choices=[*TARGETS, "nbagent-before"], help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("steps", "import", "first"), default="steps", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=50, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.worker, args.mode, args.n)))
        return 0
    if args.print_setup:
        for cmd in setup_commands():
            print(" ".join(f'"{c}"' if "*" in c else c for c in cmd))
        return 0
    if (args.setup or args.setup_only) and not setup(args.setup_timeout):
        print("peers not installed: only nbagent is measured", file=sys.stderr)
    if args.setup_only:
        return 0
    sizes = [50, 200] if args.quick else [int(s) for s in args.sizes.split(",") if s]
    rounds = 1 if args.quick else args.rounds
    cold_rounds = args.cold_rounds if args.cold_rounds is not None else (2 if args.quick else rounds + 2)
    targets = [t for t in args.targets.split(",") if t]
    if args.before:
        BEFORE["path"] = str(Path(args.before).resolve())
        if "nbagent-before" not in targets:
            targets.insert(0, "nbagent-before")
    missing = [t for t in targets if interpreter(t) is None]
    if missing:
        print(f"not installed: {', '.join(missing)} (python bench/peers.py --setup, or --print-setup for the "
              "commands); measuring the others", file=sys.stderr)
        targets = [t for t in targets if t not in missing]

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# bench/peers.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load average {load:.2f} at start")
    print("# versions: " + ", ".join(f"{t} {versions(t)}" for t in targets))
    print(f"# sizes {sizes}, {rounds} round(s) of per-step runs, {cold_rounds} of cold starts, interleaved\n")

    steps: dict[tuple[str, int], list[float]] = {}
    rss: dict[tuple[str, str], list[float]] = {}
    cold: dict[tuple[str, str], list[float]] = {}
    for r in range(max(rounds, cold_rounds)):
        order = targets[r % len(targets):] + targets[:r % len(targets)]
        if r < cold_rounds:
            for mode in ("import", "first"):
                for t in order:
                    res = spawn(t, mode, 0, args.timeout)
                    if res is not None:
                        cold.setdefault((t, mode), []).append(res["ms"])
                        rss.setdefault((t, mode), []).append(res["rss_mb"])
            progress(f"round {r + 1}: cold starts done")
        if r < rounds:
            for n in sizes:
                for t in order:
                    res = spawn(t, "steps", n, args.timeout)
                    if res is not None:
                        steps.setdefault((t, n), []).append(res["per_step_ms"])
                        rss.setdefault((t, f"steps {n}"), []).append(res["rss_mb"])
                progress(f"round {r + 1}: N={n} done")
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    print("## Per-step wall, ms (median over rounds; min-max)\n")
    print("| target | " + " | ".join(f"N={n}" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for t in targets:
        cells = []
        for n in sizes:
            xs = steps.get((t, n), [])
            cells.append(f"{f(med(xs), 2)} ({f(min(xs), 2)}-{f(max(xs), 2)})" if xs else "-")
        print(f"| {LABELS[t]} | " + " | ".join(cells) + " |")

    print("\n## Cold start, ms in a fresh process (median; min-max)\n")
    print("| target | import | import + first answer | peak RSS after first answer, MB |")
    print("|---|---:|---:|---:|")
    for t in targets:
        imp, first = cold.get((t, "import"), []), cold.get((t, "first"), [])
        print(f"| {LABELS[t]} | {f(med(imp), 0)} ({f(min(imp, default=None), 0)}-{f(max(imp, default=None), 0)}) | "
              f"{f(med(first), 0)} ({f(min(first, default=None), 0)}-{f(max(first, default=None), 0)}) | "
              f"{f(med(rss.get((t, 'first'), [])), 0)} |")

    print("\n## Peak RSS of the per-step processes, MB (median)\n")
    print("| target | " + " | ".join(f"N={n}" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for t in targets:
        print(f"| {LABELS[t]} | " + " | ".join(f(med(rss.get((t, f'steps {n}'), [])), 0) for n in sizes) + " |")

    print("\n## Targets (ratios of medians measured in this run)\n")
    print("| ratio | measured | target | |")
    print("|---|---:|---:|---|")
    for ours in [t for t in ("nbagent-before", "nbagent") if t in targets]:
        name = "nbagent before" if ours == "nbagent-before" else "nbagent"
        for n in sizes:
            mine = med(steps.get((ours, n), []))
            for p in [p for p in targets if p in PEERS]:
                theirs = med(steps.get((p, n), []))
                if mine is None or theirs is None:
                    continue
                ratio = mine / theirs
                limit = TARGET_RATIO.get(n)
                verdict = "" if limit is None else ("PASS" if ratio <= limit else "FAIL")
                print(f"| {name} / {p}, per step, N={n} | {ratio:.2f} | {'-' if limit is None else f'≤ {limit}'} "
                      f"| {verdict} |")
        first = med(cold.get((ours, "first"), []))
        if first is not None:
            print(f"| {name} import + first answer, ms | {first:,.0f} | ≤ {FIRST_ANSWER_MS:.0f} | "
                  f"{'PASS' if first <= FIRST_ANSWER_MS else 'FAIL'} |")
            best = min((med(cold.get((p, "first"), [])) or float("inf") for p in PEERS if p in targets),
                       default=float("inf"))
            if best != float("inf"):
                print(f"| {name} / best peer, import + first answer | {first / best:.2f} | ≤ 1 | "
                      f"{'PASS' if first <= best else 'FAIL'} |")
    ours = "nbagent"
    if "nbagent-before" in targets and ours in targets:
        print("\n## After / before (information)\n")
        print("| | " + " | ".join(f"N={n}" for n in sizes) + " | import | first answer |")
        print("|---|" + "---:|" * (len(sizes) + 2))
        cells = []
        for n in sizes:
            a, b = med(steps.get((ours, n), [])), med(steps.get(("nbagent-before", n), []))
            cells.append(f"{a / b:.2f}" if a and b else "-")
        for mode in ("import", "first"):
            a, b = med(cold.get((ours, mode), [])), med(cold.get(("nbagent-before", mode), []))
            cells.append(f"{a / b:.2f}" if a and b else "-")
        print("| nbagent / nbagent before | " + " | ".join(cells) + " |")
    if ours in targets and "nbagent-litellm" in targets:
        print("\n## The offline path against litellm (same code otherwise; information)\n")
        print("| | " + " | ".join(f"N={n}" for n in sizes) + " | first answer |")
        print("|---|" + "---:|" * (len(sizes) + 1))
        cells = []
        for n in sizes:
            a, b = med(steps.get((ours, n), [])), med(steps.get(("nbagent-litellm", n), []))
            cells.append(f"{a / b:.2f}" if a and b else "-")
        a, b = med(cold.get((ours, "first"), [])), med(cold.get(("nbagent-litellm", "first"), []))
        cells.append(f"{a / b:.2f}" if a and b else "-")
        print("| offline path / through litellm | " + " | ".join(cells) + " |")
    print(f"\n# load average {load:.2f} at start, {load_end:.2f} at the end (2 cores: above ~1, other work shared "
          "the machine and the numbers are noisier)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
