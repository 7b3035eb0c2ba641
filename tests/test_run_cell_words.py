"""The words of the record and the card for the agent's cells: run_cell, replace_cell (with its diff)."""

from __future__ import annotations

from nbagent.ui.record_words import high_risk_effects, plan_summary, step_action, step_summary


def test_a_plan_with_cells_says_what_they_do() -> None:
    plan = {"max_risk": "WRITE_HIGH_RISK", "steps": [
        {"tool": "run_cell", "risk": "WRITE_HIGH_RISK", "arguments": {"code": "x = 1"}},
        {"tool": "replace_cell", "risk": "WRITE_HIGH_RISK", "target": "nb1_0", "arguments": {"cell": "nb1_0"}}]}
    assert step_action(plan["steps"][0]) == "run a cell"
    assert step_action(plan["steps"][1]) == "replace cell nb1_0 and run it"
    assert plan_summary(plan) == "2 steps: run a cell, replace cell nb1_0 and run it"
    effects = high_risk_effects(plan)
    assert effects[0].startswith("runs a new cell in the kernel")
    assert effects[1].startswith("replaces the code of cell nb1_0 (diff below)")


def test_a_done_step_says_ran_a_cell_or_replaced_it() -> None:
    ran = {"kind": "tool", "tool": "run_cell", "status": "ok", "arguments": {"code": "x = 1"}}
    replaced = {"kind": "tool", "tool": "replace_cell", "status": "ok", "target": "abc", "arguments": {"cell": "abc"}}
    assert step_summary(ran).startswith("ran a cell: run_cell(")
    assert step_summary(replaced).startswith("replaced cell abc (diff): replace_cell(")
    assert not step_summary({**ran, "status": "failed"}).startswith("ran a cell")
