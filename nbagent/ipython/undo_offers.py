"""Which saved records may offer Undo…: the kernel answers from this notebook's log, never the record itself.

A record is data in the notebook: any run id can be in it (a cell copied from another notebook, a repository cloned
without its logs, a run undone since from another kernel). So the lab extension draws a record's Undo… button only
for a run the kernel says undo can act on: in this notebook's log, which verifies, recorded by this user here (a log
that came with a cloned repository says what its author chose the files were), with file or cell changes, not
undone already. The log is verified once for all the records asked about together.

`%load_ext nbagent` opens the comm `nbagent.undo` to the front end (nothing is imported for it but `comm`, which
ipykernel has loaded). The lab extension sends `{"id": n, "ask": [run ids]}` on it; the kernel answers `{"id": n,
"offers": {run_id: offer}}`, each offer `{"undo": true, "line", "title"}` or `{"undo": false, "why"}` (one line: what
stands in the way). A front end without the extension closes the comm, and nothing more happens.

The page also says, on the same comm, which cells its notebook holds whenever they change (`{"cells": [ids]}`):
the kernel is told of no deletion otherwise. Once it has said, a cell of the runs undone that its last list does
not hold was deleted (`cells_gone`): undo records that cell as gone instead of claiming it removed or restored it.
The page sends its list as soon as its cells change (before any later click reaches the kernel), and the runs an
undo acts on have ended, so their cells were in the page's lists; a page that never said (no extension, headless)
has no cell taken for deleted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Container
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TARGET = "nbagent.undo"
MAX_ASK = 500  # run ids answered per message (a notebook holds far fewer records)
_open: list[Any] = []  # the comm of this kernel (kept referenced while open)
MAX_CELLS = 20_000  # cell ids taken from one message (a notebook holds far fewer)
_page: list[set[str]] = []  # the cell ids the page last said its notebook holds (none yet: not known)


class _Gone:
    """`cell_id in cells_gone()`: the page has said which cells the notebook holds, and this one is not among them."""

    def __init__(self, held: set[str] | None) -> None:
        self.held = held

    def __contains__(self, cell_id: object) -> bool:
        return self.held is not None and cell_id not in self.held


def cells_gone() -> _Gone:
    """The cells deleted in the notebook, as its page last said (nothing, before it said)."""
    return _Gone(set(_page[-1]) if _page else None)


def _page_cells(ids: list[Any]) -> None:
    _page[:] = [{i for i in ids[:MAX_CELLS] if isinstance(i, str) and 0 < len(i) <= 128}]


def announce(shell: Any) -> None:
    """Open the comm for this kernel's front end, once (a terminal or a headless kernel has no one to tell)."""
    if getattr(shell, "kernel", None) is None or os.environ.get("NBAGENT_HEADLESS") == "1" or _open:
        return
    try:
        from comm import create_comm

        comm = create_comm(target_name=TARGET, data={"version": 1})
    except Exception as exc:  # no comm support here: no record offers Undo… (the hint's line still says how)
        log.debug("no undo comm: %s", exc)
        return
    _open.append(comm)
    comm.on_msg(lambda msg: _answer(comm, msg))
    comm.on_close(lambda _msg: _open.remove(comm) if comm in _open else None)


def _answer(comm: Any, msg: dict[str, Any]) -> None:
    data = (msg.get("content") or {}).get("data") or {}
    if isinstance(data.get("cells"), list):
        _page_cells(data["cells"])
    ask = data.get("ask")
    if not isinstance(ask, list):
        return
    run_ids = [r for r in ask if isinstance(r, str) and r.isalnum() and len(r) <= 64][:MAX_ASK]
    from nbagent.shadowing import ShadowedLibrary, check

    try:  # the log is read with nbagent's dependencies: none may be a module of the working folder (shadowing.py)
        check("nbagent")
    except ShadowedLibrary as exc:
        comm.send({"id": data.get("id"), "offers": {r: {"undo": False, "why": str(exc)} for r in run_ids}})
        return
    from nbagent.ipython.entry import current

    host = current()
    try:
        found = offers(host.notebook, run_ids, host.folder, kept=host.cells_yours(), gone=cells_gone())
    except Exception as exc:  # an answer always comes: a record whose run cannot be checked offers no Undo…
        from nbagent.secrets.redactor import Redactor

        why = Redactor().text(f"nbagent could not read this notebook's log ({type(exc).__name__}: {exc})")
        found = {r: {"undo": False, "why": why} for r in run_ids}
    comm.send({"id": data.get("id"), "offers": found})


