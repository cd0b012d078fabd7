r"""Parallel experts combined by a gate, in any module: ``f(x) = Σ_e g_e(x) expert_e(x)``.

A hand-written mixture of experts keeps its ``E`` experts in an ``nn.ModuleList`` / ``nn.ModuleDict`` and a
gate ``nn.Linear(D, E)``.  Expert ``e`` with gate row ``e`` is one unit: permuting the experts together with
the gate's rows leaves the function unchanged.  :func:`find_experts` recognises it structurally in the traced
forward (:func:`nqf.modules._trace.trace_graph`):

* a ModuleList / ModuleDict of at least two children with the same structure (module classes, parameter and
  buffer names and shapes), none of their parameters shared, each expert called;
* a ``nn.Linear`` outside it with ``out_features = E``, called once, whose output reaches, for every expert,
  a value that expert's output reaches too (the combination), while no expert reads the gate.

:func:`~nqf.modules.from_module`'s permutation check is the final judge.  A unit's parameters sit in ``E``
different tensors, while a :class:`~nqf.modules.UnitLayout` slices one tensor per piece along a unit axis;
so the units are laid out on an equivalent copy of the module, :func:`stack_experts`, in which the container
is replaced by an :class:`ExpertStack` holding every expert parameter stacked along a new leading axis
(``experts.stacked.0.weight`` of shape ``(E, 16, 64)``; expert ``e`` is index ``e``).  The copy computes the
same function (each expert runs its own forward on its slice of the stacked tensors) and is what
:meth:`nqf.modules.UnitCandidate.prepare` returns.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import fx, nn
from torch.func import functional_call

from ..errors import InvalidTypeError
from ._units import UnitLayout, UnitSlice

__all__ = ["ExpertStack", "stack_experts", "find_experts"]


def _set(owner: nn.Module, name: str, value: torch.Tensor, *, buffer: bool) -> None:
    mod_name, _, leaf = name.rpartition(".")
    mod = owner.get_submodule(mod_name) if mod_name else owner
    if buffer:
        mod.register_buffer(leaf, value)
    else:
        setattr(mod, leaf, nn.Parameter(value, requires_grad=True))


class _ExpertView:
    """Expert ``e`` of an :class:`ExpertStack`, callable like the original expert module."""

    def __init__(self, stack: ExpertStack, e: int):
        self.stack, self.e = stack, e

    def __call__(self, *args, **kwargs):
        return self.stack.run(self.e, *args, **kwargs)

    forward = __call__


class ExpertStack(nn.Module):
    """Identical experts with each parameter and buffer stacked along a new leading axis (expert ``e`` at index
    ``e``), used like the ``nn.ModuleList`` / ``nn.ModuleDict`` they came from: ``len``, iteration, indexing,
    ``keys`` / ``values`` / ``items`` give callables that run expert ``e``'s forward on its slices.

    Parameters
    ----------
    experts : nn.ModuleList or nn.ModuleDict
        At least one expert; all with the parameters and buffers of the first (names and shapes).
    """

    def __init__(self, experts: nn.ModuleList | nn.ModuleDict):
        super().__init__()
        items = list(experts.items()) if isinstance(experts, nn.ModuleDict) else list(enumerate(experts))
        self.is_dict = isinstance(experts, nn.ModuleDict)
        self.names = [str(k) for k, _ in items]
        template = copy.deepcopy(items[0][1])
        self.param_names = [n for n, _ in template.named_parameters()]
        self.buffer_names = [n for n, _ in template.named_buffers()]
        for names, buffer in ((self.param_names, False), (self.buffer_names, True)):
            for n in names:
                get = (lambda m, n=n: m.get_buffer(n)) if buffer else (lambda m, n=n: m.get_parameter(n))
                _set(template, n, torch.stack([get(e).detach() for _, e in items]).clone(), buffer=buffer)
        self.stacked = template

    def _tensor(self, name: str) -> torch.Tensor:
        mod_name, _, leaf = name.rpartition(".")
        return getattr(self.stacked.get_submodule(mod_name) if mod_name else self.stacked, leaf)

    def run(self, e: int, *args, **kwargs):
        """Expert ``e``'s forward on its slices of the stacked tensors (differentiable, ``torch.func``-safe)."""
        values = {n: self._tensor(n)[e] for n in (*self.param_names, *self.buffer_names)}
        return functional_call(self.stacked, values, args, kwargs)

    def __len__(self) -> int:
        return int(self._tensor(self.param_names[0]).shape[0])

    def _index(self, key) -> int:
        if self.is_dict:
            return self.names[: len(self)].index(str(key))
        return range(len(self))[key]

    def __getitem__(self, key):
        return _ExpertView(self, self._index(key))

    def __iter__(self):
        if self.is_dict:
            return iter(self.names[: len(self)])
        return iter([_ExpertView(self, e) for e in range(len(self))])

    def keys(self):
        return list(self.names[: len(self)])

    def values(self):
        return [_ExpertView(self, e) for e in range(len(self))]

    def items(self):
        return list(zip(self.keys(), self.values(), strict=True))


