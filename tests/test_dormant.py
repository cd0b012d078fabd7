"""nqf.reductions.dormant: the first order that carries signal and the degree-k clock, against independent truth.

Oracles: dense eigenvalues (order 2), direct evaluation of the terms (Euler's identity), the balanced
closed form of deep linear networks (Saxe et al. 2014; Arora et al. 2018), and plain numpy gradient descent
of the real networks written from their formulas.  Planted errors: a wrong order ``k``, a wrong initial
scale, the utility maximised on shuffled targets.
"""

import math
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from nqf.errors import InvalidParameterError, NormalFormError
from nqf.reductions.dormant import chain_staircase, chain_term, dormant_staircase, leading_order, unit_term
from nqf.reductions.dormant._utility import utility_maximum
from nqf.structure import mlp, mlp_higher_order


def _modular(P):
    A, B = np.meshgrid(range(P), range(P), indexing="ij")
    A, B = A.ravel(), B.ravel()
    Y = np.eye(P)[(A + B) % P]
    return np.concatenate([np.eye(P)[A], np.eye(P)[B]], 1), Y - Y.mean(0)  # centred, as nqf prepares targets


def _parity(bits, n=16, N=2000, seed=0, shuffle=False):
    rng = np.random.default_rng(seed)
    X = rng.choice([-1.0, 1.0], size=(N, n))
    y = np.prod(X[:, :bits], 1)
    return X, (rng.permutation(y) if shuffle else y)


def test_order_two_utility_is_the_top_eigenvalue_of_the_dense_adjoint():
    X, y = _parity(1, n=6, N=300)
    op = mlp(X, "tanh")
    R = torch.as_tensor(y)[:, None]
    u = utility_maximum(unit_term(op, 2), R)
    dense = torch.linalg.eigvalsh(op.adjoint(R)).max().item() / X.shape[0]
    assert u.value == pytest.approx(dense, rel=1e-8)


def test_euler_identity_and_gradient_match_direct_evaluation():
    X, Y = _modular(5)
    term = unit_term(mlp_higher_order(X, "square", n_outputs=5), 3)
    W = torch.randn(term.p, 4, dtype=torch.float64)
    R = torch.randn(term.N, term.C, dtype=torch.float64)
    direct = torch.stack([(R * term.value(W[:, i : i + 1])).sum() for i in range(4)])
    assert torch.allclose(term.per_column(W, R), direct, rtol=1e-10)
    Wg = W.clone().requires_grad_(True)
    (R * term.value(Wg)).sum().backward()
    assert torch.allclose(term.gradient(W, R), Wg.grad, rtol=1e-10)


@pytest.mark.parametrize(("act", "order"), [("square", 3), ("tanh", 4)])
def test_modular_addition_is_silent_at_second_order(act, order):
    X, Y = _modular(7)
    higher = mlp_higher_order(X, act, n_outputs=7)
    terms = [unit_term(mlp(X, act, n_outputs=7), 2), unit_term(higher, 3), unit_term(higher, 4)]
    lo = leading_order(terms, Y)
    assert lo.order == order and lo.quadratic_silent
    assert lo.maximum(2).value <= lo.maximum(2).tolerance  # exactly zero up to round-off
    assert f"k = {order}" in lo.sentence() and "second" in lo.sentence()
    assert pickle.loads(pickle.dumps(lo)).order == order and "order" in lo.to_dict()
    W = torch.randn(terms[0].p, 2, dtype=torch.float64)
    for term in terms:  # slots, pickled by Python's own protocol (no hand-written state pair)
        back = pickle.loads(pickle.dumps(term))
        assert (back.degree, back.name) == (term.degree, term.name) and torch.equal(back.value(W), term.value(W))


def test_two_bit_parity_is_never_seen_by_an_odd_activation_without_bias():
    X, y = _parity(2, n=10, N=800)
    higher = mlp_higher_order(X, "tanh")
    lo = leading_order([unit_term(higher, 3), unit_term(higher, 4)], y, shuffles=9)
    # tanh is odd: a bias-free unit sees only odd functions of x; x1 x2 is even, so only sampling noise
    assert not any(m.beyond_shuffled for m in lo.maxima)


