r"""Where the quadratic approximation stops holding (docs/theory.md §6).

Along a trajectory of the real network (from :func:`nqf.dynamics.train_network`)
this module measures

* the **remainder ratio** ``ρ(t) = ‖f_net(W) − f(0) − Tr[W Wᵀ A]‖ / ‖Tr[W Wᵀ A]‖``
  (norms over all samples and outputs; without the zero-gradient condition the
  quadratic part is the full normal form ``bᵀμ + μᵀBμ + Tr[M(A − B)]``);
* the **loss gap** ``|L_net(t) − L_NQF(t)|`` between the network and the NQF
  run from the same ``W(0)`` on the same data, loss and time grid;
* the **separation time**: the first ``t`` at which the gap exceeds
  ``fraction × (L_NQF(0) − min_t L_NQF)``;
* the **first switch-on time** ``t*``: the first ``t`` at which the NQF loss has
  fallen by ``switch_fraction`` of its total drop, and the gap there,
  normalised by the total drop;

and :func:`validity_sweep` repeats this over initial scales ε with
``W(0) = √ε · W_dir`` (so ``M(0) = ε W_dir W_dirᵀ``, the convention
``z(0) ∝ ε``).  Scaling to expect: for an activation with ``σ''(0) = 0`` (tanh,
sin, erf) the remainder is quartic, so ``ρ ∝ ‖W‖² ∝ ε`` at fixed early time; with
``σ''(0) ≠ 0`` (gelu) it is cubic and ``ρ ∝ ε^{1/2}``.  Whether the normalised
gap at ``t*`` shrinks as ε → 0 is exactly what the sweep reports (``slope``);
near ``t*`` the active weights are ``O(1)`` whatever ε, so it need not.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.func import functional_call

from .._validation import as_tensor, eps_value, unit_fraction
from ..dynamics import GD, Save, Trajectory, simulate, train_network
from ..errors import InvalidParameterError, ShapeError
from ..modules import UnitScatter
from ..results import Result
from ..structure import StructureOperator

__all__ = ["ValidityReport", "ValiditySweep", "remainder_ratio", "validity_report", "validity_sweep"]


@dataclass(frozen=True, repr=False)
class ValidityReport(Result):
    """Validity of the NQF along one run.

    Attributes
    ----------
    t : torch.Tensor, shape (K,)
        Common training times (``t = η · step``).
    remainder_ratio : torch.Tensor, shape (K,)
        ``‖f_net − f(0) − f_quad‖ / ‖f_quad‖`` along the network trajectory (NaN where ``f_quad = 0``).
    loss_network, loss_nqf, gap : torch.Tensor, shape (K,)
        Full-data losses and ``|L_net − L_NQF|``.
    loss_drop : float
        ``L_NQF(0) − min_t L_NQF``.
    fraction : float
    separation_time : float or None
        First ``t`` with ``gap > fraction · loss_drop`` (None: never within the run).
    switch_time : float or None
        First ``t`` with ``L_NQF(0) − L_NQF(t) ≥ switch_fraction · loss_drop``.
    gap_at_switch, normalised_gap_at_switch : float or None
        ``gap(t*)`` and ``gap(t*) / loss_drop``.
    """

    t: torch.Tensor
    remainder_ratio: torch.Tensor
    loss_network: torch.Tensor
    loss_nqf: torch.Tensor
    gap: torch.Tensor
    loss_drop: float
    fraction: float
    separation_time: float | None
    switch_time: float | None
    gap_at_switch: float | None
    normalised_gap_at_switch: float | None

    def gap_at(self, t: float) -> float:
        """The loss gap at the saved time closest to ``t``."""
        return float(self.gap[int(torch.argmin((self.t - t).abs()))])


@dataclass(frozen=True, repr=False)
class ValiditySweep(Result):
    """:func:`validity_report` over initial scales ε.

    Attributes
    ----------
    eps : numpy.ndarray, shape (E,)
    reports : list of ValidityReport
    switch_time, separation_time, gap_at_switch, normalised_gap_at_switch : numpy.ndarray, shape (E,)
        NaN where undefined.
    early_gap, early_normalised_gap : numpy.ndarray, shape (E,) or None
        Gap at ``early_time`` and that gap divided by the NQF loss drop up to ``early_time``.
    slope : float
        Least-squares log–log slope of ``normalised_gap_at_switch`` against ε (NaN if < 2 usable points).
    early_slope : float
        The same for ``early_normalised_gap``.
    """

    eps: np.ndarray
    reports: list = field(default_factory=list)
    switch_time: np.ndarray | None = None
    separation_time: np.ndarray | None = None
    gap_at_switch: np.ndarray | None = None
    normalised_gap_at_switch: np.ndarray | None = None
    early_gap: np.ndarray | None = None
    early_normalised_gap: np.ndarray | None = None
    slope: float = float("nan")
    early_slope: float = float("nan")


def _loglog_slope(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def _quadratic_part(op: StructureOperator, M: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Normal-form output minus ``f(0)``, shape (N, C)."""
    mu = None if op.satisfies_zgz else W.sum(1)
    f = op.predict(M, mu).reshape(op.n_samples, op.n_outputs)
    return f - op.offset


