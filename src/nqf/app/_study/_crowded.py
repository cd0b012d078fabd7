"""Crowded drops in ``nqf analyze``: when predicted drops overlap, the curve and its exponent (docs/analyze.md).

:func:`with_crowded` adds to the verdict, when consecutive predicted drops are closer than
their own width (:func:`nqf.curves.crowded_prediction`), the crowded window, the mode sum's
local exponent band and fitted exponent, ``(a − 1)/b`` where the spectra span a decade, and the
real network's (and the NQF's) secant exponents and bootstrap fits over the same window
(:func:`nqf.curves.compare_crowded`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...curves import compare_crowded, crowded_prediction
from ...errors import NQFError
from ._parts import Verdict

__all__ = ["with_crowded"]


def _side(cp, t, L) -> dict | None:
    """The measured side over the window, or ``None`` where the run does not cover it."""
    try:
        c = compare_crowded(cp, t, L, n_boot=200)
    except NQFError:
        return None
    f = c.fit
    return {
        "in_band": int(c.inside.sum()),
        "points": int(c.inside.size),
        "local_exponent": c.local_exponent.tolist(),
        "exponent": None if f is None else f.exponent,
        "ci": None if f is None else list(f.ci),
    }


def with_crowded(verdict: Verdict, pred, t, loss_real, loss_nqf) -> Verdict:
    """``verdict`` with its ``crowded`` part (``None`` when the drops do not crowd) and, when they do, one sentence
    more."""
    cp = crowded_prediction(pred)
    if not cp.crowded:
        return dataclasses.replace(verdict, crowded=None)
    t = np.asarray(t, float)
    ok = t > 0
    real, nqf = _side(cp, t[ok], np.asarray(loss_real)[ok]), _side(cp, t[ok], np.asarray(loss_nqf)[ok])
    crowded = {"prediction": cp.to_dict(), "real": real, "nqf": nqf}
    ab = (
        ""
        if cp.exponent is None
        else f", (a−1)/b = {cp.exponent:.3f} [{cp.exponent_ci[0]:.3f}, {cp.exponent_ci[1]:.3f}]"
    )
    if real is None or real["exponent"] is None:
        meas = "the real network does not cover the window above the predicted L∞"
    else:
        meas = (
            f"real network α = {real['exponent']:.3f} [{real['ci'][0]:.3f}, {real['ci'][1]:.3f}], local exponent "
            f"in the band at {real['in_band']}/{real['points']} points"
        )
    sentence = (
        f"drops {cp.drops[0]}–{cp.drops[1]} crowd (closer than their width: no plateau between them): over "
        f"t ∈ [{cp.window[0]:.3g}, {cp.window[1]:.3g}] the predicted mode sum decays with α = {cp.window_exponent:.3f}"
        f" (local {np.nanmin(cp.local_exponent):.2f}–{np.nanmax(cp.local_exponent):.2f}){ab}; {meas}"
    )
    return dataclasses.replace(verdict, crowded=crowded, text=(*verdict.text, sentence))
