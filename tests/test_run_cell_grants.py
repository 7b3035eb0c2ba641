"""run_cell and replace_cell are code: a grant covers them only through argument patterns (never "any code"), and a
decision on replace_cell binds to the cell its spelling resolved to and to the code (attacks on both)."""

from __future__ import annotations

import pytest

from nbagent.events.levels import Risk
from nbagent.events.model import PlanStep
from nbagent.gate.effects import Effect, call_digest, digest_matches
from nbagent.gate.grants import GrantError, GrantSpec, GrantTerms, covers, terms_for


@pytest.mark.parametrize("tool,arguments,effect", [
    ("run_cell", {"code": "import os; os.remove('x')"}, Effect()),
    ("replace_cell", {"cell": "nb1_0", "code": "import os"}, Effect(cell="agent cell abc")),
])
def test_a_blanket_grant_never_covers_cell_code(tool: str, arguments: dict[str, str], effect: Effect) -> None:
    step = PlanStep(call_id="nb1_0", tool=tool, arguments=arguments, risk=Risk.WRITE_HIGH_RISK, effect=effect)
    with pytest.raises(GrantError, match="names no path"):  # a click's grant ("for the rest of this run")
        terms_for([step], GrantSpec(scope="run"), "allow", {})
    blanket = GrantTerms(effect="allow", scope="run", tool=tool, max_risk=Risk.WRITE_HIGH_RISK)
    assert not covers(blanket, tool, arguments, effect)  # even one written into the log by hand
    star = GrantTerms(effect="allow", scope="run", tool=tool, paths=["**"], max_risk=Risk.WRITE_HIGH_RISK)
    assert not covers(star, tool, arguments, effect)  # no path to match: a path pattern is no way in


def test_an_argument_pattern_grant_covers_only_the_code_it_names() -> None:
    (terms,), _ = terms_for([PlanStep(call_id="nb1_0", tool="run_cell", arguments={"code": "print(1)"},
                                      effect=Effect())],
                            GrantSpec(scope="run", arguments={"code": "print(*)"}), "allow", {})
    assert covers(terms, "run_cell", {"code": "print(2)"}, Effect())
    assert not covers(terms, "run_cell", {"code": "import os"}, Effect())


def test_an_approval_of_replace_cell_binds_to_the_resolved_cell_and_the_code() -> None:
    args = {"cell": "nb1_0", "code": "x = 1"}
    approved = call_digest("replace_cell", args, Effect(cell="agent cell A"))
    assert digest_matches(approved, "replace_cell", args, Effect(cell="agent cell A"))
    # the same spelling now naming another cell (a call id of another run): not what was approved
    assert not digest_matches(approved, "replace_cell", args, Effect(cell="agent cell B"))
    # a replayed approval for other code
    assert not digest_matches(approved, "replace_cell", {**args, "code": "x = 2"}, Effect(cell="agent cell A"))
    # the digest of the arguments alone (how an older log's approval was kept) does not stand in for the cell
    assert not digest_matches(call_digest("replace_cell", args), "replace_cell", args, Effect(cell="agent cell A"))
