"""Closed order-parameter dynamics vs weight form vs autograd (docs/theory.md §3)."""

import math

import pytest
import torch

from nqf.dynamics import GD, SGD, Adam, Save, as_loss, simulate
from nqf.dynamics._loop import minibatch_indices
from nqf.errors import DivergenceError, NonFiniteError, NotClosedError, ShapeError
from nqf.structure._mlp import mlp
from nqf.structure._operator import DenseStructure
from nqf.structure._subspace import data_subspace

F64 = torch.float64
STEPS = 1000
TOL = 1e-12


def rel_err(A, B):
    """max over saved states of ‖A_k − B_k‖ / ‖B_k‖."""
    num = (A - B).flatten(1).norm(dim=1)
    den = B.flatten(1).norm(dim=1)
    return float((num / den).max())


@pytest.fixture(scope="module")
def problem():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(24, 3, generator=g, dtype=F64)
    y = torch.sin(X @ torch.tensor([1.0, -0.5, 0.3], dtype=F64))
    return mlp(X, "tanh"), y  # p = 4


def _predict_autograd(op, M, mu=None):
    """Normal-form output from the dense structure matrices, differentiable in M and μ
    (the operator itself detaches its inputs)."""
    f = op.offset[:, 0] + torch.einsum("nij,ij->n", op.dense(), M)
    if op.linear is not None:
        f = f + op.linear[:, 0] @ mu
    if op.cross is not None:
        f = f + torch.einsum("nij,ij->n", op.cross.dense(), torch.outer(mu, mu) - M)
    return f


OPTS = {
    "gd": GD(0.05),
    "sgd": SGD(0.05, batch_size=6),
    "weight_decay": GD(0.05, weight_decay=0.1),
    "momentum": GD(0.05, momentum=0.9),
    "sgd_momentum_wd": SGD(0.05, batch_size=7, momentum=0.5, weight_decay=0.05),
}


@pytest.mark.parametrize("opt", list(OPTS))
@pytest.mark.parametrize("width", ["1", "p", "4p"])
def test_order_parameter_equals_weight_form(problem, opt, width):
    op, y = problem
    m = {"1": 1, "p": op.p, "4p": 4 * op.p}[width]
    W0 = 0.3 * torch.randn(op.p, m, dtype=F64, generator=torch.Generator().manual_seed(m))
    kw = dict(optimizer=OPTS[opt], steps=STEPS, save=Save(every=1))
    w = simulate(op, y, W0=W0, form="weights", **kw)
    mo = simulate(op, y, W0=W0, form="order_parameter", **kw)
    mM = simulate(op, y, M0=W0 @ W0.T, form="order_parameter", **kw)
    assert w.success and mo.success and len(w) == STEPS + 1
    assert float(w.loss[-1]) < 0.5 * float(w.loss[0])  # it actually trains
    ref = w.W @ w.W.transpose(1, 2)
    assert rel_err(mo.M, ref) < TOL
    assert rel_err(mM.M, ref) < TOL
    assert torch.allclose(mo.loss, w.loss, rtol=TOL, atol=0)
    assert torch.equal(w.t, mo.t) and math.isclose(float(w.t[-1]), 0.05 * STEPS)


def test_weight_form_matches_torch_optimizers(problem):
    """Weight form, its weight decay and momentum conventions, against torch.optim on autograd gradients."""
    op, y = problem
    W0 = 0.3 * torch.randn(op.p, 5, dtype=F64)
    for ours, make in [
        (
            GD(0.05, weight_decay=0.1, momentum=0.8),
            lambda p: torch.optim.SGD([p], lr=0.05, momentum=0.8, weight_decay=0.1),
        ),
        (Adam(0.05, weight_decay=0.01), lambda p: torch.optim.Adam([p], lr=0.05, weight_decay=0.01)),
    ]:
        traj = simulate(op, y, W0=W0, optimizer=ours, save=Save(every=1), steps=200, form="weights")
        W = W0.clone().requires_grad_(True)
        opt = make(W)
        for k in range(200):
            assert torch.allclose(W.detach(), traj.W[k], rtol=1e-10, atol=1e-13)
            opt.zero_grad()
            L = 0.5 * ((_predict_autograd(op, W @ W.T) - y) ** 2).mean()
            assert math.isclose(float(L.detach()), float(traj.loss[k]), rel_tol=1e-12)
            L.backward()
            opt.step()


def test_adam_order_parameter_form_is_refused(problem):
    op, y = problem
    with pytest.raises(NotClosedError, match="does not close on the order parameter"):
        simulate(op, y, M0=torch.eye(op.p, dtype=F64), optimizer=Adam(0.1), steps=3)


