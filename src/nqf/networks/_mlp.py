"""Real two-layer MLP with its hidden neurons as units."""

from __future__ import annotations

import torch
from torch import nn

from ..modules import UnitLayout, UnitSlice
from ..structure import get_activation

__all__ = ["TwoLayerMLP"]


class TwoLayerMLP(nn.Module):
    """``f(x) = Σ_i a_i σ(u_iᵀx [+ c_i])`` with outputs ``(B, C)``.

    Units: hidden neurons, ``w_i = (a_i ∈ R^C, u_i ∈ R^D [, c_i])`` — the
    layout of :func:`nqf.structure.mlp`.

    Parameters
    ----------
    in_features : int
        ``D``.
    width : int
        Number of units ``m``.
    out_features : int
        ``C``.
    activation : str or callable
    bias : bool
        Hidden biases (part of the units).
    dtype : torch.dtype
    """

    #: What :func:`nqf.modules.find_units` reports as the kind of :attr:`units`.
    unit_kind = "mlp-hidden"

    def __init__(
        self,
        in_features: int,
        width: int,
        out_features: int = 1,
        activation="tanh",
        bias: bool = False,
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        self.activation = get_activation(activation)
        self.input = nn.Linear(in_features, width, bias=bias, dtype=dtype)
        self.readout = nn.Linear(width, out_features, bias=False, dtype=dtype)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.readout(self.activation(self.input(x)))

    @property
    def units(self) -> UnitLayout:
        slices = [UnitSlice("readout.weight", axis=1), UnitSlice("input.weight", axis=0)]
        if self.bias:
            slices.append(UnitSlice("input.bias", axis=0))
        return UnitLayout(slices)
