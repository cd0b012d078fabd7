"""Non-commuting staircases: the greedy low-rank saddle sequence on real networks.

Beyond commuting data the Lotka–Volterra reduction does not apply, but the NQF
is matrix sensing with ``M = WWᵀ`` and small-initialisation training visits a
sequence of saddles of increasing rank (:func:`nqf.reductions.saddles.saddle_sequence`).
Three non-commuting problems:

* ``mlp``: a tanh MLP with three outputs on correlated inputs (input covariance
  eigenvalues 3, 2, 1, 0.6, 0.4 in a random basis) and a linear teacher —
  plateaus at the reduced-rank-regression losses;
* ``qk-attention``: QK-only attention (``d_k = 1``) on a rank-3 NQF teacher;
* ``cnn``: a 1-D CNN with per-position readout and non-overlapping patches on
  a rank-3 NQF teacher.

Each runs the order-parameter GD and the real network from ``M(0) = εI``
(``W0 = √ε Q``, ``Q`` with orthonormal rows) and marks the predicted plateau
levels and escape times (``t_k ≈ τ_k ln(1/ε)`` plus the ``O(1)`` offset: exact
for the first, from the small-part recursion for later ones) on the measured curves.  Measured
plateau ``k``: the loss at the midpoint between the predicted escapes ``t_k`` and ``t_{k+1}``; measured first
escape: the time the loss crosses halfway from ``L_0`` to ``L_1``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from ...curves import FLAT_THRESHOLD, compare_staircase
from ...dynamics import GD, Save, initial_weights
from ...errors import InvalidParameterError
from .._report import mark_times, new_figure
from ._base import Check, Experiment, Outcome, Params, Table
from ._catalog import CATALOG, register
from ._common import clean_roundoff, mark_stop_at, mark_unfinished, stop_reason, to_cpu

__all__ = ["Saddles", "saddle_problem", "saddle_checks"]

PROBLEMS = ("mlp", "qk-attention", "cnn")


class SaddlesParams(Params):
    problems: list[Literal["mlp", "qk-attention", "cnn"]] = Field(list(PROBLEMS), min_length=1)
    eps: float = Field(1e-8, gt=0, lt=1)
    n_samples: int = Field(100, ge=10)
    width: int = Field(32, ge=2, description="units of the real networks (≥ p so that M(0) = εI)")
    mlp_teacher_scale: float = Field(0.05, gt=0, description="scale of the MLP's linear teacher")
    teacher_scale: float = Field(0.1, gt=0, description="scale of the QK-attention and CNN teachers")
    max_rank: int = Field(
        3,
        ge=1,
        description="follow the sequence up to this rank (the teachers have rank 3; "
        "beyond it the noise directions escape at tiny rates)",
    )
    max_steps: int = Field(200_000, ge=100, description="refuse runs longer than this many GD steps")
    step_fraction: float = Field(0.07, gt=0, le=0.25, description="η · (largest escape rate) per step")
    save_points: int = Field(400, ge=20)
    nqf_runs: bool = Field(False, description="also run the NQF order-parameter GD (shown, not judged)")
    flat_threshold: float = Field(
        FLAT_THRESHOLD,
        gt=0,
        description="a plateau is judged only if the network's loss changes across the middle third of "
        "its predicted interval by at most this fraction of the adjacent drop (nqf.curves._compare)",
    )
    plateau_tolerance: float = Field(
        0.1, gt=0, description="tolerance on plateau levels, as a fraction of the adjacent drop"
    )
    offset_constant: float = Field(
        2.0,
        gt=0,
        description="c: later escape times (leading order τ_k ln(1/ε)) may "
        "miss by their O(1) offset, bounded by Σ_{i<k} c/r_i (r_i: escape rates)",
    )

    @model_validator(mode="after")
    def _sizes(self):
        p_min = {"mlp": 8, "qk-attention": 12, "cnn": 12}
        need = max(p_min[n] for n in self.problems)
        if self.width < need:
            raise InvalidParameterError(
                f"`width` = {self.width} must be ≥ p = {need} (the largest problem in `problems`) so that M(0) = εI"
            )
        if self.n_samples < 2 * need:
            raise InvalidParameterError(
                f"`n_samples` = {self.n_samples} must be ≥ 2p = {2 * need} for the problems in `problems`"
            )
        return self


def _bilinear_teacher(op, sv, g):
    """Targets ``f(0) + Tr[M* A]`` of a rank-``len(sv)`` bilinear teacher with orthonormal factors."""
    p1, p2 = len(range(op.p)[op.left]), len(range(op.p)[op.right])
    a = torch.linalg.qr(torch.randn(p1, len(sv), generator=g, dtype=torch.float64))[0]
    u = torch.linalg.qr(torch.randn(p2, len(sv), generator=g, dtype=torch.float64))[0]
    W = torch.cat([a, u], 0) * torch.tensor(sv, dtype=torch.float64).sqrt()
    return op.offset + op(W @ W.T).reshape(op.n_samples, -1)


def saddle_problem(
    name: str, n: int, width: int, g: torch.Generator, teacher_scale: float = 1.0, bilinear_scale: float = 1.0
):
    """Structure operator, targets, real network and inputs of one non-commuting problem.

    ``teacher_scale`` multiplies the MLP's targets, ``bilinear_scale`` the QK-attention and CNN
    teachers' signal and noise (a small teacher keeps the learned weights small, so that the real
    network stays close to its NQF after the first escapes).
    """
    from ... import networks as nw, structure as st

    dt = torch.float64
    if name == "mlp":
        D, C = 5, 3
        R, _ = torch.linalg.qr(torch.randn(D, D, generator=g, dtype=dt))
        cov = torch.tensor([3.0, 2.0, 1.0, 0.6, 0.4], dtype=dt)
        X = torch.randn(n, D, generator=g, dtype=dt) @ torch.diag(cov.sqrt()) @ R.T
        w, U = torch.linalg.eigh(X.T @ X / n)
        Xw = X @ (U @ torch.diag(w**-0.5) @ U.T)
        Ut, _ = torch.linalg.qr(torch.randn(C, C, generator=g, dtype=dt))
        Vt, _ = torch.linalg.qr(torch.randn(D, C, generator=g, dtype=dt))
        B = Ut @ torch.diag(torch.tensor([3.0, 1.5, 0.6], dtype=dt)) @ Vt.T
        Y = teacher_scale * (Xw @ B.T + 0.1 * torch.randn(n, C, generator=g, dtype=dt))
        return st.mlp(X, "tanh", n_outputs=C), Y, nw.TwoLayerMLP(D, width, C, "tanh"), X
    if name == "qk-attention":
        X = torch.randn(n, 5, 6, dtype=dt, generator=g)
        V = torch.randn(2, 6, dtype=dt, generator=g)
        op = st.qk_attention(X, V, d_key=1, n_heads=width)
        Y = op.offset + bilinear_scale * (
            _bilinear_teacher(op, [2.0, 1.0, 0.5], g) - op.offset + 0.01 * torch.randn(n, 2, generator=g, dtype=dt)
        )
        return op, Y, nw.QKAttention(6, width, 1, V), X
    if name == "cnn":
        X = torch.randn(n, 2, 9, dtype=dt, generator=g)
        op = st.conv1d(X, 3, stride=3, readout="position", n_outputs=2)
        Y = op.offset + bilinear_scale * (
            _bilinear_teacher(op, [3.0, 1.5, 0.6], g) - op.offset + 0.05 * torch.randn(n, 2, generator=g, dtype=dt)
        )
        net = nw.ConvNet1d(2, width, 3, stride=3, readout="position", n_outputs=2, input_length=9)
        return op, Y, net, X
    raise InvalidParameterError(f"unknown problem {name!r}; expected one of {PROBLEMS}")


@register
class Saddles(Experiment):
    name = "saddles"
    description = CATALOG[name].description
    reproduces = (
        "beyond the paper: for non-commuting data small-initialisation training visits saddles of "
        "increasing rank; plateau levels and escape times ≈ τ_k ln(1/ε) are predicted"
    )
    Params = SaddlesParams
    tiny = {
        "problems": ["mlp", "cnn"],
        "eps": 1e-6,
        "n_samples": 30,
        "width": 12,
        "step_fraction": 0.08,
        "save_points": 150,
        "nqf_runs": False,
        "max_rank": 2,
    }
    checks = (
        "per problem, real network: first escape time (loss halfway from L_0 to L_1) vs ln(1/ε)/(4λ_1) + "
        "the exact O(1) offset; relative tolerance 2 · `step_fraction` (GD vs flow, O(η ζ))",
        "per problem and later escape k: real network's halfway crossing from L_{k−1} to L_k vs τ_k ln(1/ε) "
        "plus its O(1) offset from the small-part recursion (SaddleSequence.corrected_escape_times); relative "
        "tolerance 2 · `step_fraction` (GD vs flow, O(η ζ)); where the recursion does not apply (a plateau "
        "shorter than its relaxation) the leading order with absolute tolerance Σ_{i<k} c/r_i (r_i the escape "
        "rates, c = `offset_constant`)",
        "per plateau k ≥ 1: real network's loss midway between the predicted escapes vs the saddle level "
        "L_k; absolute tolerance `plateau_tolerance` × the adjacent drop (the scale of the flatness test); "
        "plateaus where the network's loss is not flat "
        "(changes across the middle third by more than `flat_threshold` of the adjacent drop) are "
        "reported as not resolved, not judged",
    )

    def plot(self, arrays: dict, params: SaddlesParams) -> dict:
        return {"saddles": _figure(arrays, params)}

    def run(self, params: SaddlesParams, ctx, out: Outcome) -> None:
        P = params
        rows = []
        for j, name in enumerate(ctx.progress(P.problems, "problems")):
            prob = _prepare(name, P, ctx.generator(200 + j))  # problem and prediction
            real, sim = _runs(name, prob, P, ctx)
            t, Lr = real.t.numpy(), real.loss.numpy()
            st = prob["staircase"]
            cmp = compare_staircase(t, Lr, st, flat_threshold=P.flat_threshold)  # measurement: the one judge
            L_nqf = compare_staircase(sim.t.numpy(), sim.loss.numpy(), st).levels_measured if sim is not None else None
            n_checks = len(out.checks)
            checks, table, unresolved = saddle_checks(name, st, cmp, P, L_nqf)
            out.checks.extend(checks)
            rows.extend(table)
            mark_unfinished(out.checks, stop_reason(real_network=real), start=n_checks)
            if unresolved:
                out.summary.append(
                    f"{name}: plateau(s) {unresolved} not resolved at ε = {P.eps:g} (the network does "
                    "not rest there: too short, or still relaxing at the end of the run); reported, "
                    "not judged"
                )
            seq = prob["sequence"]
            out.arrays.update(
                {
                    f"{name}_t": t,
                    f"{name}_loss_real": Lr,
                    f"{name}_stopped": np.array(stop_reason(real_network=real) != ""),
                    f"{name}_plateau_levels": st.levels,
                    f"{name}_escape_times": st.times,
                    f"{name}_escape_times_leading": st.times_leading,
                    f"{name}_p": np.array(prob["op"].p),
                    f"{name}_commuting_rule": np.array(seq.rule == "commuting"),
                }
            )
            if sim is not None:
                out.arrays[f"{name}_t_nqf"] = sim.t.numpy()
                out.arrays[f"{name}_loss_nqf"] = sim.loss.numpy()
            out.metrics[f"{name}_global_minimum_reached"] = bool(st.global_minimum)
            out.summary.append(
                f"{name}: {st.n_drops} escapes, ranks {st.ranks.tolist()}, "
                f"plateaus {', '.join(f'{v:.4g}' for v in st.levels)}; {seq.message}"
            )
        out.tables.append(_table(rows))


def _table(rows: list) -> Table:
    """The report's table of plateaus and escapes, one row per plateau and problem."""
    return Table(
        "Saddle sequence vs the real network",
        [
            "problem",
            "plateau k",
            "rank",
            "predicted L_k",
            "real network",
            "NQF",
            "flat",
            "level ok",
            "predicted escape into k",
            "t rule",
            "real network escape",
            "time ok",
        ],
        rows,
        caption="grey lines: predicted plateau levels; dashed: predicted escape times τ_k ln(1/ε) with their "
        "O(1) offsets (the first exact; later ones from the small-part recursion where it applies, "
        "else leading order only); levels below round-off shown as 0; flat: the real network's loss "
        "changes across the middle third of the plateau by at most `flat_threshold` of the adjacent drop",
    )