def test_sgd_batches_are_shared_and_seeded():
    a = [b.tolist() for b in minibatch_indices(10, 4, 6, seed=3)]
    b = [b.tolist() for b in minibatch_indices(10, 4, 6, seed=3)]
    c = [b.tolist() for b in minibatch_indices(10, 4, 6, seed=4)]
    assert a == b and a != c
    assert all(len(x) == 4 for x in a)
    assert len(set(a[0]) | set(a[1])) == 8  # no repeats within an epoch


@pytest.mark.parametrize("loss,C", [("logistic", 1), ("cross_entropy", 3)])
def test_other_losses(loss, C):
    g = torch.Generator().manual_seed(2)
    X = torch.randn(30, 3, generator=g, dtype=F64)
    op = mlp(X, "tanh", n_outputs=C)
    y = (X[:, 0] > 0).to(F64) if C == 1 else torch.randint(0, C, (30,), generator=g)
    W0 = 0.5 * torch.randn(op.p, 3, generator=g, dtype=F64)
    w = simulate(op, y, W0=W0, optimizer=GD(0.1), save=Save(every=1), steps=300, form="weights", loss=loss)
    mo = simulate(op, y, W0=W0, optimizer=GD(0.1), save=Save(every=1), steps=300, loss=loss)
    assert rel_err(mo.M, w.W @ w.W.transpose(1, 2)) < TOL
    assert float(w.loss[-1]) < float(w.loss[0])
    # residual is ∂ℓ/∂f (autograd of the summed loss)
    f = torch.randn(30, C, dtype=F64, requires_grad=True)
    obj = as_loss(loss)
    yt = obj.prepare(y, 30, C, F64, "cpu")
    (grad,) = torch.autograd.grad(obj.value(f, yt) * 30, f)
    assert torch.allclose(grad, obj.residual(f.detach(), yt), rtol=1e-12, atol=1e-14)


def test_logistic_pm1_labels_are_mapped():
    t = as_loss("logistic").prepare(torch.tensor([-1.0, 1.0, 1.0]), 3, 1, F64, "cpu")
    assert t.flatten().tolist() == [0.0, 1.0, 1.0]


# ------------------------------------------------------------------ without the zero-gradient condition
def _non_zgz_operator(p=4, N=15, seed=5):
    g = torch.Generator().manual_seed(seed)
    sym = lambda Z: 0.5 * (Z + Z.transpose(-1, -2))  # noqa: E731
    A = sym(torch.randn(N, p, p, generator=g, dtype=F64))
    B = 0.3 * sym(torch.randn(N, p, p, generator=g, dtype=F64))
    b = torch.randn(N, p, generator=g, dtype=F64)
    op = DenseStructure(A, linear=b, cross=B, offset=0.1 * torch.randn(N, generator=g, dtype=F64))
    y = torch.randn(N, generator=g, dtype=F64)
    return op, y


def test_non_zgz_weight_form_gradient_is_autograd():
    op, y = _non_zgz_operator()
    W0 = 0.2 * torch.randn(op.p, 3, dtype=F64)
    traj = simulate(op, y, W0=W0, optimizer=GD(0.02), save=Save(every=1), steps=50, form="weights")
    W = W0.clone()
    for k in range(50):
        assert torch.allclose(W, traj.W[k], rtol=1e-11, atol=1e-14)
        Wg = W.clone().requires_grad_(True)
        L = 0.5 * ((_predict_autograd(op, Wg @ Wg.T, Wg.sum(1)) - y) ** 2).mean()
        (g,) = torch.autograd.grad(L, Wg)
        W = W - 0.02 * g


@pytest.mark.parametrize("opt", ["gd", "sgd", "momentum"])
@pytest.mark.parametrize("m", [2, 4, 16])
def test_non_zgz_closes_on_M_and_mu(opt, m):
    op, y = _non_zgz_operator()
    ours = {"gd": GD(0.02), "sgd": SGD(0.02, batch_size=5), "momentum": GD(0.02, momentum=0.7, weight_decay=0.02)}[opt]
    W0 = 0.2 * torch.randn(op.p, m, dtype=F64, generator=torch.Generator().manual_seed(m))
    w = simulate(op, y, W0=W0, optimizer=ours, save=Save(every=1), steps=400, form="weights")
    mo = simulate(op, y, W0=W0, optimizer=ours, save=Save(every=1), steps=400)
    assert w.success and mo.success
    assert rel_err(mo.M, w.W @ w.W.transpose(1, 2)) < 1e-11
    assert rel_err(mo.mu, w.W.sum(2)) < 1e-11


