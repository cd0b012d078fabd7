"""nqf.analyze: helpers, the API on a small bundled data set, and the CLI's one-line errors (exit code 2)."""

import json
import pickle

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import nqf
from nqf.app._cli import app
from nqf.app._data import load_dataset
from nqf.app._study import find_unit_layers
from nqf.curves import stable_learning_rate, step_count
from nqf.dynamics import initial_weights
from nqf.errors import InvalidParameterError, NormalFormError


def test_initial_weights_full_and_rank_deficient():
    W = initial_weights(6, 10, 1e-4, seed=1)
    torch.testing.assert_close(W @ W.T, 1e-4 * torch.eye(6, dtype=torch.float64), rtol=0, atol=1e-17)
    W = initial_weights(6, 3, 1e-4, seed=1)  # width < p: M(0) = ε Π, Π a rank-3 projector
    P = (W @ W.T) / 1e-4
    torch.testing.assert_close(P @ P, P, rtol=0, atol=1e-14)
    assert torch.linalg.matrix_rank(P).item() == 3 and abs(float(torch.trace(P)) - 3) < 1e-12
    with pytest.raises(InvalidParameterError, match="`eps`"):
        initial_weights(6, 10, 1.5)


def test_learning_rate_and_steps():
    assert stable_learning_rate([1.5, 0.7, 0.0], 0.02) == pytest.approx(0.02 / 1.5)
    assert step_count([4.0, 8.0], 0.1) == int(np.ceil((1.25 * 8 + 2) / 0.1))
    with pytest.raises(InvalidParameterError):
        stable_learning_rate([0.0, -1.0])


def test_units_are_found_in_a_sequential_and_refused_in_a_linear():
    seq = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    (f,) = find_unit_layers(seq)
    assert f.name == "0" and f.n_units == 7 and f.p == 2 + 5 + 1 and f.is_whole_mlp
    assert find_unit_layers(torch.nn.Linear(3, 2)) == []


@pytest.fixture(scope="module")
def wine():
    return load_dataset("wine")


def _factory_file(tmp_path, body):
    f = tmp_path / "model.py"
    f.write_text("import torch\nfrom torch import nn\n\n" + body)
    return f


def test_factory_sequential_equals_builtin_spec(tmp_path, wine):
    f = _factory_file(
        tmp_path,
        "def make(in_features, n_outputs):\n"
        "    return nn.Sequential(nn.Linear(in_features, 24, bias=False), nn.Tanh(),\n"
        "                         nn.Linear(24, n_outputs, bias=False))\n",
    )
    a = nqf.analyze(f"{f}:make", wine, eps=1e-6, steps=30)
    b = nqf.analyze("mlp:width=24,act=tanh", wine, eps=1e-6, steps=30)
    assert a.operator == b.operator == "analytic mlp"
    np.testing.assert_allclose(a.prediction.levels, b.prediction.levels, rtol=1e-10, atol=0)
    np.testing.assert_allclose(a.prediction.times, b.prediction.times, rtol=1e-10, atol=0)
    assert len(repr(a)) < 400 and "trust=" in repr(a)
    json.dumps(a.to_dict())
    c = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(c.curves["loss_real"], a.curves["loss_real"])
    names = ["smooth at 0", "unit symmetry", "zero-gradient condition", "NQF error order", "commutation"]
    assert [r.name for r in a.checks][:5] == names
    import matplotlib.pyplot as plt

    plt.close(a.plot())
    from nqf.app._report._schema import validate_results
    from nqf.app._study._output import save_analysis

    save_analysis(a, tmp_path / "saved")
    r = validate_results(tmp_path / "saved")
    assert r.status == "complete" and r.metrics["drops"] == a.prediction.n_drops


def test_api_refuses_relu_and_missing_units(wine):
    relu = torch.nn.Sequential(torch.nn.Linear(13, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    with pytest.raises(NormalFormError, match="ReLU, which is not smooth at 0.*use tanh"):
        nqf.analyze(relu, wine)
    with pytest.raises(NormalFormError, match="no interchangeable units"):
        nqf.analyze(torch.nn.Linear(13, 3), wine)


@pytest.mark.parametrize("case", ["relu", "no-units", "nan", "lengths"])
def test_cli_bad_input_one_line_exit_2(tmp_path, case):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 4)), rng.integers(0, 2, 20)
    model, data = "mlp:width=8,act=tanh", tmp_path / "d.npz"
    if case == "relu":
        body = "def make():\n    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
        model = str(_factory_file(tmp_path, body)) + ":make"
    if case == "no-units":
        model = str(_factory_file(tmp_path, "def make():\n    return nn.Linear(4, 2)\n")) + ":make"
    if case == "nan":
        X[3, 2] = np.nan
    if case == "lengths":
        y = y[:-1]
    np.savez(data, X=X, Y=y)
    res = CliRunner().invoke(app, ["analyze", "--model", model, "--data", str(data), "--out", str(tmp_path / "run")])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert {
        "relu": "ReLU",
        "no-units": "no interchangeable units",
        "nan": "finite",
        "lengths": "same number of samples",
    }[case] in lines[0]
    assert not (tmp_path / "run").exists()


