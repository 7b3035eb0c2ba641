"""MCP tool servers as ordinary tools: each tool of a configured server becomes a `Tool` named `mcp__NAME__TOOL`.

Configuration is the common `mcpServers` JSON (docs/mcp.md):

    {"mcpServers": {
        "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {}, "timeout": 30,
                 "risk": {"convert_time": "WRITE_LOW_RISK"}},
        "remote": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ..."}}}}

A tool's risk is the server's `risk` map's when it names the tool; else, for a server nbagent knows (the reference
filesystem server, mcp-server-git), what nbagent knows the tool does; else READ_ONLY for `readOnlyHint: true`, and
WRITE_HIGH_RISK for everything else, whatever its annotations claim (what it changes is unknown). A call's paths
are resolved as its server resolves them (rules.py). The runtime calls these tools like any other (autonomy table,
approvals, authorization, budgets, redaction, log): nothing here decides whether a call may run.

In a notebook, a server whose entry comes from a file starts only once a person trusted that exact entry
(`notebook_toolset(trusted=...)`, the trust itself is recorded by nbagent/ipython/trust.py); inline JSON and
`tools(...)` in Python are the caller's own words and start as given.

Servers start once per process, lazily (when their tools are first listed), and stop with the process. Their
sessions live on one background thread with its own event loop, so a server that hangs never blocks the
caller's loop; each call waits at most the server's `timeout` (30 s by default) and then is a `ToolError` the
model sees. A server that crashed, hung or stopped answering is started again at the next listing (the next
run). This module imports no IPython or widget code.

The package, along its seams (each module's docstring says why it stands alone):

- config.py: the `mcpServers` JSON read into `ServerConfig`s, one problem line per bad entry;
- server_files.py: which files of the notebook's folder a stdio entry runs (they are code);
- trust.py: what a person's trust in an entry covers (`entry_digest`) and which entries need one;
- servers.py: the background loop, starting and talking to one server (`Server`), the running servers;
- rules.py: a call's paths read as its server reads them, and each tool's risk (rules_filesystem.py and
  rules_git.py mirror the two servers nbagent knows);
- results.py: a server's answer as a tool result;
- toolsets.py: a server's tools as nbagent tools, and the entry points (`tools`, `toolset`, `notebook_toolset`).

Every name is importable from `nbagent.mcp` as before the split.
"""

from __future__ import annotations

import logging

from nbagent.mcp.config import DEFAULT_TIMEOUT, Loaded, MCPConfigError, ServerConfig, load_config, parse, read
from nbagent.mcp.results import convert_result
from nbagent.mcp.server_files import MAX_FOLDER_FILES, entry_files
from nbagent.mcp.servers import Server, shutdown
from nbagent.mcp.toolsets import (
           PREFIX,
           TOOL_NAME,
           MCPTool,
           Toolset,
           annotation_risk,
           notebook_config,
           notebook_toolset,
           tools,
           toolset,
)
from nbagent.mcp.trust import MAX_HASHED, Entry, code_files, entry_digest, entry_part, needs_trust, what_it_runs

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_TIMEOUT", "MAX_FOLDER_FILES", "MAX_HASHED", "PREFIX", "TOOL_NAME", "Entry", "Loaded",
           "MCPConfigError", "MCPTool", "Server", "ServerConfig", "Toolset", "annotation_risk", "code_files",
           "convert_result", "entry_digest", "entry_files", "entry_part", "load_config", "needs_trust",
           "notebook_config", "notebook_toolset", "parse", "read", "shutdown", "tools", "toolset", "what_it_runs"]

