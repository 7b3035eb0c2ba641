"""The log cannot be edited to grant what nobody granted, and readers never hang.

Each test is an attack that worked from outside (on the event log, the tables or the store folder), asserting the safe
behaviour; each failed before its fix:

- grant events are immutable: a copied `grant_given` (same id, later expiry) never extends a grant;
- a grant answers only when what gave it (a decision by the same person, with the same terms; a replay's
  `context_assembled` for its standing grants) backs it: `grants.vouched`;
- every chain is checkpointed (sessions too), so a deleted `grant_revoked` is caught and brings no grant back;
- and anchored outside the project (this user's data folder), so it is caught even when tables.json is damaged or
  edited to the earlier head too (attack h4);
- `nbagent verify` names each of these, on the command line and through `verify_store`;
- undo verifies first and refuses a log that fails;
- a FIFO in place of a store file is refused in one line, never waited on;
- grant lifetimes are bounded (a year), and never overflow.

Offline and deterministic: the scripted model, tools that record what ran, the CLI in a subprocess with a timeout.
The user's data folder (anchors, key) is a temporary one ($XDG_DATA_HOME), for the CLI's subprocesses too.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nbagent.events.levels import Risk
from nbagent.events.model import ContextAssembled, GrantGiven, PlanApproved
from nbagent.gate import grants
from nbagent.gate.deciders import Answer, ApprovalRequest, Decider, PolicyDecider, QuestionRequest, Verdict
from nbagent.gate.grants import GrantError, GrantSpec, GrantTerms, covers_text
from nbagent.gate.policy import Budget
from nbagent.runtime import Agent
from nbagent.store import Store, StoreError
from nbagent.store.blobs import BlobError, BlobStore
from nbagent.store.verify import verify_store
from nbagent.tools.base import tool
from nbagent.tools.files import FileTools
from nbagent.undo.files import UndoError, undo

ROOT = Path(__file__).resolve().parents[1]
RAN: list[tuple[str, str]] = []


@tool(risk="WRITE_LOW_RISK")
def make(path: str, content: str = "") -> str:
    """Make a file."""
    RAN.append(("make", path))
    return "made"


@tool(risk="WRITE_HIGH_RISK")
def delete_file(path: str) -> str:
    """Delete a file."""
    RAN.append(("delete_file", path))
    return "deleted"


TOOLS = [make, delete_file]
FOR_SESSION = GrantSpec(scope="session", expires_in=3600)


class Person(Decider):
    """Decisions in order; None (nobody there) when they run out."""

    def __init__(self, *verdicts: Verdict) -> None:
        self.verdicts = list(verdicts)
        self.asked: list[list[str]] = []

    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        self.asked.append([f"{s.tool} {s.arguments.get('path', '')}" for s in request.steps])
        return self.verdicts.pop(0) if self.verdicts else None

    async def answer(self, request: QuestionRequest) -> Answer | None:
        return None


@pytest.fixture(autouse=True)
def _clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    RAN.clear()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))  # never the real user's anchors


def another_machine(tmp: Path) -> None:
    """What a fresh clone on another machine sees: no anchor of this store in its user's data folder."""
    os.environ["XDG_DATA_HOME"] = str(tmp / "another-user-data")  # (monkeypatch restores it)


