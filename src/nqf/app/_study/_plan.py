"""The records that travel through :func:`nqf.analyze`: what is analysed (:class:`Problem`, with the NQF's own
operator and targets, :class:`NQFData`), how it is run (:class:`RunPlan`), and what the comparison made
(:class:`Comparison`).  Each phase of the pipeline takes these and returns what it made; none of them is a
tuple of more than three (``tests/test_analyze_records.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from ...curves import StaircaseComparison
    from ...structure import StructureOperator
    from .._data import Dataset
    from ._discover import FoundUnits
    from ._parts import Curves, Validity, Verdict

__all__ = ["Prepared", "NQFData", "Problem", "RunPlan", "Comparison"]


@dataclass(frozen=True)
class Prepared:
    """What :func:`~nqf.app._study.prepare_analysis` made, cheaply and failing early: the data, the module (a copy, in
    eval mode), its units and a description of the model."""

    data: Dataset
    module: torch.nn.Module
    found: FoundUnits
    desc: str


@dataclass(frozen=True)
class NQFData:
    """The NQF's operator and targets: on the data (``shift`` 0), or on ``D`` moment rows where that is exact
    (:mod:`nqf.app._study._moments`), whose loss is the data's minus the offset ``shift``; ``rows`` holds the rows ``X̃``
    where a caller needs them (``nqf.analyze``'s seeded NQF steps there; None otherwise)."""

    op: StructureOperator
    Y: torch.Tensor
    shift: float = 0.0
    rows: torch.Tensor | None = None


@dataclass(frozen=True)
class Problem:
    """What :func:`nqf.analyze` analyses, fixed once the units, the operator and the start are known.

    ``module`` (the analysed module, units found as ``found``), ``X`` and ``Y`` the data (float64),
    ``op`` the structure operator on the data and ``f0`` the module's output with its units at zero, ``how``
    which operator it is, ``W0`` the units' start (``M(0) = εI``), ``nqf`` the NQF's own operator and targets.
    """

    module: torch.nn.Module
    found: FoundUnits
    X: torch.Tensor
    Y: torch.Tensor
    op: StructureOperator
    f0: torch.Tensor
    how: str
    W0: torch.Tensor
    nqf: NQFData

    @property
    def residual0(self) -> torch.Tensor:
        """``Y − f(0)``: what a dormant unit's utility sees (:mod:`nqf.app._study._orders`)."""
        return self.Y - self.f0


@dataclass(frozen=True)
class RunPlan:
    """How the runs go: GD step ``lr`` (η, the table's clock) for ``steps`` steps, the NQF in ``form``, a state
    saved every ``save_every`` steps, the real network at ``real_step_factor × η`` and half of it (at most 2: at
    η itself), its start ``init_factor × W0``."""

    lr: float
    steps: int
    form: str
    save_every: int
    real_step_factor: float = 1.0
    init_factor: float = 1.0


@dataclass(frozen=True)
class Comparison:
    """Both runs against the prediction (``nqf``, ``real``), the validity of the quadratic regime, the verdict
    and the curves on the NQF's saved times (an :class:`~nqf.app.Analysis`'s ``curves``)."""

    nqf: StaircaseComparison
    real: StaircaseComparison
    validity: Validity
    verdict: Verdict
    curves: Curves
