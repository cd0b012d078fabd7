"""The main job: a real tanh MLP learns in steps at the times the theory predicts.

A teacher ``y = T x`` with distinct singular values ``λ_1 > … > λ_K`` on exactly
whitened inputs is learned by a real two-layer tanh MLP (vector outputs) from
``M(0) = W0 W0ᵀ = εI`` (``W0 = √ε Q``, ``Q`` with orthonormal rows, so every unit
starts non-zero). Beside it run the NQF in order-parameter form (same data,
same GD steps) and the SVD mode reduction (:func:`nqf.reductions.svd_modes.two_layer_modes`),
which predicts switch-on (half-saturation) times ``t_k`` and plateau losses
``L_k = ½(E‖y‖² − Σ_{j≤k} λ_j²)``.

Measured switch-on time of mode ``k``: the first time the real network's mode
strength ``u_kᵀ σ'(0) M_au(t) v_k`` reaches ``λ_k/2`` (linear interpolation
between saved steps). Measured plateau after ``k`` modes: the network's loss at
``√(t_k t_{k+1})`` (after the last mode: at the end of the run).
Conventions: ``L = (1/N) Σ ½‖f − y‖²``, ``t = η · steps``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from ...curves import compare_staircase, level_read_times
from ...dynamics import GD, Save, initial_weights
from ...errors import InvalidParameterError
from ...reductions import crossing_time
from .._report import mark_times, new_figure
from ._base import Check, Experiment, Outcome, Params, Table
from ._catalog import CATALOG, register
from ._common import mark_stop_at, mark_unfinished, stop_reason, to_cpu

__all__ = ["Demo", "teacher_task", "demo_checks"]


class DemoParams(Params):
    n_samples: int = Field(512, ge=8, description="N, number of whitened inputs")
    in_features: int = Field(8, ge=1, description="D")
    singular_values: list[float] = Field(
        [2.0, 1.0, 0.5], min_length=1, description="teacher singular values (distinct, positive); C = their count"
    )
    width: int = Field(128, ge=1, description="hidden units m of the real network (≥ C + D)")
    eps: float = Field(1e-6, gt=0, lt=1, description="initial scale: M(0) = εI")
    lr: float = Field(5e-3, gt=0, description="GD step η")
    t_max: float = Field(24.0, gt=0, description="training time η·steps")
    save_every: int = Field(10, ge=1)
    time_tolerance: float = Field(
        0.5,
        gt=0,
        description="c: relative tolerance c/ln(1/ε) on switch-on times (the theory's O(1/ln(1/ε)) error order)",
    )
    plateau_tolerance: float = Field(0.1, gt=0, description="relative tolerance on plateau losses")

    @field_validator("singular_values")
    @classmethod
    def _distinct(cls, v):
        if any(s <= 0 for s in v) or len(set(v)) != len(v):
            raise InvalidParameterError("must be distinct positive numbers")
        return sorted(v, reverse=True)

    @model_validator(mode="after")
    def _sizes(self):
        C, D = len(self.singular_values), self.in_features
        if C > D:
            raise InvalidParameterError(f"`singular_values` has {C} values but `in_features` = {D}: at most D modes")
        if self.n_samples < D:
            raise InvalidParameterError(
                f"`n_samples` = {self.n_samples} must be ≥ `in_features` = {D} to whiten the inputs"
            )
        if self.width < C + D:
            raise InvalidParameterError(
                f"`width` = {self.width} must be ≥ C + D = {C + D} "
                "(C = len(`singular_values`), D = `in_features`) so that M(0) = εI"
            )
        if self.save_every * self.lr > 0.05 * self.t_max:
            raise InvalidParameterError(
                f"`save_every` · `lr` = {self.save_every * self.lr:g} must be ≤ 5% of "
                f"`t_max` = {self.t_max:g} to resolve the steps"
            )
        return self


def teacher_task(n_samples: int, in_features: int, singular_values, seed: int):
    """Exactly whitened inputs and a linear teacher with the given singular values.

    Returns
    -------
    X : torch.Tensor, shape (N, D), with ``XᵀX/N = I``
    Y : torch.Tensor, shape (N, C)
    T : torch.Tensor, shape (C, D), the teacher map
    """
    g = torch.Generator().manual_seed(seed)
    N, D, C = n_samples, in_features, len(singular_values)
    if N < D:
        raise InvalidParameterError(f"`n_samples` must be ≥ `in_features` to whiten; found {N} < {D}")
    if C > D:
        raise InvalidParameterError(f"at most `in_features` = {D} singular values; found {C}")
    Q, _ = torch.linalg.qr(torch.randn(N, D, dtype=torch.float64, generator=g))
    X = math.sqrt(N) * Q
    U, _ = torch.linalg.qr(torch.randn(C, C, dtype=torch.float64, generator=g))
    V, _ = torch.linalg.qr(torch.randn(D, C, dtype=torch.float64, generator=g))
    T = U @ torch.diag(torch.tensor(singular_values, dtype=torch.float64)) @ V.T
    return X, X @ T.T, T


@register
class Demo(Experiment):
    name = "demo"
    description = CATALOG[name].description
    reproduces = (
        "sudden learning: modes of the input–output correlation switch on one after another at "
        "t_k ≈ ln(1/ε)/ζ_k, with plateaus at the reduced-rank losses"
    )
    Params = DemoParams
    tiny = {
        "n_samples": 64,
        "in_features": 4,
        "singular_values": [2.0, 1.0],
        "width": 64,
        "lr": 1e-2,
        "t_max": 12.0,
        "eps": 1e-6,
        "save_every": 5,
    }
    checks = (
        "switch-on time t_k of every mode: predicted (SVD mode reduction, exact flow) vs the real tanh "
        "network's half-saturation time; relative tolerance c/ln(1/ε) (the theory's O(1/ln(1/ε)) error, "
        "c = `time_tolerance`)",
        "plateau loss L_k after k modes: reduced-rank loss ½(E‖y‖² − Σ_{j≤k} λ_j²) vs the real network's "
        "loss between switch-ons; relative tolerance `plateau_tolerance` (tanh's cubic term at learned "
        "weights, relative O(λ_k·E[x⁴]/D) ≲ 0.1)",
    )

    def plot(self, arrays: dict, params: DemoParams) -> dict:
        return {"staircase": _figure(arrays)}

    def run(self, params: DemoParams, ctx, out: Outcome) -> None:
        P = params
        prob = _problem(P, ctx)  # problem and prediction (the SVD mode reduction)
        real, nqf_run = _runs(prob, P, ctx)
        meas = _measure(prob, real, nqf_run)
        modes, st = prob["modes"], prob["staircase"]
        reason = stop_reason(real_network=real, nqf=nqf_run)
        out.checks.extend(demo_checks(modes.switch_times.numpy(), meas["t_meas"], st.levels, meas["L_meas"], P, reason))
        t, loss_real, loss_nqf = meas["t"], meas["loss_real"], meas["loss_nqf"]
        n = min(len(loss_real), len(loss_nqf))
        gap = float(np.max(np.abs(loss_real[:n] - loss_nqf[:n])) / loss_real[0])
        out.metrics.update(
            {
                "eps": P.eps,
                "lr": P.lr,
                "steps": prob["steps"],
                "width": P.width,
                "max_loss_gap_real_vs_nqf_over_L0": gap,
                "whitening_error": modes.whitening_error,
            }
        )
        out.tables.extend(_tables(modes, st, meas))
        out.arrays.update(
            {
                "t": t,
                "loss_real": loss_real,
                "loss_nqf": loss_nqf,
                "t_nqf": meas["t_nqf"],
                "loss_predicted": modes.loss(t).numpy(),
                "strength_real": meas["strength_real"],
                "strength_predicted": modes.strength(t).numpy(),
                "singular_values": modes.singular_values.numpy(),
                "switch_times_predicted": modes.switch_times.numpy(),
                "switch_times_measured": meas["t_meas"],
                "plateau_predicted": st.levels,
                "plateau_measured": meas["L_meas"],
                "real_stopped": np.array(stop_reason(run=real) != ""),
                "nqf_stopped": np.array(stop_reason(run=nqf_run) != ""),
            }
        )
        lam = modes.singular_values.numpy()
        C, D = prob["Y"].shape[1], prob["X"].shape[1]
        out.summary.extend(
            [
                f"teacher singular values {', '.join(f'{v:g}' for v in lam)}; ε = {P.eps:g}, η = {P.lr:g}, "
                f"{prob['steps']} steps, real tanh MLP of width {P.width} (C = {C}, D = {D})",
                f"max |L_net − L_NQF| / L(0) = {gap:.2e} (order-parameter simulation, same steps)",
            ]
        )


def _problem(P: DemoParams, ctx) -> dict:
    """Data, the mode reduction's prediction (and its staircase), the real network, its NQF, ``W0``."""
    from ...networks import TwoLayerMLP
    from ...reductions.svd_modes import two_layer_modes
    from ...structure import mlp

    dev = ctx.device
    X, Y, _ = teacher_task(P.n_samples, P.in_features, P.singular_values, ctx.seed)
    C, D = Y.shape[1], X.shape[1]
    modes = two_layer_modes(X, Y, "tanh", eps=P.eps, init="isotropic")
    # W0 = √ε Q with orthonormal rows: M(0) = εI and every unit starts non-zero
    W0 = initial_weights(C + D, P.width, P.eps, ctx.generator(1))
    X, Y, W0 = X.to(dev), Y.to(dev), W0.to(dev)
    return {
        "X": X,
        "Y": Y,
        "W0": W0,
        "modes": modes,
        "staircase": modes.staircase(),  # the prediction; levels judged by the one judge of a staircase
        "net": TwoLayerMLP(D, P.width, C, "tanh").to(dev),
        "op": mlp(X, "tanh", n_outputs=C),
        "steps": int(round(P.t_max / P.lr)),
    }