def test_non_zgz_width_enters():
    """Same M(0), different μ(0) (W0 Q with Q orthogonal): different trajectories — unlike with ZGZ."""
    op, y = _non_zgz_operator()
    W0 = 0.3 * torch.randn(op.p, 4, dtype=F64)
    Q = torch.linalg.qr(torch.randn(4, 4, dtype=F64))[0]
    a = simulate(op, y, W0=W0, optimizer=GD(0.02), steps=100)
    b = simulate(op, y, W0=W0 @ Q, optimizer=GD(0.02), steps=100)
    assert torch.allclose(a.M[0], b.M[0], atol=1e-14)
    assert float((a.loss - b.loss).abs().max()) > 1e-4
    with pytest.raises(ValueError, match="pass `W0`"):
        simulate(op, y, M0=W0 @ W0.T, optimizer=GD(0.02), steps=3)


# ------------------------------------------------------------------ compression
def _low_rank_sensing(p=6, r=3, N=20, seed=7):
    """Matrix sensing whose A_n all live in a random r-dimensional subspace of R^p."""
    g = torch.Generator().manual_seed(seed)
    Q = torch.linalg.qr(torch.randn(p, p, generator=g, dtype=F64))[0][:, :r]
    Z = torch.randn(N, r, r, generator=g, dtype=F64)
    A = Q @ (0.5 * (Z + Z.transpose(1, 2))) @ Q.T
    Mstar = Q @ torch.diag(torch.tensor([2.0, 1.0, 0.5], dtype=F64)) @ Q.T
    y = torch.einsum("nij,ij->n", A, Mstar)
    return DenseStructure(A), y, Q


def test_data_subspace_dense_and_probe_agree():
    op, _, Q = _low_rank_sensing()
    for method in ("dense", "probe"):
        U = data_subspace(op, method=method)
        assert U.shape == (6, 3)
        assert torch.allclose(U @ U.T, Q @ Q.T, atol=1e-12)
    X = torch.randn(10, 2, dtype=F64) @ torch.randn(2, 5, dtype=F64)  # rank-2 inputs, D = 5
    mop = mlp(X, "tanh")
    Ud, Up = data_subspace(mop, method="dense"), data_subspace(mop, method="probe")
    assert Ud.shape[1] == Up.shape[1] == 3  # readout + rank(X)
    assert torch.allclose(Ud @ Ud.T, Up @ Up.T, atol=1e-10)


@pytest.mark.parametrize(
    "opt",
    [GD(0.02), GD(0.02, weight_decay=0.1), GD(0.02, momentum=0.8, weight_decay=0.05), SGD(0.02, batch_size=5)],
)
def test_compressed_equals_full(opt):
    op, y, _ = _low_rank_sensing()
    W0 = 0.3 * torch.randn(op.p, 8, dtype=F64)  # has components outside the data subspace
    M0 = W0 @ W0.T
    run = dict(optimizer=opt, steps=STEPS, save=Save(every=10))
    full_w = simulate(op, y, W0=W0, form="weights", **run)
    ref = full_w.W @ full_w.W.transpose(1, 2)
    comp_M = simulate(op, y, M0=M0, compress=True, **run)
    comp_W = simulate(op, y, W0=W0, compress=True, **run)
    comp_Ww = simulate(op, y, W0=W0, form="weights", compress=True, **run)
    assert comp_M.info["rank"] == 3
    for tr in (comp_M, comp_W, comp_Ww):
        assert rel_err(tr.M, ref) < TOL
        assert torch.allclose(tr.loss, full_w.loss, rtol=TOL, atol=1e-15)
    assert rel_err(comp_Ww.W, full_w.W) < TOL
    # predictions identical to the full-width run
    assert torch.allclose(op(comp_M.M[-1]), op(ref[-1]), rtol=1e-11, atol=1e-13)
    if not opt.weight_decay:  # the complement of the data subspace does not move
        U = comp_M.info["basis"]
        Pc = torch.eye(6, dtype=F64) - U @ U.T
        assert torch.allclose(Pc @ comp_M.M[-1] @ Pc, Pc @ M0 @ Pc, atol=1e-13)


