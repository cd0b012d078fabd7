"""Tests that pin down details a plausible bug would change silently (each kills a planted mutant).

Each compares the library with an independent computation: the Adam update written out by hand,
the definition of an epoch, the OLS standard error of scipy, the closed-form logistic and a
hand-written GD recursion.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.integrate import solve_ivp

from nqf.app._experiments import Check
from nqf.curves import fit_power_law
from nqf.dynamics import GD, Adam, Save, train_network
from nqf.dynamics._simulate import minibatch_indices
from nqf.networks import TwoLayerMLP
from nqf.reductions.svd_modes import two_layer_modes

F64 = torch.float64


def test_adam_first_steps_are_bias_corrected():
    """Adam with bias correction: the first step moves every weight by ``lr · g/(|g| + ε')`` ≈ ``lr``."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(20, 3, generator=g, dtype=F64)
    y = torch.tanh(X[:, 0] - 0.5 * X[:, 2])
    net = TwoLayerMLP(3, 4, 1, "tanh")
    W0 = 0.3 * torch.randn(net.units.p(dict(net.named_parameters())), 4, generator=g, dtype=F64)
    lr = 1e-3
    tr = train_network(net, net.units, X, y, W0=W0, optimizer=Adam(lr), save=Save(every=1), steps=2)
    gd = train_network(net, net.units, X, y, W0=W0, optimizer=GD(1e-9), save=Save(every=1), steps=1)
    grad = (W0 - gd.W[1]) / 1e-9  # ∇_W L at W0 (plain GD step)
    step1 = tr.W[1] - tr.W[0]
    big = grad.abs() > 1e-4
    expected = -lr * grad / (grad.abs() + 1e-8)  # m̂ = g, v̂ = g² after one bias-corrected step
    assert torch.allclose(step1[big], expected[big], rtol=1e-4, atol=0)
    # second step: m̂ = (0.1 g1 + 0.09 g0)/0.19, v̂ = (0.001 g1² + 0.000999 g0²)/0.001999
    gd2 = train_network(net, net.units, X, y, W0=tr.W[1], optimizer=GD(1e-9), save=Save(every=1), steps=1)
    g1 = (tr.W[1] - gd2.W[1]) / 1e-9
    m = (0.9 * 0.1 * grad + 0.1 * g1) / (1 - 0.9**2)
    v = (0.999 * 0.001 * grad**2 + 0.001 * g1**2) / (1 - 0.999**2)
    step2 = tr.W[2] - tr.W[1]
    assert torch.allclose(step2[big], (-lr * m / (v.sqrt() + 1e-8))[big], rtol=1e-3, atol=1e-10)


@pytest.mark.parametrize("n, b", [(12, 4), (12, 3), (10, 4), (8, 8)])
def test_minibatches_cover_each_epoch_and_reshuffle(n, b):
    """Every epoch is a fresh permutation: its ⌊N/B⌋ batches hold distinct samples (all of them when B | N)."""
    per = n // b
    batches = [bt.tolist() for bt in minibatch_indices(n, b, steps=per * 6, seed=1)]
    assert all(len(bt) == b for bt in batches)
    epochs = [sum(batches[e * per : (e + 1) * per], []) for e in range(6)]
    for ep in epochs:
        assert len(set(ep)) == per * b
        if n % b == 0:
            assert sorted(ep) == list(range(n))
    assert len({tuple(ep) for ep in epochs}) > 1, "the epochs must be reshuffled"


def test_check_without_a_measurement_fails():
    assert Check("q", 1.0, None, 0.1).passed is False
    assert Check("q", 1.0, math.nan, 0.1).passed is False
    assert Check("q", None, 1.0, 0.1).passed is False
    assert Check("q", 1.0, 1.05, 0.1).passed is True
    assert Check("q", 1.0, 1.2, 0.1).passed is False
    assert Check("q", 1.0, None).passed is None  # no tolerance: reported, not judged
    assert Check("q", 0.0, 0.05, 0.1, kind="absolute").passed is True
    assert Check("q", 1.0, 1.0, 0.1, inputs_finished=False, reason="diverged").passed is False
    assert Check("q", 1.0, None, 0.1).to_dict()["passed"] is False


def test_power_law_standard_error_is_the_ols_one():
    """With fewer points than cells the fit is plain OLS of ln L on ln t: scipy's stderr (n − 2 dof)."""
    rng = np.random.default_rng(3)
    t = np.geomspace(1.0, 100.0, 9)
    L = 2.0 * t**-1.3 * np.exp(0.05 * rng.standard_normal(t.size))
    fit = fit_power_law(t, L, window=(1.0, 100.0), n_boot=0)
    ref = stats.linregress(np.log(t), np.log(L))
    assert fit.exponent == pytest.approx(-ref.slope, rel=1e-12)
    assert fit.stderr == pytest.approx(ref.stderr, rel=1e-10)


def test_balanced_start_switch_times_and_gd_are_exact():
    """Balanced start: ``dp/dt = 2σ₁ p (λ − p)``, ``p(0) = σ₁ε/2``, so ``t_k = ln(λ_k/p_0 − 1)/(2σ₁λ_k)``;
    GD written out by hand."""
    g = torch.Generator().manual_seed(2)
    N, D = 64, 4
    Q, _ = torch.linalg.qr(torch.randn(N, D, generator=g, dtype=F64))
    X = math.sqrt(N) * Q
    lam = np.array([2.0, 1.0, 0.5])
    U, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=F64))
    V, _ = torch.linalg.qr(torch.randn(D, 3, generator=g, dtype=F64))
    Y = X @ (U @ torch.diag(torch.as_tensor(lam)) @ V.T).T
    eps = 1e-4
    modes = two_layer_modes(X, Y, "linear", eps=eps, init="balanced")
    p0 = eps / 2
    t_ref = np.log(lam / p0 - 1.0) / (2 * lam)
    assert np.allclose(modes.switch_times.numpy(), t_ref, rtol=1e-12)
    # the flow integrated independently crosses λ/2 at those times
    for k in range(3):
        sol = solve_ivp(
            lambda t, p, lk=lam[k]: [2 * p[0] * (lk - p[0])],
            (0, 2 * t_ref[k]),
            [p0],
            rtol=1e-12,
            atol=1e-16,
            events=lambda t, p, lk=lam[k]: p[0] - lk / 2,
        )
        assert sol.t_events[0][0] == pytest.approx(t_ref[k], rel=1e-8)
    # exact GD in the mode basis: z⁺ ← (1 − 2ηg)² z⁺, g = ½(p − λ), p = z⁺/2 (σ₁ = 1, z⁻ = 0)
    eta, steps = 0.05, 200
    times, losses, hist = modes.gd(eta, steps)
    zp = np.full(3, eps)
    ref = [zp / 2]
    for _ in range(steps):
        gk = 0.5 * (zp / 2 - lam)
        zp = (1 - 2 * eta * gk) ** 2 * zp
        ref.append(zp / 2)
    assert np.allclose(times.numpy(), eta * np.arange(steps + 1), rtol=0, atol=1e-12)
    assert np.allclose(hist.numpy(), np.array(ref), rtol=1e-12, atol=1e-15)
