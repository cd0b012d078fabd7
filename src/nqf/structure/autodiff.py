r"""Structure matrices of any PyTorch module by automatic differentiation.

For a module whose units (described by a :class:`~nqf.structure.units.UnitLayout`)
are interchangeable, the normal form (docs/theory.md §1) is

.. math::

    f_x(W) = f_x(0) + b(x)ᵀμ + μᵀB(x)μ + \mathrm{Tr}[M (A(x) − B(x))] + O(‖W‖³)

with ``A = ½ ∇²_{w_1} f_x(0)``, ``B = ½ ∂²f_x/∂w_1∂w_2 (0)``, ``b = ∇_{w_1} f_x(0)``,
``M = W Wᵀ`` and ``μ = Σ_i w_i``.  Under the zero-gradient condition
``b = B = 0`` and the output is ``f_x(0) + Tr[M A(x)]``.

:func:`from_module` evaluates the joint Hessian of ``f`` in two units (the
first and the last) with ``torch.func`` (``hessian``, ``jacrev``, ``vmap`` over
samples, no Python loop per sample), and checks

* smoothness: known non-smooth layers (ReLU, …) are refused, and the
  truncation error ``|f(sW) − f_NF(sW)|`` must shrink at least like ``s³``
  for a random ``W`` (a kink at zero gives ``s²``);
* permutation symmetry: the Hessian and gradient of the last unit equal the
  first unit's, and every unit has the same curvature along a random direction;
* the zero-gradient condition (``b = 0`` and ``B = 0``): reported by the
  returned operator's ``satisfies_zgz``; ``zgz="require"`` turns a failure into
  an error.
"""

from __future__ import annotations

import copy
import math
from typing import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, hessian, jacrev, jvp, vmap

from .._validation import as_tensor, tolerance
from ..errors import NormalFormError
from .operator import DenseStructure
from .units import UnitLayout, UnitSlice

__all__ = ["from_module", "NON_SMOOTH_MODULES", "check_truncation_order"]

#: Layers that are not three times differentiable at zero input.
NON_SMOOTH_MODULES: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.CELU, nn.SELU, nn.Hardtanh,
    nn.Hardswish, nn.Hardsigmoid, nn.Hardshrink, nn.Softshrink, nn.Threshold,
    nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d,
)


def _as_layout(units) -> UnitLayout:
    if isinstance(units, UnitLayout):
        return units
    if isinstance(units, UnitSlice):
        return UnitLayout([units])
    if isinstance(units, Sequence) and units and all(isinstance(u, UnitSlice) for u in units):
        return UnitLayout(list(units))
    raise TypeError("`units` must be a UnitLayout or a sequence of UnitSlice; found "
                    f"{type(units).__name__}. Helpers: nqf.structure.mlp_units, attention_units, conv_units")


def _scan_non_smooth(module: nn.Module) -> None:
    for name, sub in module.named_modules():
        if isinstance(sub, NON_SMOOTH_MODULES):
            raise NormalFormError(
                f"module `{name or type(module).__name__}` is {type(sub).__name__}, which is not three times "
                "differentiable at zero: the normal form Tr[W Wᵀ A(x)] needs a C³ module (a ReLU's Hessian at "
                "W = 0 is not defined, and autodiff would silently return a zero matrix). Use a smooth "
                "activation such as tanh, gelu, erf, sin or a centred softplus."
            )


