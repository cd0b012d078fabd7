"""The order of a module's layers, for :func:`nqf.modules.find_units`: two layers joined in the dataflow.

:func:`trace_layers` lists every pair *layer 1 → allowed steps … → layer 2* of a module, where layer 1 is an
``nn.Linear`` / ``nn.Conv1d`` / ``nn.Conv2d`` and layer 2 an ``nn.Linear`` or convolution, and, for every
layer 1 whose path stops before a readout, where and why it stops (a :class:`Block`).  The order comes from
the dataflow when it can:

* **Traced** (``torch.fx``; the ``torch.nn`` layers, modules with a ``units`` layout and parameter-free leaf
  modules are kept whole): the output of layer 1 must flow through a single path of allowed steps into
  layer 2, each step reading only the previous value (shape queries such as ``x.size(0)`` aside), and
  nothing else may read the intermediate values (a hidden activation that is also returned, added or read by
  another layer breaks the chain).  Steps (:mod:`nqf.modules._steps`): the activations of
  :data:`~nqf.structure.REGISTRY` as modules, functions (``torch.tanh``, ``F.gelu``) or methods
  (``x.tanh()``), dropout, ``nn.Identity``, a batch norm that is one fixed scale in eval mode; and
  (:mod:`nqf.modules._axes`) means and sums over other axes than the units' (``h.mean(dim=-1)``), transposes
  and permutes, selection along other axes, pooling over a convolution's positions, and flattening the
  units' axis with the axes after it (``nn.Flatten``, ``x.view(x.size(0), -1)``).  Layer 2 must read the
  units' axis (the last for ``nn.Linear``, the channels for a convolution).  Each of the two layers must be
  called exactly once (a shared layer is not offered).
* **Registration order** where tracing fails (data-dependent control flow): the direct children of that
  module are read in the order they were registered, as the layers of an ``nn.Sequential`` (where that
  order *is* the call order); outside a Sequential the chain is marked ``verified=False``
  (:func:`~nqf.modules.from_module` still checks the symmetry numerically).  Its children are then traced (or
  read) one by one.
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass

import torch
from torch import fx, nn
from torch.fx.node import map_arg

from ._axes import UnitAxis, advance, node_rank
from ._steps import LAYERS, NON_SMOOTH_POOL, POOL, Step, custom_activation, function_label, function_step, module_step

__all__ = ["trace_layers", "layer_chains", "trace_graph", "call_label"]

_SHAPE_ATTRS = ("shape", "ndim", "dtype", "device")
_SHAPE_ARITHMETIC = (operator.getitem, operator.mul, operator.add, operator.sub, operator.floordiv)
_ADD = (operator.add, operator.sub, operator.iadd, torch.add, torch.sub)
_SCALE = (operator.mul, operator.truediv, torch.mul, torch.div)


@dataclass(frozen=True)
class Chain:
    """Layer ``first`` feeds, through ``steps`` only, into layer ``second`` (names in the root module);
    ``merged``: axes after the units' were flattened into it (each unit owns a block of ``second``'s inputs)."""

    first: str
    second: str
    steps: tuple[Step, ...]
    verified: bool = True
    merged: bool = False


@dataclass(frozen=True)
class Block:
    """The path from the outputs of layer ``first`` stops at ``where`` (for people: ``LayerNorm `1```).

    ``kind``: ``"module"`` (a layer that is not an allowed step), ``"function"`` (a call that is not one),
    ``"axes"`` (a step that pools over / cannot follow the units' axis; ``why`` says how), ``"readers"``
    (several operations read the values), ``"combine"`` (an operation also reads another value, ``other``),
    ``"shared"`` (the next layer is called more than once), ``"readout-axis"`` (the next layer does not read
    the units' axis) or ``"output"`` (the values are the module's output: ``first`` is a readout).
    ``module``: the blocking module's name; ``downstream``: the first layer with parameters after the stop
    (None: nothing reads the values out, the layer is itself a readout); ``readout``: for ``"combine"``, the
    layer that reads the combined value through elementwise steps only.
    """

    first: str
    steps: tuple[Step, ...]
    where: str
    kind: str
    module: str | None = None
    why: str = ""
    downstream: str | None = None
    other: str | None = None
    readout: str | None = None


def _has_units(mod: nn.Module) -> bool:
    try:
        from ._units import UnitLayout

        return isinstance(getattr(mod, "units", None), UnitLayout)
    except (AttributeError, RuntimeError, TypeError, ValueError, NotImplementedError, KeyError, IndexError):
        return False  # a property that fails on this instance


def _builtin(mod: nn.Module) -> bool:
    """A ``torch.nn`` layer (kept whole: its inside is not searched), not a container."""
    containers = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
    return type(mod).__module__.startswith("torch.") and not isinstance(mod, containers)


class _Tracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return _builtin(m) or _has_units(m) or (custom_activation(m) and not isinstance(m, nn.Sequential))


#: What probing a user's module may raise (a failing property, an op fx cannot trace): the probe says "no".
_PROBE_ERRORS = (AttributeError, RuntimeError, TypeError, ValueError, NotImplementedError, KeyError, IndexError)


def trace_graph(mod: nn.Module) -> fx.Graph | None:
    """The fx graph of ``mod``'s forward (``torch.nn`` layers kept whole), or None when it cannot be traced."""
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
    """``node`` reads ``value`` as its first argument (or as ``c * value``) and no other tensor."""
    scaled = node.target in _SCALE and len(node.args) == 2 and isinstance(node.args[0], (int, float))
    if not node.args or node.args[0] is not value and not (scaled and node.args[1] is value):
        return False
    return all(a is value or _is_shape_value(a) for a in _node_args(node))


def _show(a) -> str:
    if isinstance(a, fx.Node):
        return "N" if _is_shape_value(a) else "x"
    if isinstance(a, slice):
        return ":" if a == slice(None) else f"{'' if a.start is None else a.start}:{'' if a.stop is None else a.stop}"
    if isinstance(a, tuple):
        return ", ".join(_show(b) for b in a)
    return "..." if a is Ellipsis else repr(a)


_SYMBOLS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.iadd: "+=", operator.truediv: "/"}


