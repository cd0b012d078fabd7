"""The `real-data` experiment: checks against the real network pass, and a planted wrong initial scale fails them."""

import pytest

from nqf.app._experiments import get_experiment, run_experiment
from nqf.dynamics import GD, Save


def _run(tmp_path, name, **over):
    exp = get_experiment("real-data")
    params = exp.Params(**{**exp.tiny, **over})
    return run_experiment(exp, params, tmp_path / name, seed=0)


def test_real_data_checks_pass_and_a_planted_initial_scale_fails(tmp_path):
    ok = _run(tmp_path, "honest")
    judged = [c for c in ok["checks"] if c["passed"] is not None]
    assert len(judged) >= 5
    assert all(c["passed"] for c in judged), [c for c in judged if not c["passed"]]
    assert all(c["tolerance_origin"] for c in judged)
    # W(0) × 30 starts the real network at M(0) = 900 ε I: every drop comes ln(900)/rate earlier
    bad = _run(tmp_path, "planted", planted_init_factor=30.0)
    failed = [c["name"] for c in bad["checks"] if c["passed"] is False]
    assert any(": t_" in n for n in failed), failed


def test_real_data_params_need_two_eps():
    exp = get_experiment("real-data")
    with pytest.raises(ValueError):
        exp.Params(eps=[1e-6])


def test_orbit_tails_predict_the_loss_where_wine_plateau_1_is_read():
    """Wine's first saddle relaxes slowly (rate ≈ 0.08 against an escape rate of 2.0): at ε = 1e-10 the middle of
    plateau 1 is still ≈ 13 % of the drop above the bare saddle level L_1.  The NQF simulation (independent GD,
    order-parameter form) there is 8.2 % above L_1 and within 2.5 % of saddle value + orbit tails
    (clock.composite_loss; measured 2.45 %); at the end of the run (plateau 2, also slowly relaxing) 8 % vs 1 %.
    Tolerance 4 %: half the 8 % level tolerance of the experiment, above the measured composite error."""
    import numpy as np
    import torch

    from nqf.app._data import load_dataset
    from nqf.curves import stable_learning_rate, step_count
    from nqf.curves._compare import compare_staircase, level_read_times
    from nqf.dynamics import initial_weights, simulate
    from nqf.reductions.saddles import saddle_sequence
    from nqf.reductions.saddles._clock import composite_loss, heteroclinic_chain, predicted_escape_times
    from nqf.structure import mlp

    d = load_dataset("wine")
    X, Y = torch.as_tensor(d.X), torch.as_tensor(d.Y)
    op = mlp(X, "tanh", n_outputs=3)
    seq = saddle_sequence(op, Y)
    chain = heteroclinic_chain(seq, rtol=1e-8)
    eps = 1e-10
    times, rules = predicted_escape_times(seq, eps, chain=chain)
    lr = stable_learning_rate(seq.escape_rates)
    sim = simulate(
        op,
        Y,
        W0=initial_weights(op.p, 64, eps),
        optimizer=GD(lr),
        save=Save(every=4, M=False, W=False),
        steps=step_count(times, lr),
    )
    t, L = sim.t.numpy(), sim.loss.numpy()
    c = compare_staircase(t, L, seq.plateau_levels, times)
    pred = composite_loss(chain, seq.plateau_levels, times, level_read_times(float(t[-1]), times))
    bare = np.abs(c.levels_measured[1:] - seq.plateau_levels[1:]) / seq.plateau_levels[1:]
    tails = np.abs(c.levels_measured[1:] - pred[1:]) / pred[1:]
    assert np.all(bare > 0.06), bare
    assert np.all(tails < 0.04), tails
