"""The `nbagent` command: read and check the logs beside notebooks, run a notebook headlessly, undo, revoke.

    nbagent runs [PATH]           a table of runs
    nbagent show RUN [PATH]       one run's event timeline (--json for machines)
    nbagent verify [PATH]         check every chain; non-zero exit on tampering
    nbagent grants [PATH]         the grants given, what each covers, whether in force
    nbagent run NOTEBOOK          execute a notebook headlessly (the main job for CI)
    nbagent undo RUN [PATH]       restore the files a run (and its child runs) changed (docs/undo.md); a log that
                                  fails `nbagent verify` is refused, nothing changed
    nbagent revoke GRANT [PATH]   end a grant now

PATH is a notebook, its store folder (NAME.nbagent), or a folder, searched with its subfolders (not .git,
node_modules, virtual environments or other hidden and tool folders); omitted, the current folder.
runs, show, verify and grants only read (they open stores read-only, take no lock, and so also work on a read-only
disk); run, undo and revoke write (WHO_WRITES says what, in --help and docs/cli.md alike).
Exit codes: 0 ok, 1 verify found a problem (or a notebook's run or an undo did not succeed), 2 bad input (usage,
not a store, no such run, newer format, not a notebook), 130 and 143 `run` stopped by Ctrl-C or SIGTERM.
Logs written by a newer nbagent are read as far as this version can: unknown event types are listed, shown
generically and verified, never an error; a damaged tables.json (a cache) is rebuilt from the events.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from nbagent._version import __version__
from nbagent.store import Store, StoreError
from nbagent.store.locate import find_stores
from nbagent.store.store import STORE_SUFFIX
from nbagent.store.verify import verify_store
from nbagent.ui.record import NOMINAL_NOTE
from nbagent.ui.run_tables import render_timeline, runs_table, short_ids, table
from nbagent.ui.viewstate import cell_labels, is_nominal

__all__ = ["READS", "WHO_WRITES", "WRITES", "build_parser", "locate", "main", "render_timeline", "short_ids",
           "stores_below", "table"]

# which commands write, said once for --help, the module's docstring and docs/cli.md (tests/test_cli.py checks all)
READS = ("runs", "show", "verify", "grants")
WRITES = {"run": "the executed notebook, the notebook's log, and the files its approved plans change",
          "undo": "the files it restores, and the log", "revoke": "the log"}
WHO_WRITES = (f"{', '.join(READS[:-1])} and {READS[-1]} only read (they open the logs read-only and take no lock). "
              + "; ".join(f"{name} writes {what}" for name, what in WRITES.items()) + ".")


def build_parser() -> argparse.ArgumentParser:
    """The `nbagent` command's argument parser: one sub-command per command, each with its `func` set (`main` calls
    it with the parsed arguments). Its help is what `nbagent --help` prints."""
    parser = argparse.ArgumentParser(
        prog="nbagent",
        description=f"nbagent: a Jupyter-native LLM agent, from the command line. {WHO_WRITES}",
        epilog="PATH is a notebook (.ipynb), its store folder (NAME.nbagent), or a folder (searched with its "
               "subfolders); default: current folder.",
    )
    parser.add_argument("--version", action="version", version=f"nbagent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("runs", help="list runs: id, session, cell, status, model, tool calls, tokens, cost, started",
                       description="List the runs recorded in the logs under PATH (its subfolders too), oldest "
                                   "first.")
    p.add_argument("path", nargs="?", metavar="PATH", help="notebook, store or folder (default: current folder)")
    p.add_argument("--json", action="store_true", help="print JSON (one object per run) instead of a table")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("show", help="one run's event timeline",
                       description="Show a run's events in order, indented by cause (a tool result under its call).")
    p.add_argument("run", metavar="RUN", help="run id, or a unique prefix of one")
    p.add_argument("path", nargs="?", metavar="PATH", help="notebook, store or folder (default: current folder)")
    p.add_argument("--json", action="store_true", help="print the events exactly as recorded, as a JSON array")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("run", help="execute a notebook headlessly, answering approvals by policy",
                       description="Execute NOTEBOOK with nbclient (sending cell ids as JupyterLab does), answer "
                                   "approvals by policy, write the executed notebook, print a line per run. Exits 1 "
                                   "when a cell fails (an unknown {name} included), or a run fails, is interrupted, "
                                   "is left waiting, or ended completed_with_errors (a tool call failed or was "
                                   "denied) unless --allow-tool-errors. Ctrl-C or SIGTERM interrupts the kernel, "
                                   "writes what ran, and exits 130 or 143; the runs stopped can be resumed.")
    p.add_argument("notebook", metavar="NOTEBOOK", help="the .ipynb to execute")
    p.add_argument("-o", "--output", help="where to write the executed notebook (default: in place)")
    p.add_argument("--approve", choices=["all", "none", "low", "recorded"], default="none",
                   help="how approvals are answered (default: none, i.e. every proposed plan is denied)")
    p.add_argument("--model", help="the model for cells that name none (sets NBAGENT_MODEL for the kernel)")
    p.add_argument("--timeout", type=int, default=600,
                   help="seconds a cell may run, waits for a model or a tool included; past them the kernel is "
                        "interrupted and the cell fails (default 600)")
    p.add_argument("--allow-tool-errors", action="store_true",
                   help="exit 0 even when a run ended completed_with_errors (a tool call failed or was denied)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("undo", help="restore the files a run (and the runs it spawned) changed",
                       description="Restore every file RUN and its child runs changed, newest change first (a "
                                   "created file is removed, an overwritten or deleted one restored), recorded as a "
                                   "new run that can itself be undone. A file changed since by anyone else is a "
                                   "conflict: nothing is changed, the diff is shown, exit 1. Writes the files it "
                                   "restores and its run in the log.")
    p.add_argument("run", metavar="RUN", help="run id, or a unique prefix of one")
    p.add_argument("path", nargs="?", metavar="PATH", help="notebook, store or folder (default: current folder)")
    p.add_argument("--to", action="store_true",
                   help="also undo every later run: the folder's agent-touched files as they were before RUN")
    p.add_argument("--force", action="store_true", help="restore over files changed since (conflicts)")
    p.set_defaults(func=cmd_undo)

    p = sub.add_parser("grants", help="the grants given in the notebooks' logs: what each covers, state, uses",
                       description="List the grants (decisions that also answer later calls of the same kind) "
                                   "in the logs under PATH: what each allows or rejects, for a run or the session, "
                                   "who gave it and when, whether it is still in force, how often it answered.")
    p.add_argument("path", nargs="?", metavar="PATH", help="notebook, store or folder (default: current folder)")
    p.add_argument("--all", action="store_true", help="also the revoked, expired and ended ones")
    p.set_defaults(func=cmd_grants)

    p = sub.add_parser("revoke", help="end a grant now: later calls it covered ask again",
                       description="Record that GRANT no longer answers for anyone (a grant_revoked event). Writes "
                                   "to the log that holds the grant.")
    p.add_argument("grant", metavar="GRANT", help="grant id, or a unique prefix of one")
    p.add_argument("path", nargs="?", metavar="PATH", help="notebook, store or folder (default: current folder)")
    p.add_argument("--reason", default="", help="why, for the log")
    p.set_defaults(func=cmd_revoke)

    p = sub.add_parser("verify", help="check the hash chain and seq of every run",
                       description="Check every run's chain in every log under PATH (its subfolders too): seq "
                                   "gap-free and in order, each hash correct and linked. Exits 1 and names the first "
                                   "bad event if the log was edited, cut or reordered.")
    p.add_argument("path", nargs="?", metavar="PATH", help="notebook, store or folder (default: current folder)")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `nbagent` command (the console script's entry point) and return its exit code.

    Args:
        argv: the command's words without the program name (e.g. ``["runs", "analysis.ipynb"]``); None reads
            ``sys.argv[1:]``, as the console script does.

    Returns:
        0 ok; 1 when `verify` found a problem or a notebook's run or an undo did not succeed; 2 for bad input (a
        usage error, not a store, no such run, a newer format, not a notebook); 130 or 143 when Ctrl-C or SIGTERM
        stopped `run`. A usage error exits through argparse (`SystemExit(2)`), as a console script does.
    """
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except StoreError as exc:
        print(f"nbagent: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `nbagent show ... | head`
        return 0


# Folders never searched for logs: version control, dependencies, environments and caches (big, and not the user's
# notebooks). Hidden folders are skipped too; a store itself is not searched inside.
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv", "env", "build", "dist",
                       "test-artifacts"})
