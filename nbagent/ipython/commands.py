"""The `%agent` commands: one `cmd_<name>` method per command of `%agent`'s parser (options.py).

Split from host.py so that every command a notebook line can give reads in one place: status, runs, show, log,
the decisions (approve, deny, refine, answer, resume) and grants, tools and MCP trust, models, fix, config, undo
and export. `NotebookHost` (host.py) has these as methods: `Commands` is one of its bases, and drives runs on
through the `%%agent` path (agent_cell.py), so a decision given here continues the run in this cell.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbagent.ipython.hoststate import HostState
from nbagent.ipython.options import UsageError, cell_parser, line_parser, parse, set_override

# the runtime, its deciders, states and store are imported by the commands that use them (see agent_cell.py)
if TYPE_CHECKING:
    from nbagent.gate.deciders import Verdict
    from nbagent.runtime import Agent as RuntimeAgent


class Commands(HostState):
    """The `%agent` part of `NotebookHost` (a base class of it; see the module's docstring)."""

    async def run_line(self, line: str) -> Any:
        # `{name}` and `$name` expand as in any line magic (`%agent undo {run_id}`), as `%%agent`'s own line does
        args = parse(line_parser(), self.shell.var_expand(line) if hasattr(self.shell, "var_expand") else line)
        if args.help or not args.command:
            print(line_parser().format_help())
            return None
        return await getattr(self, "cmd_" + args.command)(args)

    async def cmd_status(self, args: Any) -> None:
        from nbagent.events.state import RunStatus

        runs = self.store.list_runs()
        if not runs:
            print(f"no runs yet; the log will be {self.store.path}")
            return
        last = runs[-1]
        print(f"latest run {last.id}: {last.status.value} · {last.model} · {last.steps} tool call(s) · "
              f"{last.tokens} tokens · log {self.store.path}")
        for r in runs:
            state = self.store.run_state(r.id)
            if state.pending is not None:
                what = state.pending.question if state.pending.kind == "human_input" else \
                    f"approval of plan {state.pending.plan_id}"
                print(f"  {r.id} ({state.status.value}) waits for {what}: %agent approve|deny|refine|answer {r.id}")
            elif state.status == RunStatus.INTERRUPTED:
                print(f"  {r.id} was interrupted: %agent resume {r.id}")

    async def cmd_runs(self, args: Any) -> None:
        from nbagent.ui.run_tables import runs_table

        runs = self.store.list_runs()
        if not runs:
            print("no runs yet")
            return
        print(runs_table(runs, self.store.session_names()))  # as `nbagent runs` shows it

    async def cmd_show(self, args: Any) -> None:
        from nbagent.ui.run_tables import render_timeline

        run_id = self.store.resolve_run(args.run)
        print(render_timeline(self.store.run_state(run_id), self.store.run_events(run_id), self.store.path))

    async def cmd_log(self, args: Any) -> Any:
        from nbagent.ui.timeline import describe

        events = self.store.run_events(self.store.resolve_run(args.run)) if args.run else \
            self.store.query_events()
        rows: list[dict[str, Any]] = [{"ts": e.ts, "run": e.run_id, "seq": e.seq, "type": e.type, "detail": describe(e)}
                                      for e in events]
        try:
            import pandas as pd
        except ImportError:
            for r in rows:
                print(f"{r['ts'][:23]}  {str(r['run'])[:12]:12}  {r['seq']:>4}  {r['type']:<22} {r['detail']}")
            return None
        return pd.DataFrame(rows)

    def _waiting_run(self, run: str | None, command: str = "approve") -> str:
        """The run a decision is for: the one named, else the only one waiting. With several waiting, guessing
        could approve the wrong plan, so the user is asked to name one."""
        if run:
            return self.store.resolve_run(run)
        waiting = [(r, p) for r in self.store.list_runs() if (p := self.store.run_state(r.id).pending) is not None]
        if not waiting:
            raise UsageError("no run is waiting for a decision; %agent status shows the runs")
        if len(waiting) == 1:
            return waiting[0][0].id
        usage = {"deny": "RUN reason", "refine": "RUN feedback", "answer": "RUN your answer"}.get(command, "RUN")
        lines = [f"{len(waiting)} runs are waiting for a decision; name the one you mean: %agent {command} {usage}"]
        for r, p in waiting:
            what = f"an answer to {p.question!r}" if p.kind == "human_input" else f"approval of plan {p.plan_id}"
            lines.append(f"  {r.id}  cell {r.cell_id or '-'}  waits for {what}")
        raise UsageError("\n".join(lines))

    async def _decide(self, run: str | None, verdict: Verdict | None = None, answer: str | None = None,
                      command: str = "approve") -> None:
        run_id = self._waiting_run(run, command)
        state = self.store.run_state(run_id)
        pending = state.pending
        if pending is None:
            raise UsageError(f"run {run_id} is not waiting for a decision ({state.status.value})")
        from nbagent.gate.deciders import Answer

        value = verdict if verdict is not None else Answer(text=answer or "", by="user")
        if self.decider.resolve(pending.request_id, value):
            print(f"delivered to the waiting run {run_id}")
            return
        agent = self.agent_for(run_id)
        agent.answer_pending(run_id, verdict=verdict, answer=answer)
        await self.drive(agent, lambda: agent.resume(run_id), run_id)

    def _split(self, words: list[str]) -> tuple[str | None, str]:
        if words and self._is_run(words[0]):
            return words[0], " ".join(words[1:])
        return None, " ".join(words)

    def _is_run(self, word: str) -> bool:
        from nbagent.store import StoreError

        try:
            self.store.resolve_run(word)
            return len(word) >= 6
        except StoreError:
            return False

    def _grant_spec(self, args: Any, run: str | None, effect: str) -> Any:
        """The grant a `%agent approve|deny --for ...` asks for, checked against the plan it decides: a pattern
        that covers none of the plan's calls is one line, and nothing is decided."""
        from nbagent.gate import grants

        if args.reach is None:
            if args.paths or args.arg_patterns or args.expires:
                raise UsageError(f"%agent {'approve' if effect == 'allow' else 'deny'}: --path, --arg and --expires "
                                 "shape a grant; add --for run or --for session")
            return None
        pairs = {}
        for pair in args.arg_patterns or []:
            if "=" not in pair:
                raise UsageError(f"--arg {pair!r}: write NAME=GLOB, e.g. --arg mode=w")
            key, value = pair.split("=", 1)
            pairs[key.strip()] = value
        try:
            spec = grants.GrantSpec(scope=args.reach, paths=args.paths, arguments=pairs,
                                    expires_in=grants.parse_duration(args.expires) if args.expires else None)
            run_id = self._waiting_run(run, "approve" if effect == "allow" else "deny")
            state = self.store.run_state(run_id)
            pending = state.pending
            if pending is None or pending.kind != "approval":
                raise UsageError(f"run {run_id} is not waiting for an approval; a grant needs a plan to decide")
            tools = {t.name: t for t in self.all_tools(notes=False)}
            grants.for_plan(pending.steps, state.autonomy, spec, effect, tools)  # type: ignore[arg-type]
        except grants.GrantError as exc:
            raise UsageError(f"%agent {'approve' if effect == 'allow' else 'deny'}: {exc}") from None
        return spec

    async def cmd_approve(self, args: Any) -> None:
        from nbagent.gate.deciders import Verdict

        grant = self._grant_spec(args, args.run, "allow")
        await self._decide(args.run, Verdict.approve(by="%agent approve", grant=grant))

    async def cmd_deny(self, args: Any) -> None:
        from nbagent.gate.deciders import Verdict

        run, reason = self._split(args.words)
        grant = self._grant_spec(args, run, "reject")
        await self._decide(run, Verdict.deny(reason, by="%agent deny", grant=grant), command="deny")

    async def cmd_grants(self, args: Any) -> None:
        from nbagent.gate.grants import grants_table

        print(grants_table(self.store, everything=args.all))

    async def cmd_revoke(self, args: Any) -> None:
        from nbagent.gate.grants import GrantError, revoke

        try:
            print(revoke(self.store, args.grant, by="%agent revoke", reason=" ".join(args.reason)))
        except GrantError as exc:
            raise UsageError(f"%agent revoke: {exc}") from None

    async def cmd_refine(self, args: Any) -> None:
        run, feedback = self._split(args.words)
        if not feedback.strip():
            raise UsageError("%agent refine: say what to change, e.g. %agent refine use report.md instead")
        from nbagent.gate.deciders import Verdict

        await self._decide(run, Verdict.refine(feedback, by="%agent refine"), command="refine")

    async def cmd_answer(self, args: Any) -> None:
        run, text = self._split(args.words)
        await self._decide(run, answer=text, command="answer")

    async def cmd_resume(self, args: Any) -> None:
        from nbagent.events.state import RunStatus

        if args.run:
            run_id = self.store.resolve_run(args.run)
        else:
            candidates = [r.id for r in self.store.list_runs()
                          if r.status in (RunStatus.WAITING, RunStatus.INTERRUPTED, RunStatus.RUNNING)]
            if not candidates:
                raise UsageError("no run to resume; %agent status shows the runs")
            run_id = candidates[-1]
        from nbagent.runtime.recorded_yes import not_yours
        from nbagent.runtime.recording import RecordingRefused

        try:  # another's run (a cloned log) would go on with its author's decisions, at its author's autonomy
            theirs = not_yours(self.store, run_id)
        except RecordingRefused as exc:
            raise UsageError(f"%agent resume: {exc}") from None
        if theirs is not None:
            raise UsageError(f"%agent resume: {theirs.split(': its decisions')[0]}: resuming it would carry out "
                             "what its author decided; re-run its %%agent cell to be asked")
        agent = self.agent_for(run_id)
        await self.drive(agent, lambda: agent.resume(run_id), run_id)

    def agent_for(self, run_id: str) -> RuntimeAgent:
        """An agent able to continue a recorded run, after a restart too: settings come from its events."""
        state = self.store.run_state(run_id)
        opts = state.options
        cfg = {k: v for k, (v, _) in self.settings().items()}
        cfg.update(model=state.model, autonomy=state.autonomy.value, script=opts.get("script", ""),
                   max_steps=opts.get("max_steps", cfg["max_steps"]), budget=opts.get("budget", cfg["budget"]),
                   mcp=opts.get("mcp", cfg.get("mcp")))  # the run's own MCP servers, after a restart too
        if state.model == "nbagent/replay":
            raise UsageError(f"run {run_id} was a replay; re-run its cell to replay again")
        if state.session_id is None:  # (every run_started names its session: a log without one is not a run's)
            from nbagent.store import StoreError

            raise StoreError(f"{self.store.path}: run {run_id} has no session")
        session = self.store.get_session(state.session_id)
        return self.make_agent(cfg, session_name=session.name)

    async def cmd_tools(self, args: Any) -> None:
        from nbagent.tools.control import CONTROL_TOOLS

        # the tools the model is offered: not one kept only so that recordings naming it still run (run_python)
        tools = [t for t in self.all_tools(approve=self.settings()["approve"][0] or None) if t.offered]
        tools += CONTROL_TOOLS.values()
        width = max([20, *(len(t.name) for t in tools)])  # MCP tools' names (mcp__SERVER__TOOL) are longer
        for t in tools:
            server = getattr(t, "server", None)  # an MCP server's tool (nbagent/mcp/): say which, and why that risk
            where = f"[MCP server {server}; {t.risk_reason}] " if server else ""  # type: ignore[attr-defined]
            print(f"{t.name:<{width}} {t.risk.value:<16} {where}{t.description}")

    async def cmd_trust(self, args: Any) -> None:
        from nbagent.ipython.trust import cmd_trust

        cmd_trust(self, args)

    async def cmd_mcp(self, args: Any) -> None:
        from nbagent.ipython.trust import cmd_mcp

        cmd_mcp(self, args)

    async def cmd_models(self, args: Any) -> None:
        from nbagent.models.detect import NO_MODEL, candidates

        value, source = self.settings()["model"]
        script, script_source = self.settings()["script"]
        if value:
            print(f"model: {value} (from {source})")
        elif script:
            print(f"model: nbagent/scripted playing {script} (from {script_source})")
        found = candidates()
        for c in found:
            print(f"detected: {c.model} ({c.why})")
        if not value and not script:
            print(f"model: {found[0].model} (detected: {found[0].why})" if found else NO_MODEL)

    async def cmd_reproduce(self, args: Any) -> None:
        """`%agent reproduce [on|off|RUN]`: how re-run `%%agent` cells run (reproduce.py). RUN: the next run of the
        cell that recorded RUN reproduces RUN (a record's Reproduce button sends this, then runs the cell); it is
        checked against the log when that cell runs, where a refusal shows."""
        from nbagent.ipython.reproduce import OFF_HINT, ON_HINT

        what = (args.what or "").strip()
        if what in ("on", "off"):
            set_override(self.overrides, f"rerun={'reproduce' if what == 'on' else 'ask'}")
        elif what and args.cell:  # (a record's button: checked against the log when that cell runs)
            self.reproduce_next[args.cell] = what
            print(f"the next run of cell {args.cell} reproduces run {what} from the log")
            return
        elif what:
            from nbagent.store import StoreError

            try:
                run_id = self.store.resolve_run(what)
            except StoreError as exc:
                raise UsageError(f"%agent reproduce: {exc}") from None
            cell_id = self.store.run_state(run_id).cell_id
            if not cell_id:
                raise UsageError(f"%agent reproduce: run {run_id} names no cell (the front end sent no cell id); "
                                 f"give its cell --reproduce {run_id}")
            self.reproduce_next[cell_id] = run_id
            print(f"the next run of cell {cell_id} reproduces run {run_id} from the log")
            return
        mode, source = self.settings()["rerun"]
        if mode == "reproduce":
            print(f"reproduce is on ({source}): a re-run %%agent cell reproduces its last recorded run from the "
                  f"log, no model call, its recorded decisions; {OFF_HINT}")
        else:
            print(f"reproduce is off ({source}): a re-run %%agent cell asks the model again; {ON_HINT}")

    async def cmd_fix(self, args: Any) -> None:
        error = self.last_error
        if error is None:
            raise UsageError("%agent fix: no cell has failed in this kernel yet")
        extra = " ".join(args.words).strip()
        prompt = ("The cell below failed with " + f"{error['type']}: {error['message']}. Explain the cause in a "
                  "sentence, then propose a fix: a corrected cell (insert_code_cell) or, if the session's state is "
                  "what is wrong, a run_python step." + (f" {extra}" if extra else ""))
        context = [{"role": "user", "content": "The failing cell:\n```python\n" + error["source"].rstrip()
                    + "\n```\n\nThe traceback:\n```\n" + error["traceback"].rstrip() + "\n```"}]
        await self.start_run(cell_parser().parse_args([]), prompt, context)

    async def cmd_config(self, args: Any) -> None:
        from nbagent.ipython.entry import redact

        for pair in args.pairs:
            print(set_override(self.overrides, pair))
        if not args.pairs:
            for name, (value, source) in self.settings().items():
                if name == "mcp" and str(value).lstrip().startswith("{"):  # inline JSON may hold tokens: not shown
                    value = "<inline JSON>"
                print(redact(f"{name:<10} = {value!r:<30} ({source})"))

    async def cmd_undo(self, args: Any) -> None:
        """`%agent undo RUN [--to] [--force]`: the same undo as `nbagent undo`, from the notebook's log (so it works
        after a kernel restart: everything it needs is in the log and its blob folder)."""
        from nbagent.ipython.undo_offers import cells_gone
        from nbagent.undo.files import UndoError, undo

        if await self._undo_panel(args, lambda: undo(self.store, args.run, to=args.to, force=args.force,
                                                     folder=self.folder, by="the Undo button",
                                                     kept=self.cells_yours(), gone=cells_gone())):
            return
        try:
            report = undo(self.store, args.run, to=args.to, force=args.force, folder=self.folder,
                          by="%agent undo", kept=self.cells_yours(), gone=cells_gone())
        except UndoError as exc:
            raise UsageError(f"%agent undo: {exc}") from None
        print(report.text())
        if report.ok:
            self._undo_cells(report)
            self._refresh_records(list(report.runs))  # their records say "undone by", as after the panel's undo
        if not report.ok:
            raise UsageError("%agent undo: refused; nothing was changed (add --force to restore anyway)"
                             if report.conflicts else
                             "%agent undo: a restore failed (listed above); the undo put back what it had restored")

    def cells_yours(self) -> set[str]:
        """The agent's cells the person edited and ran since (the kernel saw it): an undo keeps them, and says so."""
        return {cid for cid, c in self.agent_cells.cells.items() if c.edited}

    def _undo_cells(self, report: Any) -> None:
        """The cells an undo removes or restores (run_cell, replace_cell), done in the front end (agent_cells.py);
        what its report said of each (and the kernel note) is not printed twice, only what more there is to say
        (no front end took them)."""
        todo = [c for c in report.cells if not c.kept and not c.gone]
        if not report.ok or not todo:
            return
        from nbagent.ipython.agent_cells import undo_cells
        from nbagent.undo.cells import KERNEL_NOTE

        said = {c.line() for c in report.cells} | {f"note: {KERNEL_NOTE}"}
        for line in undo_cells(self.agent_cells, todo):
            if line not in said:
                print(f"  {line}")

    async def _undo_panel(self, args: Any, run_undo: Callable[[], Any]) -> bool:
        """With a person at a front end, `%agent undo` shows what will change and undoes only when they confirm
        (the Undo panel, nbagent/ui/undo_view.py). True when the panel is shown; False (no kernel, headless, no front
        end drawing it within NBAGENT_FRONTEND_WAIT seconds) leaves the undo to the command itself."""
        if getattr(self.shell, "kernel", None) is None or os.environ.get("NBAGENT_HEADLESS") == "1":
            return False
        from IPython.display import display, update_display

        from nbagent.ipython.undo_offers import cells_gone
        from nbagent.undo.files import UndoError

        try:
            from nbagent.ui.undo_view import UndoView, undo_offer

            offer = undo_offer(self.store, args.run, to=args.to, force=args.force, folder=self.folder,
                               kept=self.cells_yours(), gone=cells_gone())
        except UndoError as exc:
            raise UsageError(f"%agent undo: {exc}") from None
        except ImportError:
            return False
        display_id = f"nbagent-undo-{uuid.uuid4().hex}"
        # the panel replaces itself, through this id, by its outcome as HTML and text once the undo ran
        panel = UndoView(offer, run_undo, display_id=display_id)
        panel.on_rendered = self.frontend_rendered
        def done(report: Any) -> None:
            self._undo_cells(report)
            self._refresh_records(list(report.runs))

        panel.on_done = done
        display(panel, display_id=display_id)
        if self.frontend_seen or self.no_wait or await self.someone_can_answer():
            return True  # (no_wait: the panel changes nothing until clicked, so showing it unseen is safe)
        panel.close()
        update_display({"text/plain": ""}, raw=True, display_id=display_id)
        return False

    async def cmd_export(self, args: Any) -> Any:
        from nbagent.ui.record import render_html, render_markdown
        from nbagent.ui.viewstate import run_view

        run_id = self.store.resolve_run(args.run)
        view = run_view(self.store, run_id)
        text = {"json": lambda: json.dumps(view, indent=1, ensure_ascii=False), "html": lambda: render_html(view),
                "md": lambda: render_markdown(view)}[args.format]()
        if args.output:
            out = self._path(args.output)
            out.write_text(text, encoding="utf-8")
            print(f"wrote {out}")
            return None
        if args.format == "html":
            from IPython.display import HTML

            return HTML(text)
        print(text)
        return None
