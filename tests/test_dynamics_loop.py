"""The one training loop (nqf.dynamics._loop) and the one initial-state parser (nqf.dynamics._initial).

References are independent of the library: ``torch.optim.SGD``/``torch.optim.Adam`` and hand-written
plain-torch updates on a least-squares problem, a hand-written minibatch sampler, closed forms of
``M(0)``.  Agreement is to float64 round-off (a few hundred ulps after tens of steps).
"""

import math

import pytest
import torch

from nqf.dynamics import GD, SGD, Adam, Save, initial_state, initial_weights, simulate, train_network
from nqf.dynamics._loop import StepRule, training_loop
from nqf.errors import InvalidParameterError, ShapeError
from nqf.networks._mlp import TwoLayerMLP
from nqf.structure._mlp import mlp

F64 = torch.float64
RTOL = 1e-12  # float64 round-off over ≤ 40 steps of a well-conditioned problem


def _lsq(N=24, D=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g, dtype=F64)
    y = X @ torch.randn(D, generator=g, dtype=F64) + 0.1 * torch.randn(N, generator=g, dtype=F64)
    w0 = 0.3 * torch.randn(D, generator=g, dtype=F64)
    b0 = torch.tensor([0.2], dtype=F64)
    return X, y, w0, b0


def _loop(X, y, w0, b0, rule, steps, batch_size=None, seed=0, save_every=1):
    """The library loop on ``L = (1/2n) Σ (x·w + b − y)²`` over the two tensors [w, b], closed-form gradient."""
    saved = []

    def evaluate(params, idx):
        w, b = params
        Xb, yb = (X, y) if idx is None else (X[idx], y[idx])
        r = Xb @ w + b - yb
        return 0.5 * (r * r).mean(), (Xb, r)

    def gradient(params, ctx, idx):
        Xb, r = ctx
        return [Xb.T @ r / r.numel(), r.mean().reshape(1)]

    def full_loss(params):
        r = X @ params[0] + params[1] - y
        return float(0.5 * (r * r).mean())

    def save(k, params, loss):
        saved.append((k, params[0].clone(), params[1].clone(), loss))

    out = training_loop(
        [w0, b0],
        rule,
        steps=steps,
        n_samples=X.shape[0],
        batch_size=batch_size,
        seed=seed,
        save_every=save_every,
        divergence_threshold=1e8,
        evaluate=evaluate,
        gradient=gradient,
        save=save,
        full_loss=full_loss,
    )
    return out, saved


def _torch_reference(X, y, w0, b0, steps, *, lr, momentum=0.0, weight_decay=0.0, adam=False, batches=None):
    """The same problem trained by ``torch.optim`` with autograd (independent of nqf)."""
    w = w0.clone().requires_grad_(True)
    b = b0.clone().requires_grad_(True)
    opt = (
        torch.optim.Adam([w, b], lr=lr, weight_decay=weight_decay)
        if adam
        else torch.optim.SGD([w, b], lr=lr, momentum=momentum, weight_decay=weight_decay)
    )
    states = [(w.detach().clone(), b.detach().clone())]
    for k in range(steps):
        idx = None if batches is None else batches[k]
        Xb, yb = (X, y) if idx is None else (X[idx], y[idx])
        opt.zero_grad()
        loss = 0.5 * ((Xb @ w + b - yb) ** 2).mean()
        loss.backward()
        opt.step()
        states.append((w.detach().clone(), b.detach().clone()))
    return states


def _batches(n, batch_size, steps, seed):
    """Hand-written sampler with the documented semantics: a fresh permutation per epoch, consecutive chunks,
    the last incomplete chunk dropped."""
    gen = torch.Generator().manual_seed(seed)
    out, perm = [], []
    while len(out) < steps:
        perm = torch.randperm(n, generator=gen)
        out.extend(perm[i : i + batch_size] for i in range(0, n - batch_size + 1, batch_size))
    return out[:steps]


def _max_rel(saved, states):
    err = 0.0
    for (_, w, b, _), (wr, br) in zip(saved, [states[k] for k, *_ in saved], strict=True):
        err = max(err, float((w - wr).abs().max() / wr.abs().max()), float((b - br).abs().max() / br.abs().max()))
    return err


