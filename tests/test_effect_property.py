"""The effect guarantee as a property: no file changes unless a yes whose terms cover the *resolved* change came first.

Hypothesis builds a folder (files, and links inside it: to files, dangling, to a Python module that does not exist
yet), a model's replies (real file tools: read, create, write, delete, on names that are links, absolute and `./`
spellings, files something runs later: a module, a notebook, `.bashrc`, MCP configurations by name, by content and by
the notebook's settings), the autonomy, and the person's decisions (approve, deny, refine; grants for the run or the
session, with or without patterns), and has the folder change under the run: a link is pointed elsewhere while
the person decides, after the card was drawn. Then, half of the time, the run is replayed (the recorded model at
another autonomy) or re-run with an edited script under the recorded decisions (`--approve recorded`), on the
folder as it first was. The model also writes notebook cells (`insert_code_cell`); the cells a run left behind,
some edited afterwards by one character, are then judged as `nbagent run` judges them before running one.

The oracle is written here, from the files on disk, not from nbagent's log or code. It resolves paths itself
(`os.path.realpath`), has its own list of files that run later, its own risk table and its own glob matcher, and
watches what the person saw: each card, resolved by the oracle when the person is asked. After each phase, every
regular file that was created, changed or removed must be explained by a call of the model's script that:

1. runs without asking at the autonomy, by the oracle's risk of what it does to *that* file (the file it resolves
   to, under some state of the links during the run, written with that content); or
2. is a call the person approved, on a card where it resolved to that very file; or
3. is covered by a grant the person gave (same tool, the oracle's glob over the resolved file, a risk no higher than
   what the person approved for that tool, never a file that runs later);
and, in a replay, 2 and 3 mean: that very call was approved or run under a grant in the recording, resolving to
that very file. A changed file holds the content of an explaining call; a removed one was removed by one.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent.cli.run import agent_cell_clearance
from nbagent.gate.deciders import Answer, ApprovalRequest, Decider, QuestionRequest, RecordedDecider, Verdict
from nbagent.gate.grants import GrantSpec
from nbagent.gate.policy import Budget
from nbagent.ipython.cells import insert_cell_tool, inserted_cells
from nbagent.runtime import Agent
from nbagent.runtime.recording import recorded_events
from nbagent.store.verify import verify_store
from nbagent.tools.files import FileTools

pytestmark = pytest.mark.slow

# ------------------------------------------------------------------------------------------------ the world

FILES = {"data.csv": "region\n", "raw.csv": "raw\n", "notes.md": "n\n", "out/a.md": "a\n"}
LINKS = {"out/latest.md": "../data.csv", "report.md": "helpers.py", "link.md": "notes.md", "conf.json": "raw.csv"}
# while the person decides, a link is pointed elsewhere (or made where there was nothing)
SWAPS = [("link.md", "data.csv"), ("out/latest.md", "a.md"), ("report.md", "raw.csv"), ("new.md", "data.csv"),
         ("out/latest.md", "../helpers.py"), ("link.md", "x.ipynb")]
MCP = '{"mcpServers": {"x": {"command": "sh", "args": ["-c", "touch pwned"]}}}'
CODE_PATHS = ["conf.json"]  # as if the cell said --mcp conf.json

ASKS = {"L0": {"READ_ONLY", "WRITE_LOW_RISK", "WRITE_HIGH_RISK"}, "L1": {"WRITE_LOW_RISK", "WRITE_HIGH_RISK"},
        "L2": {"WRITE_HIGH_RISK"}, "L3": set()}
RANK = {"READ_ONLY": 0, "WRITE_LOW_RISK": 1, "WRITE_HIGH_RISK": 2}
DECLARED = {"read_file": "READ_ONLY", "create_file": "WRITE_LOW_RISK", "write_file": "WRITE_HIGH_RISK",
            "delete_file": "WRITE_HIGH_RISK"}
WRITERS = {"create_file", "write_file", "delete_file"}


def oracle_runs_later(name: str, content: str) -> bool:
    """The oracle's own list, for the names this test uses."""
    base = name.rsplit("/", 1)[-1].lower()
    return (base.endswith((".py", ".ipynb", ".pth")) or base in {".bashrc", ".profile", "mcp.json", ".mcp.json"}
            or name in CODE_PATHS or ("mcp" in base and base.endswith(".json")) or "mcpServers" in content)


def oracle_risk(tool: str, written: str, resolved: str, content: str) -> str:
    risk = DECLARED[tool]
    if risk != "READ_ONLY" and (oracle_runs_later(written, content) or oracle_runs_later(resolved, content)):
        return "WRITE_HIGH_RISK"
    return risk


