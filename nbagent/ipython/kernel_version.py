"""Whether this kernel can take a click while a cell waits: ipykernel 7.4 or later (docs/jupyter.md)."""

from __future__ import annotations

__all__ = ["MIN_IPYKERNEL", "ipykernel_problem"]

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
