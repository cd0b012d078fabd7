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

from ...dynamics import GD, Save
from ...errors import InvalidParameterError
from ...reductions import crossing_time
from .._report import mark_times, new_figure
from ._base import Check, EpsList, Experiment, Outcome, Params, Table
from ._catalog import CATALOG, register
from ._common import mark_stop_at, mark_unfinished, stop_reason, to_cpu

__all__ = ["LVStaircase", "diagonal_task", "lv_checks"]


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

    def plot(self, arrays: dict, params: LVStaircaseParams) -> dict:
        return {"staircases": _staircases_figure(arrays, params), "switch_times_vs_log_eps": _slopes_figure(arrays)}

    def run(self, params: LVStaircaseParams, ctx, out: Outcome) -> None:
        from ...structure import matrix_sensing

        P = params
        K = P.n_modes
        z_star = _z_star(P)
        X, y = diagonal_task(P.n_samples, z_star, ctx.generator(3))
        op = matrix_sensing(X)
        lr = P.step_fraction / (4 * float(z_star.max()))
        reasons, rows, t_meas_all, t_pred_all = [], [], [], []
        for e in ctx.progress(P.eps, "ε"):
            system, t_pred = _predict(op, y, e, K)  # prediction: the exact logistic solution of the LV system
            run = _run(ctx, op, y, e, K, lr, P, t_pred)
            meas = _measure(system, run)
            order = np.argsort(-system.zeta.numpy())
            reasons.append(stop_reason(**{f"GD at ε = {e:g}": run}))
            rows += _rows(e, system.zeta.numpy(), t_pred, meas["t_meas"], order)
            t_meas_all.append(meas["t_meas"][order])
            t_pred_all.append(t_pred[order])
            out.arrays.update(
                {
                    f"eps_{e:g}_t": meas["t"],
                    f"eps_{e:g}_loss": run.loss.numpy(),
                    f"eps_{e:g}_loss_lv": meas["loss_lv"],
                    f"eps_{e:g}_z": meas["z"],
                    f"eps_{e:g}_stopped": np.array(reasons[-1] != ""),
                }
            )
        logs = np.log(1 / np.asarray(P.eps))
        tm, tp = np.array(t_meas_all), np.array(t_pred_all)
        zeta_sorted = np.sort(4 * z_star)[::-1]
        fit = _fit_slopes(logs, tm, zeta_sorted)
        reason = "; ".join(r for r in reasons if r)
        out.checks.extend(lv_checks(P, z_star, system.zeta.numpy(), t_pred, meas["t_meas"], fit["slope"], reason))
        for j in range(K):
            out.metrics[f"mode_{j + 1}_slope_measured"] = float(fit["slope"][j])
            out.metrics[f"mode_{j + 1}_intercept_measured"] = float(fit["intercept"][j])
            out.metrics[f"mode_{j + 1}_slope_predicted"] = 1 / zeta_sorted[j]
        out.tables.append(
            Table(
                "Switch-on times",
                ["ε", "mode", "ζ_k", "predicted (exact logistic)", "ln(1/ε)/ζ_k", "measured (GD)", "rel. error"],
                rows,
                caption=f"η = {lr:.3g}; measured: z_k reaches z*_k/2",
            )
        )
        out.arrays.update({"log_inv_eps": logs, "switch_measured": tm, "switch_predicted": tp, "zeta": zeta_sorted})
        out.arrays.update({"slope_measured": fit["slope"], "intercept_at_predicted_slope": fit["intercept_at_slope"]})
        measured = ", ".join(f"{out.metrics[f'mode_{j + 1}_slope_measured']:.3g}" for j in range(K))
        predicted = ", ".join(f"{1 / v:.3g}" for v in zeta_sorted)
        out.summary.append(
            f"{K} modes, ζ = {', '.join(f'{v:.3g}' for v in zeta_sorted)}; slopes of switch-on time "
            f"vs ln(1/ε): measured {measured} against 1/ζ = {predicted}"
        )


