"""Attacks on the reference filesystem server's calls, judged by its own rules (nbagent/mcp/rules.py): a link swapped
between the decision and the call, and a server started with allowed directories outside the notebook's folder.
The pinned server (tests/test_mcp_server_rules.py's fixture), the scripted model.

Not closed, and said in docs/mcp.md: in the instant between nbagent's last look at a path and the server's own open,
a process outside the run can swap a link inside the folder; the server follows it anywhere inside its root (the
notebook's folder), excluded files (`.env`) included, as nbagent's own file tools, acting through directory
descriptors, would not.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from test_mcp_server_rules import calls, filesystem_server, log_text, run, tools_of  # noqa: F401 (a fixture)

from nbagent.gate.deciders import PolicyDecider
from nbagent.runtime import Agent
from nbagent.tools.base import Tool


def test_held_a_link_swapped_by_an_earlier_call_of_the_turn_is_judged_where_it_leads(
        filesystem_server: Path, tmp_path: Path) -> None:  # noqa: F811
    """A turn of two calls: the first (a tool of the person's, approved) turns `data.txt` into a link to `.env`;
    the second reads `data.txt` through the server. It is judged again when it runs, not as it was when the turn
    was read: `.env` is excluded, refused, and the secret never reaches the model. And a server started with a
    folder outside the notebook's among its allowed directories still reads nothing there."""
    nb, outside = tmp_path / "nb", tmp_path / "outside"
    nb.mkdir()
    outside.mkdir()
    (nb / ".env").write_text("SERVICE_PASSWORD=not-a-pattern-but-a-secret-0123\n")
    (nb / "data.txt").write_text("plain data\n")
    (outside / "diary.txt").write_text("the neighbour's private diary\n")

    def swap() -> str:
        """Replace data.txt with a link to .env."""
        os.unlink(nb / "data.txt")
        os.symlink(".env", nb / "data.txt")
        return "swapped"

    config = {"mcpServers": {"fs": {"command": "node", "args": [str(filesystem_server), str(nb), str(outside)]}}}
    found = [*tools_of(config, nb), Tool(swap, name="swap", risk="WRITE_HIGH_RISK")]
    script = {"turns": [{"tool_calls": [{"name": "swap", "arguments": {}},
                                        {"name": "mcp__fs__read_text_file", "arguments": {"path": "data.txt"}}]},
                        {"tool_calls": [{"name": "mcp__fs__read_text_file",
                                         "arguments": {"path": str(outside / "diary.txt")}}]},
                        {"tool_calls": [{"name": "mcp__fs__list_directory", "arguments": {"path": "../outside"}}]},
                        {"content": "done"}]}
    agent = Agent(script=script, tools=found, autonomy="L3", decider=PolicyDecider("all"), store=nb / "nb.ipynb")
    result = run(agent)
    events = agent.store.run_events(result.run_id)
    assert [e.payload.result for e in events if e.type == "tool_call_completed"] == ["swapped"]
    denied = [(e.payload.tool, e.payload.rule) for e in events if e.type == "authorization_denied"]
    assert denied == [("mcp__fs__read_text_file", "scope.excluded"), ("mcp__fs__read_text_file", "scope.outside"),
                      ("mcp__fs__list_directory", "path_traversal")], denied
    text = log_text(agent, result.run_id)
    assert "not-a-pattern-but-a-secret" not in text and "private diary" not in text and "diary.txt" not in \
        json.dumps([e.payload.model_dump(mode="json") for e in events if e.type == "tool_call_completed"])
