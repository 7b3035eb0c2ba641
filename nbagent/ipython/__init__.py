"""IPython glue: `%load_ext nbagent` registers `%%agent` and `%agent` (see host.py and transform.py).

Loading is cheap: no litellm or widget import happens in the loading cell, nor later: when a real provider's
model is configured, the kernel's model process (litellm in a process of its own) starts once the kernel is idle
(loading.py, nbagent/models/process.py); nothing global is patched.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MIN_IPYKERNEL", "ipykernel_problem", "load_ipython_extension", "unload_ipython_extension"]

MIN_IPYKERNEL = (7, 4)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def ipykernel_problem() -> str | None:
    """Why approvals cannot work in this kernel, or None."""
    import sys

    if "ipykernel" not in sys.modules:
        return None  # plain IPython (a terminal): headless policies still work
    import ipykernel

    if _version(ipykernel.__version__) < MIN_IPYKERNEL:
        return (
            f"nbagent needs ipykernel >= 7.4 for inline approvals (this kernel has {ipykernel.__version__}): older "
            "kernels cannot handle a button click while a cell is waiting, so an approval would hang. Install it "
            "with `pip install -U 'ipykernel>=7.4'` and restart the kernel. Meanwhile --approve all|none|low works."
        )
    return None


def load_ipython_extension(ip: Any) -> None:
    from nbagent.ipython.magics import register

    register(ip)


def unload_ipython_extension(ip: Any) -> None:
    from nbagent.ipython.magics import unregister

    unregister(ip)
