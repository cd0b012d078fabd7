"""Runaway runs are refused from the estimate before they start (issue 23, class 4, and ``--threads``).

``--steps`` above ``--max-steps`` (default 10⁷) is refused before anything runs;
``--lr`` so small that even ``5/lr`` steps (every run goes past ``t = 5``) exceed the cap is refused before
anything is loaded, a smaller excess once the drop times are predicted, before any training, and no run
directory is left behind; an ``--lr`` so large that a run stops at its first step is named; ``nqf run``,
``demo`` and sweep points refuse a GD loop of more steps than ``--max-steps`` (default 10⁷) when it starts;
``--threads`` above 1024 is a flag error; more than 100 000 seeds (counted before a range is expanded) are
refused at once.
"""

import pytest
from typer.testing import CliRunner

from helpers import toml_value
from nqf.app._cli import app
from nqf.app._experiments import REGISTRY, get_experiment
from nqf.app._sweep import parse_seeds
from nqf.errors import InvalidParameterError, SweepError

MAX_STEPS = 10_000_000  # nqf analyze --max-steps default (nqf.app._study._cli.MAX_STEPS)
MAX_SEEDS = 100_000  # nqf.app._sweep._grid.MAX_SEEDS

get_experiment("demo")
runner = CliRunner()


def _assert_one_line(res, needles):
    out = res.output
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    assert res.exit_code == 2, out
    assert lines and lines[-1].startswith("error: "), out
    assert len([ln for ln in lines if ln.startswith("error: ")]) == 1, out
    assert "Traceback" not in out
    for s in needles:
        assert s in lines[-1], (s, lines[-1])


@pytest.fixture(scope="module")
def demo_cfg(tmp_path_factory):
    p = tmp_path_factory.mktemp("cfg") / "demo.toml"
    lines = ['experiment = "demo"', "[params]"] + [f"{k} = {toml_value(v)}" for k, v in REGISTRY["demo"].tiny.items()]
    p.write_text("\n".join(lines) + "\n")
    return p


ANALYZE = ["analyze", "--data", "iris", "--subset", "40", "--model", "mlp:width=4"]