@pytest.mark.parametrize(
    "kw", [dict(), dict(momentum=0.7), dict(weight_decay=0.3), dict(momentum=0.5, weight_decay=0.1)]
)
def test_full_batch_loop_equals_torch_sgd(kw):
    X, y, w0, b0 = _lsq()
    steps = 40
    out, saved = _loop(X, y, w0, b0, StepRule(lr=0.1, **kw), steps)
    ref = _torch_reference(X, y, w0, b0, steps, lr=0.1, **kw)
    assert out.status == 0 and [s[0] for s in saved] == list(range(steps + 1))
    assert _max_rel(saved, ref) < RTOL
    # the saved loss is the full-data loss at the saved state
    k, w, b, loss = saved[-1]
    assert math.isclose(loss, float(0.5 * ((X @ w + b - y) ** 2).mean()), rel_tol=1e-14)


def test_minibatch_loop_equals_torch_sgd_on_the_same_batches():
    X, y, w0, b0 = _lsq(N=23)
    steps, bs, seed = 30, 5, 7  # 23 = 4 batches of 5 + 3 dropped per epoch
    out, saved = _loop(
        X,
        y,
        w0,
        b0,
        StepRule(lr=0.05, optimizer="sgd", momentum=0.4, weight_decay=0.05),
        steps,
        batch_size=bs,
        seed=seed,
        save_every=4,
    )
    ref = _torch_reference(
        X, y, w0, b0, steps, lr=0.05, momentum=0.4, weight_decay=0.05, batches=_batches(23, bs, steps, seed)
    )
    assert [s[0] for s in saved] == [0, 4, 8, 12, 16, 20, 24, 28, 30]
    assert _max_rel(saved, ref) < RTOL


def test_adam_loop_equals_torch_adam():
    X, y, w0, b0 = _lsq()
    out, saved = _loop(X, y, w0, b0, StepRule(lr=0.02, optimizer="adam", weight_decay=0.01), 25)
    ref = _torch_reference(X, y, w0, b0, 25, lr=0.02, weight_decay=0.01, adam=True)
    assert _max_rel(saved, ref) < RTOL


def test_hand_written_heavy_ball_and_a_planted_wrong_momentum_is_caught():
    """Plain formulas v ← βv + ∇L + λx, x ← x − ηv; the same comparison with β + 0.01 must fail."""
    X, y, w0, b0 = _lsq()
    lr, beta, lam, steps = 0.1, 0.6, 0.2, 20
    _, saved = _loop(X, y, w0, b0, StepRule(lr=lr, momentum=beta, weight_decay=lam), steps)

    def by_hand(beta_used):
        w, b = w0.clone(), b0.clone()
        vw, vb = torch.zeros_like(w), torch.zeros_like(b)
        states = [(w, b)]
        for _ in range(steps):
            r = X @ w + b - y
            vw = beta_used * vw + X.T @ r / r.numel() + lam * w
            vb = beta_used * vb + r.mean() + lam * b
            w, b = w - lr * vw, b - lr * vb
            states.append((w, b))
        return states

    assert _max_rel(saved, by_hand(beta)) < RTOL
    assert _max_rel(saved, by_hand(beta + 0.01)) > 1e-4


def test_divergence_stops_and_keeps_the_states_before():
    X, y, w0, b0 = _lsq()
    out, saved = _loop(X, y, w0, b0, StepRule(lr=50.0), 200)
    assert out.status == -1 and "diverged at step" in out.message
    k_stop = int(out.message.split("diverged at step ")[1].split()[0])
    assert 0 < k_stop < 200 and len(saved) == k_stop
    assert all(math.isfinite(s[3]) for s in saved)


