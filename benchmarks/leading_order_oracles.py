"""Independent oracles for ``bench_leading_order.py``: plain numpy gradient descent on the real networks.

Nothing here imports ``torch`` or ``nqf``: the networks are written from their formulas.

* :func:`two_layer_gd` — ``f_c(x) = Σ_i a_{ic} σ(u_i·x)`` (``σ`` = square, tanh or mish), unit layout
  ``w_i = (a_i ∈ R^C, u_i ∈ R^D)``, loss ``L = (1/2N) Σ_n ‖f(x_n) − y_n‖²``;
* :func:`chain_gd` — the deep linear chain ``f(x) = W_L ⋯ W_1 x``, same loss, evaluated through the exact
  moments ``Σ_xx = XᵀX/N``, ``Σ_yx = YᵀX/N``, ``Σ_yy = YᵀY/N``:
  ``L = ½ tr(P Σ_xx Pᵀ) − tr(Σ_yx Pᵀ) + ½ tr(Σ_yy)`` with ``P = W_L ⋯ W_1``.

Both descend with a relative step control: ``η_j = min(η_max, c ‖θ‖/‖∇L‖)`` and the time is ``t = Σ_j η_j``,
so that a dormant phase (tiny gradient at tiny weights) costs ``O(ln(1/ρ)/c)`` steps, not ``O(t/η_max)``.

**Drop time rule.**  Given the predicted plateau levels ``L_0, L_1, …``, the measured time of drop ``j`` is
the first time ``t`` at which the loss is below the midpoint ``(L_{j−1} + L_j)/2`` (:func:`midpoints`);
NaN when it never is within the run.  :func:`refined` halves the step control (``c`` and ``η_max``) and
returns the relative change of those times: the oracle's own discretisation error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Default relative step: each step moves the weights by at most this fraction of their norm.
C_STEP = 2e-3
#: A unit has escaped when its norm first exceeds this multiple of its start norm.
UNIT_ESCAPE = 10.0


def _mish(z):
    sp = np.logaddexp(0.0, z)
    th = np.tanh(sp)
    return z * th, th + z * (1.0 - th * th) / (1.0 + np.exp(-z))


def _tanh(z):
    th = np.tanh(z)
    return th, 1.0 - th * th


def _square(z):
    return z * z, 2.0 * z


#: name → ``z ↦ (σ(z), σ'(z))``.
ACTIVATIONS = {"square": _square, "tanh": _tanh, "mish": _mish}


@dataclass
class GDRun:
    """A gradient-descent run.

    Attributes
    ----------
    t, loss : ndarray
        The loss against time (thinned: a point is kept when the loss moved by 1e-3 relative or ``t`` by 2 %).
    crossings : ndarray
        For each threshold, the first time the loss was below it (NaN: never).
    escapes : ndarray or None
        Per unit, the first time its norm exceeded :data:`UNIT_ESCAPE` × its start norm (two-layer runs).
    directions : ndarray or None, shape (p, m)
        Each unit's direction at that time (NaN columns for units that did not escape).
    steps : int
    """

    t: np.ndarray
    loss: np.ndarray
    crossings: np.ndarray
    escapes: np.ndarray | None
    directions: np.ndarray | None
    steps: int


def midpoints(levels) -> np.ndarray:
    """``(L_{j−1} + L_j)/2`` for each drop ``j`` of the predicted levels ``L_0, L_1, …``."""
    lv = np.asarray(levels, dtype=float)
    return 0.5 * (lv[:-1] + lv[1:])


class _Units:
    """Per-unit escape bookkeeping of a two-layer run (columns of ``W`` = units)."""

    def __init__(self, W: np.ndarray):
        self.start = np.sqrt((W * W).sum(0))
        self.escapes = np.full(W.shape[1], np.nan)
        self.directions = np.full(W.shape, np.nan)

    def update(self, W: np.ndarray, t: float) -> None:
        norms = np.sqrt((W * W).sum(0))
        new = np.isnan(self.escapes) & (norms > UNIT_ESCAPE * self.start)
        if new.any():
            self.escapes[new] = t
            self.directions[:, new] = W[:, new] / norms[new]


def _descend(theta, loss_grad, thresholds, t_end, c, eta_max, max_steps, on_step=None) -> GDRun:
    """The shared loop: ``θ ← θ − η ∇L`` with ``η = min(η_max, c‖θ‖/‖∇L‖)`` until every threshold is crossed,
    ``t ≥ t_end`` or ``max_steps``.  ``theta`` is a flat array, updated in place; ``eta_max`` a number or a
    function of ``θ``."""
    cap = eta_max if callable(eta_max) else (lambda _th: eta_max)
    th = np.asarray(thresholds, dtype=float)
    cross = np.full(th.size, np.nan)
    nxt, t, steps = 0, 0.0, 0
    loss, g = loss_grad(theta)
    ts, ls = [0.0], [loss]
    while True:
        while nxt < th.size and loss < th[nxt]:
            cross[nxt] = t
            nxt += 1
        if (th.size and nxt == th.size) or t >= t_end or steps >= max_steps or not math.isfinite(loss):
            break
        gn = math.sqrt(float(g @ g))
        if gn == 0.0:
            break
        eta = min(cap(theta), c * math.sqrt(float(theta @ theta)) / gn)
        theta -= eta * g
        t += eta
        steps += 1
        loss, g = loss_grad(theta)
        if on_step is not None:
            on_step(t)
        if abs(loss - ls[-1]) > 1e-3 * abs(ls[-1]) or t > 1.02 * ts[-1]:
            ts.append(t)
            ls.append(loss)
    for k in range(nxt, th.size):  # several thresholds crossed at once keep the same time
        if loss < th[k]:
            cross[k] = t
    ts.append(t)
    ls.append(loss)
    return GDRun(np.array(ts), np.array(ls), cross, None, None, steps)


def two_layer_problem(X, Y, W0, activation):
    """``(θ, loss_grad, W)`` of the two-layer net: ``θ`` the flat parameters (a copy of ``W0``), ``W`` its
    ``(C + D, m)`` view, ``loss_grad(θ) → (L, ∇L)`` (the gradient array is reused between calls)."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float).reshape(X.shape[0], -1)
    N, C = Y.shape
    W0 = np.asarray(W0, dtype=float)
    act = ACTIVATIONS[activation]
    theta = W0.reshape(-1).copy()
    grad = np.empty_like(theta)
    W, G = theta.reshape(W0.shape), grad.reshape(W0.shape)  # views

    def loss_grad(th):
        Wt = th.reshape(W0.shape)
        A, U = Wt[:C], Wt[C:]
        s, ds = act(X @ U)
        E = s @ A.T - Y
        R = E / N
        G[:C] = R.T @ s
        G[C:] = X.T @ ((R @ A) * ds)
        return 0.5 * float((E * E).sum()) / N, grad

    return theta, loss_grad, W


