r"""A copy of a module with fewer units: what :func:`~nqf.modules.from_module` differentiates.

The structure matrix ``A(x) = ½ ∇²_{w_1} f_x(0)`` is taken with every other
unit at zero, and interchangeable units all have the same one, so it is a
property of *one* unit: a model with ``m`` units and the same model with two
units (the second is needed for the cross-unit term ``B``) have the same
``A``, ``b``, ``B`` and ``f(0)`` — the zero units contribute nothing.
Differentiating the two-unit copy makes the cost of
:func:`~nqf.modules.from_module` independent of the width.

:func:`reduced_copy` builds that copy from any module, without knowing its
class: every parameter named in the unit layout is narrowed, along the unit
axis, to the entries that belong to no unit plus those of the first
``n_units`` units, and the slices' offsets are recomputed.  Layers whose
forward reads sizes from attributes instead of from the weight shapes are
rebuilt: ``nn.MultiheadAttention`` (also inside ``nn.TransformerEncoderLayer``)
becomes a :class:`~nqf.modules._attention_layouts.HeadSubsetAttention`.
The copy is then **checked** against the original (:func:`check_reduced_copy`):
on a few inputs, with the kept units at the module's own values and at random
values and all other units at zero, both must give the same output to
round-off.  A copy that fails (a buffer sized by the width, a forward that
hard-codes ``m``, …) is not used; :func:`~nqf.modules.from_module` then
falls back to the full module (correct, but its cost grows with the width).
"""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn
from torch.func import functional_call

from .._validation import tolerance
from ..errors import NormalFormError
from ._attention_layouts import HeadSubsetAttention
from ._compat import has_mha_switch, math_attention
from ._units import UnitLayout, UnitScatter, UnitSlice

__all__ = ["reduced_copy", "check_reduced_copy", "evaluation_mode"]


@contextlib.contextmanager
def evaluation_mode():
    """Context in which every module's forward is differentiable in both modes.

    Disables PyTorch's native multi-head-attention / transformer fast paths
    (no autodiff rules, and they read head counts from attributes) and forces
    ``scaled_dot_product_attention`` onto its math kernel (the fused CPU/GPU
    kernels have no forward-mode derivative).
    """
    if not has_mha_switch():  # torch 2.2 has no switch: attention is refused there (modules/_compat.py)
        with math_attention():
            yield
        return
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with math_attention():
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)


def _set_param(module: nn.Module, name: str, value: torch.Tensor, requires_grad: bool) -> None:
    owner_name, _, leaf = name.rpartition(".")
    owner = module.get_submodule(owner_name) if owner_name else module
    setattr(owner, leaf, nn.Parameter(value, requires_grad=requires_grad))


def reduced_copy(module: nn.Module, layout: UnitLayout, n_units: int = 2) -> tuple[nn.Module, UnitLayout]:
    """A copy of ``module`` (eval mode) that keeps only units ``0 … n_units−1``.

    Parameters
    ----------
    module : nn.Module
    layout : UnitLayout
        The unit axis of ``module`` (``m`` units).
    n_units : int
        Units to keep, ``1 ≤ n_units ≤ m``.

    Returns
    -------
    (nn.Module, UnitLayout)
        The copy, and its layout (same slices, offsets recomputed, ``n_units``).
        Not yet checked: see :func:`check_reduced_copy`.

    Raises
    ------
    NormalFormError
        When the layout cannot be narrowed (overlapping or interleaved slices).
    """
    params = dict(module.named_parameters())
    lay = layout.resolve(params)
    m, k = lay.m, int(n_units)
    red = copy.deepcopy(module).eval()
    if k >= m:
        return red, lay
    groups: dict[tuple[str, int], list[UnitSlice]] = {}
    for s in lay.slices:
        groups.setdefault((s.param, s.axis % params[s.param].ndim), []).append(s)
    new_slices: dict[UnitSlice, UnitSlice] = {}
    red_params = dict(red.named_parameters())
    for (name, axis), slices in groups.items():
        t = red_params[name].detach()
        length = t.shape[axis]
        owned = torch.zeros(length, dtype=torch.bool)
        kept = torch.zeros(length, dtype=torch.bool)
        for s in slices:
            block = torch.zeros(length, dtype=torch.bool)
            block[s.offset : s.offset + m * s.size] = True
            if bool((owned & block).any()):
                raise NormalFormError(f"unit slices of `{name}` overlap along axis {axis}; cannot narrow the layout")
            owned |= block
            kept[s.offset : s.offset + k * s.size] = True
        keep = (~owned | kept).nonzero().reshape(-1)
        for s in slices:
            new_slices[s] = UnitSlice(s.param, s.axis, s.size, int((keep < s.offset).sum()))
        value = t.index_select(axis, keep.to(t.device)).clone()
        _set_param(red, name, value, red_params[name].requires_grad)
        red_params = dict(red.named_parameters())
    for name, sub in list(red.named_modules()):
        if isinstance(sub, nn.MultiheadAttention):
            heads = sub.out_proj.weight.shape[1] // sub.head_dim
            if heads != sub.num_heads:
                if not name:
                    red = HeadSubsetAttention(sub, heads).eval()
                    continue
                owner_name, _, leaf = name.rpartition(".")
                setattr(red.get_submodule(owner_name), leaf, HeadSubsetAttention(sub, heads).eval())
    return red, UnitLayout([new_slices[s] for s in lay.slices], n_units=k)


