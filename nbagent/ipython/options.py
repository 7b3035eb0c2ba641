"""Options of `%%agent` and `%agent`, and where their defaults come from.

Precedence, highest first: the cell's own options, papermill parameters (`-p approve all`; see parameters.py),
`%agent config key=value`, traitlets config
(`%config NbAgent.model = "..."`, or `c.NbAgent.model` in ipython_config.py), environment variables (`NBAGENT_MODEL`,
`NBAGENT_AUTONOMY`, `NBAGENT_APPROVE`, `NBAGENT_MAX_STEPS`, `NBAGENT_BUDGET`, `NBAGENT_SCRIPT`,
`NBAGENT_SESSION`, `NBAGENT_MCP`, `NBAGENT_RERUN`), then the built-in default.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
from typing import Any

from traitlets import Float, Int, Unicode
from traitlets.config import Configurable


class UsageError(Exception):
    """Bad options: the message says what was wrong and shows the usage."""


class SettingError(ValueError):
    """An NBAGENT_* variable in the environment that nbagent cannot use: one line naming it, its value, and what it
    takes (a cell shows it as it shows a bad option)."""

    def __init__(self, variable: str, value: str, takes: str) -> None:
        super().__init__(f"{variable}={value!r} in the environment is not a value nbagent can use: {variable} takes "
                         f"{takes}; fix or unset it where the kernel (or `nbagent run`) starts")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise UsageError(message or "")


@functools.cache  # built once: a parser is ~100 objects in reference cycles, freed only by a full collection
def cell_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="%%agent", add_help=False, description="Run the agent on the request in the cell's body.",
                epilog="Defaults: %agent config > %config NbAgent.<name> > NBAGENT_<NAME> environment variables.")
    p.add_argument("-h", "--help", action="store_true", help="show this help")
    p.add_argument("-m", "--model", help="any litellm model (openai/gpt-4o-mini, anthropic/..., ollama/...), or "
                                         "nbagent/scripted with --script")
    p.add_argument("-a", "--autonomy", choices=["L0", "L1", "L2", "L3"],
                   help="L0 read-only, L1 recommendations (default), L2 assisted, L3 supervised")
    p.add_argument("-s", "--session", help="the conversation to continue (default: the notebook's default)")
    p.add_argument("--new", action="store_true", help="start a new conversation instead of continuing")
    p.add_argument("--tools", help="comma-separated tool names to allow (default: all; see %%agent tools)")
    p.add_argument("--max-steps", type=int, dest="max_steps",
                   help="stop after this many tool steps (the run and its sub-agents)")
    p.add_argument("--budget", type=float,
                   help="stop when the model cost of the run and its sub-agents reaches this many dollars")
    p.add_argument("--approve", choices=["all", "none", "low", "recorded"],
                   help="answer approvals by policy instead of asking (headless runs): recorded = as in the "
                        "cell's previous run")
    p.add_argument("--reproduce", nargs="?", const="", default=None, metavar="RUN",
                   help="reproduce a recorded run from the log: its model replies and decisions, no model call, "
                        "nobody asked (default: this cell's last run)")
    p.add_argument("--replay", nargs="?", const="", default=None, dest="reproduce", help=argparse.SUPPRESS)
    p.add_argument("--script", help="JSON script of turns for the offline scripted model (implies "
                                    "--model nbagent/scripted)")
    p.add_argument("--mcp", metavar="FILE", help="MCP servers' config (mcpServers JSON), added to mcp.json beside "
                                                 "the notebook (docs/mcp.md)")
    return p


@functools.cache
def line_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="%agent", add_help=False, description="Inspect and steer the notebook's agent runs.")
    p.add_argument("-h", "--help", action="store_true", help="show this help")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.add_parser("status", help="the latest run and any run waiting for a decision", add_help=False)
    sub.add_parser("runs", help="a table of the notebook's runs", add_help=False)
    s = sub.add_parser("show", help="one run's event timeline", add_help=False)
    s.add_argument("run", metavar="RUN", help="run id or unique prefix")
    s = sub.add_parser("log", help="the session's events as a table (a pandas DataFrame when pandas is present)",
                       add_help=False)
    s.add_argument("run", metavar="RUN", nargs="?", help="only this run")
    s = sub.add_parser("approve", help="approve the plan a run is waiting on", add_help=False)
    s.add_argument("run", metavar="RUN", nargs="?", help="default: the run waiting for a decision")
    grant_options(s)
    for name, what in (("deny", "REASON"), ("refine", "FEEDBACK")):
        s = sub.add_parser(name, help=f"{name} the plan a run is waiting on, with a {what.lower()}", add_help=False)
        s.add_argument("words", metavar=f"[RUN] {what}", nargs="*", help=f"optional run id, then the {what.lower()}")
        if name == "deny":
            grant_options(s)
    s = sub.add_parser("grants", help="the grants given in this notebook: what each covers, until when, used how often",
                       add_help=False)
    s.add_argument("--all", action="store_true", help="also the revoked, expired and ended ones")
    s = sub.add_parser("revoke", help="end a grant now: later calls it covered ask again", add_help=False)
    s.add_argument("grant", metavar="GRANT", help="grant id or unique prefix (%%agent grants lists them)")
    s.add_argument("reason", metavar="REASON", nargs="*", help="optional: why, for the log")
    s = sub.add_parser("answer", help="answer the question a run is waiting on", add_help=False)
    s.add_argument("words", metavar="[RUN] TEXT", nargs="*")
    s = sub.add_parser("resume", help="resume a run left waiting or interrupted (after a restart too)",
                       add_help=False)
    s.add_argument("run", metavar="RUN", nargs="?", help="default: the latest waiting or interrupted run")
    sub.add_parser("tools", help="the tools the agent may use, with their risk", add_help=False)
    s = sub.add_parser("mcp", help="the notebook's MCP servers: trusted or not, where from, what they run",
                       add_help=False)
    s.add_argument("--mcp", metavar="FILE", help="also this config (as a cell's --mcp)")
    s = sub.add_parser("trust", help="trust MCP servers from a config file: they start at the next run (docs/mcp.md)",
                       add_help=False)
    s.add_argument("names", metavar="NAME", nargs="*", help="the servers to trust")
    s.add_argument("--all", action="store_true", help="every server from a file that is not trusted yet")
    s.add_argument("--mcp", metavar="FILE", help="also this config (as a cell's --mcp)")
    sub.add_parser("models", help="which model a cell without --model uses, and why", add_help=False)
    s = sub.add_parser("reproduce", help="re-run %%%%agent cells from the log (recorded replies and decisions, no "
                                         "model call), or ask the model again", add_help=False)
    s.add_argument("what", metavar="on|off|RUN", nargs="?",
                   help="on: every %%%%agent cell run reproduces its last run; off: asks again; RUN: the next run of "
                        "RUN's cell reproduces RUN; nothing: say which")
    s.add_argument("--cell", metavar="CELL", help="with RUN: the cell whose next run reproduces it (default: RUN's)")
    s = sub.add_parser("fix", help="ask the agent to fix the last error of this kernel", add_help=False)
    s.add_argument("words", metavar="[INSTRUCTIONS]", nargs="*", help="anything to add to the request")
    s = sub.add_parser("config", help="show or set defaults: %agent config model=openai/gpt-4o-mini", add_help=False)
    s.add_argument("pairs", metavar="KEY=VALUE", nargs="*")
    s = sub.add_parser("undo", help="restore the files a run (and its child runs) changed; recorded as a run",
                       add_help=False)
    s.add_argument("run", metavar="RUN", help="run id or unique prefix")
    s.add_argument("--to", action="store_true", help="also undo every later run: the files as before RUN")
    s.add_argument("--force", action="store_true", help="restore over files changed since (conflicts)")
    s = sub.add_parser("export", help="write a run as json, html or md", add_help=False)
    s.add_argument("run", metavar="RUN")
    s.add_argument("--format", choices=["json", "html", "md"], default="html")
    s.add_argument("-o", "--output", help="file to write (default: show it here)")
    return p


def grant_options(s: argparse.ArgumentParser) -> None:
    """Options of a decision that also answers later calls of the same kind (nbagent/gate/grants.py)."""
    s.add_argument("--for", dest="reach", choices=["run", "session"],
                   help="also answer later matching calls: for the rest of this run, or this session (8 h)")
    s.add_argument("--path", dest="paths", action="append", metavar="PATTERN",
                   help="with --for: the paths covered (gitignore patterns from the notebook's folder, e.g. "
                        "'data/*.csv'); default: exactly the paths the plan names; repeatable")
    s.add_argument("--arg", dest="arg_patterns", action="append", metavar="NAME=GLOB",
                   help="with --for: another argument the calls must match; repeatable")
    s.add_argument("--expires", metavar="DURATION", help="with --for: end the grant after 30m, 2h, 1d...")


def parse(parser: argparse.ArgumentParser, line: str) -> argparse.Namespace:
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{parser.prog}: {exc}\n{parser.format_usage()}") from None
    return parser.parse_args(argv)


class NbAgent(Configurable):
    """Defaults for %%agent cells, settable with `%config NbAgent.<name> = value`.

    traitlets hands a config section to every class of that name, so the name must be nbagent's own: it was
    `Agent` before, a name other libraries use too (nbagent's own runtime class among them)."""

    model = Unicode("", help="the model when a cell names none").tag(config=True)
    autonomy = Unicode("L1", help="L0-L3").tag(config=True)
    approve = Unicode("", help="headless approval policy: all, none, low, recorded").tag(config=True)
    max_steps = Int(50, help="tool steps per run").tag(config=True)
    budget = Float(0.0, help="model cost per run, in dollars (0: no limit)").tag(config=True)
    tool_timeout = Float(300.0, help="seconds a tool call may take, a cell the agent runs included (0: no limit)"
                         ).tag(config=True)
    model_timeout = Float(120.0, help="seconds a model call may take, streamed or not: its deadline").tag(config=True)
    context_window = Int(0, help="the model's input limit in tokens (0: litellm's table says; docs/context-budget.md)"
                         ).tag(config=True)
    script = Unicode("", help="script of the offline scripted model").tag(config=True)
    session = Unicode("default", help="the conversation cells continue").tag(config=True)
    mcp = Unicode("", help="MCP servers: a config file (mcpServers JSON) or the JSON itself").tag(config=True)
    rerun = Unicode("ask", help="how a re-run %%agent cell runs: ask (the model again) or reproduce (its recorded "
                                "run, from the log)").tag(config=True)


SETTINGS = ("model", "autonomy", "approve", "max_steps", "budget", "tool_timeout", "model_timeout", "context_window",
            "script", "session", "mcp", "rerun")
_DEFAULTS = {"model": "", "autonomy": "L1", "approve": "", "max_steps": 50, "budget": 0.0, "tool_timeout": 300.0,
             "model_timeout": 120.0, "context_window": 0, "script": "", "session": "default", "mcp": "", "rerun": "ask"}
_CASTS = {"max_steps": int, "budget": float, "tool_timeout": float, "model_timeout": float, "context_window": int}


def resolve(name: str, cell_value: Any, overrides: dict[str, Any], config: NbAgent,
            parameters: dict[str, tuple[Any, str]] | None = None) -> tuple[Any, str]:
    """(value, where it came from) for one setting. `parameters`: papermill's, name -> (value, where)."""
    if cell_value not in (None, ""):
        return cell_value, "cell option"
    if parameters and name in parameters:
        return parameters[name]
    if name in overrides:
        return overrides[name], "%agent config"
    traited = getattr(config, name)
    if traited != _DEFAULTS[name] and config.trait_metadata(name, "config"):
        return traited, "%config NbAgent"
    env = os.environ.get(f"NBAGENT_{name.upper()}")
    if env:
        return from_environment(name, env), f"NBAGENT_{name.upper()}"
    return _DEFAULTS[name], "default"


def from_environment(name: str, raw: str) -> Any:
    """The setting `name` from its NBAGENT_<NAME> value, checked as `%agent config` checks a value (SettingError)."""
    checked: dict[str, Any] = {}
    try:
        set_override(checked, f"{name}={raw}")
    except UsageError as exc:
        takes = str(exc).removeprefix("%agent config: ").removeprefix(f"{name} ")
        raise SettingError(f"NBAGENT_{name.upper()}", raw, takes.split(", got ")[0].removeprefix("must be ")
                           .removeprefix("is ")) from None
    return checked[name]


def env_seconds(variable: str, default: float) -> float:
    """A number of seconds from the environment (0 or more), `default` when unset; SettingError otherwise."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise SettingError(variable, raw, f"a number of seconds, 0 or more (default {default:g})")
    return value


_FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
_warned: set[str] = set()


def env_flag(variable: str, default: bool) -> bool:
    """A yes or no from the environment, `default` when unset. A value that is neither is said once, in one line,
    and the default is kept: it is read where failing would stop nbagent loading (`%load_ext`)."""
    import sys

    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    value = _FLAGS.get(raw.lower())
    if value is None:
        if variable not in _warned:
            _warned.add(variable)
            print(f"nbagent: {SettingError(variable, raw, 'one of 1, true, yes, on or 0, false, no, off')} "
                  f"(until then: {'on' if default else 'off'}, the default)", file=sys.stderr)
        return default
    return value


def set_override(overrides: dict[str, Any], pair: str) -> str:
    if "=" not in pair:
        raise UsageError(f"%agent config: expected KEY=VALUE, got {pair!r}; keys: {', '.join(SETTINGS)}")
    key, value = (x.strip() for x in pair.split("=", 1))
    key = key.replace("-", "_")
    if key not in SETTINGS:
        raise UsageError(f"%agent config: unknown key {key!r}; keys: {', '.join(SETTINGS)}")
    try:
        cast = _CASTS.get(key, str)(value)
    except ValueError:
        number = "a whole number" if _CASTS.get(key) is int else "a number"
        raise UsageError(f"%agent config: {key} must be {number}, got {value!r}") from None
    if key == "context_window" and cast and cast < 1_000:
        raise UsageError("%agent config: context_window is the model's input limit in tokens: 1000 or more (0: the "
                         "model's own, from litellm's table)")
    if key == "model_timeout" and not cast > 0:
        raise UsageError("%agent config: model_timeout is the seconds a model call may take: more than 0")
    if key == "autonomy" and value not in ("L0", "L1", "L2", "L3"):
        raise UsageError("%agent config: autonomy must be L0, L1, L2 or L3")
    if key == "approve" and value not in ("", "all", "none", "low", "recorded"):
        raise UsageError("%agent config: approve must be all, none, low or recorded")
    if key == "rerun" and value not in ("ask", "reproduce"):
        raise UsageError("%agent config: rerun must be ask or reproduce")
    overrides[key] = cast  # only a value that passed every check replaces the one in force
    if key == "mcp" and str(value).lstrip().startswith("{"):
        return "mcp = <inline JSON>"  # its headers and env may hold tokens: never echoed into the notebook
    return f"{key} = {overrides[key]!r}"


OLD_SECTION = "Agent"


def old_section_note(config: Any) -> str | None:
    """What to say when the IPython config still sets nbagent's settings under the old name `Agent`, or None.

    Those values are not used: `Agent` may be another library's class (traitlets gives a section to every class of
    that name), so reading it could take that library's settings for nbagent's. Saying so beats silently ignoring
    an ipython_config.py written for an older nbagent."""
    try:
        section = dict.get(config, OLD_SECTION)  # not config[...]: a traitlets Config makes a missing section
    except Exception:
        return None
    keys = sorted(k for k in (section or {}) if k in SETTINGS)
    if not keys:
        return None
    shown = ", ".join(f"Agent.{k}" for k in keys)
    return (f"nbagent: {shown} in the IPython config is not read by nbagent: its settings are now NbAgent.<name> "
            f"(`%config NbAgent.{keys[0]} = ...`, or `c.NbAgent.{keys[0]} = ...` in ipython_config.py). `Agent` is a "
            "class name other libraries use too, and traitlets hands the section to all of them; if it is meant for "
            "another library, ignore this note.")
