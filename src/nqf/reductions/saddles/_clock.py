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

from ...errors import InvalidParameterError
from .._timing import leading_switch_time, midpoint_levels
from ._orbit import Heteroclinic, solve_in_segments

__all__ = ["corrected_escape_times", "heteroclinic_chain", "composite_loss", "predicted_escape_times", "TIME_RULES"]


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


def start_factor(p: int, eps: float, M0=None) -> torch.Tensor:
    """A factor ``B`` of the start, ``M(0) = B Bᵀ``: ``√ε I`` for ``εI``, else the non-zero eigenpairs of ``M0``."""
    if M0 is None:
        return math.sqrt(eps) * torch.eye(p, dtype=torch.float64)
    M = torch.as_tensor(M0, dtype=torch.float64)
    lam, V = torch.linalg.eigh(0.5 * (M + M.T))
    keep = lam > 1e-12 * float(lam.abs().max())
    return V[:, keep] * lam[keep].sqrt()


def seed_size(q: torch.Tensor, B: torch.Tensor) -> float:
    """``qᵀ M0 q = ‖Bᵀ q‖²``: the size the start gives direction ``q`` (``ε`` for ``M0 = εI``)."""
    return float((B.T @ q).pow(2).sum())


def _jump(
    prob, sad, L_next: float, delta: float, relax: float = 1e-6, s_max: float = 40.0, rtol: float = 1e-11
) -> Heteroclinic:
    """Heteroclinic ``Φ_k`` from saddle ``k`` along its (first) escape direction, in the normalised clock ``s``.

    Integrated until the loss has relaxed to within ``relax`` of the drop onto ``L_{k+1}``
    (``s_hi``); ``s_mid`` is the crossing of ``(L_k + L_{k+1})/2``.
    """
    J = Heteroclinic(
        prob,
        sad.V,
        sad.escape_direction[:, :1],
        sad.escape_rate / 4.0,
        L_next + relax * (sad.loss - L_next),
        delta=delta,
        rtol=rtol,
        atol_scale=1e-14,
        s_max=s_max,
        n_grid=801,
        mid_level=float(midpoint_levels([sad.loss, L_next])[0]),
    )
    return J


def _propagate(J: Heteroclinic, U: torch.Tensor, s0: float, s1: float, n_out: int = 0):
    """``U`` carried by ``U̇ = −2 G(Φ(s)) U`` from ``s0`` to ``s1``; with ``n_out`` also the states on a grid."""
    p = J.p
    prob = J.prob

    def rhs(s, u):
        V = J.V(s)
        return (-2.0 * (prob.G(V @ V.T) @ torch.from_numpy(u.reshape(p, -1)))).reshape(-1).numpy()

    def solve(t0, y, atol, events):
        return solve_ivp(rhs, (t0, s1), y, method="DOP853", rtol=1e-9, atol=atol, events=events, dense_output=True)

    # atol 1e-13 of the current size: the propagator grows like e^{4h s} along escape directions, and a fixed
    # atol would fall below the round-off of the grown entries (steps collapse; wine with a hidden bias)
    sol = solve_in_segments(solve, s0, s1, U.reshape(-1).numpy(), atol_min=0.0, atol_rel=1e-13)
    ncol = U.shape[1]
    grid = np.linspace(s0, sol.t_end, n_out) if n_out else np.array([sol.t_end])
    states = [torch.from_numpy(sol(si).reshape(p, ncol).copy()) for si in grid]
    return states[-1], (grid, states)


