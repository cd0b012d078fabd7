"""Every experiment's checks pass at its small configuration, fail when a known error is planted, and
fail (with the reason) when a trajectory they rest on did not finish; cross-field parameter validation."""

import dataclasses
import json

import matplotlib.pyplot as plt
import pydantic
import pytest
import torch

from nqf.experiments import REGISTRY, Outcome, get_experiment

get_experiment("demo")  # loads the catalogue
NAMES = ["demo", "interacting-modes", "lv-staircase", "modules-vs-nqf", "power-law", "saddles", "validity"]


class Ctx:
    """A run context without a run directory (no checkpoints, no progress bars)."""

    device = torch.device("cpu")
    seed = 0

    def progress(self, iterable, desc, total=None):
        return iterable

    def checkpoint(self, key, compute):
        return compute()

    def generator(self, offset=0):
        return torch.Generator().manual_seed(self.seed + offset)


def run_tiny(name, **overrides) -> Outcome:
    exp = REGISTRY[name]
    params = exp.Params(**{**exp.tiny, **overrides})
    out = Outcome()
    try:
        exp.run(params, Ctx(), out)
    finally:
        for fig in out.figures.values():
            plt.close(fig)
    return out


def judged(out):
    return [c for c in out.checks if c.tolerance is not None or not c.inputs_finished]


def test_every_experiment_lists_its_checks():
    from typer.testing import CliRunner

    from nqf.cli import app

    data = json.loads(CliRunner().invoke(app, ["list", "--json"]).output)
    for name in REGISTRY:
        assert data[name]["checks"], f"{name} lists no checks"
    assert set(NAMES) <= set(REGISTRY)


@pytest.mark.parametrize("name", NAMES)
def test_checks_pass_at_the_tiny_configuration(name):
    out = run_tiny(name)
    checks = judged(out)
    assert checks, f"{name} judged no check"
    failed = [c.to_dict() for c in checks if c.passed is not True]
    assert not failed, failed
    for c in out.checks:
        assert c.reference and c.tolerance_origin, f"{name}: check {c.name!r} must state its reference and origin"


def _eps_squared_weights(module, monkeypatch):
    """Plant ``W0 = εQ`` instead of ``√ε Q`` (the initial scale squared) in an experiment module."""
    orig = module.initial_weights
    monkeypatch.setattr(module, "initial_weights", lambda p, m, eps, gen: orig(p, m, eps * eps, gen))


def _planted(name, monkeypatch):
    import nqf.curves
    import nqf.dynamics
    from nqf.experiments import _demo as demo
    from nqf.experiments import _saddles as saddles
    from nqf.reductions.lv import LotkaVolterra

    if name == "demo":
        _eps_squared_weights(demo, monkeypatch)
        return {}
    if name == "saddles":
        _eps_squared_weights(saddles, monkeypatch)
        return {"problems": ["mlp"]}
    if name == "modules-vs-nqf":  # the real network starts at a thousandth of the NQF's weights
        orig = nqf.dynamics.train_network
        monkeypatch.setattr(nqf.dynamics, "train_network", lambda *a, W0, **k: orig(*a, W0=1e-3 * W0, **k))
        return {"families": ["mlp"]}
    if name == "lv-staircase":  # GD from M(0) = ε²I
        orig = nqf.dynamics.simulate
        monkeypatch.setattr(nqf.dynamics, "simulate", lambda op, y, M0, **k: orig(op, y, M0=M0 * M0[0, 0], **k))
        return {}
    if name == "interacting-modes":  # the flow starts from z(0) = ε²
        orig = LotkaVolterra.with_z0
        monkeypatch.setattr(LotkaVolterra, "with_z0", lambda self, z0: orig(self, z0 * z0))
        return {}
    if name == "power-law":  # the wrong exponent a/b instead of (a − 1)/b
        orig = nqf.curves.predict_exponent

        def wrong(ell, zeta, *a, **k):
            pred = orig(ell, zeta, *a, **k)
            return dataclasses.replace(pred, exponent=pred.a / pred.b)

        monkeypatch.setattr(nqf.curves, "predict_exponent", wrong)
        return {}
    if name == "validity":  # networks and NQF started at ε² (W0 = ε W_dir)
        orig = nqf.curves.validity_sweep
        monkeypatch.setattr(
            nqf.curves,
            "validity_sweep",
            lambda s, u, X, y, op, W, eps, **k: orig(s, u, X, y, op, W, [e * e for e in eps], **k),
        )
        return {}
    raise AssertionError(f"no planted error for {name}")


@pytest.mark.parametrize("name", NAMES)
def test_a_planted_error_makes_a_check_fail(name, monkeypatch):
    overrides = _planted(name, monkeypatch)
    out = run_tiny(name, **overrides)
    assert any(c.passed is False for c in judged(out)), [c.to_dict() for c in out.checks]


def test_a_diverged_run_fails_its_checks_with_the_reason():
    out = run_tiny("demo", lr=1.0, t_max=60.0, save_every=1)
    assert out.checks and all(c.passed is False for c in out.checks)
    assert all("did not finish" in c.reason for c in out.checks)


@pytest.mark.parametrize(
    "name, values, key",
    [
        ("demo", {"width": 5}, "`width`"),
        ("demo", {"in_features": 2, "singular_values": [3.0, 2.0, 1.0]}, "`singular_values`"),
        ("lv-staircase", {"n_modes": 8, "n_samples": 4}, "`n_samples`"),
        ("interacting-modes", {"n_modes": 8, "n_samples": 4}, "`n_samples`"),
        ("power-law", {"asymptotic_modes": 1000, "first_mode": 40}, "`first_mode`"),
        ("power-law", {"grid_modes": [100]}, "`grid_modes`"),
        ("validity", {"eps": [1e-2, 1e-4]}, "`eps`"),
        ("validity", {"teacher_width": 9, "width": 4}, "`teacher_width`"),
        ("modules-vs-nqf", {"teacher_rank": 9, "width": 4}, "`teacher_rank`"),
        ("saddles", {"width": 8}, "`width`"),
        ("saddles", {"n_samples": 12}, "`n_samples`"),
    ],
)
def test_sizes_that_cannot_work_together_are_refused_naming_the_key(name, values, key):
    with pytest.raises(pydantic.ValidationError, match=key):
        REGISTRY[name].Params(**values)
