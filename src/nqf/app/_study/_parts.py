"""The typed parts of an :class:`~nqf.app.Analysis`: its :class:`Verdict`, :class:`Validity`, :class:`Curves`,
:class:`Timings` and :class:`Memory` (frozen records, each with ``to_dict()`` giving what ``results.json`` holds;
each also reads as the mapping it replaced, ``part["name"]`` / ``part.get(name)``)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ...errors import UnknownNameError
from ...results import Result, to_jsonable as _clean

__all__ = ["Verdict", "Validity", "Curves", "Timings", "Memory"]


@dataclass(frozen=True)
class Verdict(Result):
    """How far to trust the prediction, in words and numbers (:attr:`Analysis.verdict`).

    ``trust`` is ``"high"``, ``"moderate"`` or ``"low"``; ``text`` the verdict's sentences; ``max_time_error`` and
    ``max_level_error`` the largest relative errors of the drops the real network reaches inside the quadratic
    regime (``drops_compared`` of them); ``flat_plateaus`` / ``not_flat_plateaus`` the plateaus (by index) whose
    loss does / does not move by more than the flatness threshold; ``leading_order_scale`` ``1/ln(1/ε)``, the
    relative size of the leading order's correction; ``learned_fraction`` the share of the initial loss the
    predicted drops remove; ``crowded`` the crowded drops' power law, prediction and measurements (None when the
    drops do not crowd).
    """

    trust: str
    text: tuple[str, ...]
    max_time_error: float
    max_level_error: float
    drops_compared: int
    flat_plateaus: tuple[int, ...] = ()
    not_flat_plateaus: tuple[int, ...] = ()
    leading_order_scale: float = math.nan
    learned_fraction: float = math.nan
    crowded: dict | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Verdict(trust={self.trust!r}, drops_compared={self.drops_compared}, sentences={len(self.text)})"

    def to_dict(self) -> dict:
        return _clean(
            {
                "trust": self.trust,
                "text": list(self.text),
                "max_time_error": self.max_time_error,
                "max_level_error": self.max_level_error,
                "drops_compared": self.drops_compared,
                "flat_plateaus": list(self.flat_plateaus),
                "not_flat_plateaus": list(self.not_flat_plateaus),
                "leading_order_scale": self.leading_order_scale,
                "learned_fraction": self.learned_fraction,
                "crowded": self.crowded,
            }
        )


@dataclass(frozen=True)
class Timings(Result):
    """Wall seconds of each part of an analysis (:attr:`Analysis.timings`), in the order they ran: ``setup``,
    ``prediction``, ``nqf_simulation``, ``real_training``, ``seeded_nqf``, …, each estimate before its part as
    ``estimate_<part>``, and the seconds per step ``nqf_step``, ``real_step``.  Read one with ``timings["setup"]``
    or :meth:`get`; iterating gives the parts' names, :meth:`items` the pairs."""

    seconds: tuple[tuple[str, float], ...] = ()

    @classmethod
    def of(cls, seconds: dict[str, float]) -> Timings:
        """The record of ``{part: seconds}``, rounded (to the ms; per-step parts ``*_step`` to 0.1 µs)."""
        return cls(tuple((k, round(float(v), 7 if k.endswith("_step") else 3)) for k, v in seconds.items()))

    def __getitem__(self, name: str) -> float:
        for k, v in self.seconds:
            if k == name:
                return v
        parts = ", ".join(repr(k) for k, _ in self.seconds)
        raise UnknownNameError(f"`name`: this analysis has no part {name!r}; its parts are {parts}")

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self.seconds)

    def __len__(self) -> int:
        return len(self.seconds)

    def __contains__(self, name: object) -> bool:
        return any(k == name for k, _ in self.seconds)

    def get(self, name: str, default: float | None = None) -> float | None:
        return self[name] if name in self else default

    def items(self) -> tuple[tuple[str, float], ...]:
        return self.seconds

    def __repr__(self) -> str:
        return f"Timings({len(self.seconds)} parts)"

    def to_dict(self) -> dict:
        return dict(self.seconds)


@dataclass(frozen=True)
class Memory(Result):
    """The process's peak resident memory in MiB (:attr:`Analysis.memory`): ``estimate_peak_mib`` estimated before
    the long runs (printed with the estimate) and ``peak_mib`` measured at the end (None where the platform does
    not tell)."""

    estimate_peak_mib: float | None = None
    peak_mib: float | None = None

    def to_dict(self) -> dict:
        return {"estimate_peak_mib": self.estimate_peak_mib, "peak_mib": self.peak_mib}


class _ReadsAsMapping:
    """``record["name"]``, ``record.get(name)``, ``name in record``, iteration over the names and ``items()``:
    the reads of the dict a record replaced, over its fields."""

    def __getitem__(self, name: str):
        if name not in self:
            known = ", ".join(repr(f.name) for f in fields(self))  # type: ignore[arg-type]
            raise UnknownNameError(f"`name`: {type(self).__name__} has no {name!r}; it has {known}")
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in fields(self))  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return (f.name for f in fields(self))  # type: ignore[arg-type]

    def get(self, name: str, default=None):
        return getattr(self, name) if name in self else default

    def items(self) -> list[tuple[str, Any]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]  # type: ignore[arg-type]


@dataclass(frozen=True, repr=False)
class Validity(_ReadsAsMapping, Result):
    """Where the real network leaves the NQF (:attr:`Analysis.validity`; :func:`nqf.curves.regime_exit` with the
    prediction's certified minimum and a gap floor).

    ``max_gap`` is the largest ``|L_real − L_NQF| / max(L_NQF, gap_floor)`` and ``max_abs_gap`` the largest
    ``|L_real − L_NQF|``; ``gap_tolerance`` the gap that counts as leaving; ``nqf_minimum`` the certified global
    minimum (None when not certified); ``final_real`` / ``final_nqf`` the last losses; ``left_step`` /
    ``left_time`` the first step and time where the real network leaves (None: never) and ``reason`` why;
    ``below_minimum_step`` the first step below the minimum; ``gap_floor`` the floor of the denominator.
    """

    max_gap: float
    gap_tolerance: float
    nqf_minimum: float | None
    final_real: float
    final_nqf: float
    left_step: int | None = None
    left_time: float | None = None
    reason: str | None = None
    below_minimum_step: int | None = None
    max_abs_gap: float = math.nan
    gap_floor: float = 0.0

    def __repr__(self) -> str:
        left = "never" if self.left_time is None else f"t={self.left_time:.4g}"
        return f"Validity(max_gap={self.max_gap:.3g}, left={left})"

    def to_dict(self) -> dict:
        return _clean(dict(self.items()))


@dataclass(frozen=True, repr=False)
class Curves(_ReadsAsMapping, Result):
    """The loss curves of an analysis on one time grid (:attr:`Analysis.curves`): ``t`` (T,), ``loss_real``,
    ``loss_nqf``, ``loss_predicted`` (T,), and the strengths of the predicted directions ``strength_real``,
    ``strength_nqf`` (T, K); arrays, read as ``curves.loss_real`` or ``curves["loss_real"]``."""

    t: np.ndarray
    loss_real: np.ndarray
    loss_nqf: np.ndarray
    loss_predicted: np.ndarray
    strength_real: np.ndarray
    strength_nqf: np.ndarray

    def __repr__(self) -> str:
        K = np.shape(self.strength_nqf)[-1] if np.ndim(self.strength_nqf) == 2 else 0
        return f"Curves(T={len(self.t)}, directions={K})"

    def to_dict(self) -> dict:
        return _clean(dict(self.items()))
