"""Registering the magics and the input transformer with an IPython shell."""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from nbagent.ipython.kernel_version import ipykernel_problem
from nbagent.ipython.transform import transform


@magics_class
class AgentMagics(Magics):
    """`%%agent` and `%agent`. In a cell they run as top-level awaits (the input transformer rewrites them);
    called any other way (`get_ipython().run_cell_magic(...)`), they say how to use them."""

    # IPython annotates what cell_magic("agent") returns as a union over a TypeVar it never binds (so: Never)
    @cell_magic("agent")  # type: ignore[arg-type]
    def agent_cell(self, line: str, cell: str) -> None:
        from nbagent.ipython.options import cell_parser

        if "-h" in line.split() or "--help" in line.split():
            print(cell_parser().format_help())
            return
        print("%%agent runs as a notebook cell (it awaits decisions); put it at the top of a cell.", file=sys.stderr)

    @line_magic("agent")  # type: ignore[arg-type]  # (as cell_magic above)
    def agent_line(self, line: str) -> Any:
        from nbagent.ipython.options import line_parser

        if not line.strip() or "-h" in line.split() or "--help" in line.split():
            print(line_parser().format_help())
            return None
        # not rewritten into an await: the same cell loaded nbagent (direct.py), or a script called the magic
        from nbagent.ipython.direct import run_line_now

        return run_line_now(line)


def register(ip: Any) -> None:
    from nbagent.ipython.entry import FIRST_RUN_MODULES
    from nbagent.ipython.host import install

    problem = ipykernel_problem()
    if problem:
        print(problem, file=sys.stderr)
    ip.register_magics(AgentMagics)
    if transform not in ip.input_transformers_cleanup:
        ip.input_transformers_cleanup.insert(0, transform)
    host = install(ip)
    from nbagent.ipython import loading, undo_offers

    undo_offers.announce(ip)  # the lab extension asks which saved records may offer Undo… (undo_offers.py)

    if loading.use_process():  # this kernel's model calls, however made, go to its model process
        from nbagent.models import process as modelproc

        modelproc.want(loading.MODULES)
    # a real model configured, or a provider's key (now or set by a later cell): load the library once the kernel
    # is idle; neither, nothing starts. What of the configuration nbagent does not read (`Agent.model`) is said here,
    # in this cell (a note at an idle moment would be lost), without resolving the settings (that imports more)
    from nbagent.ipython.options import old_section_note

    note = old_section_note(getattr(ip, "config", {}))
    if note and not host.noted_old_section:
        host.noted_old_section = True
        print(note, file=sys.stderr)
    loading.start_when_idle(ip, ahead=FIRST_RUN_MODULES, when=host.model_expected)


def unregister(ip: Any) -> None:
    if transform in ip.input_transformers_cleanup:
        ip.input_transformers_cleanup.remove(transform)
