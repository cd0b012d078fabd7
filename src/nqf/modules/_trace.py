"""The order of a module's layers, for :func:`nqf.modules.find_units`: two layers joined in the dataflow.

:func:`layer_chains` lists every pair *layer 1 → (elementwise / pool / flatten / dropout) … → layer 2*
of a module, where layer 1 is an ``nn.Linear`` / ``nn.Conv1d`` / ``nn.Conv2d`` and layer 2 an
``nn.Linear`` or convolution.  The order comes from the dataflow when it can:

* **Traced** (``torch.fx.symbolic_trace``; the ``torch.nn`` layers, modules with a ``units`` layout
  and parameter-free leaf modules are kept whole): the output of layer 1 must flow through a
  single path of allowed steps into layer 2, each step reading only the previous value (shape
  queries such as ``x.size(0)`` aside), and nothing else may read the intermediate values (a
  hidden activation that is also returned, added or read by another layer breaks the chain).
  Steps: the activation modules of :data:`~nqf.structure.REGISTRY` and their functions
  (``torch.tanh``, ``F.gelu``, ``x.tanh()``, …), dropout, ``nn.Identity``; between a
  convolution and its readout also pooling and ``flatten`` / ``view`` / ``reshape``.  Each of the
  two layers must be called exactly once (a shared layer is not offered).
* **Registration order** where tracing fails (data-dependent control flow): the direct children
  of that module are read in the order they were registered, as the layers of an
  ``nn.Sequential`` (where that order *is* the call order); outside a Sequential the chain is
  marked ``verified=False`` (:func:`~nqf.modules.from_module` still checks the symmetry
  numerically).  Its children are then traced (or read) one by one.
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.node import map_arg

from ..structure import REGISTRY, Activation, ActivationModule, activation_of_module, module_classes

__all__ = ["layer_chains"]

#: First or second layer of a chain.
LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)
_ELEMENTWISE = module_classes() + (ActivationModule,)
PASS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.AlphaDropout, nn.Identity)
POOL = (
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.Flatten,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
)
_NON_SMOOTH_POOL = (nn.MaxPool1d, nn.MaxPool2d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d)
#: Parameter-free layers that do not act feature by feature (never taken for an activation).
NOT_FEATUREWISE = POOL + (
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
_POOL_FUNCTIONS = (
    torch.flatten,
    F.avg_pool1d,
    F.avg_pool2d,
    F.adaptive_avg_pool1d,
    F.adaptive_avg_pool2d,
    F.max_pool1d,
    F.max_pool2d,
    F.adaptive_max_pool1d,
    F.adaptive_max_pool2d,
)
_NON_SMOOTH_POOL_FUNCTIONS = (F.max_pool1d, F.max_pool2d, F.adaptive_max_pool1d, F.adaptive_max_pool2d)
_POOL_METHODS = ("flatten", "view", "reshape")
_PASS_METHODS = ("contiguous",)
_SHAPE_ATTRS = ("shape", "ndim", "dtype", "device")
_SHAPE_ARITHMETIC = (operator.getitem, operator.mul, operator.add, operator.sub, operator.floordiv)


@dataclass(frozen=True)
class Step:
    """One step between the two layers of a chain.

    ``role``: ``"act"`` (a registry activation, module or function), ``"custom"`` (a parameter-free leaf
    module taken as elementwise), ``"pass"`` (dropout, identity) or ``"pool"`` (pooling, flatten, view).
    ``activation``: the registry record when the step computes exactly it (None for a function called
    with extra arguments); ``non_smooth``: known not three times differentiable at zero.
    """

    label: str
    role: str
    module: nn.Module | None = None
    activation: Activation | None = None
    non_smooth: bool = False


@dataclass(frozen=True)
class Chain:
    """Layer ``first`` feeds, through ``steps`` only, into layer ``second`` (names in the root module)."""

    first: str
    second: str
    steps: tuple[Step, ...]
    verified: bool = True


def _custom_activation(mod: nn.Module) -> bool:
    """A leaf module with no parameters or buffers, not a known shape/mixing layer: taken as elementwise."""
    return (
        not isinstance(mod, NOT_FEATUREWISE)
        and next(mod.parameters(), None) is None
        and next(mod.buffers(), None) is None
        and next(mod.children(), None) is None
    )


def module_step(mod: nn.Module, conv: bool) -> Step | None:
    """The step a module makes between two layers (None: not allowed there)."""
    name = type(mod).__name__
    if isinstance(mod, _ELEMENTWISE):
        rec = activation_of_module(mod)
        label = f"{name}({mod.name})" if isinstance(mod, ActivationModule) else name
        return Step(label, "act", mod, rec, rec is not None and not rec.smooth)
    if isinstance(mod, PASS):
        return Step(name, "pass", mod)
    if isinstance(mod, POOL):
        return Step(name, "pool", mod, None, isinstance(mod, _NON_SMOOTH_POOL)) if conv else None
    if _custom_activation(mod):
        return Step(f"{name} (taken as elementwise)", "custom", mod)
    return None


#: What probing a user's module may raise (a failing property, an op fx cannot trace): the probe says "no".
_PROBE_ERRORS = (AttributeError, RuntimeError, TypeError, ValueError, NotImplementedError, KeyError, IndexError)


def _has_units(mod: nn.Module) -> bool:
    try:
        from ._units import UnitLayout

        return isinstance(getattr(mod, "units", None), UnitLayout)
    except _PROBE_ERRORS:  # a property that fails on this instance
        return False


def _builtin(mod: nn.Module) -> bool:
    """A ``torch.nn`` layer (kept whole: its inside is not searched), not a container."""
    containers = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
    return type(mod).__module__.startswith("torch.") and not isinstance(mod, containers)


class _Tracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return _builtin(m) or _has_units(m) or (_custom_activation(m) and not isinstance(m, nn.Sequential))


def _trace(mod: nn.Module) -> fx.Graph | None:
    try:
        return _Tracer().trace(mod)
    except (*_PROBE_ERRORS, AssertionError):  # data-dependent control flow (fx's TraceError), unsupported ops, …
        return None


def _node_args(node: fx.Node) -> list[fx.Node]:
    found: list[fx.Node] = []
    map_arg((node.args, node.kwargs), lambda n: found.append(n) or n)
    return found


def _is_shape_query(node: fx.Node) -> bool:
    if node.op == "call_method" and node.target in ("size", "dim"):
        return True
    return node.op == "call_function" and node.target is getattr and node.args[1] in _SHAPE_ATTRS


def _is_shape_value(node: fx.Node, depth: int = 0) -> bool:
    """An integer derived from shapes (``x.size(0)``, ``x.shape[1] * 2``), not a tensor value."""
    if _is_shape_query(node):
        return True
    if depth > 8 or node.op != "call_function" or node.target not in _SHAPE_ARITHMETIC:
        return False
    return all(_is_shape_value(a, depth + 1) for a in _node_args(node))


def _reads_only(node: fx.Node, value: fx.Node) -> bool:
    """``node`` reads ``value`` as its first argument and no other tensor."""
    if not node.args or node.args[0] is not value:
        return False
    return all(a is value or _is_shape_value(a) for a in _node_args(node))


def _function_step(node: fx.Node, conv: bool) -> Step | None:
    fn = node.target
    extra = len(node.args) > 1 or any(k != "inplace" for k in node.kwargs)
    label = f"{getattr(fn, '__module__', None) or 'torch'}.{getattr(fn, '__name__', fn)}".replace(
        "torch.nn.functional.", "F."
    )
    if node.op == "call_method":
        label = f"x.{fn}()"
        if isinstance(fn, str) and fn in _ACT_METHODS:
            rec = _ACT_METHODS[fn]
            return Step(label, "act", None, None if extra else rec, not rec.smooth)
        if fn in _PASS_METHODS:
            return Step(label, "pass")
        return Step(label, "pool") if conv and fn in _POOL_METHODS else None
    label = label.replace("torch._C._nn.", "F.").replace("torch._C._VariableFunctions.", "torch.")
    if fn in _ACT_FUNCTIONS:
        rec = _ACT_FUNCTIONS[fn]
        return Step(label + (" (with arguments)" if extra else ""), "act", None, None if extra else rec, not rec.smooth)
    if fn in _PASS_FUNCTIONS:
        return Step(label, "pass")
    if conv and fn in _POOL_FUNCTIONS:
        return Step(label, "pool", None, None, fn in _NON_SMOOTH_POOL_FUNCTIONS)
    return None


def _follow(start: fx.Node, mods: dict, calls: Counter) -> tuple[str, tuple[Step, ...]] | None:
    """From the output of layer ``start``: the second layer and the steps to it, or None."""
    conv = not isinstance(mods[start.target], nn.Linear)
    steps: list[Step] = []
    cur = start
    while True:
        users = [u for u in cur.users if not _is_shape_query(u)]
        if len(users) != 1 or not _reads_only(users[0], cur):
            return None
        nxt = users[0]
        if nxt.op == "call_module":
            mod = mods.get(nxt.target)
            if mod is None:
                return None
            if isinstance(mod, LAYERS):
                return (str(nxt.target), tuple(steps)) if calls[nxt.target] == 1 and len(nxt.args) == 1 else None
            step = module_step(mod, conv)
        elif nxt.op in ("call_function", "call_method"):
            step = _function_step(nxt, conv)
        else:
            return None
        if step is None:
            return None
        steps.append(step)
        cur = nxt


def _graph_chains(graph: fx.Graph, mod: nn.Module, prefix: str) -> list[Chain]:
    mods = dict(mod.named_modules())
    calls = Counter(n.target for n in graph.nodes if n.op == "call_module")
    out = []
    for node in graph.nodes:
        if node.op != "call_module" or not isinstance(mods.get(node.target), LAYERS) or calls[node.target] != 1:
            continue
        hit = _follow(node, mods, calls)
        if hit is not None:
            out.append(Chain(_join(prefix, str(node.target)), _join(prefix, hit[0]), hit[1], True))
    return out


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _registration_chains(mod: nn.Module, prefix: str) -> list[Chain]:
    """Chains among the direct children of ``mod``, in registration order."""
    children = list(mod.named_children())
    verified = isinstance(mod, nn.Sequential)
    out = []
    for i, (n1, first) in enumerate(children):
        if not isinstance(first, LAYERS):
            continue
        conv = not isinstance(first, nn.Linear)
        steps, j = [], i + 1
        while j < len(children) and (step := module_step(children[j][1], conv)) is not None:
            steps.append(step)
            j += 1
        if j < len(children) and isinstance(children[j][1], LAYERS):
            out.append(Chain(_join(prefix, n1), _join(prefix, children[j][0]), tuple(steps), verified))
    return out


def layer_chains(module: nn.Module, prefix: str = "") -> list[Chain]:
    """Every chain *layer → allowed steps → layer* in ``module`` (see the module docstring).

    Modules with a ``units`` layout and ``torch.nn`` layers other than containers (e.g. a
    ``TransformerEncoderLayer``) are not searched inside.
    """
    if _has_units(module) or _builtin(module):
        return []
    graph = _trace(module)
    if graph is not None:
        return _graph_chains(graph, module, prefix)
    out = _registration_chains(module, prefix)
    for name, child in module.named_children():
        out.extend(layer_chains(child, _join(prefix, name)))
    return out
