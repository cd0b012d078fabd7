r"""A chain with every layer small: one homogeneous block of the chain's degree (docs/theory.md, "All layers small").

When every parameter of a chain of layers starts at the same small scale (``θ(0) = ρ θ̃``) and the chain is
homogeneous in its parameters (no biases, homogeneous activations: linear, ReLU, square), its output is
``f(ρθ̃) = ρ^L f(θ̃)``: the chain is one term of degree ``L`` (:func:`chain_term`), its dormant flow is
``dθ/dt = (1/N) ∇_θ ⟨r, f_θ⟩`` and the first escape comes at ``t = ρ^{2−L} s``.

For a *linear* chain the later drops follow by deflation (:func:`chain_staircase`): the active phase
after ``j`` escapes is the best rank-``j`` linear map (reduced-rank regression, closed form), and the
escaped mode is removed from every layer of the still-dormant state (``W_l ← (I − h_l h_lᵀ) W_l
(I − h_{l−1} h_{l−1}ᵀ)``, ``h`` its direction through the chain) before the flow goes on with the new
residual.  The closed forms of Saxe et al. (2014) and Arora et al. (2018) for balanced layers are the
independent oracle (tests and ``benchmarks/bench_leading_order.py``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vjp

from ...errors import InvalidParameterError, InvalidTypeError, NormalFormError, ShapeError
from .._staircase import Staircase
from ._flow import _flow_until_escape
from ._terms import HomogeneousTerm, check_residual

__all__ = ["ChainTerm", "chain_term", "chain_staircase"]


class ChainTerm(HomogeneousTerm):
    """Every parameter of a module as one block ``θ`` (shape ``(P, 1)``), homogeneous of degree ``L``.

    Attributes
    ----------
    names, shapes : tuple
        The parameters in ``module.named_parameters()`` order and their shapes.
    linear : bool
        The module computes ``X W_1ᵀ ⋯ W_Lᵀ`` of its 2-D parameters in this order (checked on the data).
    theta : torch.Tensor, shape (P,)
        The module's own parameters when the term was made.
    """

    __slots__ = ("module", "X", "names", "shapes", "linear", "theta")

    def value(self, W):
        return self._call(W[:, 0])

    def _call(self, theta: torch.Tensor) -> torch.Tensor:
        params, at = {}, 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            n = math.prod(shape)
            params[name] = theta[at : at + n].reshape(shape)
            at += n
        out = functional_call(self.module, params, (self.X,))
        return out.reshape(self.N, -1)

    def gradient(self, W, R):
        pull = vjp(self._call, W[:, 0])[1]
        return pull(R.to(self.dtype))[0][:, None]

    def layers(self, W: torch.Tensor) -> list:
        """The 2-D weights of a linear chain from ``W`` (shape ``(P, 1)``), in the order applied."""
        out, at = [], 0
        for shape in self.shapes:
            n = math.prod(shape)
            out.append(W[at : at + n, 0].reshape(shape))
            at += n
        return out


def _degree(term: ChainTerm) -> int:
    """``L`` with ``f(2θ) = 2^L f(θ)`` at the module's own parameters; refused when no such ``L`` holds."""
    theta = term.theta
    with torch.no_grad():
        f1, f2 = term._call(theta), term._call(2.0 * theta)
    n1, n2 = float(f1.norm()), float(f2.norm())
    if not (n1 > 0 and math.isfinite(n2)):
        raise NormalFormError(f"`module` must give a non-zero output at its parameters; found ‖f‖ = {n1:.3g}")
    k = round(math.log2(n2 / n1))
    defect = float((f2 - 2.0**k * f1).norm()) / n2
    if k < 1 or defect > 1e-8:
        raise NormalFormError(
            "`module` must be homogeneous in its parameters (f(sθ) = s^L f(θ): no biases, linear/ReLU/square "
            f"activations) for every layer to start small together; found f(2θ) ≠ 2^{k} f(θ) (relative defect "
            f"{defect:.2e})"
        )
    return k


def _blank(module: nn.Module, X: torch.Tensor) -> ChainTerm:
    params = dict(module.named_parameters())
    if not params:
        raise InvalidParameterError("`module` has no parameters")
    names = tuple(params)
    shapes = tuple(tuple(p.shape) for p in params.values())
    theta = torch.cat([p.detach().reshape(-1) for p in params.values()]).to(torch.float64)
    term = ChainTerm.__new__(ChainTerm)
    with torch.no_grad():
        C = module(X[:1]).reshape(1, -1).shape[1]
    HomogeneousTerm.__init__(term, 1, theta.numel(), X.shape[0], C, False, "the whole chain", torch.float64)
    term.module, term.X, term.names, term.shapes, term.theta, term.linear = module, X, names, shapes, theta, False
    return term


