"""``nqf.analyze``: your own model, your own data (docs/analyze.md).

:func:`analyze` predicts how a real network learns on real data (plateau levels and
drop times: Lotka–Volterra for commuting data, the greedy saddle sequence
otherwise), simulates its NQF, trains the real module from the same small
initial state ``M(0) = εI``, compares per plateau, and returns an
:class:`Analysis` with assumption checks and a verdict.

Public helpers: :func:`initial_weights`, :func:`stable_learning_rate`,
:func:`step_count`, :func:`predict`, :func:`find_unit_layers`,
:func:`choose_units`, :func:`build_model`; curve comparison lives in
:mod:`nqf.analysis.compare`.
"""

from ..analysis.schedule import initial_weights, stable_learning_rate, step_count
from .discover import FoundUnits, choose_units, find_unit_layers
from .models import build_model
from .pipeline import analyze, predict, prepare_analysis
from .result import Analysis, CheckRow, Prediction

__all__ = ["analyze", "Analysis", "Prediction", "CheckRow", "predict", "prepare_analysis", "initial_weights",
           "stable_learning_rate", "step_count", "find_unit_layers", "choose_units", "FoundUnits", "build_model"]
