"""What a failing run or sweep point leaves behind (issue 23, classes 4 and 5).

* An input refused (an ``NQFError``) before a run finished anything leaves no run directory, and a previous
  run at the path as it was; once anything is finished, the failed run is recorded (``--resume`` continues it).
* ``run_experiment`` records the failures of :data:`nqf.app._experiments.RECORDED_FAILURES` and re-raises them;
  any other exception propagates without a record.
* A sweep point that fails for its input is a failed row returned by the worker; a fault of nqf in a point is
  raised on the worker and recorded by the client as failed (error type and message); the sweep goes on.
"""

import json
import logging

import pytest
from typer.testing import CliRunner

from nqf.app._cli import app
from nqf.app._experiments import RECORDED_FAILURES, Experiment, Outcome, Params, get_experiment, run_experiment
from nqf.app._report import validate_results
from nqf.errors import DivergenceError, InvalidParameterError

get_experiment("demo")
runner = CliRunner()


class _P(Params):
    n: int = 2


class _UsersOwnError(Exception):
    """An exception class of the user's own (a model file's), not among RECORDED_FAILURES."""


class _Failing(Experiment):
    """Finishes ``finish`` of: a checkpoint, a metric; then raises ``error``."""

    name = "failing-test"
    description = "raises after finishing some parts"
    Params = _P
    error: BaseException = InvalidParameterError("`lr`: refused")
    finish: tuple = ()

    def run(self, params, ctx, out: Outcome):
        if "checkpoint" in self.finish:
            ctx.checkpoint("part", lambda: 1.0)
        if "metric" in self.finish:
            out.metrics["before"] = 1.0
        raise self.error


def _failing(error, finish=()):
    exp = _Failing()
    exp.error, exp.finish = error, finish
    return exp


def _tree(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# (id, error, what the run finished before it, is a run directory left with status "failed")
RUNNER_CASES = [
    ("refused parameter, nothing finished", InvalidParameterError("`lr`: refused"), (), False),
    ("divergence before anything was saved", DivergenceError("diverged at step 3: lower `lr`"), (), False),
    ("refused after a metric", InvalidParameterError("`lr`: refused"), ("metric",), True),
    ("refused after a checkpoint", InvalidParameterError("`lr`: refused"), ("checkpoint",), True),
    ("a fault of nqf, nothing finished", RuntimeError("a bug"), (), True),
    ("out of memory, nothing finished", MemoryError(), (), True),
    ("a full disk", OSError(28, "No space left on device"), (), True),
    ("a KeyError bug", KeyError("rows"), (), True),
]


@pytest.mark.parametrize("case", RUNNER_CASES, ids=[c[0] for c in RUNNER_CASES])
def test_what_a_failing_run_leaves(tmp_path, case):
    _, error, finish, recorded = case
    out = tmp_path / "r"
    with pytest.raises(type(error)) as info:
        run_experiment(_failing(error, finish), _P(), out)
    assert out.exists() == recorded
    assert info.value.run_directory == (out if recorded else None)  # pyright: ignore[reportAttributeAccessIssue]
    if recorded:
        res = validate_results(out)
        assert res.status == "failed" and type(error).__name__ in res.message
    assert not [p.name for p in tmp_path.iterdir() if "nqf-new" in p.name or "nqf-old" in p.name]


@pytest.mark.parametrize("flags", [{"force": True}, {"resume": True}, {"force": True, "resume": True}])
def test_a_refusal_over_an_existing_run_keeps_it_byte_for_byte(tmp_path, flags):
    out = tmp_path / "r"
    with pytest.raises(KeyboardInterrupt):  # an interrupted run of the same config (--resume continues it)
        run_experiment(_failing(KeyboardInterrupt(), ("metric",)), _P(), out)
    assert validate_results(out).status == "interrupted"
    before = _tree(out)
    with pytest.raises(InvalidParameterError) as info:
        run_experiment(_failing(InvalidParameterError("`lr`: refused")), _P(), out, **flags)
    assert _tree(out) == before
    assert info.value.previous_run_kept == out  # pyright: ignore[reportAttributeAccessIssue]
    assert info.value.run_directory is None  # pyright: ignore[reportAttributeAccessIssue]


@pytest.mark.parametrize("error", [_UsersOwnError("from a model file"), SystemExit(3), GeneratorExit()])
def test_exceptions_outside_the_recorded_failures_propagate_without_a_record(tmp_path, error):
    assert not isinstance(error, RECORDED_FAILURES)
    out = tmp_path / "r"
    with pytest.raises(type(error)):
        run_experiment(_failing(error, ("metric", "checkpoint")), _P(), out)
    assert not out.exists()
    assert not [p.name for p in tmp_path.iterdir() if "nqf-new" in p.name]


def test_the_cli_says_nothing_was_left_for_a_refusal(tmp_path, monkeypatch):
    from helpers import toml_value
    from nqf.app._experiments import REGISTRY

    exp = REGISTRY["lv-staircase"]
    cfg = tmp_path / "c.toml"
    lines = ['experiment = "lv-staircase"', "[params]"] + [f"{k} = {toml_value(v)}" for k, v in exp.tiny.items()]
    cfg.write_text("\n".join(lines) + "\n")

    def refuses(self, params, ctx, out_):
        raise InvalidParameterError("`max_steps`: the staircase needs 10**9 GD steps")

    monkeypatch.setattr(type(exp), "run", refuses)
    r = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "a")])
    out_lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(out_lines) == 1 and "`max_steps`" in out_lines[0] and "what was finished" not in out_lines[0]
    assert not (tmp_path / "a").exists()