MAX_DEPTH = 8
MAX_DIRS = 20_000


def _is_store(folder: Path) -> bool:
    return folder.suffix == STORE_SUFFIX or (folder / "meta.json").exists() or (folder / "events.jsonl").exists()


def stores_below(folder: Path, *, max_depth: int = MAX_DEPTH, max_dirs: int = MAX_DIRS) -> tuple[list[Path], bool]:
    """The stores in `folder` and its subfolders, sorted; True when the search stopped at a bound.

    Args:
        folder: where to start; links to folders are never followed, and hidden folders, SKIP_DIRS and
            ``*.egg-info`` are not searched.
        max_depth: how many levels below `folder` are searched.
        max_dirs: how many folders are looked at in all.
    """
    found: list[Path] = []
    cut = False
    base = len(folder.parts)
    for seen, (here, dirs, _files) in enumerate(os.walk(folder), start=1):  # never follows links to folders
        root = Path(here)
        keep = []
        for d in sorted(dirs):
            if d.endswith(STORE_SUFFIX) and not d.startswith("."):
                found.append(root / d)
            elif not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info"):
                keep.append(d)
        if len(root.parts) - base >= max_depth:
            cut = cut or bool(keep)
            keep = []
        if seen >= max_dirs:
            cut = True
            keep = []
            dirs[:] = []
            break
        dirs[:] = keep
    return sorted(p for p in found if p.is_dir()), cut