def stack_experts(module: nn.Module, name: str) -> nn.Module:
    """A copy of ``module`` whose container ``name`` (an ``nn.ModuleList`` / ``nn.ModuleDict`` of identical
    experts) is an :class:`ExpertStack`: the same function, each expert's parameters one index of stacked
    tensors (``{name}.stacked.<parameter>``); ``module`` itself is not changed."""
    out = copy.deepcopy(module)
    parent_name, _, leaf = name.rpartition(".")
    parent = out.get_submodule(parent_name) if parent_name else out
    box = out.get_submodule(name)
    if not isinstance(box, (nn.ModuleList, nn.ModuleDict)):
        raise InvalidTypeError(
            f"`name` must name an nn.ModuleList or nn.ModuleDict of experts; {name!r} is {type(box).__name__}"
        )
    setattr(parent, leaf, ExpertStack(box))
    return out


@dataclass(frozen=True)
class ExpertsFound:
    """Experts ``container`` (``n`` of them) combined by ``gate``; ``layout`` refers to :func:`stack_experts`'s
    copy; ``p`` the unit dimension, ``per_expert`` the parameters of one expert."""

    container: str
    gate: str
    n: int
    p: int
    per_expert: int
    layout: UnitLayout


def _signature(mod: nn.Module):
    return (
        [(n, type(m)) for n, m in mod.named_modules()],
        [(n, tuple(t.shape), t.dtype) for n, t in mod.named_parameters()],
        [(n, tuple(t.shape), t.dtype) for n, t in mod.named_buffers()],
    )


def _identical(children: list[nn.Module]) -> bool:
    first = _signature(children[0])
    return bool(first[1]) and all(_signature(c) == first for c in children[1:])


def _descendants(nodes) -> set:
    seen, todo = set(), list(nodes)
    while todo:
        n = todo.pop()
        for u in n.users:
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return seen


def _expert_nodes(graph: fx.Graph, path: str) -> set:
    out = set()
    for n in graph.nodes:
        target = str(n.target) if n.op in ("call_module", "get_attr") else ""
        stack = n.meta.get("nn_module_stack", {}) or {}
        if target == path or target.startswith(path + ".") or path in stack:
            out.add(n)
    return out


def _combined(graph: fx.Graph, gate_node: fx.Node, experts: list[set]) -> bool:
    """No expert reads the gate, the gate reads no expert, and each expert's output meets the gate's."""
    from_gate = _descendants([gate_node])
    for nodes in experts:
        outs = [n for n in nodes if any(u not in nodes for u in n.users)]
        if not nodes or not outs or nodes & from_gate or gate_node in _descendants(nodes):
            return False
        if not (_descendants(outs) & from_gate):
            return False
    return True


def _unique_parameters(module: nn.Module) -> bool:
    ids = [id(p) for _, p in module.named_parameters(remove_duplicate=False)]
    return len(ids) == len(set(ids))


def find_experts(module: nn.Module, graph: fx.Graph | None) -> list[ExpertsFound]:
    """Every container of experts combined by a gate in the traced ``graph`` of ``module`` (module docstring)."""
    if graph is None or not _unique_parameters(module):
        return []
    mods = dict(module.named_modules())
    calls = {n.target: 0 for n in graph.nodes if n.op == "call_module"}
    for n in graph.nodes:
        if n.op == "call_module":
            calls[n.target] += 1
    out = []
    for name, box in mods.items():
        if not isinstance(box, (nn.ModuleList, nn.ModuleDict)) or len(box) < 2 or not name:
            continue
        keys = list(box.keys()) if isinstance(box, nn.ModuleDict) else [str(i) for i in range(len(box))]
        if not _identical([box[k] if isinstance(box, nn.ModuleDict) else box[int(k)] for k in keys]):
            continue
        experts = [_expert_nodes(graph, f"{name}.{k}") for k in keys]
        for gname, gate in mods.items():
            if not isinstance(gate, nn.Linear) or gate.out_features != len(keys) or calls.get(gname) != 1:
                continue
            if gname == name or gname.startswith(name + "."):
                continue
            gate_node = next(n for n in graph.nodes if n.op == "call_module" and n.target == gname)
            if _combined(graph, gate_node, experts):
                out.append(_found(module, name, gname, len(keys)))
                break
    return out


def _found(module: nn.Module, name: str, gname: str, n: int) -> ExpertsFound:
    box = module.get_submodule(name)
    assert isinstance(box, (nn.ModuleList, nn.ModuleDict))
    first = next(iter(box.values())) if isinstance(box, nn.ModuleDict) else box[0]
    gate = module.get_submodule(gname)
    assert isinstance(gate, nn.Linear)
    slices = [UnitSlice(f"{name}.stacked.{pn}", axis=0) for pn, _ in first.named_parameters()]
    slices.append(UnitSlice(f"{gname}.weight", axis=0))
    if gate.bias is not None:
        slices.append(UnitSlice(f"{gname}.bias", axis=0))
    per = sum(t.numel() for t in first.parameters())
    p = per + gate.in_features + (gate.bias is not None)
    return ExpertsFound(name, gname, n, p, per, UnitLayout(slices, n))