def remainder_ratio(
    module: torch.nn.Module, units, X, op: StructureOperator, W, *, output: Callable | None = None
) -> torch.Tensor:
    r"""``‖f_net(W) − f(0) − f_quad(W)‖ / ‖f_quad(W)‖`` for each saved ``W``.

    Parameters
    ----------
    module : torch.nn.Module
        The network; its non-unit parameters are used as they are.
    units : UnitLayout
    X : torch.Tensor, shape (N, ...)
        Inputs (the data of ``op``).
    op : StructureOperator
        Structure operator of ``module`` on ``X`` (``f(0)`` is taken from the network itself).
    W : torch.Tensor, shape (K, p, m) or (p, m)
    output : callable, optional
        As in :func:`~nqf.dynamics.train_network`.

    Returns
    -------
    torch.Tensor, shape (K,) (a 0-dim tensor for a single ``W``)
    """
    W = as_tensor("W", W, ndim=(2, 3), dtype=op.dtype, device=op.device)
    single = W.ndim == 2
    Ws = W[None] if single else W
    if Ws.shape[1] != op.p:
        raise ShapeError(f"`W` must have shape (K, {op.p}, m); found {tuple(W.shape)}")
    scatter = UnitScatter(module, units)

    def net(Wk):
        out = functional_call(module, scatter(Wk), (X,))
        out = output(out) if output is not None else out
        return out.reshape(out.shape[0], -1)

    with torch.no_grad():
        f0 = net(torch.zeros_like(Ws[0]))
        out = []
        for Wk in Ws:
            quad = _quadratic_part(op, Wk @ Wk.T, Wk)
            rem = net(Wk) - f0 - quad
            qn = float(quad.norm())
            out.append(float(rem.norm()) / qn if qn > 0 else float("nan"))
    res = torch.tensor(out, dtype=op.dtype)
    return res[0] if single else res


def validity_report(
    module: torch.nn.Module,
    units,
    X,
    op: StructureOperator,
    network: Trajectory,
    nqf: Trajectory,
    *,
    fraction: float = 0.1,
    switch_fraction: float = 0.5,
    output: Callable | None = None,
) -> ValidityReport:
    """Compare a network run with the NQF run from the same ``W(0)`` (same steps and ``save_every``).

    Parameters
    ----------
    module, units, X, op, output
        As in :func:`remainder_ratio`.
    network : Trajectory
        From :func:`~nqf.dynamics.train_network` (needs ``.W``).
    nqf : Trajectory
        From :func:`~nqf.dynamics.simulate` (or :func:`~nqf.dynamics.gradient_flow` on the same time grid).
    fraction : float
        Threshold of the separation time as a fraction of the total NQF loss drop.
    switch_fraction : float
        Fraction of the total drop that defines the first switch-on time.
    """
    if not fraction > 0:
        raise InvalidParameterError(f"`fraction` must be > 0; found {fraction!r}")
    switch_fraction = unit_fraction("switch_fraction", switch_fraction, "of the total drop")
    if network.W is None:
        raise InvalidParameterError(
            "`network` must carry the saved weights `.W` (train_network(..., save=Save(W=True)))"
        )
    K = min(len(network), len(nqf))
    tn, tq = network.t[:K].cpu(), nqf.t[:K].cpu()
    if not torch.allclose(tn, tq, rtol=1e-9, atol=1e-12):
        raise InvalidParameterError(
            "`network` and `nqf` must be saved on the same time grid (same lr, steps, save_every)"
        )
    Ln, Lq = network.loss[:K].cpu(), nqf.loss[:K].cpu()
    gap = (Ln - Lq).abs()
    drop = float(Lq[0] - Lq.min()) if K else 0.0
    sep = sw = gsw = ngsw = None
    if drop > 0:
        above = torch.nonzero(gap > fraction * drop)
        sep = float(tn[above[0, 0]]) if above.numel() else None
        reached = torch.nonzero(Lq[0] - Lq >= switch_fraction * drop)
        if reached.numel():
            j = int(reached[0, 0])
            sw, gsw = float(tn[j]), float(gap[j])
            ngsw = gsw / drop
    rho = remainder_ratio(module, units, X, op, network.W[:K], output=output)
    return ValidityReport(
        t=tn,
        remainder_ratio=rho,
        loss_network=Ln,
        loss_nqf=Lq,
        gap=gap,
        loss_drop=drop,
        fraction=float(fraction),
        separation_time=sep,
        switch_time=sw,
        gap_at_switch=gsw,
        normalised_gap_at_switch=ngsw,
    )