def one(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def script(*turns: dict[str, Any]) -> dict[str, Any]:
    return {"turns": [*turns, {"content": "done"}]}


def agent(tmp: Path, turns: dict[str, Any], decider: Decider, **kw: Any) -> Agent:
    return Agent(script=turns, tools=TOOLS, autonomy="L1", decider=decider, store=kw.pop("store", tmp / "nb.ipynb"),
                 plan_threshold=3, retry_base=0.0, retry_cap=0.0, budget=Budget(max_steps=40), **kw)


def run(a: Agent, prompt: str = "x", **kw: Any) -> Any:
    return asyncio.run(a.run(prompt, **kw))


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The `nbagent` command in a subprocess: a reader that blocks fails the test (TimeoutExpired), never hangs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "nbagent.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def log_lines(tmp: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp / "nb.nbagent" / "events.jsonl").read_text().splitlines()]


def drop_lines(tmp: Path, wanted: Any) -> list[dict[str, Any]]:
    """Delete the log lines `wanted(record)` picks (no hash needs recomputing for the rest); returns them."""
    path = tmp / "nb.nbagent" / "events.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    gone = [json.loads(line) for line in lines if wanted(json.loads(line))]
    path.write_text("".join(line for line in lines if not wanted(json.loads(line))))
    return gone


def copy_grant(store: Store, grant_id: str, **changes: Any) -> None:
    """Append through the store (a valid chain, a valid checkpoint) a `grant_given` with an existing grant's id."""
    (given,) = [e for e in store.query_events(types="grant_given") if e.payload.grant_id == grant_id]
    payload = {**given.payload.model_dump(mode="json"), **changes}
    store.append(GrantGiven.model_validate(payload), session_id=given.session_id)


def session_grant(tmp: Path) -> tuple[Agent, grants.Grant]:
    """A run whose person approved `make r.md` for the session (an hour); the grant."""
    a = agent(tmp, script(one("make", path="r.md")), Person(Verdict.approve(grant=FOR_SESSION)))
    assert run(a).status.value == "completed"
    (g,) = grants.all_grants(a.store)
    return a, g


def asked_again(tmp: Path, store: Store) -> bool:
    """A new run of the session calls `make r.md`: True when it was asked (the grant did not answer)."""
    RAN.clear()
    asker = Person()
    b = agent(tmp, script(one("make", path="r.md")), asker, store=store)
    result = run(b, "again")
    return result.status.value == "waiting" and RAN == [] and asker.asked == [["make r.md"]]


# ---------------------------------------------------------------------------------------------- 1. immutable


def test_a_copied_grant_given_never_extends_a_grant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Was: the last `grant_given` of an id won, so a copy with expires_at in 2999 kept an expired grant answering.
    clock = [grants.now()]
    monkeypatch.setattr(grants, "now", lambda: clock[0])
    a, g = session_grant(tmp_path)
    copy_grant(a.store, g.grant_id, expires_at="2999-01-01T00:00:00Z")
    (folded,) = grants.all_grants(a.store)
    assert folded.expires_at == g.expires_at  # the first grant_given is the grant
    clock[0] += timedelta(hours=2)
    assert asked_again(tmp_path, a.store)


# ---------------------------------------------------------------------------------------------- 2. backed


def test_a_standing_grant_appended_while_a_run_waits_does_not_answer(tmp_path: Path) -> None:
    # Was: while a run waited on ask_human, one appended `grant_given` (no plan, pinned, by "recorded:x", for that
    # run, with the digest of `delete_file data.csv`) made the delete run on resume without asking.
    probe = agent(tmp_path, script(one("delete_file", path="data.csv")), Person(), session="probe")
    probed = run(probe)
    (digest,) = [e.payload.steps[0].digest for e in probe.store.run_events(probed.run_id)
                 if e.type == "plan_proposed"]  # the digest nbagent gives that call, whatever its recipe
    a = agent(tmp_path, script(one("ask_human", question="go on?"), one("delete_file", path="data.csv")), Person(),
              store=probe.store)
    first = run(a)
    assert first.status.value == "waiting" and a.store.run_state(first.run_id).pending.kind == "human_input"
    a.store.append(GrantGiven(grant_id="01STANDINGSTANDINGSTANDING", effect="allow", scope="run", tool="delete_file",
                              max_risk=Risk.WRITE_HIGH_RISK, by="recorded:x", run_id=first.run_id,
                              root_run_id=first.run_id, plan_id=None, pinned=True, digests=[digest]),
                   session_id=a.store.run_state(first.run_id).session_id)
    resumed = asyncio.run(a.resume(first.run_id, answer=Answer(text="yes")))
    assert RAN == [] and resumed.status.value == "waiting"
    assert a.store.run_state(first.run_id).pending.kind == "approval"
    report = verify_store(a.store)
    assert not report.ok and "context_assembled does not list it" in str(report.problems[0])


@pytest.fixture
def decided(tmp_path: Path) -> tuple[Store, dict[str, grants.Grant], dict[str, str]]:
    """A hand-built log: a session grant given on a sub-agent's card by "ana" (a decision listing it with every
    term), one from an older log (its decision's entry has no effect or expires_at), and a replay's standing grant
    listed by its run's `context_assembled`, and one that is not."""
    store = Store(tmp_path / "nb.ipynb")
    session = store.session()
    root = store.create_run(session.id, "root").id
    child = store.create_run(session.id, "child", parent_run_id=root).id
    terms = GrantTerms(effect="allow", scope="session", tool="make", paths=["r.md"], max_risk=Risk.WRITE_LOW_RISK)
    expires = (grants.now() + timedelta(days=30)).isoformat().replace("+00:00", "Z")  # within a grant's year
    entry = {"grant_id": "01NEW", "scope": "session", "effect": "allow", "covers": covers_text(terms),
             "expires_at": expires}
    old = {"grant_id": "01OLD", "scope": "session", "covers": covers_text(terms)}
    store.append(PlanApproved(plan_id="p1", request_id="q1", by="ana", grants=[entry, old]), run_id=child)
    def sealed(given: GrantGiven) -> GrantGiven:  # as the runtime gives it: with the giver's seal (grants.grant_seal)
        given.seal = grants.grant_seal(given.model_dump(mode="json"), session.id, store.path)
        return given

    for gid in ("01NEW", "01OLD"):
        store.append(sealed(GrantGiven(grant_id=gid, **terms.model_dump(), by="ana", expires_at=expires, run_id=child,
                                       root_run_id=root, plan_id="p1", request_id="q1")), session_id=session.id)
    pinned = GrantTerms(effect="allow", scope="run", tool="make", max_risk=Risk.WRITE_LOW_RISK, pinned=True,
                        digests=["d" * 64])
    replay = store.create_run(session.id, "replay").id
    store.append(ContextAssembled(grants=[{"grant_id": "01STANDING", "covers": covers_text(pinned),
                                           "by": f"recorded:{root}"}]), run_id=replay)
    plain = store.create_run(session.id, "not a replay").id
    store.append(ContextAssembled(), run_id=plain)
    for gid, rid in (("01STANDING", replay), ("01UNLISTED", plain)):
        store.append(sealed(GrantGiven(grant_id=gid, **pinned.model_dump(), by=f"recorded:{root}", run_id=rid,
                                       root_run_id=rid)), session_id=session.id)
    given = grants.from_events(store.query_events(types="grant_given"))
    return store, given, {"root": root, "child": child, "replay": replay, "plain": plain}


def test_what_backs_a_grant_is_the_decision_with_the_same_terms(decided: Any) -> None:
    store, given, _ = decided
    assert grants.vouched(store, given["01NEW"]) and grants.vouched(store, given["01OLD"])
    assert grants.vouched(store, given["01STANDING"])
    assert not grants.vouched(store, given["01UNLISTED"])  # was: any pinned run grant by "recorded:..." counted


@pytest.mark.parametrize("change", [
    {"by": "mallory"},  # was honoured: only the covers text and scope were compared
    {"expires_at": "2999-01-01T00:00:00Z"},  # was honoured
    {"root_run_id": "CHILD"},  # was honoured: a tree the decision was not given in
    {"run_id": "CHILD[:12]"},  # was honoured: a prefix of the run id resolved to the run
    {"effect": "reject"}, {"scope": "run"}, {"plan_id": "p2"}, {"session_id": "01OTHERSESSION"}, {"tool": "remove"},
    {"paths": ["**"]}, {"max_risk": Risk.WRITE_HIGH_RISK},
])
def test_a_grant_whose_terms_differ_from_its_decision_is_not_backed(decided: Any, change: dict[str, Any]) -> None:
    store, given, ids = decided
    change = {k: (ids["child"] if v == "CHILD" else ids["child"][:12] if v == "CHILD[:12]" else v)
              for k, v in change.items()}
    # (its seal no longer matches either; what is pinned here is that no decision backs it)
    assert grants.unbacked(store, given["01NEW"].model_copy(update=change)) is not None


@pytest.mark.parametrize("change", [{"by": "recorded:other"}, {"grant_id": "01OTHER"}, {"scope": "session"},
                                    {"root_run_id": "01ELSEWHERE"}])
def test_a_standing_grant_is_backed_only_as_its_run_listed_it(decided: Any, change: dict[str, Any]) -> None:
    store, given, _ = decided
    assert grants.unbacked(store, given["01STANDING"].model_copy(update=change)) is not None


def edit_line(tmp: Path, wanted: Any, change: Any) -> None:
    """Edit the log lines `wanted(record)` picks in place, leaving their hashes as they were."""
    path = tmp / "nb.nbagent" / "events.jsonl"
    out = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if wanted(record):
            change(record)
        out.append(json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n")
    path.write_text("".join(out))


def test_a_grant_edited_in_place_backs_nothing(decided: Any, tmp_path: Path) -> None:
    # Was: a replay's standing grant edited in place to answer another call (its digests; the covers text only
    # counts them) was honoured: the runtime reads events without checking their hashes.
    store, _, _ = decided
    store.close()
    edit_line(tmp_path, lambda r: r["payload"].get("grant_id") == "01STANDING",
              lambda r: r["payload"].update(digests=["e" * 64]))
    store = Store(tmp_path / "nb.ipynb")
    given = grants.from_events(store.query_events(types="grant_given"))
    assert given["01STANDING"].digests == ["e" * 64]
    assert not grants.vouched(store, given["01STANDING"])
    assert not grants.vouched(store, given["01NEW"])  # the session's chain no longer verifies: none of it counts


def test_a_decision_edited_in_place_backs_nothing(decided: Any, tmp_path: Path) -> None:
    # Was: a grant appended through the store (a sound session chain) and listed by editing a real decision in
    # place was honoured: only the decision's content was read, never checked.
    store, given, ids = decided
    store.close()
    terms = GrantTerms(effect="allow", scope="session", tool="make", paths=["**"], max_risk=Risk.WRITE_HIGH_RISK)
    entry = {"grant_id": "01EXTRA", "scope": "session", "effect": "allow", "covers": covers_text(terms),
             "expires_at": None}
    edit_line(tmp_path, lambda r: r["type"] == "plan_approved", lambda r: r["payload"]["grants"].append(entry))
    store = Store(tmp_path / "nb.ipynb")
    store.append(GrantGiven(grant_id="01EXTRA", **terms.model_dump(), by="ana", run_id=ids["child"],
                            root_run_id=ids["root"], plan_id="p1", request_id="q1"),
                 session_id=given["01NEW"].session_id)
    extra = grants.from_events(store.query_events(types="grant_given"))["01EXTRA"]
    assert not grants.vouched(store, extra)
    report = verify_store(store)
    assert not report.ok and "hash does not match the content" in str(report.problems[0])


def test_a_grant_given_replaced_with_another_giver_does_not_answer(tmp_path: Path) -> None:
    # Was: the session chain's last event (a grant_given) deleted and appended again with `by` changed answered:
    # only the covers text was compared with the decision.
    a, g = session_grant(tmp_path)
    a.store.close()
    drop_lines(tmp_path, lambda r: r["type"] == "grant_given")
    store = Store(tmp_path / "nb.ipynb")
    store.append(GrantGiven(grant_id=g.grant_id, effect=g.effect, scope=g.scope, tool=g.tool, paths=g.paths,
                            max_risk=g.max_risk, by="mallory", expires_at=g.expires_at, run_id=g.run_id,
                            root_run_id=g.root_run_id, plan_id=g.plan_id), session_id=g.session_id)
    assert asked_again(tmp_path, store)


# ---------------------------------------------------------------------------------------------- 3. checkpoints


def test_a_deleted_revoke_brings_no_grant_back(tmp_path: Path) -> None:
    # Was: deleting the one `grant_revoked` line (the session chain's last event) made the grant answer again, and
    # `nbagent verify` said every chain was intact: only run chains had a checkpoint.
    a, g = session_grant(tmp_path)
    grants.revoke(a.store, g.grant_id)
    row = a.store.sessions.get(doc_id=g.session_id)
    assert row["last_seq"] == 3 and isinstance(row["last_hash"], str)  # session_created, grant_given, the revoke
    a.store.close()
    drop_lines(tmp_path, lambda r: r["type"] == "grant_revoked")
    store = Store(tmp_path / "nb.ipynb")
    assert not verify_store(store).ok
    assert asked_again(tmp_path, store)


def cut_revoke(tmp: Path, how: str) -> grants.Grant:
    """A session grant, revoked; the revoke cut off the log's end, and tables.json damaged (`damaged`) or given the
    earlier head of the session's chain (`edited`) too, as whoever can cut a line can (attack h4)."""
    a, g = session_grant(tmp)
    grants.revoke(a.store, g.grant_id)
    a.store.close()
    drop_lines(tmp, lambda r: r["type"] == "grant_revoked")
    tables = tmp / "nb.nbagent" / "tables.json"
    if how == "damaged":
        tables.write_text("{ damaged")
    else:
        t = json.loads(tables.read_text())
        last = [r for r in log_lines(tmp) if r["run_id"] is None][-1]
        t["sessions"][g.session_id].update(last_seq=last["seq"], last_hash=last["hash"])
        tables.write_text(json.dumps(t))
    return g


@pytest.mark.kernel
@pytest.mark.parametrize("tables", ["damaged", "edited"])
def test_a_cut_revoke_is_caught_with_the_tables_damaged_or_edited_too(tmp_path: Path, tables: str) -> None:
    # Was (attack h4): the checkpoints lived only in tables.json, beside the log and unkeyed; with the revoke cut and
    # tables.json damaged (rebuilt from the log) or given the earlier seq and hash, the revoked grant answered again
    # and `nbagent verify` said "every chain intact".
    g = cut_revoke(tmp_path, tables)
    store = Store(tmp_path / "nb.ipynb")
    assert asked_again(tmp_path, store)
    problems = [str(p) for p in verify_store(Store(tmp_path / "nb.ipynb", readonly=True)).problems]
    assert any(f"(session:{g.session_id}): the log ends at seq 2 but this user's anchor" in p for p in problems)
    done = cli("verify", str(tmp_path / "nb.ipynb"))
    assert done.returncode == 1 and "this user's anchor" in done.stdout + done.stderr, done


def test_a_cut_chain_that_grows_again_stays_caught(tmp_path: Path) -> None:
    """The anchor is never moved back: an event appended to the cut chain (a new grant, here) does not make the old
    seq's new event the anchored one, so the revoked grant stays unbacked."""
    cut_revoke(tmp_path, "damaged")
    store = Store(tmp_path / "nb.ipynb")
    b = agent(tmp_path, script(one("make", path="other.md")), Person(Verdict.approve(grant=FOR_SESSION)), store=store)
    assert run(b, "again").status.value == "completed"
    assert any("no longer reaches seq 3" in w for w in store.warnings)
    assert asked_again(tmp_path, store)
    assert not verify_store(Store(tmp_path / "nb.ipynb", readonly=True)).ok


def test_a_store_its_user_never_saw_is_checked_as_before(tmp_path: Path) -> None:
    """A fresh clone on another machine has no anchor, and a store copied elsewhere is not judged by the anchor of
    the one it was copied from: no false alarm, the log backs its grants."""
    a, _ = session_grant(tmp_path)
    a.store.close()
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "nb.nbagent", copy / "nb.nbagent")
    for where in (copy, tmp_path):
        if where is tmp_path:
            another_machine(tmp_path)
        store = Store(where / "nb.ipynb")
        assert verify_store(store).ok
        (here,) = grants.all_grants(store)
        assert grants.unbacked(store, here) is None  # the log backs it (whose yes it was is another question)


def test_meta_edited_or_store_made_again(tmp_path: Path) -> None:
    """The anchor is found by the store's path: editing meta.json (its identity) does not escape it. A store made
    again at the same place (`rm -r NAME.nbagent`) has new chains: the old store's anchor raises no alarm for it."""
    cut_revoke(tmp_path, "damaged")
    meta = tmp_path / "nb.nbagent" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "id": "01ANOTHERSTORE", "created_at": "2020"}))
    assert not verify_store(Store(tmp_path / "nb.ipynb", readonly=True)).ok
    assert asked_again(tmp_path, Store(tmp_path / "nb.ipynb"))
    shutil.rmtree(tmp_path / "nb.nbagent")
    session_grant(tmp_path)
    assert verify_store(Store(tmp_path / "nb.ipynb", readonly=True)).ok