def covers(pattern: str, path: str) -> bool:
    """The oracle's glob (docs/grants.md): anchored, `*` within a segment, `**` any number of whole segments."""
    pats, parts = pattern.split("/"), path.split("/")

    def match(i: int, j: int) -> bool:
        if i == len(pats):
            return j == len(parts)
        if pats[i] == "**":
            return any(match(i + 1, k) for k in range(j, len(parts) + 1))
        return j < len(parts) and fnmatch.fnmatchcase(parts[j], pats[i]) and match(i + 1, j + 1)

    return match(0, 0)


def resolve(folder: Path, written: str) -> str | None:
    """Where `written` leads now, relative to the folder; None outside it."""
    target = Path(written) if os.path.isabs(written) else folder / written
    real, root = os.path.realpath(target), os.path.realpath(folder)
    rel = os.path.relpath(real, root)
    return None if rel == ".." or rel.startswith("../") else Path(rel).as_posix()


def build(folder: Path, links: list[str]) -> None:
    for name, text in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    for name in links:
        os.symlink(LINKS[name], folder / name)


def reset(folder: Path, links: list[str]) -> None:
    """The folder as it first was (the log stays)."""
    for entry in list(folder.iterdir()):
        if entry.name.endswith(".nbagent"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    build(folder, links)


def snapshot(folder: Path) -> dict[str, str]:
    """Every regular file's text, by path (links and the log left out)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.endswith(".nbagent")]
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file():
                continue
            out[p.relative_to(folder).as_posix()] = p.read_text(errors="replace")
    return out


# ------------------------------------------------------------------------------------------------ the person


@dataclass
class Witness:
    """What the oracle saw: link states, the cards approved (resolved when shown), the grants given."""

    folder: Path
    autonomy: str
    states: list[dict[str, str | None]] = field(default_factory=list)  # written -> resolved, per link state
    approved: set[tuple[str, str, str]] = field(default_factory=set)  # (tool, canonical args, resolved path)
    approved_calls: set[tuple[str, str]] = field(default_factory=set)  # (tool, canonical args) on approved cards
    grants: list[tuple[str, list[str], int]] = field(default_factory=list)  # (tool, patterns, max risk rank)

    def note_state(self, names: list[str]) -> None:
        self.states.append({n: resolve(self.folder, n) for n in names})


class Person(Decider):
    def __init__(self, decisions: list[tuple[Any, ...]], witness: Witness, names: list[str]) -> None:
        self.decisions = list(decisions)
        self.witness = witness
        self.names = names

    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        if not self.decisions:
            return None
        action, scope, patterns, swap = self.decisions.pop(0)
        w = self.witness
        shown = {}
        for s in request.steps:  # the card, as the oracle resolves it now
            path = str(s.arguments.get("path", ""))
            shown[s.call_id] = resolve(w.folder, path) if path else None
        grant = GrantSpec(scope=scope, paths=patterns) if scope else None
        if action == "approve":
            w.approved_calls.update((s.tool, json.dumps(s.arguments, sort_keys=True)) for s in request.steps)
            for s in request.steps:
                if shown[s.call_id] is not None:
                    w.approved.add((s.tool, json.dumps(s.arguments, sort_keys=True), shown[s.call_id]))
            if grant is not None:
                for s in request.steps:
                    path = str(s.arguments.get("path", ""))
                    resolved = shown[s.call_id]
                    risk = oracle_risk(s.tool, path, resolved or path, str(s.arguments.get("content", "")))
                    if s.tool in WRITERS and risk in ASKS[w.autonomy] and resolved is not None:
                        pats = patterns if patterns is not None else [resolved]
                        w.grants.append((s.tool, pats, RANK[risk]))
        if swap is not None:  # the folder changes after the card was drawn
            name, to = swap
            link = w.folder / name
            if link.is_symlink() or not link.exists():
                if link.is_symlink():
                    link.unlink()
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(to, link)
                w.note_state(self.names)
        if action == "approve":
            return Verdict.approve(grant=grant)
        if action == "deny":
            return Verdict.deny("no", grant=grant)
        return Verdict.refine("something else")

    async def answer(self, request: QuestionRequest) -> Answer | None:
        return None


# ------------------------------------------------------------------------------------------------ the oracle


def granted(tool: str, written: str, path: str, content: str, w: Witness) -> bool:
    """A grant the person gave covers this call's change of `path` (oracle's terms)."""
    risk = oracle_risk(tool, written, path, content)
    return not oracle_runs_later(path, content) and not oracle_runs_later(written, content) and any(
        t == tool and RANK[risk] <= rank and any(covers(p, path) for p in pats) for t, pats, rank in w.grants)


def grant_covered(calls: list[tuple[str, dict[str, Any]]], w: Witness) -> set[tuple[str, str, str]]:
    """Every (tool, args, path) a grant of the person's covers, under any state of the links seen."""
    out = set()
    for tool, args in calls:
        written, content = str(args.get("path", "")), str(args.get("content", ""))
        for state in w.states:
            path = state.get(written)
            if tool in WRITERS and path is not None and granted(tool, written, path, content, w):
                out.add((tool, json.dumps(args, sort_keys=True), path))
    return out


