"""Lotka–Volterra staircases: switch-on times grow like ln(1/ε) with slopes 1/ζ_k.

Commuting data: matrix sensing with diagonal measurements ``X_n = diag(a_n)``,
``a_n ∈ R^K`` with orthogonal feature columns, so that the structure matrices
commute and ``C = (1/N) Σ a_n a_nᵀ`` is diagonal (the feature-wise regime of
docs/theory.md §4.2). The teacher ``y_n = a_nᵀ z*`` has ``z*_k = z*_1 r^{k−1}``,
so the growth rates ``ζ_k = 4 β_k = 4 C_kk z*_k`` are distinct. From
``M(0) = εI`` the full order-parameter GD (:func:`nqf.dynamics.simulate`) is
compared with the exact logistic solution of the reduced LV system
(:func:`nqf.reductions.lv.reduce`): staircases for several ε with the predicted switch-on
times marked, and switch-on time against ``ln(1/ε)`` with the predicted slopes
``1/ζ_k``.  Measured switch-on: first time ``z_k = u_kᵀ M u_k`` reaches ``z*_k/2``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field, model_validator

from ..errors import InvalidParameterError
from ..report.figures import mark_times, new_figure
from .base import Check, EpsList, Experiment, Outcome, Params, Table, register
from .catalog import CATALOG
from .curves import crossing_time, mark_stop, mark_unfinished, stop_reason, to_cpu

__all__ = ["LVStaircase", "diagonal_task"]


class LVStaircaseParams(Params):
    n_modes: int = Field(4, ge=1, le=64)
    n_samples: int = Field(64, ge=1)
    z_first: float = Field(1.0, gt=0, description="z*_1")
    ratio: float = Field(0.5, gt=0, lt=1, description="z*_{k+1} / z*_k")
    eps: EpsList = Field([1e-4, 1e-8, 1e-12, 1e-16], min_length=2)
    step_fraction: float = Field(0.04, gt=0, le=0.25, description="η · ζ_max per GD step")
    horizon: float = Field(1.4, gt=1, description="run to this multiple of the last predicted switch-on time")
    save_points: int = Field(400, ge=10)
    time_tolerance: float = Field(
        1.0,
        gt=0,
        description="c: relative tolerance c · `step_fraction` (GD vs flow: the rate per step is off by O(η ζ))",
    )

    @model_validator(mode="after")
    def _sizes(self):
        if self.n_samples < self.n_modes:
            raise InvalidParameterError(
                f"`n_samples` = {self.n_samples} must be ≥ `n_modes` = {self.n_modes} for orthogonal features"
            )
        if self.time_tolerance * self.step_fraction >= 0.5:
            raise InvalidParameterError(
                f"`time_tolerance` · `step_fraction` = {self.time_tolerance * self.step_fraction:g} "
                "must be < 0.5 for the checks to mean anything"
            )
        return self


def diagonal_task(n_samples: int, z_star: np.ndarray, gen: torch.Generator):
    """Diagonal measurements with orthogonal features (``C = I``) and a teacher ``y = a·z*``.

    Returns
    -------
    X : torch.Tensor, shape (N, K, K), ``X_n = diag(a_n)``
    y : torch.Tensor, shape (N,)
    """
    K = len(z_star)
    if n_samples < K:
        raise InvalidParameterError(f"`n_samples` must be ≥ `n_modes` = {K} for orthogonal features; found {n_samples}")
    Q, _ = torch.linalg.qr(torch.randn(n_samples, K, dtype=torch.float64, generator=gen))
    a = math.sqrt(n_samples) * Q  # (1/N) aᵀa = I
    X = torch.diag_embed(a)
    return X, a @ torch.as_tensor(z_star, dtype=torch.float64)


@register
class LVStaircase(Experiment):
    name = "lv-staircase"
    description = CATALOG[name].description
    reproduces = (
        "Theorems 4–7: with commuting data the dynamics are Lotka–Volterra; modes switch on at "
        "t_k ≈ ln(1/ε)/ζ_k, so the plateaus lengthen like ln(1/ε)"
    )
    Params = LVStaircaseParams
    tiny = {"n_modes": 3, "n_samples": 8, "eps": [1e-3, 1e-6], "step_fraction": 0.05, "save_points": 40}
    checks = (
        "exact logistic switch-on times of nqf.reductions.lv.reduce vs the closed form t_k = ln(z*_k/ε − 1)/ζ_k "
        "(ζ_k = 4z*_k, written out in the experiment); tolerance 1e-9 (round-off)",
        "switch-on time t_k at the smallest ε: LV prediction vs full order-parameter GD (independent "
        "integration); relative tolerance `time_tolerance` · `step_fraction` (GD vs flow, O(η ζ))",
        "slope of t_k against ln(1/ε), fitted with an intercept on the GD runs, vs 1/ζ_k; relative "
        "tolerance `time_tolerance` · `step_fraction` (same origin)",
    )

    def run(self, params: LVStaircaseParams, ctx, out: Outcome) -> None:
        from ..dynamics import simulate
        from ..reductions import lv
        from ..structure import matrix_sensing

        P = params
        K = P.n_modes
        z_star = P.z_first * P.ratio ** np.arange(K)
        X, y = diagonal_task(P.n_samples, z_star, ctx.generator(3))
        op = matrix_sensing(X)
        zeta_max = 4 * float(z_star.max())
        lr = P.step_fraction / zeta_max
        fig, ax = new_figure(figsize=(8.0, 4.6))
        fig2, ax2 = new_figure(figsize=(7.0, 4.6))
        tol = P.time_tolerance * P.step_fraction
        origin = f"GD vs flow: relative O(η ζ) = {P.time_tolerance:g} × step_fraction"
        reasons = []
        rows, t_meas_all, t_pred_all = [], [], []
        for i, e in enumerate(ctx.progress(P.eps, "ε")):
            system = lv.reduce(op, y, e * torch.eye(K, dtype=torch.float64))
            t_pred = system.logistic_switch_times().numpy()
            order = np.argsort(-system.zeta.numpy())
            t_end = P.horizon * float(np.max(t_pred[np.isfinite(t_pred)]))
            steps = int(math.ceil(t_end / lr))
            save = max(steps // P.save_points, 1)
            run = ctx.checkpoint(
                f"eps_{e:g}",
                lambda e=e, steps=steps, save=save: to_cpu(
                    simulate(op, y, M0=e * torch.eye(K, dtype=torch.float64), lr=lr, steps=steps, save_every=save)
                ),
            )
            t = run.t.numpy()
            assert system.basis is not None  # lv.reduce always records the basis of the K modes
            B = system.basis.to(torch.float64)
            z = torch.einsum("pk,tpq,qk->tk", B, run.M, B).numpy()
            zf = system.final_state().numpy()
            t_meas = np.array([crossing_time(t, z[:, k], zf[k] / 2) for k in range(K)])
            z_pred = system.logistic(t)
            L_pred = system.loss(z_pred).numpy()
            reasons.append(stop_reason(**{f"GD at ε = {e:g}": run}))
            (line,) = ax.semilogy(t, run.loss.numpy(), lw=2, label=f"ε = {e:g}: order-parameter GD")
            ax.semilogy(t, L_pred, ":", color="k", lw=1, label="exact logistic (LV)" if i == 0 else None)
            mark_times(ax, t_pred, None, color=line.get_color())
            mark_stop(ax, run, color=line.get_color(), label=f"ε = {e:g}: run stopped")
            for k in order:
                rows.append(
                    [
                        e,
                        int(k) + 1,
                        float(system.zeta[k]),
                        t_pred[k],
                        math.log(1 / e) / float(system.zeta[k]),
                        t_meas[k],
                        abs(t_meas[k] - t_pred[k]) / t_pred[k],
                    ]
                )
            t_meas_all.append(t_meas[order])
            t_pred_all.append(t_pred[order])
            out.arrays.update(
                {
                    f"eps_{e:g}_t": t,
                    f"eps_{e:g}_loss": run.loss.numpy(),
                    f"eps_{e:g}_loss_lv": L_pred,
                    f"eps_{e:g}_z": z,
                }
            )
            if i == len(P.eps) - 1:
                # independent closed form: C = I and β = z*, so ζ_k = 4 z*_k and t_k = ln(z*_k/ε − 1)/ζ_k
                t_closed = np.log(z_star / e - 1.0) / (4 * z_star)
                closed = {int(np.argmin(np.abs(float(system.zeta[k]) / 4 - z_star))): k for k in range(K)}
                for j, k in enumerate(order):
                    out.checks.append(
                        Check(
                            f"t_{j + 1} at ε = {e:g} (ζ = {float(system.zeta[k]):.3g}): LV vs closed form",
                            float(t_pred[k]),
                            float(t_closed[[c for c, kk in closed.items() if kk == k][0]]),
                            1e-9,
                            reference="closed form ln(z*/ε − 1)/(4z*) computed in the experiment",
                            tolerance_origin="round-off",
                        )
                    )
                for j, k in enumerate(order):
                    out.checks.append(
                        Check(
                            f"t_{j + 1} at ε = {e:g} (ζ = {float(system.zeta[k]):.3g}): LV vs GD",
                            float(t_pred[k]),
                            float(t_meas[k]),
                            tol,
                            reference="full order-parameter GD (simulate): z_k reaches z*_k/2",
                            tolerance_origin=origin,
                        )
                    )
        ax.set_xlabel("training time t = η·steps (dimensionless)")
        ax.set_ylabel("loss L")
        ax.set_title("LV staircases (dashed verticals: predicted t_k)", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
        out.figures["staircases"] = fig
        logs = np.log(1 / np.asarray(P.eps))
        tm, tp = np.array(t_meas_all), np.array(t_pred_all)
        grid = np.linspace(logs.min() * 0.9, logs.max() * 1.05, 50)
        zeta_sorted = np.sort(4 * z_star)[::-1]
        for j in range(K):
            slope, icpt = (float(v) for v in np.polyfit(logs, tm[:, j], 1))
            b = float(np.mean(tm[:, j] - logs / zeta_sorted[j]))  # intercept with the predicted slope
            (line,) = ax2.plot(logs, tm[:, j], "o", label=f"mode {j + 1}: GD (fit slope {slope:.3g})")
            ax2.plot(
                grid,
                grid / zeta_sorted[j] + b,
                "-",
                color=line.get_color(),
                lw=1,
                label=f"slope 1/ζ = {1 / zeta_sorted[j]:.3g}, intercept {b:.2g}",
            )
            out.metrics[f"mode_{j + 1}_slope_measured"] = slope
            out.metrics[f"mode_{j + 1}_intercept_measured"] = icpt
            out.metrics[f"mode_{j + 1}_slope_predicted"] = 1 / zeta_sorted[j]
            out.checks.append(
                Check(
                    f"slope of t_{j + 1} vs ln(1/ε) (ζ = {zeta_sorted[j]:.3g})",
                    1 / zeta_sorted[j],
                    slope,
                    tol,
                    reference="least-squares slope (with intercept) of GD switch-on times over ε",
                    tolerance_origin=origin,
                )
            )
        ax2.set_xlabel("ln(1/ε)")
        ax2.set_ylabel("switch-on time t_k = η·steps")
        ax2.set_title("switch-on times vs ln(1/ε): lines of slope 1/ζ_k, fitted intercepts", fontsize=10)
        ax2.legend(fontsize=7, loc="upper left")
        out.figures["switch_times_vs_log_eps"] = fig2
        mark_unfinished(out.checks, "; ".join(r for r in reasons if r), start=-2 * K - K)
        out.tables.append(
            Table(
                "Switch-on times",
                ["ε", "mode", "ζ_k", "predicted (exact logistic)", "ln(1/ε)/ζ_k", "measured (GD)", "rel. error"],
                rows,
                caption=f"η = {lr:.3g}; measured: z_k reaches z*_k/2",
            )
        )
        out.arrays.update({"log_inv_eps": logs, "switch_measured": tm, "switch_predicted": tp})
        measured = ", ".join(f"{out.metrics[f'mode_{j + 1}_slope_measured']:.3g}" for j in range(K))
        predicted = ", ".join(f"{1 / v:.3g}" for v in zeta_sorted)
        out.summary.append(
            f"{K} modes, ζ = {', '.join(f'{v:.3g}' for v in zeta_sorted)}; slopes of switch-on time "
            f"vs ln(1/ε): measured {measured} against 1/ζ = {predicted}"
        )