def _figure(arrays: dict, P: SaddlesParams):
    """One panel per problem from the saved arrays: losses, predicted levels and escape times."""
    ncols = min(3, len(P.problems))
    nrows = math.ceil(len(P.problems) / ncols)
    fig, axes = new_figure(ncols, nrows, figsize=(5.0 * ncols, 4.4 * nrows))
    axes = np.atleast_1d(axes).ravel()
    for ax, name in zip(axes, P.problems, strict=False):
        a = {k[len(name) + 1 :]: v for k, v in arrays.items() if k.startswith(name + "_")}
        rule = "commuting" if bool(a["commuting_rule"]) else "generic"
        _plot(ax, f"{name}: p = {int(a['p'])}, ε = {P.eps:g} ({rule} rule)", a, P)
    for ax in axes[len(P.problems) :]:
        ax.axis("off")
    return fig


def _prepare(name: str, P: SaddlesParams, g) -> dict:
    """Problem, saddle sequence and predicted staircase (levels below round-off set to 0), run length."""
    from ...reductions.saddles import saddle_sequence

    op, Y, net, X = saddle_problem(name, P.n_samples, P.width, g, P.mlp_teacher_scale, P.teacher_scale)
    seq = saddle_sequence(op, Y, max_rank=P.max_rank)  # seconds; holds an interpolant: recomputed on --resume
    st = seq.staircase(P.eps)
    st = dataclasses.replace(st, levels=clean_roundoff(st.levels, st.levels[0]))
    lr = P.step_fraction / float(np.nanmax(st.rates))
    t_esc = seq.escape_times(P.eps)  # the leading order (the first drop with its offset) sets the run length
    t_end = 1.3 * float(t_esc[-1]) + 2.0 if len(t_esc) else 10.0
    steps = int(math.ceil(t_end / lr))
    if steps > P.max_steps:
        raise InvalidParameterError(
            f"{name}: the predicted staircase needs {steps} GD steps (> `max_steps` = "
            f"{P.max_steps}); lower `max_rank`, raise `eps` or `step_fraction`"
        )
    W0 = initial_weights(op.p, P.width, P.eps, g)
    return {"op": op, "Y": Y, "net": net, "X": X, "sequence": seq, "staircase": st, "lr": lr, "steps": steps, "W0": W0}