def _operand(a) -> str:
    if not isinstance(a, fx.Node):
        return repr(a)
    return f"`{a.target}`" if a.op in ("call_module", "placeholder") else f"`{a.name}`"


def call_label(node: fx.Node) -> str:
    """A call as people read it: ``x.mean(dim=-1)``, ``torch.mean(x, 2)``, ``x[:, -1]``, `` `x` + `tanh` ``."""
    if node.op == "call_function" and node.target is operator.getitem:
        return f"x[{_show(node.args[1])}]"
    if node.op == "call_function" and node.target in _SYMBOLS and len(node.args) == 2:
        return f"{_operand(node.args[0])} {_SYMBOLS[node.target]} {_operand(node.args[1])}"
    args = [_show(a) for a in node.args[1:]] + [f"{k}={_show(v)}" for k, v in node.kwargs.items()]
    if node.op == "call_method":
        return f"x.{node.target}({', '.join(args)})"
    base = function_label(node)
    return f"{base}(x{', ' if args else ''}{', '.join(args)})" if args else base


def _other(nxt: fx.Node, cur: fx.Node) -> str:
    others = [a for a in _node_args(nxt) if a is not cur and not _is_shape_value(a)]
    if not others:
        return "another value"
    return _operand(others[0])


def _downstream(node: fx.Node, mods: dict, prefix: str, *, include: bool = False) -> str | None:
    """The first layer with parameters that reads (directly or not) the value of ``node``."""
    seen, todo = set(), [node] if include else list(node.users)
    while todo:
        n = todo.pop(0)
        if n in seen:
            continue
        seen.add(n)
        mod = mods.get(n.target) if n.op == "call_module" else None
        if mod is not None and next(mod.parameters(), None) is not None:
            return _join(prefix, str(n.target))
        todo.extend(n.users)
    return None