def test_a_chain_removed_whole_is_named_by_its_own_store(tmp_path: Path) -> None:
    a, g = session_grant(tmp_path)
    a.store.close()
    drop_lines(tmp_path, lambda r: r["run_id"] == g.run_id)
    (tmp_path / "nb.nbagent" / "tables.json").unlink()
    problems = [str(p) for p in verify_store(Store(tmp_path / "nb.ipynb", readonly=True)).problems]
    assert any(f"(run {g.run_id}): the log has no event of this chain but this user's anchor" in p
               for p in problems), problems


def test_only_session_events_and_run_checkpoints_write_the_anchor(tmp_path: Path) -> None:
    """Appends stay cheap: a run's other events (model turns, tool calls) never touch the anchor; a session's events
    and a run's checkpoints add one line each."""
    from nbagent.events.model import Completed, Thinking

    store = Store(tmp_path / "nb.ipynb")
    session = store.session()
    run_id = store.create_run(session.id, "p").id
    anchors = list((tmp_path / "user-data" / "nbagent" / "anchors").iterdir())
    assert len(anchors) == 1 and len(anchors[0].read_bytes().splitlines()) == 2  # session_created, run_started
    before = anchors[0].read_bytes()
    for _ in range(20):
        store.append(Thinking(text="t"), run_id=run_id)
    assert anchors[0].read_bytes() == before
    store.append(Completed(summary="done"), run_id=run_id)
    last = json.loads(anchors[0].read_bytes().splitlines()[-1])
    assert (last["chain"], last["seq"]) == (run_id, 22)
    assert store.anchored(run_id) == (22, store.raw_events(run_id)[-1]["hash"])


