"""Kinks inside ``torch.nn`` transformer layers, on the path that reads the units out.

``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` keep their feed-forward activation as an
attribute (``activation``: ``F.relu`` by default, a function, not a submodule), so a scan of the submodules
does not see it.  When the units are the attention heads, that ReLU acts after them, on the feed-forward
pre-activations ``linear1(…)`` of the fixed readout.  At zero unit weights those pre-activations are not zero
in general, so the model is smooth (C³) in a neighbourhood of ``W = 0`` unless one of them sits exactly at
the kink: :func:`kink_distances` measures ``min |linear1(…)|`` at zero unit weights on a probe batch.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..structure import REGISTRY
from ._autodiff import is_non_smooth_layer
from ._narrowed import evaluation_mode
from ._units import UnitLayout

__all__ = ["readout_kinks", "kink_distances"]

_LAYERS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


def _kink_name(act) -> str | None:
    """The registry name of a non-smooth activation (function or module), else None."""
    if isinstance(act, nn.Module):
        return REGISTRY.label(act) if is_non_smooth_layer(act) else None
    for rec in REGISTRY:
        if not rec.smooth and any(
            act is f for f in (rec.fn, getattr(F, rec.name, None), getattr(torch, rec.name, None))
        ):
            return rec.name
    return None


def readout_kinks(module: nn.Module) -> list[tuple[str, str]]:
    """``(layer name, activation)`` of every transformer layer of ``module`` whose feed-forward activation is
    not smooth (``F.relu`` as its ``activation`` attribute, or an ``nn.ReLU`` module there)."""
    out = []
    for name, sub in module.named_modules():
        if isinstance(sub, _LAYERS):
            kink = _kink_name(getattr(sub, "activation", None))
            if kink is not None:
                out.append((name, kink))
    return out


def kink_distances(module: nn.Module, layout: UnitLayout, X: torch.Tensor, n_probe: int = 256) -> dict[str, float]:
    """``min |pre-activation|`` of each layer of :func:`readout_kinks` at zero unit weights on ``X[:n_probe]``.

    Parameters
    ----------
    module : nn.Module
        The module ``layout`` refers to (its copy is put in eval mode, the units set to zero).
    layout : UnitLayout
    X : torch.Tensor
        Inputs of ``module``.

    Returns
    -------
    dict
        Layer name → distance of the nearest feed-forward pre-activation to the kink at 0 (0.0: on the kink).
    """
    kinks = readout_kinks(module)
    if not kinks:
        return {}
    net = copy.deepcopy(module).eval()
    layout.set_W(net, torch.zeros_like(layout.get_W(net)))
    dist = {name: float("inf") for name, _ in kinks}
    hooks = []
    for name, _ in kinks:

        def seen(_m, _args, out, name=name):
            dist[name] = min(dist[name], float(out.detach().abs().min()))

        hooks.append(net.get_submodule(f"{name}.linear1" if name else "linear1").register_forward_hook(seen))
    try:
        with evaluation_mode(), torch.no_grad():
            net(X[:n_probe])
    finally:
        for h in hooks:
            h.remove()
    return dist
