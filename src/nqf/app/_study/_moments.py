r"""The data of a two-layer MLP's NQF in ``D`` rows instead of ``N`` (exact, for ``N > D``).

The NQF of the hidden neurons of ``x ↦ Σ_i a_i σ(w_iᵀx)`` (no hidden bias, ``σ(0) = 0``) is
``f_n(M) = σ'(0) M_{aw} x_n``: linear in the input.  Its loss
``L(M) = (1/N) Σ_n ½‖M_{aw} x_n − y_n‖²`` therefore depends on the data only through ``XᵀX/N``,
``XᵀY/N`` and ``‖Y‖²/N``.  With the reduced QR factorisation ``X = Q R`` (``Q``: ``N × D``),
the ``D`` rows ``X̃ = √(D/N) R`` and targets ``Ỹ = √(D/N) Qᵀ Y`` have the same first two moments
(``X̃ᵀX̃/D = XᵀX/N``, ``X̃ᵀỸ/D = XᵀY/N``), so

    L(M) = L̃(M) + c,    c = ½ ‖(I − Q Qᵀ) Y‖² / N ≥ 0,

for every ``M``: the same gradient flow, the same saddles and drop times, every loss value
shifted by the constant ``c``.  :func:`nqf.analyze` predicts and simulates the NQF on
``(X̃, Ỹ)`` (a digits MLP: 64 rows instead of 1797; 128 instead of 10⁵) and adds ``c`` back
to the predicted levels and the simulated losses; the real network trains on the full data.
"""

from __future__ import annotations

import math

import torch

__all__ = ["moment_rows", "compressible", "compressible_inputs"]


def compressible(found, how: str, X: torch.Tensor) -> bool:
    """Whether the NQF of ``found`` on ``X`` can use :func:`moment_rows`: the whole model is a two-layer MLP
    without hidden bias (its analytic operator, label ``"analytic mlp"``), inputs ``(N, D)`` with ``N > D``."""
    return how == "analytic mlp" and found.is_whole_mlp and not found.bias and compressible_inputs(X)


def compressible_inputs(X: torch.Tensor) -> bool:
    """Inputs ``(N, D)`` with ``N > D``: fewer moment rows than samples."""
    return X.ndim == 2 and X.shape[0] > X.shape[1]


def moment_rows(X: torch.Tensor, Y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``(X̃, Ỹ, c)``: ``D`` rows with the moments of ``(X, Y)`` and the loss offset (module docstring).

    Parameters
    ----------
    X : torch.Tensor, shape (N, D), N > D
    Y : torch.Tensor, shape (N, C)
        The targets of the NQF (minus ``f(0)``).
    """
    N, D = X.shape
    Q, R = torch.linalg.qr(X)  # reduced
    QtY = Q.T @ Y
    rest = Y - Q @ QtY
    s = math.sqrt(D / N)
    return s * R, s * QtY, 0.5 * float((rest * rest).sum()) / N