def _runs(prob: dict, P: DemoParams, ctx):
    """The real network's GD and the NQF's order-parameter GD from the same ``W0``, checkpointed."""
    from ...dynamics import simulate, train_network

    X, Y, W0, net, op, steps = (prob[k] for k in ("X", "Y", "W0", "net", "op", "steps"))
    for part in ctx.progress(["real network", "NQF"], "GD runs"):
        if part == "real network":
            real = ctx.checkpoint(
                "real_network",
                lambda: to_cpu(
                    train_network(
                        net,
                        net.units,
                        X,
                        Y,
                        W0=W0,
                        optimizer=GD(P.lr),
                        save=Save(every=P.save_every, W=False),
                        steps=steps,
                    )
                ),
            )
        else:
            nqf_run = ctx.checkpoint(
                "nqf_order_parameter",
                lambda: to_cpu(
                    simulate(op, Y, M0=W0 @ W0.T, optimizer=GD(P.lr), save=Save(every=P.save_every), steps=steps)
                ),
            )
    return real, nqf_run


def _strengths(modes, traj, C: int) -> np.ndarray:
    """Mode strengths ``u_kᵀ σ'(0) M_au(t) v_k`` of a trajectory, shape ``(T, K)`` (tanh: σ'(0) = 1)."""
    return torch.einsum("ck,tcd,dk->tk", modes.left, traj.M[:, :C, C:], modes.right).numpy()


