"""Order-parameter form at tiny initial scales: weight form, exact Saxe GD map, positive semidefiniteness.

References (independent of the order-parameter code path):

* the weight form ``W ← W − η∇L`` of a *wider* network (width 2p, random orthonormal
  rows), whose small directions keep relative round-off ``1e-16``;
* on whitened data, the exact discrete GD map of the SVD modes,
  ``z^± ← (1 ∓ 2ηg_k)² z^±`` (:meth:`nqf.reductions.svd_modes.TwoLayerModes.gd`), a scalar
  recursion per mode that never forms ``M``.
"""

import math

import numpy as np
import pytest
import torch

from nqf.dynamics import GD, Save, gradient_flow, simulate
from nqf.reductions.svd_modes import two_layer_modes
from nqf.structure._mlp import mlp
from nqf.structure._operator import DenseStructure

F64 = torch.float64
EPS = [1e-4, 1e-8, 1e-13, 1e-30, 1e-100, 1e-300]


def _problem(whitened: bool, N=16, D=4, s=(4.0, 2.5, 1.5), seed=11):
    """Two-layer linear network f = σ₁ M_au x, targets y = T x; inputs whitened or correlated."""
    g = torch.Generator().manual_seed(seed)
    C = len(s)
    Xw = math.sqrt(N) * torch.linalg.qr(torch.randn(N, D, generator=g, dtype=F64))[0]
    U = torch.linalg.qr(torch.randn(C, C, generator=g, dtype=F64))[0]
    V = torch.linalg.qr(torch.randn(D, C, generator=g, dtype=F64))[0]
    T = U @ torch.diag(torch.tensor(s, dtype=F64)) @ V.T
    X = Xw if whitened else Xw @ (torch.eye(D, dtype=F64) + 0.4 * torch.randn(D, D, generator=g, dtype=F64))
    Y = X @ T.T
    return X, Y


def _strengths(M, U, V, C):
    """Mode strengths p_k = u_kᵀ M_au v_k (σ₁ = 1), shape (K_saved, modes)."""
    Mau = M[:, :C, C:]
    return torch.einsum("ck,tcd,dk->tk", U, Mau, V)


def _crossing_steps(p, level):
    """Fractional step at which each p_k first reaches level_k (linear interpolation between steps)."""
    out = []
    for k in range(p.shape[1]):
        above = torch.nonzero(p[:, k] >= level[k])
        i = int(above[0])
        a, b = float(p[i - 1, k]), float(p[i, k])
        out.append(i - 1 + (float(level[k]) - a) / (b - a))
    return torch.tensor(out, dtype=F64)


def _min_eig_ratio(M):
    lam = torch.linalg.eigvalsh(M)
    return float((lam[:, 0] / lam[:, -1].abs().clamp_min(1e-300)).min())


def _reference_weights_mp(X, Y, eps, lr, steps, dps=60):
    """Independent reference: weight-form GD of the linear network in 60-digit arithmetic (mpmath),
    from W0 = √ε I; returns M_au at every step, shape (steps + 1, C, D)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = dps
    N, D = X.shape
    C = Y.shape[1]
    Xm = np.array([[mp.mpf(v) for v in row] for row in X.tolist()], dtype=object)
    Ym = np.array([[mp.mpf(v) for v in row] for row in Y.tolist()], dtype=object)
    W = np.diag([mp.sqrt(mp.mpf(eps))] * (C + D)).astype(object)
    W[W == 0] = mp.mpf(0)
    out = []
    for k in range(steps + 1):
        Mau = W[:C] @ W[C:].T
        out.append([[float(v) for v in row] for row in Mau])
        if k == steps:
            break
        Kb = (Xm @ Mau.T - Ym).T @ Xm / N  # G = ½ [[0, K̄], [K̄ᵀ, 0]]
        W = W - lr * np.concatenate([Kb @ W[C:], Kb.T @ W[:C]], 0)
    return torch.tensor(out, dtype=F64)


def _run_pair(X, Y, eps, lr=0.05):
    C, p = Y.shape[1], X.shape[1] + Y.shape[1]
    op = mlp(X, "linear", n_outputs=C)
    t_end = (math.log(1 / eps) + 8.0) / (2 * 1.5) * 1.3
    steps = int(t_end / lr)
    g = torch.Generator().manual_seed(3)
    Q = torch.linalg.qr(torch.randn(2 * p, p, generator=g, dtype=F64))[0]  # (2p, p) orthonormal columns
    W0 = math.sqrt(eps) * Q.T  # width 2p, W0 W0ᵀ = εI (to round-off relative to ε)
    kw = dict(optimizer=GD(lr), steps=steps, save=Save(every=1))
    w = simulate(op, Y, W0=W0, form="weights", **kw)
    o = simulate(op, Y, M0=eps * torch.eye(p, dtype=F64), **kw)
    assert w.success and o.success, (w.message, o.message)
    return op, w, o, steps


def _measurable(p_ref, eps=0.0):
    """Strengths resolvable from a saved M (absolute round-off 1e-16 ‖M‖): ≥ 1e-6 of the largest, and
    above the reference's own round-off (``z⁺ − z⁻`` of two ε-sized numbers)."""
    return (p_ref.abs() > 1e-6 * p_ref.abs().max(1, keepdim=True).values) & (p_ref.abs() > 1e-10 * eps)


