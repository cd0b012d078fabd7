"""nqf.analyze reports crowded drops in its verdict (issue 22)."""

import numpy as np

from nqf.app._study import analyze


def test_analyze_digits_autoencoder_reports_crowded_drops():
    """An autoencoder on the 16 pixels of largest variance (120 digits): 16 drops that crowd at ε = 1e-3, the
    last two the tail (together at most 1 % of the fall: left out, said in the prediction's notes), so the verdict
    names drops 1–14.  (All 61 pixels: 61 drops, a prediction too long for the suite; the scaling-real experiment
    runs them.)"""
    from sklearn.datasets import load_digits

    X = load_digits().data[:120]
    X = X[:, np.argsort(X.std(0))[::-1][:16]]
    X = (X - X.mean(0)) / X.std()
    res = analyze("mlp:width=64,act=tanh", X, X, eps=1e-3, seed=0)
    cr = res.verdict.crowded
    assert cr is not None and cr["prediction"]["crowded"]
    assert any("crowd" in s for s in res.verdict.text)
    assert cr["real"] is None or len(cr["real"]["local_exponent"]) == 20
    assert np.isfinite(cr["prediction"]["window_exponent"])
    assert any(n.startswith("tail: drops 15–16") for n in res.prediction.notes), res.prediction.notes
    assert any(s.startswith("drops 1–14 crowd") for s in res.verdict.text), res.verdict.text