@pytest.mark.parametrize(("bits", "act", "order"), [(2, "mish", 3), (3, "tanh", 4)])
def test_parity_order_beyond_shuffled_and_the_planted_shuffle(bits, act, order):
    def orders(shuffle):
        X, y = _parity(bits, shuffle=shuffle)
        higher = mlp_higher_order(X, act)
        terms = [unit_term(mlp(X, act), 2), unit_term(higher, 3), unit_term(higher, 4)]
        return leading_order(terms, y, shuffles=19)

    data = orders(False)
    assert next(m.order for m in data.maxima if m.beyond_shuffled) == order
    assert data.maximum(order).value > 2 * data.maximum(order).null  # the relation, far above sampling noise
    # planted: the labels shuffled against the bits; order k no longer stands out (a level-1/20 test per order)
    assert not orders(True).maximum(order).beyond_shuffled


def _balanced_chain(L, s, eps, D):
    """A linear chain ``W_L ⋯ W_1`` in Saxe's decoupled form: every mode at strength ``ε^L``."""
    rng = np.random.default_rng(3)
    U, _ = np.linalg.qr(rng.standard_normal((D, D)))
    V, _ = np.linalg.qr(rng.standard_normal((D, D)))
    frames = [V] + [np.linalg.qr(rng.standard_normal((D, D)))[0] for _ in range(L - 1)] + [U]
    net = nn.Sequential(*[nn.Linear(D, D, bias=False) for _ in range(L)]).double()
    with torch.no_grad():
        for lay, (Ri, Ro) in zip(net, zip(frames[:-1], frames[1:], strict=True), strict=True):
            lay.weight.copy_(torch.as_tensor(Ro @ np.diag(np.full(D, eps)) @ Ri.T))
    return net, U @ np.diag(s) @ V.T


def _whitened(N, D, seed=0):
    X = np.random.default_rng(seed).standard_normal((N, D))
    X -= X.mean(0)
    ev, V = np.linalg.eigh(X.T @ X / N)
    return X @ V @ np.diag(ev**-0.5) @ V.T


@pytest.mark.parametrize("L", [3, 4])
def test_chain_escapes_are_the_balanced_closed_form(L):
    """Balanced layers: ``du/dt = L u^{2−2/L}(s − u)``, ``u(0) = ε^L``, blows up (for ``u ≪ s``) at
    ``ε^{2−L}/((L−2)s)``; the chain's dormant flow must give exactly these times, in order of ``s``."""
    D, eps, s = 4, 1e-3, np.array([3.0, 2.0, 1.0, 0.5])
    X = _whitened(200, D)
    net, T = _balanced_chain(L, s, eps, D)
    term = chain_term(net, X)
    assert term.degree == L and term.linear
    st = chain_staircase(term, X @ T.T, eps)
    closed = eps ** (2 - L) / ((L - 2) * s)
    assert st.n_drops == D
    np.testing.assert_allclose(st.times, closed, rtol=1e-3)
    np.testing.assert_allclose(st.levels, [0.5 * (s[k:] ** 2).sum() for k in range(D + 1)], atol=1e-10)
    wrong = eps ** (2 - (L + 1)) / ((L - 1) * s)  # planted: the wrong order k = L + 1
    assert not np.allclose(st.times, wrong, rtol=0.05)


def _chain_gd(X, Y, Ws, t_end, c=2e-3, eta_max=0.05):
    """Plain GD of ``f = W_L ⋯ W_1 x`` (numpy), relative step control; returns ``(t, loss)``."""
    N, Ws = X.shape[0], [w.copy() for w in Ws]
    t, ts, ls = 0.0, [], []
    while t < t_end:
        H = [X]
        for W in Ws:
            H.append(H[-1] @ W.T)
        D = H[-1] - Y
        back, G = D / N, [None] * len(Ws)
        for i in reversed(range(len(Ws))):
            G[i], back = back.T @ H[i], back @ Ws[i]
        gn = math.sqrt(sum(float((g * g).sum()) for g in G))
        wn = math.sqrt(sum(float((w * w).sum()) for w in Ws))
        eta = min(eta_max, c * wn / gn)
        Ws = [w - eta * g for w, g in zip(Ws, G, strict=True)]
        t += eta
        ts.append(t)
        ls.append(0.5 * float((D * D).sum()) / N)
    return np.array(ts), np.array(ls)


