"""The seeded NQF's seeds switched off past the last drop (``Seeding(seed_until=…)``) and its two-block steps
(issue 34: the clock at a twentieth of training's cost).

Independent truths: after the seeds go off the run is the NQF's own GD, so it must equal :func:`nqf.simulate`
(weights form) from the same state; the two-block passes must equal the operator's general ``forward_factor`` /
``adjoint_apply``; and ``nqf.analyze``'s clock must read the same drop times as a clock seeded to the end.  Planted:
seeds off one drop too early moves the last drop.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nqf
import nqf.app._study._clock as clock_module
from nqf.app._data import load_dataset
from nqf.dynamics import GD, Save, Seeding, initial_weights, seeded_nqf, simulate
from nqf.errors import NQFError
from nqf.networks import TwoLayerMLP

WIDTH = 16


@pytest.fixture(scope="module")
def iris(iris_tanh):
    X, Y, op = iris_tanh
    st = nqf.predict(op, Y, 1e-8)
    return X, Y, op, st, 0.05 / float(st.rates.max())


def _run(iris, steps, **kw):
    X, Y, op, _, lr = iris
    net = TwoLayerMLP(X.shape[1], WIDTH, Y.shape[1], activation="tanh", dtype=torch.float64)
    W0 = initial_weights(op.p, WIDTH, 1e-8, seed=3)
    save = Save(every=1, M=False)
    return seeded_nqf(op, net, net.units, X, Y, W0=W0, lr=lr, steps=steps, save=save, seeding=Seeding(**kw))


def test_past_seed_until_the_run_is_the_nqfs_own_gd(iris):
    """The same run up to the step where the loss reaches ``seed_until``; from there, GD of the NQF alone, equal to
    ``simulate`` in weights form from that state (to round-off); a run that never gets there is seeded to the end."""
    X, Y, op, st, lr = iris
    steps = int(1.2 * st.times[-1] / lr)
    full = _run(iris, steps)
    level = float(full.loss[len(full.loss) // 2])
    off = _run(iris, steps, seed_until=level)
    k = off.info["seeds_off"]
    assert k is not None and off.info["seed_until"] == level
    assert float(off.loss[k]) <= level < float(off.loss[k - 1])
    torch.testing.assert_close(off.loss[: k + 1], full.loss[: k + 1], rtol=1e-12, atol=0.0)
    nqf_rest = simulate(
        op, Y, W0=off.W[k], optimizer=GD(lr), save=Save(every=1, M=False), steps=steps - k, form="weights"
    )
    torch.testing.assert_close(off.loss[k:], nqf_rest.loss, rtol=1e-9, atol=0.0)
    assert not torch.allclose(off.loss[-1], full.loss[-1], rtol=1e-6, atol=0.0)  # the seeds still act in `full`
    never = _run(iris, 50, seed_until=1e-9)
    assert never.info["seeds_off"] is None


def test_two_block_passes_equal_the_operators_general_ones(iris, monkeypatch):
    """MSE on a two-layer MLP takes the two-block passes; the operator's general forward/adjoint give the same run."""
    fast = _run(iris, 300, bridge=True)
    monkeypatch.setattr(type(iris[2]), "factor_blocks", lambda self: None)
    general = _run(iris, 300, bridge=True)
    torch.testing.assert_close(fast.loss, general.loss, rtol=1e-10, atol=0.0)
    torch.testing.assert_close(fast.W, general.W, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("bad", [float("nan"), "low", float("inf")])
def test_seed_until_is_checked(iris, bad):
    with pytest.raises(NQFError, match="`seed_until`"):
        _run(iris, 2, seed_until=bad)


def _clock_times(monkeypatch, level=None):
    """analyze's clock times on iris, and where each of its two seeded runs switched its seeds off."""
    import nqf.dynamics

    if level is not None:
        monkeypatch.setattr(clock_module, "seeds_off_level", level)
    runs = []

    def recording(*args, **kw):
        out = seeded_nqf(*args, **kw)
        runs.append(out.info["seeds_off"])  # seeding=Seeding(seed_until=…) from analyze
        return out

    monkeypatch.setattr(nqf.dynamics, "seeded_nqf", recording)
    a = nqf.analyze("mlp:width=32,act=tanh", load_dataset("iris"), eps=1e-8, seed=0)
    return a.clock.times, runs[-2:]


def test_analyze_clock_reads_the_same_times_with_its_seeds_off_past_the_last_drop(monkeypatch):
    """Seeds off at 75 % of the last drop: every drop time equal to a clock seeded to the horizon.  Planted: seeds off
    at the previous drop's midpoint, and the last drop comes at the NQF's time instead (more than 5 % later)."""
    with monkeypatch.context() as m:
        t_off, off = _clock_times(m)
    with monkeypatch.context() as m:
        t_full, full = _clock_times(m, lambda levels: float("nan"))  # no level: seeded to the end
    assert all(k is not None for k in off) and full == [None, None]
    assert t_off.size == 2 and np.isfinite(t_off).all()
    np.testing.assert_allclose(t_off, t_full, rtol=1e-12)
    with monkeypatch.context() as m:
        t_planted, _ = _clock_times(m, lambda levels: float(0.5 * (levels[-3] + levels[-2])))
    assert t_planted[-1] > 1.05 * t_full[-1], (t_planted, t_full)


def test_the_seeds_go_off_a_quarter_of_the_last_drop_above_its_level_and_only_after_a_drop():
    from nqf.app._study._clock import SEEDS_OFF_FRACTION, seeds_off_level

    assert SEEDS_OFF_FRACTION == 0.25
    assert seeds_off_level([1.0, 0.6, 0.2]) == pytest.approx(0.3)
    assert np.isnan(seeds_off_level([1.0, 0.2, 0.2]))  # no last drop: seeded to the end
    assert np.isnan(seeds_off_level([1.0, 0.2, 0.5]))
    assert np.isnan(seeds_off_level([1.0, float("nan")]))


@pytest.mark.parametrize("bridge", [False, True])
def test_a_diverging_seeded_run_stops_and_counts_the_states_it_kept(iris, bridge):
    """A step far past the NQF's stability: the run stops as diverged, and its message counts the states it kept
    (all of them, bridged or stepped)."""
    X, Y, op, st, lr = iris
    net = TwoLayerMLP(X.shape[1], WIDTH, Y.shape[1], activation="tanh", dtype=torch.float64)
    W0 = initial_weights(op.p, WIDTH, 1e-2, seed=3)
    out = seeded_nqf(op, net, net.units, X, Y, W0=W0, lr=400 * lr, steps=400, save=Save(every=1, M=False),
                     seeding=Seeding(bridge=bridge))  # fmt: skip
    assert out.status == -1
    assert f"the {len(out.t)} states saved before it are kept" in out.message
