"""The seeded NQF (the real network's clock) against the real network trained by plain GD.

Independent truth: the real tanh network, trained by :func:`nqf.dynamics.train_network`
(autograd of the module) from the same ``W(0)``; the seeded NQF only evaluates the module's
gradient along its own trajectory.  The NQF itself misses the later drops at small ε
(iris, width 64, ε = 1e-12: drop 2 is 36 % late), so the 5 % check below can fail, and a
planted error (seeds 10⁻³ too small in amplitude) makes it fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nqf
from nqf.curves import compare_staircase, real_clock
from nqf.dynamics import GD, Save, Seeding, initial_weights, seeded_nqf, simulate, train_network
from nqf.dynamics._seeded import unlearned_projector
from nqf.errors import InvalidParameterError, NQFError
from nqf.networks import TwoLayerMLP
from nqf.structure import mlp

TOL = 0.05  # the acceptance of issue 20: every drop within 5 % of the real network
WIDTH = 64


@pytest.fixture(scope="module")
def iris(iris_tanh):
    return iris_tanh


def _setup(iris, eps):
    X, Y, op = iris
    st = nqf.predict(op, Y, eps)
    lr = 0.02 / float(st.rates.max())
    steps = int((1.3 * st.times[-1] + 5) / lr)
    W0 = initial_weights(op.p, WIDTH, eps, seed=1)
    return st, lr, steps, W0


def _net(X, Y):
    return TwoLayerMLP(X.shape[1], WIDTH, Y.shape[1], activation="tanh", dtype=torch.float64)


def _times(st, traj):
    return compare_staircase(traj.t.numpy(), traj.loss.numpy(), st).times_measured


def _seeded(iris, st, lr, steps, W0):
    X, Y, op = iris
    net = _net(X, Y)
    return seeded_nqf(op, net, net.units, X, Y, W0=W0, lr=lr, steps=steps, save=Save(every=10, W=False, M=False))


@pytest.fixture(scope="module")
def iris_1e12(iris):
    X, Y, op = iris
    st, lr, steps, W0 = _setup(iris, 1e-12)
    net = _net(X, Y)
    real = train_network(
        net, net.units, X, Y, W0=W0, optimizer=GD(lr), save=Save(every=10, M=False, W=False), steps=steps
    )
    nqf_run = simulate(op, Y, W0=W0, optimizer=GD(lr), save=Save(every=10), steps=steps, form="weights")
    return st, lr, steps, W0, _times(st, real), nqf_run


def test_seeded_nqf_follows_the_real_network_where_the_nqf_does_not(iris, iris_1e12):
    st, lr, steps, W0, t_real, nqf_run = iris_1e12
    seeded = _seeded(iris, st, lr, steps, W0)
    t_seeded, t_nqf = _times(st, seeded), _times(st, nqf_run)
    assert np.all(np.abs(t_seeded / t_real - 1) < TOL), (t_seeded, t_real)
    # the NQF alone is far off on the later drop (the finding of issue 20): the check discriminates
    assert abs(t_nqf[1] / t_real[1] - 1) > 4 * TOL, (t_nqf, t_real)
    clock = real_clock(st, seeded.t.numpy(), seeded.loss.numpy(), nqf_run.t.numpy(), nqf_run.loss.numpy())
    assert clock.staircase.time_rules == ("seeded NQF",) * st.n_drops
    assert np.array_equal(clock.staircase.levels, st.levels)
    assert clock.seeded.tolist() == [False, True]  # drop 2 is seeded at 1e-12
    assert clock.floor[1] > 1e-12 and np.isnan(clock.floor[0])
    assert "seeded=1" in repr(clock) and clock.to_dict()["seeded"] == [False, True]


def test_planted_error_seeds_too_small_fail(iris, iris_1e12, monkeypatch):
    """Seeds 10⁻³ too small in amplitude (the source scaled down): drop 2 misses the 5 % check."""
    st, lr, steps, W0, t_real, _ = iris_1e12
    import nqf.dynamics._seeded as seeded_module

    monkeypatch.setattr(seeded_module, "unlearned_projector", lambda W, f: 1e-3 * unlearned_projector(W, f))
    t_planted = _times(st, _seeded(iris, st, lr, steps, W0))
    assert abs(t_planted[1] / t_real[1] - 1) > TOL, (t_planted, t_real)


def test_planted_error_gaussian_moments_instead_of_the_datas_own_fail(iris, iris_1e12):
    """The seeds computed on 3·10⁴ Gaussian samples with the data's joint (x, y) mean and covariance (the
    data's own second moments, none of their higher ones): drop 2 comes with the NQF's, far past 5 %.  The
    later modes are seeded by what the data have beyond a Gaussian's moments (the issue's hypothesis; with
    only 3·10³ Gaussian samples their sampling fluctuations seed it as well: bench_corrections.py planted)."""
    st, lr, steps, W0, t_real, _ = iris_1e12
    X, Y, op = iris
    Z = torch.cat([X, Y], 1).numpy()
    Zg = torch.as_tensor(np.random.default_rng(3).multivariate_normal(Z.mean(0), np.cov(Z.T), 30_000))
    Xg, Yg = Zg[:, : X.shape[1]].contiguous(), Zg[:, X.shape[1] :].contiguous()
    net = _net(X, Y)
    kw = dict(W0=W0, lr=lr, steps=steps, save=Save(every=10, W=False, M=False))
    gauss = (mlp(Xg, "tanh", n_outputs=Y.shape[1]), Xg, Yg)
    planted = seeded_nqf(op, net, net.units, X, Y, seeding=Seeding(source=gauss, refresh=50), **kw)  # 200× the samples
    t_planted = _times(st, planted)
    assert abs(t_planted[1] / t_real[1] - 1) > TOL, (t_planted, t_real)
    # the same code path with the data themselves as `source` is the seeded NQF (within 5 %)
    own = seeded_nqf(op, _net(X, Y), net.units, X, Y, seeding=Seeding(source=(op, X, Y)), **kw)
    assert np.all(np.abs(_times(st, own) / t_real - 1) < TOL)


@pytest.mark.slow
def test_one_seeded_run_predicts_the_real_network_at_other_eps(iris):
    """A seeded run at ε = 1e-8 carried to 1e-16 (RealClock.times_at) against the real network there."""
    X, Y, op = iris
    st, lr, steps, W0 = _setup(iris, 1e-8)
    seeded = _seeded(iris, st, lr, steps, W0)
    run = simulate(op, Y, W0=W0, optimizer=GD(lr), save=Save(every=10), steps=steps, form="weights")
    clock = real_clock(st, seeded.t.numpy(), seeded.loss.numpy(), run.t.numpy(), run.loss.numpy())
    st2, lr2, steps2, W02 = _setup(iris, 1e-16)
    net = _net(X, Y)
    real = train_network(
        net, net.units, X, Y, W0=W02, optimizer=GD(lr2), save=Save(every=10, M=False, W=False), steps=steps2
    )
    t_real = _times(st2, real)
    assert np.all(np.abs(clock.times_at(1e-16) / t_real - 1) < TOL), (clock.times_at(1e-16), t_real)


def test_unlearned_projector():
    p = 5
    W = 1e-6 * torch.eye(p, dtype=torch.float64)
    assert torch.allclose(unlearned_projector(W), torch.zeros(p, p, dtype=torch.float64))  # nothing learned yet
    W[0, 0] = 1.0
    P = unlearned_projector(W)
    expected = torch.eye(p, dtype=torch.float64)
    expected[0, 0] = 0.0
    assert torch.allclose(P, expected)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"learned_fraction": 1.5}, "learned_fraction"),
        ({"refresh": 0}, "refresh"),
        ({"refresh": 2.5}, "refresh"),
        ({"source": (1, 2)}, r"`source` must be a tuple \(op_s, X_s, y_s\); found tuple of length 2"),
        ({"source": ("op", 1, 2)}, "`source`: op_s must be a StructureOperator with p = 7; found str"),
    ],
)
def test_bad_arguments_are_refused(iris, kwargs, needle):
    X, Y, op = iris
    net = _net(X, Y)
    W0 = initial_weights(op.p, WIDTH, 1e-6, seed=1)
    with pytest.raises(InvalidParameterError, match=needle):
        seeded_nqf(op, net, net.units, X, Y, W0=W0, lr=0.01, steps=2, seeding=Seeding(**kwargs))


def test_operator_without_zero_gradient_condition_is_refused(iris):
    X, Y, _ = iris
    op = mlp(X, "sigmoid", n_outputs=Y.shape[1])
    net = TwoLayerMLP(X.shape[1], WIDTH, Y.shape[1], activation="sigmoid", dtype=torch.float64)
    W0 = initial_weights(op.p, WIDTH, 1e-6, seed=1)
    with pytest.raises(NQFError, match="zero-gradient"):
        seeded_nqf(op, net, net.units, X, Y, W0=W0, lr=0.01, steps=2)


def test_measured_floors_recovers_a_planted_floor():
    """Synthetic sweep: drop 2 follows τ_2 ln(1/ε) above ε* = 1e-10 and the first drop's clock below it."""
    from nqf.curves import measured_floors

    eps = np.array([1e-4, 1e-6, 1e-8, 1e-10, 1e-12, 1e-14, 1e-16])
    L = np.log(1 / eps)
    tau1, tau2, Ls = 0.3, 0.9, np.log(1e10)
    t1 = tau1 * L
    t2_nqf = tau2 * L
    t2_real = np.where(L < Ls, tau2 * L, tau2 * Ls + tau1 * (L - Ls))
    floors = measured_floors(eps, np.c_[t1, t2_real], np.c_[t1, t2_nqf])
    assert np.isnan(floors[0])
    assert 1e-11 < floors[1] < 1e-9, floors
    # never seeded inside the sweep: no floor; seeded from the start: above the sweep
    assert np.isnan(measured_floors(eps, np.c_[t1, t2_nqf], np.c_[t1, t2_nqf])[1])
    assert measured_floors(eps, np.c_[t1, t1 + 1.0], np.c_[t1, t2_nqf])[1] == np.inf
    with pytest.raises(InvalidParameterError, match="decreasing"):
        measured_floors(eps[::-1], np.c_[t1, t2_nqf], np.c_[t1, t2_nqf])