def chain_term(module: nn.Module, X) -> ChainTerm:
    """Every parameter of ``module`` as one homogeneous block (module docstring); its degree is measured.

    Parameters
    ----------
    module : torch.nn.Module
        A chain homogeneous in its parameters; copied and converted to float64.
    X : array_like, shape (N, D)

    Raises
    ------
    NormalFormError
        ``f(2θ) ≠ 2^L f(θ)``: a bias or a non-homogeneous activation.
    """
    if not isinstance(module, nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    import copy

    module = copy.deepcopy(module).double().eval()
    X = torch.as_tensor(X, dtype=torch.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ShapeError(f"`X` must have shape (N, D) with N ≥ 1; found {tuple(X.shape)}")
    term = _blank(module, X)
    term.degree = _degree(term)
    Ws = term.layers(term.theta[:, None])
    if all(w.ndim == 2 for w in Ws):
        prod = X
        ok = True
        for w in Ws:
            if prod.shape[1] != w.shape[1]:
                ok = False
                break
            prod = prod @ w.T
        with torch.no_grad():
            out = term.value(term.theta[:, None])
        term.linear = ok and prod.shape == out.shape and bool(torch.allclose(prod, out, rtol=1e-10, atol=1e-300))
    return term


def reduced_rank(X: torch.Tensor, Y: torch.Tensor, rank: int) -> torch.Tensor:
    """The best linear map ``P`` (``C × D``) of rank ``≤ rank`` for ``(1/2N)‖Y − X Pᵀ‖²`` (closed form)."""
    N = X.shape[0]
    evals, evecs = torch.linalg.eigh(X.T @ X / N)
    keep = evals > evals.max() * X.shape[1] * torch.finfo(X.dtype).eps
    S = (evecs[:, keep] / evals[keep].sqrt()) @ evecs[:, keep].T  # Σ_xx^{-1/2} on its range
    U, s, Vt = torch.linalg.svd(Y.T @ X / N @ S, full_matrices=False)
    r = min(rank, s.numel())
    return (U[:, :r] * s[:r]) @ Vt[:r] @ S


def _deflate(Ws: list, v: torch.Tensor) -> list:
    """Remove from every layer the mode entering along ``v`` (its direction ``h_l`` through the chain)."""
    out, h = [], v / v.norm()
    for W in Ws:
        g = W @ h
        h_next = g / g.norm().clamp_min(1e-300)
        out.append(
            W - torch.outer(h_next, h_next @ W) - torch.outer(W @ h, h) + torch.outer(h_next, h) * (h_next @ W @ h)
        )
        h = h_next
    return out


def chain_staircase(term: ChainTerm, targets, eps: float, *, theta0=None, max_drops: int | None = None) -> Staircase:
    r"""Every drop of a linear chain whose layers all start small (module docstring).

    Parameters
    ----------
    term : ChainTerm
        A linear chain (``term.linear``) of degree ``L ≥ 3``.
    targets : array_like, shape (N,) or (N, C)
    eps : float
        Label of the staircase (``Staircase.eps``).
    theta0 : array_like, shape (P,), optional
        The initial parameters (default: the module's own, ``term.theta``); times are for this start.
    max_drops : int, optional

    Returns
    -------
    Staircase
        ``method = "dormant-flow"``, levels of the reduced-rank regressions, times ``ρ^{2−L} s_j``.
    """
    if not isinstance(term, ChainTerm) or not term.linear or term.degree < 3:
        raise InvalidParameterError(
            f"`term` must be a linear ChainTerm of degree ≥ 3 (three or more linear layers); found {term!r}"
            + ("" if not isinstance(term, ChainTerm) or term.linear else " (not a linear chain)")
        )
    Y = check_residual(term, targets)
    theta = term.theta if theta0 is None else torch.as_tensor(theta0, dtype=torch.float64).reshape(-1)
    if theta.numel() != term.p:
        raise ShapeError(f"`theta0` must have P = {term.p} entries; found {theta.numel()}")
    L, X = term.degree, term.X
    Ws = term.layers(theta[:, None])
    rho = max(float(w.norm()) for w in Ws)
    widths = [min(w.shape) for w in Ws]
    limit = min(widths + [Y.shape[1], X.shape[1]])
    limit = limit if max_drops is None else min(limit, int(max_drops))
    state, s = theta[:, None] / rho, 0.0
    base = 0.5 * float((Y * Y).sum()) / term.N
    levels, times, dirs = [base], [], []
    for j in range(limit):
        P = reduced_rank(X, Y, j) if j else torch.zeros(Y.shape[1], X.shape[1], dtype=torch.float64)
        R = Y - X @ P.T
        hit = _flow_until_escape(term, R, state, s, s + 1e6 * max(s, 1.0))
        if hit is None:
            break
        s, state, _ = hit
        layers = term.layers(state)
        prod = layers[0]
        for w in layers[1:]:
            prod = w @ prod
        _, _, Vt = torch.linalg.svd(prod, full_matrices=False)
        v = Vt[0]
        dirs.append(v.numpy())
        state = torch.cat([w.reshape(-1) for w in _deflate(layers, v)])[:, None]
        times.append(rho ** (2 - L) * s)
        P = reduced_rank(X, Y, j + 1)
        D = Y - X @ P.T
        levels.append(0.5 * float((D * D).sum()) / term.N)
    K = len(times)
    return Staircase(
        method="dormant-flow",
        eps=eps,
        levels=np.array(levels),
        times=np.array(times),
        time_rules=("dormant flow",) * K,
        times_leading=np.array(times),
        rates=np.zeros(K + 1),
        ranks=np.arange(K + 1),
        directions=np.array(dirs).T.reshape(X.shape[1], K),
        modes=np.arange(K, dtype=np.int64),
        global_minimum=False,
        notes=(f"a chain of degree L = {L}: every time scales as ρ^{2 - L} with the largest layer norm ρ = {rho:.3g}",),
    )