def corrected_escape_times(
    prob,
    saddles,
    eps: float,
    *,
    delta: float = 1e-16,
    rate_tol: float = 0.02,
    return_info: bool = False,
    chain: list | None = None,
    M0=None,
):
    """Midpoint-crossing times of every drop from the small-part recursion (module docstring).

    Parameters
    ----------
    prob : LossProblem
    saddles : list of Saddle
        The sequence (``saddles[0]`` is ``M = 0``).
    eps : float
        ``M(0) = εI``.
    delta : float
        Seed ``δ q qᵀ`` of each heteroclinic.
    M0 : torch.Tensor, shape (p, p), optional
        A start other than ``εI`` (a width ``m < p`` starts from ``εΠ``, ``Π`` of rank ``m``): the recursion
        runs on a factor ``B`` of ``M0 = B Bᵀ`` in place of ``√ε I`` (``M(t) = U B Bᵀ Uᵀ`` exactly), so the
        first escape is normalised by ``q_0ᵀ M0 q_0`` and every later one by what the start put in its
        direction.
    chain : list, optional
        :func:`heteroclinic_chain` of the same sequence and ``delta`` (reused, not integrated again; its
        ``rtol = 1e-8`` gives the same times as 1e-11 to 1e-5 on digits and wine).
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
    p = prob.p
    B = start_factor(p, eps, M0)
    # exact normalisation of the first escape: q_0ᵀ M(t) q_0 = e^{4 h_0 t} q_0ᵀ M0 q_0 in the linear regime
    seed = seed_size(saddles[0].escape_direction[:, :1], B)
    if not 0.0 < seed < 1.0:  # nothing to escape from, or a start not small along the first escape: no plateau
        raise InvalidParameterError(
            f"`M0` must be small and non-zero along the first escape direction q_0 (0 < q_0ᵀ M0 q_0 < 1); "
            f"found {seed:.4g}"
        )
    T = float(leading_switch_time(4.0 * h0, seed))
    Z, t = None, 0.0
    out, info = [], []
    for k in range(K):
        J = chain[k] if chain is not None else _jump(prob, saddles[k], saddles[k + 1].loss, delta)
        out.append(T + J.s_mid)
        if k == K - 1:
            break
        s_from = t - T
        if Z is None:  # plateau 0 up to the seed of Φ_0: U = exp(−2 G_0 t)
            s_from = max(J.s_lo, -T)
            Z = _expm_sym(saddles[0].G, T + s_from) @ B
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
        _, (ss, Zs) = _propagate(J, Z, s_from, J.s_hi, n_out=300)
        la = np.array([math.log(float((z.T @ q).pow(2).sum())) for z in Zs])
        slope = np.gradient(la, ss)
        # reference point: a point after the drop where the small part grows purely exponentially (slope 4h,
        # ≥ 5 consecutive points) while it is still small (a < 1e-2, linear regime)
        good = (ss > J.s_mid) & (np.abs(slope - 4 * h) <= rate_tol * 4 * h) & (la < math.log(1e-2))
        run = np.convolve(good.astype(int), np.ones(5, int), mode="valid") == 5
        starts = np.nonzero(run)[0]
        if starts.size == 0:
            info.append(
                f"k={k + 1}: no pure exponential growth of the small part on plateau {k + 1} before it "
                "stops being small (the plateau is shorter than the relaxation into the saddle); "
                "later drops not predicted"
            )
            out.extend([math.nan] * (K - 1 - k))
            break
        # the latest such point that is still small: the relaxation transient into the saddle has decayed most
        last = np.nonzero(good)[0]
        i = int(last[-1]) if last.size and last[-1] >= starts[0] else int(starts[0])
        info.append(f"k={k + 1}: pure growth from s={ss[i]:.3g} (window {ss[0]:.3g}..{ss[-1]:.3g}), ln a={la[i]:.3g}")
        Z = _projector(nxt.V, p) @ Zs[i]  # what went into range(M_{k+1}) is part of the large part
        t = T + float(ss[i])
        T = t - la[i] / (4.0 * h)
    return (np.array(out), info) if return_info else np.array(out)


def heteroclinic_chain(seq, *, delta: float = 1e-16, s_max: float = 40.0, rtol: float = 1e-11) -> list:
    """The orbits ``Φ_0 … Φ_{K−1}`` of a :class:`SaddleSequence` (independent of ``ε``: build once, share).

    ``Φ_k`` runs from saddle ``k`` to ``k + 1`` in the normalised clock ``s``
    (module docstring), integrated (DOP853, relative tolerance ``rtol``; the clock
    of :func:`corrected_escape_times` uses 1e-11, loss values on a plateau need far
    less) until the loss is within ``1e-6`` of the drop from ``L_{k+1}`` or to
    ``s = s_max``.
    """
    prob, saddles = seq._problem, seq.saddles
    return [
        _jump(prob, saddles[k], saddles[k + 1].loss, delta, s_max=s_max, rtol=rtol) for k in range(len(saddles) - 1)
    ]


def composite_loss(chain, levels, times, t) -> np.ndarray:
    r"""Finite-``ε`` loss on each plateau of the saddle sequence from its heteroclinic orbits.

    For ``t`` on plateau ``k`` (``t_k ≤ t < t_{k+1}``, ``t_0 = 0``, ``t_{K+1} = ∞``):

    .. math::  L(t) = L_k + \big[L(Φ_{k−1}(t − t_k + s^{(k−1)}_{mid})) − L_k\big]
                          + \big[L(Φ_k(t − t_{k+1} + s^{(k)}_{mid})) − L_k\big]

    (``t_k`` the predicted midpoint crossing of drop ``k``, ``s^{(k)}_{mid}`` the
    crossing on ``Φ_k``; the first bracket absent for ``k = 0``, the second for
    ``k = K``): the level ``L_k``, the tail of the *incoming* orbit — the relaxation
    into saddle ``k``, slow where the loss has a small positive curvature there
    (rate ≈ 0.08 into wine's first saddle against an escape rate of 2.0, so that
    its plateau is still relaxing at every practical ``ε``) — and the start of the
    *outgoing* one.  The matched-asymptotics composite (docs/theory.md §4.6):
    exact as ``ε → 0`` at a fixed distance from the drops.  An orbit's tail is
    counted on its own plateau only: what is left of it at the next jump is
    carried by the variational flow along ``Φ_k``, not by ``Φ_{k−1}`` (summing all
    tails over the run puts wine's final level 25 % too high).  Errors at finite
    ``ε``: the ``O(1)`` error of the placed times, and orbits that overlap (a
    plateau shorter than both tails: the sum of the two deviations is not the
    joint one).  Outside an orbit's integrated range its loss is held at the end
    value (``L_j`` up to ``δ`` before the seed; the last value after ``s_max``).

    Parameters
    ----------
    chain : list
        From :func:`heteroclinic_chain`.
    levels : array_like, shape (K + 1,)
        ``L_0 … L_K``.
    times : array_like, shape (K,)
        Predicted midpoint crossings of the drops at the ``ε`` of interest.
    t : array_like, shape (T,)

    Returns
    -------
    numpy.ndarray, shape (T,)
    """
    levels = np.asarray(levels, dtype=float)
    times = np.asarray(times, dtype=float)
    t = np.atleast_1d(np.asarray(t, dtype=float))
    K = len(chain)
    plateau = np.searchsorted(times, t, side="right")
    out = levels[plateau].copy()
    for i, (x, k) in enumerate(zip(t, plateau, strict=True)):
        for j in (k - 1, k):
            if 0 <= j < K:
                J = chain[j]
                s = min(max(float(x) - times[j] + J.s_mid, J.s_lo), J.s_hi)
                out[i] += J.loss(s) - levels[k]
    return out


#: Labels of the rule behind each predicted drop time (:func:`predicted_escape_times`).
TIME_RULES = ("exact offset", "O(1) recursion", "leading order")


def predicted_escape_times(seq, eps: float, *, chain: list | None = None, M0=None, recursion: bool = True):
    """The best available drop times at ``ε`` and the rule behind each.

    Drop 1: ``ln(1/ε)/(4h_0) + s_mid`` (exact offset); later drops: the
    small-part recursion (:func:`corrected_escape_times`) where it is finite,
    else the leading order ``τ_k ln(1/ε)`` (:meth:`SaddleSequence.escape_times`).

    Parameters
    ----------
    seq : SaddleSequence
    eps : float
    chain : list, optional
        :func:`heteroclinic_chain` of ``seq`` (reused).
    M0 : torch.Tensor, shape (p, p), optional
        A start other than ``εI`` (:func:`corrected_escape_times`); the first drop is normalised by
        ``q_0ᵀ M0 q_0``, the leading order of a later one is ``τ_k ln(1/ε_k)`` with ``ε_k = q_kᵀ M0 q_k`` the size
        the start gives its escape direction (``ε`` for ``M0 = εI``).
    recursion : bool
        False: the later drops at leading order only (no heteroclinic integration).

    Returns
    -------
    times : numpy.ndarray, shape (K,)
    rules : tuple of str
        One of :data:`TIME_RULES` per drop.
    """
    lead = np.asarray(seq.escape_times(eps), dtype=float)
    if M0 is not None and lead.size:  # each drop from the size the start gives its direction, not ε
        B = start_factor(seq.saddles[0].escape_direction.shape[0], eps, M0)
        q0 = seq.saddles[0].escape_direction[:, :1]
        lead[0] += math.log(eps / seed_size(q0, B)) / float(seq.escape_rates[0])
        for k in range(1, lead.size):  # leading order τ_k ln(1/ε_k), ε_k = q_kᵀ M0 q_k of its escape direction
            size = seed_size(seq.saddles[k].escape_direction[:, :1], B)
            if 0.0 < size < 1.0:
                lead[k] *= math.log(1.0 / size) / math.log(1.0 / eps)
    first = TIME_RULES[0] if np.isfinite(seq.first_offset) else TIME_RULES[2]
    if lead.size <= 1 or not recursion:  # drop 1 has its exact offset already; the recursion serves later drops
        return lead, tuple(first if k == 0 else TIME_RULES[2] for k in range(lead.size))
    corr = corrected_escape_times(seq._problem, seq.saddles, eps, chain=chain, M0=M0)
    ok = np.isfinite(corr)
    ok[0] = False  # drop 1: the exact offset of escape_times (the same time)
    times = np.where(ok, corr, lead)
    rules = tuple(first if k == 0 else TIME_RULES[1] if ok[k] else TIME_RULES[2] for k in range(lead.size))
    return times, rules
