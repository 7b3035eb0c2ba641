"""`ModelOptions` groups the model keywords of `Agent`; the keywords themselves keep working, with the same result."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nbagent.runtime import Agent, ModelOptions

TURNS = {"turns": [{"content": "done"}]}


def test_model_options_and_keywords_choose_the_same_model(tmp_path: Path) -> None:
    by_keywords = Agent(script=TURNS, store=tmp_path / "a.nbagent", timeout=7, max_retries=1, model_params={"t": 1})
    grouped = Agent(ModelOptions(script=TURNS, timeout=7, max_retries=1, params={"t": 1}),
                    store=tmp_path / "b.nbagent")
    assert by_keywords.settings == grouped.settings and grouped.model == "nbagent/scripted"
    assert asyncio.run(grouped.run("hi")).answer == "done"


def test_no_model_is_the_same_error_either_way(tmp_path: Path) -> None:
    for make in (lambda: Agent(store=tmp_path / "a.nbagent"), lambda: Agent(ModelOptions(), store=tmp_path / "b")):
        with pytest.raises(ValueError, match="no model: pass model='provider/name'"):
            make()


def test_run_takes_no_internal_keywords(tmp_path: Path) -> None:
    import inspect

    assert not [p for p in inspect.signature(Agent.run).parameters if p.startswith("_")]
