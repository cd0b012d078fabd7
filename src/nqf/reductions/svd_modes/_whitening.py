"""Whitened inputs, the assumption of the two-layer SVD-mode reduction (docs/theory.md §4.5).

The SVD modes of :mod:`nqf.reductions.svd_modes` diagonalise the dynamics only when
``(1/N) Σ_n x_n x_nᵀ = I``; :func:`whitening_error` measures the distance from it and
:func:`whiten` transforms inputs so that it holds.
"""

from __future__ import annotations

import math

import torch

from ..._validation import as_tensor
from ...errors import InvalidParameterError, NQFError

__all__ = ["whiten", "whitening_error", "NotWhitenedError", "NotWhitenedWarning"]


class NotWhitenedError(NQFError, ValueError):
    """Inputs are not whitened: ``(1/N) Σ x xᵀ`` differs from the identity."""


class NotWhitenedWarning(UserWarning):
    """Inputs are not whitened; SVD-mode predictions are then only approximate."""


def whitening_error(X) -> float:
    """Relative distance of the input second moment from the identity.

    Parameters
    ----------
    X : array_like, shape (N, D)

    Returns
    -------
    float
        ``‖(1/N) Xᵀ X − I‖_F / ‖I‖_F`` (``‖I‖_F = √D``).
    """
    X = as_tensor("X", X, ndim=2)
    N, D = X.shape
    S = X.T @ X / N
    return float(torch.linalg.norm(S - torch.eye(D, dtype=X.dtype, device=X.device)) / math.sqrt(D))


def whiten(X) -> torch.Tensor:
    """Whiten inputs so that ``(1/N) Σ_n x_n x_nᵀ = I`` (uncentred, ZCA).

    Parameters
    ----------
    X : array_like, shape (N, D), rank D (needs N ≥ D)

    Returns
    -------
    torch.Tensor, shape (N, D)
        ``X Σ_xx^{-1/2}`` with ``Σ_xx = XᵀX/N``.
    """
    X = as_tensor("X", X, ndim=2)
    N, D = X.shape
    S = X.T @ X / N
    evals, evecs = torch.linalg.eigh(S)
    if float(evals.min()) <= 1e-12 * max(float(evals.max()), 1e-300):
        raise InvalidParameterError(
            f"`X` must have rank D = {D} (N ≥ D and independent columns) to be whitened; "
            f"smallest eigenvalue of XᵀX/N is {float(evals.min()):.3e}"
        )
    return X @ (evecs * evals.rsqrt()) @ evecs.T
