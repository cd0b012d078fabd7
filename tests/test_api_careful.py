"""The Python API as careful as the CLI (issue 32, deliverable 6).

1. ``nqf.analyze(module, …)`` analyses a float64 copy: the caller's float32 module keeps its dtype, every
   parameter and buffer bit for bit, and its ``training`` flag.
2. Raw arrays (scikit-learn's ``load_wine(return_X_y=True)``) get the task inference and standardisation of
   ``nqf analyze --data``, and what was assumed is printed; a ``Dataset`` is used as given.
3. A ``.pt`` file holding ``TensorDataset(X, Y)`` is read through a stand-in that runs nothing; any other
   object, a planted pickle included, is refused with one line saying how to save the data instead.
"""

import copyreg
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_diabetes, load_wine
from torch import nn
from torch.utils.data import Subset, TensorDataset
from typer.testing import CliRunner

import nqf
import nqf.app._data._files as files
from _hostile import assert_one_line
from helpers import TORCH_READS_TENSOR_DATASET
from nqf.app._cli import app
from nqf.app._data import load_dataset, prepare
from nqf.app._study import prepare_analysis
from nqf.app._study._models import build_model
from nqf.errors import DataError, ModelSpecError

runner = CliRunner()
FAST = {"eps": 1e-4, "steps": 20, "clock": False, "save_points": 10}


# --------------------------------------------------------------------------- 1. the user's module
def _users_net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(13, 8), nn.GELU(), nn.Linear(8, 3))  # float32, biases, training mode
    net.register_buffer("scale", torch.tensor([0.5]))
    return net


