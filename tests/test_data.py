"""nqf.app._data: bundled data sets, files, preprocessing, clear errors."""

import numpy as np
import pytest
import torch

from nqf.app._data import BUILTIN, load_dataset, prepare
from nqf.errors import DataError, NonFiniteError, ShapeError


@pytest.mark.parametrize(
    "name,shape",
    [
        ("digits", (1797, 64, 10)),
        ("iris", (150, 4, 3)),
        ("wine", (178, 13, 3)),
        ("breast_cancer", (569, 30, 2)),
        ("diabetes", (442, 10, 1)),
        ("linnerud", (20, 3, 3)),
    ],
)
def test_bundled_shapes_and_preprocessing(name, shape):
    d = load_dataset(name)
    assert (d.n_samples, d.n_features, d.n_outputs) == shape
    assert name in BUILTIN
    np.testing.assert_allclose(d.X.mean(0), 0, atol=1e-12)  # standardised
    sd = d.X.std(0)
    assert np.all((np.abs(sd - 1) < 1e-12) | (sd == 0))
    np.testing.assert_allclose(d.Y.mean(0), 0, atol=1e-12)  # centred targets
    if d.task == "classification":  # centred one-hot: rows differ by e_k
        raw = d.Y - d.Y.min(0)
        assert d.preprocessing["one_hot"] and d.preprocessing["n_classes"] == shape[2]
        np.testing.assert_allclose(np.sort(np.unique(np.round(raw.sum(1), 12))), [1.0])
    assert "N=" in repr(d) and len(repr(d)) < 400


def test_preprocessing_optional_and_recorded():
    d = load_dataset("iris", standardize=False, one_hot=False, center=False)
    assert d.preprocessing["standardize"] is False and d.preprocessing["one_hot"] is False
    assert d.Y.shape == (150, 1) and set(np.unique(d.Y)) == {0.0, 1.0, 2.0}
    assert d.X.max() > 5  # raw centimetres
    s = load_dataset("digits", subset=100, seed=3)
    assert s.n_samples == 100 and s.preprocessing["subset"] == {"n": 100, "seed": 3}


def test_files_npz_csv_pt(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 4)), rng.normal(size=30)
    np.savez(tmp_path / "d.npz", X=X, Y=y)
    a = load_dataset(tmp_path / "d.npz")
    assert a.task == "regression" and a.Y.shape == (30, 1)
    np.testing.assert_allclose(a.Y[:, 0], y - y.mean())
    with open(tmp_path / "d.csv", "w") as fh:
        fh.write("a,b,c,d,label\n")
        for row, lab in zip(X, rng.integers(0, 3, 30), strict=True):
            fh.write(",".join(f"{v:.17g}" for v in row) + f",{lab}\n")
    c = load_dataset(tmp_path / "d.csv", target="label")
    assert c.task == "classification" and c.n_features == 4 and c.n_outputs == 3
    torch.save({"X": torch.tensor(X), "y": torch.tensor(y)}, tmp_path / "d.pt")
    p = load_dataset(tmp_path / "d.pt")
    np.testing.assert_allclose(p.X, a.X)


def test_errors_are_clear(tmp_path):
    X = np.ones((5, 2))
    X[2, 1] = np.nan
    with pytest.raises(NonFiniteError, match=r"`X` must be finite; found nan at index \(2, 1\)"):
        prepare(X, np.zeros(5))
    with pytest.raises(ShapeError, match="same number of samples; found 5 inputs and 4 targets"):
        prepare(np.ones((5, 2)), np.zeros(4))
    with pytest.raises(DataError, match="neither a bundled data set"):
        load_dataset("no_such_thing")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="`target`"):
        load_dataset(tmp_path / "x.csv")
    with pytest.raises(DataError, match="not found"):
        load_dataset(tmp_path / "x.csv", target="zz")
