"""nqf.analyze reports crowded drops in its verdict (issue 22)."""

import numpy as np
import pytest

from nqf.study import analyze


@pytest.mark.slow
def test_analyze_digits_autoencoder_reports_crowded_drops():
    from sklearn.datasets import load_digits

    X = load_digits().data[:120]
    X = X[:, X.std(0) > 0]
    X = (X - X.mean(0)) / X.std()
    res = analyze("mlp:width=128,act=tanh", X, X, eps=1e-3, seed=0)
    cr = res.verdict["crowded"]
    assert cr is not None and cr["prediction"]["crowded"]
    assert any("crowd" in s for s in res.verdict["text"])
    assert cr["real"] is None or len(cr["real"]["local_exponent"]) == 20
    assert np.isfinite(cr["prediction"]["window_exponent"])
