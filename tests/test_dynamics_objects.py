"""The configuration objects of the dynamics: Loss, Optimizer (GD/SGD/Adam), Save.

Each loss against torch's own losses and autograd (independent truth) in single ``(N, C)`` and
batched ``(B, N, C)`` shapes; each optimizer's validation; the string/keyword aliases give the
same runs as the objects; the batched path gives the single path's trajectory for object inputs.
"""

import dataclasses
import json
import math
import pickle

import pytest
import torch

from nqf.dynamics import (
    GD,
    MSE,
    SGD,
    Adam,
    CrossEntropy,
    Logistic,
    Loss,
    Save,
    as_loss,
    as_optimizer,
    simulate,
    simulate_batched,
    train_network,
)
from nqf.errors import InvalidParameterError, NotClosedError, NQFError
from nqf.networks._mlp import TwoLayerMLP
from nqf.structure import mlp

F64 = torch.float64


def _targets(name, shape, g):
    *lead, N, C = shape
    if name == "mse":
        return torch.randn(N, C, dtype=F64, generator=g)
    if name == "logistic":
        return (torch.rand(N, C, generator=g) > 0.5).to(F64)
    return torch.softmax(torch.randn(N, C, dtype=F64, generator=g), -1)  # class probabilities


def _reference(name, f, y):
    """``L`` per run from torch.nn.functional (summed over outputs, mean over samples)."""
    N = f.shape[-2]
    yb = y.expand_as(f)
    if name == "mse":
        per = torch.nn.functional.mse_loss(f, yb, reduction="none").sum(-1) / 2
    elif name == "logistic":
        per = torch.nn.functional.binary_cross_entropy_with_logits(f, yb, reduction="none").sum(-1)
    else:
        per = torch.nn.functional.cross_entropy(
            f.reshape(-1, f.shape[-1]), yb.reshape(-1, f.shape[-1]), reduction="none"
        )
        per = per.reshape(f.shape[:-1])
    return per.sum(-1) / N


@pytest.mark.parametrize("name", ["mse", "logistic", "cross_entropy"])
@pytest.mark.parametrize("shape", [(7, 1), (7, 3), (4, 7, 3), (2, 3, 5, 2)])
def test_loss_value_and_gradient_against_torch_autograd(name, shape):
    if name == "logistic" and shape[-1] != 1:
        shape = (*shape[:-1], 1)
    if name == "cross_entropy" and shape[-1] < 2:
        shape = (*shape[:-1], 2)
    g = torch.Generator().manual_seed(sum(shape))
    loss = as_loss(name)
    f = (3.0 * torch.randn(*shape, dtype=F64, generator=g)).requires_grad_(True)
    y = _targets(name, shape, g)
    ref = _reference(name, f, y)
    (grad,) = torch.autograd.grad(ref.sum(), f)
    N = shape[-2]
    value = loss.value(f.detach(), y)
    assert value.shape == shape[:-2]
    torch.testing.assert_close(value, ref.detach(), rtol=1e-13, atol=1e-14)
    # ∂L/∂f_n = r_n / N
    torch.testing.assert_close(loss.residual(f.detach(), y) / N, grad, rtol=1e-12, atol=1e-15)
    both = loss.value_and_residual(f.detach(), y)
    torch.testing.assert_close(both[0], value, rtol=1e-14, atol=0.0)
    assert torch.equal(both[1], loss.residual(f.detach(), y))


def test_loss_names_objects_and_errors():
    for name, cls in (("mse", MSE), ("logistic", Logistic), ("cross_entropy", CrossEntropy)):
        loss = as_loss(name)
        assert type(loss) is cls and loss.name == name and loss.closes_on_M
        assert as_loss(loss) is loss
        assert loss.to_dict() == {"loss": name} and pickle.loads(pickle.dumps(loss)) == loss
    assert MSE.quadratic and not Logistic.quadratic and not CrossEntropy.quadratic
    for bad in ("hinge", 3, None):
        with pytest.raises(NQFError, match="`loss` must be one of"):
            as_loss(bad)
    with pytest.raises(TypeError):
        Loss()  # abstract


