"""`nqf report RUN_DIR` redraws every figure from arrays.npz alone (issue 19: experiments in phases)."""

import json
import shutil

import matplotlib.image as mpimg
import pytest
from typer.testing import CliRunner

from nqf.app._cli import app
from nqf.app._experiments import REGISTRY, Experiment, all_experiments, run_experiment

#: Experiments whose figures are drawn by Experiment.plot from the saved arrays: all of them.
REDRAWN = sorted(all_experiments())  # every experiment


@pytest.mark.parametrize("name", REDRAWN)
def test_report_redraws_the_figures_from_the_arrays(name, tmp_path):
    exp = REGISTRY[name]
    out = tmp_path / "run"
    results = run_experiment(exp, exp.Params(**exp.tiny), out)
    assert results["status"] == "complete" and results["figures"], results["figures"]
    first = {n: mpimg.imread(out / f["png"]).shape for n, f in results["figures"].items()}
    shutil.rmtree(out / "figures")
    r = CliRunner().invoke(app, ["report", str(out)])
    assert r.exit_code == 0, r.output
    assert "figures redrawn from arrays.npz" in r.output
    again = json.loads((out / "results.json").read_text())["figures"]
    assert sorted(again) == sorted(first)
    for n, f in again.items():
        img = mpimg.imread(out / f["png"])  # the PNG opens
        assert img.shape == first[n], (n, img.shape, first[n])  # the same picture size as the run drew
        assert (out / f["svg"]).stat().st_size > 0
    assert (out / "report.html").stat().st_size > 0


@pytest.mark.parametrize("name", REDRAWN)
def test_the_run_draws_through_plot_only(name):
    """An experiment in phases draws nothing inside run(): the figures come from plot(arrays) alone."""
    from test_experiments import run_tiny

    exp = REGISTRY[name]
    assert type(exp).plot is not Experiment.plot
    out = run_tiny(name)
    assert not out.figures and out.arrays
    figs = exp.plot(dict(out.arrays), exp.Params(**exp.tiny))
    assert figs and all(f.axes for f in figs.values())