def test_cli_run_directory_and_rank_deficient_start(tmp_path):
    """A width below p (rank-deficient M(0) = εΠ) runs end to end and writes a valid run directory."""
    from nqf.app._report._schema import validate_results

    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        ["analyze", "--model", "mlp:width=12,act=tanh", "--data", "wine", "--eps", "1e-4", "--out", str(out), "--json"],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)["analysis"]
    assert data["width"] == 12 and data["p"] == 16
    assert {c["name"]: c["status"] for c in data["checks"]}["width vs p"] == "warn"
    r = validate_results(out)
    assert r.status == "complete" and r.experiment == "analyze"
    assert (out / r.figures["analysis"]["png"]).stat().st_size > 0 and (out / "arrays.npz").exists()
    names = [t.name for t in r.tables]
    assert names[:2] == ["Assumption checks", "Plateaus and drops"]


def test_predict_uses_lotka_volterra_on_commuting_data():
    """Diagonal structure matrices with orthogonal measurement columns commute: the prediction is the
    Lotka–Volterra reduction, whose plateaus are ½E y² − Σ_{learned} β_k²/(2 C_kk) in closed form."""
    from nqf.app._study._checks import check_commutation
    from nqf.structure import DenseStructure

    N, p = 8, 3
    a = torch.zeros(N, p, dtype=torch.float64)
    a[0:3, 0], a[3:6, 1], a[6:8, 2] = 2.0, 1.0, 0.5  # orthogonal columns: C diagonal
    A = torch.diag_embed(a)[:, None]  # (N, 1, p, p), diagonal
    y = torch.tensor([3.0, 3.0, 3.0, 1.0, 1.0, 1.0, 0.2, 0.2], dtype=torch.float64)[:, None]
    op = DenseStructure(A)
    row, commuting = check_commutation(op)
    assert commuting and float(row.value) < 1e-12
    pred = nqf.predict(op, y, 1e-6, commuting=True)
    assert pred.method == "lotka-volterra"
    beta = (a * y).sum(0) / N
    Ckk = (a * a).sum(0) / N
    gains = (beta**2 / (2 * Ckk)).numpy()
    order = np.argsort(-beta.numpy() * 4)  # fastest growth first
    expected = 0.5 * float((y**2).sum()) / N - np.concatenate([[0.0], np.cumsum(gains[order])])
    np.testing.assert_allclose(pred.levels, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_width_64_on_digits_is_reported_as_having_left_the_quadratic_regime():
    """Issue 11: a width-64 tanh MLP on digits (width < p = 74: rank-deficient start) ends below the NQF's
    certified global minimum; the analysis says so, with the step (measured: step 3450, t = 45.9)."""
    a = nqf.analyze("mlp:width=64,act=tanh", load_dataset("digits"), eps=1e-6)
    v = a.validity
    assert a.prediction.global_minimum and v["left_step"] is not None, v
    assert v["final_real"] < 0.99 * v["nqf_minimum"], v
    assert any(f"left the quadratic regime at step {v['left_step']}" in s for s in a.verdict.text)


def test_mode_strengths_from_the_saved_factor_equal_those_from_M():
    """The analysis saves W (p × m) instead of M (p × p) when the width is below p; qᵀ M q = ‖Wᵀ q‖² (M = W Wᵀ
    built independently here), and a wrong contraction (Wᵀ q summed before squaring) differs."""
    from types import SimpleNamespace

    from nqf.app._study._strengths import strength_reader

    gen = torch.Generator().manual_seed(0)
    W = torch.randn(5, 7, 3, generator=gen, dtype=torch.float64)
    Q = torch.linalg.qr(torch.randn(7, 2, generator=gen, dtype=torch.float64))[0]
    M = W @ W.transpose(1, 2)
    read = strength_reader(Q.numpy(), SimpleNamespace(p=7))
    from_M = read(SimpleNamespace(M=M, W=None), 4)
    from_W = read(SimpleNamespace(M=None, W=W), 4)
    np.testing.assert_allclose(from_W, from_M, rtol=1e-12)
    wrong = torch.einsum("pk,tpm->tk", Q, W[:4]).pow(2).numpy()
    assert not np.allclose(wrong, from_M, rtol=1e-3)
    assert read(SimpleNamespace(M=None, W=None), 4).shape == (4, 0)