def test_loss_prepare_keeps_the_label_conventions():
    y = torch.tensor([-1.0, 1.0, 1.0])
    assert torch.equal(Logistic().prepare(y, 3, 1, F64, "cpu"), torch.tensor([[0.0], [1.0], [1.0]], dtype=F64))
    labels = torch.tensor([0.0, 2.0, 1.0])
    onehot = CrossEntropy().prepare(labels, 3, 3, F64, "cpu")
    assert torch.equal(onehot, torch.eye(3, dtype=F64)[[0, 2, 1]])
    with pytest.raises(InvalidParameterError, match="n_outputs=1"):
        Logistic().prepare(torch.zeros(3, 2), 3, 2, F64, "cpu")
    with pytest.raises(InvalidParameterError, match="≥ 2 outputs"):
        CrossEntropy().prepare(labels, 3, 1, F64, "cpu")


# ----------------------------------------------------------------------------- optimizers
@pytest.mark.parametrize(
    "build, name",
    [
        (lambda: GD(0.0), "lr"),
        (lambda: GD(math.nan), "lr"),
        (lambda: GD("0.1"), "lr"),
        (lambda: GD(0.1, momentum=1.0), "momentum"),
        (lambda: GD(0.1, momentum=-0.1), "momentum"),
        (lambda: GD(0.1, weight_decay=-1.0), "weight_decay"),
        (lambda: GD(0.1, weight_decay=math.inf), "weight_decay"),
        (lambda: GD(0.1, batch_size=4), "batch_size"),
        (lambda: SGD(0.1), "batch_size"),
        (lambda: SGD(0.1, batch_size=0), "batch_size"),
        (lambda: SGD(0.1, batch_size=True), "batch_size"),
        (lambda: SGD(0.1, batch_size=2.5), "batch_size"),
        (lambda: Adam(0.1, momentum=0.5), "momentum"),
        (lambda: Adam(0.1, betas=(1.0, 0.9)), "adam_betas[0]"),
        (lambda: Adam(0.1, betas=(0.9, math.nan)), "adam_betas[1]"),
        (lambda: Adam(0.1, betas=0.9), "adam_betas"),
        (lambda: Adam(0.1, eps=0.0), "adam_eps"),
        (lambda: as_optimizer("rmsprop", lr=0.1), "optimizer"),
        (lambda: as_optimizer("gd"), "lr"),
        (lambda: as_optimizer(GD(0.1), lr=0.2), "lr"),
        (lambda: as_optimizer(GD(0.1), momentum=0.5), "momentum"),
        (lambda: as_optimizer(SGD(0.1, batch_size=2), batch_size=3), "batch_size"),
    ],
)
def test_optimizer_validation_names_the_parameter(build, name):
    with pytest.raises(NQFError) as info:
        build()
    assert isinstance(info.value, (ValueError, TypeError))
    assert f"`{name}`" in str(info.value) and "found" in str(info.value)


def test_optimizer_objects_are_frozen_typed_and_serialisable():
    opts = [GD(0.1), GD(0.1, momentum=0.5, weight_decay=1e-3), SGD(0.05, batch_size=8), Adam(1e-3, batch_size=4)]
    for opt in opts:
        with pytest.raises(dataclasses.FrozenInstanceError):
            opt.lr = 1.0  # type: ignore[misc]
        d = opt.to_dict()
        assert json.loads(json.dumps(d)) == d and d["optimizer"] == opt.name and d["lr"] == opt.lr
        assert pickle.loads(pickle.dumps(opt)) == opt
        assert as_optimizer(opt) is opt
    assert GD.closes_on_M and SGD.closes_on_M and not Adam.closes_on_M
    assert not Adam.rotation_equivariant and Adam.not_closed
    # the names build the same objects as the classes
    assert as_optimizer("gd", lr=0.1, momentum=0.5) == GD(0.1, momentum=0.5)
    assert as_optimizer("sgd", lr=0.1, batch_size=3) == SGD(0.1, batch_size=3)
    assert as_optimizer("adam", lr=0.1, adam_betas=(0.8, 0.9)) == Adam(0.1, betas=(0.8, 0.9))
    assert type(GD(0.1).lr) is float and Adam(0.1, betas=[0.5, 0.6]).betas == (0.5, 0.6)


# ----------------------------------------------------------------------------- aliases and objects give the same runs
def _problem(n_outputs=1):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(12, 3, generator=g, dtype=F64)
    y = torch.sin(X[:, 0]) + 0.5 * X[:, 1] if n_outputs == 1 else torch.stack([X[:, 0], X[:, 1] * X[:, 2]], 1)
    op = mlp(X, "tanh", n_outputs=n_outputs)
    W0 = 0.1 * torch.randn(op.p, 4, generator=g, dtype=F64)
    return X, y, op, W0


