"""Mode strengths ``qₖᵀ M(t) qₖ`` of a run along a staircase's directions, for the curves and the figure.

When the prediction is that of the units' channels (:func:`nqf.structure.channel_split`, e.g. attention heads,
whose value–output channels are the units of the quadratic form), the directions are channel directions and a
strength is ``qₖᵀ M'(t) qₖ`` with ``M' = Σ_i P_i M P_iᵀ`` (``‖W'(t)ᵀ qₖ‖²``, ``W'`` the channels as units).
"""

from __future__ import annotations

import numpy as np
import torch

from ...errors import ShapeError
from ...structure import channel_split

__all__ = ["strength_reader"]


def strength_reader(directions: np.ndarray, op):
    """``read(tr, n)``: the strengths of the first ``n`` saved states of a run ``tr`` (shape ``(n, K)``; from ``M``
    or ``W``, whichever was saved; ``K = 0`` with neither), along ``directions`` (``(p, K)``, or ``(p', K)`` of
    ``op``'s channel operator)."""
    Q = torch.from_numpy(np.array(directions, dtype=np.float64))
    split = None
    if Q.shape[0] != op.p:
        split = channel_split(op)
        if split is None or split.op.p != Q.shape[0]:
            raise ShapeError(
                f"`directions` must have {op.p} rows (the unit dimension) or those of the operator's channels; "
                f"found {Q.shape[0]}"
            )

    def read(tr, n: int) -> np.ndarray:
        if not Q.numel():
            return np.zeros((n, 0))
        if tr.W is not None:
            W = tr.W[:n] if split is None else split.units(tr.W[:n])
            return torch.einsum("pk,tpm->tkm", Q, W).pow(2).sum(-1).numpy()
        if tr.M is not None:
            QT = Q.T.contiguous()
            M = tr.M[:n] if split is None else split.reduce(tr.M[:n])
            return ((QT @ M) * QT).sum(-1).numpy()  # no copy of the saved M (einsum made one: 26 MB on digits)
        return np.zeros((n, 0))

    return read
