"""Named experiments: parameters (pydantic), outcome (tables, checks, arrays, figures), registry."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict

__all__ = ["EpsList", "Params", "Table", "Check", "Outcome", "Experiment", "REGISTRY", "register",
           "get_experiment"]


class Params(BaseModel):
    """Base of every experiment's parameters: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _eps_list(v: list[float]) -> list[float]:
    if any(not 0 < e < 1 for e in v):
        raise ValueError("every ε must lie in (0, 1)")
    return sorted(v, reverse=True)


#: A list of initial scales ε ∈ (0, 1), validated and sorted from largest to smallest.
EpsList = Annotated[list[float], AfterValidator(_eps_list)]


@dataclass
class Table:
    """A table for the report: ``rows`` of cells under ``columns``."""

    name: str
    columns: list[str]
    rows: list[list[Any]]
    caption: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "caption": self.caption, "columns": list(self.columns),
                "rows": [[_cell(c) for c in r] for r in self.rows]}


@dataclass
class Check:
    """A prediction held against a measurement, with the relative tolerance it is judged by."""

    name: str
    predicted: float | None
    measured: float | None
    tolerance: float | None = None

    @property
    def relative_error(self) -> float | None:
        if self.predicted is None or self.measured is None or not math.isfinite(self.measured):
            return None
        return abs(self.measured - self.predicted) / max(abs(self.predicted), 1e-300)

    @property
    def passed(self) -> bool | None:
        err = self.relative_error
        if self.tolerance is None:
            return None
        return bool(err is not None and err <= self.tolerance)

    def to_dict(self) -> dict:
        return {"name": self.name, "predicted": _cell(self.predicted), "measured": _cell(self.measured),
                "tolerance": self.tolerance, "relative_error": _cell(self.relative_error), "passed": self.passed}


@dataclass
class Outcome:
    """What an experiment returns (and what it has accumulated so far if interrupted)."""

    metrics: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)  # name -> matplotlib Figure
    summary: list[str] = field(default_factory=list)


class Experiment:
    """A named, configurable experiment.

    Subclasses set ``name``, ``description`` (one line), ``reproduces`` (the
    paper's claim it checks), ``Params`` (a :class:`Params` subclass whose
    defaults are the full-size run) and ``tiny`` (overrides for a run of a few
    seconds, used by the test suite), and implement :meth:`run`.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    reproduces: ClassVar[str] = ""
    Params: ClassVar[type[Params]]
    tiny: ClassVar[dict[str, Any]] = {}

    def run(self, params: Params, ctx, out: Outcome) -> None:  # pragma: no cover - abstract
        """Fill ``out`` in place (so that an interruption keeps what is done)."""
        raise NotImplementedError


REGISTRY: dict[str, Experiment] = {}


def register(cls: type[Experiment]) -> type[Experiment]:
    """Class decorator adding an experiment to :data:`REGISTRY`."""
    REGISTRY[cls.name] = cls()
    return cls


def get_experiment(name: str) -> Experiment:
    from . import catalog  # noqa: F401  (registers the built-in experiments)

    if name not in REGISTRY:
        raise KeyError(f"unknown experiment {name!r}; available: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def _cell(v):
    if isinstance(v, (np.floating, np.integer)):
        v = v.item()
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