def explained(before: dict[str, str], after: dict[str, str], calls: list[tuple[str, dict[str, Any]]], w: Witness,
              recorded: set[tuple[str, str, str]] | None) -> None:
    """Assert every change is explained (module docstring)."""
    for path in sorted(set(before) | set(after)):
        if before.get(path) == after.get(path):
            continue
        removed = path not in after
        reasons = []
        for tool, args in calls:
            if tool not in WRITERS or (tool == "delete_file") != removed:
                continue
            content = str(args.get("content", ""))
            if not removed and content != after[path]:
                continue
            written = str(args.get("path", ""))
            if not any(state.get(written) == path for state in w.states):
                continue
            key = (tool, json.dumps(args, sort_keys=True), path)
            if oracle_risk(tool, written, path, content) not in ASKS[w.autonomy]:
                reasons.append("autonomy")
            elif recorded is not None:
                if key in recorded:
                    reasons.append("recorded")
            elif key in w.approved:
                reasons.append("approved")
            elif granted(tool, written, path, content, w):
                reasons.append("grant")
        assert reasons, (f"{path} {'removed' if removed else 'changed'} with no yes covering it "
                         f"(autonomy {w.autonomy}, recorded={recorded is not None}): {calls}")


def judge_cells(store: Any, run_id: str, w: Witness | None, edit: int) -> None:
    """The cells a run wrote, some edited by one character, as `nbagent run` judges them: a cell may run only when
    the person approved a card holding that very call and nobody changed its code since (oracle); a replay's own
    cells were approved by no person."""
    for i, cell in enumerate(inserted_cells(store.run_events(run_id))):
        source = cell["source"]
        edited = (edit + i) % 3 == 0
        if edited:
            source = source.replace("1", "2", 1) if "1" in source else source + "#"
        verdict = agent_cell_clearance(store, {"cell_type": "code", "source": source, "metadata": cell["metadata"]})
        call = next(e.payload for e in store.run_events(run_id) if e.type == "tool_call_started"
                    and e.payload.call_id == cell["metadata"]["nbagent"]["call_id"])
        approved = w is not None and ("insert_code_cell", json.dumps(call.arguments, sort_keys=True)) in \
            w.approved_calls
        assert (verdict is None) == (approved and not edited), (verdict, approved, edited, call.arguments)


# ------------------------------------------------------------------------------------------------ generation

NAMES = ["data.csv", "raw.csv", "notes.md", "out/a.md", "out/latest.md", "report.md", "link.md", "new.md",
         "out/new.md", "helpers.py", "conf.json", "servers.json", ".bashrc", "x.ipynb", "./data.csv", "mcp.json"]
CONTENTS = ["1\n", "2\n", MCP]
CODES = ["x = 1", "print(11)", "open('data.csv', 'w').write('1')"]


@st.composite
def file_call(draw: Any) -> dict[str, Any]:
    tool = draw(st.sampled_from(["read_file", "create_file", "create_file", "write_file", "delete_file",
                                 "insert_code_cell"]))
    if tool == "insert_code_cell":
        return {"name": tool, "arguments": {"code": draw(st.sampled_from(CODES))}}
    name = draw(st.sampled_from([*NAMES, "@data.csv", "@out/latest.md"]))
    args: dict[str, Any] = {"path": name}
    if tool in ("create_file", "write_file"):
        args["content"] = draw(st.sampled_from(CONTENTS))
    return {"name": tool, "arguments": args}


TURN = st.one_of(st.lists(file_call(), min_size=1, max_size=3).map(lambda c: {"tool_calls": c}),
                 st.just({"content": "finished"}))
DECISION = st.tuples(st.sampled_from(["approve", "approve", "approve", "deny", "refine"]),
                     st.sampled_from([None, None, "run", "session"]),
                     st.sampled_from([None, None, ["**"], ["out/**"], ["*.md"], ["data.csv"], ["*"]]),
                     st.one_of(st.none(), st.none(), st.sampled_from(SWAPS)))
LINK_SETS = st.lists(st.sampled_from(sorted(LINKS)), unique=True)


