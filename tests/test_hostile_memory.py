"""Sizes that cannot fit in memory are refused from an estimate before anything is allocated (issue 23, classes 4
and 5).

``nqf run``/``nqf demo`` with size overrides, ``nqf analyze --model mlp:width=…`` (and ``--list-units``) and a
sweep point: one line naming the size parameters, exit 2, no run directory, no ``MemoryError`` or
``alloc_cpu`` message.  The limit is :func:`nqf._memory.memory_limit` (a quarter of the available memory, or
``NQF_MEMORY_LIMIT`` bytes: the override), the same as for saved states.  The sizes of 10¹² below exceed any
machine's memory; the cases with ``NQF_MEMORY_LIMIT`` set show the limit and its override.
"""

import pytest
from typer.testing import CliRunner

from helpers import toml_value
from nqf.app._cli import app
from nqf.app._experiments import REGISTRY, get_experiment
from nqf.app._experiments._runner import check_sizes
from nqf.errors import InvalidParameterError

get_experiment("demo")
runner = CliRunner()
HUGE = 10**12


def _config(tmp_path, name, **params):
    p = tmp_path / f"{name}.toml"
    body = {**REGISTRY[name].tiny, **params}
    p.write_text(f'experiment = "{name}"\n[params]\n' + "".join(f"{k} = {toml_value(v)}\n" for k, v in body.items()))
    return p


def _run(name, key, value=HUGE):
    return lambda t: ["run", str(_config(t, name)), "--set", f"params.{key}={value}", "--out", str(t / "r")]


ANALYZE = ["analyze", "--data", "iris", "--subset", "40"]

# (id, argv builder(tmp_path), NQF_MEMORY_LIMIT or None, substrings of the message)
CASES = [
    ("demo-width", _run("demo", "width"), None, ["`params.width` = 1000000000000", "demo"]),
    ("demo-n-samples", _run("demo", "n_samples"), None, ["`params.n_samples` = 1000000000000"]),
    ("lv-staircase-n-samples", _run("lv-staircase", "n_samples"), None, ["`params.n_samples`", "lv-staircase"]),
    ("interacting-n-points", _run("interacting-modes", "n_points"), None, ["`params.n_points`"]),
    ("interacting-n-samples", _run("interacting-modes", "n_samples"), None, ["`params.n_samples`"]),
    ("modules-width", _run("modules-vs-nqf", "width"), None, ["`params.width`"]),
    ("modules-tokens", _run("modules-vs-nqf", "tokens"), None, ["`params.tokens`"]),
    ("modules-dim", _run("modules-vs-nqf", "dim"), None, ["`params.dim`"]),
    ("power-law-width-factor", _run("power-law", "width_factor"), None, ["`params.width_factor`"]),
    ("real-data-width", _run("real-data", "width"), None, ["`params.width`", "real-data"]),
    ("saddles-width", _run("saddles", "width"), None, ["`params.width`"]),
    ("saddles-n-samples", _run("saddles", "n_samples"), None, ["`params.n_samples`"]),
    ("scaling-real-width", _run("scaling-real", "width"), None, ["`params.width`"]),
    ("validity-width", _run("validity", "width"), None, ["`params.width`"]),
    ("validity-n-samples", _run("validity", "n_samples"), None, ["`params.n_samples`"]),
    (
        "demo-defaults-under-a-1-kB-limit",
        lambda t: ["demo", "--out", str(t / "r")],
        "1000",
        ["`params.width` = 128", "NQF_MEMORY_LIMIT"],
    ),
    (
        "analyze-width",
        lambda t: [*ANALYZE, "--model", f"mlp:width={HUGE}", "--out", str(t / "r")],
        None,
        ["`model`", f"width={HUGE}", "memory limit"],
    ),
    (
        "analyze-width-list-units",
        lambda t: [*ANALYZE, "--model", f"mlp:width={HUGE}", "--list-units"],
        None,
        ["`model`", f"width={HUGE}"],
    ),
    (
        "analyze-width-under-a-10-MB-limit",
        lambda t: [*ANALYZE, "--model", "mlp:width=100000", "--out", str(t / "r")],
        str(10**7),
        ["`model`", "width=100000", "40·100000", "NQF_MEMORY_LIMIT"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_sizes_past_memory_are_refused_before_allocating(case, tmp_path, monkeypatch):
    _, argv, limit, needles = case
    if limit is None:
        monkeypatch.delenv("NQF_MEMORY_LIMIT", raising=False)
    else:
        monkeypatch.setenv("NQF_MEMORY_LIMIT", limit)
    res = runner.invoke(app, argv(tmp_path))
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in res.output, res.output
    assert "memory limit" in lines[-1] and "alloc_cpu" not in res.output and "MemoryError" not in res.output
    for s in needles:
        assert s in lines[-1], (s, lines[-1])
    assert not (tmp_path / "r").exists()
    assert not [p.name for p in tmp_path.iterdir() if "nqf-new" in p.name]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_experiment_at_its_default_and_tiny_sizes_passes_the_check(name, monkeypatch):
    """The check can pass: the shipped configs fit under 1 GiB by the estimate (and fail under 1 kB)."""
    exp = get_experiment(name)
    monkeypatch.setenv("NQF_MEMORY_LIMIT", str(2**30))
    for params in (exp.Params(), exp.Params(**exp.tiny)):
        check_sizes(exp, params)
    monkeypatch.setenv("NQF_MEMORY_LIMIT", "1000")
    with pytest.raises(InvalidParameterError, match="memory limit"):
        check_sizes(exp, exp.Params())


def test_the_override_lets_the_sizes_through(monkeypatch):
    exp = get_experiment("demo")
    params = exp.Params(**{**exp.tiny, "width": 10**6})  # 8·10⁶·(N + D) bytes by the estimate
    monkeypatch.setenv("NQF_MEMORY_LIMIT", str(10**7))
    with pytest.raises(InvalidParameterError, match="params.width"):
        check_sizes(exp, params)
    monkeypatch.setenv("NQF_MEMORY_LIMIT", str(10**12))
    check_sizes(exp, params)


def test_a_sweep_point_past_memory_is_a_failed_row_without_a_directory(tmp_path, monkeypatch):
    from nqf.app._sweep._execute import run_point

    monkeypatch.delenv("NQF_MEMORY_LIMIT", raising=False)
    config = {"experiment": "demo", "seed": 0, "params": {**REGISTRY["demo"].tiny, "width": HUGE}}
    row = run_point(config, str(tmp_path / "p"))
    assert row["status"] == "failed" and row["error_type"] == "ParameterError"
    assert "`params.width`" in row["error"] and "memory limit" in row["error"]
    assert not (tmp_path / "p").exists()


def test_the_api_build_model_refuses_a_builtin_width_past_memory(monkeypatch):
    from nqf.app._study._models import build_model

    monkeypatch.delenv("NQF_MEMORY_LIMIT", raising=False)
    with pytest.raises(InvalidParameterError, match=f"width={HUGE}"):
        build_model(f"mlp:width={HUGE}", 4, 3)
    assert sum(p.numel() for p in build_model("mlp:width=8", 4, 3).parameters()) == 8 * (4 + 3)  # the check passes
