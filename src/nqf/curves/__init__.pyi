"""The names of ``nqf.curves``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._compare import (
    FLAT_THRESHOLD as FLAT_THRESHOLD,
    StaircaseComparison as StaircaseComparison,
    compare_staircase as compare_staircase,
    level_read_times as level_read_times,
    regime_exit as regime_exit,
)
from ._crowded import (
    CrowdedComparison as CrowdedComparison,
    CrowdedPrediction as CrowdedPrediction,
    compare_crowded as compare_crowded,
    crowded_prediction as crowded_prediction,
    drop_widths as drop_widths,
    mode_sum as mode_sum,
)
from ._exponents import (
    ExponentPrediction as ExponentPrediction,
    predict_exponent as predict_exponent,
    predicted_curve as predicted_curve,
)
from ._powerlaw import (
    PowerLawFit as PowerLawFit,
    fit_power_law as fit_power_law,
)
from ._real_clock import (
    TRUSTED_TIME_ERROR as TRUSTED_TIME_ERROR,
    RealClock as RealClock,
    level_time_bounds as level_time_bounds,
    measured_floors as measured_floors,
    real_clock as real_clock,
)
from ._schedule import (
    stable_learning_rate as stable_learning_rate,
    step_count as step_count,
)
from ._step_clock import (
    StepClock as StepClock,
    step_clock as step_clock,
)
from ._steps import (
    Steps as Steps,
    detect_steps as detect_steps,
)
from ._training_clock import (
    TrainingClock as TrainingClock,
    training_clock as training_clock,
)
from ._validity import (
    ValidityReport as ValidityReport,
    ValiditySweep as ValiditySweep,
    remainder_ratio as remainder_ratio,
    validity_report as validity_report,
    validity_sweep as validity_sweep,
)
