"""Where the Lotka–Volterra flow ends, and the plateaus on the way (docs/theory.md §4).

* :func:`final_state` — the state the flow from ``z(0)`` ends in;
* :func:`plateaus` — switch-on times and plateau losses;
* :func:`staircase` — the same as a :class:`nqf.reductions.Staircase`.

Functions of the system, behind the methods of the same names of
:class:`nqf.reductions.lv.LotkaVolterra`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from scipy.optimize import minimize, nnls

from ...errors import InvalidParameterError
from ...results import Result
from .._staircase import Staircase
from .._timing import leading_switch_time
from ._qp import ActiveSetQP, UnboundedError
from ._solution import _t

if TYPE_CHECKING:
    from ._system import LotkaVolterra

__all__ = ["Plateaus", "final_state", "compute_final", "selected_final", "is_singular", "plateaus", "staircase"]


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


def final_state(system: LotkaVolterra) -> torch.Tensor:
    """Minimiser ``z∞`` of ``L(z)`` over ``z ≥ 0``, computed once (:meth:`LotkaVolterra.final_state`)."""
    if system._final is None:
        system._final = compute_final(system)
    return _t(system._final)


def is_singular(C: np.ndarray) -> bool:
    """The dense ``C`` has an eigenvalue ``≤ 1e-10 λ_max``."""
    lam = np.linalg.eigvalsh(C)
    return bool(lam[0] <= 1e-10 * max(float(lam[-1]), 1e-300))


def selected_final(system: LotkaVolterra, C: np.ndarray) -> np.ndarray:
    r"""The minimiser the flow from ``z(0)`` ends on when ``C`` is singular.

    Along the flow ``d/dt Σ_k v_k ln z_k = 4 vᵀ(β − Cz) = 0`` for every null vector
    ``v`` of ``C`` (``β ∈ range C``).  Modes with a positive final gradient
    ``g = Cz∞ − β`` decay to 0; on the free modes ``F`` (``g_k = 0``) the
    conservation laws of the null vectors supported on ``F`` fix the point of the
    optimal face ``{z_F ≥ 0 : C_{:F} z_F = C z∞}``:
    ``ln z_F − ln z_F(0) ∈ range(C_{F:})``.  That is the minimiser of
    ``Σ_k z_k (ln(z_k/z_k(0)) − 1)`` on the face, found by Newton's method on its
    dual, ``z_F = z_F(0) exp(C_{F:} λ)``, ``C_{:F} z_F(λ) = C z∞``, from ``λ = 0``; the
    ε → 0 selection of :meth:`LotkaVolterra.limit` gives ``F`` and ``C z∞``.
    """
    z_lim = system.limit().z_final.numpy()
    b = system._beta
    w = C @ z_lim
    g = w - b
    scale = max(float(np.max(np.abs(b))), float(np.max(np.abs(w))), 1e-300)
    F = (np.abs(g) <= 1e-9 * scale) & (system._z0 > 0)
    if not F.any():
        return z_lim
    B = C[:, F]
    lz0 = np.log(system._z0[F])
    lam = np.zeros(system.K)  # z = z(0): Newton on the convex dual from the start of the flow

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
    out = np.zeros(system.K)
    out[F] = z
    # keep it only if it is a minimiser (same loss gradient on the support): else the limit's choice
    if np.max(np.abs(C @ out - w)) > 1e-9 * scale:
        return z_lim
    return out


def compute_final(system: LotkaVolterra) -> np.ndarray:
    """The minimiser of :meth:`LotkaVolterra.final_state` by the method that fits ``C`` (see there)."""
    b, d = system._beta, system._diag
    if system.is_diagonal:
        return np.where((b > 0) & (d > 0), np.maximum(b, 0) / np.where(d > 0, d, 1.0), 0.0)
    if system._dense is not None and float(np.max(system._z0)) < 1.0 and is_singular(system._dense):
        return selected_final(system, system._dense)
    if system._factor is not None:
        A, y = system._factor
        x, _ = nnls(A, y, maxiter=50 * system.K)
        return x
    if system._dense is not None:
        lam, V = np.linalg.eigh(system._dense)
        pos = lam > 1e-12 * max(float(lam[-1]), 1e-300)
        Vp, lp = V[:, pos], lam[pos]
        proj = Vp.T @ b
        if np.linalg.norm(b - Vp @ proj) <= 1e-9 * max(float(np.linalg.norm(b)), 1e-300):
            # β ∈ range(C): L + const = ½‖R z − r‖² with R = diag(√λ) Vᵀ, r = diag(1/√λ) Vᵀβ
            x, _ = nnls(np.sqrt(lp)[:, None] * Vp.T, proj / np.sqrt(lp), maxiter=50 * system.K)
            return x
        try:  # β has a component outside range(C): exact active-set QP (detects unboundedness)
            return ActiveSetQP(system._dense, b).solve()
        except UnboundedError as exc:
            raise InvalidParameterError(f"`beta`, `C`: {exc}") from None
    C = system._sparse
    assert C is not None  # neither diagonal nor dense: sparse
    res = minimize(
        lambda z: (-b @ z + 0.5 * z @ (C @ z), C @ z - b),
        np.zeros(system.K),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, None)] * system.K,
        options={"maxiter": 100000, "ftol": 1e-15, "gtol": 1e-12},
    )
    return res.x


def plateaus(system: LotkaVolterra, eps: float | None = None) -> Plateaus:
    """Switch-on times and plateau losses (:meth:`LotkaVolterra.plateaus`)."""
    if not system.is_diagonal:
        res = system.limit(eps)
        assert res.eps is not None  # LotkaVolterra.limit records the ε it used
        L = -np.log(res.eps)
        losses = [system.loss(np.zeros(system.K)).item()] + [system.loss(zz).item() for zz in res._z_after]
        return Plateaus(_t(res.taus.numpy() * L), res.modes, list(res.kinds), _t(losses))
    ts = system.logistic_switch_times().numpy()
    order = [int(k) for k in np.argsort(ts, kind="stable") if np.isfinite(ts[k])]
    # excess of the plateau after j switches = Σ of the not-yet-learned contributions
    # β_k²/(2 C_kk) (a reverse cumulative sum: no cancellation), plus L(z∞)
    gain = np.maximum(system._beta[order], 0.0) ** 2 / (2.0 * system._diag[order])
    excess = np.concatenate([np.cumsum(gain[::-1])[::-1], [0.0]])
    losses = system.final_loss() + excess
    return Plateaus(_t(ts[order]), torch.as_tensor(order, dtype=torch.int64), ["on"] * len(order), _t(losses))


def staircase(system: LotkaVolterra, eps: float | None = None, *, limit: bool | None = None) -> Staircase:
    """The predicted staircase of ``system`` (:meth:`LotkaVolterra.staircase`)."""
    use_limit = (not system.is_diagonal) if limit is None else bool(limit)
    if not use_limit and not system.is_diagonal:
        raise InvalidParameterError(
            "`limit=False` needs a diagonal `C` (isolated logistic modes); found an interacting C"
        )
    basis = None if system.basis is None else system.basis.numpy()
    if use_limit:
        res = system.limit(eps)
        modes = res.modes.numpy()
        levels = [system.loss(np.zeros(system.K)).item()] + [system.loss(zz).item() for zz in res._z_after]
        dirs = basis[:, modes] if basis is not None else None
        st = res.staircase(levels=levels, directions=dirs, beta=system._beta)
        # asked for the limit: method "limit"; the default reduction of interacting modes stays "lotka-volterra"
        return st if limit else dataclasses.replace(st, method="lotka-volterra")
    pl = system.plateaus(eps)
    ref = float(np.max(system._z0)) if eps is None else float(eps)
    modes = pl.modes.numpy()
    zeta = 4.0 * system._beta[modes]
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