# (id, argv builder(tmp_path, cfg), substrings of the message)
CASES = [
    ("analyze-steps-1e12", lambda t, c: [*ANALYZE, "--steps", str(10**12)], ["--steps", str(10**12)]),
    (
        "analyze-steps-above-max-steps",
        lambda t, c: [*ANALYZE, "--steps", "50", "--max-steps", "10"],
        ["--steps", "--max-steps"],
    ),
    ("analyze-steps-just-above-default-cap", lambda t, c: [*ANALYZE, "--steps", str(MAX_STEPS + 1)], ["--steps"]),
    (
        "analyze-lr-1e-300-before-the-prediction",
        lambda t, c: [*ANALYZE, "--lr", "1e-300", "--out", str(t / "r")],
        ["`lr`", "1e-300", "--max-steps"],
    ),
    (
        "analyze-lr-needing-more-than-max-steps",
        lambda t, c: [*ANALYZE, "--lr", "0.001", "--max-steps", "1000", "--out", str(t / "r")],
        ["`lr`", "0.001", "max_steps=1000", "--max-steps"],
    ),
    (
        "analyze-lr-1e-7-past-the-default-cap",
        lambda t, c: [*ANALYZE, "--lr", "1e-7", "--out", str(t / "r")],
        ["`lr`", "1e-07", "max_steps=10000000"],
    ),
    (
        "analyze-lr-1e6-diverges-at-its-first-step",
        lambda t, c: [*ANALYZE, "--lr", "1e6", "--out", str(t / "r")],
        ["`lr`", "1e+06", "saved state", "smaller --lr"],
    ),
    ("analyze-max-steps-zero", lambda t, c: [*ANALYZE, "--max-steps", "0"], ["--max-steps"]),
    (
        "run-demo-t-max-1e8-ten-billion-steps",
        lambda t, c: [
            *("run", str(c), "--set", "params.t_max=1e8", "--set", "params.save_every=100000000"),
            *("--out", str(t / "r")),
        ],
        ["`steps`", "10000000000", "max_steps=10000000", "--max-steps"],
    ),
    (
        "run-demo-tiny-above-max-steps-1000",
        lambda t, c: ["run", str(c), "--max-steps", "1000", "--out", str(t / "r")],
        ["`steps`", "1200", "max_steps=1000"],
    ),
    (
        "demo-max-steps-10",
        lambda t, c: ["demo", "--max-steps", "10", "--out", str(t / "r")],
        ["`steps`", "max_steps=10"],
    ),
    ("run-max-steps-zero", lambda t, c: ["run", str(c), "--max-steps", "0", "--out", str(t / "r")], ["--max-steps"]),
    ("analyze-threads-1e9", lambda t, c: [*ANALYZE, "--threads", str(10**9)], ["--threads"]),
    ("analyze-threads-1025", lambda t, c: [*ANALYZE, "--threads", "1025"], ["--threads"]),
    ("demo-threads-1e12", lambda t, c: ["demo", "--threads", str(10**12), "--out", str(t / "r")], ["--threads"]),
    ("run-threads-1e6", lambda t, c: ["run", str(c), "--threads", str(10**6), "--out", str(t / "r")], ["--threads"]),
    (
        "sweep-seeds-ten-million-dry-run",
        lambda t, c: ["sweep", str(c), "--seeds", "0-10000000", "--dry-run", "--out", str(t / "s")],
        ["seeds", "0-10000000", "at most"],
    ),
    (
        "sweep-seeds-two-ranges-over-the-cap",
        lambda t, c: [
            "sweep",
            str(c),
            "--seeds",
            f"0-{MAX_SEEDS - 1},{MAX_SEEDS}-{MAX_SEEDS + 5}",
            "--dry-run",
            "--out",
            str(t / "s"),
        ],
        ["seeds", "at most"],
    ),
    (
        "sweep-seeds-range-of-1e18",
        lambda t, c: ["sweep", str(c), "--seeds", f"0-{10**18}", "--dry-run", "--out", str(t / "s")],
        ["seeds", "at most"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_refused_before_starting(case, tmp_path, demo_cfg):
    _, argv, needles = case
    res = runner.invoke(app, argv(tmp_path, demo_cfg))
    _assert_one_line(res, needles)
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


@pytest.mark.slow  # the drop times are predicted first (~30 s on a shared machine)
def test_an_lr_refused_from_the_predicted_steps_leaves_no_run_directory(tmp_path):
    """5/η = 5·10⁶ steps pass the cap; the predicted drop times (t_K ≈ 28 on iris) need more: refused after the
    prediction, before training, and the staged run is dropped."""
    out = tmp_path / "run"
    res = runner.invoke(app, [*ANALYZE, "--lr", "1e-6", "--out", str(out)])
    _assert_one_line(res, ["`lr`", "1e-06", "past the last predicted drop", "--max-steps"])
    assert not out.exists() and not [p.name for p in tmp_path.iterdir() if "nqf-new" in p.name]


def test_a_run_within_max_steps_is_not_refused(tmp_path, demo_cfg):
    """The cap can pass: the tiny demo takes t_max / lr = 1200 steps per loop."""
    res = runner.invoke(app, ["run", str(demo_cfg), "--max-steps", "1200", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output


def test_a_sweep_point_past_max_steps_is_a_failed_row_without_a_directory(tmp_path):
    from nqf.app._sweep._execute import run_point

    config = {"experiment": "demo", "seed": 0, "params": dict(REGISTRY["demo"].tiny)}
    row = run_point(config, str(tmp_path / "p"), max_steps=100)
    assert row["status"] == "failed" and row["error_type"] == "ParameterError" and "max_steps=100" in row["error"]
    assert not (tmp_path / "p").exists()


def test_the_python_api_has_no_step_cap_unless_one_is_set():
    from nqf._validation import step_cap, steps_value

    assert steps_value(10**12) == 10**12
    with step_cap(100), pytest.raises(InvalidParameterError, match="max_steps=100"):
        steps_value(101)
    assert steps_value(10**12) == 10**12  # the cap ends with its block


def test_steps_within_the_cap_are_not_refused_by_it(tmp_path):
    """The check can fail: a small --steps passes the cap (the run is cut short by --list-units)."""
    res = runner.invoke(app, [*ANALYZE, "--steps", "20", "--max-steps", "20", "--list-units"])
    assert res.exit_code == 0, res.output


def test_api_analyze_refuses_steps_above_max_steps():
    import nqf
    from nqf.app._data import load_dataset

    with pytest.raises(InvalidParameterError, match="max_steps"):
        nqf.analyze("mlp:width=4", load_dataset("iris", subset=40), steps=100, max_steps=10)


@pytest.mark.slow  # the drop times are predicted first
def test_api_analyze_refuses_an_lr_whose_steps_exceed_max_steps():
    import nqf
    from nqf.app._data import load_dataset

    with pytest.raises(InvalidParameterError, match="`lr`"):
        nqf.analyze("mlp:width=4", load_dataset("iris", subset=40), lr=1e-300, max_steps=10_000)


@pytest.mark.parametrize(
    "spec", ["0-10000000", list(range(MAX_SEEDS + 1)), f"0-{MAX_SEEDS}", f"5,0-{MAX_SEEDS - 1}", f"0-{10**30}"]
)
def test_parse_seeds_refuses_more_than_the_cap_without_expanding(spec):
    with pytest.raises(SweepError, match="at most"):  # a 10^30 range would never finish if it were expanded
        parse_seeds(spec)


def test_parse_seeds_at_the_cap_is_accepted():
    assert len(parse_seeds(f"0-{MAX_SEEDS - 1}")) == MAX_SEEDS