def test_session_checkpoints_cost_the_run_path_nothing(tmp_path: Path) -> None:
    """Only events of a session's own chain write its row; a run's events leave the sessions table as it was."""
    a, _ = session_grant(tmp_path)
    before = (tmp_path / "nb.nbagent" / "tables.json").read_bytes()
    sessions = json.loads(before)["sessions"]
    b = agent(tmp_path, script(one("make", path="r.md")), Person(), store=a.store)
    run(b, "again")
    assert json.loads((tmp_path / "nb.nbagent" / "tables.json").read_bytes())["sessions"] == sessions


# ---------------------------------------------------------------------------------------------- 4. verify names it


def _standing(tmp: Path) -> str:
    a, g = session_grant(tmp)
    a.store.append(GrantGiven(grant_id="01STANDINGSTANDINGSTANDING", effect="allow", scope="run", tool="make",
                              max_risk=Risk.WRITE_LOW_RISK, by="recorded:x", run_id=g.run_id, root_run_id=g.run_id,
                              pinned=True, digests=["d" * 64]), session_id=g.session_id)
    return "grant 01STANDINGSTANDINGSTANDING is not backed by a decision that gave it"


def _regiven(tmp: Path) -> str:
    a, g = session_grant(tmp)
    a.store.close()
    drop_lines(tmp, lambda r: r["type"] == "grant_given")
    another_machine(tmp)  # (here, the anchor names the replaced event first: _regiven_here)
    copy = {**g.model_dump(mode="json", include=set(GrantGiven.model_fields)), "by": "mallory"}
    Store(tmp / "nb.ipynb").append(GrantGiven.model_validate(copy), session_id=g.session_id)
    return f"no plan_approved of plan {g.plan_id} by mallory"