def _z_star(P: LVStaircaseParams) -> np.ndarray:
    """The teacher ``z*_k = z*_1 r^{k−1}``."""
    return P.z_first * P.ratio ** np.arange(P.n_modes)


def _predict(op, y, e: float, K: int):
    """The LV reduction from ``M(0) = εI`` and its exact logistic switch-on times."""
    from ...reductions import lv

    system = lv.reduce(op, y, e * torch.eye(K, dtype=torch.float64))
    return system, system.logistic_switch_times().numpy()


def _run(ctx, op, y, e: float, K: int, lr: float, P: LVStaircaseParams, t_pred: np.ndarray):
    """The full order-parameter GD from ``M(0) = εI`` to `horizon` × the last predicted switch-on, checkpointed."""
    from ...dynamics import simulate

    t_end = P.horizon * float(np.max(t_pred[np.isfinite(t_pred)]))
    steps = int(math.ceil(t_end / lr))
    save = max(steps // P.save_points, 1)
    return ctx.checkpoint(
        f"eps_{e:g}",
        lambda: to_cpu(
            simulate(
                op, y, M0=e * torch.eye(K, dtype=torch.float64), optimizer=GD(lr), save=Save(every=save), steps=steps
            )
        ),
    )


def _measure(system, run) -> dict:
    """Mode occupations ``z_k = u_kᵀ M u_k`` of the GD run, their half-way crossings, the LV loss on its times."""
    t = run.t.numpy()
    assert system.basis is not None  # lv.reduce always records the basis of the K modes
    B = system.basis.to(torch.float64)
    z = torch.einsum("pk,tpq,qk->tk", B, run.M, B).numpy()
    zf = system.final_state().numpy()
    t_meas = np.array([crossing_time(t, z[:, k], zf[k] / 2) for k in range(system.K)])
    return {"t": t, "z": z, "t_meas": t_meas, "loss_lv": system.loss(system.logistic(t)).numpy()}


def _rows(e: float, zeta: np.ndarray, t_pred: np.ndarray, t_meas: np.ndarray, order) -> list:
    """Table rows of one ε, fastest mode first."""
    return [
        [
            e,
            int(k) + 1,
            float(zeta[k]),
            t_pred[k],
            math.log(1 / e) / float(zeta[k]),
            t_meas[k],
            abs(t_meas[k] - t_pred[k]) / t_pred[k],
        ]
        for k in order
    ]


def _fit_slopes(logs: np.ndarray, tm: np.ndarray, zeta_sorted: np.ndarray) -> dict:
    """Per mode: least-squares slope and intercept of ``t_k`` against ``ln(1/ε)``; the intercept at slope 1/ζ_k."""
    fits = [np.polyfit(logs, tm[:, j], 1) for j in range(tm.shape[1])]
    return {
        "slope": np.array([float(f[0]) for f in fits]),
        "intercept": np.array([float(f[1]) for f in fits]),
        "intercept_at_slope": np.array([float(np.mean(tm[:, j] - logs / zeta_sorted[j])) for j in range(tm.shape[1])]),
    }


def lv_checks(P: LVStaircaseParams, z_star, zeta, t_pred, t_meas, slopes, reason: str = "") -> list[Check]:
    """Checks from pure data: at the smallest ε the LV times vs the closed form and vs GD; the fitted slopes.

    ``zeta``, ``t_pred``, ``t_meas``: per mode (the reduction's order) at ``P.eps[-1]``; ``slopes``: fastest
    mode first.  ``reason`` (non-empty when a run did not finish) fails every check with it.
    """
    e, K = P.eps[-1], len(zeta)
    tol = P.time_tolerance * P.step_fraction
    origin = f"GD vs flow: relative O(η ζ) = {P.time_tolerance:g} × step_fraction"
    order = np.argsort(-zeta)
    # independent closed form: C = I and β = z*, so ζ_k = 4 z*_k and t_k = ln(z*_k/ε − 1)/ζ_k
    t_closed = np.log(z_star / e - 1.0) / (4 * z_star)
    closed = {int(np.argmin(np.abs(float(zeta[k]) / 4 - z_star))): k for k in range(K)}
    name = [f"t_{j + 1} at ε = {e:g} (ζ = {float(zeta[k]):.3g})" for j, k in enumerate(order)]
    checks = [
        Check(
            f"{name[j]}: LV vs closed form",
            float(t_pred[k]),
            float(t_closed[[c for c, kk in closed.items() if kk == k][0]]),
            1e-9,
            reference="closed form ln(z*/ε − 1)/(4z*) computed in the experiment",
            tolerance_origin="round-off",
        )
        for j, k in enumerate(order)
    ]
    checks += [
        Check(
            f"{name[j]}: LV vs GD",
            float(t_pred[k]),
            float(t_meas[k]),
            tol,
            reference="full order-parameter GD (simulate): z_k reaches z*_k/2",
            tolerance_origin=origin,
        )
        for j, k in enumerate(order)
    ]
    zeta_sorted = np.sort(4 * z_star)[::-1]
    checks += [
        Check(
            f"slope of t_{j + 1} vs ln(1/ε) (ζ = {zeta_sorted[j]:.3g})",
            1 / zeta_sorted[j],
            float(slopes[j]),
            tol,
            reference="least-squares slope (with intercept) of GD switch-on times over ε",
            tolerance_origin=origin,
        )
        for j in range(K)
    ]
    mark_unfinished(checks, reason)
    return checks


def _staircases_figure(a: dict, P: LVStaircaseParams):
    """GD and exact logistic losses for every ε, the predicted switch-on times marked."""
    fig, ax = new_figure(figsize=(8.0, 4.6))
    for i, e in enumerate(P.eps):
        t, loss = a[f"eps_{e:g}_t"], a[f"eps_{e:g}_loss"]
        (line,) = ax.semilogy(t, loss, lw=2, label=f"ε = {e:g}: order-parameter GD")
        ax.semilogy(t, a[f"eps_{e:g}_loss_lv"], ":", color="k", lw=1, label="exact logistic (LV)" if i == 0 else None)
        mark_times(ax, a["switch_predicted"][i], None, color=line.get_color())
        stopped = bool(a[f"eps_{e:g}_stopped"])
        mark_stop_at(ax, t[-1], loss, stopped, color=line.get_color(), label=f"ε = {e:g}: run stopped")
    ax.set_xlabel("training time t = η·steps (dimensionless)")
    ax.set_ylabel("loss L")
    ax.set_title("LV staircases (dashed verticals: predicted t_k)", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    return fig


def _slopes_figure(a: dict):
    """Switch-on times against ln(1/ε) with lines of the predicted slopes 1/ζ_k (fitted intercepts)."""
    fig, ax = new_figure(figsize=(7.0, 4.6))
    logs, tm, zeta = a["log_inv_eps"], a["switch_measured"], a["zeta"]
    grid = np.linspace(logs.min() * 0.9, logs.max() * 1.05, 50)
    for j in range(tm.shape[1]):
        b = a["intercept_at_predicted_slope"][j]
        (line,) = ax.plot(logs, tm[:, j], "o", label=f"mode {j + 1}: GD (fit slope {a['slope_measured'][j]:.3g})")
        ax.plot(
            grid,
            grid / zeta[j] + b,
            "-",
            color=line.get_color(),
            lw=1,
            label=f"slope 1/ζ = {1 / zeta[j]:.3g}, intercept {b:.2g}",
        )
    ax.set_xlabel("ln(1/ε)")
    ax.set_ylabel("switch-on time t_k = η·steps")
    ax.set_title("switch-on times vs ln(1/ε): lines of slope 1/ζ_k, fitted intercepts", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    return fig
