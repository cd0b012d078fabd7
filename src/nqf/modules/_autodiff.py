r"""Structure matrices of any PyTorch module by automatic differentiation.

For a module whose units (described by a :class:`~nqf.modules.UnitLayout`)
are interchangeable, the normal form (docs/theory.md, section 1) is

.. math::

    f_x(W) = f_x(0) + b(x)ᵀμ + μᵀB(x)μ + \mathrm{Tr}[M (A(x) − B(x))] + O(‖W‖³)

with ``A = ½ ∇²_{w_1} f_x(0)``, ``B = ½ ∂²f_x/∂w_1∂w_2 (0)``, ``b = ∇_{w_1} f_x(0)``,
``M = W Wᵀ`` and ``μ = Σ_i w_i``.  Under the zero-gradient condition
``b = B = 0`` and the output is ``f_x(0) + Tr[M A(x)]``.

How :func:`from_module` computes it
-----------------------------------
* **On copies with one and two units.**  ``A``, ``b`` and ``B`` are taken with
  all other units at zero, so they are the same for the module and for a copy
  that keeps only unit 0 (for ``A``, ``b``) or units 0 and 1 (for ``B``)
  (:func:`nqf.modules._narrowed.reduced_copy`).  Each copy is checked against
  the module before use: on a few samples, ``f(W) − f(0)`` with only the kept
  units non-zero must agree to round-off.  ``f(0)`` itself is taken from the
  copy when it agrees too, else from the module (one forward pass; e.g. heads
  summed over a fixed value path each add to ``f(0)``).  The derivatives cost
  what one unit costs, independent of the width ``m``; when no faithful copy
  exists (a buffer sized by the width, a softmax gate over all experts whose
  ``1/m`` enters ``A``) the full module is differentiated.
* **One pass** of forward-over-reverse (``jacfwd(jacrev)`` with the function
  value and gradient as auxiliary outputs) gives ``f(0)``, ``b`` and the
  Hessian ``∇²_{w_1} f`` (``p × p`` per sample and output), per slice block,
  vectorised over samples in chunks sized to :data:`MEMORY_BUDGET` and written
  straight into the symmetrised ``A``.  Modules without forward-mode rules
  fall back to reverse-over-reverse (``jacrev(jacrev)``).  Everything runs
  inside :func:`nqf.modules._narrowed.evaluation_mode` (PyTorch's attention
  fast paths off, ``scaled_dot_product_attention`` on its math kernel) on an
  eval-mode copy (dropout off), and ``nn.MultiheadAttention`` layers of the
  reduced copies are replaced by the explicit-softmax
  :class:`~nqf.modules._attention_layouts.HeadSubsetAttention`, so
  ``nn.MultiheadAttention(need_weights=False)`` and
  ``nn.TransformerEncoderLayer`` work (their heads are the units; residual,
  layer norms and feed-forward are part of the fixed map that reads them out).
* **Cross term** ``B``: the product ``(∂²f/∂w_1∂w_2) v`` for a random ``v`` is
  computed first; only when it is non-zero is the full ``p × p`` block built.
* **Matrix-free** (``matrix_free=True``, and by default when the ``N × C × p × p``
  array would exceed :data:`MEMORY_BUDGET`): no array is built; the operator
  (:class:`~nqf.modules._matrix_free.MatrixFreeStructure`) keeps the checked
  copies and the inputs and evaluates ``𝒜(L Lᵀ)``, ``𝒜*(R) L``, ``𝒜(M)`` and
  ``𝒜*(R)`` by jvps and vjps of the one-unit (two-unit for ``B``) function; the
  same checks run on it.

Checks (``check=True``)
-----------------------
* smoothness: known non-smooth layers (ReLU, …) are refused with a message
  naming smooth replacements, and the truncation error ``|f(sW) − f_NF(sW)|``
  must shrink at least like ``s³`` for a random ``W`` (a kink at zero gives ``s²``);
* permutation symmetry, on the full module (float64 copy, a few samples):
  ``f(W) = f(Wπ)`` for a random ``W`` and two permutations ``π`` that together
  generate all permutations (a cyclic shift and a transposition); a failure
  names the first unit whose gradient or curvature differs from unit 0's;
* the zero-gradient condition (``b = 0`` and ``B = 0``): reported by the
  returned operator's ``satisfies_zgz``; ``zgz="require"`` turns a failure into
  an error.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import jacfwd, jacrev, jvp, vmap

from .._validation import as_tensor, one_of, tolerance
from ..errors import InvalidParameterError, InvalidTypeError, NormalFormError
from ..structure import (
    REGISTRY,
    ActivationModule,
    DenseStructure,
)
from ._assumptions import check_permutation_symmetry, check_truncation_order
from ._matrix_free import matrix_free_operator
from ._narrowed import evaluation_mode, faithful_reduced_copy
from ._unit_function import UnitFunction as _UnitFunction
from ._units import UnitLayout, UnitSlice

__all__ = ["from_module", "NON_SMOOTH_MODULES", "is_non_smooth_layer"]

#: Layers that are not three times differentiable at zero input: the non-smooth activations of
#: :data:`~nqf.structure.REGISTRY` and max pooling.
NON_SMOOTH_MODULES: tuple[type[nn.Module], ...] = REGISTRY.module_classes(smooth=False) + (
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.MaxPool3d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
)


def is_non_smooth_layer(module: nn.Module) -> bool:
    """A layer known not to be three times differentiable at zero (:data:`NON_SMOOTH_MODULES`, or an
    :class:`~nqf.structure.ActivationModule` of a non-smooth activation such as ``abs``)."""
    if isinstance(module, NON_SMOOTH_MODULES):
        return True
    rec = REGISTRY.of_module(module) if isinstance(module, ActivationModule) else None
    return rec is not None and not rec.smooth


#: Bytes one vectorised chunk of the Hessian may use (sets the automatic chunk size).
MEMORY_BUDGET = 256 * 2**20
#: Samples used by the symmetry, reduced-copy and truncation checks.
CHECK_SAMPLES = 16


def _as_layout(units) -> UnitLayout:
    if isinstance(units, UnitLayout):
        return units
    if isinstance(units, UnitSlice):
        return UnitLayout([units])
    if isinstance(units, Sequence) and units and all(isinstance(u, UnitSlice) for u in units):
        return UnitLayout(list(units))
    raise InvalidTypeError(
        "`units` must be a UnitLayout or a sequence of UnitSlice; found "
        f"{type(units).__name__}. Helpers: nqf.modules.find_units, mlp_units, attention_units, "
        "conv_units"
    )


def _scan_non_smooth(module: nn.Module) -> None:
    for name, sub in module.named_modules():
        if is_non_smooth_layer(sub):
            raise NormalFormError(
                f"module `{name or type(module).__name__}` is {REGISTRY.label(sub)}, which is not three times "
                "differentiable at zero: the normal form Tr[W Wᵀ A(x)] needs a C³ module (a ReLU's Hessian at "
                "W = 0 is not defined, and autodiff would silently return a zero matrix). Use a smooth "
                f"activation such as {REGISTRY.smooth_alternatives_text()}."
            )


def _auto_chunk(fn: _UnitFunction, x: torch.Tensor, C: int, p: int, N: int) -> int:
    """Samples per chunk so that one chunk of ``vmap(hessian)`` stays within :data:`MEMORY_BUDGET`.

    Per sample the forward-over-reverse Hessian holds, for each of the ``C·p``
    (output, direction) pairs, the activations saved by one forward pass
    (measured with ``saved_tensors_hooks``) and a row of ``p`` entries.
    """
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    w = torch.zeros(p, dtype=x.dtype, device=x.device, requires_grad=True)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn({0: w}, x)
    item = torch.finfo(x.dtype).bits // 8
    per_sample = 3 * C * p * (saved[0] + 4 * p * item) + 1
    return int(max(1, min(N, MEMORY_BUDGET // per_sample)))


def _absmax(t: torch.Tensor) -> float:
    lo, hi = torch.aminmax(t)
    return max(-float(lo), float(hi))


def _derivatives(fn: _UnitFunction, fn2: _UnitFunction, X: torch.Tensor, chunk: int, tol: float, seed: int):
    r"""Derivatives of unit 0 (all others at zero), chunk by chunk into preallocated arrays.

    ``fn`` holds at least one unit, ``fn2`` at least two (for the cross term).
    Returns ``f(0)`` (N, C), ``b = ∇_{w_1} f`` (N, C, p), ``A = ¼(H + Hᵀ)`` with
    ``H = ∇²_{w_1} f`` (N, C, p, p), ``H₁₂ = ∂²f/∂w_1∂w_2`` (N, C, p, p) or
    ``None`` when ``H₁₂ v = 0`` for a random ``v``, and the scale
    ``max(|H|, |b|)``.  One forward-over-reverse pass gives ``f``, ``b`` and
    ``H`` together; a module without forward-mode rules is differentiated
    reverse-over-reverse instead.
    """
    p, dtype, device = fn.p, X.dtype, X.device
    N = X.shape[0]
    zero = torch.zeros(p, dtype=dtype, device=device)
    gen = torch.Generator(device="cpu").manual_seed(seed + 3)
    v = torch.randn(p, generator=gen, dtype=dtype).to(device)

    pieces0 = fn.zero_pieces(dtype, device)
    bounds = torch.cumsum(torch.tensor([0, *fn.sizes]), 0).tolist()
    rng = [slice(bounds[j], bounds[j + 1]) for j in range(len(fn.sizes))]

    def value(pieces, x):
        out = fn.pieces(pieces, x)
        return out, out

    def grad(pieces, x):
        g, out = jacrev(value, has_aux=True)(pieces, x)
        return g, (g, out)

    def pair(w0, w1, x):
        return fn2({0: w0, 1: w1}, x)

    def cross_fwd(x):  # (∂²f/∂w_0∂w_1) v: forward (along v in w_1) over reverse (in w_0)
        return jvp(lambda w1: jacrev(pair, argnums=0)(zero, w1, x), (zero,), (v,))[1]

    def cross_rev(x):
        return jacrev(lambda w0: jacrev(pair, argnums=1)(w0, zero, x) @ v)(zero)

    plans = [(jacfwd, cross_fwd), (jacrev, cross_rev)]
    f0 = g1 = A = probe = None
    start = 0
    while start < N:
        xs = X[start : start + chunk]
        try:
            outer, cross = plans[0]
            H, (g, out) = vmap(outer(grad, has_aux=True), in_dims=(None, 0))(pieces0, xs)
            pr = vmap(cross)(xs)
        except NotImplementedError as exc:  # a kernel without forward-mode AD: reverse over reverse
            if "forward" not in str(exc).lower() or len(plans) == 1:
                raise
            plans.pop(0)
            continue
        if f0 is None or g1 is None or A is None or probe is None:
            C = out.shape[-1]
            f0 = torch.empty(N, C, dtype=dtype, device=device)
            g1 = torch.empty(N, C, p, dtype=dtype, device=device)
            A = torch.empty(N, C, p, p, dtype=dtype, device=device)
            probe = torch.empty(N, C, p, dtype=dtype, device=device)
        sl = slice(start, start + xs.shape[0])
        f0[sl], probe[sl] = out, pr
        for i, ri in enumerate(rng):
            g1[sl, :, ri] = g[i]
            for j, rj in enumerate(rng):  # A = ¼(H + Hᵀ), block by block
                A[sl, :, ri, rj].copy_(H[i][j]).add_(H[j][i].transpose(-1, -2)).mul_(0.25)
        start += xs.shape[0]
    assert f0 is not None and g1 is not None and A is not None and probe is not None  # N ≥ 1
    scale = max(2 * _absmax(A), _absmax(g1), 1e-300)
    H12 = None
    if _absmax(probe) > 0.1 * tol * scale * float(v.abs().max()):
        outer = plans[0][0]
        H12 = vmap(outer(jacrev(pair, argnums=0), argnums=1), in_dims=(None, None, 0), chunk_size=chunk)(
            zero, zero, X
        )  # (N, C, p, p): [.., w0, w1]
    return f0, g1, A, H12, scale


def _dense_operator(fn: _UnitFunction, fn2: _UnitFunction, X: torch.Tensor, chunk: int, tol: float, seed: int):
    """:class:`DenseStructure` from :func:`_derivatives`, with ``b`` and ``B`` kept when above ``tol · scale``.

    Returns the operator (``offset`` from ``fn``), ``max |b|`` and ``max |B|``.
    """
    f0, g1, A, H12, scale = _derivatives(fn, fn2, X, chunk, tol, seed)
    B = None if H12 is None else 0.25 * (H12 + H12.transpose(-1, -2))
    b_max, B_max = _absmax(g1), 0.0 if B is None else _absmax(B)
    op = DenseStructure(
        A,
        offset=f0,
        linear=g1 if b_max > tol * scale else None,
        cross=B if B is not None and B_max > tol * scale else None,
        check_symmetric=False,
    )
    return op, b_max, B_max


def from_module(
    module: nn.Module,
    units,
    inputs,
    *,
    output: Callable[[torch.Tensor], torch.Tensor] | None = None,
    zgz: str = "carry",
    check: bool = True,
    chunk_size: int | None = None,
    seed: int = 0,
    reduce: bool = True,
    matrix_free: bool | None = None,
):
    r"""Structure operator of ``module`` by autodiff: ``A(x) = ½ ∇²_{w_1} f_x(0)``.

    Parameters
    ----------
    module : torch.nn.Module
        The module; it is called on a batch of one sample, ``module(x[None])``,
        in eval mode (dropout off).  Parameters not in ``units`` are held at
        their current values; ``module`` itself is not modified.
    units : UnitLayout or sequence of UnitSlice
        Which parameter slices form one unit (see :mod:`nqf.modules._units`,
        :func:`nqf.modules.find_units` and the helpers :func:`mlp_units`,
        :func:`attention_units`, :func:`conv_units`).  At least two units.
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
        Samples per vectorised chunk; default: as many as fit in
        :data:`MEMORY_BUDGET` (256 MiB) of intermediate arrays.
    seed : int
        Seed of the random directions used by the checks.
    reduce : bool
        Differentiate a checked two-unit copy of the module (cost independent
        of the width); ``False`` differentiates the full module.
    matrix_free : bool or None
        Return an operator that evaluates ``𝒜(L Lᵀ)``, ``𝒜*(R) L``, … by
        directional derivatives of the one-unit function and never forms the
        ``(N, C, p, p)`` array (:mod:`nqf.modules._matrix_free`); each
        product then costs autodiff passes over all samples instead of an
        einsum.  Default: matrix-free exactly when that array would exceed
        :data:`MEMORY_BUDGET`, dense otherwise.

    Returns
    -------
    StructureOperator
        A :class:`~nqf.structure.DenseStructure` with ``A`` of shape
        ``(N, C, p, p)`` (or the matrix-free operator), ``offset = f_x(0)`` and,
        when the zero-gradient condition fails, ``linear = b`` and ``cross = B``.

    Raises
    ------
    NormalFormError
        Non-smooth module, units that are not interchangeable, or (with
        ``zgz="require"``) a failing zero-gradient condition.
    """
    if not isinstance(module, nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    one_of("zgz", zgz, ("carry", "require"))
    layout = _as_layout(units)
    params = dict(module.named_parameters())
    if not params:
        raise InvalidParameterError("`module` has no parameters")
    dtype = next(iter(params.values())).dtype
    device = next(iter(params.values())).device
    X = as_tensor("inputs", inputs, dtype=dtype, device=device)
    if X.ndim < 1 or X.shape[0] == 0:
        raise InvalidParameterError(
            f"`inputs` must have a leading sample axis with N ≥ 1; found shape {tuple(X.shape)}"
        )
    if check:
        _scan_non_smooth(module)
    lay = layout.resolve(params)
    m, N = lay.m, X.shape[0]
    if m < 2:
        raise InvalidParameterError(
            f"`units` describes {m} unit; at least 2 are needed to check the permutation "
            "symmetry and the cross-unit term (A does not depend on the width, so build the "
            "module wider)"
        )
    gen = torch.Generator(device="cpu").manual_seed(seed)
    sub = torch.randperm(N, generator=gen)[:CHECK_SAMPLES].sort().values.to(X.device)
    full = copy.deepcopy(module).eval()
    copies = []
    for k in (1, 2):
        found = faithful_reduced_copy(full, lay, X[sub], n_units=k, output=output, seed=seed) if reduce else None
        if found is None:
            if reduce and m > 64:
                warnings.warn(
                    f"from_module: no faithful {k}-unit copy of the module could be made; "
                    f"differentiating all {m} units (cost grows with the width)",
                    RuntimeWarning,
                    stacklevel=2,
                )
            found = (full, lay, True)
        copies.append(found)
    (red1, lay1, same_f0), (red, red_lay, same_f0_2) = copies
    fn, fn2 = _UnitFunction(red1, lay1, output), _UnitFunction(red, red_lay, output)
    p = fn.p
    tol = tolerance(dtype, 1e4)
    with evaluation_mode():
        C = fn({}, X[0]).numel()
        chunk = chunk_size if chunk_size is not None else _auto_chunk(fn, X[0], C, p, N)
        if matrix_free is None:  # dense while A fits the budget: every number as before
            matrix_free = N * C * p * p * X.element_size() > MEMORY_BUDGET
        if matrix_free:
            op, b_max, B_max = matrix_free_operator(
                fn, fn2, X, tol=tol, seed=seed, budget=MEMORY_BUDGET, chunk_size=chunk_size
            )
        else:
            op, b_max, B_max = _dense_operator(fn, fn2, X, chunk, tol, seed)
        # the copy's zero units may not add what the module's add to f(0) (e.g. heads summed over fixed values):
        # then f(0) comes from the module (one forward pass), and the truncation check uses the copy's own f(0)
        f0_check = op.offset[sub] if same_f0 and same_f0_2 else vmap(lambda x: fn2({}, x))(X[sub])
        if not same_f0:
            fn_full = _UnitFunction(full, lay, output)
            op.offset = vmap(lambda x: fn_full({}, x), chunk_size=max(chunk, 256))(X)
    if check:
        check_permutation_symmetry(full, lay, X[sub], output=output, seed=seed)
    if not op.satisfies_zgz and zgz == "require":
        raise NormalFormError(
            f"the zero-gradient condition fails: max |∇_w1 f(0)| = {b_max:.3e}, max |B| = "
            f"{B_max:.3e}; a unit at zero still gets gradient. Use "
            "zgz='carry' to keep the linear term b(x) and the cross term B(x) (dynamics then close on (M, μ))."
        )
    op.layout = lay.describe(params)
    if check:
        op_check = op.take(sub)
        op_check.offset = f0_check
        check_truncation_order(red, red_lay, op_check, X[sub], output=output, seed=seed, chunk_size=chunk)
    return op