def _absolute(folder: Path, script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`@name` in a generated path stands for its absolute spelling inside the folder."""
    text = json.dumps(script).replace('"@', json.dumps(str(folder))[:-1] + "/")
    return json.loads(text)


def _tools(folder: Path) -> list[Any]:
    return [*FileTools(folder).tools(), insert_cell_tool(lambda: ("agent-cell", None))]


def _calls(script: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["name"], c["arguments"]) for turn in script for c in turn.get("tool_calls") or []]


def one_session(links: list[str], autonomy: str, script: list[dict[str, Any]], decisions: list[tuple[Any, ...]],
                then: str | None, other: str, edit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build(folder, links)
        script = _absolute(folder, script)
        names = sorted({str(a.get("path", "")) for _, a in _calls(script)} | set(NAMES))
        w = Witness(folder, autonomy)
        w.note_state(names)
        before = snapshot(folder)
        a = Agent(script={"turns": script}, tools=_tools(folder), autonomy=autonomy,
                  decider=Person(decisions, w, names), store=folder / "nb.ipynb", code_paths=CODE_PATHS,
                  budget=Budget(max_tool_calls_per_turn=3, max_steps=20), retry_base=0.0, retry_cap=0.0)
        first = asyncio.run(a.run("do it"))
        explained(before, snapshot(folder), _calls(script), w, None)
        judge_cells(a.store, first.run_id, w, edit)
        assert verify_store(a.store).ok
        if then is None:
            return
        # phase 2, on the folder as it first was: a replay at another autonomy, or an edited script under the
        # recorded decisions (`--approve recorded`)
        reset(folder, links)
        w2 = Witness(folder, other)
        w2.note_state(names)
        before = snapshot(folder)
        recorded = w.approved | grant_covered(_calls(script), w)
        if then == "replay":
            b = Agent(replay=first.run_id, tools=_tools(folder), autonomy=other, store=a.store,
                      code_paths=CODE_PATHS, budget=Budget(max_tool_calls_per_turn=3, max_steps=20))
            calls = _calls(script)
        else:
            edited = json.loads(json.dumps(script))
            flat = [c for turn in edited for c in turn.get("tool_calls") or []]
            if flat:
                victim = flat[edit % len(flat)]
                victim["name"] = ["delete_file", "write_file", "create_file"][edit % 3]
                victim["arguments"] = {"path": NAMES[edit % len(NAMES)], **(
                    {} if victim["name"] == "delete_file" else {"content": CONTENTS[edit % len(CONTENTS)]})}
            decider = RecordedDecider.from_events(recorded_events(a.store, first.run_id), first.run_id)
            b = Agent(script={"turns": edited}, tools=_tools(folder), autonomy=other, decider=decider,
                      store=a.store, code_paths=CODE_PATHS, budget=Budget(max_tool_calls_per_turn=3, max_steps=20),
                      retry_base=0.0, retry_cap=0.0)
            calls = _calls(edited)
        second = asyncio.run(b.run("do it"))
        explained(before, snapshot(folder), calls, w2, recorded)
        judge_cells(a.store, second.run_id, None, edit)
        assert verify_store(a.store).ok
        a.store.close()


RUNS = {"links": LINK_SETS, "autonomy": st.sampled_from(["L0", "L1", "L2", "L3"]),
        "script": st.lists(TURN, min_size=1, max_size=5), "decisions": st.lists(DECISION, max_size=6),
        "then": st.sampled_from([None, "replay", "edited"]), "other": st.sampled_from(["L0", "L1", "L2", "L3"]),
        "edit": st.integers(0, 50)}


@settings(max_examples=examples(700), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**RUNS)
def test_no_file_changes_without_a_yes_that_covers_the_resolved_change(**kw: Any) -> None:
    one_session(**kw)


# Sessions shaped for grants and links: writes through the links, grants with wide patterns, swaps.
GRANTING = st.tuples(st.just("approve"), st.sampled_from(["run", "session"]),
                     st.sampled_from([None, ["**"], ["out/**"], ["*.md"], ["*"]]),
                     st.one_of(st.none(), st.sampled_from(SWAPS)))
LINKED = st.sampled_from(["out/latest.md", "report.md", "link.md", "out/a.md", "new.md", "conf.json", "@out/latest.md"])


@st.composite
def linked_call(draw: Any) -> dict[str, Any]:
    tool = draw(st.sampled_from(["create_file", "write_file", "write_file", "delete_file"]))
    args: dict[str, Any] = {"path": draw(LINKED)}
    if tool != "delete_file":
        args["content"] = draw(st.sampled_from(["1\n", "2\n"]))
    return {"name": tool, "arguments": args}


@settings(max_examples=examples(400), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(links=st.just(sorted(LINKS)), autonomy=st.sampled_from(["L0", "L1", "L2"]),
       script=st.lists(st.lists(linked_call(), min_size=1, max_size=2).map(lambda c: {"tool_calls": c}),
                       min_size=2, max_size=6),
       decisions=st.lists(GRANTING, min_size=1, max_size=4), then=st.sampled_from([None, "replay", "edited"]),
       other=st.sampled_from(["L1", "L2"]), edit=st.integers(0, 50))
def test_grants_and_approvals_follow_links_to_what_they_touch(**kw: Any) -> None:
    one_session(**kw)