def _runs(name: str, prob: dict, P: SaddlesParams, ctx):
    """The real network's GD (and the NQF's with ``nqf_runs``) from the same ``W0``, checkpointed."""
    from ...dynamics import simulate, train_network

    op, Y, net, X, W0, lr, steps = (prob[k] for k in ("op", "Y", "net", "X", "W0", "lr", "steps"))
    save = max(steps // P.save_points, 1)
    real = ctx.checkpoint(
        f"{name}-real",
        lambda: to_cpu(
            train_network(
                net, net.units, X, Y, W0=W0, optimizer=GD(lr), save=Save(every=save, M=False, W=False), steps=steps
            )
        ),
    )
    if not P.nqf_runs:
        return real, None
    sim = ctx.checkpoint(
        f"{name}-nqf",
        lambda: to_cpu(simulate(op, Y, M0=W0 @ W0.T, optimizer=GD(lr), save=Save(every=save, M=False), steps=steps)),
    )
    return real, sim


def saddle_checks(name: str, st, cmp, P: SaddlesParams, L_nqf=None) -> tuple[list, list, list]:
    """Checks of one problem from pure data: the staircase, its comparison with the real network, the settings.

    Returns ``(checks, table rows, unresolved plateaus)``.  A time by the leading-order rule is judged
    with the absolute bound ``Σ_{i<k} c/r_i`` on its unknown ``O(1)`` offset, every other rule with the
    relative GD-vs-flow tolerance ``2 · step_fraction``; a plateau is judged only where the real network
    rests on it (:attr:`StaircaseComparison.flat`).
    """
    checks, rows, unresolved = [], [], []
    for k in range(1, st.n_drops + 1):
        rule = st.time_rules[k - 1]
        exact = rule != "leading order"
        bound = float(sum(P.offset_constant / st.rates[i] for i in range(k)))
        origin = {
            "exact offset": "GD vs flow O(η ζ) (exact O(1) offset)",
            "O(1) recursion": "GD vs flow O(η ζ) (O(1) offset from the small-part recursion, "
            "SaddleSequence.corrected_escape_times)",
        }.get(rule, f"leading order τ_k ln(1/ε): O(1) offset ≤ Σ_(i<k) {P.offset_constant:g}/r_i = {bound:.3g}")
        c_t = Check(
            f"{name}: escape into plateau {k} (rank {int(st.ranks[k])})",
            float(cmp.times_predicted[k - 1]),
            float(cmp.times_measured[k - 1]),
            2 * P.step_fraction if exact else bound,
            kind="relative" if exact else "absolute",
            reference="real network: loss halfway from L_{k−1} to L_k",
            tolerance_origin=origin,
        )
        flat = bool(cmp.flat[k])
        if not flat:
            unresolved.append(k)
        c_l = Check(
            f"{name}: plateau L_{k} (rank {int(st.ranks[k])})",
            float(st.levels[k]),
            float(cmp.levels_measured[k]),
            P.plateau_tolerance * float(cmp.adjacent_drops[k]) if flat else None,
            kind="absolute",
            reference="real network's loss midway between the predicted escapes (the last: at the end of the run)",
            tolerance_origin=(
                f"`plateau_tolerance` × the adjacent drop ({cmp.adjacent_drops[k]:.3g}): the scale on which "
                "flatness is judged (a plateau called flat may still move by flat_threshold of it)"
            ),
            reason=""
            if flat
            else (
                f"not resolved: across the plateau's middle third the network's loss changes by "
                f"{cmp.flatness[k]:.2f} of the adjacent drop (> {cmp.flat_threshold:g}: too short at this ε, "
                "or still relaxing)"
            ),
        )
        checks += [c_t, c_l]
        rows.append(
            [
                name,
                k,
                int(st.ranks[k]),
                float(st.levels[k]),
                float(cmp.levels_measured[k]),
                None if L_nqf is None else float(L_nqf[k]),
                "yes" if flat else "no (not judged)",
                c_l.passed,
                float(cmp.times_predicted[k - 1]),
                rule,
                float(cmp.times_measured[k - 1]),
                c_t.passed,
            ]
        )
    return checks, rows, unresolved


def _plot(ax, title: str, a: dict, P: SaddlesParams) -> None:
    """The real network's (and the NQF's) loss with the predicted levels and escape times marked."""
    t, levels, times = a["t"], a["plateau_levels"], a["escape_times"]
    ax.semilogy(t, a["loss_real"], lw=2.2, label="real network")
    if "loss_nqf" in a:
        ax.semilogy(a["t_nqf"], a["loss_nqf"], "--", lw=1.4, label="NQF (order parameter)")
    for k, L in enumerate(levels):
        if L > 0:
            ax.axhline(L, color="0.6", lw=0.7, zorder=0)
            ax.text(
                1.005, L, f"L{k}", fontsize=7, color="0.35", va="center", ha="left", transform=ax.get_yaxis_transform()
            )
    ax.plot([], [], color="0.6", lw=0.7, label="predicted plateaus L_k")
    mark_times(ax, times, [f"t{k + 1}" for k in range(len(times))])
    ax.plot([], [], color="C3", ls="--", lw=0.9, label="predicted escapes t_k")
    mark_stop_at(ax, t[-1], a["loss_real"], bool(a["stopped"]), label="network stopped")
    ax.set_title(title, fontsize=9, pad=14)
    ax.set_xlabel("training time t = η·steps (dimensionless)")
    ax.set_ylabel("loss L")
    ax.legend(fontsize=7, loc="lower left")
