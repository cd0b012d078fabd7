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


def mark_times(ax, times, labels=None, color="C3"):
    """Vertical dashed lines at predicted times, optionally labelled at the top of the axes."""
    for i, tt in enumerate(np.asarray(times, float)):
        if not np.isfinite(tt):
            continue
        ax.axvline(tt, color=color, ls="--", lw=0.9, alpha=0.8)
        if labels is not None:
            ax.text(tt, 1.0, f" {labels[i]}", transform=ax.get_xaxis_transform(), color=color, fontsize=8,
                    va="bottom", ha="left")
