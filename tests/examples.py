"""How many examples a property test runs: its full count, written on it, under the `ci` hypothesis profile (the
default: what README's test command and CI run), and a tenth of it (at least 5) under `quick`, the fast tier's
(`--hypothesis-profile quick`). The profiles are registered in tests/conftest.py."""

from __future__ import annotations

from hypothesis import settings

QUICK_SHARE = 10


def examples(full: int) -> int:
    """`full` in CI; `full // 10` (at least 5, at most `full`) under the quick profile."""
    if settings._current_profile == "quick":  # type: ignore[attr-defined]  # the name given to load_profile
        return min(full, max(5, full // QUICK_SHARE))
    return full
