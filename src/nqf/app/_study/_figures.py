"""Figures of an analysis: loss curves with the predicted staircase, and per-mode strengths."""

from __future__ import annotations

from pathlib import PurePath

import numpy as np

from ..._text import figure_text

__all__ = ["analysis_figure", "data_label", "forecast_figure"]


def data_label(data: str) -> str:
    """The data's name for a figure: a file's name without its directory (no machine path in a figure), shown
    as typed (:func:`figure_text`: never parsed as mathtext)."""
    return figure_text(PurePath(str(data).replace("\\", "/")).name or str(data))


def analysis_figure(a):
    """Two panels: losses of the real network, the NQF and the prediction (predicted times marked),
    and the strength ``q_kᵀ M(t) q_k`` of each escaping direction (real solid, NQF dashed)."""
    from .._report import mark_times, new_figure

    c, P = a.curves, a.prediction
    t = c["t"]
    fig, (ax, ax2) = new_figure(2, figsize=(12, 4.4))
    ax.plot(t, c["loss_real"], lw=2.2, label="real network")
    ax.plot(t, c["loss_nqf"], "--", lw=1.5, label="NQF simulation")
    ax.plot(t, c["loss_predicted"], ":", lw=1.5, color="k", label=f"prediction ({P.method})")
    for L in P.levels:
        ax.axhline(L, color="0.75", lw=0.6, zorder=0)
    mark_times(ax, P.times, [str(k + 1) for k in range(P.n_drops)])
    if a.validity.get("left_time") is not None:
        ax.axvline(a.validity["left_time"], color="C2", lw=1.2, label="left the quadratic regime")
    ax.set_xlabel("training time t = η·steps")
    ax.set_ylabel("loss L")
    ax.set_title(
        f"{data_label(a.data)}: ε = {a.eps:g}, width {a.width}, p = {a.p} (dashed red: predicted drops)",
        fontsize=9,
        pad=14,
    )
    ax.legend(fontsize=8, loc="upper right")
    S_real, S_nqf = c.get("strength_real"), c.get("strength_nqf")
    if S_real is not None and S_real.shape[1]:
        for k in range(S_real.shape[1]):
            (line,) = ax2.semilogy(t, np.maximum(S_real[:, k], 1e-300), lw=1.6, label=f"mode {k + 1}")
            ax2.semilogy(t, np.maximum(S_nqf[:, k], 1e-300), "--", lw=1.0, color=line.get_color())
        mark_times(ax2, P.times, None)
        lo = max(float(np.nanmin(S_real[S_real > 0])) if (S_real > 0).any() else 1e-12, a.eps / 10)
        ax2.set_ylim(bottom=lo)
        ax2.legend(fontsize=7, ncol=2, loc="lower right")
    ax2.set_xlabel("training time t = η·steps")
    ax2.set_ylabel("mode strength q_kᵀ M(t) q_k")
    ax2.set_title("escaping directions: real network (solid), NQF (dashed)", fontsize=9)
    return fig


def forecast_figure(fc, steps, loss, judgement, title: str = ""):
    """A logged curve of the user's loop against its :class:`nqf.app.Forecast`: the log, the predicted curve
    (:meth:`nqf.app.Forecast.loss_curve`), the predicted levels, each drop's predicted step (dashed: trusted, dotted:
    not) and the log's measured midpoint crossings."""
    from .._report import mark_times, new_figure

    s, L = np.asarray(steps, float), np.asarray(loss, float)
    last = float(np.nanmax(fc.steps, initial=0.0)) if np.isfinite(fc.steps).any() else 0.0
    end = float(s[-1]) if not last or s[-1] <= 2.5 * last else 2.0 * last  # the staircase, not the long tail
    if end < s[-1]:
        title = f"{title} (log shown to step {end:.4g} of {s[-1]:.4g})" if title else ""
        s, L = s[s <= end], L[s <= end]
    fig, ax = new_figure(figsize=(8, 4.6))
    ax.plot(s, L, lw=1.8, label="your run (log)")
    grid = np.linspace(0.0, float(s[-1]), 800)
    ax.plot(grid, fc.loss_curve(grid), "--", lw=1.3, color="k", label=f"forecast ({fc.staircase.method})")
    for level in fc.levels:
        ax.axhline(level, color="0.8", lw=0.6, zorder=0)
    shown = np.isfinite(fc.steps) & (fc.steps <= s[-1])
    trusted = shown & fc.trusted
    labels = [str(k + 1) for k in range(fc.n_drops)]
    mark_times(ax, np.where(trusted, fc.steps, np.nan), labels, color="C3")
    for k in np.nonzero(shown & ~fc.trusted)[0]:
        ax.axvline(fc.steps[k], color="C3", ls=":", lw=0.9, alpha=0.6)
    hit = np.isfinite(judgement.measured)
    mids = 0.5 * (fc.levels[:-1] + fc.levels[1:])
    if hit.any():
        ax.plot(judgement.measured[hit], mids[hit], "o", ms=5, color="C2", label="measured drop (midpoint crossing)")
    ax.plot([], [], color="C3", ls="--", lw=0.9, label="predicted drop (trusted)")
    if (shown & ~fc.trusted).any():
        ax.plot([], [], color="C3", ls=":", lw=0.9, label="predicted drop (not trusted)")
    ax.set_xlabel(
        f"step of your loop ({fc.clock.optimizer}, lr {fc.clock.lr if fc.clock.lr is not None else 'scheduled'})"
    )
    ax.set_ylabel("loss (your loss's units)")
    ax.set_title(figure_text(title) if title else "your run against its forecast", fontsize=9, pad=14)
    ax.legend(fontsize=8, loc="upper right")
    return fig