class _UnitFunction:
    """``f(w_i, w_j; x)`` with all other units at zero, as a pure function for torch.func."""

    def __init__(self, module: nn.Module, layout: UnitLayout, output: Callable | None):
        self.module = module
        params = {k: v.detach() for k, v in module.named_parameters()}
        self.buffers = {k: v.detach() for k, v in module.named_buffers()}
        self.layout = layout.resolve(params)
        self.params = params
        self.base = {**params, **self.layout.zero_units(params)}
        self.p = self.layout.p(params)
        self.output = output

    def __call__(self, units: dict[int, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        P = self.layout.place(self.base, units)
        out = functional_call(self.module, (P, self.buffers), (x.unsqueeze(0),))
        if self.output is not None:
            out = self.output(out)
        return out.reshape(-1)


def from_module(
    module: nn.Module,
    units,
    inputs,
    *,
    output: Callable[[torch.Tensor], torch.Tensor] | None = None,
    zgz: str = "carry",
    check: bool = True,
    chunk_size: int | None = 256,
    seed: int = 0,
):
    r"""Structure operator of ``module`` by autodiff: ``A(x) = ½ ∇²_{w_1} f_x(0)``.

    Parameters
    ----------
    module : torch.nn.Module
        The module; it is called on a batch of one sample, ``module(x[None])``.
        Parameters not in ``units`` are held at their current values.
    units : UnitLayout or sequence of UnitSlice
        Which parameter slices form one unit (see :mod:`nqf.structure.units`
        and the helpers :func:`mlp_units`, :func:`attention_units`,
        :func:`conv_units`).  At least two units are needed.
    inputs : array_like, shape (N, ...)
        Samples; each ``inputs[n]`` is one input of the module.
    output : callable, optional
        Maps the module's output (batch of one) to the quantity whose normal
        form is wanted; flattened to ``C`` outputs.  Default: the output itself.
    zgz : {"carry", "require"}
        What to do when the zero-gradient condition fails: keep the linear
        term ``b`` and cross term ``B`` on the operator (``"carry"``), or raise
        :class:`~nqf.errors.NormalFormError` (``"require"``).
    check : bool
        Run the smoothness and symmetry checks (recommended).
    chunk_size : int or None
        Samples per vectorised chunk (bounds memory at ``chunk · C · 4p²``).
    seed : int
        Seed of the random directions used by the checks.

    Returns
    -------
    DenseStructure
        With ``A`` of shape ``(N, C, p, p)``, ``offset = f_x(0)`` and, when the
        zero-gradient condition fails, ``linear = b`` and ``cross = B``.

    Raises
    ------
    NormalFormError
        Non-smooth module, units that are not interchangeable, or (with
        ``zgz="require"``) a failing zero-gradient condition.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    if zgz not in ("carry", "require"):
        raise ValueError(f"`zgz` must be 'carry' or 'require'; found {zgz!r}")
    layout = _as_layout(units)
    params = dict(module.named_parameters())
    if not params:
        raise ValueError("`module` has no parameters")
    dtype = next(iter(params.values())).dtype
    device = next(iter(params.values())).device
    X = as_tensor("inputs", inputs, dtype=dtype, device=device)
    if X.ndim < 1 or X.shape[0] == 0:
        raise ValueError(f"`inputs` must have a leading sample axis with N ≥ 1; found shape {tuple(X.shape)}")
    if check:
        _scan_non_smooth(module)
    fn = _UnitFunction(module, layout, output)
    m, p = fn.layout.n_units, fn.p
    if m < 2:
        raise ValueError(f"`units` describes {m} unit; at least 2 are needed to check the permutation symmetry "
                         "and the cross-unit term (A does not depend on the width, so build the module wider)")
    last = m - 1

    def pair(w, x):
        return fn({0: w[:p], last: w[p:]}, x)

    zero = torch.zeros(2 * p, dtype=dtype, device=device)
    f0 = vmap(pair, in_dims=(None, 0), chunk_size=chunk_size)(zero, X)            # (N, C)
    grad = vmap(jacrev(pair), in_dims=(None, 0), chunk_size=chunk_size)(zero, X)  # (N, C, 2p)
    try:
        hess = vmap(hessian(pair), in_dims=(None, 0), chunk_size=chunk_size)(zero, X)  # (N, C, 2p, 2p)
    except NotImplementedError as exc:
        if "forward AD" not in str(exc):
            raise
        raise NotImplementedError(
            f"{exc}. The Hessian is taken forward-over-reverse and a fused kernel in `module` has no forward-mode "
            "derivative; for nn.MultiheadAttention call it with need_weights=True or inside "
            "torch.nn.attention.sdpa_kernel(SDPBackend.MATH) (see nqf.structure.attention_layouts).") from exc
    H11, H22, H12 = hess[..., :p, :p], hess[..., p:, p:], hess[..., :p, p:]
    g1, g2 = grad[..., :p], grad[..., p:]
    scale = max(float(H11.abs().max()), float(g1.abs().max()), 1e-300)
    tol = tolerance(dtype, 1e4)
    if check:
        err = max(float((H22 - H11).abs().max()), float((g2 - g1).abs().max()))
        if err > tol * scale:
            raise NormalFormError(
                f"the units are not interchangeable: the Hessian/gradient of unit {last} differs from unit 0 by "
                f"{err:.3e} (scale {scale:.3e}); the normal form needs a module unchanged by any permutation "
                "of its units. Check the unit layout (`units`) or the module.")
        _check_all_units(fn, X, dtype, device, tol, seed, chunk_size)
    A = 0.25 * (H11 + H11.transpose(-1, -2))
    B = 0.25 * (H12 + H12.transpose(-1, -2))
    has_b = float(g1.abs().max()) > tol * scale
    has_B = float(B.abs().max()) > tol * scale
    if (has_b or has_B) and zgz == "require":
        raise NormalFormError(
            f"the zero-gradient condition fails: max |∇_w1 f(0)| = {float(g1.abs().max()):.3e}, max |B| = "
            f"{float(B.abs().max()):.3e}; a unit at zero still gets gradient. Use zgz='carry' to keep the "
            "linear term b(x) and the cross term B(x) (dynamics then close on (M, μ)).")
    op = DenseStructure(A, offset=f0, linear=g1 if has_b else None,
                        cross=B if has_B else None, layout=fn.layout.describe(params), check_symmetric=False)
    if check:
        check_truncation_order(module, fn.layout, op, X, output=output, seed=seed, chunk_size=chunk_size)
    return op


def _check_all_units(fn: _UnitFunction, X, dtype, device, tol, seed, chunk_size) -> None:
    """Every unit has the same curvature ``vᵀ ∇²_{w_i} f v`` (forward-over-forward) along one direction."""
    m, p = fn.layout.n_units, fn.p
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    v = torch.randn(p, generator=gen, dtype=dtype).to(device)
    zero = torch.zeros(p, dtype=dtype, device=device)
    idx = list(range(m)) if m <= 64 else sorted({0, m - 1, *torch.randperm(m, generator=gen)[:62].tolist()})

    def curvature(i, x):
        def g(w):
            return fn({i: w}, x)

        def dg(w):
            return jvp(g, (w,), (v,))[1]

        return jvp(dg, (zero,), (v,))[1]

    ref = None
    for i in idx:
        c = vmap(lambda x, i=i: curvature(i, x), chunk_size=chunk_size)(X)
        if ref is None:
            ref, rscale = c, max(float(c.abs().max()), 1e-300)
            continue
        err = float((c - ref).abs().max())
        if err > tol * max(rscale, 1e-300) and err > tol:
            raise NormalFormError(
                f"the units are not interchangeable: unit {i} has curvature differing from unit 0 by {err:.3e} "
                f"(scale {rscale:.3e}) along a random direction; the normal form needs a module unchanged by any "
                "permutation of its units (a fixed per-unit coefficient, for instance, breaks it).")


def check_truncation_order(module, layout: UnitLayout, op, X, *, output=None, seed=0, chunk_size=256,
                           scales=(1e-2, 1e-3), min_order: float = 2.5) -> float:
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
    mod = copy.deepcopy(module).to(torch.float64)
    fn = _UnitFunction(mod, layout, output)
    m, p = fn.layout.n_units, fn.p
    gen = torch.Generator(device="cpu").manual_seed(seed + 2)
    W = torch.randn(p, m, generator=gen, dtype=torch.float64).to(X.device) / math.sqrt(m)
    X64 = X.to(torch.float64)
    op64 = op.to(torch.float64)
    errs, sizes = [], []
    for s in scales:
        Ws = s * W
        f = vmap(lambda x: fn({i: Ws[:, i] for i in range(m)}, x), chunk_size=chunk_size)(X64)
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
            "units are not interchangeable. The normal form needs a C³ module.")
    return slope
