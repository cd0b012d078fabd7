"""Real factorization and matrix-sensing modules with their factor columns as units."""

from __future__ import annotations

import math

import torch
from torch import nn

from .._validation import positive_int
from ..errors import ShapeError
from ..modules import UnitLayout, UnitSlice

__all__ = ["Factorization", "MatrixSensing"]


def _check_dims(**dims) -> None:
    for name, v in dims.items():
        positive_int(name, v)


class Factorization(nn.Module):
    r"""Asymmetric factorization ``f_c(X) = Σ_i u_iᵀ X_c v_i = Tr[Uᵀ X_c V]``.

    Units: factor columns, ``w_i = (u_i ∈ R^{d1}, v_i ∈ R^{d2})`` — the
    layout of :func:`nqf.structure.factorization`.

    Parameters
    ----------
    d1, d2 : int
        Sizes of the input matrices.
    width : int
        Number of units ``m``.
    init_scale : float
        Entries of ``U`` and ``V`` are ``N(0, init_scale² / width)``.
    dtype : torch.dtype

    Notes
    -----
    ``forward`` takes ``X`` of shape ``(B, d1, d2)`` → ``(B,)``, or
    ``(B, C, d1, d2)`` → ``(B, C)`` for vector outputs.
    """

    #: What :func:`nqf.modules.find_units` reports as the kind of :attr:`units`.
    unit_kind = "factor-columns"

    def __init__(self, d1: int, d2: int, width: int, *, init_scale: float = 1.0, dtype: torch.dtype = torch.float64):
        super().__init__()
        _check_dims(d1=d1, d2=d2, width=width)
        s = init_scale / math.sqrt(width)
        self.U = nn.Parameter(s * torch.randn(d1, width, dtype=dtype))
        self.V = nn.Parameter(s * torch.randn(d2, width, dtype=dtype))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        d1, d2 = self.U.shape[0], self.V.shape[0]
        if X.ndim < 2 or tuple(X.shape[-2:]) != (d1, d2):
            raise ShapeError(f"`X` must have shape (B, {d1}, {d2}) or (B, C, {d1}, {d2}); found {tuple(X.shape)}")
        return torch.einsum("...jk,jm,km->...", X, self.U, self.V)

    @property
    def units(self) -> UnitLayout:
        return UnitLayout([UnitSlice("U", axis=1), UnitSlice("V", axis=1)])


class MatrixSensing(nn.Module):
    r"""Symmetric matrix sensing ``f_c(X) = Tr[U Uᵀ X_c] = Σ_i u_iᵀ X_c u_i``.

    Units: columns ``u_i ∈ R^d`` of ``U`` — the layout of
    :func:`nqf.structure.matrix_sensing`.

    Parameters
    ----------
    d : int
        Size of the (square) measurement matrices.
    width : int
        Number of units ``m``.
    init_scale : float
        Entries of ``U`` are ``N(0, init_scale² / width)``.
    dtype : torch.dtype

    Notes
    -----
    ``forward`` takes ``X`` of shape ``(B, d, d)`` → ``(B,)``, or
    ``(B, C, d, d)`` → ``(B, C)``.
    """

    #: What :func:`nqf.modules.find_units` reports as the kind of :attr:`units`.
    unit_kind = "factor-columns"

    def __init__(self, d: int, width: int, *, init_scale: float = 1.0, dtype: torch.dtype = torch.float64):
        super().__init__()
        _check_dims(d=d, width=width)
        self.U = nn.Parameter(init_scale / math.sqrt(width) * torch.randn(d, width, dtype=dtype))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        d = self.U.shape[0]
        if X.ndim < 2 or tuple(X.shape[-2:]) != (d, d):
            raise ShapeError(f"`X` must have shape (B, {d}, {d}) or (B, C, {d}, {d}); found {tuple(X.shape)}")
        return torch.einsum("...jk,jm,km->...", X, self.U, self.U)

    @property
    def units(self) -> UnitLayout:
        return UnitLayout([UnitSlice("U", axis=1)])
