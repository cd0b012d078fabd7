r"""Alternating Gradient Flows for a layer whose units start small at order two (Kunin et al., NeurIPS 2025).

AGF alternates two steps.  **Utility maximisation** over the dormant units: at order two a dormant unit of
direction ``u`` grows with the NQF's rate, ``d ln ‖w‖²/dt = −4 uᵀ G(r) u`` with ``G(r) = 𝒜*(r)/N`` at the
residual ``r`` the active units leave; with ``r`` fixed the dormant weights follow the linear flow
``W_d(τ) = e^{−2Gτ} W_d(0)`` exactly, and they turn towards the directions of largest utility ``−uᵀGu``.
**Cost minimisation** over the active units: once dormant weight along a direction ``u`` has grown to the
strength ``c_u = ⟨−r, a(u)⟩ / ‖a(u)‖²`` (``a(u)_n = uᵀ A_n u``: the strength at which that direction alone would
fit the residual best), the direction *activates*; the module's own loss is minimised over the active span and
sets the next residual.  The cost step takes no time on this clock.

This implementation is the collective, small-initialisation form for a layer of interchangeable units: all
dormant units grow along the same eigendirections of ``G``, so a direction activates with every unit's
component along it (its strength is the dormant part's ``‖uᵀ W_d‖²``), as the units of a wide network do; the
activated direction is cut into the module's parameter blocks (a unit's input and output weights may move
apart) and the module minimises its loss over ``W = Q C`` from where the units are, by L-BFGS, with ``C``
(r × m) and the span ``Q`` (p × r, each column inside its block) both free: the active part keeps its rank, and
its directions may turn (on non-commuting data the escaping direction is not the saddle's; with ``Q`` held at
the utility's maximiser the rank-4 teacher's first level stays at 0.71 where the network reaches 0.32).
The escape times are AGF's: ``τ = ln(c_u / σ_u) / ζ_u`` per phase, ``ζ_u = −4 uᵀ G u``,
``σ_u`` the dormant strength along ``u`` at the phase's start.  For one decoupled mode the strength is logistic,
so this is the time at which it is half learned, and the loss crosses its midpoint ``ln(1 + √2)/ζ`` earlier.

:func:`agf_staircase` returns a :class:`nqf.reductions.Staircase` with method ``"agf"`` and time rule
``"AGF"``; its levels are the module's own (the cost steps'), not the NQF's.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import minimize

from ...dynamics import as_loss
from ...errors import InvalidParameterError, InvalidTypeError, ShapeError
from ...modules import UnitLayout, UnitScatter
from ...structure import StructureOperator
from .._staircase import Staircase

__all__ = ["agf_staircase"]

#: L-BFGS iterations of a cost step.  A tanh unit's scale-trading directions are slow: on the demo's set-up
#: (width 36) 1000 iterations leave the levels within 10⁻⁵ of L_0 of 5000 iterations' (times unchanged to
#: 10⁻⁸) at a quarter of the cost.
COST_ITERATIONS = 1000
#: A level below this fraction of ``L_0`` is the global minimum: L-BFGS in float64 places a minimum to about
#: ``√u`` (``u`` the unit round-off) in the weights, and what is left of the residual below that is the cost
#: step's own inexactness, whose tiny utilities would only send further directions to absurd times.
NEGLIGIBLE = math.sqrt(float(np.finfo(np.float64).eps))


def agf_staircase(
    op: StructureOperator,
    module: torch.nn.Module,
    units: UnitLayout,
    X,
    y,
    W0,
    *,
    eps: float,
    max_drops: int | None = None,
    cost_step: bool = True,
) -> Staircase:
    r"""AGF's staircase of ``module``'s units on ``(X, y)`` from ``W0`` (module docstring); MSE loss.

    Parameters
    ----------
    op : StructureOperator
        The NQF of the units on ``X`` (zero-gradient condition: ``∇L = 2 G W``), the utility's order-two term.
    module : torch.nn.Module
        The real module: the cost steps minimise its loss (never changed; evaluated with the units set).
    units : UnitLayout
    X : torch.Tensor, shape (N, ...)
    y : array_like, shape (N, C)
    W0 : array_like, shape (p, m)
        The units' initial weights (any scale: the times are for this start).
    eps : float
        The label of the staircase (``Staircase.eps``).
    max_drops : int, optional
        Stop after this many activations (default: until the span is full or the loss is 0).
    cost_step : bool
        ``False`` skips the cost minimisation (the activated units stay where they are): for planted-error
        tests only.

    Returns
    -------
    Staircase
        ``method = "agf"``, ``times`` AGF's (rule ``"AGF"``), ``levels`` the module's loss after each cost step,
        ``rates`` the activated directions' ``ζ_u``, ``directions`` the activated ``u``.
    """
    if not isinstance(op, StructureOperator) or not op.satisfies_zgz:
        raise InvalidTypeError(f"`op` must be a StructureOperator with the zero-gradient condition; found {op!r}")
    if not isinstance(module, torch.nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    dt = op.dtype
    scatter = UnitScatter(module, units)
    W = torch.as_tensor(W0, dtype=dt)
    if W.shape != (op.p, scatter.m) or scatter.p != op.p:
        raise ShapeError(f"`W0` must have shape (p, m) = ({op.p}, {scatter.m}); found {tuple(W.shape)}")
    X = torch.as_tensor(X, dtype=dt)
    N = int(X.shape[0])
    with torch.no_grad():
        f0 = scatter.module_output(module, torch.zeros_like(W), X)
    mse = as_loss("mse")
    yt = mse.prepare(y, N, f0.shape[1], dt, op.device)
    limit = op.p if max_drops is None else int(max_drops)
    if limit < 1:
        raise InvalidParameterError(f"`max_drops` must be ≥ 1; found {max_drops!r}")

    def outputs(Wa):
        return scatter.module_output(module, Wa, X)

    def level(Wa) -> float:
        with torch.no_grad():
            return float(mse.value(outputs(Wa), yt))

    span, S, Wd = torch.zeros(op.p, 0, dtype=dt), torch.zeros_like(W), W.clone()
    with torch.no_grad():
        scale = float(
            torch.linalg.eigvalsh(_G(op, mse.residual(outputs(S), yt), span)).abs().max()
        )  # G's size at the start
    t, levels, times, rates, dirs, modes, notes = 0.0, [level(S)], [], [], [], [], []
    while len(times) < limit and span.shape[1] < op.p:
        with torch.no_grad():
            r = mse.residual(outputs(S), yt)
        phase = _next_activation(op, r, Wd, span, scale)
        if phase is None:
            notes.append("no dormant direction grows on the residual of the active units")
            break
        tau, u, zeta, j = phase
        t += tau
        Wd = _dormant_flow(op, r, Wd, span, tau)
        new = _blocks(u, span, scatter)
        S, Wd = S + new @ (new.T @ Wd), Wd - new @ (new.T @ Wd)
        span = torch.cat([span, new], 1)
        if cost_step:
            S, span = _cost_step(lambda Wa: mse.value(outputs(Wa), yt), S, span)
            Wd = Wd - span @ (span.T @ Wd)  # the active directions may have turned: dormant stays off them
        levels.append(level(S))
        times.append(t)
        rates.append(zeta)
        dirs.append(u.numpy())
        modes.append(j)
        if levels[-1] <= NEGLIGIBLE * levels[0]:
            break
    K = len(times)
    return Staircase(
        method="agf",
        eps=eps,
        levels=np.array(levels),
        times=np.array(times),
        time_rules=("AGF",) * K,
        times_leading=np.array(times),
        rates=np.array([*rates, 0.0]),
        ranks=np.arange(K + 1),
        directions=np.array(dirs).T.reshape(op.p, K),
        modes=np.array(modes, dtype=np.int64),
        global_minimum=bool(K and levels[-1] <= NEGLIGIBLE * levels[0]),
        notes=tuple(notes),
    )


def _G(op: StructureOperator, r: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """``P G(r) P`` (p × p, symmetric), ``P`` the projector off the active span."""
    G = op.adjoint(r.reshape(r.shape[0], -1)) / r.shape[0]
    P = torch.eye(op.p, dtype=op.dtype) - span @ span.T
    G = P @ (0.5 * (G + G.T)) @ P
    return 0.5 * (G + G.T)


def _next_activation(op, r, Wd, span, scale: float):
    """``(τ, u, ζ_u, index)`` of the first direction to reach its strength ``c_u`` (module docstring), or None.

    A rate counts only above the round-off of ``G``'s eigenvalues at the start (``scale`` their largest size):
    once the residual is spent, what is left grows at rates that are noise on that scale."""
    g, U = torch.linalg.eigh(_G(op, r, span))
    floor = 4.0 * 100 * op.p * torch.finfo(g.dtype).eps * scale
    best = None
    for j in range(g.shape[0]):
        zeta = -4.0 * float(g[j])
        if zeta <= floor:
            break  # ascending: the rest do not grow (or only at round-off)
        u = U[:, j]
        a = op.forward_factor(u[:, None]).reshape(r.shape)
        c = float((-r * a).sum()) / max(float((a * a).sum()), 1e-300)
        sigma = float((u @ Wd).pow(2).sum())
        if not (c > 0.0 and sigma > 0.0):
            continue
        tau = max(0.0, math.log(c / sigma) / zeta)
        if best is None or tau < best[0]:
            best = (tau, u, zeta, j)
    return best


def _dormant_flow(op, r, Wd, span, tau: float) -> torch.Tensor:
    """``e^{−2Gτ} W_d`` (the dormant units' exact linear flow at the fixed residual ``r``)."""
    g, U = torch.linalg.eigh(_G(op, r, span))
    return U @ (torch.exp(-2.0 * g * tau)[:, None] * (U.T @ Wd))


def _blocks(u: torch.Tensor, span: torch.Tensor, scatter: UnitScatter) -> torch.Tensor:
    """``u`` cut into the module's parameter blocks (each block's rows), less the span, orthonormal columns."""
    cols = []
    for rows, _ in scatter.rows.values():
        c = torch.zeros_like(u)
        c[rows] = u[rows]
        for q in [*span.T, *cols]:
            c = c - (q @ c) * q
        n = float(c.norm())
        if n > 1e-8 * float(u.norm()):
            cols.append(c / n)
    return torch.stack(cols, 1) if cols else span[:, :0]


def _cost_step(loss_of, S: torch.Tensor, span: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's loss minimised over the active part ``W = Q C`` from ``S``, ``Q`` (p × r) and ``C`` (r × m) both
    free, each column of ``Q`` inside its parameter block (L-BFGS): the active units' weights move freely within
    rank ``r`` — on non-commuting data the directions turn during the switch.  Returns ``(W, the new span)``."""
    r, m, dt = span.shape[1], S.shape[1], S.dtype
    mask = (span != 0).to(dt)
    nq = span.numel()

    def unpack(x):
        z = torch.as_tensor(x, dtype=dt)
        return z[:nq].reshape(span.shape) * mask, z[nq:].reshape(r, m)

    def fg(x):
        Q, C = (v.requires_grad_(True) for v in unpack(x))
        L = loss_of(Q @ C)
        gQ, gC = torch.autograd.grad(L, (Q, C))
        return float(L.detach()), torch.cat([(gQ * mask).reshape(-1), gC.reshape(-1)]).numpy().astype(np.float64)

    x0 = torch.cat([span.reshape(-1), (span.T @ S).reshape(-1)]).numpy().astype(np.float64)
    res = minimize(fg, x0, jac=True, method="L-BFGS-B",
                   options={"maxiter": COST_ITERATIONS, "gtol": 1e-12, "ftol": 1e-15})  # fmt: skip
    Q, C = unpack(res.x)
    W = Q @ C
    cols = []
    for j in range(r):  # the new span: Q's columns, orthonormal within each block (Gram–Schmidt in block order)
        c = Q[:, j].clone()
        for q in cols:
            c = c - (q @ c) * q
        n = float(c.norm())
        if n > 1e-12:
            cols.append(c / n)
    return W, torch.stack(cols, 1) if cols else span[:, :0]
