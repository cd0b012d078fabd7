"""Where the Lotka–Volterra flow ends, and the plateaus on the way (docs/theory.md §4).

* :meth:`FinalState.final_state` — the state the flow from ``z(0)`` ends in;
* :meth:`FinalState.plateaus` — switch-on times and plateau losses;
* :meth:`FinalState.staircase` — the same as a :class:`nqf.reductions.Staircase`.

Mixed into :class:`nqf.reductions.lv.LotkaVolterra`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import minimize, nnls

from ...errors import InvalidParameterError
from ...results import Result
from .._staircase import Staircase
from ..timing import leading_switch_time
from .qp import ActiveSetQP, UnboundedError
from .solution import _t

if TYPE_CHECKING:
    from .limit import LimitResult

__all__ = ["FinalState", "Plateaus"]


@dataclass(frozen=True, repr=False)
class Plateaus(Result):
    """Plateau sequence of a staircase.

    Attributes
    ----------
    times : torch.Tensor, shape (J,)
        Switch-on times ``t_j`` (training time, ``t = η · steps``), increasing.
    modes : torch.Tensor of int64, shape (J,)
        Mode switching on (or off, see ``kinds``) at ``t_j``.
    kinds : list of str, length J
        ``"on"`` or ``"off"``.
    losses : torch.Tensor, shape (J + 1,)
        ``losses[0]`` is the initial plateau, ``losses[j]`` the plateau after event ``j − 1``.
    """

    times: torch.Tensor
    modes: torch.Tensor
    kinds: list
    losses: torch.Tensor


class FinalState:
    """Final state and plateau sequence (methods of :class:`~nqf.reductions.lv.LotkaVolterra`)."""

    # set by LotkaVolterra.__init__; exactly one of _dense and _sparse is not None
    K: int
    is_diagonal: bool
    _beta: np.ndarray
    _diag: np.ndarray
    _z0: np.ndarray
    _dense: np.ndarray | None
    _sparse: sp.csr_matrix | sp.csr_array | None
    _factor: tuple[np.ndarray, np.ndarray] | None
    _final: np.ndarray | None
    basis: torch.Tensor | None

    if TYPE_CHECKING:  # defined by LotkaVolterra and LogisticSolutions

        def limit(self, eps: float | None = None) -> LimitResult: ...
        def loss(self, z) -> torch.Tensor: ...
        def final_loss(self) -> float: ...
        def logistic_switch_times(self, fraction: float = 0.5) -> torch.Tensor: ...

    def final_state(self) -> torch.Tensor:
        r"""Minimiser ``z∞`` of ``L(z)`` over ``z ≥ 0`` (where gradient flow ends).

        The problem is a convex quadratic program with a PSD, possibly singular ``C``.
        Diagonal ``C``: ``z∞_k = max(β_k, 0)/C_kk``.  With the least-squares factor of
        :func:`reduce` (``L = ½‖Az − b‖²``): :func:`scipy.optimize.nnls` on ``(A, b)``,
        which never forms ``C`` and is exact for singular ``C``.  Dense ``C`` without a
        factor: the finite active-set method of :class:`nqf.reductions.lv.qp.ActiveSetQP`
        (Lawson–Hanson on the quadratic form, with ray steps along null directions of
        singular ``C``).  Sparse non-diagonal ``C``: L-BFGS-B with bounds (iterative,
        converged to a projected-gradient tolerance ``1e-12``).

        Singular dense ``C`` (e.g. underdetermined commuting sensing): the minimisers form
        a face and the flow from ``z(0)`` ends on the one selected by the dynamics — the
        ε → 0 saddle-to-saddle construction of :meth:`limit` with
        ``s_k(0) = ln z_k(0)/ln(1/ε)``, ``ε = max z(0)`` — not on an arbitrary NNLS vertex.
        Modes that the limit leaves at 0 end at ``O(ε^{κ})`` (``κ > 0``) in the flow.  (For
        ``max z(0) ≥ 1``, or sparse ``C``, one minimiser is returned as above.)

        Returns
        -------
        torch.Tensor, shape (K,)
        """
        if self._final is None:
            self._final = self._compute_final()
        return _t(self._final)

    @staticmethod
    def _singular(C: np.ndarray) -> bool:
        """The dense ``C`` has an eigenvalue ``≤ 1e-10 λ_max``."""
        lam = np.linalg.eigvalsh(C)
        return bool(lam[0] <= 1e-10 * max(float(lam[-1]), 1e-300))

    def _selected_final(self, C: np.ndarray) -> np.ndarray:
        r"""The minimiser the flow from ``z(0)`` ends on when ``C`` is singular.

        Along the flow ``d/dt Σ_k v_k ln z_k = 4 vᵀ(β − Cz) = 0`` for every null vector
        ``v`` of ``C`` (``β ∈ range C``).  Modes with a positive final gradient
        ``g = Cz∞ − β`` decay to 0; on the free modes ``F`` (``g_k = 0``) the
        conservation laws of the null vectors supported on ``F`` fix the point of the
        optimal face ``{z_F ≥ 0 : C_{:F} z_F = C z∞}``:
        ``ln z_F − ln z_F(0) ∈ range(C_{F:})``.  That is the minimiser of
        ``Σ_k z_k (ln(z_k/z_k(0)) − 1)`` on the face, found by Newton's method on its
        dual, ``z_F = z_F(0) exp(C_{F:} λ)``, ``C_{:F} z_F(λ) = C z∞``, from ``λ = 0``; the
        ε → 0 selection of :meth:`limit` gives ``F`` and ``C z∞``.
        """
        z_lim = self.limit().z_final.numpy()
        b = self._beta
        w = C @ z_lim
        g = w - b
        scale = max(float(np.max(np.abs(b))), float(np.max(np.abs(w))), 1e-300)
        F = (np.abs(g) <= 1e-9 * scale) & (self._z0 > 0)
        if not F.any():
            return z_lim
        B = C[:, F]
        lz0 = np.log(self._z0[F])
        lam = np.zeros(self.K)  # z = z(0): Newton on the convex dual from the start of the flow

        def state(lam):
            lz = np.minimum(lz0 + B.T @ lam, 700.0)
            z = np.exp(lz)
            return z, float(z.sum() - lam @ w)

        z, phi = state(lam)
        wn = max(float(np.linalg.norm(w)), 1e-300)
        for _ in range(200):
            r = B @ z - w
            if np.linalg.norm(r) <= 1e-14 * wn:
                break
            # Newton step (B Z Bᵀ) δ = −r through the square-root factor J = B Z^{1/2} (better conditioned)
            J = B * np.sqrt(z)[None, :]
            step = -np.linalg.lstsq(J.T, np.linalg.lstsq(J, r, rcond=None)[0], rcond=None)[0]
            a, accepted = 1.0, False
            while a > 1e-12:
                zn, pn = state(lam + a * step)
                if pn <= phi + 1e-4 * a * float(r @ step):
                    accepted = True
                    break
                a *= 0.5
            if not accepted:
                break
            lam, z, phi = lam + a * step, zn, pn
        out = np.zeros(self.K)
        out[F] = z
        # keep it only if it is a minimiser (same loss gradient on the support): else the limit's choice
        if np.max(np.abs(C @ out - w)) > 1e-9 * scale:
            return z_lim
        return out

    def _compute_final(self) -> np.ndarray:
        b, d = self._beta, self._diag
        if self.is_diagonal:
            return np.where((b > 0) & (d > 0), np.maximum(b, 0) / np.where(d > 0, d, 1.0), 0.0)
        if self._dense is not None and float(np.max(self._z0)) < 1.0 and self._singular(self._dense):
            return self._selected_final(self._dense)
        if self._factor is not None:
            A, y = self._factor
            x, _ = nnls(A, y, maxiter=50 * self.K)
            return x
        if self._dense is not None:
            lam, V = np.linalg.eigh(self._dense)
            pos = lam > 1e-12 * max(float(lam[-1]), 1e-300)
            Vp, lp = V[:, pos], lam[pos]
            proj = Vp.T @ b
            if np.linalg.norm(b - Vp @ proj) <= 1e-9 * max(float(np.linalg.norm(b)), 1e-300):
                # β ∈ range(C): L + const = ½‖R z − r‖² with R = diag(√λ) Vᵀ, r = diag(1/√λ) Vᵀβ
                x, _ = nnls(np.sqrt(lp)[:, None] * Vp.T, proj / np.sqrt(lp), maxiter=50 * self.K)
                return x
            try:  # β has a component outside range(C): exact active-set QP (detects unboundedness)
                return ActiveSetQP(self._dense, b).solve()
            except UnboundedError as exc:
                raise InvalidParameterError(f"`beta`, `C`: {exc}") from None
        C = self._sparse
        assert C is not None  # neither diagonal nor dense: sparse
        res = minimize(
            lambda z: (-b @ z + 0.5 * z @ (C @ z), C @ z - b),
            np.zeros(self.K),
            jac=True,
            method="L-BFGS-B",
            bounds=[(0, None)] * self.K,
            options={"maxiter": 100000, "ftol": 1e-15, "gtol": 1e-12},
        )
        return res.x

    def plateaus(self, eps: float | None = None) -> Plateaus:
        """Switch-on times and plateau losses.

        Diagonal ``C``: exact logistic half-saturation times
        (:meth:`logistic_switch_times`) in increasing order; the plateau after the
        ``j``-th switch has the first ``j`` modes at ``z*`` and the others at 0 (exact up
        to ``O(z(0))``).  Interacting ``C``: the ε → 0 limit (:meth:`limit`), with times
        ``t = τ ln(1/ε)``.

        Parameters
        ----------
        eps : float, optional
            Initial scale for the interacting case (default ``max z(0)``).
        """
        if not self.is_diagonal:
            res = self.limit(eps)
            assert res.eps is not None  # LotkaVolterra.limit records the ε it used
            L = -np.log(res.eps)
            losses = [self.loss(np.zeros(self.K)).item()] + [self.loss(zz).item() for zz in res._z_after]
            return Plateaus(_t(res.taus.numpy() * L), res.modes, list(res.kinds), _t(losses))
        ts = self.logistic_switch_times().numpy()
        order = [int(k) for k in np.argsort(ts, kind="stable") if np.isfinite(ts[k])]
        # excess of the plateau after j switches = Σ of the not-yet-learned contributions
        # β_k²/(2 C_kk) (a reverse cumulative sum: no cancellation), plus L(z∞)
        gain = np.maximum(self._beta[order], 0.0) ** 2 / (2.0 * self._diag[order])
        excess = np.concatenate([np.cumsum(gain[::-1])[::-1], [0.0]])
        losses = self.final_loss() + excess
        return Plateaus(_t(ts[order]), torch.as_tensor(order, dtype=torch.int64), ["on"] * len(order), _t(losses))

    def staircase(self, eps: float | None = None, *, limit: bool | None = None) -> Staircase:
        """The predicted staircase (:class:`nqf.reductions.Staircase`) of this system.

        Parameters
        ----------
        eps : float, optional
            Initial scale (default ``max z(0)``): the reference of the ε → 0 limit and of
            the leading-order times ``ln(1/ε)/ζ_k``.
        limit : bool, optional
            ``True``: the ε → 0 limit (:meth:`limit`, times ``τ ln(1/ε)``, method
            ``"limit"``) even for diagonal ``C``; ``False``: the exact logistic
            half-saturation times (diagonal ``C`` only); default: logistic for diagonal
            ``C``, the limit otherwise (as :meth:`plateaus`), both with method
            ``"lotka-volterra"`` (the rule of each time says which).

        Returns
        -------
        Staircase
            ``directions`` are the columns of ``basis`` of the switching modes (shape
            ``(0, K)`` for a system without a basis).
        """
        use_limit = (not self.is_diagonal) if limit is None else bool(limit)
        if not use_limit and not self.is_diagonal:
            raise InvalidParameterError(
                "`limit=False` needs a diagonal `C` (isolated logistic modes); found an interacting C"
            )
        basis = None if self.basis is None else self.basis.numpy()
        if use_limit:
            res = self.limit(eps)
            modes = res.modes.numpy()
            levels = [self.loss(np.zeros(self.K)).item()] + [self.loss(zz).item() for zz in res._z_after]
            dirs = basis[:, modes] if basis is not None else None
            st = res.staircase(levels=levels, directions=dirs, beta=self._beta)
            # asked for the limit: method "limit"; the default reduction of interacting modes stays "lotka-volterra"
            return st if limit else dataclasses.replace(st, method="lotka-volterra")
        pl = self.plateaus(eps)
        ref = float(np.max(self._z0)) if eps is None else float(eps)
        modes = pl.modes.numpy()
        zeta = 4.0 * self._beta[modes]
        return Staircase(
            "lotka-volterra",
            ref,
            pl.losses.numpy(),
            pl.times.numpy(),
            ("logistic",) * len(modes),
            leading_switch_time(zeta, ref),
            np.concatenate([zeta, [0.0]]),
            np.arange(len(modes) + 1),
            basis[:, modes] if basis is not None else np.zeros((0, len(modes))),
            modes,
            True,
            ("commuting data: Lotka–Volterra reduction (isolated modes: exact logistic times)",),
        )
