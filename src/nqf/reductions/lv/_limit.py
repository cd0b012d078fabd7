r"""The ε → 0 limit of interacting Lotka–Volterra modes (docs/theory.md §4.3).

In log coordinates ``s_k = ln z_k / ln(1/ε)`` and rescaled time ``τ = t / ln(1/ε)`` the
flow ``dz/dt = 4 z ⊙ (β − Cz)`` reads ``ds_k/dτ = 4(β_k − (Cz)_k)``.  As ε → 0 a mode
with ``s_k < 0`` has ``z_k → 0``; the modes with ``s_k = 0`` (the active set ``S``) relax
in ``O(1)`` time ``t`` — zero time ``τ`` — to the minimiser ``z_S`` of the loss
``−βᵀz + ½ zᵀCz`` over ``z ≥ 0`` supported on ``S``.  Hence, piecewise in ``τ``:

* ``z = z_S`` is constant and every inactive ``s_k`` moves on a straight line with
  velocity ``v_k = 4(β_k − (C z_S)_k)``;
* a mode **switches on** (joins ``S``) when its ``s_k`` reaches 0 with ``v_k > 0``;
  ``z_S`` is then recomputed on ``S ∪ {k}``, warm-started from the previous optimum;
* a mode **switches off** when its restricted optimum hits 0 during that recomputation;
  it then leaves with ``v_k ≤ 0`` (its ``s_k`` decreases from 0);
* the construction stops when no inactive mode has ``v_k > 0``: the KKT conditions of
  ``min_{z ≥ 0} L`` hold, so the final ``z_S`` is the global minimiser.

Each join strictly decreases the loss, so no support repeats and the algorithm ends
after finitely many events.  For a dense ``C`` the restricted optimum is maintained by the
incremental active-set solver :class:`nqf.reductions.lv._qp.ActiveSetQP` (a partial Cholesky
factor of ``C`` with the active modes as pivots), driven in blocked epochs of many events
(:mod:`nqf.reductions.lv._epoch`: BLAS-3 products on the Schur complement of candidate modes,
exact velocities of every inactive mode) with single exact steps in between
(:mod:`nqf.reductions.lv._walk`); for K = 2000 all events cost about 7 Cholesky factorisations
of ``C`` (``benchmarks/bench_lv.py``).  A sparse banded ``C`` is never densified
(:mod:`nqf.reductions.lv._banded`: one banded solve per event on the component of the active
set it changes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from scipy.linalg import cholesky_banded, get_lapack_funcs

from ..._validation import as_tensor, eps_value
from ...errors import InvalidParameterError, ShapeError
from ...results import Result
from .._staircase import Staircase
from .._timing import leading_switch_time
from ._banded import BandedWalk, band_of
from ._lazy import Knots
from ._qp import ActiveSetQP
from ._walk import Walk

__all__ = ["limit", "LimitResult", "LimitEvent"]

(dpotrf,) = get_lapack_funcs(["potrf"], dtype=np.float64)


@dataclass(frozen=True, repr=False)
class LimitEvent(Result):
    """One event of the ε → 0 limit.

    Attributes
    ----------
    tau : float
        Rescaled time ``τ = t / ln(1/ε)``.
    mode : int
    kind : str
        ``"on"`` (joins the active set) or ``"off"`` (leaves it).
    active : tuple of int
        Active set (support of ``z``) after all events at this ``τ``.
    loss : float
        Plateau loss after the events at this ``τ`` (see :func:`limit` for the constant).
    value : float
        ``z_mode`` right after the event (0 for ``"off"``).
    """

    tau: float
    mode: int
    kind: str
    active: tuple
    loss: float
    value: float


@dataclass(frozen=True, repr=False)
class LimitResult(Result):
    """Result of :func:`limit`.

    Attributes
    ----------
    events : list of LimitEvent
        In order of ``τ`` (simultaneous events share ``τ``).
    z_final : torch.Tensor, shape (K,)
        Final plateau state = minimiser of the loss over ``z ≥ 0``.
    path_tau : torch.Tensor, shape (B,)
        Breakpoints of the piecewise-linear paths ``s(τ)`` (0, every event time, and an end
        point 25 % beyond the last event).
    path_s : torch.Tensor, shape (B, K), or None
        ``s_k`` at the breakpoints (linear in between; ``−inf`` for modes starting at ``z = 0``);
        None for a sparse (banded) ``C``, whose paths are kept as the knots where a velocity
        changes — read them with :meth:`s_at`.
    initial_loss : float
        Loss of the initial plateau (``z = 0``).
    eps : float or None
        Reference ε when built by :meth:`LotkaVolterra.limit`.
    """

    events: list
    z_final: torch.Tensor
    path_tau: torch.Tensor
    path_s: torch.Tensor | None
    initial_loss: float
    eps: float | None = None
    _z_after: Sequence = field(default_factory=list, repr=False)
    _knots: Knots | None = field(default=None, repr=False)

    @property
    def taus(self) -> torch.Tensor:
        """Event times, shape (E,)."""
        return torch.as_tensor([e.tau for e in self.events], dtype=torch.float64)

    @property
    def modes(self) -> torch.Tensor:
        """Event modes, shape (E,), int64."""
        return torch.as_tensor([e.mode for e in self.events], dtype=torch.int64)

    @property
    def kinds(self) -> list:
        """Event kinds (``"on"``/``"off"``), length E."""
        return [e.kind for e in self.events]

    @property
    def losses(self) -> torch.Tensor:
        """Plateau loss after each event, shape (E,)."""
        return torch.as_tensor([e.loss for e in self.events], dtype=torch.float64)

    @property
    def z_after(self) -> list:
        """``z`` right after each event (the plateau state), one array of shape (K,) per event."""
        return [np.array(z, copy=True) for z in self._z_after]

    @property
    def final_active(self) -> tuple:
        """Support of the final state."""
        return tuple(int(k) for k in np.flatnonzero(self.z_final.numpy() > 0))

    def switch_on_times(self) -> torch.Tensor:
        """First switch-on ``τ`` of every mode, shape (K,) (``inf`` if it never switches on)."""
        K = self.z_final.shape[0]
        out = np.full(K, np.inf)
        for e in reversed(self.events):
            if e.kind == "on":
                out[e.mode] = e.tau
        return torch.as_tensor(out)

    def staircase(self, eps: float | None = None, *, levels=None, directions=None, beta=None) -> Staircase:
        """The events as a :class:`nqf.reductions.Staircase` at ``ε`` (method ``"limit"``, times ``τ ln(1/ε)``).

        Parameters
        ----------
        eps : float in (0, 1), optional
            Default: the ``eps`` this result was built for.
        levels : array_like, shape (E + 1,), optional
            Plateau levels (default ``initial_loss`` then ``losses``, with the constant of :func:`limit`).
        directions : array_like, shape (p, E), optional
            Unit-space direction of each event's mode (default: none, shape ``(0, E)``).
        beta : array_like, shape (K,), optional
            ``β`` of the system, for the rates ``ζ = 4β`` and the leading-order times
            ``ln(1/ε)/ζ`` (default: NaN rates and leading times equal to ``τ ln(1/ε)``).
        """
        ref = eps_value(self.eps if eps is None else eps)
        E = len(self.events)
        times = self.taus.numpy() * -np.log(ref)
        modes = self.modes.numpy()
        kinds = self.kinds
        rank = np.concatenate([[0], np.cumsum([1 if k == "on" else -1 for k in kinds])]).astype(np.int64)
        if levels is None:
            levels = np.concatenate([[self.initial_loss], self.losses.numpy()])
        if beta is None:
            zeta, lead = np.full(E, np.nan), times.copy()
        else:
            zeta = 4.0 * np.asarray(beta, dtype=np.float64)[modes]
            lead = leading_switch_time(zeta, ref)
        return Staircase(
            "limit",
            ref,
            levels,
            times,
            ("ε → 0 limit",) * E,
            lead,
            np.concatenate([zeta, [0.0]]),
            rank,
            np.zeros((0, E)) if directions is None else directions,
            modes,
            True,
            ("commuting data: ε → 0 limit of the Lotka–Volterra modes",),
        )

    def s_at(self, tau) -> torch.Tensor:
        """``s(τ)`` by linear interpolation of the paths, shape (T, K) for ``tau`` of shape (T,).

        Beyond the last breakpoint the paths continue with their final velocities.
        """
        tq = as_tensor("tau", tau, ndim=(0, 1), dtype=torch.float64).reshape(-1).numpy()
        if self.path_s is None:  # banded C: the paths are stored as knots
            assert self._knots is not None
            return torch.as_tensor(self._knots.at(tq))
        bt = self.path_tau.numpy()
        bs = self.path_s.numpy()
        out = np.empty((tq.shape[0], bs.shape[1]))
        with np.errstate(invalid="ignore"):
            slope_end = (bs[-1] - bs[-2]) / (bt[-1] - bt[-2]) if bt.shape[0] > 1 else np.zeros(bs.shape[1])
            for k in range(bs.shape[1]):
                out[:, k] = np.interp(tq, bt, bs[:, k])
            late = tq > bt[-1]
            if late.any():
                out[late] = np.minimum(bs[-1][None, :] + slope_end[None, :] * (tq[late, None] - bt[-1]), 0.0)
        return torch.as_tensor(out)


def limit(beta, C, s0=None, *, y2: float | None = None, max_events: int | None = None) -> LimitResult:
    r"""Events of the ε → 0 limit of ``dz/dt = 4 z ⊙ (β − Cz)`` (saddle-to-saddle dynamics).

    Parameters
    ----------
    beta : array_like, shape (K,)
        ``β`` (growth rates ``ζ = 4β``).
    C : array_like or scipy.sparse matrix, shape (K, K)
        Symmetric positive semi-definite interaction matrix.  A sparse ``C`` must be banded
        (half-bandwidth ``w ≤ 64``); it is never densified: each event costs one banded solve on
        the component of the active set it changes (``C_SS`` must then be positive definite on
        every support visited), and the active sets, plateau states and paths of the result
        are compact logs materialised on demand (``path_s`` is None).
    s0 : array_like, shape (K,), optional
        Initial log coordinates ``s_k(0) = ln z_k(0) / ln(1/ε) ≤ 0``; default ``−1`` for every
        mode (``z(0) = ε``).  ``−inf`` marks a mode that starts at exactly 0; ``0`` a mode
        that starts at an ``O(1)`` value.
    y2 : float, optional
        ``E[‖ỹ‖²]``; the reported plateau losses are ``½ y2 − βᵀz + ½ zᵀCz``.  When omitted
        they are excess losses ``L(z) − min_{z ≥ 0} L`` (the last plateau is 0).
    max_events : int, optional
        Safety bound (default ``10 K + 10``).

    Returns
    -------
    LimitResult
        Events (``τ``, mode, on/off, active set, plateau loss), final state and the
        piecewise-linear paths ``s(τ)``.  Times in training units are ``t ≈ τ ln(1/ε)``,
        with ``O(1)`` corrections (so the relative error falls like ``1/ln(1/ε)``).

    Raises
    ------
    ShapeError, NonFiniteError
        Wrong shapes, NaN.
    ValueError
        ``C`` not symmetric or not PSD; ``s0 > 0``; the loss unbounded below.
    """
    if sp.issparse(C):
        return _banded_limit(beta, C, s0, y2, max_events)
    b, Cn, s, scale = _checked_inputs(beta, C, s0)
    K = b.shape[0]
    qp = ActiveSetQP(Cn, b)
    vtol = 1e-12 * max(float(np.max(np.abs(b))), scale, 1e-300)
    max_events = 10 * K + 10 if max_events is None else int(max_events)
    # the velocities 4(β − Cz) vanish on the active set (free_gradient), so `v > vthr` selects
    # inactive modes only; modes with s = −inf (z(0) = 0) never move
    walk = Walk(qp, b, s, vthr=4 * vtol, stol=1e-12)
    walk.run(max_events)
    # extension for plotting
    end, s_end = walk.extended()
    path_tau, path_s = walk.path_tau + [end], walk.path_s + [s_end]
    zf = qp.z.copy()
    if y2 is None:
        shift = -_plateau(b, zf)
    else:
        shift = 0.5 * float(y2)
    events = [LimitEvent(t, k, kind, act, float(loss + shift), value) for t, k, kind, act, loss, value in walk.events]
    return LimitResult(
        events,
        torch.as_tensor(zf),
        torch.as_tensor(np.array(path_tau)),
        torch.as_tensor(np.array(path_s)),
        float(shift),
        None,
        walk.z_after,
    )


def _banded_limit(beta, C, s0, y2, max_events) -> LimitResult:
    """:func:`limit` for a banded sparse ``C`` (:mod:`nqf.reductions.lv._banded`)."""
    b = as_tensor("beta", beta, ndim=1, dtype=torch.float64).numpy().copy()
    K = b.shape[0]
    if K == 0:
        raise ShapeError("`beta` must have at least one mode (K ≥ 1); found shape (0,)")
    w, diags = band_of(C, K, 64)
    scale = max(float(np.max(np.abs(diags[0]))), 1e-300)
    ab = np.zeros((w + 1, K))
    for d in range(w + 1):
        ab[w - d, d:] = diags[d]
    ab[w] += 1e-10 * scale
    try:
        cholesky_banded(ab, check_finite=False)
    except np.linalg.LinAlgError:
        raise InvalidParameterError("`C` must be positive semi-definite; its banded Cholesky factor fails") from None
    s = _checked_s0(s0, K)
    vtol = 1e-12 * max(float(np.max(np.abs(b))), scale, 1e-300)
    walk = BandedWalk(b, w, diags, s, vthr=4 * vtol, stol=1e-12)
    walk.run(10 * K + 10 if max_events is None else int(max_events))
    zf = walk.z.copy()
    shift = 0.5 * float(b @ zf) if y2 is None else 0.5 * float(y2)
    events = [LimitEvent(t, k, kind, act, float(loss + shift), value) for t, k, kind, act, loss, value in walk.events]
    end = 1.25 * walk.tau if walk.tau > 0 else 1.0
    path_tau = torch.as_tensor(np.array(walk.path_tau + [end]))
    return LimitResult(events, torch.as_tensor(zf), path_tau, None, float(shift), None, walk.states(), walk.knots())


def _checked_inputs(beta, C, s0):
    """Checked ``β`` (K,), symmetric PSD ``C`` (K, K), ``s(0)`` (default −1; ≤ 0, −inf allowed), scale of ``C``."""
    b = as_tensor("beta", beta, ndim=1, dtype=torch.float64).numpy().copy()
    K = b.shape[0]
    if K == 0:
        raise ShapeError("`beta` must have at least one mode (K ≥ 1); found shape (0,)")
    Cn = as_tensor("C", C, ndim=2, dtype=torch.float64).numpy()
    if Cn.shape != (K, K):
        raise ShapeError(f"`C` must have shape ({K}, {K}) to match `beta`; found {Cn.shape}")
    scale = max(float(np.max(np.abs(np.diag(Cn)))) if K else 0.0, 1e-300)
    asym = _max_asymmetry(Cn)
    if asym > 1e-10 * max(float(np.max(np.abs(Cn))), 1e-300):
        raise InvalidParameterError(f"`C` must be symmetric; found max |C − Cᵀ| = {asym:.3e}")
    if not _is_psd(Cn, 1e-10 * scale):
        lam = float(np.linalg.eigvalsh(Cn)[0])
        raise InvalidParameterError(
            f"`C` must be positive semi-definite; found smallest eigenvalue {lam:.3e}"
        ) from None
    return b, Cn, _checked_s0(s0, K), scale


def _checked_s0(s0, K: int) -> np.ndarray:
    """``s(0)``: default −1; shape (K,), ≤ 0, −inf allowed."""
    if s0 is None:
        s = -np.ones(K)
    else:
        s = as_tensor("s0", s0, ndim=1, dtype=torch.float64, finite=False).numpy().copy()
        if s.shape != (K,):
            raise ShapeError(f"`s0` must have shape ({K},); found {s.shape}")
        if np.isnan(s).any() or np.isposinf(s).any():
            raise InvalidParameterError("`s0` must not contain NaN or +inf")
        if (s > 0).any():
            raise InvalidParameterError(f"`s0` must be ≤ 0 (z(0) ≤ 1 in units of ε); found max {s.max():.3e}")
    return s


def _max_asymmetry(C: np.ndarray, block: int = 256) -> float:
    """``max |C − Cᵀ|`` by pairs of ``block × block`` tiles (each pair stays in cache)."""
    K = C.shape[0]
    worst = 0.0
    for i in range(0, K, block):
        for j in range(i, K, block):
            d = C[i : i + block, j : j + block] - C[j : j + block, i : i + block].T
            worst = max(worst, float(np.max(np.abs(d))))
    return worst


def _is_psd(C: np.ndarray, shift: float) -> bool:
    """Whether ``C + shift·I`` has a Cholesky factor (LAPACK ``potrf`` on a copy, lower triangle only)."""
    A = np.array(C, dtype=np.float64, copy=True)
    A.flat[:: A.shape[0] + 1] += shift
    _, info = dpotrf(A.T, lower=1, clean=0, overwrite_a=1)  # Aᵀ (= A) is Fortran-ordered: no copy
    return info == 0


def _plateau(b: np.ndarray, z: np.ndarray) -> float:
    """Loss ``−βᵀz + ½zᵀCz`` at a restricted optimum, without the constant: ``−½ β_Pᵀ z_P`` (``C_PP z_P = β_P``)."""
    return -0.5 * float(b @ z)
