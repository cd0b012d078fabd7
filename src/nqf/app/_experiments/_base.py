"""Named experiments: parameters (pydantic), outcome (tables, checks, arrays, figures), registry."""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, TypeGuard, get_args

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator

from ...errors import InvalidParameterError
from ...results import Result, compact_repr, to_jsonable
from .._report import CheckModel, TableModel

__all__ = ["EpsList", "Params", "Table", "Check", "Outcome", "Experiment"]


class Params(BaseModel):
    """Base of every experiment's parameters: unknown keys are errors, and so are NaN/inf floats and booleans
    given for numbers (``true`` is not 1), in any field of any experiment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value, info):
        field = cls.model_fields.get(info.field_name) if info.field_name else None
        if field is not None and _has_bool(value) and not _admits_bool(field.annotation):
            raise InvalidParameterError("expected a number, found a boolean (true/false)")
        if _has_subnormal(value):
            raise InvalidParameterError(
                f"a subnormal number (nonzero, below {sys.float_info.min:.3g}) has too few "
                "significant digits to compute with"
            )
        return value


def _admits_bool(annotation) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_admits_bool(a) for a in get_args(annotation))


def _has_subnormal(value) -> bool:
    if isinstance(value, float):
        return value != 0.0 and abs(value) < sys.float_info.min
    if isinstance(value, (list, tuple)):
        return any(_has_subnormal(v) for v in value)
    return False


def _has_bool(value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_bool(v) for v in value)
    return False


def _eps_list(v: list[float]) -> list[float]:
    if any(not 0 < e < 1 for e in v):
        raise InvalidParameterError("every ε must lie in (0, 1)")
    return sorted(v, reverse=True)


#: A list of initial scales ε ∈ (0, 1), validated and sorted from largest to smallest.
EpsList = Annotated[list[float], AfterValidator(_eps_list)]


@dataclass(frozen=True)
class Table(Result):
    """A table for the report: ``rows`` of cells under ``columns``."""

    name: str
    columns: list[str]
    rows: list[list[Any]]
    caption: str = ""

    def __repr__(self) -> str:
        return f"Table({self.name!r}, columns={len(self.columns)}, rows={len(self.rows)})"

    def to_dict(self) -> dict:
        """The table's entry of ``results.json``, built through the schema's :class:`~nqf.app._report.TableModel`."""
        return TableModel(
            name=self.name, caption=self.caption, columns=list(self.columns), rows=to_jsonable(self.rows, "rows")
        ).model_dump()


@dataclass(frozen=True)
class Check(Result):
    """A prediction of the library held against an independent measurement or reference.

    Attributes
    ----------
    name : str
        The quantity (and where it is taken, e.g. ``"t_1 at ε = 1e-8"``).
    predicted : float or None
        What the library predicts.
    measured : float or None
        The independent value: the real network, an independent integration or a closed form.
    tolerance : float or None
        Allowed ``|measured − predicted| / |predicted|`` (``kind="relative"``) or
        ``|measured − predicted|`` (``kind="absolute"``); ``None``: reported, not judged.
    reference : str
        What ``measured`` is (independent of the library's prediction).
    tolerance_origin : str
        Where the tolerance comes from (numerics, or the theory's error order).
    kind : {"relative", "absolute"}
    reason : str
        Why the check is not judged, or why it failed without a comparison.
    inputs_finished : bool
        False when a trajectory the measurement rests on did not finish (diverged or
        stopped): the check then fails, with ``reason`` saying why.

    A check with a tolerance passes only when the measurement exists, is finite and
    lies within the tolerance; a missing (``None``) or non-finite measurement fails.
    """

    name: str
    predicted: float | None
    measured: float | None
    tolerance: float | None = None
    reference: str = ""
    tolerance_origin: str = ""
    kind: Literal["relative", "absolute"] = "relative"
    reason: str = ""
    inputs_finished: bool = True

    @staticmethod
    def _finite(v: float | None) -> TypeGuard[float]:
        return v is not None and math.isfinite(float(v))

    @property
    def relative_error(self) -> float | None:
        """``|measured − predicted| / |predicted|`` of a relative check; ``None`` for an absolute one (its
        reference is ~0 or its scale is absolute: a ratio to it is not a number to print) or a missing value."""
        if self.kind == "absolute" or not (self._finite(self.predicted) and self._finite(self.measured)):
            return None
        if float(self.predicted) == 0:
            return None
        return abs(float(self.measured) - float(self.predicted)) / abs(float(self.predicted))

    @property
    def error(self) -> float | None:
        """The error judged against ``tolerance`` (relative or absolute, see ``kind``)."""
        if self.kind == "relative":
            return self.relative_error
        if not (self._finite(self.predicted) and self._finite(self.measured)):
            return None
        return abs(float(self.measured) - float(self.predicted))

    @property
    def passed(self) -> bool | None:
        if not self.inputs_finished:
            return False
        if self.tolerance is None:
            return None
        err = self.error
        return bool(err is not None and err <= self.tolerance)

    def unfinished(self, reason: str) -> Check:
        """This check failed because an input it rests on did not finish, with ``reason``."""
        return dataclasses.replace(self, inputs_finished=False, reason=reason)

    def __repr__(self) -> str:
        return compact_repr(self, ("name", "predicted", "measured", "tolerance", "kind", "passed"))

    def to_dict(self) -> dict:
        """The check's entry of ``results.json``, built through the schema's :class:`~nqf.app._report.CheckModel`."""
        return CheckModel(
            **to_jsonable(
                {
                    "name": self.name,
                    "predicted": self.predicted,
                    "measured": self.measured,
                    "tolerance": self.tolerance,
                    "relative_error": self.relative_error,
                    "passed": self.passed,
                    "kind": self.kind,
                    "error": self.error,
                    "reference": self.reference,
                    "tolerance_origin": self.tolerance_origin,
                    "reason": self.reason,
                },
                self.name,
            )
        ).model_dump()


@dataclass(frozen=True)
class Outcome(Result):
    """What an experiment returns (and what it has accumulated so far if interrupted).

    The fields are fixed; :meth:`Experiment.run` fills the containers in place, so that an
    interruption keeps what is done.  :meth:`to_dict` is what ``results.json`` records of it.
    """

    metrics: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)  # name -> matplotlib Figure
    summary: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        passed = sum(c.passed is True for c in self.checks)
        return (
            f"Outcome(metrics={len(self.metrics)}, checks={len(self.checks)} ({passed} passed), "
            f"tables={len(self.tables)}, arrays={sorted(self.arrays)[:4]}, figures={len(self.figures)})"
        )

    def to_dict(self) -> dict:
        """``metrics``, ``checks``, ``tables`` and ``summary`` as ``results.json`` records them, with the names of
        the figures and the shapes of the arrays (written to their own files)."""
        return {
            "metrics": {str(k): to_jsonable(v, f"metrics[{k!r}]") for k, v in self.metrics.items()},
            "checks": [c.to_dict() for c in self.checks],
            "tables": [t.to_dict() for t in self.tables],
            "summary": [str(s) for s in self.summary],
            "figures": sorted(self.figures),
            "arrays": {k: list(np.shape(v)) for k, v in self.arrays.items()},
        }


class Experiment:
    """A named, configurable experiment.

    Subclasses set ``name``, ``description`` (one line; a built-in experiment reads
    it from its entry of :data:`~nqf.app._experiments.CATALOG`), ``reproduces`` (the
    paper's claim it checks), ``Params`` (a :class:`Params` subclass whose
    defaults are the full-size run) and ``tiny`` (overrides for a run of a few
    seconds, used by the test suite), ``checks`` (one line per kind of check:
    quantity, independent reference, tolerance and its origin), and implement
    :meth:`run` and :meth:`plot`.

    The phases of a run: problem → prediction (a :class:`nqf.Staircase` where there is
    one) → runs (checkpointed) → measurement (through :mod:`nqf.curves` only) →
    checks (pure data in, :class:`Check` out) → figures.  :meth:`run` fills
    ``out.arrays`` with everything the figures show; :meth:`plot` draws them from
    those arrays alone, so that ``nqf report RUN_DIR`` redraws every figure from
    ``arrays.npz``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    reproduces: ClassVar[str] = ""
    Params: ClassVar[type[Params]]
    tiny: ClassVar[dict[str, Any]] = {}
    #: What the experiment checks: one line per check (quantity, independent reference, tolerance and its origin).
    checks: ClassVar[tuple[str, ...]] = ()

    def run(self, params: Params, ctx, out: Outcome) -> None:  # pragma: no cover - abstract
        """Fill ``out`` in place (so that an interruption keeps what is done)."""
        raise NotImplementedError

    def memory_estimate(self, params: Params) -> tuple[float, dict[str, int], str]:
        """A lower bound of the bytes a run allocates, from its size parameters, checked by the runner before
        anything is allocated (:func:`nqf.app.run_experiment`).

        Returns ``(bytes, {parameter: value}, what the bytes are)``.  The default reads the size parameters
        by their conventional names: ``n_samples`` (N), ``dim``/``in_features`` (D), ``tokens`` (T), ``width``
        (m), ``n_points``, each 1 when absent, and counts the float64 inputs ``N·T·D``, one value per sample of
        each of the ``m`` units ``N·m``, the first layer's weights ``m·D`` and ``n_points`` values.  An experiment
        whose sizes have other names overrides it.
        """
        return size_estimate(params, {})

    def plot(self, arrays: dict[str, np.ndarray], params: Params) -> dict[str, Any]:
        """The figures (name → matplotlib Figure), drawn from the saved arrays and the parameters alone.

        Called after :meth:`run` by the runner and by ``nqf report`` on a run directory's
        ``arrays.npz``; an experiment that draws its figures inside :meth:`run` returns ``{}``.
        Raises ``KeyError`` when an array it needs is missing (an interrupted run).
        """
        return {}


#: The size parameters :meth:`Experiment.memory_estimate` reads by name, and the size each stands for.
SIZE_FIELDS = {"n_samples": "N", "dim": "D", "in_features": "D", "tokens": "T", "width": "m", "n_points": "n"}


def size_estimate(params: Params, derived: dict[str, int]) -> tuple[float, dict[str, int], str]:
    """The default :meth:`Experiment.memory_estimate` of ``params``, with sizes in ``derived`` (``{"m": …}``)
    taking the place of those read from the parameters."""
    sizes = {"N": 1, "D": 1, "T": 1, "m": 1, "n": 0}
    named = {}
    for field_name, size in SIZE_FIELDS.items():
        value = getattr(params, field_name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            sizes[size], named[field_name] = value, value
    sizes.update(derived)
    N, D, T, m, n = (sizes[k] for k in ("N", "D", "T", "m", "n"))
    nbytes = 8.0 * (N * T * D + N * m + m * D + n)
    return nbytes, named, "float64 inputs N·T·D, hidden activations N·m, weights m·D"