def two_layer_gd(X, Y, W0, activation, *, thresholds, t_end, c=C_STEP, eta_max=0.02, max_steps=10**8) -> GDRun:
    """Gradient descent of ``f_c(x) = Σ_i a_{ic} σ(u_i·x)`` from the units ``W0`` (shape ``(C + D, m)``).

    Parameters
    ----------
    X : ndarray, shape (N, D)
    Y : ndarray, shape (N, C) or (N,)
    W0 : ndarray, shape (C + D, m)
        Rows ``0:C`` the readouts ``a_i``, rows ``C:`` the input weights ``u_i``.
    activation : {"square", "tanh", "mish"}
    thresholds : sequence of float
        Decreasing loss levels whose first crossing times are recorded (:func:`midpoints`).
    t_end : float
        Stop at this time (or when every threshold is crossed).
    c, eta_max, max_steps
        The step control (module docstring).
    """
    theta, loss_grad, W = two_layer_problem(X, Y, W0, activation)
    units = _Units(W)
    run = _descend(theta, loss_grad, thresholds, t_end, c, eta_max, max_steps, lambda t: units.update(W, t))
    run.escapes, run.directions = units.escapes, units.directions
    return run


def chain_problem(X, Y, Ws0):
    """``(θ, loss_grad, scale)`` of the linear chain from the layers ``Ws0`` (``W_1`` first), by the moments:
    ``∂L/∂W_l = (W_L ⋯ W_{l+1})ᵀ (P Σ_xx − Σ_yx) (W_{l−1} ⋯ W_1)ᵀ`` (module docstring); ``scale(θ)`` the
    largest Frobenius norm of a layer."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float).reshape(X.shape[0], -1)
    N = X.shape[0]
    Sxx, Syx, half_yy = X.T @ X / N, Y.T @ X / N, 0.5 * float((Y * Y).sum()) / N
    shapes = [np.shape(w) for w in Ws0]
    theta = np.concatenate([np.asarray(w, dtype=float).reshape(-1) for w in Ws0])
    grad = np.empty_like(theta)
    cuts = np.cumsum([0] + [a * b for a, b in shapes])
    Gs = [grad[cuts[i] : cuts[i + 1]].reshape(s) for i, s in enumerate(shapes)]
    eye = np.eye(shapes[0][1])

    def loss_grad(th):
        Ws = [th[cuts[i] : cuts[i + 1]].reshape(s) for i, s in enumerate(shapes)]
        below = [eye]  # W_{l−1} ⋯ W_1
        for w in Ws[:-1]:
            below.append(w @ below[-1])
        P = Ws[-1] @ below[-1]
        above = P @ Sxx - Syx  # (W_L ⋯ W_{l+1})ᵀ E, built from the top
        for i in range(len(Ws) - 1, -1, -1):
            Gs[i][...] = above @ below[i].T
            above = Ws[i].T @ above
        loss = 0.5 * float(np.sum(P * (P @ Sxx))) - float(np.sum(Syx * P)) + half_yy
        return loss, grad

    def scale(th):
        return max(math.sqrt(float(th[cuts[i] : cuts[i + 1]] @ th[cuts[i] : cuts[i + 1]])) for i in range(len(shapes)))

    return theta, loss_grad, scale


def chain_gd(X, Y, Ws0, *, thresholds, t_end, c=C_STEP, eta_max=0.02, max_steps=10**8) -> GDRun:
    """Gradient descent of the linear chain ``f(x) = W_L ⋯ W_1 x`` from the layers ``Ws0`` (``W_1`` first);
    arguments as :func:`two_layer_gd`, except that the cap is ``η_max / min(1, w)^{L−2}`` with ``w`` the
    largest layer norm: at layers of size ``w < 1`` every curvature of the loss is ``O(w^{L−2})`` (the
    residual term; the Gauss–Newton term is ``O(w^{2L−2})``), so the stable step grows as ``w^{2−L}`` and the
    all-small dormant phase costs ``O(ln(1/ε)/c)`` steps instead of ``O(ε^{2−L}/η_max)``."""
    theta, loss_grad, scale = chain_problem(X, Y, Ws0)
    L = len(Ws0)

    def cap(th):
        return eta_max / min(1.0, scale(th)) ** (L - 2)

    return _descend(theta, loss_grad, thresholds, t_end, c, cap, max_steps)


def refined(run_fn, *args, c=C_STEP, eta_max=0.02, **kwargs):
    """``run_fn(*args, c=c, eta_max=eta_max, **kwargs)`` and again with both ``c`` and ``η_max`` halved:
    ``(run, half_run, change)``, ``change`` the relative change of each crossing time (the oracle's own
    discretisation error; NaN where either run misses a crossing).  ``η_max`` is halved too because it,
    not ``c``, sets the step on every plateau after the first escape: halving ``c`` alone would not move them."""
    run = run_fn(*args, c=c, eta_max=eta_max, **kwargs)
    half = run_fn(*args, c=0.5 * c, eta_max=0.5 * eta_max, **kwargs)
    with np.errstate(invalid="ignore", divide="ignore"):
        change = (half.crossings - run.crossings) / run.crossings
    return run, half, change