def _regiven_here(tmp: Path) -> str:
    a, g = session_grant(tmp)
    a.store.close()
    drop_lines(tmp, lambda r: r["type"] == "grant_given")
    copy = {**g.model_dump(mode="json", include=set(GrantGiven.model_fields)), "by": "mallory"}
    Store(tmp / "nb.ipynb").append(GrantGiven.model_validate(copy), session_id=g.session_id)
    return f"(session:{g.session_id}): the event at seq 2 is not the one this user's anchor"


def _revoke_cut_tables_damaged(tmp: Path) -> str:
    a, g = session_grant(tmp)
    grants.revoke(a.store, g.grant_id)
    a.store.close()
    drop_lines(tmp, lambda r: r["type"] == "grant_revoked")
    (tmp / "nb.nbagent" / "tables.json").write_text("{ damaged")
    return f"(session:{g.session_id}): the log ends at seq 2 but this user's anchor"


def _run_end_cut_tables_damaged(tmp: Path) -> str:
    a, g = session_grant(tmp)
    a.store.close()
    drop_lines(tmp, lambda r: r["type"] == "completed")
    (tmp / "nb.nbagent" / "tables.json").unlink()
    return f"(run {g.run_id}): the log ends at seq"


def _copied(tmp: Path) -> str:
    a, g = session_grant(tmp)
    copy_grant(a.store, g.grant_id, expires_at="2999-01-01T00:00:00Z")
    return f"grant {g.grant_id} is given a second time"