def _same(a, b):
    assert torch.equal(a.loss, b.loss) and torch.equal(a.t, b.t) and torch.equal(a.step, b.step)
    for x, z in ((a.M, b.M), (a.W, b.W), (a.mu, b.mu)):
        assert (x is None and z is None) or torch.equal(x, z)
    assert a.status == b.status and a.message == b.message
    assert {k: v for k, v in a.info.items() if k != "f0"} == {k: v for k, v in b.info.items() if k != "f0"}


@pytest.mark.parametrize(
    "keywords, obj, form",
    [
        (dict(lr=0.1), GD(0.1), "order_parameter"),
        (dict(lr=0.1, momentum=0.6, weight_decay=0.01), GD(0.1, momentum=0.6, weight_decay=0.01), "order_parameter"),
        (dict(lr=0.1, optimizer="sgd", batch_size=5, seed=3), SGD(0.1, batch_size=5), "weights"),
        (dict(lr=0.02, optimizer="adam", adam_betas=(0.8, 0.99)), Adam(0.02, betas=(0.8, 0.99)), "weights"),
    ],
)
def test_simulate_keywords_and_objects_give_the_same_run(keywords, obj, form):
    """``as_optimizer``'s name-and-keywords form (what the CLI and the sweeps build) is the object itself."""
    _, y, op, W0 = _problem()
    seed = keywords.pop("seed", 0)
    built = as_optimizer(keywords.pop("optimizer", "gd"), **keywords)
    assert built == obj
    a = simulate(op, y, W0=W0, steps=30, form=form, seed=seed, optimizer=built, save=Save(every=4))
    b = simulate(op, y, W0=W0, steps=30, form=form, seed=seed, optimizer=obj, save=Save(every=4))
    _same(a, b)
    assert a.info["optimizer"] == obj.name and a.info["save_every"] == 4 and a.info["loss"] == "mse"


@pytest.mark.parametrize("run", ["simulate", "train_network"])
def test_runs_take_option_objects_only(run):
    """No loose keywords beside the objects (issue 36): a name is refused with the way to build the object, and
    the old alias keywords are not parameters any more."""
    X, y, op, W0 = _problem()
    net = TwoLayerMLP(3, 4, 1, "tanh").to(F64)
    W0n = 0.1 * torch.ones(net.units.get_W(net).shape, dtype=F64)

    def go(**kw):
        if run == "simulate":
            return simulate(op, y, W0=W0, steps=3, **kw)
        return train_network(net, net.units, X, y, W0=W0n, steps=3, **kw)

    with pytest.raises(NQFError, match=r"`optimizer` must be a nqf.dynamics.Optimizer.*as_optimizer\('gd', lr=…\)"):
        go(optimizer="gd")
    with pytest.raises(NQFError, match="`save` must be a nqf.dynamics.Save"):
        go(optimizer=GD(0.1), save={"every": 2})
    for alias in ("lr", "momentum", "weight_decay", "batch_size", "adam_betas", "adam_eps", "save_every", "save_M"):
        with pytest.raises(TypeError, match=alias):
            go(optimizer=GD(0.1), **{alias: 1})
    assert go(optimizer=GD(0.1)).success


def test_simulate_loss_objects_and_save_policy():
    _, y, op, W0 = _problem(n_outputs=2)
    labels = y.argmax(1).to(F64)
    a = simulate(op, labels, W0=W0, optimizer=GD(0.1), save=Save(every=5, M=False), steps=20, loss="cross_entropy")
    b = simulate(op, labels, W0=W0, steps=20, loss=CrossEntropy(), optimizer=GD(0.1), save=Save(every=5, M=False))
    _same(a, b)
    assert a.M is None and len(a) == 5
    with pytest.raises(NQFError, match="`save_M`"):
        Save(M=1)


def test_order_parameter_form_refuses_an_optimizer_that_does_not_close():
    _, y, op, W0 = _problem()
    with pytest.raises(NotClosedError, match="does not close on the order parameter"):
        simulate(op, y, W0=W0, steps=5, optimizer=Adam(0.01))
    with pytest.raises(InvalidParameterError, match="rotation-equivariant"):
        simulate(op, y, W0=W0, steps=5, optimizer=Adam(0.01), form="weights", compress=True)


