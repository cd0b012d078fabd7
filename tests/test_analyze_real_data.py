"""The `real-data` experiment: checks against the real network pass, and a planted wrong initial scale fails them."""

import pytest

from nqf.experiments import get_experiment
from nqf.experiments.runner import run_experiment


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
