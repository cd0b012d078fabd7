r"""Escape times of the saddle sequence beyond leading order (experimental; see "Status").

Derivation (gradient flow ``Ẇ = −2 G(M) W``, ``M(0) = εI``, docs/theory.md §4.6)
-----------------------------------------------------------------------------
``W(t) = U(t) W(0)`` with the ``p × p`` propagator ``U̇ = −2 G(M(t)) U``,
``U(0) = I``, so ``M(t) = ε U(t) U(t)ᵀ`` *exactly*.  As ``ε → 0`` the
trajectory is a chain: plateau ``k`` (``G = G_k``, constant) and, around time
``T_{k+1}``, the heteroclinic orbit ``Φ_k(s)`` from ``M_k`` to ``M_{k+1}``
(normalised so that ``q_kᵀ(Φ_k(s) − M_k) q_k ≈ e^{4 h_k s}`` as ``s → −∞``;
``q_k`` the escape direction, ``4h_k`` the escape rate).  Hence

* on plateau ``k``, ``G_k`` maps ``range(M_k)`` to 0 and its complement to
  itself, so the *small part* ``Z = P_k U`` (``P_k`` the projector on the
  complement) evolves alone: ``Z(t + Δ) = e^{−2 P_k G_k P_k Δ} Z(t)``, and
  ``q_kᵀ M(t) q_k = ε ‖Z(t)ᵀ q_k‖²`` grows exactly like ``e^{4 h_k Δ}``;
* the drop ``k+1`` happens when that reaches the heteroclinic's normalisation:

  .. math::  T_{k+1} = t_a − \frac{1}{4h_k} \ln\big(ε\, ‖Z(t_a)ᵀ q_k‖^2\big)

  for any reference time ``t_a`` on plateau ``k``; the loss crosses
  ``(L_k + L_{k+1})/2`` at ``T_{k+1} + s^{(k)}``, with ``s^{(k)}`` read off ``Φ_k``;
* across the jump, ``Z`` is carried by the propagator ``Ψ_k`` of
  ``Ż = −2 G(Φ_k(s)) Z`` (continuously, from the reference point on the previous
  plateau to the first point where the small part grows purely exponentially,
  ``d ln a/dt = 4h`` within 2 % while ``a < 1e-2``) and projected on the new
  complement: ``Z ← P_k Ψ_{k−1} Z (I − c cᵀ)`` with ``c ∝ Zᵀ q_{k−1}``.  The
  escaping *unit* — the column combination ``c`` that carries ``q_{k−1}``, with all
  its other components — becomes the factor ``V`` of ``Φ`` (which obeys the same
  linear equation), so it is removed before the jump: the rest of that unit is a
  perturbation of ``Φ``, relaxed by the full variational dynamics, not a free
  small part.  (Removing only the ``q``-part, ``(I − q qᵀ) Z``, keeps that rest
  and makes the third drop wrong by an amount growing with ``ln(1/ε)``.)  What
  ``Ψ`` carries into ``range(M_k)`` is absorbed by the large part.

Status (validated against independent flows; numbers in docs/analyze.md)
-------------------------------------------------------------------------
* Against the exact flow (DOP853) of the correlated-input tanh MLP of
  tests/test_saddles.py, drops 2 and 3 are within 0.006 at ε = 1e-16 and 1e-24
  (leading order: 0.15 and 0.11 off); on digits drop 2 moves from 12.4 % to
  2.5 % (ε = 1e-10) and from 2.9 % to 0.13 % (ε = 1e-30) of the NQF simulation.
* A plateau shorter than the relaxation into its saddle has no stretch of pure
  exponential growth; the recursion then stops (NaN for the later drops) —
  digits' plateau 2 (``τ = 0.824 → 0.854``) at every ε reachable in float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.integrate import solve_ivp

__all__ = ["corrected_escape_times"]


def _expm_sym(G: torch.Tensor, dt: float) -> torch.Tensor:
    """``exp(−2 G dt)`` for symmetric ``G``."""
    g, U = torch.linalg.eigh(0.5 * (G + G.T))
    return (U * torch.exp(-2.0 * g * dt)) @ U.T


def _projector(V: torch.Tensor, p: int) -> torch.Tensor:
    """Projector on the complement of ``range(V)``."""
    if V.shape[1] == 0:
        return torch.eye(p, dtype=V.dtype)
    U, S, _ = torch.linalg.svd(V, full_matrices=False)
    B = U[:, S > 1e-10 * float(S[0])]
    return torch.eye(p, dtype=V.dtype) - B @ B.T


class _Jump:
    """Heteroclinic ``Φ_k`` from saddle ``k`` along its escape direction, in the normalised clock ``s``.

    ``q_kᵀ(Φ(s) − M_k) q_k ≈ e^{4 h s}`` as ``s → −∞`` (seed ``M_k + δ q qᵀ`` at
    ``s_lo = −ln(1/δ)/(4h)``); integrated until the loss has relaxed to within
    ``relax`` of the drop onto ``L_{k+1}`` (``s_hi``).  ``s_mid``: crossing of
    ``(L_k + L_{k+1})/2``.
    """

    def __init__(self, prob, sad, L_next: float, delta: float, relax: float = 1e-6, s_max: float = 40.0):
        self.prob = prob
        q = sad.escape_direction[:, :1]
        self.h = sad.escape_rate / 4.0
        p, self.k = prob.p, sad.V.shape[1] + 1
        self.shift = math.log(1.0 / delta) / (4.0 * self.h)
        V0 = torch.cat([sad.V, math.sqrt(delta) * q], 1)
        k = self.k
        target = 0.5 * (sad.loss + L_next)
        floor = L_next + relax * (sad.loss - L_next)

        def rhs(t, v):
            V = torch.from_numpy(v.reshape(p, k))
            return (-2.0 * (prob.G(V @ V.T) @ V)).reshape(-1).numpy()

        def settled(t, v):
            V = torch.from_numpy(v.reshape(p, k))
            return prob.loss(V @ V.T) - floor
        settled.terminal = True

        self.sol = solve_ivp(rhs, (0.0, self.shift + s_max), V0.reshape(-1).numpy(), method="DOP853", rtol=1e-11,
                             atol=1e-14 * math.sqrt(delta), dense_output=True, events=settled)
        self.s_lo, self.s_hi = -self.shift, float(self.sol.t[-1]) - self.shift
        ts = np.linspace(self.s_lo, self.s_hi, 801)
        Ls = np.array([self.loss(x) for x in ts])
        below = np.nonzero(Ls <= target)[0]
        self.s_mid = math.nan
        if below.size and below[0] > 0:
            a, b = ts[below[0] - 1], ts[below[0]]
            for _ in range(60):
                c = 0.5 * (a + b)
                a, b = (a, c) if self.loss(c) <= target else (c, b)
            self.s_mid = 0.5 * (a + b)

    def V(self, s: float) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self.sol.sol(s + self.shift)).reshape(self.prob.p, self.k))

    def loss(self, s: float) -> float:
        V = self.V(s)
        return self.prob.loss(V @ V.T)

    def propagate(self, U: torch.Tensor, s0: float, s1: float, n_out: int = 0):
        """``U`` carried by ``U̇ = −2 G(Φ(s)) U`` from ``s0`` to ``s1``; with ``n_out`` also the states on a grid."""
        p = self.prob.p
        prob = self.prob

        def rhs(s, u):
            V = self.V(s)
            return (-2.0 * (prob.G(V @ V.T) @ torch.from_numpy(u.reshape(p, -1)))).reshape(-1).numpy()

        grid = np.linspace(s0, s1, n_out) if n_out else None
        atol = 1e-13 * max(float(U.abs().max()), 1e-300)
        sol = solve_ivp(rhs, (s0, s1), U.reshape(-1).numpy(), method="DOP853", rtol=1e-9, atol=atol,
                        t_eval=grid)
        ncol = U.shape[1]
        states = [torch.from_numpy(sol.y[:, i].reshape(p, ncol).copy()) for i in range(sol.y.shape[1])]
        return states[-1], (sol.t, states)


def corrected_escape_times(prob, saddles, eps: float, *, delta: float = 1e-16, rate_tol: float = 0.02,
                           return_info: bool = False):
    """Midpoint-crossing times of every drop from the small-part recursion (module docstring).

    Parameters
    ----------
    prob : saddles._Problem
    saddles : list of Saddle
        The sequence (``saddles[0]`` is ``M = 0``).
    eps : float
        ``M(0) = εI``.
    delta : float
        Seed ``δ q qᵀ`` of each heteroclinic.
    rate_tol : float
        The reference time on plateau ``k`` is the first point after the drop where
        ``d ln a/dt`` is within this fraction of ``4 h_k`` (pure exponential growth of
        the small part; ``a = ε ‖Uᵀ q_k‖²``).

    Returns
    -------
    numpy.ndarray, shape (K,)
        Times at which the loss crosses ``(L_{k−1} + L_k)/2``, ``k = 1..K``; with
        ``return_info`` also a list of per-plateau notes (``"no pure growth"`` where
        the plateau is too short for the recursion).
    """
    K = len(saddles) - 1
    if K == 0:
        return (np.zeros(0), []) if return_info else np.zeros(0)
    h0 = saddles[0].escape_rate / 4.0
    T = math.log(1.0 / eps) / (4.0 * h0)           # exact normalisation of the first escape from εI
    p = prob.p
    Z, t = None, 0.0
    out, info = [], []
    for k in range(K):
        J = _Jump(prob, saddles[k], saddles[k + 1].loss, delta)
        out.append(T + J.s_mid)
        if k == K - 1:
            break
        s_from = t - T
        if Z is None:  # plateau 0 up to the seed of Φ_0: U = exp(−2 G_0 t)
            s_from = max(J.s_lo, -T)
            Z = _expm_sym(saddles[0].G, T + s_from)
        elif s_from < J.s_lo:  # still on plateau k before the seed: exact exponential
            P = _projector(saddles[k].V, p)
            Z = _expm_sym(P @ saddles[k].G @ P, J.s_lo - s_from) @ Z
            s_from = J.s_lo
        # the escaping unit joins the large part (it becomes Φ): remove the whole column combination
        # c ∝ Zᵀq that carries the escaping direction — not only its q-part: the rest of that unit is a
        # perturbation of Φ itself, relaxed by the full variational dynamics, not a free small part
        q_esc = saddles[k].escape_direction[:, :1]
        c = Z.T @ q_esc
        c = c / torch.linalg.norm(c)
        Z = Z - (Z @ c) @ c.T
        nxt = saddles[k + 1]
        q = nxt.escape_direction[:, :1]
        h = nxt.escape_rate / 4.0
        if s_from >= J.s_hi:  # the reference point is past this jump: the recursion has broken down
            info.append(f"k={k + 1}: reference point s={s_from:.3g} beyond the jump (ends {J.s_hi:.3g}); stopped")
            out.extend([math.nan] * (K - 1 - k))
            break
        _, (ss, Zs) = J.propagate(Z, s_from, J.s_hi, n_out=300)
        la = np.array([math.log(eps * float((z.T @ q).pow(2).sum())) for z in Zs])
        slope = np.gradient(la, ss)
        # reference point: a point after the drop where the small part grows purely exponentially (slope 4h,
        # ≥ 5 consecutive points) while it is still small (a < 1e-2, linear regime)
        good = (ss > J.s_mid) & (np.abs(slope - 4 * h) <= rate_tol * 4 * h) & (la < math.log(1e-2))
        run = np.convolve(good.astype(int), np.ones(5, int), mode="valid") == 5
        starts = np.nonzero(run)[0]
        if starts.size == 0:
            info.append(f"k={k + 1}: no pure exponential growth of the small part on plateau {k + 1} before it "
                        "stops being small (the plateau is shorter than the relaxation into the saddle); "
                        "later drops not predicted")
            out.extend([math.nan] * (K - 1 - k))
            break
        # the latest such point that is still small: the relaxation transient into the saddle has decayed most
        last = np.nonzero(good)[0]
        i = int(last[-1]) if last.size and last[-1] >= starts[0] else int(starts[0])
        info.append(f"k={k + 1}: pure growth from s={ss[i]:.3g} (window {ss[0]:.3g}..{ss[-1]:.3g}), "
                    f"ln a={la[i]:.3g}")
        Z = _projector(nxt.V, p) @ Zs[i]           # what went into range(M_{k+1}) is part of the large part
        t = T + float(ss[i])
        T = t - la[i] / (4.0 * h)
    return (np.array(out), info) if return_info else np.array(out)
