"""Two-layer-linear regime: SVD modes of Σ_yx against order-parameter GD and a real tanh MLP.

Conventions: L = (1/N) Σ ½‖f − y‖², t = η · steps; ε as in nqf.reductions.svd_modes (M(0) = εI or ε Σ e⁺e⁺ᵀ).
"""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from nqf.curves._steps import detect_steps
from nqf.dynamics import GD, Save
from nqf.errors import NormalFormError, ShapeError
from nqf.networks._mlp import TwoLayerMLP
from nqf.reductions.svd_modes import NotWhitenedError, NotWhitenedWarning, two_layer_modes, whiten
from nqf.reductions.svd_modes._whitening import whitening_error
from nqf.structure._mlp import mlp


def _teacher(lam, N=64, D=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    C = len(lam)
    X = whiten(torch.randn(N, D, generator=g, dtype=torch.float64))
    U, _ = torch.linalg.qr(torch.randn(C, C, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(D, C, generator=g, dtype=torch.float64))
    T = U @ torch.diag(torch.tensor(lam, dtype=torch.float64)) @ V.T
    return X, X @ T.T


def _op_gd(op, Y, M0, eta, steps):
    """Independent order-parameter GD: M ← (I − 2ηG) M (I − 2ηG), G = (1/N) 𝒜*(𝒜(M) − y)."""
    N = op.n_samples
    Id = torch.eye(op.p, dtype=torch.float64)
    M, Ms, L = M0.clone(), [], []
    for n in range(steps + 1):
        r = op(M) - Y
        L.append(float(0.5 * (r**2).sum() / N))
        Ms.append(M)
        if n == steps:
            break
        A = Id - 2 * eta * op.adjoint(r) / N
        M = A @ M @ A
    return torch.tensor(L, dtype=torch.float64), torch.stack(Ms)


def _strengths(Ms, modes, C):
    """p_k = σ'(0) u_kᵀ M_au v_k for a stack of order parameters."""
    return modes.sigma1 * torch.einsum("ck,tcd,dk->tk", modes.left, Ms[:, :C, C:], modes.right)


def _half_time(t, p, target):
    """Linear interpolation of the first crossing p(t) = target."""
    t, p = np.asarray(t), np.asarray(p)
    i = int(np.argmax(p >= target))
    assert p[i] >= target > p[i - 1]
    return float(t[i - 1] + (target - p[i - 1]) / (p[i] - p[i - 1]) * (t[i] - t[i - 1]))


LAM = [2.0, 1.2, 0.6]


def test_whiten_and_error():
    X = torch.randn(50, 4, dtype=torch.float64) * torch.tensor([1.0, 2.0, 0.5, 3.0])
    assert whitening_error(X) > 0.1
    Xw = whiten(X)
    assert whitening_error(Xw) < 1e-13
    assert torch.allclose(Xw.T @ Xw / 50, torch.eye(4, dtype=torch.float64), atol=1e-13)


@pytest.mark.parametrize("init", ["balanced", "isotropic"])
def test_exact_gd_map_equals_order_parameter_simulation(init):
    X, Y = _teacher(LAM)
    modes = two_layer_modes(X, Y, "tanh", eps=1e-8, init=init)
    op = mlp(X, "tanh", n_outputs=3)
    M0 = modes.order_parameter([0.0])[0]
    # the stated start is M(0) = W0 W0ᵀ of the stated weights
    W0 = modes.initial_weights(12)
    assert torch.allclose(W0 @ W0.T, M0, atol=1e-22, rtol=0)
    if init == "isotropic":
        assert torch.allclose(M0, 1e-8 * torch.eye(9, dtype=torch.float64), atol=1e-22)
    eta, steps = 0.02, 1200
    L_sim, Ms = _op_gd(op, Y, M0, eta, steps)
    _, L_pred, p_pred = modes.gd(eta, steps)
    # exact in exact arithmetic; round-off is amplified by the 1/ε growth of each mode (relative 1e-8 bound)
    assert torch.allclose(L_pred, L_sim, rtol=1e-8, atol=1e-12)
    assert torch.allclose(p_pred, _strengths(Ms, modes, 3), rtol=1e-8, atol=1e-14)
    assert L_sim[0] > 0.99 * modes.plateau_losses[0] and L_sim[-1] < 1e-6


@pytest.mark.parametrize("init", ["balanced", "isotropic"])
def test_flow_switch_times_match_small_step_gd(init):
    """Flow prediction vs order-parameter GD at η = 0.004, ε = 1e-8.

    GD grows a mode by (1 + ηζ/2)² per step instead of e^{ηζ}: relative rate error ≈ ηζ_1/4 = 0.004;
    the tolerance 1 % covers it with the interpolation error.
    """
    X, Y = _teacher(LAM)
    eps = 1e-8
    modes = two_layer_modes(X, Y, "tanh", eps=eps, init=init)
    op = mlp(X, "tanh", n_outputs=3)
    eta = 0.004
    steps = int(1.3 * float(modes.switch_times[-1]) / eta)
    L_sim, Ms = _op_gd(op, Y, modes.order_parameter([0.0])[0], eta, steps)
    t = eta * np.arange(steps + 1)
    p = _strengths(Ms, modes, 3)
    for k, lam in enumerate(LAM):
        measured = _half_time(t, p[:, k], lam / 2)
        assert abs(measured - float(modes.switch_times[k])) <= 0.01 * measured
    # leading order ln(1/ε)/ζ_k: within the O(1/ζ_k) next-order term ln(2λ/σ'(0))/ζ_k
    nxt = np.log(2 * np.array(LAM)) / modes.rates.numpy()
    assert np.allclose(modes.switch_times.numpy(), modes.switch_times_leading.numpy() + nxt, atol=1e-6)
    # whole loss curve: the flow loss against GD loss; a time shift δt ≈ 0.004 t gives |ΔL| ≲ |dL/dt| δt
    L_flow = modes.loss(t).numpy()
    assert np.max(np.abs(L_flow - L_sim.numpy())) < 0.03 * float(L_sim[0])


def test_plateau_losses_against_least_squares():
    X, Y = _teacher(LAM)
    Y = Y + 0.3 * torch.randn(Y.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    modes = two_layer_modes(X, Y, "linear", eps=1e-10)
    # final plateau = residual of linear least squares; first = ½ E‖y‖²
    B = torch.linalg.lstsq(X, Y).solution
    L_ls = 0.5 * float(((X @ B - Y) ** 2).sum(1).mean())
    assert math.isclose(modes.loss_inf, L_ls, rel_tol=1e-10)
    assert math.isclose(float(modes.plateau_losses[0]), 0.5 * float((Y**2).sum(1).mean()), rel_tol=1e-12)
    # between switch times the flow loss sits on the plateaus (residual O(ε^{1−λ_{k+1}/λ_k}) tiny here)
    ts = modes.switch_times.numpy()
    for k in range(2):
        tm = math.sqrt(ts[k] * ts[k + 1]) if k else 0.5 * (ts[0] + ts[1])
        Lm = float(modes.loss([tm])[0])
        assert abs(Lm - float(modes.plateau_losses[k + 1])) < 0.05 * float(modes.plateau_losses[0])
    # the plateau after k modes equals the best rank-k linear fit (reduced-rank regression, whitened X)
    U, S, Vh = torch.linalg.svd(Y.T @ X / X.shape[0])
    P1 = S[0] * torch.outer(U[:, 0], Vh[0])
    L1 = 0.5 * float(((X @ P1.T - Y) ** 2).sum(1).mean())
    assert math.isclose(float(modes.plateau_losses[1]), L1, rel_tol=1e-10)


def test_isotropic_closed_form_against_ode():
    """z± of one singular value: dz±/dt = ∓2|σ₁|(p − λ)z±, p = |σ₁|(z⁺ − z⁻)/2, solved by Radau."""
    X, Y = _teacher(LAM)
    s1 = 2 / math.sqrt(math.pi)
    eps = 1e-6
    modes = two_layer_modes(X, Y, "erf", eps=eps, init="isotropic")
    assert math.isclose(modes.sigma1, s1, rel_tol=1e-15)
    assert torch.allclose(modes.rates, 2 * s1 * torch.tensor(LAM, dtype=torch.float64), rtol=1e-10)
    lam = LAM[1]

    def rhs(_, u):  # in log coordinates u = ln z
        zp, zm = np.exp(u)
        p = s1 * (zp - zm) / 2
        return [-2 * s1 * (p - lam), 2 * s1 * (p - lam)]

    t = np.linspace(0, 12, 200)
    sol = solve_ivp(rhs, (0, 12), [math.log(eps)] * 2, method="Radau", t_eval=t, rtol=1e-11, atol=1e-12)
    p_ode = s1 * (np.exp(sol.y[0]) - np.exp(sol.y[1])) / 2
    assert np.allclose(modes.strength(t)[:, 1].numpy(), p_ode, rtol=1e-6, atol=1e-9)
    th = _half_time(t, p_ode, lam / 2)
    assert abs(th - float(modes.switch_times[1])) < 12 / 199 * 0.05 + 1e-3


def test_tiny_eps_is_finite():
    X, Y = _teacher(LAM)
    for init in ("balanced", "isotropic"):
        m = two_layer_modes(X, Y, eps=1e-300, init=init)
        t = np.linspace(0, 2 * float(m.switch_times[-1]), 50)
        L = m.loss(t)
        assert torch.isfinite(L).all() and torch.isfinite(m.switch_times).all()
        assert np.allclose(
            m.switch_times.numpy() * m.rates.numpy(), math.log(1e300) + np.log(2 * np.array(LAM)), rtol=1e-9
        )
        assert abs(float(L[-1]) - m.loss_inf) < 1e-6


def _train_mlp(modes, X, Y, width, eta, steps):
    """Plain full-batch GD on a real tanh MLP; returns times, loss and mode strengths u_kᵀ σ'(0) A U v_k."""
    D, C = X.shape[1], Y.shape[1]
    net = TwoLayerMLP(D, width, C, "tanh")
    net.units.set_W(net, modes.initial_weights(width))
    params = list(net.parameters())
    ps, Ls = [], []
    for n in range(steps + 1):
        out = net(X)
        loss = 0.5 * ((out - Y) ** 2).sum(1).mean()
        with torch.no_grad():
            P = net.readout.weight @ net.input.weight
            ps.append(torch.diagonal(modes.left.T @ P @ modes.right))
            Ls.append(float(loss))
        if n == steps:
            break
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for q, g in zip(params, grads, strict=True):
                q -= eta * g
    return eta * np.arange(steps + 1), np.array(Ls), torch.stack(ps).numpy()


def _mlp_rel_errors(lam, eps, eta, width=32, D=6, seed=0):
    X, Y = _teacher(lam, D=D, seed=seed)
    modes = two_layer_modes(X, Y, "tanh", eps=eps, init="balanced")
    steps = int(1.3 * float(modes.switch_times[-1]) / eta) + 1
    t, L, p = _train_mlp(modes, X, Y, width, eta, steps)
    measured = np.array([_half_time(t, p[:, k], lam[k] / 2) for k in range(len(lam))])
    pred = modes.switch_times.numpy()
    return np.abs(measured - pred) / pred, (t, L, modes)


def test_real_tanh_mlp_steps_at_predicted_times():
    """Real tanh MLP (width 32, 3 outputs, whitened inputs, teacher λ = 1, 0.6, 0.3), balanced W0 = √ε e⁺.

    The NQF holds while the weights are small; the cubic remainder of tanh acts during the O(1/ζ_k)
    transition, so the time error is O(1/ζ_k) while t_k ≈ ln(1/ε)/ζ_k: the relative error shrinks like
    1/ln(1/ε).  Measured: ≈ 9 % at ε = 1e-4, ≈ 4 % at ε = 1e-12 (GD η = 0.02 adds ≈ 0.3 %).
    """
    lam = [1.0, 0.6, 0.3]
    e_big, _ = _mlp_rel_errors(lam, 1e-4, 0.02)
    e_small, (t, L, modes) = _mlp_rel_errors(lam, 1e-12, 0.02)
    assert e_small.max() < e_big.max()
    assert e_small.max() < 0.06
    # the loss sits near the predicted plateaus between the steps (tanh fits the linear teacher
    # only approximately, so a tolerance of 5 % of the initial loss)
    ts = modes.switch_times.numpy()
    for k in range(2):
        i = int(np.searchsorted(t, math.sqrt(ts[k] * ts[k + 1])))
        assert abs(L[i] - float(modes.plateau_losses[k + 1])) < 0.05 * float(modes.plateau_losses[0])
    # the step detector sees the three steps of the real network's loss at the predicted times (the steepest
    # log–log descent lies O(1/ζ_k) from half-saturation; measured within 2.5 %)
    steps = detect_steps(t[1:], L[1:])
    assert len(steps) == 3
    assert np.all(np.abs(steps.times / ts - 1) < 0.05)


@pytest.mark.slow
def test_real_tanh_mlp_steps_bigger():
    """5 modes, width 64, D = 10; ε = 1e-6, 1e-12, 1e-24: the worst relative error decreases."""
    lam = [1.0, 0.7, 0.5, 0.35, 0.25]
    errs = [_mlp_rel_errors(lam, eps, 0.02, width=64, D=10, seed=1)[0].max() for eps in (1e-6, 1e-12, 1e-24)]
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 0.04


def test_errors():
    X, Y = _teacher(LAM)
    Xr = X * torch.linspace(0.5, 2.0, X.shape[1], dtype=torch.float64)
    with pytest.raises(NotWhitenedError, match="not whitened"):
        two_layer_modes(Xr, Y, eps=1e-6)
    with pytest.warns(NotWhitenedWarning, match="not whitened"):
        m = two_layer_modes(Xr, Y, eps=1e-6, on_not_whitened="warn")
    assert m.whitening_error > 0.1
    with pytest.raises(NormalFormError, match="σ\\(0\\)"):
        two_layer_modes(X, Y, "sigmoid", eps=1e-6)
    with pytest.raises(NormalFormError, match="sigma1"):
        two_layer_modes(X, Y, sigma1=0.0, eps=1e-6)
    for bad in (0.0, -1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="`eps`"):
            two_layer_modes(X, Y, eps=bad)
    with pytest.raises(ShapeError, match="`Y`"):
        two_layer_modes(X, Y[:-1], eps=1e-6)
    with pytest.raises(ValueError, match="`init`"):
        two_layer_modes(X, Y, eps=1e-6, init="random")
    m = two_layer_modes(X, Y, eps=1e-6)
    with pytest.raises(ValueError, match="`width`"):
        m.initial_weights(2)
    with pytest.raises(ValueError, match="`eta`"):
        m.gd(-0.1, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        two_layer_modes(X, Y, eps=1e-6)  # whitened: no warning


def test_sigma1_override_and_negative_slope():
    X, Y = _teacher(LAM)
    a = two_layer_modes(X, Y, "linear", eps=1e-6)
    b = two_layer_modes(X, Y, sigma1=1.0, eps=1e-6)
    assert torch.equal(a.switch_times, b.switch_times)
    # σ'(0) < 0 (σ(x) = −tanh x): same rates, mode vectors flip the input block; check against op GD
    neg = two_layer_modes(X, Y, lambda x: -torch.tanh(x), eps=1e-6)
    assert neg.sigma1 == pytest.approx(-1.0)
    op = mlp(X, lambda x: -torch.tanh(x), n_outputs=3)
    L_sim, _ = _op_gd(op, Y, neg.order_parameter([0.0])[0], 0.02, 400)
    assert torch.allclose(neg.gd(0.02, 400)[1], L_sim, rtol=1e-8)


@pytest.mark.parametrize("init", ["balanced", "isotropic"])
def test_more_outputs_than_inputs_with_label_noise(init):
    """C = 4 > D = 2, noisy linear teacher: K = 2 modes plus null directions; still exact under GD."""
    g = torch.Generator().manual_seed(4)
    X = whiten(torch.randn(40, 2, generator=g, dtype=torch.float64))
    Y = X @ torch.randn(2, 4, generator=g, dtype=torch.float64) + 0.2 * torch.randn(
        40, 4, generator=g, dtype=torch.float64
    )
    m = two_layer_modes(X, Y, eps=1e-6, init=init)
    assert m.n_modes == 2 and m.p == 6
    L, Ms = _op_gd(mlp(X, "tanh", n_outputs=4), Y, m.order_parameter([0.0])[0], 0.02, 600)
    assert torch.allclose(m.gd(0.02, 600)[1], L, rtol=1e-10)
    assert math.isclose(float(L[-1]), m.loss_inf, rel_tol=1e-8)


def _late_modes_deviation(init, width):
    """Demo set-up (N = 512 whitened inputs, D = 8, teacher singular values 2, 1, 0.5, ε = 1e-6,
    η = 5e-3, t ≤ 24): a real tanh MLP of the given width; returns measured/predicted − 1 of the three
    switch-on (half-saturation) times, predicted by the exact SVD-mode flow of the same start."""
    from nqf.app._experiments._demo import teacher_task
    from nqf.dynamics import initial_weights, train_network
    from nqf.reductions import crossing_time

    X, Y, _ = teacher_task(512, 8, [2.0, 1.0, 0.5], 0)
    C, D, eps, lr = 3, 8, 1e-6, 5e-3
    p = C + D
    modes = two_layer_modes(X, Y, "tanh", eps=eps, init=init)
    if init == "balanced":
        W0 = modes.initial_weights(width)
    elif width >= p:
        W0 = initial_weights(p, width, eps, torch.Generator().manual_seed(1))
    else:  # fewer units than p: orthonormal columns, M(0) = ε × (a rank-`width` projector)
        g = torch.Generator().manual_seed(1)
        W0 = math.sqrt(eps) * torch.linalg.qr(torch.randn(p, width, generator=g, dtype=torch.float64))[0]
    net = TwoLayerMLP(D, width, C, "tanh")
    tr = train_network(net, net.units, X, Y, W0=W0, optimizer=GD(lr), save=Save(every=5, W=False), steps=int(24 / lr))
    s = torch.einsum("ck,tcd,dk->tk", modes.left, tr.M[:, :C, C:], modes.right).numpy()
    lam, t = modes.singular_values.numpy(), tr.t.numpy()
    meas = np.array([crossing_time(t, s[:, k], lam[k] / 2) for k in range(C)])
    return meas / modes.switch_times.numpy() - 1.0


@pytest.mark.slow
def test_late_modes_readme_claim():
    """The README's statement about late modes, measured with the README's (demo's) own set-up: real tanh
    networks switch on *late*; from the isotropic start the lag shrinks with the width (≈ 17 % at m = 9,
    ≈ 1.4 % at m = 144); the balanced start (one unit per mode) is ≈ 10 % late for the strongest mode at
    any width (the unit carrying a whole mode grows to O(√λ), where tanh's cubic term slows it)."""
    narrow, wide = _late_modes_deviation("isotropic", 9), _late_modes_deviation("isotropic", 144)
    assert (narrow > 0).all() and (wide > 0).all()  # late, not early
    assert narrow.max() > 0.1 and wide.max() < 0.02
    bal_narrow, bal_wide = _late_modes_deviation("balanced", 3), _late_modes_deviation("balanced", 144)
    assert np.allclose(bal_narrow, bal_wide, atol=1e-6)  # zero extra units stay zero
    assert 0.08 < bal_wide[0] < 0.13 and (bal_wide > 0.02).all()
