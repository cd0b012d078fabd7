"""The names of ``nqf.reductions``: what type checkers see and what is loaded on first use (lazy_loader)."""

from . import (
    dormant as dormant,
    lv as lv,
    saddles as saddles,
    svd_modes as svd_modes,
)
from ._predict import (
    LV_MAX_ENTRIES as LV_MAX_ENTRIES,
    predict as predict,
)
from ._staircase import (
    PredictionCost as PredictionCost,
    Staircase as Staircase,
)
from ._timing import (
    crossing_time as crossing_time,
    crossing_times as crossing_times,
    logistic_switch_time as logistic_switch_time,
    midpoint_levels as midpoint_levels,
)
