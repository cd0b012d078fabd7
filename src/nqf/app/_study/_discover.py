"""Which units of a model are analysed.

Discovery is :func:`nqf.modules.find_units` (any ``nn.Module``: the layer order comes
from the traced forward, see docs/analyze.md); :func:`unit_listing` is what
``nqf analyze --list-units`` prints.  The structure operator of the chosen units is
built by :func:`nqf.app._study._operators.structure_of`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import nn

from ...errors import NormalFormError
from ...modules import ELEMENTWISE_MODULES, UnitLayout
from ...results import Result

__all__ = [
    "FoundUnits",
    "find_unit_layers",
    "choose_units",
    "unit_listing",
    "refusal_listing",
    "analysed_module",
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
    names : tuple of str
        Every layer the units span, in order (e.g. ``("conv", "readout")``).
    kind : str
        ``"mlp-hidden"`` or what :func:`nqf.modules.find_units` reports.
    layout : UnitLayout
    n_units, p : int
    activation : nn.Module or None
        The one elementwise activation between the two layers (hidden neurons, conv channels).
    is_whole_mlp : bool
        The model is exactly this two-layer MLP (analytic operator possible).
    module : nn.Module or None
        The module :attr:`layout` refers to when it is not the one searched: for experts held in an
        ``nn.ModuleList`` an equivalent copy with their parameters stacked
        (:meth:`nqf.modules.UnitCandidate.prepare`); set by :func:`choose_units`.  The analysis runs on it.
    pre_scale : float
        The scale of the batch norms folded between the layers (:attr:`nqf.modules.UnitCandidate.pre_scale`).
    """

    name: str
    kind: str
    layout: UnitLayout = field(repr=False)
    n_units: int
    p: int
    activation: nn.Module | None = field(default=None, repr=False)
    is_whole_mlp: bool = False
    bias: bool = False
    names: tuple[str, ...] = ()
    module: nn.Module | None = field(default=None, repr=False, compare=False)
    stacked: str | None = None
    pre_scale: float = 1.0

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
            "names": list(self.names),
            "stacked": self.stacked,
            "pre_scale": self.pre_scale,
            "layout": [
                {"param": s.param, "axis": s.axis, "size": s.size, "offset": s.offset} for s in self.layout.slices
            ],
        }

    def describe(self) -> str:
        act = "" if self.activation is None else f", activation {type(self.activation).__name__}"
        return f"{self.kind} `{self.name}`: {self.n_units} units of dimension p = {self.p}{act}"


def _unit_details(module: nn.Module, cand) -> tuple[nn.Module | None, bool, bool]:
    """Activation, whole-model flag and bias of hidden neurons or conv channels between two layers.

    The activation is the registry's module for the one activation between the layers
    (``cand.activation``: an ``nn.Tanh`` or a ``torch.tanh`` in the forward alike); an MLP is "whole" when
    its parameters are exactly those of the two layers (the analytic operator is still checked against
    ``from_module``, :mod:`nqf.app._study._operators`).  ``(None, False, False)`` for other kinds.
    """
    from ...structure import REGISTRY

    if cand.kind not in ("mlp-hidden", "conv-channels") or len(cand.names) != 2:
        return None, False, False
    first, second = (module.get_submodule(n) for n in cand.names)
    rec = None if cand.activation is None else REGISTRY.find(cand.activation)
    act = None if rec is None else rec.module()
    if not (isinstance(first, nn.Linear) and isinstance(second, nn.Linear)):
        return act, False, getattr(first, "bias", None) is not None
    own = {f"{n}.{k}" for n in cand.names for k, _ in module.get_submodule(n).named_parameters()}
    whole = act is not None and own == {k for k, _ in module.named_parameters()}
    return act, whole, first.bias is not None


