r"""The level after a switch: the real module's own gradient flow over the learned directions (AGF's cost step).

On the plateau after drop ``k`` the units' weights lie in the span of the ``r_k`` learned directions of
``M`` (the rest is at ``O(ε)`` or carries a seed).  The NQF puts the loss at its plateau level ``L_k``.  The
real module, whose units already carry ``O(1)`` weights, descends its *own* loss in that span.  Alternating
Gradient Flows (Kunin et al., NeurIPS 2025) call this the cost step: a minimisation over the active part,
alternating with the utility maximisation over the dormant one.  Here the active part is the learned span:
``W = Q C`` with ``Q`` (``p × r_k``) the top eigenvectors of ``M = W_s W_sᵀ`` at a state ``W_s`` (the seeded
NQF's at the switch), and ``C`` (``r_k × m``) free, started at ``Qᵀ W_s``.

:func:`active_levels` chains these steps along a predicted staircase.  The step is taken for as long as the
plateau lasts, not to convergence.  The module's loss in the span has slow
directions (a tanh unit trading input scale for output scale).  The real network does not follow them within a
plateau: the demo's real loss sits at 1.1e-3 at ``t = 24`` where the span's minimum is 5.3e-4.  So
each step integrates the gradient flow ``dC/dt = −∇_C L`` for the given ``duration`` (``solve_ivp``,
RK45; the module's own loss and gradient through :class:`nqf.modules.UnitScatter`).

A flow that the run's gradient descent cannot follow is stopped.  GD at step ``η`` tracks the flow only where the
loss's curvature is below ``2/η``; RK45 on a flow of curvature ``λ`` needs steps of about ``3.3/λ`` (six
right-hand sides each), so above ``2/η`` it needs more than ``3.6 duration/η`` right-hand sides.  Given ``lr``,
each step may use :data:`RHS_PER_GD_STEP` ``· duration/η`` of them (twice that, for rejected steps) plus
:data:`RHS_FLOOR`; a step that needs more has entered a region no GD run at ``η`` reaches, and its level and every
later one are NaN (on digits with 32 tanh units, ten classes, a chained state grew from norm 3 to 74 over two
plateaus while the NQF's curvature rose from 37 to 3·10⁴: one RK45 step took 217 s).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.integrate import solve_ivp

from .._validation import check_inputs, positive_float
from ..errors import InvalidParameterError, InvalidTypeError
from ..modules import UnitLayout, UnitScatter
from ._loss import Loss, as_loss

__all__ = ["active_levels"]

#: Relative tolerance of the flow (RK45).
RTOL = 1e-6
#: Right-hand sides a flow may use per GD step of its duration (RK45 at curvature ``2/η``: about 3.6; twice that).
RHS_PER_GD_STEP = 8
#: Right-hand sides every flow may use whatever its duration (the first steps' step-size search).
RHS_FLOOR = 200


class _TooStiff(Exception):
    """A flow needed more right-hand sides than GD at the run's step could follow."""