def _midpoint_times(t, loss, levels):
    return np.array([t[np.argmax(loss < 0.5 * (a + b))] for a, b in zip(levels[:-1], levels[1:], strict=True)])


def test_deep_linear_random_start_every_drop_against_gradient_descent():
    D, N, eps = 4, 300, 1e-2
    rng = np.random.default_rng(1)
    X = _whitened(N, D, seed=1)
    U, _ = np.linalg.qr(rng.standard_normal((D, D)))
    V, _ = np.linalg.qr(rng.standard_normal((D, D)))
    Y = X @ (U @ np.diag([3.0, 2.0, 1.2, 0.6]) @ V.T).T
    Ws = [rng.standard_normal((5, D)) * eps, rng.standard_normal((5, 5)) * eps, rng.standard_normal((D, 5)) * eps]
    net = nn.Sequential(nn.Linear(D, 5, bias=False), nn.Linear(5, 5, bias=False), nn.Linear(5, D, bias=False))
    with torch.no_grad():
        for lay, W in zip(net, Ws, strict=True):
            lay.weight.copy_(torch.as_tensor(W))
    st = chain_staircase(chain_term(net, X), Y, eps)
    t, loss = _chain_gd(X, Y, Ws, 1.2 * st.times[-1])
    real = _midpoint_times(t, loss, st.levels)
    np.testing.assert_allclose(real, st.times, rtol=0.05)  # O(1) active phase: ~1–2 % at ε = 1e-2
    planted = chain_staircase(chain_term(net, X), Y, eps, theta0=2.0 * chain_term(net, X).theta)
    assert np.abs(real / planted.times - 1).max() > 0.05  # planted: the wrong initial scale (2×)


def _square_net_gd(X, Y, W0, t_end, c=2e-3, eta_max=0.02):
    """Plain GD of ``f = Σ_i a_i (u_i·x)²`` (numpy), relative step control; returns ``(t, loss)``."""
    C, N = Y.shape[1], X.shape[0]
    A, U = W0[:C].copy(), W0[C:].copy()
    t, ts, ls = 0.0, [], []
    while t < t_end:
        Z = X @ U
        H = Z * Z
        D = H @ A.T - Y
        gA, gU = (D / N).T @ H, X.T @ (((D / N) @ A) * 2 * Z)
        eta = min(eta_max, c * math.sqrt((A * A).sum() + (U * U).sum()) / math.sqrt((gA * gA).sum() + (gU * gU).sum()))
        A, U, t = A - eta * gA, U - eta * gU, t + eta
        ts.append(t)
        ls.append(0.5 * float((D * D).sum()) / N)
    return np.array(ts), np.array(ls)


@pytest.mark.slow  # 56 s: the modular-addition GD oracle (benchmarks/bench_leading_order.py runs it too)
def test_quadratic_activation_modular_addition_first_drops_against_gradient_descent():
    P, m = 7, 12
    X, Y = _modular(P)
    term = unit_term(mlp_higher_order(X, "square", n_outputs=P), 3)
    rng = np.random.default_rng(0)
    W0 = rng.standard_normal((term.p, m)) * 1e-3 / math.sqrt(term.p)
    st = dormant_staircase(term, Y, W0, 1e-3, max_drops=2)
    t, loss = _square_net_gd(X, Y, W0, 1.2 * st.times[-1])
    real = _midpoint_times(t, loss, st.levels)
    np.testing.assert_allclose(real, st.times, rtol=0.05)
    # planted: the clock of the wrong order (k = 4 from the same U*: t ∝ ρ^{-2}) is far off
    rho = np.linalg.norm(W0, axis=0).max()
    assert abs(real[0] / (st.times[0] / rho) - 1) > 0.5


def test_refusals_name_the_parameter():
    X, Y = _modular(5)
    with pytest.raises(InvalidParameterError, match="order"):
        unit_term(mlp_higher_order(X, "square", n_outputs=5), 5)
    with pytest.raises(InvalidParameterError, match="degree"):
        dormant_staircase(unit_term(mlp(X, "tanh", n_outputs=5), 2), Y, np.ones((15, 2)), 1e-3)
    with pytest.raises(NormalFormError, match="homogeneous"):
        chain_term(nn.Sequential(nn.Linear(10, 3), nn.Linear(3, 5)), X)
