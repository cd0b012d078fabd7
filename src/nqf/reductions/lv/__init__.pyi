"""The names of ``nqf.reductions.lv``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._limit import (
    LimitEvent as LimitEvent,
    LimitResult as LimitResult,
    limit as limit,
)
from ._reduce import (
    reduce as reduce,
)
from ._system import (
    LotkaVolterra as LotkaVolterra,
    LVSolution as LVSolution,
    Plateaus as Plateaus,
)
