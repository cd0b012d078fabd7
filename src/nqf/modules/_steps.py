"""The steps allowed between a layer of units and its readout, for :mod:`nqf.modules._trace`.

A step acts on each unit's values alone: a registry activation (module, function or tensor method), dropout,
``nn.Identity``, a user's parameter-free leaf module (taken as elementwise), or a batch norm that in eval mode
multiplies every feature by the same scale with zero shift (a freshly initialised one: running mean 0, running
variance 1, weight 1, bias 0 gives ``× 1/√(1 + eps)``), which is folded.  Steps that move, pool or reshape the
axes are followed by :mod:`nqf.modules._axes`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn

from ..structure import REGISTRY, Activation, ActivationModule

__all__ = ["LAYERS", "module_step", "function_step", "batchnorm_affine", "uniform_batchnorm_scale"]

#: First or second layer of a chain.
LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)
_ELEMENTWISE = REGISTRY.module_classes() + (ActivationModule,)
PASS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.AlphaDropout, nn.Identity)
#: Pooling layers (over positions; a convolution's channels keep their axis).
POOL = (
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
)
NON_SMOOTH_POOL = (nn.MaxPool1d, nn.MaxPool2d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d)
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
#: Parameter-free layers that do not act feature by feature (never taken for an activation).
NOT_FEATUREWISE = (
    POOL
    + (nn.Flatten,)
    + (
        nn.Softmax,
        nn.LogSoftmax,
        nn.Softmin,
        nn.Softmax2d,
        nn.Unflatten,
        nn.Upsample,
        nn.PixelShuffle,
        nn.PixelUnshuffle,
        nn.ChannelShuffle,
        nn.Fold,
        nn.Unfold,
        nn.ZeroPad2d,
        nn.ConstantPad1d,
        nn.ConstantPad2d,
        nn.ReflectionPad1d,
        nn.ReplicationPad1d,
        nn.AvgPool3d,
        nn.MaxPool3d,
        nn.LPPool1d,
        nn.LPPool2d,
        nn.LayerNorm,
        nn.GroupNorm,
        nn.LocalResponseNorm,
        nn.InstanceNorm1d,
        nn.InstanceNorm2d,
    )
)

#: Activations of the registry that torch has under their own name (``torch.tanh``, ``torch.relu``, …).
_TORCH_NAMED = {a.name: a for a in REGISTRY if getattr(torch, a.name, None) is a.fn}
#: Activation functions of the registry as fx records them (``torch.tanh``, ``F.gelu``, …), with the
#: ``torch.nn.functional`` twins of the torch-named ones (``F.tanh``, ``F.relu``).
_ACT_FUNCTIONS: dict = {a.fn: a for a in REGISTRY}
_ACT_FUNCTIONS.update({getattr(F, n): a for n, a in _TORCH_NAMED.items() if callable(getattr(F, n, None))})
#: Tensor methods computing a registry activation (``x.tanh()``, ``x.sin()``, …).
_ACT_METHODS = {n: a for n, a in _TORCH_NAMED.items() if callable(getattr(torch.Tensor, n, None))}
_PASS_FUNCTIONS = (F.dropout, F.dropout1d, F.dropout2d, F.alpha_dropout)
_PASS_METHODS = ("contiguous",)
#: Multiplication or division by a fixed number: the same scale for every unit.
_SCALE = (operator.mul, operator.truediv, torch.mul, torch.div)


@dataclass(frozen=True)
class Step:
    """One step between the two layers of a chain.

    ``role``: ``"act"`` (a registry activation, module or function), ``"custom"`` (a parameter-free leaf
    module taken as elementwise), ``"pass"`` (dropout, identity, a transpose), ``"pool"`` (pooling, a mean or
    sum over other axes, flatten, view) or ``"scale"`` (a batch norm folded as one fixed scale).
    ``activation``: the registry record when the step computes exactly it (None for a function called
    with extra arguments); ``non_smooth``: known not three times differentiable at zero.
    """

    label: str
    role: str
    module: nn.Module | None = None
    activation: Activation | None = None
    non_smooth: bool = False


def custom_activation(mod: nn.Module) -> bool:
    """A leaf module with no parameters or buffers, not a known shape/mixing layer: taken as elementwise."""
    return (
        not isinstance(mod, NOT_FEATUREWISE)
        and next(mod.parameters(), None) is None
        and next(mod.buffers(), None) is None
        and next(mod.children(), None) is None
    )


def batchnorm_affine(bn: nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(scale, shift)`` per feature of a batch norm in eval mode (``y = scale · x + shift``), float64; None
    when it has no running statistics (it then normalises with the batch's own statistics even in eval mode)."""
    mean, var = getattr(bn, "running_mean", None), getattr(bn, "running_var", None)
    if not isinstance(mean, torch.Tensor) or not isinstance(var, torch.Tensor):
        return None
    eps = getattr(bn, "eps", 0.0)
    assert isinstance(eps, float)
    with torch.no_grad():
        scale = 1.0 / torch.sqrt(var.detach().double().cpu() + eps)
        if isinstance(bn.weight, torch.Tensor):
            scale = scale * bn.weight.detach().double().cpu()
        shift = -mean.detach().double().cpu() * scale
        if isinstance(bn.bias, torch.Tensor):
            shift = shift + bn.bias.detach().double().cpu()
    return scale, shift


