"""Risk follows effect: a write that Python or Jupyter will later execute is WRITE_HIGH_RISK, whatever the tool.

A tool declares its own risk (`create_file` is WRITE_LOW_RISK: a new file changes nothing that exists). But a
new `pandas.py` in the notebook's folder is code: the kernel's working folder comes first on `sys.path`, so the
next `import pandas` runs whatever the model wrote. The same holds for packages (`__init__.py`), compiled
modules, `.pth` files (run at interpreter start), `sitecustomize`, IPython startup scripts and profiles, and
Jupyter's configuration (`jupyter_*_config.py`, `kernel.json`, ...). `code_effect(path)` names the effect of
writing such a path (None for plain data), and `effective_risk` raises a writing call to WRITE_HIGH_RISK
when any of its path arguments has one. The rule looks at names only, never at the folder's contents, so it
cannot be raced: the same arguments always have the same risk.
"""

from __future__ import annotations

import os
import posixpath
import re
import unicodedata
from collections.abc import Iterable

from .levels import Risk

# modules Python imports (source, compiled, extension), scripts IPython runs, and the startup hook Python runs
_MODULE_SUFFIXES = (".py", ".pyw", ".pyc", ".pyo", ".pyd", ".so", ".pyz")
_CONFIG_NAMES = re.compile(
    r"^(ipython(_kernel)?_config\.(py|json)|jupyter(_[a-z]+)?_config\.(py|json)|kernel\.json|custom\.js|"
    r"page_config\.json|overrides\.json|\.?pythonrc(\.py)?|\.?pythonstartup)$"
)
_CONFIG_DIRS = {".ipython", ".jupyter", "site-packages", "dist-packages"}
_CONFIG_PATHS = (".config/jupyter/", ".config/ipython/", "share/jupyter/", "etc/jupyter/", "etc/ipython/")


def _normal(path: str) -> str:
    """The name as the file system may treat it: NFKC, case-folded, with `\\` as a separator."""
    return unicodedata.normalize("NFKC", path).replace("\\", "/").casefold()


def code_effect(path: str) -> str | None:
    """Why writing `path` plants code Python or Jupyter would run, or None when it does not."""
    if not isinstance(path, str) or not path.strip():
        return None
    norm = posixpath.normpath(_normal(path)).rstrip("/. ")
    name = posixpath.basename(norm)
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    startup = os.environ.get("PYTHONSTARTUP")
    if startup and posixpath.basename(_normal(startup)) == name:
        return f"{name} is this kernel's PYTHONSTARTUP file: Python runs it at start"
    if name.endswith(".pth"):
        return f"{name} is a .pth file: Python runs its import lines when it starts"
    if name.endswith(_MODULE_SUFFIXES):
        stem = name.split(".")[0]
        if stem == "__init__" and len(parts) > 1:
            return f"{path} makes {parts[-2]!r} a Python package: `import {parts[-2]}` would run it"
        if stem in ("sitecustomize", "usercustomize"):
            return f"{name} is run by Python at every start"
        return f"{name} is a Python module: `import {stem}` in the kernel would run it"
    if name.endswith(".ipy"):
        return f"{name} is an IPython script: IPython runs it (a startup folder, `%run`)"
    if _CONFIG_NAMES.match(name):
        return f"{name} is IPython/Jupyter configuration: Jupyter loads and runs it"
    if name in ("mcp.json", ".mcp.json"):
        return f"{name} configures MCP servers: the next run starts the commands it names (docs/mcp.md)"
    if any(p in _CONFIG_DIRS or p.startswith("profile_") for p in parts[:-1]) or any(
            c in "/" + norm for c in _CONFIG_PATHS):
        return f"{path} is inside IPython/Jupyter's configuration or Python's packages: they load it"
    return None


def first_code_effect(paths: Iterable[str]) -> str | None:
    for p in paths:
        why = code_effect(p)
        if why is not None:
            return why
    return None


def effective_risk(declared: Risk, paths: Iterable[str]) -> tuple[Risk, str | None]:
    """The call's risk: the tool's own, raised to WRITE_HIGH_RISK when a tool that writes names a code path.

    A READ_ONLY tool changes nothing, so reading `pandas.py` stays READ_ONLY.
    """
    if declared == Risk.READ_ONLY:
        return declared, None
    why = first_code_effect(paths)
    if why is not None and declared != Risk.WRITE_HIGH_RISK:
        return Risk.WRITE_HIGH_RISK, why
    return declared, why
