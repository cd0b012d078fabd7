"""The catalogue of built-in experiments: importing it registers each one; look-ups go through it.

:mod:`nqf.experiments.base` holds :data:`~nqf.experiments.base.REGISTRY` and the
``register`` decorator and imports no experiment, so the import graph has no
cycle: experiments import ``base``, this module imports the experiments.
"""

from __future__ import annotations

from . import demo, interacting, lv_staircase, modules, power_law, real_data, saddles, validity  # noqa: F401
from .base import REGISTRY, Experiment

__all__ = ["get_experiment", "all_experiments"]


def get_experiment(name: str) -> Experiment:
    """The registered experiment called ``name``; ``KeyError`` listing the available names otherwise."""
    if name not in REGISTRY:
        raise KeyError(f"unknown experiment {name!r}; available: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def all_experiments() -> dict[str, Experiment]:
    """Every registered experiment, sorted by name."""
    return dict(sorted(REGISTRY.items()))
