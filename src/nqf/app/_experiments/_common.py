"""Small helpers shared by the experiments: trajectories to the CPU, level-crossing times, initial
weights, trajectory status for checks and figures, round-off."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

__all__ = [
    "to_cpu",
    "stop_reason",
    "mark_stop",
    "mark_stop_at",
    "mark_unfinished",
    "clean_roundoff",
    "ROUNDOFF",
]

#: Relative size below which a value is float64 round-off (a few hundred ulps).
ROUNDOFF = 1e-13


def to_cpu(traj):
    """A trajectory with every tensor on the CPU (for saving and plotting)."""
    return dataclasses.replace(
        traj,
        **{
            f.name: getattr(traj, f.name).cpu()
            for f in dataclasses.fields(traj)
            if isinstance(getattr(traj, f.name), torch.Tensor)
        },
    )


def stop_reason(**trajectories) -> str:
    """``""`` when every trajectory finished; else which did not, where, and why (for a failed check).

    Parameters
    ----------
    **trajectories : Trajectory, LVSolution or None
        Named runs; anything with ``success``/``status`` and ``message`` (``None`` is skipped).
    """
    parts = []
    for name, tr in trajectories.items():
        if tr is None:
            continue
        ok = getattr(tr, "success", None)
        if ok is None:
            ok = getattr(tr, "status", 0) >= 0
        if not ok:
            t = getattr(tr, "t", None)
            where = f" at t = {float(t[-1]):.4g}" if t is not None and len(t) else ""
            parts.append(f"{name} did not finish{where}: {getattr(tr, 'message', 'stopped')}")
    return "; ".join(parts)


def mark_unfinished(checks: list, reason: str, start: int = 0) -> None:
    """Replace ``checks[start:]`` (in place in the list; a negative ``start`` counts from the end) by the same
    checks failed because their inputs did not finish, with ``reason`` (no-op for an empty reason)."""
    if not reason:
        return
    for i in range(len(checks))[start:]:
        checks[i] = checks[i].unfinished(reason)


def mark_stop(ax, traj, t=None, y=None, color="C3", label="run stopped") -> bool:
    """Mark where a trajectory that did not finish stopped (a cross and a label); returns whether it did.

    ``t``/``y`` default to the trajectory's last saved time and loss.
    """
    if traj is None or stop_reason(run=traj) == "":
        return False
    tt = float(traj.t[-1]) if t is None else float(t)
    return mark_stop_at(ax, tt, np.asarray(traj.loss, float), True, y=y, color=color, label=label)


def mark_stop_at(ax, t_stop: float, loss, stopped: bool, *, y=None, color="C3", label="run stopped") -> bool:
    """:func:`mark_stop` from saved arrays: a cross at ``(t_stop, last finite loss)`` when ``stopped``."""
    if not stopped:
        return False
    yy = math.nan if y is None else float(y)
    if not math.isfinite(yy):
        finite = np.asarray(loss, float)
        finite = finite[np.isfinite(finite)]
        yy = float(finite[-1]) if finite.size else 1.0
    ax.plot([float(t_stop)], [yy], "x", color=color, ms=10, mew=2.5, zorder=5, label=label)
    ax.axvline(float(t_stop), color=color, lw=0.8, ls="-.")
    return True


def clean_roundoff(x, scale: float) -> np.ndarray:
    """A float copy of ``x`` with values below float64 round-off relative to ``scale`` set to exactly 0.

    Parameters
    ----------
    x : array_like
    scale : float
        The size of the quantities ``x`` was computed from (e.g. the initial loss).
    """
    tol = ROUNDOFF * abs(scale)
    x = np.array(x, dtype=float)
    x[np.abs(x) < tol] = 0.0
    return x
