"""Which axis holds the units, step by step from a layer of units to its readout (for :mod:`nqf.modules._trace`).

A unit layer puts its units on one axis: the last for ``nn.Linear``, the channel axis for a convolution.  The
forward may then move that axis (``transpose``, ``permute``, ``movedim``), pool or average over *other* axes
(``h.mean(dim=-1)``, ``torch.mean(h, 2)``, ``h.sum(1)``, average pooling), select along other axes (``h[:, 0]``)
or flatten it together with the axes after it (``nn.Flatten``, ``x.view(x.size(0), -1)``: each unit then owns
one contiguous block of the readout's inputs).  Each of these keeps the units separate; a step that pools over
the unit axis, flattens it after another axis (strided entries), or reshapes it in a way that cannot be followed
stops the chain with the reason.  Axes are counted from the end; a non-negative axis needs the number of axes,
taken from the forward where it says (``x.reshape(N, 8, 8)``, a convolution's batched input).  When it does not,
an axis ``≥ 1`` is taken to be another axis than the units' last one, and the step says so
(:func:`~nqf.modules.from_module`'s permutation check decides).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import fx, nn

from ._steps import NON_SMOOTH_POOL, POOL

__all__ = ["advance", "node_rank"]

_REDUCE = ("mean", "sum", "nanmean", "nansum")
_TRANSPOSE = ("transpose", "swapaxes", "swapdims")
_POOL_FUNCTIONS = (
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


@dataclass(frozen=True)
class UnitAxis:
    """The units' axis of a value: ``pos`` (negative, from the end), the number of axes ``rank`` when known,
    ``merged`` when axes after it were flattened into it (each unit then owns a block), ``spatial`` while a
    convolution's positions still follow the channel axis untouched (pooling over positions allowed)."""

    pos: int
    rank: int | None
    merged: bool = False
    spatial: bool = False

    def norm(self, d) -> int | None:
        """Axis ``d`` counted from the end, or None when that needs the unknown rank (or ``d`` is no int)."""
        if not isinstance(d, int) or isinstance(d, bool):
            return None
        if d < 0:
            return d if self.rank is None or d >= -self.rank else None
        return None if self.rank is None or d >= self.rank else d - self.rank


def _name(node: fx.Node) -> str:
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))