def offers(notebook: Path, run_ids: list[str], folder: Path, kept: Collection[str] = (),
           gone: Container[str] = ()) -> dict[str, dict[str, Any]]:
    """What Undo… can do for each run, read from `notebook`'s own log (never written: a notebook without a log
    gets none), checked against `folder` as the Undo panel checks it (`undo_offer`); `kept`: the agent's cells the
    person edited since, `gone`: those deleted since (a run whose only changes are those has nothing to undo)."""
    from nbagent.store import StoreError, store_path_for

    path = store_path_for(notebook)
    if not run_ids:
        return {}
    if not (path / "meta.json").exists():
        why = f"not in this notebook's log: {notebook.name} has none ({path.name}); nothing here to undo"
        return {r: {"undo": False, "why": why} for r in run_ids}
    from nbagent.store import Store

    try:
        store = Store(path, readonly=True)
    except StoreError as exc:
        return {r: {"undo": False, "why": str(exc)} for r in run_ids}
    from nbagent.undo.files import UndoError, log_checked

    try:
        with log_checked(store):  # once for every record asked about
            mine = store.anchors.heads()
            return {r: _offer(store, r, folder, mine, kept, gone) for r in dict.fromkeys(run_ids)}
    except UndoError as exc:  # the log fails verification: undo acts on none of its runs
        from nbagent.secrets.redactor import Redactor

        return {r: {"undo": False, "why": Redactor().text(str(exc))} for r in run_ids}
    finally:
        store.close()


def _offer(store: Any, run_id: str, folder: Path, mine: dict[str, Any], kept: Collection[str] = (),
           gone: Container[str] = ()) -> dict[str, Any]:
    from nbagent.secrets.redactor import Redactor
    from nbagent.store import RunNotFound, StoreError
    from nbagent.ui.undo_view import undo_offer
    from nbagent.undo.files import UndoError

    try:
        offer = undo_offer(store, run_id, folder=folder, kept=kept, gone=gone)
    except RunNotFound:
        return {"undo": False, "why": f"not in this notebook's log ({store.path.name}): a record of another "
                                      "notebook's run, or of a log since replaced; nothing here to undo"}
    except (UndoError, StoreError, OSError) as exc:
        return {"undo": False, "why": Redactor().text(str(exc))}
    if any(r not in mine for r in offer["runs"]):
        # a log that came with the notebook (a clone, another machine): sound, but what it says the files were is
        # its author's to say; this user's anchors (store/anchor.py) saw every run they made here
        why = store.anchors.problem or "a log that came with the notebook, or made on another machine"
        return {"undo": False, "why": f"run {run_id} was not recorded by you here (no anchor of yours saw it: {why});"
                                      f" a record offers Undo… only for your own runs. %agent undo {run_id} shows "
                                      "what it would restore, and asks"}
    if offer["state"] == "undone":
        return {"undo": False, "why": offer["why_not"]}
    files = sum(1 for c in offer["changes"] if c.get("kind") != "cell")
    cells = sum(1 for c in offer["changes"] if c.get("kind") == "cell" and not c.get("kept"))
    parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in ((files, "file"), (cells, "cell")) if n]
    line = f"%agent undo {run_id} undoes this run's changes ({', '.join(parts)})"
    title = f"insert and run %agent undo {run_id} below: it shows what will change and asks first"
    if offer["state"] == "conflicts":
        title += f"; {offer['why_not']}"
    return {"undo": True, "line": line, "title": title, "conflicts": len(offer["conflicts"])}


__all__ = ["TARGET", "announce", "cells_gone", "offers"]
