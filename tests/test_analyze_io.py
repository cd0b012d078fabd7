"""nqf analyze, inputs and outputs (issue 24, deliverables 4 and 6): inputs of any shape, CSV class names,
``--task``, training-only layers, the printed table, refusals without a run directory, progress lines."""

import csv
import json
import math
import pickle

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import nqf
from nqf.app._cli import app
from nqf.app._data import load_dataset, prepare
from nqf.app._study import prepare_analysis
from nqf.errors import DataError, ModelSpecError

WINE_NAMES = ("barbera", "barolo", "grignolino")  # sorted: one-hot order equals that of the labels 0, 1, 2

CONV = (
    "import torch\nfrom torch import nn\n\n"
    "def make():\n"
    "    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(256, 3, bias=False))\n"
)


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture(scope="module")
def wine_csv(tmp_path_factory):
    """The bundled wine data as a CSV whose target column holds class names."""
    from sklearn.datasets import load_wine

    b = load_wine()
    path = tmp_path_factory.mktemp("csv") / "wine.csv"
    rows = [[*map(repr, x), WINE_NAMES[int(t)]] for x, t in zip(b.data.tolist(), b.target, strict=True)]
    return _write_csv(path, [f"f{j}" for j in range(b.data.shape[1])] + ["cultivar"], rows)


@pytest.fixture(scope="module")
def wine_run(wine_csv):
    """One analysis of the string-labelled wine CSV, with its progress lines."""
    lines: list[str] = []
    a = nqf.analyze("mlp:width=24,act=tanh", load_dataset(wine_csv, target="cultivar"), log=lines.append)
    return a, lines


@pytest.fixture()
def images(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 1, 8, 8)) * rng.uniform(0.5, 3.0, size=(1, 1, 8, 8)) + 2.0
    y = rng.integers(0, 3, 40)
    np.savez(tmp_path / "imgs.npz", X=X, Y=y)
    (tmp_path / "conv.py").write_text(CONV)
    return X, y, tmp_path / "imgs.npz", f"{tmp_path / 'conv.py'}:make"


def _cli(args):
    return CliRunner().invoke(app, ["analyze", *args])


def _one_error_line(res) -> str:
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