def _arg(node: fx.Node, i: int, key: str, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(key, default)


def _remove(ax: UnitAxis, dims, keepdim: bool, label: str) -> tuple[UnitAxis | None, str]:
    """``ax`` after a mean / sum over ``dims``."""
    if dims is None or dims == () or dims == []:
        return None, f"`{label}` averages over every axis, the units' included"
    dims = list(dims) if isinstance(dims, (tuple, list)) else [dims]
    new, guessed = ax, False
    for d in dims:
        n = ax.norm(d)
        if n is None and isinstance(d, int) and d >= 1 and ax.rank is None and ax.pos == -1:
            guessed = True  # an axis before the units' last one: removing it does not move them
            continue
        if n is None:
            return None, f"`{label}` pools over axis {d}, and nqf cannot tell whether it is the units' axis"
        if n == ax.pos:
            return None, f"`{label}` pools over the units' axis, so the units are summed before any readout"
        if ax.rank is not None and n == -ax.rank:
            return None, f"`{label}` pools over the batch axis (it mixes samples)"
        if not keepdim and n > ax.pos:
            new = replace(new, pos=new.pos + 1)
    if not keepdim and new.rank is not None:
        new = replace(new, rank=new.rank - len(dims))
    return replace(new, spatial=False), " (axis taken as other than the units')" if guessed else ""


def _flatten(ax: UnitAxis, start, end, label: str) -> tuple[UnitAxis | None, str]:
    s, e = ax.norm(start), ax.norm(end)
    if s is None or e is None:
        return None, f"`{label}` flattens from axis {start}, and nqf cannot tell where the units' axis ends up"
    if ax.rank is not None and s == -ax.rank and e > s:
        return None, f"`{label}` flattens the batch axis into the features (it mixes samples)"
    if s >= e:
        return ax, ""
    rank = None if ax.rank is None else ax.rank - (e - s)
    if ax.pos < s:
        return UnitAxis(ax.pos + (e - s), rank, ax.merged), ""
    if ax.pos > e:
        return UnitAxis(ax.pos, rank, ax.merged), ""
    if ax.pos != s:
        return None, (
            f"`{label}` flattens the units' axis after another axis, so each unit's entries are strided, not one "
            "block of the readout's inputs; move the units' axis first (transpose) before flattening"
        )
    return UnitAxis(e, rank, True), ""


def _sizes(node: fx.Node) -> list:
    sizes = list(node.args[1:]) if node.op == "call_method" else list(node.args[1:2])
    if "shape" in node.kwargs or "size" in node.kwargs:
        sizes = [node.kwargs.get("shape", node.kwargs.get("size"))]
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = list(sizes[0])
    return sizes


def _batch_size(v) -> bool:
    """``x.size(0)`` / ``x.shape[0]`` of any value (the batch size)."""
    if not isinstance(v, fx.Node):
        return False
    args = tuple(v.args)
    if v.op == "call_method" and v.target == "size" and len(args) > 1:
        return bool(args[1] == 0)
    if v.op == "call_function" and v.target is operator.getitem and len(args) == 2 and args[1] == 0:
        src = args[0]
        return isinstance(src, fx.Node) and src.target is getattr and tuple(src.args)[1:] == ("shape",)
    return False


def _reshape(ax: UnitAxis, node: fx.Node, label: str) -> tuple[UnitAxis | None, str]:
    """``x.view(x.size(0), -1)``, ``x.reshape(N, -1)``, ``x.view(-1, K)``: flatten everything after the batch."""
    sizes = _sizes(node)
    flat = len(sizes) == 2 and (_batch_size(sizes[0]) or sizes[0] == -1 or isinstance(sizes[0], int))
    flat = flat and (sizes[1] == -1 or isinstance(sizes[1], (int, fx.Node))) and not sizes[0] == sizes[1] == -1
    if not flat:
        return None, f"`{label}` reshapes the units' values in a way nqf cannot follow; use flatten or .view(N, -1)"
    if ax.rank is None:
        return None, f"`{label}` flattens after the batch axis, and nqf cannot tell where the units' axis ends up"
    return _flatten(ax, 1, -1, label)


def _getitem(ax: UnitAxis, idx, label: str) -> tuple[UnitAxis | None, str]:
    idx = list(idx) if isinstance(idx, tuple) else [idx]
    if any(i is None or isinstance(i, fx.Node) for i in idx) or idx.count(Ellipsis) > 1:
        return None, f"`{label}` indexes the units' values in a way nqf cannot follow"
    if Ellipsis in idx:
        k = idx.index(Ellipsis)
        after = idx[k + 1 :]
        pairs = [(-len(after) + j, i) for j, i in enumerate(after)]
        pairs += [(ax.norm(j), i) for j, i in enumerate(idx[:k])]
    else:
        pairs = [(ax.norm(j), i) for j, i in enumerate(idx)]
    new, removed = ax, 0
    for n, i in pairs:
        full = isinstance(i, slice) and i == slice(None)
        if n is None and ax.rank is None and ax.pos == -1 and not (isinstance(i, slice) and not full):
            removed += isinstance(i, int)  # an axis before the units' last one (assumed)
            continue
        if n is None:
            return None, f"`{label}` indexes an axis nqf cannot place relative to the units'"
        if n == ax.pos and not full:
            return None, f"`{label}` selects some of the units (their axis is indexed)"
        if isinstance(i, int) and n > ax.pos:
            new = replace(new, pos=new.pos + 1)
        removed += isinstance(i, int)
    rank = None if ax.rank is None else ax.rank - removed
    return replace(new, rank=rank, spatial=False), ""


def _move(ax: UnitAxis, node: fx.Node, name: str, label: str) -> tuple[UnitAxis | None, str]:
    """transpose / swapaxes / permute / movedim."""
    if name == "permute":
        given = _arg(node, 1, "dims")
        dims = _sizes(node) if node.op == "call_method" else list(given) if isinstance(given, (tuple, list)) else []
        rank = len(dims)
        norm = [UnitAxis(-1, rank).norm(d) for d in dims]
        if ax.rank not in (None, rank) or None in norm or -ax.pos > rank:
            return None, f"`{label}` permutes axes nqf cannot match to the units'"
        return UnitAxis(norm.index(ax.pos) - rank, rank, ax.merged), ""
    a, b = ax.norm(_arg(node, 1, "dim0")), ax.norm(_arg(node, 2, "dim1"))
    if name in ("movedim", "moveaxis"):
        a, b = ax.norm(_arg(node, 1, "source")), ax.norm(_arg(node, 2, "destination"))
    if a is None or b is None:
        return None, f"`{label}` moves axes nqf cannot match to the units' (write them from the end: -1, -2, …)"
    if name in ("movedim", "moveaxis"):
        order = list(range(-(ax.rank or max(-a, -b, -ax.pos)), 0))
        order.insert(order.index(b), order.pop(order.index(a)))
        return UnitAxis(order.index(ax.pos) - len(order), ax.rank, ax.merged), ""
    pos = b if ax.pos == a else a if ax.pos == b else ax.pos
    return UnitAxis(pos, ax.rank, ax.merged), ""


def _pool(ax: UnitAxis, label: str) -> tuple[UnitAxis | None, str]:
    if not ax.spatial:
        return None, f"`{label}` pools over the last axes, which no longer are a convolution's positions"
    return ax, ""


def advance(ax: UnitAxis, node: fx.Node, mod: nn.Module | None, label: str):
    """``(new axis, role, note)`` after a step that moves, pools or reshapes axes; ``(None, "", why)`` when the
    step cannot be followed; ``None`` when ``node`` is not such a step at all."""
    if mod is not None:
        if isinstance(mod, POOL):
            new, why = _pool(ax, label)
            return new, "pool", why, isinstance(mod, NON_SMOOTH_POOL)
        if isinstance(mod, nn.Flatten):
            new, why = _flatten(ax, mod.start_dim, mod.end_dim, label)
            return new, "pool", why, False
        return None
    fn, name = node.target, _name(node)
    method = node.op == "call_method"
    if fn in _POOL_FUNCTIONS:
        new, why = _pool(ax, label)
        return new, "pool", why, fn in _NON_SMOOTH_POOL_FUNCTIONS
    if (method and name in _REDUCE) or fn in (torch.mean, torch.sum, torch.nanmean, torch.nansum):
        new, why = _remove(ax, _arg(node, 1, "dim"), bool(_arg(node, 2, "keepdim", False)), label)
        return new, "pool", why, False
    if (method and name in (*_TRANSPOSE, "permute", "movedim", "moveaxis")) or fn in (
        torch.transpose,
        torch.swapaxes,
        torch.permute,
        torch.movedim,
    ):
        new, why = _move(ax, node, name, label)
        return new, "pass", why, False
    if (method and name == "flatten") or fn is torch.flatten:
        new, why = _flatten(ax, _arg(node, 1, "start_dim", 0), _arg(node, 2, "end_dim", -1), label)
        return new, "pool", why, False
    if (method and name in ("view", "reshape")) or fn is torch.reshape:
        new, why = _reshape(ax, node, label)
        return new, "pool", why, False
    if fn is operator.getitem:
        new, why = _getitem(ax, node.args[1], label)
        return new, "pass", why, False
    return None


def _rank_after(node: fx.Node, inner: int) -> int | None:
    """The number of axes after a function / method of a value with ``inner`` axes."""
    fn, name, method = node.target, _name(node), node.op == "call_method"
    if (method and name in _REDUCE) or fn in (torch.mean, torch.sum, torch.nanmean, torch.nansum):
        dims, keep = _arg(node, 1, "dim"), bool(_arg(node, 2, "keepdim", False))
        k = inner if dims is None else len(dims) if isinstance(dims, (tuple, list)) else 1
        return inner if keep else inner - k
    if (method and name == "flatten") or fn is torch.flatten:
        probe = UnitAxis(-1, inner)
        s, e = probe.norm(_arg(node, 1, "start_dim", 0)), probe.norm(_arg(node, 2, "end_dim", -1))
        return None if s is None or e is None else inner - max(e - s, 0)
    if fn is operator.getitem:
        idx = node.args[1] if isinstance(node.args[1], tuple) else (node.args[1],)
        if any(isinstance(i, fx.Node) for i in idx):
            return None
        return inner - sum(isinstance(i, int) for i in idx) + sum(i is None for i in idx)
    if method and name == "unsqueeze" or fn is torch.unsqueeze:
        return inner + 1
    return None if (method and name == "squeeze") or fn is torch.squeeze else inner


def node_rank(node, mods: dict, depth: int = 0) -> int | None:
    """The number of axes of a traced value when the forward says it (a reshape, a batched convolution, …)."""
    if not isinstance(node, fx.Node) or depth > 64 or node.op == "placeholder":
        return None
    if node.op == "call_module":
        mod = mods.get(node.target)
        inner = node_rank(node.args[0], mods, depth + 1) if node.args else None
        if isinstance(mod, (nn.Conv1d, nn.Conv2d)):
            return inner if inner is not None else (3 if isinstance(mod, nn.Conv1d) else 4)
        if isinstance(mod, nn.Flatten) and inner is not None:
            new, _ = _flatten(UnitAxis(-1, inner), mod.start_dim, mod.end_dim, "")
            return None if new is None else new.rank
        keeps = (nn.Linear, nn.LayerNorm, nn.Dropout, nn.Identity, nn.BatchNorm1d, nn.BatchNorm2d, *POOL)
        return inner if isinstance(mod, keeps) or (mod is not None and not list(mod.parameters())) else None
    if node.op == "call_method" and node.target in ("view", "reshape"):
        return len(_sizes(node))
    if node.op == "call_function" and node.target is torch.reshape:
        return len(_sizes(node))
    if node.op in ("call_method", "call_function") and node.args and isinstance(node.args[0], fx.Node):
        inner = node_rank(node.args[0], mods, depth + 1)
        return None if inner is None else _rank_after(node, inner)
    return None
