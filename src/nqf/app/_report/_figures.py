"""Figure helpers shared by the experiments (matplotlib, non-interactive Agg backend)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["new_figure", "mark_times"]


def new_figure(ncols: int = 1, nrows: int = 1, figsize=(6.4, 4.2)):
    """A figure and its axes (a tuple when more than one)."""
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, constrained_layout=True)
    return fig, axes


def mark_times(ax, times, labels=None, color="C3", merge_fraction: float = 0.04):
    """Vertical dashed lines at predicted times, optionally labelled at the top of the axes.

    Labels of times closer together than ``merge_fraction`` of the x-axis span
    are joined into one label (``"t1,t2"``) at the first of them, so that they
    never print over each other.
    """
    times = np.asarray(times, float)
    marked = [(float(tt), i) for i, tt in enumerate(times) if np.isfinite(tt)]
    for tt, _ in marked:
        ax.axvline(tt, color=color, ls="--", lw=0.9, alpha=0.8)
    if labels is None or not marked:
        return
    lo, hi = ax.get_xlim()
    lo, hi = min(lo, min(t for t, _ in marked)), max(hi, max(t for t, _ in marked))
    gap = merge_fraction * max(hi - lo, 1e-300)
    groups: list[list[tuple[float, int]]] = []
    for tt, i in sorted(marked):
        if groups and tt - groups[-1][-1][0] < gap:
            groups[-1].append((tt, i))
        else:
            groups.append([(tt, i)])
    for group in groups:
        text = ",".join(str(labels[i]) for _, i in group)
        ax.text(
            group[0][0],
            1.0,
            f" {text}",
            transform=ax.get_xaxis_transform(),
            color=color,
            fontsize=8,
            va="bottom",
            ha="left",
        )
