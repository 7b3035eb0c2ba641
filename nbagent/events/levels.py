"""Risk of a tool call and autonomy of a run: the two axes of the approval table (docs/architecture.md,
"The approval table")."""

from __future__ import annotations

from enum import StrEnum


class Risk(StrEnum):
    READ_ONLY = "READ_ONLY"
    WRITE_LOW_RISK = "WRITE_LOW_RISK"
    WRITE_HIGH_RISK = "WRITE_HIGH_RISK"

    @property
    def rank(self) -> int:
        return _RISK_ORDER.index(self)


_RISK_ORDER = [Risk.READ_ONLY, Risk.WRITE_LOW_RISK, Risk.WRITE_HIGH_RISK]


class Autonomy(StrEnum):
    L0 = "L0"  # read-only: everything is proposed
    L1 = "L1"  # recommendations (default): reads run, writes are proposed
    L2 = "L2"  # assisted: low-risk writes run too
    L3 = "L3"  # supervised: everything runs