def _rel(a, b):
    return (a - b).abs() / b.abs().clamp_min(1e-300)


@pytest.mark.parametrize("eps", EPS)
def test_order_parameter_matches_exact_saxe_map_isotropic(eps):
    """Whitened data, M(0) = εI: every mode's strength and switch-on step to relative 1e-8 of the
    exact GD map of the SVD modes, for ε down to 1e-300; M positive semidefinite throughout."""
    X, Y = _problem(whitened=True)
    C = Y.shape[1]
    modes = two_layer_modes(X, Y, "linear", eps=eps, init="isotropic")
    op, w, o, steps = _run_pair(X, Y, eps)
    _, _, p_ref = modes.gd(0.05, steps)
    U, V, lam = modes.left, modes.right, modes.singular_values
    p_o = _strengths(o.M, U, V, C)
    assert float(_rel(p_o, p_ref)[_measurable(p_ref, eps)].max()) < 1e-8
    t_ref = _crossing_steps(p_ref, lam / 2)
    assert float(_rel(_crossing_steps(p_o, lam / 2), t_ref).max()) < 1e-8
    assert _min_eig_ratio(o.M) >= -1e-14
    assert float(o.loss[-1]) < 1e-6 * float(o.loss[0])
    if eps >= 1e-13:
        # the weight form of a wide isotropic network agrees while its round-off (relative 1e-16 to the
        # largest mode in each unit) stays below the small modes; below ε ≈ 1e-30 it seeds them early
        p_w = _strengths(w.W @ w.W.transpose(1, 2), U, V, C)
        assert float(_rel(p_w, p_ref)[_measurable(p_ref, eps)].max()) < 1e-8
        assert float(_rel(_crossing_steps(p_w, lam / 2), t_ref).max()) < 1e-8


@pytest.mark.parametrize("eps", [e if e >= 1e-30 else pytest.param(e, marks=pytest.mark.slow) for e in EPS])
def test_order_parameter_weights_and_saxe_map_balanced(eps):
    """Balanced start (one unit per mode): weight form, order-parameter form and the exact map agree
    in every mode's strength (relative 1e-8 at every step, also while it is ε-small) and switch-on step."""
    X, Y = _problem(whitened=True)
    C = Y.shape[1]
    modes = two_layer_modes(X, Y, "linear", eps=eps, init="balanced")
    op = mlp(X, "linear", n_outputs=C)
    W0 = modes.initial_weights(C)
    steps = int((math.log(1 / eps) + 8.0) / 3 * 1.3 / 0.05)
    kw = dict(optimizer=GD(0.05), steps=steps, save=Save(every=1))
    w = simulate(op, Y, W0=W0, form="weights", **kw)
    o = simulate(op, Y, W0=W0, **kw)
    _, _, p_ref = modes.gd(0.05, steps)
    U, V, lam = modes.left, modes.right, modes.singular_values
    t_ref = _crossing_steps(p_ref, lam / 2)
    runs = [o.M]
    if eps >= 1e-30:
        # per-unit strengths of the weight form (unit k carries mode k): relative accuracy at every
        # step, however small.  Below ε ≈ 1e-30 round-off carries the fast mode into the slow units
        # (the pure state is unstable) and the float64 weight form itself drifts; the factored
        # order-parameter form re-separates the eigendirections of M and stays exact.
        p_unit = torch.einsum("ck,tck->tk", U, w.W[:, :C]) * torch.einsum("dk,tdk->tk", V, w.W[:, C:])
        assert float(_rel(p_unit, p_ref).max()) < 1e-8
        runs.append(w.W @ w.W.transpose(1, 2))
    for M in runs:
        p_x = _strengths(M, U, V, C)
        assert float(_rel(p_x, p_ref)[_measurable(p_ref, eps)].max()) < 1e-8
        assert float(_rel(_crossing_steps(p_x, lam / 2), t_ref).max()) < 1e-8
    assert _min_eig_ratio(o.M) >= -1e-14


