"""Import paths that moved when the loose modules went into packages: each old path still imports, for one
release, as the module it became, with a DeprecationWarning naming the new path (docs/development.md, "The tree")."""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType


def moved(old: str, new: str) -> ModuleType:
    """Make the module being imported as `old` the module `new` itself (so its attributes, patched or not, are one),
    and warn where the old path was imported."""
    warnings.warn(f"{old} moved to {new}; import it from there ({old} goes in the next release)",
                  DeprecationWarning, stacklevel=3)
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module
