r"""Crowded drops on real data: the loss curve and its local exponent from the spectra (docs/analyze.md).

Two real cases built from scikit-learn's digits (a random subset of ``n_samples`` images;
pixels constant over the full set removed: 61 remain; centred, divided by their global std):

* ``autoencoder`` — ``Y = X`` (61 outputs): the modes are the data's own covariance spectrum;
* ``halves`` — the left half of each image predicts the right half (many-output regression).

Phases.  **Problem**: data, the NQF operator ``nqf.structure.mlp(X, "tanh")``.  **Prediction**:
:func:`nqf.predict` at ``ε`` (the saddle sequence), then :func:`nqf.curves.crowded_prediction`
with ``max_decades`` — the window rule, fixed before any network is run: *the longest run of
crowded consecutive drops, cut after its first ``max_decades`` decades*.  **Runs**: the NQF
(order-parameter GD) and a real tanh MLP of width ``width`` from the same ``W(0)``, to 1.2× the
window's end.  **Measurement**: :func:`nqf.curves.compare_crowded` (secant exponent on the
20-point grid, power-law fit with bootstrap CI over the window).  **Checks** (pure functions):
the real network's local exponent inside the band at every grid point; the real network's and
the NQF's fitted exponents vs the mode sum's, tolerance = the half-width of the fit's bootstrap CI.
Planted errors: ``planted_shuffle`` (prediction from a copy whose pixels are shuffled
independently across samples, flattening the covariance spectrum) and ``planted_eps_factor``.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from ...dynamics import GD, Save
from .._report import new_figure
from ._base import Check, Experiment, Outcome, Params, Table
from ._catalog import CATALOG, register
from ._common import to_cpu

__all__ = ["ScalingReal", "digits_case", "crowded_checks"]


class ScalingRealParams(Params):
    cases: list[Literal["autoencoder", "halves"]] = Field(["autoencoder", "halves"], min_length=1)
    eps: float = Field(1e-3, gt=0, lt=1, description="initial scale M(0) = εI")
    width: int = Field(128, ge=8, description="hidden units of the real tanh MLP (≥ p for M(0) = εI)")
    n_samples: int = Field(300, ge=50, le=1797, description="random subset of the digits")
    lr_fraction: float = Field(0.25, gt=0, le=0.5, description="η · (largest escape rate)")
    max_decades: float = Field(1.5, ge=1.0, le=4.0, description="window rule: first decades of the crowded run")
    n_grid: int = Field(20, ge=5, le=100)
    save_points: int = Field(600, ge=100)
    n_boot: int = Field(100, ge=20)
    planted_shuffle: bool = Field(False, description="predict from a pixel-shuffled copy (planted error)")
    planted_eps_factor: float = Field(1.0, gt=0, description="predict at ε × this (planted error when ≠ 1)")


def digits_case(case: str, n_samples: int, seed: int, shuffle: bool = False):
    """``(X, Y)`` float64 tensors of a case; ``shuffle``: each pixel permuted independently across samples."""
    from .._data import load_dataset

    d = load_dataset("digits", standardize=False, center=False, seed=seed)
    full = np.asarray(d.X, float).reshape(d.n_samples, -1)
    keep = full.std(0) > 0
    rng = np.random.default_rng(seed)
    A = full[rng.permutation(d.n_samples)[:n_samples]]
    A = A - A.mean(0)
    A = A / A.std()
    if shuffle:
        A = np.stack([rng.permutation(col) for col in A.T], 1)
    if case == "autoencoder":
        X = Y = A[:, keep]
    else:
        left = (np.arange(64) % 8 < 4) & keep
        X, Y = A[:, left], A[:, (np.arange(64) % 8 >= 4) & keep]
    return torch.as_tensor(X), torch.as_tensor(Y)


@register
class ScalingReal(Experiment):
    name = "scaling-real"
    description = CATALOG[name].description
    reproduces = "docs/theory.md §5 on real data: merged modes make a curve whose local exponent the spectra predict"
    Params = ScalingRealParams
    tiny = {"cases": ["autoencoder"], "n_samples": 100, "width": 128, "save_points": 200, "n_boot": 20}
    checks = (
        "real network's secant exponent −Δln(L−L∞)/Δln t over each cell of a 20-point log grid — inside the band "
        "of the mode sum's local exponent over that cell (mean-value theorem: no slack) at every point",
        "exponent fitted over the window (nqf.curves.fit_power_law) — real network vs the mode sum's — "
        "tolerance: half-width of the real fit's bootstrap CI",
        "the same for the NQF (order-parameter GD): the reduction's mode sum vs its own quadratic form",
    )

    def plot(self, arrays: dict, params: ScalingRealParams) -> dict:
        return {f"scaling_{c}": _figure(arrays, c, params) for c in params.cases}

    def run(self, params: ScalingRealParams, ctx, out: Outcome) -> None:
        rows = []
        for case in ctx.progress(params.cases, "cases"):
            prob = _problem(case, params, ctx)
            pred = _prediction(prob, params)
            runs = _runs(prob, pred, params, ctx)
            meas = _measure(pred, runs, params, ctx)
            out.checks.extend(crowded_checks(case, pred, meas))
            rows.append(_row(case, params, pred, meas))
            _record(out, case, pred, runs, meas)
        out.tables.append(_table(rows, params))


def _problem(case: str, P: ScalingRealParams, ctx) -> dict:
    """The real data, the NQF operator, and the data the prediction is made from (planted: shuffled)."""
    from ...structure import mlp

    X, Y = digits_case(case, P.n_samples, ctx.seed)
    Xp, Yp = digits_case(case, P.n_samples, ctx.seed, shuffle=True) if P.planted_shuffle else (X, Y)
    if case == "autoencoder" and P.planted_shuffle:
        Yp = Xp
    p = X.shape[1] + Y.shape[1]
    return {
        "X": X,
        "Y": Y,
        "p": p,
        "op": mlp(X, "tanh", n_outputs=Y.shape[1]),
        "op_pred": mlp(Xp, "tanh", n_outputs=Yp.shape[1]),
        "Yp": Yp,
    }


def _prediction(prob: dict, P: ScalingRealParams):
    """Staircase at ε (× the planted factor) and its crowded-regime prediction by the stated window rule."""
    from ...curves import crowded_prediction
    from ...reductions import predict

    st = predict(prob["op_pred"], prob["Yp"], min(P.eps * P.planted_eps_factor, 0.5))
    return {"staircase": st, "crowded": crowded_prediction(st, n_grid=P.n_grid, max_decades=P.max_decades)}


def _runs(prob: dict, pred: dict, P: ScalingRealParams, ctx) -> dict:
    """NQF order-parameter GD and the real tanh MLP from the same W(0), to 1.2× the window's end."""
    from ...curves import stable_learning_rate
    from ...dynamics import initial_weights, simulate, train_network
    from ...networks import TwoLayerMLP

    cp = pred["crowded"]
    if not cp.crowded:
        return {}
    lr = stable_learning_rate(pred["staircase"].rates, P.lr_fraction)
    steps = int(math.ceil(1.2 * cp.window[1] / lr)) + 1
    X, Y, p = prob["X"], prob["Y"], prob["p"]
    W0 = initial_weights(p, max(P.width, p), P.eps, seed=ctx.seed)
    every = max(1, steps // P.save_points)
    nqf_run = to_cpu(simulate(prob["op"], Y, W0=W0, optimizer=GD(lr), steps=steps, save=Save(every=every, M=False)))
    net = TwoLayerMLP(X.shape[1], max(P.width, p), Y.shape[1], "tanh")
    keep = Save(every=every, M=False, W=False)
    real = to_cpu(train_network(net, net.units, X, Y, W0=W0, optimizer=GD(lr), steps=steps, save=keep))
    return {"nqf": nqf_run, "real": real, "lr": lr, "steps": steps}


def _measure(pred: dict, runs: dict, P: ScalingRealParams, ctx) -> dict:
    """compare_crowded for both runs (through nqf.curves only)."""
    from ...curves import compare_crowded

    if not runs:
        return {}
    out = {}
    for k in ("nqf", "real"):
        tr = runs[k]
        t, L = tr.t.numpy()[1:], tr.loss.numpy()[1:]
        ok = np.isfinite(L)
        out[k] = compare_crowded(pred["crowded"], t[ok], L[ok], n_boot=P.n_boot, seed=ctx.seed)
    return out


def crowded_checks(case: str, pred: dict, meas: dict) -> list[Check]:
    """Band at every grid point (real), fitted exponent vs the mode sum's (real, NQF)."""
    cp = pred["crowded"]
    if not meas:
        return [Check(f"{case}: crowded drops", 1.0, None, 0.0, reason="the prediction finds no crowded drops")]
    real = meas["real"]
    checks = [
        Check(
            f"{case}: real local exponent outside the band (worst distance over {real.t.size} points)",
            0.0,
            real.worst,
            0.0,
            kind="absolute",
            reference="real tanh MLP, secant exponent on each grid cell",
            tolerance_origin="band = range of the mode sum's local exponent over the cell (mean-value theorem)",
        )
    ]
    for k, who in (("real", "real tanh MLP"), ("nqf", "NQF order-parameter GD")):
        f = meas[k].fit
        checks.append(
            Check(
                f"{case}: exponent over the window, {who} vs mode sum",
                cp.window_exponent,
                None if f is None else f.exponent,
                0.0 if f is None else 0.5 * (f.ci[1] - f.ci[0]),
                kind="absolute",
                reference=f"{who}, fit_power_law with bootstrap CI over the window",
                tolerance_origin="half-width of the fit's 95 % bootstrap CI",
            )
        )
    return checks


def _row(case: str, P: ScalingRealParams, pred: dict, meas: dict) -> list:
    cp = pred["crowded"]
    if not meas:
        return [case, P.eps, None, None, None, None, None, None, None]
    r, n = meas["real"], meas["nqf"]
    if r.fit is None or n.fit is None:
        return [
            case,
            P.eps,
            f"[{cp.window[0]:.3g}, {cp.window[1]:.3g}]",
            cp.window_exponent,
            None,
            "L ≤ L∞",
            None,
            None,
            None,
        ]
    return [
        case,
        P.eps,
        f"[{cp.window[0]:.3g}, {cp.window[1]:.3g}]",
        cp.window_exponent,
        n.fit.exponent,
        f"{r.fit.exponent:.3f} [{r.fit.ci[0]:.3f}, {r.fit.ci[1]:.3f}]",
        f"{int(r.inside.sum())}/{r.inside.size}",
        None if cp.exponent is None else f"{cp.exponent:.3f} [{cp.exponent_ci[0]:.3f}, {cp.exponent_ci[1]:.3f}]",
        f"{int(n.inside.sum())}/{n.inside.size}",
    ]


def _table(rows: list, P: ScalingRealParams) -> Table:
    return Table(
        "Crowded drops: predicted vs NQF vs real network",
        ["case", "ε", "window t", "α mode sum", "α NQF", "α real [CI]", "real in band", "(a−1)/b [CI]", "NQF in band"],
        rows,
        caption=f"window: longest crowded run, first {P.max_decades:g} decades; α fitted over the window; "
        f"in band: points of the {P.n_grid}-point grid whose secant exponent lies in the mode-sum band",
    )


def _record(out: Outcome, case: str, pred: dict, runs: dict, meas: dict) -> None:
    """Everything the figure draws, as arrays; metrics and a summary line."""
    cp = pred["crowded"]
    if not meas:
        out.summary.append(f"{case}: no crowded drops at this ε")
        return
    a = {"grid": cp.t, "pred_local": cp.local_exponent, "band_low": cp.band_low, "band_high": cp.band_high}
    a.update({"window": np.asarray(cp.window), "L_inf": np.array(cp.L_inf), "pred_loss": cp.loss})
    for k in ("nqf", "real"):
        a[f"{k}_t"], a[f"{k}_loss"] = runs[k].t.numpy()[1:], runs[k].loss.numpy()[1:]
        a[f"{k}_local"] = meas[k].local_exponent
    out.arrays.update({f"{case}_{k}": v for k, v in a.items()})
    r = meas["real"]
    alpha = None if r.fit is None else r.fit.exponent
    out.metrics.update({f"{case}_real_in_band": int(r.inside.sum()), f"{case}_alpha_real": alpha})
    out.metrics[f"{case}_alpha_mode_sum"] = cp.window_exponent
    fit = r.fit
    measured = (
        "real loss below the predicted L∞"
        if fit is None
        else f"real α = {fit.exponent:.3f} [{fit.ci[0]:.3f}, {fit.ci[1]:.3f}]"
    )
    out.summary.append(
        f"{case}: window [{cp.window[0]:.3g}, {cp.window[1]:.3g}], mode sum α = {cp.window_exponent:.3f}, "
        f"{measured}, {int(r.inside.sum())}/{r.inside.size} grid points in band"
    )


def _figure(arrays: dict, case: str, P: ScalingRealParams):
    """Loss above L∞ (real, NQF, mode sum) and the local exponent with the predicted band — from the arrays."""
    fig, (ax, ax2) = new_figure(2, figsize=(12, 4.6))
    if f"{case}_grid" not in arrays:
        ax.set_title(f"{case}: no crowded drops at ε = {P.eps:g}")
        return fig
    g = lambda k: arrays[f"{case}_{k}"]  # noqa: E731
    linf = float(g("L_inf"))
    for k, lab, st in (("real", f"real tanh MLP (width {P.width})", "-"), ("nqf", "NQF (GD)", "--")):
        ex = g(f"{k}_loss") - linf
        ax.loglog(g(f"{k}_t")[ex > 0], ex[ex > 0], st, lw=1.6, label=lab)
    ax.loglog(g("grid"), g("pred_loss") - linf, "k:", lw=2, label="prediction: mode sum")
    for w in g("window"):
        ax.axvline(float(w), color="0.6", lw=0.8)
    ax.set_xlabel("training time t = η·steps")
    ax.set_ylabel("L − L∞")
    ax.set_title(f"digits {case}, ε = {P.eps:g} (grey: crowded window)", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    ax2.fill_between(g("grid"), g("band_low"), g("band_high"), color="0.85", label="predicted band (mode sum)")
    ax2.semilogx(g("grid"), g("pred_local"), "k-", lw=1.5, label="predicted local exponent")
    ax2.semilogx(g("grid"), g("real_local"), "o", ms=4, label="real network (secant)")
    ax2.semilogx(g("grid"), g("nqf_local"), "x", ms=5, label="NQF (secant)")
    ax2.set_xlabel("training time t = η·steps")
    ax2.set_ylabel("local exponent −d ln(L−L∞)/d ln t")
    ax2.legend(fontsize=8)
    return fig
