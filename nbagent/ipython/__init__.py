"""IPython glue: `%load_ext nbagent` registers `%%agent` and `%agent` (see host.py and transform.py).

Loading is cheap: no litellm or widget import happens in the loading cell, nor later: when a real provider's
model is configured, the kernel's model process (litellm in a process of its own) starts once the kernel is idle
(loading.py, nbagent/models/process.py); nothing global is patched.
"""

from __future__ import annotations

from typing import Any

from nbagent.ipython.kernel_version import MIN_IPYKERNEL, ipykernel_problem

__all__ = ["MIN_IPYKERNEL", "ipykernel_problem", "load_ipython_extension", "unload_ipython_extension"]

def load_ipython_extension(ip: Any) -> None:
    from nbagent.ipython.magics import register

    register(ip)


def unload_ipython_extension(ip: Any) -> None:
    from nbagent.ipython.magics import unregister

    unregister(ip)