def locate(path: str | None) -> list[Path]:
    """The stores PATH means: a notebook's or a store's own, or every store in a folder and below it.

    Args:
        path: a notebook, a store folder (NAME.nbagent) or a folder; None is the current folder.

    Raises:
        StoreError: no store there (or below a folder); `main` makes it one line and exit code 2.
    """
    folder = Path.cwd() if path is None else Path(path)
    if path is not None and (not folder.is_dir() or _is_store(folder)):
        return find_stores(path)
    if _is_store(folder):
        return [folder]
    stores, cut = stores_below(folder)
    if cut:
        print(f"warning: {folder}: stopped searching after {MAX_DIRS:,} folders or {MAX_DEPTH} levels; pass a "
              "narrower folder, a notebook or a store", file=sys.stderr)
    if not stores:
        raise StoreError(f"{folder}: no agent logs here or below (no *{STORE_SUFFIX} folders; .git, node_modules, "
                         "virtual environments and hidden folders are not searched); pass a notebook or a store")
    return stores


def _open_all(path: str | None) -> list[Store]:
    return [Store(p, readonly=True) for p in locate(path)]


def _warn(store: Store) -> None:
    for w in store.warnings:
        print(f"warning: {w}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------- runs


def cmd_runs(args: argparse.Namespace) -> int:
    stores = _open_all(args.path)
    here = (Path.cwd() if args.path is None else Path(args.path)).resolve()
    # a log found by searching (several, or one in a subfolder) is named above its table
    headers = len(stores) > 1 or any(s.path.resolve().parent != here for s in stores if here.is_dir())
    nominal = False
    for store in stores:
        runs = store.list_runs()
        _warn(store)
        cells = cell_labels(r.cell_id for r in runs)
        if args.json:
            for r in runs:
                print(json.dumps({"store": str(store.path), **r.model_dump(mode="json"), "tool_calls": r.steps,
                                  "cell_label": cells.get(r.cell_id or ""), "cost_nominal": is_nominal(r.model)},
                                 ensure_ascii=False))
            continue
        if headers:
            print(f"== {store.path}")
        if not runs:
            print(f"no runs yet in {store.path}")
            continue
        print(runs_table(runs, store.session_names()))
        nominal = nominal or any(is_nominal(r.model) for r in runs)
    if nominal and not args.json:
        print(f"\n{NOMINAL_NOTE} (models named nbagent/...)")
    return 0


# ---------------------------------------------------------------------------------------------- show


def _find_run(stores: list[Store], run: str) -> tuple[Store, str]:
    errors = []
    for store in stores:
        try:
            return store, store.resolve_run(run)
        except StoreError as exc:
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    raise StoreError(f"no run {run!r} in {', '.join(str(s.path) for s in stores)}; list runs with `nbagent runs`")


def cmd_show(args: argparse.Namespace) -> int:
    store, run_id = _find_run(_open_all(args.path), args.run)
    _warn(store)
    if args.json:
        print(json.dumps(store.raw_events(run_id), ensure_ascii=False, indent=1))
        return 0
    events = store.run_events(run_id)
    state = store.run_state(run_id)
    print(render_timeline(state, events, store.path))
    return 0


# ---------------------------------------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    """Bad input (not a notebook, an output in no folder) is one line and exit 2, before any kernel starts."""
    from nbagent.cli.run import NotebookError, main_run

    try:
        return main_run(args)
    except NotebookError as exc:
        print(f"nbagent: error: {exc}", file=sys.stderr)
        return 2


# ---------------------------------------------------------------------------------------------- verify


def cmd_undo(args: argparse.Namespace) -> int:
    """Undo opens the one store that has RUN for writing (as revoke does the grant's, and run the notebook's)."""
    from nbagent.undo.files import UndoError, undo

    found, run_id = _find_run(_open_all(args.path), args.run)
    store = Store(found.path)
    try:
        report = undo(store, run_id, to=args.to, force=args.force, by="nbagent undo (CLI)")
    except UndoError as exc:
        print(f"nbagent: undo: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"nbagent: undo: {store.path}: {exc.strerror or exc}; nothing was changed", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(report.text())
    return 0 if report.ok else 1


def cmd_grants(args: argparse.Namespace) -> int:
    from nbagent.gate.grants import grants_table

    stores = _open_all(args.path)
    for i, store in enumerate(stores):
        _warn(store)
        if len(stores) > 1:
            print(("\n" if i else "") + f"{store.path}:")
        print(grants_table(store, everything=args.all))
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    from nbagent.gate.grants import GrantError, find, revoke

    holders = []
    for found in _open_all(args.path):
        try:
            find(found, args.grant)
            holders.append(found.path)
        except GrantError:
            continue
    if len(holders) != 1:
        where = "no log under " + str(args.path or ".") if not holders else f"{len(holders)} logs"
        print(f"nbagent: revoke: grant {args.grant!r} is in {where}; `nbagent grants` lists them", file=sys.stderr)
        return 2
    store = Store(holders[0])
    try:
        print(revoke(store, args.grant, by="nbagent revoke (CLI)", reason=args.reason))
    except GrantError as exc:
        print(f"nbagent: revoke: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """One verdict line per store on stdout (details and warnings on stderr); exit 1 if any chain is unsound.

    A store that cannot be opened (newer format, not a store) gets its one-line error and does not stop the
    others from being checked; it makes the exit code 2 unless a chain is unsound.
    """
    code = 0
    for path in locate(args.path):
        try:
            store = Store(path, readonly=True)
        except StoreError as exc:
            print(f"nbagent: error: {exc}", file=sys.stderr)  # as for every command: one line, names the store
            code = code or 2
            continue
        try:
            report = verify_store(store)
        except StoreError as exc:
            print(f"nbagent: error: {exc}", file=sys.stderr)
            code = code or 2
            continue
        for w in report.warnings:
            print(f"warning: {w}", file=sys.stderr)
        if report.ok:
            warned = f"; {len(report.warnings)} warning(s)" if report.warnings else ""
            print(f"ok: {report.path}: {report.runs} run(s), {report.sessions} session(s), "
                  f"{report.events} event(s); every chain intact{warned}")
            continue
        code = 1
        first = report.problems[0]
        more = f" (+{len(report.problems) - 1} more problem(s))" if len(report.problems) > 1 else ""
        print(f"FAILED: {report.path}: {first}{more}")
        for extra in report.problems[1:]:
            print(f"  also: {extra}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
