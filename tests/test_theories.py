"""The `theories` experiment: NQF prediction, seeded NQF and AGF against the real network (plain GD at η).

Its small configuration (the demo's set-up, width 36, ε = 1e-6) passes every judged check; with AGF's cost
step skipped (a planted error) the AGF level of the second plateau misses the real network's (0.19 against
0.13) and its check fails.
"""

from __future__ import annotations

import json

import pytest

from nqf.app._experiments import get_experiment, run_experiment


def _checks(tmp_path, **override) -> dict:
    exp = get_experiment("theories")
    run_experiment(exp, exp.Params(**{**exp.tiny, **override}), tmp_path / "run", seed=0)
    return {c["name"]: c for c in json.loads((tmp_path / "run" / "results.json").read_text())["checks"]}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return _checks(tmp_path_factory.mktemp("planted"), agf_cost_step=False)


def test_small_configuration_passes_every_judged_check(tmp_path):
    checks = _checks(tmp_path)
    judged = {n: c for n, c in checks.items() if c["tolerance"] is not None}
    assert {"demo: t_3 seeded NQF", "demo: L_2 AGF"} <= set(judged)
    assert any(n.startswith("demo: t_3 AGF") for n in judged)
    assert all(c["passed"] for c in judged.values()), [n for n, c in judged.items() if not c["passed"]]


def test_planted_agf_without_cost_step_fails_a_level_check(planted):
    assert planted["demo: L_2 AGF"]["passed"] is False
    assert planted["demo: t_3 seeded NQF"]["passed"] is True  # the other theories are untouched
