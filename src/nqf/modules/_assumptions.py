"""Checks of the normal form's assumptions on a real module (docs/theory.md §1).

* :func:`check_permutation_symmetry` — ``f(W) = f(Wπ)`` for a random ``W`` and two
  permutations that generate all permutations of the units;
* :func:`check_truncation_order` — the normal-form error ``‖f(sW) − f_NF(sW)‖``
  shrinks like ``s³`` for a C³ module (a kink at zero, e.g. ReLU, gives ``s²``).

Both run on a float64 copy of the module in eval mode and are used by
:func:`nqf.modules.from_module`.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn
from torch.func import jacrev, jvp, vmap

from .._validation import tolerance
from ..errors import NormalFormError
from ._narrowed import evaluation_mode
from ._unit_function import UnitFunction as _UnitFunction
from ._units import UnitLayout, UnitScatter

__all__ = ["check_permutation_symmetry", "check_truncation_order"]


def _unit_responses(fn: _UnitFunction, X: torch.Tensor, idx, v: torch.Tensor):
    """Per unit ``i``: gradient ``∇_{w_i} f`` (n, C, p) and curvature ``vᵀ∇²_{w_i} f v`` (n, C), others at zero."""
    zero = torch.zeros_like(v)
    out = []
    for i in idx:

        def g(w, x, i=i):
            return fn({i: w}, x)

        grad = vmap(jacrev(g), in_dims=(None, 0))(zero, X)
        curv = vmap(lambda x: jvp(lambda w: jvp(lambda u: g(u, x), (w,), (v,))[1], (zero,), (v,))[1])(X)
        out.append((i, grad, curv))
    return out


def check_permutation_symmetry(module: nn.Module, layout: UnitLayout, X, *, output=None, seed: int = 0) -> float:
    """Check ``f(W) = f(Wπ)`` for a random ``W`` and permutations ``π`` of the units; return the deviation.

    ``π`` is a cyclic shift by one and the transposition of units 0 and 1,
    which together generate every permutation.  ``W`` has i.i.d. normal
    entries at the scale of the module's own unit weights (at least 0.1).  Runs on a float64
    copy in eval mode; cost: three forward passes of the full module on ``X``.

    Returns
    -------
    float
        ``max |f(Wπ) − f(W)|`` relative to ``max |f|``.

    Raises
    ------
    NormalFormError
        When the deviation exceeds round-off; the message names the first
        unit whose gradient or curvature at zero differs from unit 0's.
    """
    mod = copy.deepcopy(module).to(torch.float64).eval()
    scatter = UnitScatter(mod, layout)
    m, p = scatter.m, scatter.p
    X64 = torch.as_tensor(X).to(torch.float64)
    gen = torch.Generator(device="cpu").manual_seed(seed + 5)
    own = scatter.gather()
    rms = max(float(own.pow(2).mean().sqrt()), 0.1)  # not below 0.1: a module put at small init stays testable
    W = torch.randn(p, m, generator=gen, dtype=torch.float64).to(own.device) * rms
    shift = torch.roll(torch.arange(m), 1)
    swap = torch.arange(m)
    swap[[0, 1]] = swap[[1, 0]]

    def f(Wt):
        return scatter.module_output(mod, Wt, X64, output)

    with evaluation_mode(), torch.no_grad():
        ref = f(W)
        outs = [f(W[:, perm.to(W.device)]) for perm in (shift, swap)]
        size = max(float(ref.abs().max()), float(f(torch.zeros_like(W)).abs().max()), 1e-300)
    err = max(float((o - ref).abs().max()) for o in outs) / size
    if err <= tolerance(torch.float64, 1e4):
        return err
    fn = _UnitFunction(mod, layout, output)
    v = torch.randn(p, generator=gen, dtype=torch.float64).to(own.device)
    idx = list(range(m)) if m <= 64 else sorted({0, 1, m - 1, *torch.randperm(m, generator=gen)[:61].tolist()})
    with evaluation_mode():
        resp = _unit_responses(fn, X64, idx, v)
    _, g0, c0 = resp[0]
    rscale = max(float(g0.abs().max()), float(c0.abs().max()), 1e-300)
    for i, gi, ci in resp[1:]:
        d = max(float((gi - g0).abs().max()), float((ci - c0).abs().max()))
        if d > tolerance(torch.float64, 1e4) * rscale:
            raise NormalFormError(
                f"the units are not interchangeable: unit {i} differs from unit 0 (the Hessian/gradient of unit "
                f"{i} differs from unit 0's by {d:.3e}, scale {rscale:.3e}); the normal form needs a module "
                "unchanged by any permutation of its units (a fixed per-unit coefficient, for instance, breaks "
                "it). Check the unit layout (`units`) or the module."
            )
    raise NormalFormError(
        f"the units are not interchangeable: permuting them changes the output by {err:.3e} (relative), though "
        "no single unit's gradient or curvature at zero differs from unit 0's; the normal form needs a module "
        "unchanged by any permutation of its units. Check the unit layout (`units`) or the module."
    )


def check_truncation_order(
    module,
    layout: UnitLayout,
    op,
    X,
    *,
    output=None,
    seed=0,
    chunk_size=256,
    scales=(1e-2, 1e-3),
    min_order: float = 2.5,
) -> float:
    """Measure how fast the normal-form error shrinks and refuse non-smooth modules.

    Evaluates ``e(s) = ‖f(sW) − f_NF(sW)‖`` (float64 copy of the module) for a
    random ``W`` with every unit non-zero, at the two ``scales``; returns the
    log–log slope.  A C³ module gives a slope ≥ 3 (or an error at round-off);
    a kink at zero (ReLU) gives 2.

    Raises
    ------
    NormalFormError
        If the slope is below ``min_order``.
    """
    mod = copy.deepcopy(module).to(torch.float64).eval()
    fn = _UnitFunction(mod, layout, output)
    m, p = fn.layout.m, fn.p
    gen = torch.Generator(device="cpu").manual_seed(seed + 2)
    W = torch.randn(p, m, generator=gen, dtype=torch.float64).to(X.device) / math.sqrt(m)
    X64 = X.to(torch.float64)
    op64 = op.to(torch.float64)
    errs, sizes = [], []
    for s in scales:
        Ws = s * W
        with evaluation_mode():
            f = vmap(lambda x, Ws=Ws: fn({i: Ws[:, i] for i in range(m)}, x), chunk_size=chunk_size)(X64)
        nf = op64.predict(Ws @ Ws.T, Ws.sum(1))
        nf = nf[:, None] if nf.ndim == 1 else nf
        errs.append(float((f - nf).norm()))
        sizes.append(float((f - op64.offset).norm()))
    floor = 1e-13 * (float(op64.offset.norm()) + max(sizes) + 1e-300)
    if errs[0] <= floor:
        return math.inf  # exact to round-off at the larger scale
    slope = math.log(max(errs[0], 1e-300) / max(errs[1], 1e-300)) / math.log(scales[0] / scales[1])
    if slope < min_order:
        raise NormalFormError(
            f"the normal form does not hold to second order: the truncation error shrinks like s^{slope:.2f} "
            f"(expected s^3 or faster) between s = {scales[0]:g} and {scales[1]:g}. The module is not three "
            "times differentiable at W = 0 (a ReLU or another kink, e.g. torch.relu/abs/max in forward), or its "
            "units are not interchangeable. The normal form needs a C³ module."
        )
    return slope
