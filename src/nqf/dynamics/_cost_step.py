r"""The level after a switch: the real module's loss minimised over the learned directions (AGF's cost step).

On the plateau after drop ``k`` the units' weights lie in the span of the ``r_k`` learned directions of
``M`` (the rest is at ``O(ε)`` or carries a seed); the NQF puts the loss at its plateau level ``L_k``, and the
real module, whose units already carry ``O(1)`` weights, settles where its *own* loss is smallest in that
span.  Alternating Gradient Flows (Kunin et al., NeurIPS 2025) call this the cost step: a minimisation over the
active part alternating with the utility maximisation over the dormant one.  Here the active part is the
learned span: ``W = Q C`` with ``Q`` (``p × r_k``) the top eigenvectors of ``M = W_s W_sᵀ`` at a state ``W_s`` on
the plateau (the seeded NQF's), ``C`` (``r_k × m``) free, started at ``Qᵀ W_s``.

The minimisation is gradient flow on ``C`` (``solve_ivp``, LSODA) until the loss stops moving (gradient flow
picks the basin GD itself falls into), then L-BFGS; the loss and its gradient are the module's own
(:func:`torch.func.functional_call` through :class:`nqf.modules.UnitScatter`).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.integrate import solve_ivp
from scipy.optimize import minimize

from .._validation import check_inputs
from ..errors import InvalidParameterError, InvalidTypeError
from ..modules import UnitLayout, UnitScatter
from ._loss import Loss, as_loss

__all__ = ["cost_step"]

#: Gradient-flow chunks (each twice the previous) before the L-BFGS polish.
FLOW_CHUNKS = 40


def cost_step(
    module: torch.nn.Module,
    units: UnitLayout,
    X,
    y,
    W,
    rank: int,
    *,
    loss: str | Loss = "mse",
    output=None,
    maxiter: int = 500,
) -> tuple[float, torch.Tensor]:
    r"""The module's loss minimised over the span of the ``rank`` learned directions of ``W`` (module docstring).

    Parameters
    ----------
    module : torch.nn.Module
        The real module (only evaluated; its non-unit parameters fixed).
    units : UnitLayout
    X : torch.Tensor, shape (N, ...)
    y : array_like, shape (N,) or (N, C)
    W : array_like, shape (p, m)
        A state on the plateau (the start, and the source of the learned directions).
    rank : int
        Number of learned directions (the plateau's rank; 0: the loss at ``W = 0``).
    loss, output
        As in :func:`~nqf.dynamics.train_network`.
    maxiter : int
        L-BFGS iterations after the flow.

    Returns
    -------
    (level, W_min) : (float, torch.Tensor of shape (p, m))
    """
    loss = as_loss(loss)
    if not isinstance(module, torch.nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    scatter = UnitScatter(module, units)
    W = torch.as_tensor(W, dtype=torch.float64)
    if W.shape != (scatter.p, scatter.m):
        raise InvalidParameterError(f"`W` must have shape ({scatter.p}, {scatter.m}); found {tuple(W.shape)}")
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or not 0 <= int(rank) <= scatter.p:
        raise InvalidParameterError(f"`rank` must be an integer in [0, {scatter.p}]; found {rank!r}")
    rank = int(rank)
    dt = next(iter(scatter.base.values())).dtype
    X = check_inputs("X", X)
    W = W.to(dt)
    with torch.no_grad():
        f0 = scatter.module_output(module, torch.zeros_like(W), X, output)
    yt = loss.prepare(y, int(X.shape[0]), f0.shape[1], dt, f0.device)
    if rank == 0:
        with torch.no_grad():
            return float(loss.value(f0, yt)), torch.zeros_like(W)
    _, Q = torch.linalg.eigh(W @ W.T)
    Q = Q[:, -rank:]
    shape = (rank, scatter.m)

    def fg(x):
        C = torch.as_tensor(x, dtype=dt).reshape(shape).requires_grad_(True)
        L = loss.value(scatter.module_output(module, Q @ C, X, output), yt)
        (g,) = torch.autograd.grad(L, C)
        return float(L), g.reshape(-1).numpy().astype(np.float64)

    x = (Q.T @ W).reshape(-1).numpy().astype(np.float64)
    L0, g0 = fg(x)
    span, t = 1.0 / max(float(np.abs(g0).max()) / max(float(np.abs(x).max()), 1e-300), 1e-300), 0.0
    for _ in range(FLOW_CHUNKS):  # gradient flow in chunks of growing length until the loss no longer moves
        before = fg(x)[0]
        sol = solve_ivp(lambda _t, z: -fg(z)[1], (t, t + span), x, method="LSODA", rtol=1e-7, atol=1e-12)
        x, t = sol.y[:, -1], t + span
        if before - fg(x)[0] <= 1e-9 * max(L0, 1e-300):
            break
        span *= 2.0
    res = minimize(fg, x, jac=True, method="L-BFGS-B", options={"maxiter": maxiter, "gtol": 1e-12, "ftol": 1e-15})
    C = torch.as_tensor(res.x, dtype=dt).reshape(shape)
    return float(res.fun), (Q @ C).detach()