# --------------------------------------------------------------------------- inputs of any shape
def test_images_keep_their_shape_standardised_per_entry_and_subset_along_axis_0(images, tmp_path):
    X, y, path, _ = images
    ds = load_dataset(path)
    assert ds.X.shape == (40, 1, 8, 8) and ds.input_shape == (1, 8, 8) and ds.n_features == 64
    np.testing.assert_allclose(ds.X.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(ds.X.std(0), 1, rtol=1e-12)
    np.testing.assert_allclose(ds.X, (X - X.mean(0)) / X.std(0), rtol=1e-12, atol=1e-12)
    assert ds.to_dict()["input_shape"] == [1, 8, 8] and "input_shape=(1, 8, 8)" in repr(ds)
    sub = load_dataset(path, subset=10, seed=3)
    keep = np.sort(np.random.default_rng(3).permutation(40)[:10])
    assert sub.X.shape == (10, 1, 8, 8)
    np.testing.assert_allclose(sub.X, (X[keep] - X[keep].mean(0)) / X[keep].std(0), rtol=1e-12, atol=1e-12)
    raw = load_dataset(path, standardize=False)
    np.testing.assert_array_equal(raw.X, X)


def test_token_sequences_from_a_pt_file_keep_their_shape(tmp_path):
    X = torch.randn(12, 5, 3, dtype=torch.float64)
    torch.save({"X": X, "Y": torch.randn(12, 2, dtype=torch.float64)}, tmp_path / "seq.pt")
    ds = load_dataset(tmp_path / "seq.pt", standardize=False)
    assert ds.X.shape == (12, 5, 3) and ds.task == "regression" and ds.n_outputs == 2
    np.testing.assert_array_equal(ds.X, X.numpy())


def test_conv_model_on_images_reaches_units_structure_and_checks(images):
    """Loading, unit discovery, the (analytic conv2d) structure operator and the assumption checks on (N, 1, 8, 8)."""
    from nqf.app._study._operators import structure_of
    from nqf.app._study._pipeline import _assumption_checks

    _, _, path, model = images
    prepared = prepare_analysis(model, load_dataset(path))
    data, module, found = prepared.data, prepared.module, prepared.found
    assert data.X.shape == (40, 1, 8, 8) and found.kind == "conv-channels" and found.n_units == 4
    Xt = torch.as_tensor(data.X)
    op, f0, how = structure_of(module, found, Xt)
    assert how == "analytic conv2d" and tuple(f0.shape) == (40, 3)
    rows, _ = _assumption_checks(module, found, Xt, op, f0, how, seed=0)
    assert {r.name: r.status for r in rows}["zero-gradient condition"] == "ok"


def test_cli_conv_model_on_images_gets_through_loading_and_discovery(images, tmp_path):
    """The CLI loads the images and finds the conv channels (a wrong --units lists them; nothing is run)."""
    _, _, path, model = images
    out = tmp_path / "run"
    res = _cli(["--model", model, "--data", str(path), "--steps", "200", "--units", "nope", "--out", str(out)])
    line = _one_error_line(res)
    assert "no layer of units called 'nope'; found `0`" in line and "conv-channels, 4 units, p = 202" in line, line
    assert not out.exists()


def test_builtin_mlp_spec_refuses_inputs_that_are_not_2d(images, tmp_path):
    _, _, path, _ = images
    with pytest.raises(ModelSpecError, match=r"takes inputs of shape \(N, D\); found X of shape \(40, 1, 8, 8\)"):
        prepare_analysis("mlp:width=8,act=tanh", load_dataset(path))
    line = _one_error_line(_cli(["--data", str(path), "--out", str(tmp_path / "run")]))
    assert "(40, 1, 8, 8)" in line and "--model" in line
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- CSV class names, --task
def test_csv_class_names_are_labels_and_numbers_keep_working(wine_csv):
    named = load_dataset(wine_csv, target="cultivar")
    bundled = load_dataset("wine")
    assert named.task == "classification" and named.classes == WINE_NAMES
    assert named.preprocessing["task_rule"] == "inferred: class names"
    assert named.to_dict()["classes"] == list(WINE_NAMES)
    np.testing.assert_allclose(named.Y, bundled.Y, rtol=0, atol=1e-15)
    np.testing.assert_allclose(named.X, bundled.X, rtol=1e-12, atol=1e-12)
    with pytest.raises(DataError, match="`task`: the targets are class names .*found task='regression'"):
        load_dataset(wine_csv, target="cultivar", task="regression")


def test_csv_numeric_targets_still_read_as_numbers(tmp_path):
    rng = np.random.default_rng(1)
    rows = [[*map(repr, rng.normal(size=2).tolist()), int(k)] for k in rng.integers(0, 3, 30)]
    ds = load_dataset(_write_csv(tmp_path / "n.csv", ["a", "b", "y"], rows), target="y")
    assert ds.task == "classification" and ds.classes == (0.0, 1.0, 2.0) and ds.X.shape == (30, 2)


def test_csv_string_feature_column_is_refused_naming_it(tmp_path):
    rows = [[1.0, "red", 0], [2.0, "blue", 1], [3.0, "red", 0]]
    path = _write_csv(tmp_path / "s.csv", ["size", "colour", "y"], rows)
    with pytest.raises(DataError, match="input column 'colour' .* must hold numbers; found 'red'"):
        load_dataset(path, target="y")


def test_integer_regression_targets_inferred_rule_and_task_regression(tmp_path):
    """Diabetes targets are integers (25…346): all 442 samples have > 100 distinct values (regression); a
    subset of 60 has fewer, so the rule reads them as classes, says so, and task='regression' forces numbers."""
    full = load_dataset("diabetes")
    assert full.task == "regression" and full.n_outputs == 1
    from sklearn.datasets import load_diabetes

    b = load_diabetes()
    X, y = b.data[:60], b.target[:60].astype(np.int64)
    assert len(np.unique(y)) <= 100
    auto = prepare(X, y)
    assert auto.task == "classification"
    assert auto.preprocessing["task_rule"] == "inferred: integer targets with at most 100 distinct values"
    reg = prepare(X, y, task="regression")
    assert reg.task == "regression" and reg.Y.shape == (60, 1) and reg.classes == ()
    np.testing.assert_allclose(reg.Y[:, 0], y - y.mean(), rtol=0, atol=1e-12)
    assert reg.preprocessing["task_rule"] == "given"


def test_cli_task_regression_on_integer_targets(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 3))
    y = np.round(3 * X[:, 0] + X[:, 1] ** 2).astype(np.int64)  # few distinct integers: inferred as classes
    np.savez(tmp_path / "d.npz", X=X, Y=y)
    assert load_dataset(tmp_path / "d.npz").task == "classification"
    args = ["--model", "mlp:width=8,act=tanh", "--data", str(tmp_path / "d.npz"), "--steps", "20"]
    res = _cli([*args, "--task", "regression", "--json", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)["analysis"]
    assert d["task"] == "regression" and d["n_outputs"] == 1 and d["classes"] == []


# --------------------------------------------------------------------------- results and the printed table
def test_classes_in_the_analysis_results_and_header(wine_run, wine_csv, tmp_path):
    a, _ = wine_run
    assert a.task == "classification" and a.classes == WINE_NAMES
    d = a.to_dict()
    json.dumps(d)
    assert d["classes"] == list(WINE_NAMES) and d["task"] == "classification"
    assert pickle.loads(pickle.dumps(a)).classes == WINE_NAMES
    out = tmp_path / "run"
    res = _cli(
        ["--data", str(wine_csv), "--target", "cultivar", "--model", "mlp:width=8,act=tanh"]
        + ["--steps", "20", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    header = "C = 3, classification, classes barbera, barolo, grignolino"
    assert header in res.stdout.splitlines()[0], res.stdout
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert any(header in s for s in summary), summary


def test_printed_table_columns_are_the_analysis_fields(wine_run):
    """Issue 24: the terminal table printed t rule under "t NQF", the NQF's time under "t real", the NQF's
    time error under "err" and the real time error under "flat".  Each printed column is now its field: the
    cells, cut at the right edges of the right-aligned headers, against the raw fields of the Analysis (levels
    and times to the 4 printed digits, errors in percent to the printed decimal)."""
    from nqf.app._study._output import print_analysis

    a, _ = wine_run
    lines: list[str] = []
    print_analysis(a, lines.append)
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["k", "rank"])
    names = "k|rank|L pred|L NQF|L real|err %|t pred|t NQF|t real|err %|t seeded|flat".split("|")
    ends, pos = [], 0
    for name in names:  # each header ends its column (right-aligned), the columns one space apart
        pos = lines[head].index(name, pos) + len(name)
        ends.append(pos)
    assert lines[head][pos:].strip() == ""

    def cells(line):
        starts = [0] + [e + 1 for e in ends[:-1]]
        return [line[s:e].strip() for s, e in zip(starts, ends, strict=True)]

    def near(cell, value, digits=4):
        assert cell not in ("", "-") and abs(float(cell) - value) <= 0.5 * 10 ** (-digits + 1) * abs(value), (
            cell,
            value,
        )

    P, R, S = a.prediction, a.real, a.nqf
    reached = 0
    for k in range(P.levels.size):
        row = cells(lines[head + 1 + k])
        assert int(row[0]) == k and int(row[1]) == int(P.ranks[k])
        near(row[2], float(P.levels[k]))
        near(row[3], float(S.levels_measured[k]))
        near(row[4], float(R.levels_measured[k]))
        assert row[11].split()[0] == ("yes" if R.flat[k] else "no")
        if k == 0:
            assert row[6:11] == ["—"] * 5, row
            continue
        near(row[6], float(P.times[k - 1]))
        near(row[7], float(S.times_measured[k - 1]))
        if math.isfinite(R.times_measured[k - 1]):
            reached += 1
            near(row[8], float(R.times_measured[k - 1]))
            want = 100 * abs(R.times_measured[k - 1] / P.times[k - 1] - 1)
            assert abs(float(row[9]) - want) <= 0.05 + 1e-9, (row[9], want)
        if a.clock is not None:
            near(row[10], float(a.clock.times[k - 1]))
    assert reached >= 1  # the time columns were compared on measured values


def test_progress_lines_come_before_the_long_stages(wine_run):
    _, lines = wine_run

    def at(prefix):
        return next(i for i, ln in enumerate(lines) if ln.startswith(prefix))

    assert at("data: ") < at("prediction (saddle sequence") < at("saddle search: ") < at("prediction: ")
    assert "right-hand sides of" in lines[at("prediction (saddle sequence")]
    assert at("prediction: ") < at("NQF simulation: ") and "estimated ~" in lines[at("NQF simulation: ")]
    assert (
        lines[at("NQF simulation: ") + 1].startswith("NQF simulation: ")
        and "estimated" not in lines[at("NQF simulation: ") + 1]
    )
    i = at("real network: ")
    assert "estimated ~" in lines[i] and lines[i + 1].startswith("real network: ") and i > at("NQF simulation: ")
    assert "classes barbera, barolo, grignolino" in lines[at("data: ")]


def test_every_timed_stage_has_the_estimate_printed_before_it_and_the_peak_memory_is_recorded(wine_run):
    """Each long stage's estimate is recorded beside its measured time (``estimate_<stage>``), printed on the
    stage's first line; the process's peak memory estimated before the runs and measured at the end are both
    in the results (``memory_*`` metrics): bench_analyze_models.py prints their ratios."""
    a, lines = wine_run
    stages = ("prediction", "prediction_clock", "nqf_simulation", "real_training_large", "real_training", "seeded_nqf")
    for stage in stages:
        if stage in a.timings:
            assert a.timings[f"estimate_{stage}"] > 0, stage
    assert {"prediction", "nqf_simulation", "real_training"} <= set(a.timings)
    if "prediction_clock" in a.timings:  # a range, printed after the search: one later drop's cost to all of theirs
        low, high = a.timings["estimate_prediction_clock_low"], a.timings["estimate_prediction_clock"]
        assert 0 < low < high
        assert "O(1) clock of drops 2–" in next(ln for ln in lines if ln.startswith("saddle search: "))
    starts = {"seeded_nqf": "seeded NQF (the real network's clock)"}  # at most: its seeds go off past the last drop
    for stage, prefix in starts.items():
        if stage in a.timings:
            assert "estimated at most ~" in next(ln for ln in lines if ln.startswith(prefix)), stage
    est, peak = a.memory.estimate_peak_mib, a.memory.peak_mib
    assert 0.5 < est / peak < 2  # from what the process held before the runs and the saved states
    assert f"process peak ~{est:.0f} MiB" in next(ln for ln in lines if ln.startswith("estimate: "))
    d = a.to_dict()
    assert (
        d["memory"] == a.memory.to_dict()
        and d["timings"]["estimate_real_training"] == a.timings["estimate_real_training"]
    )


# --------------------------------------------------------------------------- training-only layers
def test_dropout_is_switched_off_named_and_trains_like_the_model_without_it(tmp_path):
    body = (
        "import torch\nfrom torch import nn\n\n"
        "def make(in_features, n_outputs, drop=True):\n"
        "    mid = [nn.Dropout(0.5)] if drop else []\n"
        "    return nn.Sequential(nn.Linear(in_features, 16, bias=False), nn.Tanh(), *mid,\n"
        "                         nn.Linear(16, n_outputs, bias=False))\n"
        "def plain(in_features, n_outputs):\n"
        "    return make(in_features, n_outputs, drop=False)\n"
    )
    (tmp_path / "m.py").write_text(body)
    data = load_dataset("iris")
    lines: list[str] = []
    a = nqf.analyze(f"{tmp_path / 'm.py'}:make", data, steps=200, log=lines.append)
    b = nqf.analyze(f"{tmp_path / 'm.py'}:plain", data, steps=200)
    row = {r.name: r for r in a.checks}["training-only layers"]
    assert row.status == "warn" and "`2` (Dropout)" in row.value
    assert {r.name: r for r in b.checks}["training-only layers"].status == "ok"
    assert any("`2` (Dropout)" in s and "switched off" in s for s in a.verdict.text)
    assert a.notes and "`2` (Dropout)" in a.notes[0] and not b.notes
    assert any(ln.startswith("note: ") and "Dropout" in ln for ln in lines)
    np.testing.assert_allclose(a.curves["loss_real"], b.curves["loss_real"], rtol=1e-10, atol=0)


# --------------------------------------------------------------------------- refusals leave no run directory
@pytest.mark.parametrize("case", ["missing-file", "string-feature", "missing-model", "bad-task", "sigmoid"])
def test_refusal_exit_2_leaves_no_run_directory(tmp_path, case):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", X=rng.normal(size=(20, 4)), Y=rng.integers(0, 2, 20))
    data, model, extra = str(tmp_path / "d.npz"), "mlp:width=8,act=tanh", []
    if case == "missing-file":
        data = str(tmp_path / "absent.npz")
    if case == "string-feature":
        data = str(_write_csv(tmp_path / "s.csv", ["a", "b", "y"], [[1, "x", 0], [2, "z", 1]]))
        extra = ["--target", "y"]
    if case == "missing-model":
        model = str(tmp_path / "absent.py") + ":make"
    if case == "bad-task":
        extra = ["--task", "clustering"]
    if case == "sigmoid":
        model = "mlp:width=8,act=sigmoid"
    out = tmp_path / "run"
    line = _one_error_line(_cli(["--model", model, "--data", data, *extra, "--out", str(out)]))
    assert {
        "missing-file": "neither a bundled data set",
        "string-feature": "input column 'b'",
        "missing-model": "not found",
        "bad-task": "--task",
        "sigmoid": "zero-gradient condition fails",
    }[case] in line, line
    if case == "bad-task":
        assert "'classification'" in line and "'clustering'" in line
    assert not out.exists()


def test_training_only_layers_of_every_kind_are_named_and_put_in_eval_mode():
    from torch import nn

    from nqf.app._study._checks import freeze_training_only

    m = nn.Sequential(
        nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.AlphaDropout(0.2), nn.Dropout1d(0.1), nn.Linear(4, 2)
    )
    names = freeze_training_only(m)
    assert names == ["`1` (BatchNorm1d)", "`3` (AlphaDropout)", "`4` (Dropout1d)"]
    assert not any(sub.training for sub in m.modules())
    x = torch.randn(5, 3)
    torch.testing.assert_close(m(x), m(x), rtol=0, atol=0)


def test_a_costly_step_is_timed_from_runs_of_one_and_two_steps():
    """timed_step_cost: runs of 3 and 13 steps after a one-step probe, but a step whose one-step run takes longer
    than SLOW_STEP is timed from 1 and 2 steps (the 10⁵-sample mixture's real network: 1.8 s a step, 16 timed steps
    per estimate).  Counted in steps run, not in time; the slow stand-in sleeps a quarter second a step."""
    import time

    from nqf.app._study._runs import SLOW_STEP, timed_step_cost

    runs: list[int] = []

    def fast(k):
        runs.append(k)

    def slow(k):
        runs.append(k)
        time.sleep(1.25 * SLOW_STEP * k)

    assert timed_step_cost(fast, 100) >= 0 and runs == [1, 3, 13]
    runs.clear()
    assert timed_step_cost(slow, 100) > 0 and runs == [1, 2]