def _snapshot(net: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def test_analyze_leaves_the_users_float32_module_bit_identical():
    net = _users_net()
    before = _snapshot(net)
    a = nqf.analyze(net, load_dataset("wine"), **FAST)
    assert a.width == 8 and a.steps == 20  # the analysis ran on the copy
    after = net.state_dict()
    assert set(after) == set(before) and "scale" in after
    for k, v in before.items():
        assert after[k].dtype == torch.float32, k  # was float64: converted in place
        assert torch.equal(after[k], v), k
    assert net.training and all(m.training for m in net.modules())  # the copy, not the user's, is in eval mode


def test_build_model_converts_a_copy_and_refuses_a_module_it_cannot_copy():
    net = _users_net()
    built = build_model(net, 13, 3)
    assert built is not net and next(built.parameters()).dtype == torch.float64
    assert next(net.parameters()).dtype == torch.float32
    leaf = torch.ones(3, requires_grad=True)
    net.not_a_leaf = leaf * 2  # deepcopy refuses tensors that are not graph leaves
    with pytest.raises(ModelSpecError, match=r"^`model`: the Sequential passed must be copyable") as exc:
        build_model(net, 13, 3)
    assert "\n" not in str(exc.value) and "RuntimeError" in str(exc.value)
    assert next(net.parameters()).dtype == torch.float32


# --------------------------------------------------------------------------- 2. raw arrays
def test_raw_wine_arrays_are_three_classes_standardised_like_the_cli():
    X, y = load_wine(return_X_y=True)
    lines: list[str] = []
    a = nqf.analyze("mlp:width=8", X, y, log=lines.append, **FAST)
    assert a.task == "classification" and a.n_outputs == 3 and a.classes == (0, 1, 2)  # was: regression, C = 1
    first = lines[0]
    assert first.startswith("data: arrays: N = 178, input shape (13,), C = 3, classification"), first
    for said in ("integer targets with at most 100 distinct values", "inputs standardised", "one-hot and centred"):
        assert said in first, (said, first)
    b = nqf.analyze("mlp:width=8", load_dataset("wine"), **FAST)  # what `nqf analyze --data wine` analyses
    np.testing.assert_array_equal(a.prediction.levels, b.prediction.levels)
    np.testing.assert_array_equal(a.curves["loss_real"], b.curves["loss_real"])


def test_raw_arrays_and_tensors_are_prepared_as_load_dataset_prepares_them():
    X, y = load_wine(return_X_y=True)
    ref = load_dataset("wine")
    for Xi, yi in ((X, y), (torch.tensor(X), torch.tensor(y))):  # numpy arrays, or tensors
        data = prepare_analysis("mlp:width=4", Xi, yi).data
        np.testing.assert_array_equal(data.X, ref.X)
        np.testing.assert_array_equal(data.Y, ref.Y)
        assert data.preprocessing["standardize"] and data.preprocessing["one_hot"]
        assert "arrays prepared as `nqf analyze --data`" in data.preprocessing["task_rule"]
    Xd, yd = load_diabetes(return_X_y=True)  # float targets: regression, one centred output, inputs standardised
    d = prepare_analysis("mlp:width=4", Xd * 100, yd).data
    assert d.task == "regression" and d.n_outputs == 1 and "not integer class labels" in d.preprocessing["task_rule"]
    np.testing.assert_allclose(d.X.std(0), 1.0)
    np.testing.assert_allclose(d.Y[:, 0], yd - yd.mean())


def test_a_dataset_is_used_as_given():
    X, y = load_wine(return_X_y=True)
    ds = prepare(X, y, task="regression", standardize=False, center=False, name="as given")
    data = prepare_analysis("mlp:width=4", ds).data
    assert data is ds and data.task == "regression" and data.n_outputs == 1
    np.testing.assert_array_equal(data.X, X)  # not standardised
    np.testing.assert_array_equal(data.Y[:, 0], y)  # not centred, not one-hot
    assert "arrays prepared" not in data.preprocessing["task_rule"]


# --------------------------------------------------------------------------- 3. .pt files
def _wine_tensors():
    X, y = load_wine(return_X_y=True)
    return torch.tensor(X), torch.tensor(y)


@pytest.mark.skipif(not TORCH_READS_TENSOR_DATASET, reason="torch < 2.6 cannot read a TensorDataset unpickled: refused")
def test_a_saved_tensor_dataset_is_read_like_the_same_arrays_in_an_npz(tmp_path):
    X, Y = _wine_tensors()
    torch.save(TensorDataset(X, Y), tmp_path / "d.pt")
    np.savez(tmp_path / "d.npz", X=X.numpy(), Y=Y.numpy())
    pt, npz = load_dataset(tmp_path / "d.pt"), load_dataset(tmp_path / "d.npz")
    assert pt.task == npz.task == "classification" and pt.classes == (0, 1, 2)
    np.testing.assert_array_equal(pt.X, npz.X)
    np.testing.assert_array_equal(pt.Y, npz.Y)


@pytest.mark.skipif(not TORCH_READS_TENSOR_DATASET, reason="torch < 2.6 cannot read a TensorDataset unpickled: refused")
def test_the_cli_reads_a_saved_tensor_dataset(tmp_path):
    X, Y = _wine_tensors()
    torch.save(TensorDataset(X.float(), Y), tmp_path / "d.pt")
    res = runner.invoke(app, ["analyze", "--data", str(tmp_path / "d.pt"), "--model", "mlp:width=4", "--list-units"])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output


class _ReduceToTensorDataset:
    """Pickles as ``TensorDataset(X, Y)`` called by the unpickler (a ``REDUCE``), not built from its state."""

    def __init__(self, X, Y):
        self.args = (X, Y)

    def __reduce__(self):
        return (TensorDataset, self.args)


@pytest.mark.skipif(not TORCH_READS_TENSOR_DATASET, reason="torch < 2.6 cannot read a TensorDataset unpickled: refused")
def test_no_code_of_the_real_tensor_dataset_runs(tmp_path, monkeypatch):
    X, Y = _wine_tensors()
    torch.save(_ReduceToTensorDataset(X, Y), tmp_path / "r.pt")
    calls: list[int] = []

    def spy(self, *tensors):
        calls.append(len(tensors))
        raise RuntimeError("the real TensorDataset.__init__ ran")

    monkeypatch.setattr(TensorDataset, "__init__", spy)
    ds = load_dataset(tmp_path / "r.pt")  # the stand-in stores the two tensors
    assert ds.n_samples == 178 and calls == []
    # the check can fail: with the real class allowlisted, its __init__ runs on the file's arguments
    monkeypatch.setattr(files, "_stand_in", lambda torch: torch.serialization.safe_globals([TensorDataset]))
    with pytest.raises(DataError, match="the real TensorDataset.__init__ ran"):
        load_dataset(tmp_path / "r.pt")
    assert calls == [2]


def test_a_real_tensor_dataset_object_is_taken_apart_too(tmp_path):
    X, Y = _wine_tensors()
    got = files._tensor_dataset(TensorDataset(X, Y), tmp_path / "d.pt")
    assert got[0] is X and got[1] is Y
    assert files._tensor_dataset({"X": 1}, tmp_path / "d.pt") == {"X": 1}


class _Plant:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (Path.write_text, (Path(self.target), "pwned"))


def _planted_in_a_tensor_dataset(marker, Y):
    td = object.__new__(TensorDataset)
    td.tensors = (_Plant(marker), Y)
    return td


def _newobj_only():
    return object.__new__(TensorDataset)  # pickled as NEWOBJ with no state (no BUILD)


_TO_SAVE = "torch.save({'X': X, 'Y': Y}, path)"
PT_CASES = [
    ("subset", lambda m, X, Y: Subset(TensorDataset(X, Y), [0, 1, 2]), ["torch.utils.data.dataset.Subset", _TO_SAVE]),
    ("plant-in-a-dict", lambda m, X, Y: {"X": _Plant(m), "Y": Y}, ["never unpickles", _TO_SAVE]),
    ("plant-in-a-tensor-dataset", lambda m, X, Y: _planted_in_a_tensor_dataset(m, Y), ["never unpickles", _TO_SAVE]),
    ("three-tensors", lambda m, X, Y: TensorDataset(X, Y, Y), ["TensorDataset", "2 tensors", "found 3"]),
    ("no-state", lambda m, X, Y: _newobj_only(), ["TensorDataset", "2 tensors", "NoneType"]),
]


@pytest.mark.parametrize("case", PT_CASES, ids=[c[0] for c in PT_CASES])
def test_other_objects_in_a_pt_file_are_refused_in_one_line_and_nothing_runs(case, tmp_path):
    if not TORCH_READS_TENSOR_DATASET and case[0] in ("plant-in-a-tensor-dataset", "three-tensors", "no-state"):
        pytest.skip("torch < 2.6: every TensorDataset is refused as such (tests/test_torch_compat.py)")
    _, build, needles = case
    X, Y = _wine_tensors()
    marker = tmp_path / "PWNED"
    path = tmp_path / "d.pt"
    torch.save(build(marker, X, Y), path)
    out = tmp_path / "run"
    res = runner.invoke(app, ["analyze", "--data", str(path), "--model", "mlp:width=4", "--out", str(out)])
    assert_one_line(res, ["d.pt", "`data`", *needles])
    assert "weights_only` set to `False`" not in res.output and "add_safe_globals" not in res.output
    assert not marker.exists() and not out.exists()


def test_torchs_refusal_without_a_global_is_one_line_without_its_advice(tmp_path):
    import pickle

    path = tmp_path / "raw.pt"
    path.write_bytes(pickle.dumps({"X": 1}))  # a bare pickle: torch's legacy reader refuses an opcode
    with pytest.raises(DataError) as exc, warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns about the pickle protocol: not a second line on the CLI
        load_dataset(path)
    msg = str(exc.value)
    assert "\n" not in msg and "Unsupported operand" in msg and _TO_SAVE in msg, msg
    assert "weights_only` set to `False`" not in msg


def test_copyreg_is_what_builds_the_no_state_case():
    """The no-state case above really pickles without a state (so the stand-in's state is unset)."""
    reduced = _newobj_only().__reduce_ex__(2)
    assert reduced[0] is copyreg.__newobj__ and reduced[2] is None