def _measure(prob: dict, real, nqf_run) -> dict:
    """Switch-on times (half-saturation crossings of the mode strengths) and plateau levels (the one judge)."""
    modes, C = prob["modes"], prob["Y"].shape[1]
    lam = modes.singular_values.numpy()
    t, t_nqf = real.t.numpy(), nqf_run.t.numpy()
    strength_real, strength_nqf = _strengths(modes, real, C), _strengths(modes, nqf_run, C)
    loss_real = real.loss.numpy()
    return {
        "t": t,
        "t_nqf": t_nqf,
        "loss_real": loss_real,
        "loss_nqf": nqf_run.loss.numpy(),
        "strength_real": strength_real,
        "t_meas": np.array([crossing_time(t, strength_real[:, k], lam[k] / 2) for k in range(len(lam))]),
        "t_nqf_meas": np.array([crossing_time(t_nqf, strength_nqf[:, k], lam[k] / 2) for k in range(len(lam))]),
        "L_meas": compare_staircase(t, loss_real, prob["staircase"]).levels_measured,
        "t_meas_plateau": level_read_times(float(t[-1]), prob["staircase"].times),
    }


def demo_checks(t_pred, t_meas, L_pred, L_meas, P: DemoParams, reason: str = "") -> list[Check]:
    """Checks from pure data: predicted and measured switch-on times and plateau levels, the settings.

    ``reason`` (non-empty when a run did not finish) fails every check with it.
    """
    tol_t = P.time_tolerance / math.log(1 / P.eps)
    checks = [
        Check(
            f"switch-on time t_{k + 1}",
            float(t_pred[k]),
            float(t_meas[k]),
            tol_t,
            reference="real tanh network: mode strength reaches λ_k/2",
            tolerance_origin=f"theory's O(1/ln(1/ε)) error: {P.time_tolerance:g}/ln(1/ε)",
        )
        for k in range(len(t_pred))
    ]
    checks += [
        Check(
            f"plateau loss L_{k}",
            float(L_pred[k]),
            float(L_meas[k]),
            P.plateau_tolerance,
            reference="real tanh network's loss mid-plateau (nqf.curves.compare_staircase)",
            tolerance_origin="tanh's cubic term at the learned weights (relative ≲ 0.1)",
        )
        for k in range(len(L_pred))
        if L_pred[k] > 1e-3 * L_pred[0]
    ]
    mark_unfinished(checks, reason)
    return checks


