"""Small helpers shared by the experiments: trajectories to the CPU, level-crossing times."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

__all__ = ["crossing_time", "to_cpu"]


def crossing_time(t: np.ndarray, x: np.ndarray, level: float) -> float:
    """First time the curve ``x(t)`` reaches ``level`` from below (linear interpolation); NaN if never."""
    above = np.nonzero(x >= level)[0]
    if above.size == 0:
        return math.nan
    i = int(above[0])
    if i == 0:
        return float(t[0])
    t0, t1, x0, x1 = t[i - 1], t[i], x[i - 1], x[i]
    return float(t0 + (level - x0) * (t1 - t0) / (x1 - x0))


def to_cpu(traj):
    """A trajectory with every tensor on the CPU (for saving and plotting)."""
    return dataclasses.replace(traj, **{f.name: getattr(traj, f.name).cpu() for f in dataclasses.fields(traj)
                                        if isinstance(getattr(traj, f.name), torch.Tensor)})
