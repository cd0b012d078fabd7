"""The architecture families, one record each: what nqf knows of a family, in one place.

A :class:`Family` holds the family's reference network (a module with a ``units`` layout, its unit layout, and a
class attribute ``unit_kind``, what :func:`nqf.modules.find_units` reports for it and for any module that
declares the same kind), the analytic operator of such a network on inputs ``X``, an example problem of the
family, and the order of the first term its quadratic form leaves out.  :data:`FAMILIES` lists the built-in
ones; the module-zoo experiment (``nqf run`` with ``experiment = "modules"``) and the tests read them from here.

Adding a family: its analytic operator (a builder in ``nqf.structure``), its reference network and its record
here (docs/architecture.md, "Adding an architecture family"); ``Family.check`` compares the record's operator
with the network's own (autodiff, :func:`nqf.modules.from_module`), the test every record passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import cast

import torch
from torch import nn

from ..modules import from_module
from ..structure import (
    Activation,
    StructureOperator,
    conv1d,
    conv2d,
    factorization,
    matrix_sensing,
    mixture_of_experts,
    mlp,
    multi_head_attention,
    qk_attention,
)
from ._attention import MultiHeadAttention, QKAttention
from ._conv import ConvNet1d, ConvNet2d
from ._factorization import Factorization, MatrixSensing
from ._mlp import TwoLayerMLP
from ._moe import MixtureOfExperts

__all__ = ["Family", "FAMILIES"]

_DT = torch.float64


@dataclass(frozen=True)
class Family:
    """One architecture family.

    Attributes
    ----------
    name : str
        Its name (``"mlp"``, ``"cnn"``, ``"attention"``, …).
    network : type of torch.nn.Module
        The reference network: its ``units`` property is the family's unit layout and its class attribute
        ``unit_kind`` the kind unit discovery reports (:func:`nqf.modules.find_units`).
    operator : callable ``(net, X) -> StructureOperator``
        The analytic operator of ``net``'s units on inputs ``X``, its other parameters as they are (the layout of
        ``net.units``).
    example : callable ``(n, m, D, T, generator) -> (X, net)``
        ``n`` inputs of the family's shape (feature size ``D``; ``T`` tokens where the family has tokens) drawn
        from ``generator``, and a reference network of width ``m``.
    truncation_order : callable ``net -> int or None``
        The order ``q`` of the first term the quadratic form leaves out (``f = f(0) + Tr[WWᵀA] + O(‖W‖^q)``),
        ``None`` when the family is exactly quadratic.
    """

    name: str
    network: type[nn.Module]
    operator: Callable[[nn.Module, torch.Tensor], StructureOperator]
    example: Callable[[int, int, int, int, torch.Generator], tuple[torch.Tensor, nn.Module]]
    truncation_order: Callable[[nn.Module], int | None]

    @property
    def unit_kind(self) -> str:
        """What :func:`nqf.modules.find_units` reports for the family's networks."""
        return str(getattr(self.network, "unit_kind", "custom"))

    def check(self, net: nn.Module, X: torch.Tensor) -> float:
        """The largest difference between the record's operator and the network's own (autodiff,
        :func:`nqf.modules.from_module`) on ``X``, relative to the largest entry: round-off when the record is
        right.  Both are applied to the same random ``M`` and adjoint to the same random ``R``."""
        ours, auto = self.operator(net, X), from_module(net, net.units, X)
        gen = torch.Generator().manual_seed(0)
        G = torch.randn(ours.p, ours.p, generator=gen, dtype=ours.dtype)
        R = torch.randn(ours.n_samples, ours.n_outputs, generator=gen, dtype=ours.dtype)
        pairs = ((ours(G @ G.T), auto(G @ G.T)), (ours.adjoint(R), auto.adjoint(R)))
        return max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-300)) for a, b in pairs)

    def __repr__(self) -> str:
        return f"Family({self.name!r}, {self.network.__name__}, kind={self.unit_kind!r})"