def _later_sweep(monkeypatch=None, scale=1.0):
    from nqf.app._experiments import REGISTRY
    from nqf.app._experiments._later_drops import later_problem, later_runs
    from test_experiments import Ctx

    if monkeypatch is not None:
        import nqf.dynamics._seeded as seeded_module

        monkeypatch.setattr(seeded_module, "unlearned_projector", lambda W, f: scale * unlearned_projector(W, f))
    P = REGISTRY["validity"].Params()  # later_eps 1e-4, 1e-8, 1e-12, 1e-16
    return later_runs(later_problem(P, torch.Generator().manual_seed(11)), P, Ctx())


@pytest.mark.slow
def test_validity_later_drops_seeded_clock_and_floors(monkeypatch):
    """The validity experiment's later-drops part: the predicted seeding floors lie within 10⁴ in ε of the ones
    measured from the real network (issue 20's acceptance); planted: seeds 10⁻³ too small in amplitude, and the
    floor check fails.  Measured, not asserted (docs/theory.md §7): on this teacher–student set-up (width 16)
    the seeded NQF takes drop 3 at ε = 1e-16 to 1.9 % of the real network where the NQF is 48 % late, but is
    6 % early on drop 2 at 1e-12 and 1e-16 (the NQF: 1.4 % and 14 % late)."""
    from nqf.app._experiments import REGISTRY
    from nqf.app._experiments._later_drops import later_checks

    sweep = _later_sweep()
    far = sweep["floor"] > sweep["eps"][:, None]  # the drops the clock calls seeded (NaN compares False)
    assert far.sum() >= 2
    P = REGISTRY["validity"].Params()
    floors = [c for c in later_checks(sweep, P) if "floor" in c.name]
    assert sum(c.passed is True for c in floors) >= 1 and not any(c.passed is False for c in floors), floors
    planted = [c for c in later_checks(_later_sweep(monkeypatch, 1e-3), P) if "floor" in c.name]
    assert any(c.passed is not True for c in planted), [c.to_dict() for c in planted]


