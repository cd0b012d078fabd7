"""``nqf analyze --predict-only``: the staircase without training, equal to nqf.analyze's for the same start."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import nqf
from nqf.app._cli import app
from nqf.app._data import load_dataset

runner = CliRunner()
MODEL = "mlp:width=16,act=tanh"


def _cli(*args):
    return runner.invoke(app, ["analyze", "--model", MODEL, "--data", "wine", *args])


def test_same_staircase_as_analyze_for_the_same_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _cli("--eps", "1e-6", "--predict-only", "--json")
    assert r.exit_code == 0, r.output
    fc = json.loads(r.stdout)["forecast"]
    a = nqf.analyze(MODEL, load_dataset("wine"), eps=1e-6, clock=False)
    np.testing.assert_allclose(fc["staircase"]["levels"], a.prediction.levels, rtol=1e-9)
    np.testing.assert_allclose(fc["staircase"]["times"], a.prediction.times, rtol=1e-9)
    # the steps are analyze's GD steps at analyze's own step η
    assert fc["clock"]["lr"] == pytest.approx(a.lr, rel=1e-12)
    np.testing.assert_allclose(fc["steps"], np.asarray(a.prediction.times) / a.lr, rtol=0.05)
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written


def test_text_output_and_the_factorys_own_weights(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    eps = _cli("--predict-only", "--lr", "0.1", "--momentum", "0.9")
    own = _cli("--predict-only", "--lr", "0.1", "--start", "weights", "--json")
    assert eps.exit_code == 0, eps.output
    assert "drop 1: step" in eps.stdout and "nothing trained" in eps.stdout
    # the built-in factory's default initialisation is not small: refused, saying why
    assert own.exit_code == 2 and "start too large for a plateau" in own.stderr, own.output


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--start", "zero"], "start"),
        (["--momentum", "1.5"], "momentum"),
        (["--loss", "xent"], "loss"),
        (["--batch-size", "0"], "batch_size"),
    ],
)
def test_bad_flags_one_line_exit_2(args, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _cli("--predict-only", *args)
    assert r.exit_code == 2, r.output
    assert flag in r.stderr and r.stderr.count("\n") == 1, r.stderr