def _smooth_order(net: nn.Module) -> int:
    """4 for an activation with ``σ''(0) = 0`` (tanh, sin, erf), else 3 (the cubic term of GELU, SiLU, …)."""
    act = cast("Activation", net.activation)
    return 4 if act.s2 == 0.0 else 3


def _mlp_example(n, m, D, T, gen):
    return torch.randn(n, D, dtype=_DT, generator=gen), TwoLayerMLP(D, m, 1, "tanh")


def _cnn_example(n, m, D, T, gen):
    L = 2 * D
    return torch.randn(n, 1, L, dtype=_DT, generator=gen), ConvNet1d(1, m, 3, readout="position", input_length=L)


def _cnn2d_example(n, m, D, T, gen):
    X = torch.randn(n, 1, D + 2, D + 2, dtype=_DT, generator=gen)
    return X, ConvNet2d(1, m, 3, readout="position", input_size=(D + 2, D + 2))


def _attention_example(n, m, D, T, gen):
    return torch.randn(n, T, D, dtype=_DT, generator=gen), MultiHeadAttention(D, m, 2, n_outputs=1)


def _qk_example(n, m, D, T, gen):
    X = torch.randn(n, T, D, dtype=_DT, generator=gen)
    V = torch.randn(1, D, dtype=_DT, generator=gen)
    return X, QKAttention(D, m, 2, V)


def _moe_example(n, m, D, T, gen):
    return torch.randn(n, D, dtype=_DT, generator=gen), MixtureOfExperts(D, m, 1, "tanh")


def _factorization_example(n, m, D, T, gen):
    return torch.randn(n, D, D + 1, dtype=_DT, generator=gen), Factorization(D, D + 1, m)


def _sensing_example(n, m, D, T, gen):
    A = torch.randn(n, D, D, dtype=_DT, generator=gen)
    return 0.5 * (A + A.transpose(1, 2)), MatrixSensing(D, m)


def _conv_operator(net, X, *, build):
    c = net.conv
    return build(X, c.kernel_size, c.stride, c.padding, net.activation, net.readout_name, net.readout.shape[0])


def _mlp_operator(net, X):
    return mlp(X, net.activation, bias=net.bias, n_outputs=net.readout.out_features)


def _attention_operator(net, X):
    return multi_head_attention(X, net.d_head, net.d_key, net.n_outputs, net.causal, net.readout)


def _qk_operator(net, X):
    return qk_attention(X, net.V, net.d_key, net.n_heads, net.causal, readout=net.readout)


def _moe_operator(net, X):
    return mixture_of_experts(X, net.n_experts, net.activation, net.out_features)


def _factorization_operator(net, X):
    return factorization(X)


def _sensing_operator(net, X):
    return matrix_sensing(X)


def _quartic(net) -> int:
    """The softmax of the QK logits enters at fourth order (docs/theory.md §1)."""
    return 4


def _cubic(net) -> int:
    """The gate × expert term of a mixture of experts is cubic, whatever the activation."""
    return 3


def _exact(net) -> None:
    """An exactly quadratic family."""
    return None


#: The built-in families (their records; :attr:`Family.name` names them).
FAMILIES: tuple[Family, ...] = (
    Family("mlp", TwoLayerMLP, _mlp_operator, _mlp_example, _smooth_order),
    Family("cnn", ConvNet1d, partial(_conv_operator, build=conv1d), _cnn_example, _smooth_order),
    Family("cnn2d", ConvNet2d, partial(_conv_operator, build=conv2d), _cnn2d_example, _smooth_order),
    Family("attention", MultiHeadAttention, _attention_operator, _attention_example, _quartic),
    Family("qk-attention", QKAttention, _qk_operator, _qk_example, _quartic),
    Family("moe", MixtureOfExperts, _moe_operator, _moe_example, _cubic),
    Family("factorization", Factorization, _factorization_operator, _factorization_example, _exact),
    Family("matrix-sensing", MatrixSensing, _sensing_operator, _sensing_example, _exact),
)