def validity_sweep(
    module: torch.nn.Module,
    units,
    X,
    y,
    op: StructureOperator,
    W_dir,
    eps,
    *,
    lr: float,
    steps: int | Callable[[float], int],
    loss: str = "mse",
    output: Callable | None = None,
    fraction: float = 0.1,
    switch_fraction: float = 0.5,
    early_time: float | None = None,
    save_every: int | Callable[[float], int] | None = None,
) -> ValiditySweep:
    r"""Run NQF and network from ``W(0) = √ε W_dir`` for each ε and collect the validity numbers.

    Parameters
    ----------
    module, units, X, output
        The real network and its unit layout (see :func:`~nqf.dynamics.train_network`).
    y : array_like, shape (N,) or (N, C)
    op : StructureOperator
        Structure operator of ``module`` on ``X``.
    W_dir : array_like, shape (p, m)
        Direction of the initial weights.
    eps : sequence of float
        Initial scales ε (``M(0) = ε W_dir W_dirᵀ``).
    lr : float
    steps : int or callable ε → int
        Steps per run (switch-on times grow like ``ln(1/ε)``, so a callable is usual).
    fraction, switch_fraction
        As in :func:`validity_report`.
    early_time : float, optional
        Also report the gap at this fixed time, and that gap divided by the NQF loss drop up to it.
    save_every : int or callable ε → int, optional

    Returns
    -------
    ValiditySweep
    """
    eps = np.asarray(eps, dtype=float).reshape(-1)
    if eps.size == 0:
        raise InvalidParameterError("`eps` must be a non-empty sequence of initial scales; found none")
    eps = np.array([eps_value(e) for e in eps])
    W_dir = as_tensor("W_dir", W_dir, ndim=2, dtype=op.dtype, device=op.device)
    reports, early, early_n = [], [], []
    for e in eps:
        n = int(steps(e)) if callable(steps) else int(steps)
        se = save_every(e) if callable(save_every) else save_every
        W0 = math.sqrt(e) * W_dir
        q = simulate(op, y, W0=W0, optimizer=GD(lr), save=Save(every=se, M=False), steps=n, loss=loss)
        net = train_network(
            module,
            units,
            X,
            y,
            W0=W0,
            optimizer=GD(lr),
            save=Save(every=se, M=False),
            steps=n,
            loss=loss,
            output=output,
        )
        rep = validity_report(
            module, units, X, op, net, q, fraction=fraction, switch_fraction=switch_fraction, output=output
        )
        reports.append(rep)
        if early_time is not None:
            j = int(torch.argmin((rep.t - early_time).abs()))
            g = float(rep.gap[j])
            d = float(rep.loss_nqf[0] - rep.loss_nqf[j])
            early.append(g)
            early_n.append(g / d if d > 0 else float("nan"))

    def arr(name):
        return np.array([np.nan if getattr(r, name) is None else getattr(r, name) for r in reports], float)

    ng = arr("normalised_gap_at_switch")
    return ValiditySweep(
        eps=eps,
        reports=reports,
        switch_time=arr("switch_time"),
        separation_time=arr("separation_time"),
        gap_at_switch=arr("gap_at_switch"),
        normalised_gap_at_switch=ng,
        early_gap=np.array(early) if early_time is not None else None,
        early_normalised_gap=np.array(early_n) if early_time is not None else None,
        slope=_loglog_slope(eps, ng),
        early_slope=_loglog_slope(eps, early_n) if early_time is not None else float("nan"),
    )
