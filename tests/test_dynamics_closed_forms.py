"""Gradient flow and GD against closed-form solutions (Saxe et al. 2014; commuting measurements)."""

import math

import pytest
import torch

from nqf.dynamics import GD, Save, gradient_flow, simulate
from nqf.structure._mlp import mlp
from nqf.structure._operator import DenseStructure

F64 = torch.float64


def saxe_problem(u0=1e-3, s=(3.0, 2.0, 1.0), N=8, D=4):
    r"""Two-layer linear net ``f = W2 W1 x`` on whitened inputs, ``(1/N) Σ x xᵀ = I``, targets ``y = T x``.

    Mapping to nqf conventions: ``L = (1/N) Σ ½‖f − y‖²``, ``t = η · steps``, units
    ``w_i = (a_i, u_i)`` (``a_i`` column i of ``W2``, ``u_i`` row i of ``W1``), so
    ``M_au = Σ_i a_i u_iᵀ = W2 W1``.  Gradient flow ``dW1/dt = W2ᵀ(T − W2 W1)``,
    ``dW2/dt = (T − W2 W1) W1ᵀ`` is Saxe et al.'s equation with ``τ = 1``.  From the
    balanced start aligned with ``T = Σ_α s_α U_α V_αᵀ`` (unit α = ``c_α (U_α, V_α)``),
    each mode strength ``u_α = c_α²`` solves ``du/dt = 2u(s − u)``:

        u_α(t) = s_α / (1 + (s_α/u_α(0) − 1) e^{−2 s_α t}),

    and ``M(t) = Σ_α u_α(t) e_α e_αᵀ``, ``e_α = (U_α, V_α)``.  In Lotka–Volterra
    terms the eigenvalue of ``M`` along ``e_α/√2`` is ``z = 2u`` and
    ``dz/dt = 4 z (β − C z)`` with ``β = s/2``, ``C = 1/4``: the growth rate
    ``ζ = 4β = 2s`` (the factor 4 of docs/theory.md §4.1).
    """
    g = torch.Generator().manual_seed(11)
    C = len(s)
    X = math.sqrt(N) * torch.linalg.qr(torch.randn(N, D, generator=g, dtype=F64))[0]
    U = torch.linalg.qr(torch.randn(C, C, generator=g, dtype=F64))[0]
    V = torch.linalg.qr(torch.randn(D, C, generator=g, dtype=F64))[0]
    s = torch.tensor(s, dtype=F64)
    T = U @ torch.diag(s) @ V.T
    y = X @ T.T
    op = mlp(X, "linear", n_outputs=C)
    E = torch.cat([U, V], 0)  # (p, C): column α = e_α
    W0 = math.sqrt(u0) * E  # width m = C, balanced

    def closed(t):
        t = torch.as_tensor(t, dtype=F64).reshape(-1, 1)
        u = s / (1 + (s / u0 - 1) * torch.exp(-2 * s * t))  # (K, C)
        return torch.einsum("pa,ka,qa->kpq", E, u, E)

    return op, y, W0, closed


def test_saxe_gradient_flow():
    op, y, W0, closed = saxe_problem()
    t_eval = torch.linspace(0, 8, 81)
    tr = gradient_flow(op, y, W0=W0, t_span=(0, 8), t_eval=t_eval.numpy(), rtol=1e-10, atol=1e-12)
    assert tr.success
    ref = closed(t_eval)
    err = float((tr.M - ref).abs().max()) / float(ref.abs().max())
    assert err < 1e-8
    # sigmoidal: mode 3 (s = 1) is still near zero at t = 1 and learned by t = 8
    assert float(tr.loss[-1]) < 1e-6 * float(tr.loss[0])


