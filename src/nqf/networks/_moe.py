"""Real softmax-gated mixture of experts with its experts as units."""

from __future__ import annotations

import torch
from torch import nn

from .._validation import positive_int
from ..errors import ShapeError
from ..modules import UnitLayout, UnitSlice
from ..structure import get_activation

__all__ = ["MixtureOfExperts"]


class MixtureOfExperts(nn.Module):
    r"""``f(x) = Σ_e g_e(x) a_e σ(u_eᵀx)``, ``g = softmax_e(G_e·x)``; ``(B, D) → (B, C)``.

    Parameters: ``input.weight`` (E, D) rows ``u_e``, ``readout.weight`` (C, E)
    columns ``a_e``, ``gate.weight`` (E, D) rows ``G_e``; no biases.
    Units (``.units``): experts, ``w_e = (a_e ∈ R^C, u_e ∈ R^D, G_e ∈ R^D)``, the
    layout of :func:`nqf.structure.mixture_of_experts`.

    Parameters
    ----------
    in_features : int
        ``D``.
    n_experts : int
        ``E`` (number of units).
    out_features : int
        ``C``.
    activation : str or callable
        Smooth expert activation (ReLU raises :class:`~nqf.errors.NormalFormError`).
    dtype : torch.dtype
    """

    #: What :func:`nqf.modules.find_units` reports as the kind of :attr:`units`.
    unit_kind = "experts"

    def __init__(
        self,
        in_features: int,
        n_experts: int,
        out_features: int = 1,
        activation="tanh",
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        for name, v in (("in_features", in_features), ("n_experts", n_experts), ("out_features", out_features)):
            positive_int(name, v)
        self.activation = get_activation(activation)
        self.in_features, self.n_experts, self.out_features = in_features, n_experts, out_features
        self.input = nn.Linear(in_features, n_experts, bias=False, dtype=dtype)
        self.gate = nn.Linear(in_features, n_experts, bias=False, dtype=dtype)
        self.readout = nn.Linear(n_experts, out_features, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 2 or x.shape[-1] != self.in_features:
            raise ShapeError(f"`x` must have shape (B, {self.in_features}); found {tuple(x.shape)}")
        g = torch.softmax(self.gate(x), dim=-1)
        return self.readout(g * self.activation(self.input(x)))

    @property
    def units(self) -> UnitLayout:
        return UnitLayout(
            [UnitSlice("readout.weight", axis=1), UnitSlice("input.weight", axis=0), UnitSlice("gate.weight", axis=0)],
            n_units=self.n_experts,
        )
