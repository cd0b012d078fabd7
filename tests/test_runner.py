"""Run directories: interruption keeps finished parts, --resume reuses them, writes are atomic."""

import json

import pytest

from nqf.app._experiments import Check, Experiment, Outcome, Params, Table, run_experiment
from nqf.app._report import RunDirectory, RunDirectoryExistsError, validate_results
from nqf.app._report._figures import new_figure


class _P(Params):
    parts: int = 3


class _Counting(Experiment):
    """Computes `parts` parts through checkpoints; raises KeyboardInterrupt before part `interrupt_at`.

    (`interrupt_at` is an attribute, not a parameter: a resumed run must have the same config.)
    """

    name = "counting"
    description = "test experiment"
    Params = _P
    calls: list = []
    interrupt_at: int = -1

    def run(self, params, ctx, out: Outcome):
        for i in range(params.parts):
            if i == self.interrupt_at:
                raise KeyboardInterrupt
            value = ctx.checkpoint(f"part{i}", lambda i=i: (self.calls.append(i), i * i)[1])
            out.metrics[f"part{i}"] = value
            out.checks.append(Check(f"part {i}", float(i * i + 1), float(value + 1), 0.0))
        out.tables.append(Table("t", ["a"], [[1]]))
        fig, ax = new_figure()
        ax.plot([0, 1], [0, 1])
        out.figures["line"] = fig


def test_interrupt_keeps_partial_results_and_resume_reuses_them(tmp_path):
    exp = _Counting()
    exp.calls.clear()
    exp.interrupt_at = 2
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, _P(parts=3), tmp_path / "r")
    exp.interrupt_at = -1
    res = validate_results(tmp_path / "r")
    assert res.status == "interrupted" and "--resume" in res.message and "nqf report" in res.message
    assert res.metrics == {"part0": 0, "part1": 1}
    assert exp.calls == [0, 1]
    assert (tmp_path / "r" / "report.html").exists()
    with pytest.raises(RunDirectoryExistsError, match="--force"):
        run_experiment(exp, _P(parts=3), tmp_path / "r")
    res = run_experiment(exp, _P(parts=3), tmp_path / "r", resume=True)
    assert res["status"] == "complete"
    assert exp.calls == [0, 1, 2], "finished parts must be reused, not recomputed"
    assert all(c["passed"] for c in res["checks"])


def test_failure_is_recorded_and_reraised(tmp_path):
    class Boom(_Counting):
        def run(self, params, ctx, out):
            out.metrics["before"] = 1.0
            raise RuntimeError("exploded")

    with pytest.raises(RuntimeError, match="exploded"):
        run_experiment(Boom(), _P(), tmp_path / "r")
    res = validate_results(tmp_path / "r")
    assert res.status == "failed" and "exploded" in res.message and res.metrics == {"before": 1.0}


def test_atomic_writes_leave_no_temporaries(tmp_path):
    with RunDirectory(tmp_path / "r") as rd:
        rd.write_json("results.json", {"a": 1})
        rd.write_json("results.json", {"a": 2})
        assert not (tmp_path / "r").exists(), "nothing appears before the commit"
    assert json.loads((tmp_path / "r" / "results.json").read_text()) == {"a": 2}
    assert [p.name for p in (tmp_path / "r").iterdir() if p.name.startswith(".")] == []
    assert sorted(p.name for p in tmp_path.iterdir() if "nqf-new" in p.name or "nqf-old" in p.name) == []


def test_results_schema_rejects_unknown_fields(tmp_path):
    exp = _Counting()
    run_experiment(exp, _P(parts=1), tmp_path / "r")
    data = json.loads((tmp_path / "r" / "results.json").read_text())
    data["surprise"] = 1
    (tmp_path / "r" / "results.json").write_text(json.dumps(data))
    with pytest.raises(Exception, match="surprise"):
        validate_results(tmp_path / "r")
