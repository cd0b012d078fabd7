"""Interacting modes: finite-ε Lotka–Volterra trajectories converge to the ε → 0 limit.

Correlated features ``a_n = g_n (I + ½ R)`` (``g_n``, ``R`` Gaussian) with a
sparse teacher plus noise give a Lotka–Volterra system with a full
interaction matrix ``C = (1/N) Σ a_n a_nᵀ`` (commuting data: diagonal
measurements ``X_n = diag(a_n)``, reduced by :func:`nqf.reductions.lv.reduce`). In log
coordinates ``s_k = ln z_k / ln(1/ε)`` and rescaled time ``τ = t / ln(1/ε)`` the
stiff log-coordinate flow (:meth:`nqf.reductions.lv.LotkaVolterra.flow`) at several ε is
compared with the exact ε → 0 active-set limit (:func:`nqf.reductions.lv.limit`), whose
events are switch-ons, switch-offs and modes that never switch on. The
difference of the switch-on times shrinks like ``1/ln(1/ε)``.
Measured switch-on: ``z_k`` reaches half its value on the plateau right after
the event.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib import colormaps
from pydantic import Field, model_validator

from ...errors import InvalidParameterError
from .._report import new_figure
from ._base import Check, EpsList, Experiment, Outcome, Params, Table
from ._catalog import CATALOG, register
from ._common import mark_stop_at, mark_unfinished, stop_reason

__all__ = ["InteractingModes", "correlated_task", "interacting_checks", "offset_bounds"]


def _flow(base, eps: float, t_end: float, n_points: int, levels: np.ndarray):
    """The LV flow from ``z(0) = ε`` and its first crossings of ``levels``, as a checkpoint holds them.

    The crossings are refined on the integrator's dense output here; the solution is returned without it
    (checkpoints hold arrays, never SciPy's interpolant objects), so a resumed run reads the same numbers.
    """
    sol = base.with_z0(np.full(base.K, eps)).flow(t_end, n_points=n_points)
    crossing = sol.crossing_times(levels)
    return sol.without_dense_output(), crossing


class InteractingParams(Params):
    n_modes: int = Field(6, ge=2, le=200)
    n_samples: int = Field(200, ge=2)
    noise: float = Field(0.3, ge=0)
    eps: EpsList = Field([1e-10, 1e-40, 1e-120, 1e-300], min_length=2)
    n_points: int = Field(1001, ge=50)
    offset_constant: float = Field(
        2.0, gt=0, description="c in the O(1) offset bound Σ (|ln(v/2)| + c)/r per event (see `checks`)"
    )

    @model_validator(mode="after")
    def _sizes(self):
        if self.n_samples < self.n_modes:
            raise InvalidParameterError(
                f"`n_samples` = {self.n_samples} must be ≥ `n_modes` = {self.n_modes} "
                "(a full-rank interaction matrix C)"
            )
        return self


def correlated_task(n_modes: int, n_samples: int, noise: float, seed: int):
    """Correlated diagonal measurements and a sparse teacher.

    Returns
    -------
    X : torch.Tensor, shape (N, K, K), ``X_n = diag(a_n)``
    y : torch.Tensor, shape (N,)
    """
    rng = np.random.default_rng(seed)
    K = n_modes
    a = rng.standard_normal((n_samples, K)) @ (np.eye(K) + 0.5 * rng.standard_normal((K, K)))
    w = np.zeros(K)
    n_on = max(1, (2 * K) // 3)
    w[:n_on] = np.linspace(1.0, 0.3, n_on)  # K = 6: (1, .77, .53, .3, 0, 0)
    y = a @ w + noise * rng.standard_normal(n_samples)
    return torch.diag_embed(torch.as_tensor(a)), torch.as_tensor(y)


@register
class InteractingModes(Experiment):
    name = "interacting-modes"
    description = CATALOG[name].description
    reproduces = (
        "beyond the paper: interacting modes switch on (and off) at rescaled times τ that the "
        "active-set limit predicts exactly as ε → 0, with corrections ∝ 1/ln(1/ε)"
    )
    Params = InteractingParams
    tiny = {"n_modes": 4, "n_samples": 40, "eps": [1e-10, 1e-40], "n_points": 200}
    checks = (
        "rescaled switch-on time τ of every switch-on event at the smallest ε: ε → 0 active-set limit "
        "(nqf.reductions.lv.limit, a combinatorial QP path) vs the stiff log-coordinate integration of the LV "
        "flow (independent integration); absolute tolerance B/ln(1/ε), the theory's O(1/ln(1/ε)) error with "
        "the O(1) time offset bounded by B = Σ_{events so far} (|ln(v/2)| + c)/r (v: the mode's plateau "
        "value, r: its growth rate d ln z/dt before the event, c = `offset_constant`)",
    )

    def plot(self, arrays: dict, params: InteractingParams) -> dict:
        return {"interacting_modes": _figure(arrays, params)}

    def run(self, params: InteractingParams, ctx, out: Outcome) -> None:
        P = params
        base, res = _problem(P, ctx.seed + 1)  # problem and prediction: the ε → 0 active-set limit
        ons = [e for e in res.events if e.kind == "on"]
        never = np.flatnonzero(np.isinf(res.switch_on_times().numpy()))
        bound = offset_bounds(res, P.offset_constant)
        levels = np.full(base.K, np.inf)
        for ev in ons:
            levels[ev.mode] = ev.value / 2
        reasons, rows, diffs, logs = [], [], [], []
        for e in ctx.progress(P.eps, "ε"):
            L = math.log(1 / e)
            sol, crossing = ctx.checkpoint(
                f"eps_{e:g}-flow",
                lambda e=e, L=L: _flow(base, e, float(res.path_tau[-1]) * L, P.n_points, levels),
            )
            reasons.append(stop_reason(**{f"LV flow at ε = {e:g}": sol}))
            d = np.array([crossing.numpy()[ev.mode] / L - ev.tau for ev in ons])  # measured τ − limit τ
            diffs.append(d)
            logs.append(L)
            rows += [[e, ev.mode + 1, ev.tau, ev.tau + dd, dd, dd * L] for ev, dd in zip(ons, d, strict=True)]
            out.arrays.update(
                {
                    f"eps_{e:g}_tau": sol.t.numpy() / L,
                    f"eps_{e:g}_s": sol.log_z.numpy() / L,
                    f"eps_{e:g}_loss": sol.loss.numpy(),
                    f"eps_{e:g}_stopped": np.array(reasons[-1] != ""),
                }
            )
        diffs, logs = np.array(diffs), np.array(logs)
        out.checks.extend(interacting_checks(ons, diffs, bound, logs, P, "; ".join(r for r in reasons if r)))
        out.metrics["offset_bounds"] = ", ".join(f"{b:.3g}" for b in bound)
        out.tables.extend(_tables(res, rows, never))
        scaled = np.abs(diffs) * logs[:, None]
        out.metrics.update(
            {
                "n_events": len(res.events),
                "n_off_events": res.kinds.count("off"),
                "n_never_on": int(len(never)),
                "max_scaled_difference_smallest_eps": float(scaled[-1].max()) if len(ons) else None,
            }
        )
        out.arrays.update({"eps": np.asarray(P.eps), "tau_differences": diffs, **_limit_arrays(res)})
        out.summary.append(
            f"{base.K} modes: {len(ons)} switch-ons, {res.kinds.count('off')} switch-offs, "
            f"{len(never)} never on; max |Δτ| = {np.abs(diffs).max(axis=1).round(4).tolist()} "
            f"for ε = {', '.join(f'{e:g}' for e in P.eps)}"
        )


def _problem(P: InteractingParams, seed: int):
    """The LV system of the correlated task (from ``z(0) = ε_0``) and its ε → 0 active-set limit."""
    from ...reductions import lv
    from ...structure import matrix_sensing

    K = P.n_modes
    X, y = correlated_task(K, P.n_samples, P.noise, seed)
    base = lv.reduce(matrix_sensing(X), y, P.eps[0] * torch.eye(K, dtype=torch.float64))
    return base, lv.limit(base.beta, base.C, y2=base.y2)


def offset_bounds(res, c: float) -> list[float]:
    """Cumulative bound ``Σ_{events so far} (|ln(v/2)| + c)/r`` on the O(1) offset of each switch-on.

    ``r``: the growth rate of the mode just before its event, from the limit's piecewise-linear path
    ``s(τ)`` (slope ``ds/dτ = d ln z / dt``); ``v``: its plateau value.
    """
    ptau, ps = res.path_tau.numpy(), res.path_s.numpy()
    bound, acc = [], 0.0
    for ev in (e for e in res.events if e.kind == "on"):
        i = int(np.argmin(np.abs(ptau - ev.tau)))
        r = (ps[i, ev.mode] - ps[i - 1, ev.mode]) / max(ptau[i] - ptau[i - 1], 1e-300) if i > 0 else math.inf
        acc += (abs(math.log(max(ev.value, 1e-300) / 2)) + c) / max(r, 1e-300)
        bound.append(acc)
    return bound


def interacting_checks(ons, diffs: np.ndarray, bound, logs: np.ndarray, P: InteractingParams, reason: str = ""):
    """Checks from pure data: each switch-on's limit τ vs the flow's at the smallest ε.

    ``ons``: the limit's switch-on events; ``diffs[i, j]``: flow τ − limit τ of event ``j`` at ``P.eps[i]``;
    ``logs[i] = ln(1/ε_i)``.  ``reason`` (non-empty when a flow did not finish) fails every check with it.
    """
    checks = [
        Check(
            f"τ of mode {ev.mode + 1} switching on (ε = {P.eps[-1]:g})",
            ev.tau,
            float(ev.tau + diffs[-1, j]),
            bound[j] / logs[-1],
            kind="absolute",
            reference="stiff log-coordinate integration of the LV flow (z_k reaches half its plateau value)",
            tolerance_origin=f"theory's O(1/ln(1/ε)) error: O(1) offset bound {bound[j]:.3g} / ln(1/ε)",
        )
        for j, ev in enumerate(ons)
    ]
    mark_unfinished(checks, reason)
    return checks


def _tables(res, rows: list, never: np.ndarray) -> list[Table]:
    """Switch-on times (limit vs flow) and the limit's events."""
    ev_rows = [
        [ev.tau, ev.mode + 1, ev.kind, "{" + ", ".join(str(k + 1) for k in ev.active) + "}", ev.loss]
        for ev in res.events
    ]
    return [
        Table(
            "Switch-on times in τ = t / ln(1/ε)",
            ["ε", "mode", "limit τ", "flow τ", "difference", "difference × ln(1/ε)"],
            rows,
            caption="difference × ln(1/ε) tending to a constant per event: convergence like 1/ln(1/ε)",
        ),
        Table(
            "ε → 0 events",
            ["τ", "mode", "kind", "active set after", "plateau loss"],
            ev_rows,
            caption=f"modes that never switch on: {[int(k) + 1 for k in never]}",
        ),
    ]


def _limit_arrays(res) -> dict:
    """The ε → 0 limit as the figure draws it: its path ``s(τ)`` and its loss steps."""
    tau_end = float(res.path_tau[-1])
    return {
        "limit_path_tau": res.path_tau.numpy(),
        "limit_path_s": res.path_s.numpy(),
        "limit_tau": np.concatenate([[0.0], res.taus.numpy(), [tau_end]]),
        "limit_loss": np.concatenate([[res.initial_loss], res.losses.numpy(), [res.losses.numpy()[-1]]]),
    }


def _figure(a: dict, P: InteractingParams):
    """One panel per ε (flow vs limit in log coordinates) and one of the loss in rescaled time."""
    n_pan = len(P.eps) + 1
    ncols = min(3, n_pan)
    nrows = math.ceil(n_pan / ncols)
    fig, axes = new_figure(ncols, nrows, figsize=(4.6 * ncols, 3.9 * nrows))
    axes = np.atleast_1d(axes).ravel()
    for i, e in enumerate(P.eps):
        _plot_flow(axes[i], a, e, legend=i == 0)
    axL = axes[len(P.eps)]
    for ax in axes[len(P.eps) + 1 :]:
        ax.axis("off")
    for e in P.eps:
        axL.plot(a[f"eps_{e:g}_tau"], a[f"eps_{e:g}_loss"], lw=1.5, label=f"ε = {e:g}")
    axL.step(a["limit_tau"], a["limit_loss"], where="post", color="k", ls=":", label="ε → 0 limit")
    axL.set_xlabel("τ = t / ln(1/ε)")
    axL.set_ylabel("loss L")
    axL.set_title("loss in rescaled time", fontsize=9)
    axL.legend(fontsize=7)
    return fig


def _plot_flow(ax, a: dict, e: float, legend: bool) -> None:
    """The flow's ``s_k(τ)`` at one ε (solid) and the ε → 0 limit's (dotted)."""
    tau, s, ptau, ps = a[f"eps_{e:g}_tau"], a[f"eps_{e:g}_s"], a["limit_path_tau"], a["limit_path_s"]
    K = s.shape[1]
    colours = [f"C{k}" for k in range(K)] if K <= 10 else [colormaps["turbo"](k / (K - 1)) for k in range(K)]
    for k in range(K):
        ax.plot(tau, s[:, k], lw=1.6, color=colours[k], label=f"mode {k + 1}")
        ax.plot(ptau, ps[:, k], ":", color=colours[k], lw=1.2)
    if bool(a[f"eps_{e:g}_stopped"]):
        mark_stop_at(ax, tau[-1], a[f"eps_{e:g}_loss"], True, y=float(np.nanmax(s[-1])), label="flow stopped")
    ax.set_ylim(-1.3, 0.15)
    ax.set_title(f"ε = {e:g} (solid: flow, dotted: ε → 0 limit)", fontsize=9)
    ax.set_xlabel("τ = t / ln(1/ε)")
    ax.set_ylabel("s_k = ln z_k / ln(1/ε)")
    if legend:
        ax.legend(fontsize=7, ncol=2, loc="lower right")