def check_reduced_copy(
    module: nn.Module,
    layout: UnitLayout,
    red: nn.Module,
    red_layout: UnitLayout,
    X: torch.Tensor,
    *,
    output=None,
    seed: int = 0,
) -> tuple[float, float]:
    """How faithfully a reduced copy reproduces ``module`` on its kept units.

    Evaluates both on ``X`` (a few samples) with every other unit at zero and
    the kept units at zero, at the module's own values, and at random values
    of the same size (at least 0.1) (inside :func:`evaluation_mode`; put both modules in eval
    mode first if they have dropout).

    Returns
    -------
    (float, float)
        ``max |Δf_full − Δf_reduced|`` with ``Δf = f(W) − f(0)`` (what the
        derivatives at zero see), and ``max |f_full(0) − f_reduced(0)|``, both
        relative to ``max |f_full|``.  A faithful copy gives round-off
        (``≲ 1e3 · machine ε``) in the first; the second is also round-off
        unless the zero units contribute to ``f(0)`` (e.g. heads summed over a
        fixed value path), in which case ``f(0)`` must come from the module.
    """
    full = UnitScatter(module, layout)
    small = UnitScatter(red, red_layout)
    k = small.m
    W_own = full.gather()[:, :k]
    gen = torch.Generator(device="cpu").manual_seed(seed + 7)
    rms = max(float(W_own.pow(2).mean().sqrt()) if W_own.numel() else 0.0, 0.1)
    W_rand = torch.randn(W_own.shape, generator=gen, dtype=W_own.dtype).to(W_own.device) * rms

    def both(Wk):
        Wfull = torch.zeros(full.p, full.m, dtype=Wk.dtype, device=Wk.device)
        Wfull[:, :k] = Wk
        a = functional_call(module, full(Wfull), (X,))
        b = functional_call(red, small(Wk), (X,))
        return (a, b) if output is None else (output(a), output(b))

    with evaluation_mode(), torch.no_grad():
        a0, b0 = both(torch.zeros_like(W_own))
        if a0.shape != b0.shape:
            return float("inf"), float("inf")
        size = float(a0.abs().max())
        worst = 0.0
        for Wk in (W_own, W_rand):
            a, b = both(Wk)
            size = max(size, float(a.abs().max()), float((a - a0).abs().max()))
            worst = max(worst, float(((a - a0) - (b - b0)).abs().max()))
    size = size + 1e-300
    nan = float("inf")
    d, o = worst / size, float((a0 - b0).abs().max()) / size
    return (d if d == d else nan), (o if o == o else nan)


def faithful_reduced_copy(
    module: nn.Module, layout: UnitLayout, X: torch.Tensor, *, n_units: int = 2, output=None, seed: int = 0
):
    """:func:`reduced_copy` checked by :func:`check_reduced_copy`.

    Returns
    -------
    (nn.Module, UnitLayout, bool) or None
        The copy, its layout, and whether its ``f(0)`` equals the module's;
        ``None`` when the copy does not reproduce how the kept units act.
    """
    try:
        red, red_layout = reduced_copy(module, layout, n_units)
        err, off = check_reduced_copy(module, layout, red, red_layout, X, output=output, seed=seed)
    except (RuntimeError, ValueError, TypeError, IndexError, AssertionError, NormalFormError, KeyError):
        return None
    dtype = next(iter(red.parameters())).dtype
    if not err <= tolerance(dtype, 1e3):
        return None
    return red, red_layout, off <= tolerance(dtype, 1e3)
