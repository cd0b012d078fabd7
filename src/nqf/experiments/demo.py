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

from ..analysis.compare import compare_staircase, level_read_times
from ..errors import InvalidParameterError
from ..report.figures import mark_times, new_figure
from .base import Check, Experiment, Outcome, Params, Table, register
from .catalog import CATALOG
from .curves import crossing_time, initial_weights, mark_stop, mark_unfinished, stop_reason, to_cpu

__all__ = ["Demo", "teacher_task"]


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

    def run(self, params: DemoParams, ctx, out: Outcome) -> None:
        from ..dynamics import simulate, train_network
        from ..networks import TwoLayerMLP
        from ..reductions.svd_modes import two_layer_modes
        from ..structure import mlp

        P = params
        dev = ctx.device
        X, Y, _ = teacher_task(P.n_samples, P.in_features, P.singular_values, ctx.seed)
        C, D = Y.shape[1], X.shape[1]
        p = C + D
        steps = int(round(P.t_max / P.lr))
        modes = two_layer_modes(X, Y, "tanh", eps=P.eps, init="isotropic")
        # W0 = √ε Q with orthonormal rows: M(0) = εI and every unit starts non-zero
        W0 = initial_weights(p, P.width, P.eps, ctx.generator(1))
        X, Y, W0 = X.to(dev), Y.to(dev), W0.to(dev)

        net = TwoLayerMLP(D, P.width, C, "tanh").to(dev)
        op = mlp(X, "tanh", n_outputs=C)
        for part in ctx.progress(["real network", "NQF"], "GD runs"):
            if part == "real network":
                real = ctx.checkpoint(
                    "real_network",
                    lambda: to_cpu(
                        train_network(
                            net, net.units, X, Y, W0=W0, lr=P.lr, steps=steps, save_every=P.save_every, save_W=False
                        )
                    ),
                )
            else:
                nqf_run = ctx.checkpoint(
                    "nqf_order_parameter",
                    lambda: to_cpu(simulate(op, Y, M0=W0 @ W0.T, lr=P.lr, steps=steps, save_every=P.save_every)),
                )

        t = real.t.numpy()
        U, V = modes.left, modes.right
        lam = modes.singular_values.numpy()
        strength_real = torch.einsum("ck,tcd,dk->tk", U, real.M[:, :C, C:], V).numpy()  # σ'(0) = 1
        strength_pred = modes.strength(t).numpy()
        t_pred = modes.switch_times.numpy()
        t_lead = modes.switch_times_leading.numpy()
        t_meas = np.array([crossing_time(t, strength_real[:, k], lam[k] / 2) for k in range(len(lam))])
        strength_nqf = torch.einsum("ck,tcd,dk->tk", U, nqf_run.M[:, :C, C:], V).numpy()
        t_nqf = np.array([crossing_time(nqf_run.t.numpy(), strength_nqf[:, k], lam[k] / 2) for k in range(len(lam))])
        loss_real = real.loss.numpy()
        st = modes.staircase()  # the prediction; levels judged by the one judge of a staircase
        L_pred, L_meas = st.levels, compare_staircase(t, loss_real, st).levels_measured
        t_meas_plateau = level_read_times(float(t[-1]), st.times)
        K = len(lam)
        tol_t = P.time_tolerance / math.log(1 / P.eps)
        for k in range(K):
            out.checks.append(
                Check(
                    f"switch-on time t_{k + 1}",
                    float(t_pred[k]),
                    float(t_meas[k]),
                    tol_t,
                    reference="real tanh network: mode strength reaches λ_k/2",
                    tolerance_origin=f"theory's O(1/ln(1/ε)) error: {P.time_tolerance:g}/ln(1/ε)",
                )
            )
        for k in range(K + 1):
            if L_pred[k] > 1e-3 * L_pred[0]:
                out.checks.append(
                    Check(
                        f"plateau loss L_{k}",
                        float(L_pred[k]),
                        float(L_meas[k]),
                        P.plateau_tolerance,
                        reference="real tanh network's loss mid-plateau (nqf.analysis.compare.compare_staircase)",
                        tolerance_origin="tanh's cubic term at the learned weights (relative ≲ 0.1)",
                    )
                )
        mark_unfinished(out.checks, stop_reason(real_network=real, nqf=nqf_run))
        n = min(len(loss_real), len(nqf_run.loss))
        gap = float(np.max(np.abs(loss_real[:n] - nqf_run.loss.numpy()[:n])) / loss_real[0])
        out.metrics.update(
            {
                "eps": P.eps,
                "lr": P.lr,
                "steps": steps,
                "width": P.width,
                "max_loss_gap_real_vs_nqf_over_L0": gap,
                "whitening_error": modes.whitening_error,
            }
        )
        out.tables.append(
            Table(
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
        )
        out.tables.append(
            Table(
                "Plateau losses",
                ["after k modes", "predicted L_k", "measured", "measured at t"],
                [[k, L_pred[k], L_meas[k], t_meas_plateau[k]] for k in range(K + 1)],
            )
        )
        out.arrays.update(
            {
                "t": t,
                "loss_real": loss_real,
                "loss_nqf": nqf_run.loss.numpy(),
                "loss_predicted": modes.loss(t).numpy(),
                "strength_real": strength_real,
                "strength_predicted": strength_pred,
                "switch_times_predicted": t_pred,
                "switch_times_measured": t_meas,
                "plateau_predicted": L_pred,
                "plateau_measured": L_meas,
            }
        )
        out.summary.extend(
            [
                f"teacher singular values {', '.join(f'{v:g}' for v in lam)}; ε = {P.eps:g}, η = {P.lr:g}, "
                f"{steps} steps, real tanh MLP of width {P.width} (C = {C}, D = {D})",
                f"max |L_net − L_NQF| / L(0) = {gap:.2e} (order-parameter simulation, same steps)",
            ]
        )

        fig, (ax, ax2) = new_figure(2, figsize=(11, 4.2))
        ax.semilogy(t, loss_real, lw=2.2, label="real tanh MLP")
        ax.semilogy(nqf_run.t.numpy(), nqf_run.loss.numpy(), "--", lw=1.5, label="NQF (order parameter)")
        ax.semilogy(t, modes.loss(t).numpy(), ":", lw=1.5, color="k", label="mode reduction (theory)")
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
        mark_stop(ax, real, label="real network stopped")
        mark_stop(ax, nqf_run, color="C1", label="NQF run stopped")
        ax.set_ylim(bottom=max(float(loss_real.min()), 1e-5 * float(loss_real[0])) / 3)
        ax.set_xlabel("training time t = η·steps (dimensionless)")
        ax.set_ylabel("loss L (MSE, ½‖f − y‖²)")
        ax.set_title("staircase (dashed: predicted t_k; grey: plateaus L_k)", fontsize=10, pad=14)
        ax.legend(fontsize=8, loc="lower left")
        for k in range(K):
            (line,) = ax2.plot(t, strength_real[:, k] / lam[k], lw=2, label=f"mode {k + 1} (λ = {lam[k]:g}): network")
            ax2.plot(t, strength_pred[:, k] / lam[k], ":", color=line.get_color(), label=f"mode {k + 1}: theory")
        mark_times(ax2, t_pred, None)
        ax2.axhline(0.5, color="0.6", lw=0.6)
        ax2.set_xlabel("training time t = η·steps (dimensionless)")
        ax2.set_ylabel("mode strength p_k / λ_k")
        ax2.set_title("modes: real network (solid) vs theory (dotted)", fontsize=10, pad=14)
        ax2.legend(fontsize=7, loc="center right")
        out.figures["staircase"] = fig
