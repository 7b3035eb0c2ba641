"""A package's names loaded from their modules on first use (PEP 562), so that importing a package imports none of
its modules: a module low in the layers can import a sibling without loading the rest, and `%load_ext` stays small."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """The package's `__getattr__`: `homes` maps each name to the module (under `package`) it comes from."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{home}"), name)

    return __getattr__