# ------------------------------------------------------------------ bad input and divergence
def test_divergence_keeps_trajectory(problem):
    op, y = problem
    W0 = 0.3 * torch.randn(op.p, 4, dtype=F64)
    tr = simulate(op, y, W0=W0, optimizer=GD(50.0), save=Save(every=1), steps=500)
    assert tr.status == -1 and not tr.success
    assert "diverged at step" in tr.message and "Lower `lr`" in tr.message
    assert 1 <= len(tr) < 500 and torch.isfinite(tr.M).all()
    assert torch.allclose(tr.M[0], W0 @ W0.T)
    with pytest.raises(DivergenceError, match="diverged at step") as exc:
        simulate(op, y, W0=W0, optimizer=GD(50.0), steps=500, on_divergence="raise")
    assert len(exc.value.trajectory) >= 1


def test_bad_inputs(problem):
    op, y = problem
    p = op.p
    W0 = torch.randn(p, 3, dtype=F64)
    bad_M = torch.diag(torch.tensor([1.0, -0.5, 1.0, 1.0], dtype=F64))
    with pytest.raises(ValueError, match="positive semidefinite"):
        simulate(op, y, M0=bad_M, optimizer=GD(0.1), steps=2)
    with pytest.raises(ValueError, match="symmetric"):
        simulate(op, y, M0=torch.triu(torch.ones(p, p, dtype=F64)), optimizer=GD(0.1), steps=2)
    with pytest.raises(ValueError, match="exactly one of `M0`.*both"):
        simulate(op, y, M0=W0 @ W0.T, W0=W0, optimizer=GD(0.1), steps=2)
    with pytest.raises(ValueError, match="exactly one of `M0`.*neither"):
        simulate(op, y, optimizer=GD(0.1), steps=2)
    y_nan = y.clone()
    y_nan[3] = float("nan")
    with pytest.raises(NonFiniteError, match="`y` must be finite"):
        simulate(op, y_nan, W0=W0, optimizer=GD(0.1), steps=2)
    with pytest.raises(ShapeError, match="`y` must have shape"):
        simulate(op, y[:-1], W0=W0, optimizer=GD(0.1), steps=2)
    with pytest.raises(ShapeError, match="`W0` must have shape"):
        simulate(op, y, W0=torch.randn(p + 1, 3, dtype=F64), optimizer=GD(0.1), steps=2)
    with pytest.raises(ShapeError, match="`M0` must have shape"):
        simulate(op, y, M0=torch.eye(p + 1, dtype=F64), optimizer=GD(0.1), steps=2)
    with pytest.raises(ValueError, match="`form`='weights' needs `W0`"):
        simulate(op, y, M0=torch.eye(p, dtype=F64), optimizer=GD(0.1), steps=2, form="weights")
    with pytest.raises(ValueError, match="`optimizer`='sgd' needs `batch_size`"):
        simulate(op, y, W0=W0, optimizer=SGD(0.1), steps=2)
    with pytest.raises(ValueError, match="`lr` must be a positive"):
        simulate(op, y, W0=W0, optimizer=GD(-1.0), steps=2)
    with pytest.raises(ValueError, match="`form` must be one of"):
        simulate(op, y, W0=W0, optimizer=GD(0.1), steps=2, form="flow")
    with pytest.raises(ValueError, match="`loss` must be one of"):
        simulate(op, y, W0=W0, optimizer=GD(0.1), steps=2, loss="hinge")


def test_float32_with_own_tolerance(problem):
    op, y = problem
    W0 = 0.3 * torch.randn(op.p, 4, dtype=F64)
    ref = simulate(op, y, W0=W0, optimizer=GD(0.05), save=Save(every=10), steps=300)
    op32 = op.to(torch.float32)
    for form in ("order_parameter", "weights"):
        tr = simulate(op32, y.float(), W0=W0.float(), optimizer=GD(0.05), save=Save(every=10), steps=300, form=form)
        assert tr.M.dtype == torch.float32
        assert rel_err(tr.M.double(), ref.M) < 1e-4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_follows_inputs(problem):
    op, y = problem
    W0 = 0.3 * torch.randn(op.p, 4, dtype=F64)
    ref = simulate(op, y, W0=W0, optimizer=GD(0.05, momentum=0.5), save=Save(every=10), steps=200)
    opc = op.to(device="cuda")
    for form in ("order_parameter", "weights"):
        tr = simulate(
            opc, y.cuda(), W0=W0.cuda(), optimizer=GD(0.05, momentum=0.5), save=Save(every=10), steps=200, form=form
        )
        assert tr.M.device.type == "cuda" and tr.t.device.type == "cuda"
        assert rel_err(tr.M.cpu(), ref.M) < 1e-11
    comp = simulate(opc, y.cuda(), W0=W0.cuda(), optimizer=GD(0.05), save=Save(every=10), steps=200, compress=True)
    assert comp.M.device.type == "cuda"