@pytest.mark.parametrize("opt", [GD(0.05, momentum=0.5, weight_decay=0.02), Adam(0.05), SGD(0.05, batch_size=5)])
def test_simulate_weight_form_and_train_network_give_the_same_trajectory(opt):
    """A linear two-layer net is exactly the quadratic NQF model: both front ends of the one loop agree."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(20, 3, generator=g, dtype=F64)
    y = torch.stack([torch.sin(X[:, 0]), X[:, 1] * X[:, 2]], 1)
    net = TwoLayerMLP(3, 5, 2, "linear")
    op = mlp(X, "linear", n_outputs=2)
    W0 = 0.3 * torch.randn(op.p, 5, generator=g, dtype=F64)
    tr = train_network(net, net.units, X, y, W0=W0, optimizer=opt, save=Save(every=3), steps=60)
    q = simulate(op, y, W0=W0, optimizer=opt, save=Save(every=3), steps=60, form="weights")
    assert tr.success and q.success and torch.equal(tr.step, q.step)
    assert torch.allclose(tr.W, q.W, rtol=1e-11, atol=1e-13)
    assert torch.allclose(tr.loss, q.loss, rtol=1e-11, atol=1e-15)


# --------------------------------------------------------------------------- the initial-state parser
def test_initial_weights_give_eps_identity_or_a_rank_deficient_projector():
    p, eps = 6, 1e-3
    W = initial_weights(p, 9, eps, seed=2)
    assert W.shape == (p, 9)
    assert torch.allclose(W @ W.T, eps * torch.eye(p, dtype=F64), rtol=0, atol=1e-15)
    W = initial_state(p, eps=eps, width=4, seed=2).W0  # width < p: M(0) = ε Π, Π a rank-4 projector
    Pi = W @ W.T / eps
    assert W.shape == (p, 4)
    assert torch.allclose(Pi @ Pi, Pi, atol=1e-13) and math.isclose(float(torch.trace(Pi)), 4.0, rel_tol=1e-13)
    assert torch.equal(initial_weights(p, 4, eps, torch.Generator().manual_seed(2)), W)  # generator == seed
    M = initial_state(p, eps=eps).M0
    assert torch.equal(M, eps * torch.eye(p, dtype=F64))


def test_initial_state_parses_and_refuses():
    p = 3
    W0 = torch.randn(p, 5, dtype=F64)
    st = initial_state(p, W0=W0)
    assert st.width == 5 and torch.allclose(st.M, W0 @ W0.T)
    assert "W0" in repr(st) and len(repr(st)) < 80
    M0 = W0 @ W0.T
    assert torch.allclose(initial_state(p, M0=M0).M0, M0, rtol=1e-15)
    with pytest.raises(InvalidParameterError, match="exactly one of `M0`.*both"):
        initial_state(p, M0=M0, W0=W0)
    with pytest.raises(InvalidParameterError, match="neither"):
        initial_state(p)
    with pytest.raises(InvalidParameterError, match="symmetric"):
        initial_state(p, M0=M0 + torch.triu(torch.ones(p, p, dtype=F64), 1))
    with pytest.raises(InvalidParameterError, match="positive semidefinite"):
        initial_state(p, M0=-M0)
    with pytest.raises(InvalidParameterError, match="pass `W0`"):
        initial_state(p, M0=M0, zgz=False)
    with pytest.raises(ShapeError, match="W0"):
        initial_state(p, W0=W0, width=4)
    with pytest.raises(ShapeError, match="M0"):
        initial_state(p, M0=torch.eye(p + 1, dtype=F64))
    with pytest.raises(InvalidParameterError, match="eps"):
        initial_state(p, eps=2.0, width=3)
    batch = torch.stack([M0, 2 * M0])
    assert initial_state(p, M0=batch, batched=True).M0.shape == (2, p, p)
    with pytest.raises(InvalidParameterError, match="run 1"):
        initial_state(p, M0=torch.stack([M0, -M0]), batched=True)


def test_gaussian_initial_weights_have_eps_identity_in_expectation():
    """``W = √ε G/√m``: ``M(0) = W Wᵀ`` is ``εI`` up to fluctuations ``~ ε √(2/m)`` per entry."""
    p, m, eps = 3, 20000, 1e-4
    W = initial_weights(p, m, eps, seed=5, init="gaussian")
    assert W.shape == (p, m)
    err = float((W @ W.T - eps * torch.eye(p, dtype=F64)).abs().max())
    assert err < 6 * eps * math.sqrt(2 / m)  # ≥ 6 standard deviations: a wrong scale (ε², √ε, 1/m) fails
    with pytest.raises(InvalidParameterError, match="init"):
        initial_weights(p, m, eps, init="uniform")
