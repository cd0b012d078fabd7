"""Keeping the factor of the order-parameter form well conditioned during ``simulate`` (:mod:`nqf.dynamics._simulate`):
its columns re-orthogonalised when their norms have drifted apart, and the transfer of the compressed run's
factor."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from ._factored import apply_G, orthogonalize_columns

POLISH_MAX_RANK = 256  # factors with more columns are not re-orthogonalised (O(p r²) per polish)


POLISH_FACTOR = 100.0  # re-orthogonalise when a column norm has changed by this factor since the last time


POLISH_EVERY = 8  # … checked every this many steps


_NO_MOMENTUM = SimpleNamespace(velocity=None)  # what `_polished` reads of a descent without momentum


def _polished_or_none(L, st: dict, p: int):
    """:func:`_polished` without momentum buffers: the rotated factor, or None when no rotation was due."""
    out = _polished(L, _NO_MOMENTUM, st, p)
    return None if out is L else out


def _loop_state(L, p: int, dtype, device, track_transfer: bool) -> dict[str, Any]:
    """State carried across steps: column norms of the last polish, ``a = 1``, ``b`` and, with
    ``track_transfer``, ``Φ = I`` and its momentum ``Ψ`` (two ``p × p`` arrays, else None)."""
    eye = torch.eye(p, dtype=dtype, device=device) if track_transfer else None
    return dict(ref_norm2=_norms2(L), Phi=eye, Psi=None if eye is None else torch.zeros_like(eye), a=1.0, b=0.0)


def _norms2(L: torch.Tensor):
    """Squared column norms of ``L``: in NumPy for a CPU float tensor (one call, ≈ 4× faster than torch's norm and
    its comparisons at the hot path's small sizes: checked every :data:`POLISH_EVERY` steps), else in torch."""
    if L.device.type == "cpu" and L.dtype in (torch.float64, torch.float32) and not L.requires_grad:
        a = L.numpy()
        return np.einsum("ij,ij->j", a, a)
    return (L * L).sum(0)


def _drifted(n2, ref2) -> bool:
    """Whether a column norm changed by more than :data:`POLISH_FACTOR` (squared norms; a zero reference column
    gives inf or NaN, as the norms' own ratio did: inf counts as drifted, NaN does not)."""
    f2 = POLISH_FACTOR * POLISH_FACTOR
    if isinstance(n2, np.ndarray):
        with np.errstate(divide="ignore", invalid="ignore"):
            r2 = n2 / ref2
            return bool((r2 > f2).any() or (r2 * f2 < 1.0).any())
    r2 = n2 / ref2
    return bool(((r2 > f2) | (r2 * f2 < 1.0)).any())


def _polished(L, descent, st: dict, p: int):
    """``L`` with re-orthogonalised columns (and momentum buffer) once a column norm drifted by ``POLISH_FACTOR``."""
    if _drifted(_norms2(L), st["ref_norm2"]):
        if descent.velocity is not None:
            LK = orthogonalize_columns(torch.cat([L, descent.velocity[0]], 0))
            L, descent.velocity[0] = LK[:p], LK[p:]
        else:
            L = orthogonalize_columns(L)
        st["ref_norm2"] = _norms2(L)
    return L


def _transfer_step(st: dict, ctx: dict, lr: float, lam: float, beta: float) -> None:
    """One step of the transfer map ``Φ`` and of the scalar factor ``a`` in ``st`` (heavy-ball when ``beta``)."""
    Phi = st["Phi"]
    SPhi = 2.0 * apply_G(ctx["ob"], ctx["r"], Phi, ctx["nb"]) + lam * Phi
    if beta:
        st["Psi"] = beta * st["Psi"] + SPhi
        st["Phi"] = Phi - lr * st["Psi"]
        st["b"] = beta * st["b"] + lam * st["a"]
        st["a"] = st["a"] - lr * st["b"]
    else:
        st["Phi"] = Phi - lr * SPhi
        st["a"] = st["a"] * (1.0 - lr * lam)