def _combined_readout(nxt: fx.Node, mods: dict, prefix: str) -> str | None:
    """For a sum ``a + b``: the layer that reads it through elementwise steps only, else None."""
    if nxt.op != "call_function" or nxt.target not in _ADD:
        return None
    cur = nxt
    for _ in range(32):
        users = list(cur.users)
        if len(users) != 1:
            return None
        cur = users[0]
        mod = mods.get(cur.target) if cur.op == "call_module" else None
        if isinstance(mod, LAYERS):
            return _join(prefix, str(cur.target))
        ok = module_step(mod) if mod is not None else function_step(cur) if cur.op != "output" else None
        if ok is None:
            return None
    return None


def _stop(first: str, steps, nxt: fx.Node, kind: str, mods: dict, prefix: str, **kw) -> Block:
    mod = mods.get(nxt.target) if nxt.op == "call_module" else None
    name = _join(prefix, str(nxt.target)) if mod is not None else None
    where = f"{type(mod).__name__} `{name}`" if mod is not None else call_label(nxt)
    own = mod is not None and next(mod.parameters(), None) is not None
    down = name if own else _downstream(nxt, mods, prefix)
    return Block(first, tuple(steps), where, kind, name, downstream=down, **kw)


def _arrive(first: str, steps, nxt: fx.Node, ax: UnitAxis, mods: dict, calls: Counter, prefix: str):
    """The chain into layer ``nxt``, or the Block saying why it is not one."""
    mod = mods[nxt.target]
    if calls[nxt.target] != 1 or len(nxt.args) != 1 or nxt.kwargs:
        why = (
            f"called {calls[nxt.target]} times (shared weights)"
            if calls[nxt.target] != 1
            else "called with extra inputs"
        )
        return _stop(first, steps, nxt, "shared", mods, prefix, why=why)
    want = -1 if isinstance(mod, nn.Linear) else -2 if isinstance(mod, nn.Conv1d) else -3
    if ax.pos != want or (ax.merged and not isinstance(mod, nn.Linear)):
        why = f"it reads axis {want} and the units are on axis {ax.pos}"
        return _stop(first, steps, nxt, "readout-axis", mods, prefix, why=why)
    return Chain(first, _join(prefix, str(nxt.target)), tuple(steps), True, ax.merged)


def _next_step(nxt: fx.Node, ax: UnitAxis, mods: dict):
    """``(step, new axis)`` of one node after the units, or ``(kind, why)`` strings when it stops there."""
    mod = mods.get(nxt.target) if nxt.op == "call_module" else None
    if nxt.op == "call_module":
        if mod is None:
            return "module", ""
        step = module_step(mod)
        if step is not None:
            return step, ax
        adv = advance(ax, nxt, mod, type(mod).__name__)
        label = type(mod).__name__
    elif nxt.op in ("call_function", "call_method"):
        step = function_step(nxt)
        if step is not None:
            return step, ax
        label = call_label(nxt)
        adv = advance(ax, nxt, None, label)
    else:
        return "function", ""
    if adv is None:
        return ("module" if mod is not None else "function"), ""
    new, role, why, non_smooth = adv
    if new is None:
        return "axes", why
    return Step(label + why, role, mod, None, non_smooth), new


def _start_axis(start: fx.Node, mods: dict) -> UnitAxis:
    layer = mods[start.target]
    rank = node_rank(start, mods)
    if isinstance(layer, nn.Linear):
        return UnitAxis(-1, rank)
    return UnitAxis(-2 if isinstance(layer, nn.Conv1d) else -3, rank, spatial=True)