def _revoke_deleted(tmp: Path) -> str:
    a, g = session_grant(tmp)
    grants.revoke(a.store, g.grant_id)
    a.store.close()
    drop_lines(tmp, lambda r: r["type"] == "grant_revoked")
    return (f"(session:{g.session_id}): the log ends at seq 2 but the sessions table saw seq 3 at its last "
            "checkpoint: 1 event(s) were removed from the end")


def _session_end_deleted(tmp: Path) -> str:
    a, g = session_grant(tmp)
    a.store.close()
    drop_lines(tmp, lambda r: r["type"] == "grant_given")
    return f"(session:{g.session_id}): the log ends at seq 1 but the sessions table saw seq 2"


def _session_middle_deleted(tmp: Path) -> str:
    a, g = session_grant(tmp)
    grants.revoke(a.store, g.grant_id)
    a.store.close()
    (revoke,) = [r for r in log_lines(tmp) if r["type"] == "grant_revoked"]
    drop_lines(tmp, lambda r: r["type"] == "grant_given")
    return f"event {revoke['id']} (session:{g.session_id}): seq jumps from 1 to 3"


def _run_middle_deleted(tmp: Path) -> str:
    a, g = session_grant(tmp)
    a.store.close()
    ours = [r for r in log_lines(tmp) if r["run_id"] == g.run_id]
    drop_lines(tmp, lambda r: r["id"] == ours[3]["id"])
    return f"event {ours[4]['id']} (run {g.run_id}): seq jumps from 3 to 5"