def _correlated(eps, lr=0.01):
    X, Y = _problem(whitened=False)
    Syx = Y.T @ X / X.shape[0]
    U, _, Vh = torch.linalg.svd(Syx, full_matrices=False)
    op, w, o, steps = _run_pair(X, Y, eps, lr=lr)
    return X, Y, U, Vh.T, w, o, steps


@pytest.mark.parametrize("eps", [1e-4, 1e-8, 1e-13])
def test_order_parameter_matches_weights_on_correlated_inputs(eps):
    """Non-commuting data (correlated inputs): order-parameter form vs the wider weight form."""
    X, Y, U, V, w, o, _ = _correlated(eps)
    C = Y.shape[1]
    Mw = w.W @ w.W.transpose(1, 2)
    lam_w = torch.linalg.eigvalsh(Mw)  # eigenvalues resolvable from the saved matrices (≥ 1e-6 of the largest)
    big = lam_w > 1e-6 * lam_w[:, -1:]
    assert float(_rel(torch.linalg.eigvalsh(o.M), lam_w)[big].max()) < 1e-8
    p_w, p_o = _strengths(Mw, U, V, C), _strengths(o.M, U, V, C)
    t_w, t_o = _crossing_steps(p_w, p_w[-1] / 2), _crossing_steps(p_o, p_w[-1] / 2)
    assert float(_rel(t_o, t_w).max()) < 1e-8
    assert torch.allclose(o.loss, w.loss, rtol=1e-8, atol=0)
    assert _min_eig_ratio(o.M) >= -1e-14


@pytest.mark.slow
@pytest.mark.parametrize("eps", [1e-30, 1e-100])
def test_order_parameter_matches_60_digit_reference_on_correlated_inputs(eps):
    """Correlated inputs at tiny ε: switch-on steps of the order-parameter form to relative 1e-8 of a
    60-digit weight-form run (mpmath); the float64 weight form is shown to be off at the same time."""
    X, Y, U, V, w, o, steps = _correlated(eps)
    C = Y.shape[1]
    p_ref = torch.einsum("ck,tcd,dk->tk", U, _reference_weights_mp(X, Y, eps, 0.01, steps), V)
    level = p_ref[-1] / 2
    t_ref = _crossing_steps(p_ref, level)
    assert float(_rel(_crossing_steps(_strengths(o.M, U, V, C), level), t_ref).max()) < 1e-8
    p_w = _strengths(w.W @ w.W.transpose(1, 2), U, V, C)
    assert float(_rel(_crossing_steps(p_w, level), t_ref).max()) > 1e-8  # round-off of the weight form
    assert _min_eig_ratio(o.M) >= -1e-14


def _full_matrix_propagation(op, Y, eps, lr, steps):
    """The previous algorithm, kept here as a planted error: ``M ← T M Tᵀ`` on the full matrix."""
    M = eps * torch.eye(op.p, dtype=F64)
    out = [M]
    for _ in range(steps):
        if not bool(torch.isfinite(M).all()):  # it can leave the PSD cone and diverge
            out.append(torch.full_like(M, float("nan")))
            continue
        S = 2 * op.adjoint(op(M) - Y) / Y.shape[0]
        T = torch.eye(op.p, dtype=F64) - lr * S
        M = T @ M @ T.T
        M = 0.5 * (M + M.T)
        out.append(M)
    return torch.stack(out)


