r"""Real data nobody here wrote: a real tanh MLP on scikit-learn's digits and wine, against the saddle sequence.

For each bundled data set (inputs standardised, one-hot targets centred, MSE
``L = (1/N) Σ ½‖f − y‖²``, see :mod:`nqf.app._data`) a real two-layer tanh MLP
(:class:`nqf.networks.TwoLayerMLP`, width ``m ≥ p``) is trained by full-batch GD
from ``M(0) = εI`` (``W(0) = √ε Qᵀ``) at two values of ``ε``, with
``η = lr_fraction / largest escape rate`` (:mod:`nqf.curves._schedule`).  The data
do not commute, so the prediction is the greedy saddle sequence
(:func:`nqf.reductions.saddles.saddle_sequence`):

* **drop times** ``t_k`` (midpoint crossings), each labelled with its rule
  (:func:`nqf.reductions.saddles._clock.predicted_escape_times`): the first with its
  exact ``O(1)`` offset, later ones with the ``O(1)`` correction of the small-part
  recursion where it applies, else leading order ``τ_k ln(1/ε)``;
* **plateau levels** at the point where they are read (middle of the predicted
  plateau, the last at the end of the run): the saddle value ``L_k`` plus the tails of
  the two adjacent heteroclinic orbits (:func:`nqf.reductions.saddles._clock.composite_loss`).
  The bare ``L_k`` is the ``ε → 0`` limit; where the relaxation into a saddle is slow
  it is not reached at any practical ``ε`` (wine's first plateau relaxes at rate ≈ 0.08
  against an escape rate of 2.0: at ε = 1e-10 its middle is still 13 % of the drop
  above ``L_1``, in the NQF simulation as in the real network, which is what failed
  the 8 % check before the tails were included).

The order-parameter simulation of the NQF runs beside the real network, and so does the
seeded NQF (:func:`nqf.dynamics.seeded_nqf`, docs/theory.md §7): the NQF with the next
orders' seeds in the unlearned directions, whose drop times are the real network's clock
(checked per drop within 5 % of the real network, issue 20's acceptance) and which give each
drop's seeding floor ``ε*_k`` (table).  Below its floor a later drop follows the first
switch's clock, not ``τ_k ln(1/ε)``: there the NQF's own time error does not shrink like
``1/ln(1/ε)``, and the trend check on it is expected to fail.

**Checks (against the real network, not the library).**  Per predicted drop
``k`` and ``ε``: the real network's escape time (first downward crossing of
``(L_{k−1} + L_k)/2``) and its plateau level (loss at the read point), with tolerances

    time:  0.12 · ln(1e10) / ln(1/ε),    level: 0.08 · ln(1e10) / ln(1/ε),

i.e. issue 11's acceptance at ε = 1e-10 on digits (times within 12 %, levels within
8 % of the real network), scaled with the order of the remaining error to other ``ε``:
the leading-order times are off by ``O(1)`` against a time ``∝ ln(1/ε)``, and the same
``O(1)`` misplacement is what is left of the level error once the orbit tails are
included.  GD against the flow: a mode of rate ``λ`` grows at ``(2/η) ln(1 + ηλ/2)``,
so every drop is late by at most ``η λ_max / 4 = lr_fraction/4`` (0.5 % at the default
0.02).  A larger step is not cheaper for free: at 0.04 (half the steps) the drops come
0.3–0.5 % later, which is the size of wine's time errors (≈ 1 %) and turns its
"error shrinks" check around (1e-6: 0.9 %, 1e-10: 1.3 %).
Per data set: the largest time error must not grow from the larger to the smaller
``ε`` (the error shrinks with ``ε``); and the real network must stay within 1 % of the
NQF simulation up to the second predicted drop on digits (issue 11 measured 0.13 %;
the gap over the whole run is reported: at ε = 1e-10 the real network runs up to 8 %
ahead of its NQF in the late drops, because its escape rates at O(1) weights differ
from the NQF's and the plateau lengths grow like ln(1/ε)).  Plateau levels are judged
where the real network rests on the plateau (flatness ≤ 0.25); the others are reported.
Plateau levels against the real network have an ``ε``-independent error floor (on a
plateau the weights are ``O(1)``, where the network's terms beyond second order act),
so only the *time* error is required to shrink.  A planted wrong initial scale of the
real network (``planted_init_factor``) shifts every drop by ``ln(factor²)/rate`` and
fails the time checks.  Each run goes to ``(1 + time tolerance) · t_K + 2``: far enough
that a last drop late by the whole tolerance is still seen.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch

from ...errors import InvalidParameterError
from .._report import new_figure
from ._base import Experiment, Outcome, Table, size_estimate
from ._catalog import CATALOG, register
from ._common import to_cpu
from ._real_data_checks import _DATA_SIZES, RealDataParams, UpperBoundCheck, _tolerances, eps_checks, trend_checks

__all__ = ["RealData", "UpperBoundCheck"]


def _nqf_run(op, Y, W0, form, run):
    from ...dynamics import simulate

    return to_cpu(simulate(op, Y, W0=W0, form=form, **run))


def _real_run(D, width, C, X, Y, W0, run):
    from ...dynamics import train_network
    from ...networks import TwoLayerMLP

    net = TwoLayerMLP(D, width, C, "tanh")
    return to_cpu(train_network(net, net.units, X, Y, W0=W0, **run))


def _seeded_run(op, D, width, C, X, Y, W0, run):
    from ...dynamics import seeded_nqf
    from ...networks import TwoLayerMLP

    net = TwoLayerMLP(D, width, C, "tanh")
    lr, steps = run["optimizer"].lr, run["steps"]
    return to_cpu(seeded_nqf(op, net, net.units, X, Y, W0=W0, lr=lr, steps=steps, save=run["save"]))


@register
class RealData(Experiment):
    name = "real-data"
    description = CATALOG[name].description
    reproduces = (
        "issue 11: on real, non-commuting data the saddle sequence predicts the plateau levels and drop "
        "times of a real network, with errors that shrink like 1/ln(1/ε)"
    )
    Params = RealDataParams

    def memory_estimate(self, params):
        """The largest of the data sets (``N`` samples, ``D`` features; ``subset`` caps ``N``) at ``width``."""
        subset = params.subset  # pyright: ignore[reportAttributeAccessIssue]
        N, D = max(_DATA_SIZES[d] for d in params.datasets)  # pyright: ignore[reportAttributeAccessIssue]
        nbytes, named, what = size_estimate(params, {"N": min(N, subset or N), "D": D})
        return nbytes, {**named, **({"subset": subset} if subset else {})}, what

    tiny = {"datasets": ["wine"], "eps": [1e-4, 1e-8], "width": 20, "lr_fraction": 0.05, "save_points": 150}
    checks = (
        "drop time per drop and ε (rule per drop: exact offset / O(1) recursion / leading order) — real "
        "network's first downward crossing of (L_{k−1}+L_k)/2 — 0.12·ln(1e10)/ln(1/ε) (issue 11 acceptance at "
        "1e-10, scaled with the error order 1/ln(1/ε))",
        "plateau level per drop and ε (saddle value + tails of the adjacent heteroclinic orbits at the read "
        "point) — real network's loss mid-plateau, only where flat — 0.08·ln(1e10)/ln(1/ε) (same origin)",
        "largest time error at the smaller ε ≤ at the larger ε — real network — one-sided (theory: shrinks)",
        "max |L_real − L_NQF|/L_NQF up to the second drop — real network — 1 % on digits (issue 11: "
        "0.13 % measured); over the whole run and on other data sets: reported",
        "drop time per drop and ε of the seeded NQF (the real network's clock, docs/theory.md §7) — real "
        "network's first downward crossing of (L_{k−1}+L_k)/2 — 5 % (issue 20 acceptance)",
    )

    def plot(self, arrays: dict, params: RealDataParams) -> dict:
        return {"real_data": _figure(arrays, params)}

    def run(self, params: RealDataParams, ctx, out: Outcome) -> None:
        P = params
        rows = []
        for name in ctx.progress(P.datasets, "datasets"):
            prob = _problem(name, P, ctx)  # data, operator, saddle sequence, heteroclinic chain, step
            errs = {}
            for eps in P.eps:
                st = prob["sequence"].staircase(eps, chain=prob["chain"])  # the prediction at this ε
                sim, real, seeded = _runs(prob, st, eps, P, ctx)
                m = _measure(prob, st, sim, real, seeded)
                out.checks.extend(eps_checks(name, eps, st, m, P))
                rows.extend(_rows(name, eps, st, m))
                errs[eps] = (float(np.nanmax(m["cr"].time_errors)), float(np.nanmax(m["err_l"][1:])))
                _record_eps(out, f"{name}-{eps:g}", st, m)
            out.checks.extend(trend_checks(name, errs, P))
            _record_dataset(out, name, prob, errs)
        out.tables.append(_table(rows))


def _table(rows: list) -> Table:
    """The per-drop table: predicted vs NQF vs real network."""
    return Table(
        "Per drop: predicted vs NQF vs real network",
        [
            "data",
            "ε",
            "k",
            "L saddle",
            "L pred",
            "L NQF",
            "L real",
            "err L (real)",
            "t pred",
            "t rule",
            "t NQF",
            "t real",
            "err t (real)",
            "flatness (real)",
            "flat",
            "t seeded",
            "seeding floor ε*",
        ],
        rows,
        caption="L saddle: the ε → 0 level; L pred: the loss predicted at the read point (middle of the "
        "plateau, the last at the end of the run) — saddle value plus the tails of the adjacent "
        "heteroclinic orbits; t rule: exact offset (drop 1), O(1) recursion, or leading order τ_k "
        "ln(1/ε); flatness: loss change across the middle third of plateau k over the adjacent drop "
        "(flat ≤ 0.25); times: first downward crossing of (L_{k−1}+L_k)/2; t seeded: the seeded NQF (the real "
        "network's clock); seeding floor: the ε below which drop k is seeded (docs/theory.md §7)",
    )


def _problem(name: str, P: RealDataParams, ctx) -> dict:
    """Data set, NQF operator, saddle sequence with its ε-independent heteroclinic chain, and the GD step."""
    from ...curves import stable_learning_rate
    from ...reductions.saddles import heteroclinic_chain, saddle_sequence
    from ...structure import mlp
    from .._data import load_dataset

    d = load_dataset(name, subset=P.subset, seed=ctx.seed)
    X = torch.as_tensor(d.X, dtype=torch.float64)
    Y = torch.as_tensor(d.Y, dtype=torch.float64)
    C, D = d.n_outputs, d.n_features
    p = C + D
    if P.width < p:
        raise InvalidParameterError(f"`width` must be ≥ p = C + D = {p} for {name} (M(0) = εI); found {P.width}")
    op = mlp(X, "tanh", n_outputs=C)
    seq = saddle_sequence(op, Y)
    chain = heteroclinic_chain(seq, rtol=1e-8)  # ε-independent: once per data set
    lr = stable_learning_rate(seq.escape_rates, P.lr_fraction)
    prob = {"name": name, "X": X, "Y": Y, "C": C, "D": D, "p": p, "n_samples": d.n_samples, "op": op}
    return {**prob, "sequence": seq, "chain": chain, "lr": lr}


def _runs(prob: dict, st, eps: float, P: RealDataParams, ctx):
    """NQF simulation and real network from the same ``W(0)`` (the network's × `planted_init_factor`), checkpointed."""
    from ...curves import step_count
    from ...dynamics import GD, Save, initial_weights

    lr = prob["lr"]
    steps = step_count(st.times, lr, margin=1.0 + _tolerances(eps, P)[1], extra=2.0)
    W0 = initial_weights(prob["p"], P.width, eps, seed=ctx.seed)
    form = "weights" if eps <= 1e-13 else "order_parameter"
    key = f"{prob['name']}-{eps:g}"
    run = dict(optimizer=GD(lr), steps=steps, save=Save(every=max(1, steps // P.save_points), M=False, W=False))
    sim = ctx.checkpoint(f"{key}-nqf", partial(_nqf_run, prob["op"], prob["Y"], W0, form, run))
    X, Y, C, D = prob["X"], prob["Y"], prob["C"], prob["D"]
    real = ctx.checkpoint(f"{key}-real", partial(_real_run, D, P.width, C, X, Y, P.planted_init_factor * W0, run))
    seeded = ctx.checkpoint(f"{key}-seeded", partial(_seeded_run, prob["op"], D, P.width, C, X, Y, W0, run))
    return sim, real, seeded


def _measure(prob: dict, st, sim, real, seeded) -> dict:
    """Both runs against the staircase (:func:`nqf.curves.compare_staircase`), the predicted loss curve
    (saddle values + orbit tails, :func:`~nqf.reductions.saddles._clock.composite_loss`) and the gaps."""
    from ...curves import compare_staircase, level_read_times, real_clock
    from ...reductions.saddles import composite_loss

    chain, levels, times = prob["chain"], prob["sequence"].plateau_levels, st.times
    n = min(len(sim), len(real), len(seeded))
    t, Ln, Lr, Ls = real.t[:n].numpy(), sim.loss[:n].numpy(), real.loss[:n].numpy(), seeded.loss[:n].numpy()
    cr = compare_staircase(t, Lr, st)
    pred_l = composite_loss(chain, levels, times, level_read_times(float(t[-1]), times))
    upto = t <= times[min(1, len(times) - 1)]
    return {
        "levels": levels,
        "t": t,
        "Ln": Ln,
        "Lr": Lr,
        "cr": cr,
        "cn": compare_staircase(t, Ln, st),
        "pred_l": pred_l,
        "err_l": np.abs(cr.levels_measured - pred_l) / pred_l,
        "gap": float(np.max(np.abs(Lr[upto] - Ln[upto]) / Ln[upto])),
        "gap_all": float(np.max(np.abs(Lr - Ln) / Ln)),
        "Lp": np.interp(t, t[::4], composite_loss(chain, levels, times, t[::4])),
        "Ls": Ls,
        "clock": real_clock(st, t, Ls, t, Ln),
    }


def _rows(name: str, eps: float, st, m: dict) -> list[list]:
    """Table rows, one per plateau k: levels (saddle, predicted, NQF, real) and the drop into k."""
    levels, times, rules, cr, cn = m["levels"], st.times, st.time_rules, m["cr"], m["cn"]
    rows = []
    for k in range(len(levels)):
        rows.append(
            [
                name,
                eps,
                k,
                levels[k],
                m["pred_l"][k],
                cn.levels_measured[k],
                cr.levels_measured[k],
                m["err_l"][k],
                times[k - 1] if k else None,
                rules[k - 1] if k else "",
                cn.times_measured[k - 1] if k else None,
                cr.times_measured[k - 1] if k else None,
                cr.time_errors[k - 1] if k else None,
                cr.flatness[k],
                bool(cr.flat[k]),
                m["clock"].times[k - 1] if k else None,
                m["clock"].floor[k - 1] if k else None,
            ]
        )
    return rows


def _record_eps(out: Outcome, key: str, st, m: dict) -> None:
    """Arrays (the curves the figure draws) and metrics of one data set at one ε."""
    out.arrays.update(
        {
            f"{key}_t": m["t"],
            f"{key}_loss_real": m["Lr"],
            f"{key}_loss_nqf": m["Ln"],
            f"{key}_times_predicted": st.times,
            f"{key}_levels_predicted": m["pred_l"],
            f"{key}_loss_predicted": m["Lp"],
            f"{key}_loss_seeded": m["Ls"],
            f"{key}_times_seeded": m["clock"].times,
            f"{key}_seeding_floor": m["clock"].floor,
        }
    )
    out.metrics[f"{key}_max_gap_to_second_drop"] = m["gap"]
    out.metrics[f"{key}_max_gap_over_run"] = m["gap_all"]
    out.metrics[f"{key}_flat_plateaus"] = int(m["cr"].flat.sum())


def _record_dataset(out: Outcome, name: str, prob: dict, errs: dict) -> None:
    """Arrays of the panel's frame (saddle levels, τ_k, sizes), metrics and the summary line of one data set."""
    seq = prob["sequence"]
    levels = seq.plateau_levels
    out.arrays.update(
        {
            f"{name}_plateau_levels": np.asarray(levels, float),
            f"{name}_taus": np.asarray(seq.taus, float),
            f"{name}_n_samples": np.array(prob["n_samples"]),
            f"{name}_p": np.array(prob["p"]),
        }
    )
    out.metrics[f"{name}_drops"] = len(levels) - 1
    out.metrics[f"{name}_global_minimum"] = float(levels[-1])
    out.summary.append(
        f"{name}: saddle sequence ({seq.rule} rule) predicts {len(levels) - 1} drops, "
        f"L {levels[0]:.4g} → {levels[-1]:.4g}; largest real-network errors (time, level): "
        + "; ".join(f"ε = {e:g}: {a:.1%}, {b:.1%}" for e, (a, b) in errs.items())
    )


def _figure(arrays: dict, P: RealDataParams):
    """One panel per data set from the saved arrays: real, NQF and predicted losses against t/ln(1/ε)."""
    fig, axes = new_figure(len(P.datasets), figsize=(6.2 * len(P.datasets), 4.4))
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, P.datasets, strict=True):
        _panel(ax, name, arrays, P)
    return fig


def _panel(ax, name: str, arrays: dict, P: RealDataParams) -> None:
    """One data set: per ε the real network (solid), its NQF (dashed) and the prediction (dotted)."""
    for eps in P.eps:
        key, L = f"{name}-{eps:g}", math.log(1 / eps)
        t = arrays[f"{key}_t"]
        (line,) = ax.plot(t / L, arrays[f"{key}_loss_real"], lw=2.0, label=f"real, ε = {eps:g}")
        ax.plot(t / L, arrays[f"{key}_loss_nqf"], "--", lw=1.2, color=line.get_color(), label=f"NQF, ε = {eps:g}")
        ax.plot(
            t / L, arrays[f"{key}_loss_predicted"], ":", lw=1.0, color=line.get_color(), label=f"predicted, ε = {eps:g}"
        )
        if f"{key}_loss_seeded" in arrays:
            ax.plot(
                t / L,
                arrays[f"{key}_loss_seeded"],
                "-.",
                lw=1.0,
                color=line.get_color(),
                alpha=0.8,
                label=f"seeded NQF, ε = {eps:g}",
            )
    levels = arrays[f"{name}_plateau_levels"]
    for Lk in levels:
        ax.axhline(Lk, color="0.75", lw=0.6, zorder=0)
    for tk in arrays[f"{name}_taus"][1:]:
        ax.axvline(tk, color="C3", ls=":", lw=0.8)
    ax.set_xlabel("t / ln(1/ε)  (dotted: predicted τ_k)")
    ax.set_ylabel("loss L")
    n, p = int(arrays[f"{name}_n_samples"]), int(arrays[f"{name}_p"])
    ax.set_title(f"{name}: N = {n}, p = {p}, width {P.width}, {len(levels) - 1} predicted drops", fontsize=9)
    ax.legend(fontsize=7)