def _run_end_deleted(tmp: Path) -> str:
    a, g = session_grant(tmp)
    a.store.close()
    drop_lines(tmp, lambda r: r["type"] == "completed")
    return f"(run {g.run_id}): the log ends at seq"


@pytest.mark.parametrize("tamper", [_standing, _regiven, _regiven_here, _copied, _revoke_deleted,
                                    _session_end_deleted, _session_middle_deleted, _run_middle_deleted,
                                    _run_end_deleted, _revoke_cut_tables_damaged, _run_end_cut_tables_damaged])
def test_verify_names_each_tampering(tmp_path: Path, tamper: Any) -> None:
    expected = tamper(tmp_path)
    report = verify_store(Store(tmp_path / "nb.ipynb", readonly=True))
    assert not report.ok and any(expected in str(p) for p in report.problems), report.problems
    done = cli("verify", str(tmp_path / "nb.ipynb"))
    assert done.returncode == 1, done
    (line,) = done.stdout.splitlines()
    assert line.startswith("FAILED: ") and (expected in line or expected in done.stderr), done


# ---------------------------------------------------------------------------------------------- 5. undo


def test_undo_refuses_a_log_that_fails_verify(tmp_path: Path) -> None:
    # Was: a tool result's `created` edited to data.csv (with a blob of data.csv's content) made `nbagent undo`
    # delete a file no run touched.
    data = b"a,b\n1,2\n"
    (tmp_path / "data.csv").write_bytes(data)
    store = Store(tmp_path / "nb.ipynb")
    tools = FileTools(tmp_path, BlobStore.of_store(store.path)).tools()
    a = Agent(script=script({"tool_calls": [{"name": "create_file", "arguments": {"path": "new.md",
                                                                                 "content": "new\n"}}]}),
              tools=tools, store=store, autonomy="L3", decider=PolicyDecider("all"), retry_base=0.0, retry_cap=0.0)
    result = run(a, "change files")
    assert result.status.value == "completed"
    store.close()
    path = tmp_path / "nb.nbagent" / "events.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["type"] == "tool_call_completed":
            record["payload"]["result"].update(created="data.csv", after_sha256=hashlib.sha256(data).hexdigest())
            lines[i] = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
    path.write_text("".join(lines))
    BlobStore.of_store(tmp_path / "nb.nbagent").put(data)

    done = cli("undo", result.run_id, str(tmp_path / "nb.ipynb"))
    assert done.returncode == 2 and done.stdout == "", done
    (line,) = done.stderr.splitlines()
    assert "fails verification" in line and "nbagent verify" in line and "nothing was changed" in line
    with pytest.raises(UndoError, match="nbagent verify"):
        undo(Store(tmp_path / "nb.ipynb"), result.run_id)
    from nbagent.ui.undo_view import undo_offer  # the Undo panel's preview refuses too

    with pytest.raises(UndoError, match="nbagent verify"):
        undo_offer(Store(tmp_path / "nb.ipynb"), result.run_id)
    assert (tmp_path / "data.csv").read_bytes() == data and (tmp_path / "new.md").exists()


# ---------------------------------------------------------------------------------------------- 6. no hang


@pytest.fixture
def changed(tmp_path: Path) -> tuple[Path, str, str]:
    """A run that created new.md, saved for undo; (folder, run id, the blob undo needs)."""
    store = Store(tmp_path / "nb.ipynb")
    tools = FileTools(tmp_path, BlobStore.of_store(store.path)).tools()
    a = Agent(script=script({"tool_calls": [{"name": "create_file", "arguments": {"path": "new.md",
                                                                                 "content": "new\n"}}]}),
              tools=tools, store=store, autonomy="L3", decider=PolicyDecider("all"), retry_base=0.0, retry_cap=0.0)
    result = run(a, "change files")
    store.close()
    return tmp_path, result.run_id, hashlib.sha256(b"new\n").hexdigest()