def test_verdict_judges_a_slowly_approached_last_level_against_the_nqf():
    """Issue 20 (breast_cancer): the NQF itself is 22 % above its predicted global minimum at the end of the run;
    the verdict says so and judges the real network's last level against the level the NQF reaches."""
    from types import SimpleNamespace

    from nqf.app._study._verdict import judge

    pred = SimpleNamespace(
        n_drops=1, levels=np.array([0.2338, 0.05276]), times=np.array([3.0]), global_minimum=True,
        method="saddle-sequence", time_rules=("exact offset",),
    )  # fmt: skip
    cmp = lambda levels: SimpleNamespace(  # noqa: E731
        levels_measured=np.array(levels), times_measured=np.array([3.04]), time_errors=np.array([0.01]),
        level_errors=np.abs(np.array(levels) / pred.levels - 1), flat=np.array([True, True]),
        flatness=np.array([0.01, 0.02]), flat_threshold=0.25,
    )  # fmt: skip
    val = {"max_gap": 0.02, "left_step": None, "left_time": None}
    slow = judge(pred, cmp([0.2334, 0.06429]), cmp([0.2334, 0.0650]), val, 1e-6, width=64, p=32)
    assert any("approached slowly" in t and "21.9 %" in t for t in slow.text), slow.text
    assert slow.max_level_error < 0.02  # judged against the NQF's 0.06429, not the minimum 0.05276
    fast = judge(pred, cmp([0.2334, 0.0530]), cmp([0.2334, 0.0650]), val, 1e-6, width=64, p=32)
    assert not any("approached slowly" in t for t in fast.text)
    assert fast.max_level_error > 0.2  # the NQF reaches its level: the real network is judged against it


def test_verdict_names_unscaled_regression_targets():
    """Issue 20 (diabetes, target sd 77): leaving the regime at once is explained by the targets' scale."""
    from types import SimpleNamespace

    from nqf.app._study._notes import target_scale as _target_scale

    y = np.random.default_rng(0).normal(0.0, 77.0, size=(200, 1))
    left, stayed = {"left_step": 10}, {"left_step": None}
    assert "standard deviation 7" in _target_scale(SimpleNamespace(task="regression", Y=y), left)[0]
    assert _target_scale(SimpleNamespace(task="regression", Y=y / y.std()), left) == []
    assert _target_scale(SimpleNamespace(task="regression", Y=y), stayed) == []
    assert _target_scale(SimpleNamespace(task="classification", Y=y), left) == []