def uniform_batchnorm_scale(bn: nn.Module) -> float | None:
    """The one scale a batch norm applies in eval mode when every feature gets the same non-zero scale and a
    zero shift (it is then a fixed multiple of the identity, folded into the units' pre-activations); else None."""
    aff = batchnorm_affine(bn)
    if aff is None or aff[0].numel() == 0:
        return None
    scale, shift = aff
    s0 = float(scale[0])
    if s0 == 0.0 or bool((shift != 0).any()) or not bool(((scale - s0).abs() <= 1e-12 * abs(s0)).all()):
        return None
    return s0


def module_step(mod: nn.Module) -> Step | None:
    """The step a module makes between two layers without moving the axes (None: not such a step)."""
    name = type(mod).__name__
    if isinstance(mod, _ELEMENTWISE):
        rec = REGISTRY.of_module(mod)
        label = f"{name}({mod.name})" if isinstance(mod, ActivationModule) else name
        return Step(label, "act", mod, rec, rec is not None and not rec.smooth)
    if isinstance(mod, PASS):
        return Step(name, "pass", mod)
    if isinstance(mod, BATCH_NORMS):
        s = uniform_batchnorm_scale(mod)
        return None if s is None else Step(f"{name} (eval: × {s:.6g}, folded)", "scale", mod)
    if custom_activation(mod):
        return Step(f"{name} (taken as elementwise)", "custom", mod)
    return None


def function_label(node: fx.Node) -> str:
    """How a call in the forward reads to people: ``torch.tanh``, ``F.gelu``, ``x.mean()``."""
    fn = node.target
    if node.op == "call_method":
        return f"x.{fn}()"
    label = f"{getattr(fn, '__module__', None) or 'torch'}.{getattr(fn, '__name__', fn)}"
    for a, b in (("torch.nn.functional.", "F."), ("torch._C._nn.", "F."), ("torch._C._VariableFunctions.", "torch.")):
        label = label.replace(a, b)
    return label.replace("_operator.", "operator.")


def function_step(node: fx.Node) -> Step | None:
    """The elementwise step a function or tensor method makes (None: not one; axes are :mod:`._axes`'s)."""
    fn = node.target
    extra = len(node.args) > 1 or any(k != "inplace" for k in node.kwargs)
    label = function_label(node)
    if node.op == "call_method":
        if isinstance(fn, str) and fn in _ACT_METHODS:
            rec = _ACT_METHODS[fn]
            return Step(label, "act", None, None if extra else rec, not rec.smooth)
        return Step(label, "pass") if fn in _PASS_METHODS else None
    if fn in _ACT_FUNCTIONS:
        rec = _ACT_FUNCTIONS[fn]
        return Step(label + (" (with arguments)" if extra else ""), "act", None, None if extra else rec, not rec.smooth)
    if fn in _PASS_FUNCTIONS:
        return Step(label, "pass")
    numbers = [a for a in node.args if isinstance(a, (int, float)) and not isinstance(a, bool)]
    if fn in _SCALE and len(node.args) == 2 and len(numbers) == 1 and not node.kwargs:
        if fn in (operator.mul, torch.mul) or isinstance(node.args[1], (int, float)):
            return Step(f"× {numbers[0]:g}" if fn in (operator.mul, torch.mul) else f"/ {numbers[0]:g}", "scale")
    return None