def _follow(start: fx.Node, mods: dict, calls: Counter, prefix: str) -> Chain | Block:
    """From the output of layer ``start``: the chain to the next layer, or where and why the path stops."""
    first = _join(prefix, str(start.target))
    ax, steps, cur = _start_axis(start, mods), [], start
    while True:
        users = [u for u in cur.users if not _is_shape_query(u)]
        if len(users) != 1:
            if not users or all(u.op == "output" for u in users):
                return Block(first, tuple(steps), "the module's output", "output")
            where = ", ".join(call_label(u) if u.op != "call_module" else f"`{u.target}`" for u in users)
            down = _downstream(cur, mods, prefix)
            return Block(first, tuple(steps), where, "readers", downstream=down, why=f"{len(users)} operations")
        nxt = users[0]
        if nxt.op == "output":
            return Block(first, tuple(steps), "the module's output", "output")
        if not _reads_only(nxt, cur):
            other, readout = _other(nxt, cur), _combined_readout(nxt, mods, prefix)
            return _stop(first, steps, nxt, "combine", mods, prefix, other=other, readout=readout)
        if nxt.op == "call_module" and isinstance(mods.get(nxt.target), LAYERS):
            return _arrive(first, steps, nxt, ax, mods, calls, prefix)
        step, new = _next_step(nxt, ax, mods)
        if isinstance(step, str) or isinstance(new, str):
            return _stop(first, steps, nxt, str(step), mods, prefix, why=str(new))
        steps.append(step)
        ax, cur = new, nxt


def _graph_layers(graph: fx.Graph, mod: nn.Module, prefix: str) -> tuple[list[Chain], list[Block]]:
    mods = dict(mod.named_modules())
    calls = Counter(n.target for n in graph.nodes if n.op == "call_module")
    chains, blocks = [], []
    for node in graph.nodes:
        if node.op != "call_module" or not isinstance(mods.get(node.target), LAYERS) or calls[node.target] != 1:
            continue
        hit = _follow(node, mods, calls, prefix)
        (chains if isinstance(hit, Chain) else blocks).append(hit)
    return chains, blocks


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _registered_step(mod: nn.Module, conv: bool) -> Step | None:
    """A step between registered children: :func:`module_step`, and after a convolution pooling or flatten."""
    step = module_step(mod)
    if step is None and conv and isinstance(mod, (*POOL, nn.Flatten)):
        return Step(type(mod).__name__, "pool", mod, None, isinstance(mod, NON_SMOOTH_POOL))
    return step


def _registration_layers(mod: nn.Module, prefix: str) -> tuple[list[Chain], list[Block]]:
    """Chains among the direct children of ``mod``, in registration order (and where each stops)."""
    children = list(mod.named_children())
    verified = isinstance(mod, nn.Sequential)
    chains, blocks = [], []
    for i, (n1, first) in enumerate(children):
        if not isinstance(first, LAYERS):
            continue
        conv = not isinstance(first, nn.Linear)
        steps, j = [], i + 1
        while j < len(children) and (step := _registered_step(children[j][1], conv)) is not None:
            steps.append(step)
            j += 1
        if j < len(children) and isinstance(children[j][1], LAYERS):
            merged = any(isinstance(st.module, nn.Flatten) for st in steps)
            chains.append(Chain(_join(prefix, n1), _join(prefix, children[j][0]), tuple(steps), verified, merged))
        elif j < len(children):
            name, child = _join(prefix, children[j][0]), children[j][1]
            later = [c for c in children[j:] if next(c[1].parameters(), None) is not None]
            down = _join(prefix, later[0][0]) if later else None
            where = f"{type(child).__name__} `{name}`"
            blocks.append(Block(_join(prefix, n1), tuple(steps), where, "module", name, downstream=down))
    return chains, blocks


def trace_layers(module: nn.Module, prefix: str = "") -> tuple[list[Chain], list[Block]]:
    """Every chain *layer → allowed steps → layer* in ``module`` (see the module docstring), and a
    :class:`Block` for every unit layer whose path stops elsewhere.

    Modules with a ``units`` layout and ``torch.nn`` layers other than containers (e.g. a
    ``TransformerEncoderLayer``) are not searched inside.
    """
    if _has_units(module) or _builtin(module):
        return [], []
    graph = trace_graph(module)
    if graph is not None:
        return _graph_layers(graph, module, prefix)
    chains, blocks = _registration_layers(module, prefix)
    for name, child in module.named_children():
        more = trace_layers(child, _join(prefix, name))
        chains.extend(more[0])
        blocks.extend(more[1])
    return chains, blocks


def layer_chains(module: nn.Module, prefix: str = "") -> list[Chain]:
    """The chains of :func:`trace_layers`."""
    return trace_layers(module, prefix)[0]