def fifo(path: Path) -> None:
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)
    os.mkfifo(path)


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")


@needs_fifo
def test_a_fifo_in_place_of_a_blob_is_refused_not_waited_on(changed: Any) -> None:
    folder, run_id, sha = changed
    blob = BlobStore.of_store(folder / "nb.nbagent").path(sha)
    fifo(blob)
    done = cli("undo", run_id, str(folder / "nb.ipynb"), timeout=30)
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert "not a regular file" in line and "nothing was changed" in line
    with pytest.raises(BlobError, match="not a regular file"):
        BlobStore.of_store(folder / "nb.nbagent").get(sha)
    assert (folder / "new.md").exists()


@needs_fifo
def test_a_fifo_in_place_of_the_event_log_is_refused_not_waited_on(changed: Any) -> None:
    folder, _, _ = changed
    fifo(folder / "nb.nbagent" / "events.jsonl")
    checked = cli("verify", str(folder / "nb.ipynb"), timeout=30)
    assert checked.returncode == 1, checked
    (line,) = checked.stdout.splitlines()
    assert line.startswith("FAILED: ") and "events.jsonl: not a regular file (a named pipe (FIFO))" in line
    for command in ("runs", "grants"):
        listed = cli(command, str(folder / "nb.ipynb"), timeout=30)
        assert listed.returncode == 2 and listed.stdout == "", listed
        (line,) = listed.stderr.splitlines()
        assert "events.jsonl: not a regular file" in line
    with pytest.raises(StoreError, match="not a regular file"):
        Store(folder / "nb.ipynb", readonly=True).list_runs()


@needs_fifo
@pytest.mark.parametrize("name", ["meta.json", "leases/RUN.lock"])
def test_a_fifo_in_place_of_meta_or_a_lease_is_one_line(changed: Any, name: str) -> None:
    folder, run_id, _ = changed
    fifo(folder / "nb.nbagent" / name.replace("RUN", run_id))
    done = cli("undo", run_id, str(folder / "nb.ipynb"), timeout=30)
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert f"{name.replace('RUN', run_id)}: not a regular file (a named pipe (FIFO))" in line
    assert (folder / "new.md").exists()


@needs_fifo
def test_a_fifo_in_place_of_the_tables_is_damage_rebuilt_from_the_log(changed: Any) -> None:
    folder, run_id, _ = changed
    fifo(folder / "nb.nbagent" / "tables.json")
    listed = cli("runs", str(folder / "nb.ipynb"), timeout=30)
    assert listed.returncode == 0 and run_id[:12] in listed.stdout and "not a regular file" in listed.stderr
    checked = cli("verify", str(folder / "nb.ipynb"), timeout=30)
    assert checked.returncode == 0 and checked.stdout.startswith("ok: ") and "not a regular file" in checked.stderr
    done = cli("undo", run_id, str(folder / "nb.ipynb"), timeout=30)  # writes: the FIFO is replaced by the tables
    assert done.returncode == 0, done
    assert not (folder / "new.md").exists() and (folder / "nb.nbagent" / "tables.json").is_file()


# ---------------------------------------------------------------------------------------------- 7. lifetimes


@pytest.mark.parametrize("text", ["3000000d", "366d", "9" * 400 + "d", "100000000000h"])
def test_absurd_durations_are_refused_with_the_limit(text: str) -> None:
    with pytest.raises(GrantError, match="at most 365d"):
        grants.parse_duration(text)


def test_a_year_is_the_longest_grant() -> None:
    assert grants.parse_duration("365d") == 365 * 86400
    given = datetime(2026, 1, 1, tzinfo=UTC)
    assert grants.expiry(GrantSpec(scope="session", expires_in=365 * 86400), given) == "2027-01-01T00:00:00Z"


@pytest.mark.parametrize(("seconds", "given"), [
    (1e300, datetime(2026, 1, 1, tzinfo=UTC)), (float("inf"), datetime(2026, 1, 1, tzinfo=UTC)),
    (float("nan"), datetime(2026, 1, 1, tzinfo=UTC)), (-1e300, datetime(2026, 1, 1, tzinfo=UTC)),
    (3600, datetime(9999, 12, 31, 23, 30, tzinfo=UTC)),
])
def test_expiry_never_overflows(seconds: float, given: datetime) -> None:
    with pytest.raises(GrantError, match="grant was not given"):
        grants.expiry(GrantSpec(scope="session", expires_in=seconds), given)
