"""Which units of a model are analysed, and their structure operator.

Discovery is :func:`nqf.modules.find_units` (any ``nn.Module``: the layer order comes
from the traced forward, see docs/analyze.md); :func:`unit_listing` is what
``nqf analyze --list-units`` prints.

Structure operator: for a model that *is* a two-layer MLP
(``nn.Sequential(Linear, act, Linear)``, a module computing ``fc2(act(fc1(x)))`` or
:class:`nqf.networks.TwoLayerMLP`)
with a known activation, the analytic operator :func:`nqf.structure.mlp`
(memory ``O(N D)``), checked against :func:`nqf.modules.from_module` on a few
samples to 1e-10; any other model goes through ``from_module`` (dense
``N × C × p × p``, refused above the memory budget).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import NormalFormError
from ..modules import ELEMENTWISE_MODULES, UnitLayout, get_unit_weights, set_unit_weights
from ..results import Result

__all__ = [
    "FoundUnits",
    "find_unit_layers",
    "choose_units",
    "unit_listing",
    "structure_of",
    "output_at_zero",
    "ELEMENTWISE",
]

#: Elementwise activation modules (smooth and non-smooth: the smoothness check judges them): those that
#: :func:`nqf.modules.find_units` accepts between two layers (derived from the activation registry).
ELEMENTWISE: tuple[type[nn.Module], ...] = ELEMENTWISE_MODULES


@dataclass(frozen=True)
class FoundUnits(Result):
    """A layer of interchangeable units.

    Attributes
    ----------
    name : str
        Layer name (the first ``nn.Linear`` of an MLP block, e.g. ``"0"``).
    kind : str
        ``"mlp-hidden"`` or what :func:`nqf.modules.find_units` reports.
    layout : UnitLayout
    n_units, p : int
    activation : nn.Module or None
        The elementwise activation between the two linear maps (MLP blocks).
    is_whole_mlp : bool
        The model is exactly this two-layer MLP (analytic operator possible).
    """

    name: str
    kind: str
    layout: UnitLayout = field(repr=False)
    n_units: int
    p: int
    activation: nn.Module | None = field(default=None, repr=False)
    is_whole_mlp: bool = False
    bias: bool = False

    def to_dict(self) -> dict:
        """JSON-ready: the layer, its units and layout (the activation by its class name)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "n_units": self.n_units,
            "p": self.p,
            "activation": None if self.activation is None else type(self.activation).__name__,
            "is_whole_mlp": self.is_whole_mlp,
            "bias": self.bias,
            "layout": [
                {"param": s.param, "axis": s.axis, "size": s.size, "offset": s.offset} for s in self.layout.slices
            ],
        }

    def describe(self) -> str:
        act = "" if self.activation is None else f", activation {type(self.activation).__name__}"
        return f"{self.kind} `{self.name}`: {self.n_units} units of dimension p = {self.p}{act}"


def _mlp_details(module: nn.Module, cand) -> tuple[nn.Module | None, bool, bool]:
    """Activation, whole-model flag and bias of hidden neurons between two ``nn.Linear`` layers.

    The activation is the registry's module for the one activation between the layers
    (``cand.activation``: an ``nn.Tanh`` or a ``torch.tanh`` in the forward alike); the model is "whole" when
    its parameters are exactly those of the two layers (:func:`structure_of` still checks the analytic
    operator against ``from_module``).  ``(None, False, False)`` for anything else.
    """
    from ..structure import find_activation

    if cand.kind != "mlp-hidden" or len(cand.names) != 2:
        return None, False, False
    first, second = (module.get_submodule(n) for n in cand.names)
    if not (isinstance(first, nn.Linear) and isinstance(second, nn.Linear)):
        return None, False, False
    rec = None if cand.activation is None else find_activation(cand.activation)
    act = None if rec is None else rec.module()
    own = {f"{n}.{k}" for n in cand.names for k, _ in module.get_submodule(n).named_parameters()}
    whole = act is not None and own == {k for k, _ in module.named_parameters()}
    return act, whole, first.bias is not None