def find_unit_layers(module: nn.Module) -> list[FoundUnits]:
    """Every layer of interchangeable units in ``module`` (possibly empty), as :func:`nqf.modules.find_units`
    finds them; hidden neurons of a Sequential also carry their activation (analytic operator when the model is
    exactly that two-layer MLP)."""
    from ...modules import find_units

    params = dict(module.named_parameters())
    out = []
    for cand in find_units(module):
        if cand.stacked is not None:  # the layout refers to the stacked copy: its sizes are the candidate's
            found = FoundUnits(cand.name, cand.kind, cand.layout, cand.n_units, cand.p, names=tuple(cand.names))
            out.append(dataclasses.replace(found, stacked=cand.stacked))
            continue
        layout = cand.layout.resolve(params)
        act, whole, bias = _unit_details(module, cand)
        out.append(
            FoundUnits(
                cand.name,
                cand.kind,
                layout,
                layout.m,
                layout.p(params),
                act,
                whole,
                bias,
                tuple(cand.names),
                pre_scale=cand.pre_scale,
            )
        )
    return out


def analysed_module(module: nn.Module, found: FoundUnits) -> nn.Module:
    """The module the analysis of ``found`` runs on: ``found.module`` when :func:`choose_units` laid the units
    out on an equivalent copy (stacked experts), else ``module`` itself."""
    return module if found.module is None else found.module


def unit_listing(module: nn.Module) -> list[str]:
    """Every layer of interchangeable units in ``module``, one line each (what ``nqf analyze --list-units`` prints).

    Each line is :meth:`nqf.modules.UnitCandidate.summary` (layer name(s), kind, number of units, ``p``,
    flags) followed by ``" — "`` and the candidate's description; empty when there is none.
    """
    from ...modules import find_units

    return [f"{c.summary()} — {c.description}" for c in find_units(module)]


def refusal_listing(module: nn.Module) -> list[str]:
    """Every layer of ``module`` that is not offered as units, one line each: ``refused `LAYER`: REASON``, the
    reason naming the layer that blocks, why, and what would work (:func:`nqf.modules.refused_units`)."""
    from ...modules import refused_units

    return [r.summary() for r in refused_units(module)]


def choose_units(module: nn.Module, name: str | None = None) -> FoundUnits:
    """The units to analyse: the layer named ``name``, or the only / first layer found (the outermost:
    experts come before the hidden neurons inside them).  For experts held in an ``nn.ModuleList`` the
    result's ``module`` is the equivalent stacked copy the analysis must run on (:func:`analysed_module`).

    Raises
    ------
    NormalFormError
        No interchangeable units (naming every layer that blocks and why), or no layer called ``name``.
    """
    layers = find_unit_layers(module)
    if not layers:
        blocked = "; ".join(refusal_listing(module))
        raise NormalFormError(
            f"`model`: no interchangeable units found in {type(module).__name__} (looked for hidden neurons "
            "between two nn.Linear layers with an elementwise activation, attention heads, conv channels and "
            "experts); the NQF describes layers of units that can be permuted" + (f"; {blocked}" if blocked else "")
        )
    if name is None:
        return _prepared(module, layers[0])
    for f in layers:
        if f.name == name or f.name.rstrip(".") == name:
            return _prepared(module, f)
    from ...modules import find_units

    found = "; ".join(c.summary() for c in find_units(module))
    raise NormalFormError(f"`units`: no layer of units called {name!r}; found {found}")


def _prepared(module: nn.Module, found: FoundUnits) -> FoundUnits:
    """``found`` with :attr:`FoundUnits.module` set when its layout refers to a stacked copy."""
    if found.stacked is None:
        return found
    from ...modules import stack_experts

    return dataclasses.replace(found, module=stack_experts(module, found.stacked))


def output_at_zero(module: nn.Module, layout: UnitLayout, X: torch.Tensor) -> torch.Tensor:
    """The model's output with every unit at zero, ``f(0)`` of shape ``(N, C)``."""
    import copy

    m = copy.deepcopy(module).eval()
    W = layout.get_W(m)
    layout.set_W(m, torch.zeros_like(W))
    with torch.no_grad():
        out = m(X)
    return out.reshape(out.shape[0], -1)