# --------------------------------------------------------------------------- sweep points
def _lv_point(**params):
    from nqf.app._experiments import REGISTRY

    return {"experiment": "lv-staircase", "seed": 0, "params": {**REGISTRY["lv-staircase"].tiny, **params}}


def test_a_point_refused_for_its_input_is_a_failed_row(tmp_path):
    from nqf.app._sweep._execute import run_point

    row = run_point({**_lv_point(), "device": "tpu"}, str(tmp_path / "p"))
    assert row["status"] == "failed" and row["error_type"] == "ParameterError" and "tpu" in row["error"]
    assert row["wall_seconds"] is not None


def test_a_fault_of_nqf_in_a_point_is_raised_to_the_client(tmp_path, monkeypatch):
    import nqf.app._experiments
    from nqf.app._sweep._execute import run_point

    def broken(*a, **k):
        raise RuntimeError("a bug in nqf")

    monkeypatch.setattr(nqf.app._experiments, "run_experiment", broken)
    with pytest.raises(RuntimeError, match="a bug in nqf"):
        run_point(_lv_point(), str(tmp_path / "p"))


def test_a_point_that_raises_on_a_dask_worker_is_recorded_failed_and_the_sweep_goes_on(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    import nqf.app._experiments
    from nqf.app._sweep import build_points
    from nqf.app._sweep._execute import execute
    from nqf.app._sweep._grid import SweepSpec

    real = nqf.app._experiments.run_experiment

    def broken_at_one_eps(exp, params, out, **kw):
        if 1e-4 in params.eps:  # the sweep turns eps = 1e-4 into the pair [0.01, 1e-4]
            raise RuntimeError("a bug in nqf at this point")
        return real(exp, params, out, **kw)

    monkeypatch.setattr(nqf.app._experiments, "run_experiment", broken_at_one_eps)
    points = build_points(_lv_point(), SweepSpec(grid={"eps": [1e-3, 1e-4]}))
    with distributed.Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None, silence_logs=logging.ERROR
    ) as client:  # workers in this process: the patch reaches them
        state = execute(points, tmp_path / "S", client, poll=0.05)
    rows = [state.rows[p.short] for p in points]
    assert [r["status"] for r in rows] == ["complete", "failed"], json.dumps(rows, default=str)[:2000]
    assert rows[1]["error_type"] == "RuntimeError" and "a bug in nqf at this point" in rows[1]["error"]