def active_levels(
    module: torch.nn.Module,
    units: UnitLayout,
    X,
    y,
    states: tuple,
    drop_times,
    ranks,
    read_times,
    *,
    loss: str | Loss = "mse",
    output=None,
    nqf=None,
    lr: float | None = None,
) -> np.ndarray:
    r"""The real module's level on each plateau: AGF's cost steps chained along a predicted staircase.

    The active state ``S`` starts at ``0``.  At each switch ``t_k`` the directions that ``M = W_s W_sᵀ`` of the
    predicted run has newly learned join the span: its top ``r_k`` eigenvectors at the plateau's read time (on
    non-commuting data a direction turns while it grows: taken at the switch, the teacher below keeps a level of
    4.1 where the network reaches 2.8), cut into the module's parameter blocks (a unit's input and output weights
    move apart: with one direction per unit the demo's final level is 18 % high, 8 % with the blocks), less the span
    already active.  ``W_s(t_k)``'s component along them joins ``S``; the rest of ``S`` keeps what the module's own
    flow made of it.  ``S``
    then follows the module's gradient flow in the span (module docstring) to the plateau's read time, where the
    level is read, and on to the next switch.

    Parameters
    ----------
    module : torch.nn.Module
        The real module (only evaluated; its non-unit parameters fixed).
    units : UnitLayout
    X : torch.Tensor, shape (N, ...)
    y : array_like, shape (N,) or (N, C)
    states : tuple ``(t, W)``
        Times (T,) and unit weights (T, p, m) of the predicted run (the seeded NQF's, on the clock of the times).
    drop_times : array_like, shape (K,)
        The predicted switch times (increasing).
    ranks : array_like of int, shape (K + 1,)
        Learned directions on each plateau (the staircase's ranks, ``ranks[0] = 0``).
    read_times : array_like, shape (K + 1,)
        Where each plateau's level is read (:func:`nqf.curves.level_read_times`), ``read_times[k] ≥ t_k``.
    loss, output
        As in :func:`~nqf.dynamics.train_network`.
    nqf : StructureOperator, optional
        Take the same steps with the NQF's predictions ``f(0) + 𝒜(W Wᵀ)`` (the operator of these units on ``X``)
        in place of the module's: the reference the module's levels are judged against.  The NQF's own plateau
        levels are minima the flow over a finite plateau does not reach; the same protocol on both leaves only
        the module's higher orders in the difference.
    lr : float, optional
        The step ``η`` of the GD run the levels are for: a flow stiffer than GD at ``η`` can follow is stopped
        (module docstring) and its level and the later ones are NaN.  Default: no limit.

    Returns
    -------
    ndarray, shape (K + 1,)
        The loss on each plateau (the first: at ``W = 0``); NaN from the first flow stopped as too stiff.
    """
    loss = as_loss(loss)
    lr = None if lr is None else positive_float("lr", lr)
    if not isinstance(module, torch.nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    scatter = UnitScatter(module, units)
    dt = next(iter(scatter.base.values())).dtype
    ts, Ws = np.asarray(states[0], float), torch.as_tensor(states[1]).to(dt)
    if Ws.ndim != 3 or Ws.shape[1:] != (scatter.p, scatter.m) or Ws.shape[0] != ts.size:
        raise InvalidParameterError(
            f"`states` must be (t of shape (T,), W of shape (T, {scatter.p}, {scatter.m})); found "
            f"{ts.shape} and {tuple(Ws.shape)}"
        )
    tk, reads = np.asarray(drop_times, float).reshape(-1), np.asarray(read_times, float).reshape(-1)
    rk = np.asarray(ranks).reshape(-1).astype(int)
    K = tk.size
    if reads.size != K + 1 or rk.size != K + 1 or np.any(reads[1:] < tk) or np.any(np.diff(tk) < 0):
        raise InvalidParameterError(
            f"`drop_times` (K = {K}, increasing), `ranks` and `read_times` (K + 1 each, read_times[k] ≥ t_k) "
            f"do not fit; found {tk.size}, {rk.size} and {reads.size} entries"
        )
    X = check_inputs("X", X)
    with torch.no_grad():
        f0 = scatter.module_output(module, torch.zeros(scatter.p, scatter.m, dtype=dt), X, output)
    yt = loss.prepare(y, int(X.shape[0]), f0.shape[1], dt, f0.device)

    def predict(W):
        if nqf is None:
            return scatter.module_output(module, W, X, output)
        return f0 + nqf.forward_factor(W).reshape(f0.shape)

    levels = np.full(K + 1, np.nan)
    levels[0] = float(loss.value(f0, yt))
    blocks = [rows for rows, _ in scatter.rows.values()]
    S = torch.zeros(scatter.p, scatter.m, dtype=dt)
    span = torch.zeros(scatter.p, 0, dtype=dt)
    t_now = 0.0

    def flow(S, span, duration):
        budget = None if lr is None else RHS_FLOOR + int(RHS_PER_GD_STEP * max(duration, 0.0) / lr)
        return _flow(predict, yt, loss, S, span, duration, budget)

    try:
        for k in range(K):
            if span.shape[1]:
                S = flow(S, span, tk[k] - t_now)[1]
            Wk, Wr = (Ws[int(np.argmin(np.abs(ts - x)))] for x in (tk[k], reads[k + 1]))
            new = _new_directions(Wr, span, int(rk[k + 1]), blocks)  # where the plateau's directions have settled
            S = S + new @ (new.T @ Wk)
            span = torch.cat([span, new], 1)
            levels[k + 1], S = flow(S, span, reads[k + 1] - tk[k])
            t_now = reads[k + 1]
    except _TooStiff:
        pass  # this level and the later ones stay NaN
    return levels


def _new_directions(W: torch.Tensor, span: torch.Tensor, rank: int, blocks: list) -> torch.Tensor:
    """The top ``rank`` eigenvectors of ``W Wᵀ`` cut into the parameter blocks (each block's rows of ``W``), less the
    span already active in that block, orthonormal: ``p × n`` with each column inside one block."""
    _, Q = torch.linalg.eigh(W @ W.T)
    Q = Q[:, -rank:] if rank else Q[:, :0]
    out = []
    for rows in blocks:
        inside = span[rows]
        have = inside[:, inside.abs().sum(0) > 0]
        n_new = rank - have.shape[1]
        if n_new <= 0:
            continue
        Qb = Q[rows] - have @ (have.T @ Q[rows])
        U, _, _ = torch.linalg.svd(Qb, full_matrices=False)
        col = torch.zeros(W.shape[0], n_new, dtype=W.dtype)
        col[rows] = U[:, :n_new]
        out.append(col)
    return torch.cat(out, 1) if out else span[:, :0]


def _flow(predict, yt, loss: Loss, S, span, duration: float, budget: int | None = None):
    """Gradient flow of ``loss(predict(W))`` over ``W = span C`` from ``S`` for ``duration``: ``(loss, W)`` at the
    end; :class:`_TooStiff` once it has used more than ``budget`` right-hand sides."""
    shape, dt = (span.shape[1], S.shape[1]), S.dtype
    used = [0]

    def rhs(_t, z):
        used[0] += 1
        if budget is not None and used[0] > budget:
            raise _TooStiff
        return -fg(z)[1]

    def fg(x):
        C = torch.as_tensor(x, dtype=dt).reshape(shape).requires_grad_(True)
        L = loss.value(predict(span @ C), yt)
        (g,) = torch.autograd.grad(L, C)
        return float(L.detach()), g.reshape(-1).numpy().astype(np.float64)

    x = (span.T @ S).reshape(-1).numpy().astype(np.float64)
    if duration > 0.0:
        sol = solve_ivp(rhs, (0.0, float(duration)), x, method="RK45", rtol=RTOL, atol=1e-12)
        x = sol.y[:, -1]
    return fg(x)[0], span @ torch.as_tensor(x, dtype=dt).reshape(shape)