def test_saxe_gd_converges_to_flow_at_first_order():
    """GD with step η deviates from the closed-form flow by O(η): halving η halves the error."""
    op, y, W0, closed = saxe_problem()
    errs = []
    for lr in (4e-3, 2e-3):
        steps = int(round(6.0 / lr))
        tr = simulate(op, y, W0=W0, optimizer=GD(lr), save=Save(every=steps // 60), steps=steps)
        ref = closed(tr.t)
        errs.append(float((tr.M - ref).abs().max()) / float(ref.abs().max()))
    assert errs[0] < 0.05
    assert 1.7 < errs[0] / errs[1] < 2.3


def commuting_problem(p=4, N=12):
    r"""Matrix sensing with diagonal measurements ``A_n = diag(x_n)``, orthogonal feature columns.

    ``G = diag(g)``, ``g = C z − β`` with ``z = diag M``, ``C = (1/N) XᵀX`` diagonal,
    ``β = (1/N) Xᵀ y``: every diagonal entry is the exact logistic
    ``z_k(t) = z*_k / (1 + (z*_k/z_k(0) − 1) e^{−4 β_k t})``, ``z*_k = β_k / C_kk`` (also
    for ``β_k < 0``, a decaying mode), and ``E(t) = exp(−2∫₀ᵗ G) = diag(√(z_k(t)/z_k(0)))``.
    """
    g = torch.Generator().manual_seed(3)
    Q = torch.linalg.qr(torch.randn(N, p, generator=g, dtype=F64))[0]
    X = Q * torch.tensor([4.0, 3.0, 2.5, 2.0], dtype=F64)  # orthogonal columns
    wstar = torch.tensor([2.0, 1.0, 0.5, -0.3], dtype=F64)
    y = X @ wstar
    op = DenseStructure(torch.diag_embed(X))
    Cd = (X**2).sum(0) / N
    beta = X.T @ y / N
    return op, y, Cd, beta


def test_commuting_flow_closed_form():
    op, y, Cd, beta = commuting_problem()
    g = torch.Generator().manual_seed(4)
    W0 = 0.05 * torch.randn(4, 4, generator=g, dtype=F64)
    M0 = W0 @ W0.T  # not diagonal: the off-diagonal entries follow E M0 E
    z0 = torch.diagonal(M0)
    zs = beta / Cd
    t = torch.linspace(0, 6, 61, dtype=F64)
    z = zs / (1 + (zs / z0 - 1) * torch.exp(-4 * beta * t[:, None]))
    Ed = torch.sqrt(z / z0)
    ref = Ed[:, :, None] * M0 * Ed[:, None, :]
    tr = gradient_flow(op, y, M0=M0, t_span=(0, 6), t_eval=t.numpy(), rtol=1e-11, atol=1e-14)
    err = float((tr.M - ref).abs().max()) / float(ref.abs().max())
    assert err < 1e-8
    assert float(tr.M[-1, 3, 3]) < 0.2 * float(z0[3])  # the β < 0 mode decays like e^{4β_k t}
    # one GD step is exactly z ← (1 − 2ηg)² z on the diagonal
    one = simulate(op, y, M0=M0, optimizer=GD(0.01), save=Save(every=1), steps=1)
    gk = Cd * z0 - beta
    assert torch.allclose(torch.diagonal(one.M[1]), (1 - 2 * 0.01 * gk) ** 2 * z0, rtol=1e-13)


def test_gradient_flow_matches_small_step_gd_and_bad_input():
    op, y, Cd, beta = commuting_problem()
    M0 = 0.01 * torch.eye(4, dtype=F64)
    with pytest.raises(ValueError, match="`t_span` must have t1 > t0"):
        gradient_flow(op, y, M0=M0, t_span=(1, 0))
    with pytest.raises(ValueError, match="positive semidefinite"):
        gradient_flow(op, y, M0=-M0, t_span=(0, 1))
    with pytest.raises(ValueError, match="exactly one of"):
        gradient_flow(op, y, t_span=(0, 1))
    # GD with step η approaches the flow at first order in η: the error halves with η
    M0 = 0.05 * torch.eye(4, dtype=F64) + 0.01
    fl = gradient_flow(op, y, M0=M0, t_span=(0, 2), t_eval=[0.0, 1.0, 2.0], rtol=1e-11, atol=1e-14)
    errs = []
    for lr in (0.004, 0.002):
        tr = simulate(op, y, M0=M0, optimizer=GD(lr), save=Save(every=int(round(1 / lr))), steps=int(round(2 / lr)))
        assert torch.allclose(tr.t, fl.t)
        errs.append(float((tr.M - fl.M).abs().max() / fl.M.abs().max()))
    assert errs[0] < 5e-2
    assert 1.7 < errs[0] / errs[1] < 2.3


def test_non_zgz_flow_is_the_small_step_limit():
    """(M, μ) gradient flow without ZGZ (sigmoid MLP, b ≠ 0): GD error is first order in η."""
    g = torch.Generator().manual_seed(8)
    X = torch.randn(12, 2, generator=g, dtype=F64)
    y = torch.tanh(X[:, 0])
    op = mlp(X, "sigmoid")
    W0 = 0.3 * torch.randn(op.p, 3, generator=g, dtype=F64)
    fl = gradient_flow(op, y, W0=W0, t_span=(0, 2), t_eval=[0.0, 1.0, 2.0], weight_decay=0.1)
    errs = []
    for lr in (0.01, 0.005):
        tr = simulate(
            op,
            y,
            W0=W0,
            optimizer=GD(lr, weight_decay=0.1),
            save=Save(every=int(round(1 / lr))),
            steps=int(round(2 / lr)),
        )
        errs.append(float((tr.M - fl.M).abs().max() + (tr.mu - fl.mu).abs().max()))
    assert errs[0] < 1e-2
    assert 1.7 < errs[0] / errs[1] < 2.3