def test_order_parameter_matches_60_digit_reference_fast():
    """Fast version of the high-precision check (ε = 1e-30, lr 0.04, all three switch-ons): the factored
    order-parameter form agrees with a 60-digit run to 1e-8; the full-matrix propagation does not."""
    eps, lr = 1e-30, 0.04
    X, Y = _problem(whitened=False)
    C = Y.shape[1]
    Syx = Y.T @ X / X.shape[0]
    U, _, Vh = torch.linalg.svd(Syx, full_matrices=False)
    op = mlp(X, "linear", n_outputs=C)
    steps = int(1.2 * 2910 * 0.01 / lr)
    o = simulate(op, Y, M0=eps * torch.eye(op.p, dtype=F64), optimizer=GD(lr), save=Save(every=1), steps=steps)
    p_ref = torch.einsum("ck,tcd,dk->tk", U, _reference_weights_mp(X, Y, eps, lr, steps), Vh.T)
    level = 0.5 * p_ref.max(0).values
    t_ref = _crossing_steps(p_ref, level)
    p_o = _strengths(o.M, U, Vh.T, C)
    assert float(_rel(_crossing_steps(p_o, level), t_ref).max()) < 1e-8
    assert float(_rel(p_o, p_ref)[_measurable(p_ref, eps)].max()) < 1e-8
    p_old = _strengths(_full_matrix_propagation(op, Y, eps, lr, steps), U, Vh.T, C)
    try:
        err_old = float(_rel(_crossing_steps(p_old, level), t_ref).max())
    except IndexError:  # a level never reached
        err_old = math.inf
    assert not err_old < 1e-6


# ------------------------------------------------------------------ gradient flow with default tolerances
@pytest.mark.parametrize("eps", [1e-6, 1e-12, 1e-30])
def test_gradient_flow_defaults_match_exact_riccati_flow(eps):
    """Default tolerances: within relative 1e-6 of the exact isotropic-start flow (the Riccati closed
    form of each SVD mode, :meth:`TwoLayerModes.order_parameter`) at every output time, for any ε."""
    X, Y = _problem(whitened=True)
    C = Y.shape[1]
    modes = two_layer_modes(X, Y, "linear", eps=eps, init="isotropic")
    op = mlp(X, "linear", n_outputs=C)
    t_end = 1.5 * float(modes.switch_times.max())
    te = np.linspace(0.0, t_end, 121)
    tr = gradient_flow(op, Y, M0=eps * torch.eye(op.p, dtype=F64), t_span=(0.0, t_end), t_eval=te)
    assert tr.success
    ref = modes.order_parameter(te)
    err = (tr.M - ref).flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1)
    assert float(err.max()) < 1e-6
    p_ref = modes.strength(te)
    assert float(_rel(_strengths(tr.M, modes.left, modes.right, C), p_ref)[_measurable(p_ref, eps)].max()) < 1e-6
    if eps == 1e-30:
        # the check can fail: an absolute tolerance (here 1e-12 on the factor entries, which start at 1e-15)
        bad = gradient_flow(op, Y, M0=eps * torch.eye(op.p, dtype=F64), t_span=(0.0, t_end), t_eval=te, atol=1e-12)
        bad_err = (bad.M - ref).flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1)
        assert float(bad_err.max()) > 1e-4


def test_gradient_flow_defaults_match_logistic_closed_form():
    """Commuting measurements A_n = diag(x_n) (orthogonal columns), M(0) = εI, ε = 1e-30: every diagonal
    entry is an exact logistic z*/(1 + (z*/ε − 1) e^{−4βt}), in log form; relative 1e-6 throughout."""
    g = torch.Generator().manual_seed(3)
    N, p, eps = 12, 4, 1e-30
    Q = torch.linalg.qr(torch.randn(N, p, generator=g, dtype=F64))[0]
    X = Q * torch.tensor([4.0, 3.0, 2.5, 2.0], dtype=F64)
    y = X @ torch.tensor([2.0, 1.0, 0.5, -0.3], dtype=F64)
    op = DenseStructure(torch.diag_embed(X))
    Cd, beta = (X**2).sum(0) / N, X.T @ y / N
    zs = beta / Cd
    t = torch.linspace(0.0, 1.3 * math.log(1 / eps) / (4 * float(beta[beta > 0].min())), 81, dtype=F64)
    # z = ε / (e^{−4βt} + 4C ε (1 − e^{−4βt})/(4β)), evaluated without overflow
    x = 4 * beta * t[:, None]
    z = eps / (torch.exp(-x) + Cd * eps * (-torch.expm1(-x)) / beta)
    tr = gradient_flow(op, y, M0=eps * torch.eye(p, dtype=F64), t_span=(0.0, float(t[-1])), t_eval=t.numpy())
    d = torch.diagonal(tr.M, dim1=1, dim2=2)
    assert float(_rel(d, z).max()) < 1e-6
    assert torch.allclose(z[-1, :3], zs[:3], rtol=1e-9)
    assert float((tr.M - torch.diag_embed(d)).abs().max()) < 1e-14 * float(d.max())