def _tables(modes, st, meas: dict) -> list[Table]:
    """The switch-on times and plateau losses, predicted and measured."""
    lam, t_pred, t_lead = (v.numpy() for v in (modes.singular_values, modes.switch_times, modes.switch_times_leading))
    t_meas, t_nqf, L_meas = meas["t_meas"], meas["t_nqf_meas"], meas["L_meas"]
    K = len(lam)
    times = Table(
        "Switch-on times",
        [
            "mode k",
            "λ_k",
            "ζ_k",
            "predicted t_k (exact flow)",
            "ln(1/ε)/ζ_k",
            "measured (NQF simulation)",
            "measured (real net)",
            "rel. error (real)",
        ],
        [
            [
                k + 1,
                lam[k],
                float(modes.rates[k]),
                t_pred[k],
                t_lead[k],
                t_nqf[k],
                t_meas[k],
                abs(t_meas[k] - t_pred[k]) / t_pred[k],
            ]
            for k in range(K)
        ],
        caption="half-saturation: mode strength u_kᵀ σ'(0) M_au v_k reaches λ_k/2",
    )
    plateaus = Table(
        "Plateau losses",
        ["after k modes", "predicted L_k", "measured", "measured at t"],
        [[k, st.levels[k], L_meas[k], meas["t_meas_plateau"][k]] for k in range(K + 1)],
    )
    return [times, plateaus]


def _figure(a: dict):
    """The staircase (losses, predicted times and levels) and the mode strengths, from the saved arrays."""
    fig, (ax, ax2) = new_figure(2, figsize=(11, 4.2))
    _plot_losses(ax, a)
    _plot_strengths(ax2, a)
    return fig


def _plot_losses(ax, a: dict) -> None:
    """Real network, NQF and mode-reduction losses with the predicted switch-on times and plateaus."""
    t, loss_real, L_pred, t_pred = a["t"], a["loss_real"], a["plateau_predicted"], a["switch_times_predicted"]
    K = len(t_pred)
    ax.semilogy(t, loss_real, lw=2.2, label="real tanh MLP")
    ax.semilogy(a["t_nqf"], a["loss_nqf"], "--", lw=1.5, label="NQF (order parameter)")
    ax.semilogy(t, a["loss_predicted"], ":", lw=1.5, color="k", label="mode reduction (theory)")
    mark_times(ax, t_pred, [f"t{k + 1}" for k in range(K)])
    for Lk in L_pred[:-1]:
        ax.axhline(Lk, color="0.7", lw=0.6, zorder=0)
    for k in range(K):
        ax.text(
            1.005,
            L_pred[k],
            f"L{k}",
            fontsize=7,
            color="0.4",
            va="center",
            ha="left",
            transform=ax.get_yaxis_transform(),
        )
    mark_stop_at(ax, t[-1], loss_real, bool(a["real_stopped"]), label="real network stopped")
    mark_stop_at(ax, a["t_nqf"][-1], a["loss_nqf"], bool(a["nqf_stopped"]), color="C1", label="NQF run stopped")
    ax.set_ylim(bottom=max(float(loss_real.min()), 1e-5 * float(loss_real[0])) / 3)
    ax.set_xlabel("training time t = η·steps (dimensionless)")
    ax.set_ylabel("loss L (MSE, ½‖f − y‖²)")
    ax.set_title("staircase (dashed: predicted t_k; grey: plateaus L_k)", fontsize=10, pad=14)
    ax.legend(fontsize=8, loc="lower left")


def _plot_strengths(ax, a: dict) -> None:
    """Each mode's strength over λ_k: real network (solid) vs the mode reduction (dotted)."""
    t, lam, s_real, s_pred = a["t"], a["singular_values"], a["strength_real"], a["strength_predicted"]
    for k in range(len(lam)):
        (line,) = ax.plot(t, s_real[:, k] / lam[k], lw=2, label=f"mode {k + 1} (λ = {lam[k]:g}): network")
        ax.plot(t, s_pred[:, k] / lam[k], ":", color=line.get_color(), label=f"mode {k + 1}: theory")
    mark_times(ax, a["switch_times_predicted"], None)
    ax.axhline(0.5, color="0.6", lw=0.6)
    ax.set_xlabel("training time t = η·steps (dimensionless)")
    ax.set_ylabel("mode strength p_k / λ_k")
    ax.set_title("modes: real network (solid) vs theory (dotted)", fontsize=10, pad=14)
    ax.legend(fontsize=7, loc="center right")