def find_unit_layers(module: nn.Module) -> list[FoundUnits]:
    """Every layer of interchangeable units in ``module`` (possibly empty), as :func:`nqf.modules.find_units`
    finds them; hidden neurons of a Sequential also carry their activation (analytic operator when the model is
    exactly that two-layer MLP)."""
    from ..modules import find_units

    params = dict(module.named_parameters())
    out = []
    for cand in find_units(module):
        layout = cand.layout.resolve(params)
        act, whole, bias = _mlp_details(module, cand)
        out.append(FoundUnits(cand.name, cand.kind, layout, layout.m, layout.p(params), act, whole, bias))
    return out


def unit_listing(module: nn.Module) -> list[str]:
    """Every layer of interchangeable units in ``module``, one line each (what ``nqf analyze --list-units`` prints).

    Each line is :meth:`nqf.modules.UnitCandidate.summary` (layer name(s), kind, number of units, ``p``,
    flags) followed by ``" — "`` and the candidate's description; empty when there is none.
    """
    from ..modules import find_units

    return [f"{c.summary()} — {c.description}" for c in find_units(module)]


def choose_units(module: nn.Module, name: str | None = None) -> FoundUnits:
    """The units to analyse: the layer named ``name``, or the only / first layer found.

    Raises
    ------
    NormalFormError
        No interchangeable units, or no layer called ``name``.
    """
    layers = find_unit_layers(module)
    if not layers:
        raise NormalFormError(
            f"`model`: no interchangeable units found in {type(module).__name__} (looked for hidden neurons "
            "between two nn.Linear layers with an elementwise activation, attention heads, conv channels and "
            "experts); the NQF describes layers of units that can be permuted"
        )
    if name is None:
        return layers[0]
    for f in layers:
        if f.name == name or f.name.rstrip(".") == name:
            return f
    from ..modules import find_units

    found = "; ".join(c.summary() for c in find_units(module))
    raise NormalFormError(f"`units`: no layer of units called {name!r}; found {found}")


def _activation_name(act: nn.Module | None) -> str | None:
    """The registry name of a smooth activation (analytic operator possible), else None."""
    from ..structure import Activation, activation_of_module

    if isinstance(act, Activation):
        return act.name
    rec = None if act is None else activation_of_module(act)
    return rec.name if rec is not None and rec.smooth else None


def output_at_zero(module: nn.Module, layout: UnitLayout, X: torch.Tensor) -> torch.Tensor:
    """The model's output with every unit at zero, ``f(0)`` of shape ``(N, C)``."""
    import copy

    m = copy.deepcopy(module).eval()
    W = get_unit_weights(m, layout)
    set_unit_weights(m, layout, torch.zeros_like(W))
    with torch.no_grad():
        out = m(X)
    return out.reshape(out.shape[0], -1)


def structure_of(
    module: nn.Module, found: FoundUnits, X: torch.Tensor, *, memory_budget: float = 2e9, check_samples: int = 8
):
    """Structure operator of the chosen units on inputs ``X``.

    Returns
    -------
    op : StructureOperator
    offset : torch.Tensor, shape (N, C)
        ``f(0)``; for the analytic MLP operator it is *not* part of ``op`` (subtract
        it from the targets), for ``from_module`` it is ``op.offset`` already.
    how : str
        ``"analytic"`` or ``"autodiff"``.
    """
    from ..modules import from_module
    from ..structure import mlp

    f0 = output_at_zero(module, found.layout, X)
    C = f0.shape[1]
    act = _activation_name(found.activation)
    if found.is_whole_mlp and act is not None:
        op = mlp(X, act, bias=found.bias, n_outputs=C)
        sub = torch.arange(min(check_samples, X.shape[0]))
        ref = from_module(module, found.layout, X[sub], check=False).dense()
        mine = op.take(sub).dense().reshape(ref.shape)
        err = float((mine - ref).abs().max()) / max(float(ref.abs().max()), 1e-300)
        if err <= 1e-10:
            return op, f0, "analytic"
    N, p = X.shape[0], found.p
    need = N * C * p * p * 8 * 2
    if need > memory_budget:
        raise NormalFormError(
            f"`model`: the autodiff structure operator of {found.describe()} needs {need / 1e9:.1f} GB "
            f"(N·C·p² float64, twice), over the budget of {memory_budget / 1e9:.1f} GB; use --subset to analyse "
            "fewer samples"
        )
    op = from_module(module, found.layout, X, zgz="carry")
    return op, op.offset, "autodiff"
