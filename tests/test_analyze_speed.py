"""What makes `nqf analyze` fast keeps its numbers: moment rows, chunked full batches, a larger real step."""

import numpy as np
import pytest
import torch

import nqf
from nqf.app._data import load_dataset
from nqf.app._study._moments import moment_rows
from nqf.dynamics import GD, Save
from nqf.structure import mlp


def _loss_and_gradient(op, Y, M):
    """``L(M) = ½‖𝒜(M) − Y‖²/N`` and ``G = 𝒜*(𝒜(M) − Y)/N`` (the gradient the NQF follows)."""
    R = op.forward_unchecked(M) - Y
    n = Y.shape[0]
    return 0.5 * float((R * R).sum()) / n, op.adjoint_unchecked(R) / n


def test_moment_rows_give_the_same_nqf_loss_up_to_a_constant_and_the_same_gradient():
    gen = torch.Generator().manual_seed(3)
    N, D, C = 60, 5, 3
    X = torch.randn(N, D, generator=gen, dtype=torch.float64)
    Y = torch.randn(N, C, generator=gen, dtype=torch.float64)
    Xc, Yc, c = moment_rows(X, Y)
    assert Xc.shape == (D, D) and Yc.shape == (D, C) and c > 0
    full, small = mlp(X, "tanh", n_outputs=C), mlp(Xc, "tanh", n_outputs=C)
    for _ in range(3):
        G = torch.randn(full.p, 4, generator=gen, dtype=torch.float64)
        M = G @ G.T
        L, g = _loss_and_gradient(full, Y, M)
        Lc, gc = _loss_and_gradient(small, Yc, M)
        assert abs(L - (Lc + c)) <= 1e-12 * L
        torch.testing.assert_close(gc, g, rtol=0, atol=1e-12 * float(g.abs().max()))
    # planted: rows without the √(D/N) scale have the right directions but the wrong moments
    wrong = mlp(Xc / (D / N) ** 0.5, "tanh", n_outputs=C)
    Lw, gw = _loss_and_gradient(wrong, Yc / (D / N) ** 0.5, M)
    assert not torch.allclose(gw, g, rtol=1e-3, atol=0)


def test_chunked_full_batch_is_the_same_run(monkeypatch):
    """Full batches above CHUNK_SAMPLES are summed chunk by chunk: the same loss and gradient (round-off)."""
    import nqf.dynamics._network as network

    wine = load_dataset("wine")
    X, Y = torch.as_tensor(wine.X), torch.as_tensor(wine.Y)
    model = torch.nn.Sequential(torch.nn.Linear(13, 8, bias=False), torch.nn.Tanh(), torch.nn.Linear(8, 3, bias=False))
    layout = nqf.modules.select_units(model.double()).layout
    W0 = nqf.dynamics.initial_weights(16, 8, 1e-2, seed=0)

    def run():
        return nqf.train_network(model, layout, X, Y, W0=W0, optimizer=GD(0.3), save=Save(every=1, M=False), steps=40)

    one = run()
    monkeypatch.setattr(network, "CHUNK_SAMPLES", 50)  # 178 samples: 4 chunks
    chunked = run()
    torch.testing.assert_close(chunked.loss, one.loss, rtol=1e-13, atol=0)
    torch.testing.assert_close(chunked.W, one.W, rtol=0, atol=1e-13)
    assert float((one.loss[-1] - one.loss[0]).abs()) > 1e-3  # the run moves: the comparison can fail


@pytest.mark.slow
def test_real_network_at_ten_times_the_step_reads_the_same_drops(monkeypatch):
    """Wine, tanh width 24: the real network at 10 η and 5 η, its times carried onto the clock of η by
    extrapolating in the step, lands on the drop times and levels of the real network at η itself (0.2 %:
    the h² rest); read on its own clock, the run at 5 η is several per cent late."""
    import nqf.app._study._runs as runs

    wine = load_dataset("wine")
    ref = nqf.analyze("mlp:width=24,act=tanh", wine, eps=1e-6, real_step_factor=1.0)
    fast = nqf.analyze("mlp:width=24,act=tanh", wine, eps=1e-6, real_step_factor=10.0)
    assert ref.lr == fast.lr and ref.steps == fast.steps
    t_ref, t_fast = ref.real.times_measured, fast.real.times_measured
    assert np.isfinite(t_ref).all() and t_ref.size >= 2
    np.testing.assert_allclose(t_fast, t_ref, rtol=2e-3)
    np.testing.assert_allclose(fast.real.levels_measured, ref.real.levels_measured, rtol=2e-3)
    assert fast.timings["real_step"] > 0 and fast.timings["real_training_large"] > 0
    # planted: the identity clock (the run's times as they are) misses by GD's delay
    identity = nqf.curves.StepClock(times_run=np.zeros(1), times=np.zeros(1), h_run=1.0, h=1.0)
    monkeypatch.setattr(runs, "step_clock", lambda *a, **k: identity)
    late = nqf.analyze("mlp:width=24,act=tanh", wine, eps=1e-6, real_step_factor=10.0)
    assert not np.allclose(late.real.times_measured, t_ref, rtol=1e-2)


def test_a_real_run_that_diverges_at_the_larger_step_is_repeated_at_eta():
    iris = load_dataset("iris")
    ref = nqf.analyze("mlp:width=16,act=tanh", iris, eps=1e-6, real_step_factor=1.0)
    big = nqf.analyze("mlp:width=16,act=tanh", iris, eps=1e-6, real_step_factor=2000.0)
    assert any("diverged" in n for n in big.notes) and any("diverged" in s for s in big.verdict.text)
    np.testing.assert_array_equal(big.real.times_measured, ref.real.times_measured)
    np.testing.assert_array_equal(big.curves["loss_real"], ref.curves["loss_real"])
    assert not any("diverged" in n for n in ref.notes)