@pytest.mark.parametrize("obj", [SGD(0.05, batch_size=5, momentum=0.3), Adam(0.02, weight_decay=0.01)])
def test_train_network_keywords_and_objects_give_the_same_run(obj):
    X, y, _, _ = _problem()
    kw = obj.to_dict()
    name = kw.pop("optimizer")
    kw = {k: v for k, v in kw.items() if not (k in ("momentum", "weight_decay") and v == 0.0)}
    kw["adam_betas"] = tuple(kw.pop("adam_betas", (0.9, 0.999)))
    kw["adam_eps"] = kw.pop("adam_eps", 1e-8)
    runs = []
    for opt in (as_optimizer(name, **kw), obj):
        net = TwoLayerMLP(3, 4, 1, "tanh").to(F64)
        W0 = 0.1 * torch.ones(net.units.get_W(net).shape, dtype=F64)
        runs.append(train_network(net, net.units, X, y, W0=W0, steps=12, seed=1, save=Save(every=3), optimizer=opt))
    _same(*runs)
    assert torch.equal(runs[0].info["f0"], runs[1].info["f0"])


# ----------------------------------------------------------------------------- the batched path
@pytest.mark.parametrize("loss", [MSE(), Logistic()])
def test_batched_objects_match_single_path(loss):
    _, y, op, W0 = _problem()
    if isinstance(loss, Logistic):
        y = (y > 0).to(F64)
    M0 = torch.stack([W0 @ W0.T, 0.01 * W0 @ W0.T])
    batch = simulate_batched(
        op, y, M0=M0, steps=40, loss=loss, optimizer=GD(0.1, weight_decay=0.01), save=Save(every=8)
    )
    alias = simulate_batched(op, y, M0=M0, lr=0.1, weight_decay=0.01, steps=40, loss=loss.name, save=Save(every=8))
    for b, (q, a) in enumerate(zip(batch, alias, strict=True)):
        _same(q, a)
        r = simulate(op, y, M0=M0[b], steps=40, loss=loss, optimizer=GD(0.1, weight_decay=0.01), save=Save(every=8))
        assert torch.equal(q.step, r.step)
        assert float((q.M - r.M).abs().max()) <= 1e-12 * float(r.M.abs().max())
        assert float((q.loss - r.loss).abs().max()) <= 1e-12 * float(r.loss[0])
        assert q.info["batched"] and q.info["batch_index"] == b
        assert {k: q.info[k] for k in ("optimizer", "lr", "weight_decay", "loss", "save_every")} == {
            k: r.info[k] for k in ("optimizer", "lr", "weight_decay", "loss", "save_every")
        }
    with pytest.raises(InvalidParameterError, match="without momentum"):
        simulate_batched(op, y, M0=M0, steps=4, optimizer=GD(0.1, momentum=0.5))
    with pytest.raises(InvalidParameterError, match="`lr`"):
        simulate_batched(op, y, M0=M0, steps=4, lr=0.1, optimizer=GD(0.1))


def test_batched_divergence_uses_the_loop_message():
    _, y, op, W0 = _problem()
    M0 = W0 @ W0.T
    batch = simulate_batched(op, y, M0=M0, lr=[0.1, 40.0], steps=200)
    single = simulate(op, y, M0=M0, optimizer=GD(40.0), steps=200)
    assert batch[0].success and not batch[1].success and not single.success
    assert batch[1].message.startswith("diverged at step") and "try lr = " in batch[1].message
    assert "`divergence_threshold` × L(0)" in batch[1].message and "`divergence_threshold` × L(0)" in single.message


def test_recorder_keeps_copies_in_one_buffer_and_grows():
    """The recorder's buffers hold copies of what was added (mutating the input later changes nothing), in
    order, past the initial capacity (doubled), and the trajectory has exactly the saved states."""
    from nqf.dynamics._save import Recorder

    rec = Recorder(capacity=2)
    x = torch.zeros(3, 2, dtype=torch.float64)
    states = []
    for k in range(5):
        x += 1.0
        states.append(x.clone())
        rec.add(k, float(k), W=x)
    x.fill_(-7.0)
    tr = rec.trajectory(lr=0.1, dtype=torch.float64, device=torch.device("cpu"), status=0, message="", info={})
    assert tr.W is not None and tr.M is None and tr.mu is None
    torch.testing.assert_close(tr.W, torch.stack(states), rtol=0, atol=0)
    torch.testing.assert_close(tr.t, 0.1 * torch.arange(5, dtype=torch.float64), rtol=0, atol=1e-15)
    exact = Recorder(capacity=1)
    exact.add(0, 0.0, M=torch.eye(2))
    assert exact.saved("M").shape == (1, 2, 2) and exact.saved("W") is None
