"""Attacks on grants: each test tries to make a grant let through a call the person did not approve in kind.

A test marked `# Was:` describes a hole found this way and asserts the safe behaviour (it failed until the fix);
the others document attempts that held. Offline, deterministic: the scripted model, user tools that record what
ran, no files touched.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from nbagent.events.levels import Risk
from nbagent.events.model import GrantGiven
from nbagent.gate import grants
from nbagent.gate.deciders import (
    Answer,
    ApprovalRequest,
    Decider,
    PolicyDecider,
    QuestionRequest,
    RecordedDecider,
    Verdict,
)
from nbagent.gate.grants import GrantSpec
from nbagent.gate.policy import Budget
from nbagent.runtime import Agent
from nbagent.runtime.recording import recorded_events
from nbagent.store import Store
from nbagent.store.verify import verify_store
from nbagent.tools.base import tool
from nbagent.tools.files import file_tools
from nbagent.tools.kernel import KernelTools

RAN: list[tuple[str, Any]] = []


@tool(risk="WRITE_LOW_RISK")
def make(path: str, content: str = "") -> str:
    """Make a file."""
    RAN.append(("make", path))
    return "made"


@tool(risk="WRITE_HIGH_RISK")
def remove(path: str) -> str:
    """Remove a file or a folder."""
    RAN.append(("remove", path))
    return "removed"


@tool(risk="WRITE_LOW_RISK")
def save_all(paths: list[Path]) -> str:
    """Save several files (a pathlib.Path list)."""
    RAN.append(("save_all", [str(p) for p in paths]))
    return "saved"


class Target(BaseModel):
    where: Path
    also: list[Path] = []


@tool(risk="WRITE_LOW_RISK")
def save_nested(target: Target) -> str:
    """Save to a nested target (Paths inside a model)."""
    RAN.append(("save_nested", str(target.where)))
    return "saved"


@tool(risk="WRITE_LOW_RISK")
def save_any(path, content=""):
    """Save without annotations."""
    RAN.append(("save_any", path))
    return "saved"


HOOKS: list[Any] = []


@tool(risk="READ_ONLY")
def peek() -> str:
    """A read-only call that runs without asking; the test uses it to act between two calls of a run."""
    RAN.append(("peek", None))
    if HOOKS:
        HOOKS.pop(0)()
    return "peeked"


@tool(risk="READ_ONLY")
def boom() -> str:
    """Interrupts the run (as a kernel interrupt would) the first time."""
    if not RAN or RAN[-1] != ("boom", None):
        RAN.append(("boom", None))
        raise KeyboardInterrupt
    return "ok"


TOOLS = [make, remove, save_all, save_nested, save_any, peek, boom]
FOR_RUN = GrantSpec(scope="run")
FOR_SESSION = GrantSpec(scope="session")


class Person(Decider):
    def __init__(self, *verdicts: Any) -> None:
        self.verdicts = list(verdicts)
        self.asked: list[list[str]] = []

    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        self.asked.append([s.tool for s in request.steps])
        if not self.verdicts:
            return None
        v = self.verdicts.pop(0)
        return v() if callable(v) else v

    async def answer(self, request: QuestionRequest) -> Answer | None:
        return None


def one(name: str, call_id: str | None = None, **arguments: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "arguments": arguments}
    if call_id is not None:
        call["id"] = call_id
    return {"tool_calls": [call]}


def script(*turns: dict[str, Any]) -> dict[str, Any]:
    return {"turns": [*turns, {"content": "done"}]}


def agent(tmp: Path, turns: dict[str, Any], decider: Decider, **kw: Any) -> Agent:
    return Agent(script=turns, tools=TOOLS, autonomy="L1", decider=decider, store=kw.pop("store", tmp / "nb.ipynb"),
                 plan_threshold=3, retry_base=0.0, retry_cap=0.0, budget=Budget(max_steps=60), **kw)


def run(a: Agent, prompt: str = "x", **kw: Any) -> Any:
    return asyncio.run(a.run(prompt, **kw))


def by_grant(store: Store, run_id: str) -> list[Any]:
    return [e.payload for e in store.run_events(run_id) if e.type == "tool_call_started" and e.payload.grant_id]


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()
    HOOKS.clear()


# ================================================================================================ holes


@pytest.mark.parametrize(("tool_name", "granted", "later"), [
    ("remove", "tmp", "tmp/important.csv"),      # approve "remove tmp" for the run: any file under tmp/ goes too
    ("make", "out", "out/sub/anything.md"),
    ("make", "report.md", "report.md/x.txt"),
])
def test_exact_default_grant_covers_everything_under_the_named_path(tmp_path: Path, tool_name: str, granted: str,
                                                                    later: str) -> None:
    # Was: the default grant is the escaped path as a gitignore pattern (`/tmp`), and a gitignore pattern that
    # matches a folder matches everything under it; docs/grants.md promises "exactly the paths the plan's calls
    # named". A grant for `remove tmp` answers `remove tmp/important.csv` without asking.
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one(tool_name, path=granted), one(tool_name, path=later)), person)
    result = run(a)
    assert (tool_name, later) not in RAN, f"{later} ran under the grant for {granted}"
    assert result.status.value == "waiting" and len(person.asked) == 2


def test_a_one_folder_wildcard_pattern_covers_files_under_a_matching_folder(tmp_path: Path) -> None:
    # Was: `data/*.csv` is documented as "any CSV directly in data/", but gitignore matches the folder
    # `data/x.csv/` and so everything under it: `data/x.csv/payload.txt` (any name that is not code) runs.
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", paths=["data/*.csv"])))
    a = agent(tmp_path, script(one("make", path="data/a.csv"), one("make", path="data/x.csv/payload.txt")), person)
    run(a)
    assert ("make", "data/x.csv/payload.txt") not in RAN


def test_a_one_folder_wildcard_pattern_lets_create_file_write_at_any_depth(tmp_path: Path) -> None:
    # Was: the same with nbagent's own create_file (which makes missing folders): a grant for `data/*.csv` lets
    # the model create `data/x.csv/deep/er/notes.txt` on disk without asking.
    (tmp_path / "data").mkdir()
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", paths=["data/*.csv"])))
    a = Agent(script=script(one("create_file", path="data/a.csv", content="a"),
                            one("create_file", path="data/x.csv/deep/er/notes.txt", content="pwn")),
              tools=file_tools(tmp_path), autonomy="L1", decider=person, store=tmp_path / "nb.ipynb",
              plan_threshold=3, retry_base=0.0, retry_cap=0.0)
    run(a)
    assert (tmp_path / "data" / "a.csv").exists()
    assert not (tmp_path / "data" / "x.csv" / "deep" / "er" / "notes.txt").exists()
    assert len(person.asked) == 2


@pytest.mark.parametrize("bait", ["", "/", "\\"])
def test_a_grant_for_an_empty_or_root_path_covers_every_path_in_the_folder(tmp_path: Path, bait: str) -> None:
    # Was: the model names the path "" (or "/", or "\\" which normal_path turns into "/"); the default grant is
    # `exact(bait)`, i.e. "" or "/", and `_spec` makes it the gitignore pattern "/", which matches every relative
    # path. The card and the grant line show `write_file path=` (nothing alarming); after "Approve for this run"
    # the model overwrites any (non-code) file of the folder without asking.
    (tmp_path / "precious.csv").write_text("keep")
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = Agent(script=script(one("write_file", path=bait, content="x"),
                            one("write_file", path="precious.csv", content="pwned")),
              tools=file_tools(tmp_path), autonomy="L1", decider=person, store=tmp_path / "nb.ipynb",
              plan_threshold=3, retry_base=0.0, retry_cap=0.0)
    run(a)
    assert (tmp_path / "precious.csv").read_text() == "keep", "overwritten under a grant given for path=" + bait
    assert len(person.asked) == 2


def test_a_grant_for_an_absolute_path_covers_the_same_spelling_inside_the_folder(tmp_path: Path) -> None:
    # Was: the default grant for the absolute path `/data` is the pattern `/data`, which path_matches anchors at
    # the notebook's folder: it covers the relative `data` and (folder rule) everything under it. The person
    # approved a call on /data (outside the folder: the scope refuses it anyway); the model then overwrites
    # data/precious.csv inside the folder without asking.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.csv").write_text("keep")
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = Agent(script=script(one("write_file", path="/data", content="x"),
                            one("write_file", path="data/precious.csv", content="pwned")),
              tools=file_tools(tmp_path), autonomy="L1", decider=person, store=tmp_path / "nb.ipynb",
              plan_threshold=3, retry_base=0.0, retry_cap=0.0)
    run(a)
    assert (tmp_path / "data" / "precious.csv").read_text() == "keep"
    assert len(person.asked) == 2


def test_a_path_the_grant_cannot_match_exactly_gets_no_grant(tmp_path: Path) -> None:
    # held: an exact pattern matches the whole name, trailing space included; it never covers `notes.txt`
    assert not grants.path_matches(grants.exact("notes.txt "), "notes.txt")
    assert grants.path_matches(grants.exact("notes.txt "), "notes.txt ")
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one("make", path="notes.txt "), one("make", path="notes.txt")), person)
    run(a)
    assert ("make", "notes.txt") not in RAN


@pytest.mark.parametrize(("bait", "later"), [("*", "x.md"), ("**", "a/b.md"), ("[ab].md", "a.md"), ("?.md", "x.md"),
                                             ("!x", "x"), ("#x", "x"), (".", "x.md"), ("./", "x.md"),
                                             ("...", "x.md"), ("a/**", "a/b.md")])
def test_glob_characters_in_the_model_path_are_escaped(tmp_path: Path, bait: str, later: str) -> None:
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one("make", path=bait), one("make", path=later)), person)
    run(a)
    assert ("make", later) not in RAN


def test_a_grant_on_a_code_running_tool_covers_any_code(tmp_path: Path) -> None:
    # Was: a call with no path argument gets a grant with no paths, which covers every later call of the tool
    # whatever its arguments. The kernel's own run_python (WRITE_HIGH_RISK, `code: str`) is offered "Approve for
    # this run" on `print(1)`; the grant then answers any code, which can write pandas.py, delete files, read
    # secrets: nothing like the call the person looked at, and outside every rule a grant promises.
    ns: dict[str, Any] = {}
    person = Person(Verdict.approve(grant=FOR_RUN))
    evil = "planted = 'import os; os.system(...)'  # open('pandas.py', 'w').write(planted) would run on import"
    a = Agent(script=script(one("run_python", code="print(1)"), one("run_python", code=evil)),
              tools=KernelTools(ns).tools(), autonomy="L1", decider=person, store=tmp_path / "nb.ipynb",
              plan_threshold=3, retry_base=0.0, retry_cap=0.0)
    result = run(a)
    state = a.store.run_state(result.run_id)
    offers = [p.grant_offer for p in state.plans.values()]
    assert offers[0] == []  # the card offers no grant: a call with no path is decided once only
    assert "planted" not in ns, "arbitrary code ran under a grant given for print(1)"


def test_unannotated_tool_path_hidden_in_a_dict_escapes_the_grant_paths(tmp_path: Path) -> None:
    # Was: for a tool without annotations, paths are found by name only; a dict under `path` whose inner key is
    # not path-like hides the value, the call names "no path", and `all([])` is True: a grant for
    # `save_any path=report.md` covers `save_any path={"x": "other.md"}`.
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one("save_any", path="report.md"), one("save_any", path={"x": "other.md"})), person)
    run(a)
    assert ("save_any", {"x": "other.md"}) not in RAN


def test_replay_brings_back_a_grant_that_was_revoked_during_the_recording(tmp_path: Path) -> None:
    # Was: RecordedDecider gives a recorded decision's grants again with no expiry and never replays the
    # `grant_revoked`: a call that, in the recording, came after the revoke and was denied by the person runs
    # in the replay under the resurrected grant.
    store = Store(tmp_path / "nb.ipynb")

    def revoke_then_deny() -> Verdict:
        for g in grants.all_grants(store):
            if g.revoked_at is None:
                grants.revoke(store, g.grant_id, reason="enough")
        return Verdict.deny("no")

    turns = script(one("make", path="a.md", content="1"), one("make", path="a.md", content="2"),
                   one("make", path="c.md"), one("make", path="a.md", content="4"))
    a = agent(tmp_path, turns, Person(Verdict.approve(grant=FOR_RUN), revoke_then_deny, Verdict.deny("no again")),
              store=store)
    first = run(a)
    assert first.status.value == "completed_with_errors", first  # the person's denials: not done
    assert RAN == [("make", "a.md"), ("make", "a.md")]  # the 4th call was denied by the person
    RAN.clear()
    r = Agent(replay=first.run_id, tools=TOOLS, autonomy="L1", store=store, plan_threshold=3)
    run(r)
    assert RAN == [("make", "a.md"), ("make", "a.md")], "the replay ran a call the recording's person denied"


def test_replay_brings_back_an_expired_session_grant_for_the_whole_run(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Was: a session grant that answered a recorded call and then expired mid-run is a standing grant of the
    # replay with no expiry: the call the recording asked about (after expiry, denied) runs in the replay.
    clock = [grants.now()]
    monkeypatch.setattr(grants, "now", lambda: clock[0])
    store = Store(tmp_path / "nb.ipynb")
    run(agent(tmp_path, script(one("make", path="r.md")),
              Person(Verdict.approve(grant=GrantSpec(scope="session", expires_in=60))), store=store))
    HOOKS.append(lambda: clock.__setitem__(0, clock[0] + timedelta(minutes=5)))
    b = agent(tmp_path, script(one("make", path="r.md"), one("peek"), one("make", path="r.md")),
              Person(Verdict.deny("expired: no")), store=store)
    used = run(b, "y")
    assert used.status.value == "completed_with_errors", used  # the expired grant's call was denied
    RAN.clear()
    r = Agent(replay=used.run_id, tools=TOOLS, autonomy="L1", store=store, plan_threshold=3)
    run(r, "y")
    assert RAN.count(("make", "r.md")) == 1, "the replay ran the call the recording denied after expiry"


def test_a_run_grant_of_an_interrupted_run_cannot_be_revoked_but_still_answers_on_resume(tmp_path: Path) -> None:
    # Was: INTERRUPTED counts as terminal for grants (`_run_ended` -> is_terminal), so `%agent grants` says
    # "ended with its run" and `revoke` refuses ("nothing to revoke"); but an interrupted run can be resumed and
    # `applicable` never checks the run's end: the grant the person could not revoke lets the call run.
    a = agent(tmp_path, script(one("make", path="r.md"), one("boom"), one("make", path="r.md")),
              Person(Verdict.approve(grant=FOR_RUN)))
    with pytest.raises(KeyboardInterrupt):
        run(a)
    rid = a.store.query_events(types="grant_given")[0].payload.root_run_id
    assert a.store.run_state(rid).status.value == "interrupted"
    (g,) = grants.all_grants(a.store)
    assert "active" in grants.grants_table(a.store)  # an interrupted run can go on: its grant is in force
    grants.revoke(a.store, g.grant_id)  # and the person can end it
    RAN.clear()
    a.decider = Person()
    asyncio.run(a.resume(rid))
    assert ("make", "r.md") not in RAN, "a grant shown as ended, that could not be revoked, let a call run"


def test_a_hand_appended_grant_given_with_no_decision_behind_it_is_honoured(tmp_path: Path) -> None:
    # Was (log integrity): a `grant_given` appended through Store.append by any process, naming a plan that
    # does not exist, is honoured by the runtime and passes `verify_store`: nothing checks that a decision
    # (`plan_approved.grants`) gave it, which is what the property test's oracle requires.
    a = agent(tmp_path, script(one("make", path="boot.md")), Person())
    first = run(a)  # creates the session; waits (nobody answers)
    session_id = a.store.run_state(first.run_id).session_id
    a.store.append(GrantGiven(grant_id="01FORGEDFORGEDFORGEDFORGED", effect="allow", scope="session", tool="remove",
                              paths=["**"], max_risk=Risk.WRITE_HIGH_RISK, by="user", run_id="nope",
                              root_run_id="nope", plan_id="no-such-plan"), session_id=session_id)
    report = verify_store(a.store)  # the chain is sound, but the grant has no decision behind it: flagged
    assert not report.ok and "not backed by a decision" in str(report.problems[0])
    b = agent(tmp_path, script(one("remove", path="everything.csv")), Person(), store=a.store)
    run(b, "y")
    assert ("remove", "everything.csv") not in RAN, "a grant no decision gave let a call run"


# ================================================================================================ held


@pytest.mark.parametrize("later", [
    "../report.md", "/etc/report.md", "REPORT.md", "report.MD", "\uff52eport.md", "report.md.", "report\u200b.md",
    "sub/report.md", "report.md~", "report.m?", "report.*",
])
def test_lookalike_and_escaping_paths_are_not_covered(tmp_path: Path, later: str) -> None:
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one("make", path="report.md"), one("make", path=later)), person)
    run(a)
    assert ("make", later) not in RAN and len(person.asked) == 2


@pytest.mark.parametrize("later", ["./report.md", "report.md/", ".//report.md",
                                   "report.md/."])
def test_spellings_of_the_same_path_are_covered_and_name_the_same_file(tmp_path: Path, later: str) -> None:
    # not a widening: each is the very file approved (normpath), so running it under the grant is the promise
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one("make", path="report.md"), one("make", path=later)), person)
    run(a)
    assert ("make", later) in RAN and len(person.asked) == 1
    assert Path(tmp_path, later).resolve() == Path(tmp_path, "report.md").resolve()


def test_an_absolute_spelling_is_the_same_effect_and_an_outside_one_is_never_covered(tmp_path: Path) -> None:
    # A decision is about the effect, not the words (docs/approvals.md): `/…/folder/out/a.md` writes the same file as
    # `out/a.md`, so the grant for out/** answers it; a path outside the folder is covered by no pattern (the person
    # is asked) and refused by the scope whatever anyone says.
    inside, outside = str(tmp_path / "out" / "a.md"), str(tmp_path.parent / "elsewhere.md")
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", paths=["out/**", "**"])), Verdict.approve())
    a = agent(tmp_path, script(one("make", path="out/a.md"), one("make", path=inside), one("make", path=outside)),
              person)
    result = run(a)
    ran = list(RAN)
    assert ran == [("make", "out/a.md"), ("make", inside)] and len(person.asked) == 2
    started = by_grant(a.store, result.run_id)
    assert [s.effect.paths() for s in started] == [["out/a.md"]]
    denied = [e.payload for e in a.store.run_events(result.run_id) if e.type == "authorization_denied"]
    assert [d.rule for d in denied] == ["scope.outside"]


@pytest.mark.parametrize("later", ["PANDAS.PY", "pkg/__init__.py", "x.pth", "pandas.py.", "pandas.py ",
                                   "\uff50andas.py", ".ipython/profile_default/startup/a.txt", "sitecustomize.pyc",
                                   "jupyter_server_config.json", "site-packages/x.txt", "np.so"])
def test_a_wide_pattern_never_covers_a_write_python_would_run(tmp_path: Path, later: str) -> None:
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", paths=["**"])))
    a = agent(tmp_path, script(one("make", path="a.md"), one("make", path=later)), person)
    run(a)
    assert ("make", later) not in RAN and len(person.asked) == 2


@pytest.mark.parametrize("name", ["Make", "make ", "functions.make", "make\u200b", "\uff4dake", "remove"])
def test_another_tool_or_a_lookalike_name_is_not_covered(tmp_path: Path, name: str) -> None:
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", paths=["**"])))
    a = agent(tmp_path, script(one("make", path="a.md"), one(name, path="a.md")), person)
    run(a)
    assert RAN == [("make", "a.md")]


def test_call_ids_and_arguments_shaped_like_grants_do_nothing(tmp_path: Path) -> None:
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one("make", call_id="g1", path="a.md"), one("remove", call_id="01AAAA", path="a.md")),
              person)
    first = run(a)
    (g,) = grants.all_grants(a.store)
    turns = script(one("make", call_id=g.grant_id, path="b.md", grant_id=g.grant_id),
                   one("make", call_id=g.grant_id, path="b.md", content=g.grant_id),
                   one("remove", call_id="nb1_0", path="a.md"))
    b = agent(tmp_path, turns, Person(), store=a.store)
    run(b, "y", previous_run_id=first.run_id)
    assert RAN == [("make", "a.md")]
    assert len(grants.all_grants(a.store)) == 1  # the model created none


def test_path_lists_and_nested_paths_must_all_be_covered(tmp_path: Path) -> None:
    many = ["a.md"] * 3000 + ["other.md"]
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one("save_all", paths=["a.md"]), one("save_all", paths=["./a.md", "a.md/"]),
                               one("save_all", paths=many)), person)
    assert run(a).status.value == "waiting" and len(person.asked) == 2
    assert RAN == [("save_all", ["a.md"]), ("save_all", ["a.md", "a.md"])]
    RAN.clear()
    person = Person(Verdict.approve(grant=FOR_RUN))
    b = agent(tmp_path, script(one("save_nested", target={"where": "a.md"}),
                               one("save_nested", target={"where": "a.md", "also": ["a.md", "../x"]})),
              person, store=tmp_path / "nb2.ipynb")
    assert run(b).status.value == "waiting" and len(person.asked) == 2
    assert RAN == [("save_nested", "a.md")]


@pytest.mark.parametrize("value", [["report.md", "other.md"], 7, None, {"path": "other.md"}])
def test_non_string_path_arguments_in_a_typed_tool_do_not_run(tmp_path: Path, value: Any) -> None:
    person = Person(Verdict.approve(grant=FOR_RUN))
    a = agent(tmp_path, script(one("make", path="report.md"), one("make", path=value)), person)
    run(a)
    assert RAN == [("make", "report.md")]


def test_revoke_and_expiry_inside_one_run_are_seen_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [grants.now()]
    monkeypatch.setattr(grants, "now", lambda: clock[0])
    store = Store(tmp_path / "nb.ipynb")
    HOOKS.append(lambda: [grants.revoke(store, g.grant_id) for g in grants.all_grants(store) if g.revoked_at is None])
    a = agent(tmp_path, script(one("make", path="r.md"), one("make", path="r.md"), one("peek"),
                               one("make", path="r.md")), Person(Verdict.approve(grant=FOR_RUN)), store=store)
    first = run(a)
    assert first.status.value == "waiting" and RAN == [("make", "r.md"), ("make", "r.md"), ("peek", None)]
    RAN.clear()
    HOOKS.append(lambda: clock.__setitem__(0, clock[0] + timedelta(seconds=61)))
    b = agent(tmp_path, script(one("make", path="s.md"), one("make", path="s.md"), one("peek"),
                               one("make", path="s.md")),
              Person(Verdict.approve(grant=GrantSpec(scope="session", expires_in=60))), store=store)
    second = run(b, "y")
    assert second.status.value == "waiting" and RAN == [("make", "s.md"), ("make", "s.md"), ("peek", None)]


def test_run_grants_stay_in_their_tree_and_session_grants_in_their_session(tmp_path: Path) -> None:
    a = agent(tmp_path, script(one("make", path="r.md")), Person(Verdict.approve(grant=FOR_RUN)))
    run(a)
    b = agent(tmp_path, script(one("make", path="r.md")), Person(), store=a.store)
    assert run(b, "sibling").status.value == "waiting"  # same session, another run tree
    c = agent(tmp_path, script(one("make", path="s.md")), Person(Verdict.approve(grant=FOR_SESSION)), store=a.store)
    run(c)
    d = agent(tmp_path, script(one("make", path="s.md")), Person(), store=a.store, session="other")
    assert run(d, "other session").status.value == "waiting"
    e = agent(tmp_path, script(one("make", path="s.md")), PolicyDecider("none"), store=a.store)
    run(e, "headless")
    assert RAN == [("make", "r.md"), ("make", "s.md")]


def test_a_forged_grant_in_another_sessions_chain_does_not_answer_this_session(tmp_path: Path) -> None:
    a = agent(tmp_path, script(one("make", path="boot.md")), Person(), session="elsewhere")
    other = run(a)
    a.store.append(GrantGiven(grant_id="01OTHERSESSIONGRANT0000000", effect="allow", scope="session", tool="remove",
                              paths=["**"], max_risk=Risk.WRITE_HIGH_RISK),
                   session_id=a.store.run_state(other.run_id).session_id)
    b = agent(tmp_path, script(one("remove", path="x.csv")), Person(), store=a.store)
    run(b, "y")
    assert RAN == []


def test_replayed_grants_are_run_scoped_and_ignore_live_session_grants(tmp_path: Path) -> None:
    a = agent(tmp_path, script(one("make", path="r.md"), one("make", path="r.md")),
              Person(Verdict.approve(grant=FOR_SESSION)))
    first = run(a)
    rec = RecordedDecider.from_events(recorded_events(a.store, first.run_id), first.run_id)
    b = agent(tmp_path, script(one("make", path="r.md"), one("make", path="r.md")), rec, store=a.store)
    second = run(b, "again")
    again = [g for g in grants.all_grants(a.store) if g.run_id == second.run_id]
    assert again and all(g.scope == "run" and g.root_run_id == second.run_id for g in again)
    # a replay is not answered by the live session grant (the first one, still active)
    c = agent(tmp_path, script(one("make", path="r.md")), RecordedDecider([], "empty"), store=a.store)
    res = run(c, "z")
    assert res.status.value == "failed" and not by_grant(a.store, res.run_id)


def test_a_reject_grant_wins_over_an_allow_grant(tmp_path: Path) -> None:
    person = Person(Verdict.deny("never", grant=FOR_RUN), Verdict.approve(grant=GrantSpec(scope="run", paths=["**"])))
    a = agent(tmp_path, script(one("remove", path="a.csv"), one("remove", path="b.csv"), one("remove", path="a.csv"),
                               one("remove", path="c.csv")), person)
    run(a)
    assert RAN == [("remove", "b.csv"), ("remove", "c.csv")]


def test_a_symlinked_folder_leading_outside_is_not_reached_through_a_pattern(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    nb = tmp_path / "nb"
    (nb / "out").mkdir(parents=True)
    (nb / "link").symlink_to(outside, target_is_directory=True)
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", paths=["**"])))
    a = Agent(script=script(one("create_file", path="out/a.md", content="a"),
                            one("create_file", path="link/b.md", content="b")),
              tools=file_tools(nb), autonomy="L1", decider=person, store=nb / "nb.ipynb",
              plan_threshold=3, retry_base=0.0, retry_cap=0.0)
    run(a)
    assert (nb / "out" / "a.md").exists() and not (outside / "b.md").exists()


def test_a_tampered_grant_given_is_honoured_though_verify_flags_it(tmp_path: Path) -> None:
    # HOLE (log integrity, second half): widening a recorded grant in place (`"paths":["r.md"]` -> `["*"]`) breaks
    # the hash chain, and `verify_store` says so, but the runtime reads grants without checking: the widened
    # grant answers `make other.md`.
    a = agent(tmp_path, script(one("make", path="r.md")), Person(Verdict.approve(grant=FOR_SESSION)))
    run(a)
    a.store.close()
    log = next(p for p in tmp_path.rglob("*") if p.is_file() and b'"grant_given"' in p.read_bytes())
    data = log.read_bytes()
    assert data.count(b'"paths":["r.md"]') == 1
    log.write_bytes(data.replace(b'"paths":["r.md"]', b'"paths":["*"]'))
    store = Store(tmp_path / "nb.ipynb")
    assert not verify_store(store).ok
    RAN.clear()
    b = agent(tmp_path, script(one("make", path="other.md")), Person(), store=store)
    run(b, "y")
    assert ("make", "other.md") not in RAN, "a tampered grant let a call run"


def test_a_revoke_by_another_process_is_seen_by_a_running_agent(tmp_path: Path) -> None:
    other: list[Store] = []

    def revoke_elsewhere() -> None:
        s = Store(tmp_path / "nb.ipynb")  # a second handle: its own index and file descriptors, like the CLI
        other.append(s)
        for g in grants.all_grants(s):
            if g.revoked_at is None:
                grants.revoke(s, g.grant_id, by="cli")

    HOOKS.append(revoke_elsewhere)
    a = agent(tmp_path, script(one("make", path="r.md"), one("make", path="r.md"), one("peek"),
                               one("make", path="r.md")), Person(Verdict.approve(grant=FOR_SESSION)))
    assert run(a).status.value == "waiting"
    assert RAN == [("make", "r.md"), ("make", "r.md"), ("peek", None)]
    assert other and len(grants.all_grants(a.store)) == 1 and grants.all_grants(a.store)[0].revoked_by == "cli"


@pytest.mark.parametrize("value", [["x"], {"x": 1}, 1, None])
def test_argument_patterns_do_not_match_non_string_lookalikes(tmp_path: Path, value: Any) -> None:
    person = Person(Verdict.approve(grant=GrantSpec(scope="run", arguments={"content": "x"})))
    a = agent(tmp_path, script(one("save_any", path="r.md", content="x"), one("save_any", path="r.md", content=value)),
              person)
    run(a)
    assert RAN == [("save_any", "r.md")]


@pytest.mark.parametrize("second", [Verdict.deny("no to all of it"), Verdict.refine("do something else")])
def test_a_no_to_a_plan_listing_a_granted_call_wins_over_the_grant(tmp_path: Path, second: Verdict) -> None:
    both = {"tool_calls": [{"name": "make", "arguments": {"path": "r.md"}},
                           {"name": "remove", "arguments": {"path": "x.csv"}}]}
    person = Person(Verdict.approve(grant=FOR_RUN), second)
    a = agent(tmp_path, script(one("make", path="r.md"), both), person)
    run(a)
    assert RAN == [("make", "r.md")] and person.asked == [["make"], ["make", "remove"]]
