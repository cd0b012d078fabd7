r"""The degree-``k`` clock: dormant flows between active phases (docs/theory.md, "The degree-k clock").

Near small weights a term ``g`` of degree ``k ≥ 3`` moves dormant units by ``dW/dt = (1/N) ∇_W ⟨r, g(W)⟩``
with the residual ``r`` frozen: an ODE whose solutions blow up in finite time.  With ``W(0) = ρ W̃(0)``
(``ρ`` the largest unit norm) it is scale-free: ``W(t) = ρ W̃(ρ^{k−2} t)``, so every escape comes at
``t = ρ^{2−k} s`` — a power of ``1/ρ``, not ``ln(1/ρ)``.  Between escapes the escaped units settle
quickly (in ``O(1)`` time, nothing on this clock) at the minimum of the loss over them: the *active
phase*, which sets the next plateau and the residual the still-dormant units see next
(the alternating picture of Kunin et al. 2025 for two-layer networks).

:func:`dormant_staircase` integrates the scaled dormant flow (``scipy.integrate.solve_ivp``, an event at
a unit norm :data:`ESCAPE_NORM` times its start: the blow-up time up to a relative ``ESCAPE_NORM^{2−k}``)
and settles each active phase by gradient flow from the escaped direction, polished by L-BFGS; its result is a
:class:`nqf.reductions.Staircase` with method ``"dormant-flow"`` and time rule ``"dormant flow"``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.integrate import solve_ivp
from scipy.optimize import minimize

from ..._validation import int_param
from ...errors import InvalidParameterError, ShapeError
from .._staircase import Staircase
from ._terms import HomogeneousTerm, check_residual
from ._utility import aligned_escape_time, utility_maximum

__all__ = ["dormant_staircase", "active_fit", "active_curvature", "ESCAPE_NORM"]

#: A unit has escaped when its scaled norm reaches this multiple of the largest initial norm.
ESCAPE_NORM = 1e4
#: Relative tolerance of the dormant-flow integration.
RTOL = 1e-9


class _Polynomial(HomogeneousTerm):
    """``Σ_j g_j``: a unit's Taylor polynomial through its leading order (the lower orders a finite sample
    makes non-zero too).  Not homogeneous: ``degree`` is the top degree; used for the loss and the active
    phases, never for a scale-free flow."""

    __slots__ = ("terms",)

    def __init__(self, terms):
        top, name = terms[-1], "orders " + "+".join(str(t.degree) for t in terms)
        super().__init__(top.degree, top.p, top.N, top.C, True, name, top.dtype)
        self.terms = tuple(terms)

    def value(self, W):
        return sum((t.value(W) for t in self.terms[1:]), self.terms[0].value(W))

    def gradient(self, W, R):
        return sum((t.gradient(W, R) for t in self.terms[1:]), self.terms[0].gradient(W, R))

    def per_column(self, W, R):
        return sum((t.per_column(W, R) for t in self.terms[1:]), self.terms[0].per_column(W, R))


def _loss(term: HomogeneousTerm, W: torch.Tensor, Y: torch.Tensor) -> float:
    if W.shape[1] == 0:
        return 0.5 * float((Y * Y).sum()) / term.N
    D = term.value(W) - Y
    return 0.5 * float((D * D).sum()) / term.N


def active_fit(term: HomogeneousTerm, W: torch.Tensor, Y: torch.Tensor, *, maxiter: int = 20000) -> torch.Tensor:
    """The active phase: ``W`` carried by gradient flow on ``(1/2N)‖g(W) − Y‖²`` until the loss settles
    (``solve_ivp``; gradient flow picks the basin the network itself falls into), then polished by L-BFGS."""
    shape = tuple(W.shape)

    def fg(x):
        Wt = torch.as_tensor(x, dtype=term.dtype).reshape(shape)
        D = term.value(Wt) - Y
        g = term.gradient(Wt, D) / term.N
        return 0.5 * float((D * D).sum()) / term.N, g.reshape(-1).numpy().astype(np.float64)

    x, t = W.reshape(-1).numpy().astype(np.float64), 0.0
    loss0, g0 = fg(x)
    span = 1.0 / max(float(np.abs(g0).max()) / max(float(np.abs(x).max()), 1e-300), 1e-300)
    for _ in range(60):  # chunks of growing length until the loss no longer moves
        before = fg(x)[0]
        sol = solve_ivp(lambda _t, z: -fg(z)[1], (t, t + span), x, method="LSODA", rtol=1e-7, atol=1e-12)
        x, t = sol.y[:, -1], t + span
        after = fg(x)[0]
        if before - after <= 1e-9 * max(loss0, 1e-300):
            break
        span *= 2.0
    res = minimize(fg, x, jac=True, method="L-BFGS-B", options={"maxiter": maxiter, "gtol": 1e-13, "ftol": 1e-16})
    return torch.as_tensor(res.x, dtype=term.dtype).reshape(shape)


def _placed(term: HomogeneousTerm, u: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """``c u`` with ``c`` minimising ``‖R − c^k g(u)‖`` (``c^k = ⟨R, g(u)⟩ / ‖g(u)‖²``), ``u`` of shape (p, 1)."""
    gu = term.value(u)
    a = float((R * gu).sum()) / max(float((gu * gu).sum()), 1e-300)
    k = term.degree
    c = math.copysign(abs(a) ** (1.0 / k), a) if k % 2 else abs(a) ** (1.0 / k)
    return c * u


def active_curvature(term: HomogeneousTerm, direction, residual) -> float:
    r"""Curvature of the loss along an escape direction at the best scale: ``k² c^{2k−2} ‖g(u)‖²/N``.

    ``c`` minimises ``(1/2N)‖r − c^k g(u)‖²`` (``u`` the unit direction); the Gauss–Newton curvature in ``c``
    there is the scale of the first active phase's Hessian, which sets a stable GD step when the quadratic
    form's escape rates are zero.
    """
    R = check_residual(term, residual)
    u = torch.as_tensor(direction, dtype=term.dtype).reshape(term.p, 1)
    u = u / u.norm().clamp_min(1e-300)
    c = abs(float(_placed(term, u, R).norm()))
    gu = term.value(u)
    k = term.degree
    return k * k * c ** (2 * k - 2) * float((gu * gu).sum()) / term.N


def _flow_until_escape(term, R, Wd: torch.Tensor, s0: float, s_max: float):
    """Integrate the scaled dormant flow of the columns ``Wd`` from ``s0``; ``(s, W, escaped column)`` at the
    first column reaching :data:`ESCAPE_NORM` × the largest start norm, or ``None`` past ``s_max``."""
    shape = tuple(Wd.shape)
    start = float(Wd.norm(dim=0).max())
    limit = ESCAPE_NORM * start

    def rhs(_s, x):
        W = torch.as_tensor(x, dtype=term.dtype).reshape(shape)
        return (term.gradient(W, R) / term.N).reshape(-1).numpy()

    def event(_s, x):
        return float(np.sqrt((x.reshape(shape) ** 2).sum(0)).max()) - limit

    event.terminal, event.direction = True, 1
    sol = solve_ivp(
        rhs,
        (s0, s_max),
        Wd.reshape(-1).numpy().astype(np.float64),
        method="RK45",
        rtol=RTOL,
        atol=1e-12 * start,
        events=event,
    )
    if not sol.t_events[0].size:
        return None
    W = torch.as_tensor(sol.y_events[0][0], dtype=term.dtype).reshape(shape)
    return float(sol.t_events[0][0]), W, int(torch.argmax(W.norm(dim=0)))


def _taylor_crossing(whole: HomogeneousTerm, Y: torch.Tensor, W0: torch.Tensor, level: float, t_max: float):
    """Gradient flow of the Taylor polynomial ``whole`` on ``(1/2N)‖Y − whole(W)‖²`` from ``W0``: ``(t, W)`` where
    the loss first falls to ``level``, or ``None`` past ``t_max``.  Every order's output is in the residual, so
    what the lower orders fit (a finite sample's spurious correlation) settles, and their self-interaction
    competes with the leading order's growth as in the network."""
    shape = tuple(W0.shape)

    def rhs(_t, x):
        W = torch.as_tensor(x, dtype=whole.dtype).reshape(shape)
        return (whole.gradient(W, Y - whole.value(W)) / whole.N).reshape(-1).numpy()

    def event(_t, x):
        return _loss(whole, torch.as_tensor(x, dtype=whole.dtype).reshape(shape), Y) - level

    event.terminal, event.direction = True, -1
    x0 = W0.reshape(-1).numpy().astype(np.float64)
    scale = float(np.abs(x0).max())
    sol = solve_ivp(rhs, (0.0, t_max), x0, method="RK45", rtol=RTOL, atol=1e-12 * scale, events=event)
    if not sol.t_events[0].size:
        return None
    return float(sol.t_events[0][0]), torch.as_tensor(sol.y_events[0][0], dtype=whole.dtype).reshape(shape)


def _check_lower(term: HomogeneousTerm, lower) -> tuple:
    lower = tuple(sorted(lower, key=lambda t: t.degree))
    for t in lower:
        if not isinstance(t, HomogeneousTerm) or not t.additive or (t.p, t.N, t.C) != (term.p, term.N, term.C):
            raise InvalidParameterError(
                f"`lower` must hold additive HomogeneousTerms of the same units and data as `term` "
                f"(p, N, C) = ({term.p}, {term.N}, {term.C}); found {t!r}"
            )
        if t.degree >= term.degree:
            raise InvalidParameterError(f"`lower` must hold orders below {term.degree}; found {t!r}")
    return lower


def _order_two_rate(lower, R, seed: int) -> float:
    """``ζ = 2U*₂``: the order-2 rate of the best dormant direction (0 when ``lower`` has no order 2)."""
    two = [t for t in lower if t.degree == 2]
    return 2.0 * max(utility_maximum(two[0], R, seed=seed).value, 0.0) if two else 0.0


def _escapes(eps: float, p: int, rule: str, found: dict, notes: list, *, shift: float, minimum: bool) -> Staircase:
    """The :class:`Staircase` of a dormant staircase from its per-escape lists (``found``: ``levels``, ``times``,
    ``leading``, ``rates``, ``dirs``, ``modes``), every level shifted by ``shift``."""
    K = len(found["times"])
    return Staircase(
        method="dormant-flow",
        eps=eps,
        levels=np.array(found["levels"]) + shift,
        times=np.array(found["times"]),
        time_rules=(rule,) * K,
        times_leading=np.array(found["leading"]),
        rates=np.array([*found["rates"], 0.0]),
        ranks=np.arange(K + 1),
        directions=np.array(found["dirs"]).T.reshape(p, K),
        modes=np.array(found["modes"], dtype=np.int64),
        global_minimum=minimum,
        notes=tuple(notes),
    )


def _taylor_first(term: HomogeneousTerm, lower: tuple, Y: torch.Tensor, W0: torch.Tensor, eps: float, seed: int, shift):
    """The first escape when orders below ``k`` are non-zero: the level after it from the active fit of the whole
    polynomial at the order-``k`` maximiser, its time from the polynomial's gradient flow (time rule
    ``"Taylor flow"``)."""
    k, whole = term.degree, _Polynomial((*lower, term))
    none = torch.zeros(term.p, 0, dtype=term.dtype)
    notes = [
        f"orders {', '.join(str(t.degree) for t in lower)} below k = {k} are non-zero on these data: the time is the "
        "midpoint crossing of the Taylor polynomial's gradient flow, not a power of ρ; only the first escape"
    ]
    L0, best = _loss(whole, none, Y), utility_maximum(term, Y, seed=seed)
    rho = float(W0.norm(dim=0).max())
    times, leading, rates, dirs, modes, levels = [], [], [], [], [], [L0]
    if best.carries_signal:
        u = torch.as_tensor(best.direction, dtype=term.dtype)[:, None]
        # from the order-k term's best scale: started below it, the flow fits the lower orders' spurious part and stops
        L1 = _loss(whole, active_fit(whole, _placed(term, u, Y), Y), Y)
        zeta = _order_two_rate(lower, Y, seed)
        t_lead = aligned_escape_time(k, best.value, rho, rate=zeta)
        hit = _taylor_crossing(whole, Y, W0, 0.5 * (L0 + L1), 1e3 * t_lead) if L1 < L0 else None
        if L1 >= L0:
            notes.append(f"the polynomial's fit from the order-{k} maximiser ({L1:.4g}) is not below the start")
        elif hit is None:
            notes.append(f"the Taylor flow did not fall halfway to {L1:.4g} before t = {1e3 * t_lead:.4g}")
        else:
            t, W = hit
            j = int(torch.argmax(W.norm(dim=0) / W0.norm(dim=0).clamp_min(1e-300)))
            uj = W[:, j : j + 1] / W[:, j].norm()
            times, levels, modes, dirs = [t], [L0, L1], [j], [uj[:, 0].numpy()]
            leading = [aligned_escape_time(k, best.value, float(W0[:, j].norm()), rate=zeta)]
            rates = [k * float(term.per_column(uj, Y)) / term.N]
    else:
        notes.append(f"no dormant unit grows at order {k} (largest utility at round-off)")
    found = dict(levels=levels, times=times, leading=leading, rates=rates, dirs=dirs, modes=modes)
    return _escapes(eps, term.p, "Taylor flow", found, notes, shift=shift, minimum=False)


def dormant_staircase(
    term: HomogeneousTerm,
    targets,
    W0,
    eps: float,
    *,
    max_drops: int | None = None,
    level_shift: float = 0.0,
    lower=(),
    seed: int = 0,
) -> Staircase:
    r"""The staircase of units that start dormant at a term of degree ``k ≥ 3`` (module docstring).

    Parameters
    ----------
    term : HomogeneousTerm
        Additive over units (:func:`unit_term`), degree 3 or more.
    targets : array_like, shape (N,) or (N, C)
        ``y − f(0)``.
    W0 : array_like, shape (p, m)
        The actual initial unit weights (whatever their scale): the times are for this start.
    eps : float
        The initial scale the staircase is labelled with (``Staircase.eps``); the times do not use it.
    max_drops : int, optional
        Stop after this many escapes (default: one per unit).
    level_shift : float
        Added to every level (the loss of what the units cannot fit, e.g. outputs outside the term).
    lower : sequence of HomogeneousTerm
        Orders below ``k`` of the same units that are non-zero on these data (e.g. ``unit_term(op, 2)`` when a
        finite sample gives the quadratic form a small spurious rate, as for a sparse parity).  Then the
        first escape only: its level from the active fit of the Taylor polynomial through order ``k`` at the
        order-``k`` maximiser, its time the midpoint crossing of that polynomial's gradient flow from ``W0``
        (rule ``"Taylor flow"``; every order's output in the residual).  Not a power of ``ρ``.

    Returns
    -------
    Staircase
        ``method = "dormant-flow"``; ``times`` by the scaled dormant flow (rule ``"dormant flow"``),
        ``times_leading`` the aligned start's blow-up time of the escaping unit
        (:func:`aligned_escape_time`, with the order-2 rate when ``lower`` holds it), ``rates`` the
        ``k U*`` of each escape, ``modes`` the index of the unit that escapes, ``ranks`` the active units.
    """
    if not isinstance(term, HomogeneousTerm) or not term.additive or term.degree < 3:
        raise InvalidParameterError(
            f"`term` must be an additive HomogeneousTerm of degree ≥ 3 (unit_term(higher, 3 or 4)); found {term!r}"
        )
    Y = check_residual(term, targets)
    lower = _check_lower(term, lower)
    W0 = torch.as_tensor(W0, dtype=term.dtype)
    if W0.ndim != 2 or W0.shape[0] != term.p or W0.shape[1] == 0:
        raise ShapeError(f"`W0` must have shape (p, m) with p = {term.p}, m ≥ 1; found {tuple(W0.shape)}")
    k, m = term.degree, W0.shape[1]
    rho = float(W0.norm(dim=0).max())
    if not rho > 0:
        raise InvalidParameterError("`W0` must have a unit of non-zero norm; found all zero")
    if max_drops is not None:
        int_param("max_drops", max_drops, minimum=1)
    if lower:  # the first escape only, within any max_drops ≥ 1
        return _taylor_first(term, lower, Y, W0, eps, seed, level_shift)
    limit = m if max_drops is None else min(m, int(max_drops))
    Wd, active = W0 / rho, torch.zeros(term.p, 0, dtype=term.dtype)
    dormant = list(range(m))
    s, R = 0.0, Y.clone()
    levels, times, leading, rates, dirs, modes, notes = [_loss(term, active, Y)], [], [], [], [], [], []
    while len(times) < limit and dormant:
        best = utility_maximum(term, R, seed=seed)
        if not best.carries_signal:
            notes.append(f"no dormant unit grows at order {k} on the residual (largest utility at round-off)")
            break
        scale = float(Wd.norm(dim=0).max())
        horizon = s + 1e3 * aligned_escape_time(k, best.value, scale) + 1e3 * s
        hit = _flow_until_escape(term, R, Wd, s, horizon)
        if hit is None:
            notes.append(f"no dormant unit escaped before t = {rho ** (2 - k) * horizon:.4g} (the flow's horizon)")
            break
        s, Wd, j = hit
        u = Wd[:, j : j + 1] / Wd[:, j].norm()
        util = float(term.per_column(u, R)) / term.N
        active = active_fit(term, torch.cat([active, 0.1 * _placed(term, u, R)], 1), Y)
        R = Y - term.value(active)
        unit = dormant.pop(j)
        Wd = torch.cat([Wd[:, :j], Wd[:, j + 1 :]], 1)
        times.append(rho ** (2 - k) * s)
        leading.append(aligned_escape_time(k, best.value, float(W0[:, unit].norm())))
        rates.append(k * util)
        dirs.append(u[:, 0].numpy())
        modes.append(unit)
        levels.append(_loss(term, active, Y))
        if levels[-1] <= 1e-12 * levels[0]:
            break
    notes.append(f"order k = {k}: every time scales as ρ^{2 - k} with the initial unit norm ρ (here {rho:.3g})")
    found = dict(levels=levels, times=times, leading=leading, rates=rates, dirs=dirs, modes=modes)
    minimum = bool(times and levels[-1] <= 1e-12 * levels[0])
    return _escapes(eps, term.p, "dormant flow", found, notes, shift=level_shift, minimum=minimum)
