"""The structure operator of the chosen units: analytic where the family is recognised, matrix-free otherwise.

:func:`structure_of` tries, in order,

1. **analytic, structured** operators of :mod:`nqf.structure` where the units are a recognised
   family: hidden neurons of a model that *is* a two-layer MLP (:func:`nqf.structure.mlp`,
   memory ``O(N D)``) and channels of a ``Conv1d``/``Conv2d`` read by an ``nn.Linear`` after a
   flatten (per-position readout) or a global average pool (mean readout)
   (:func:`nqf.structure.conv1d` / :func:`~nqf.structure.conv2d` on the convolution's own input,
   captured by a hook; memory ``O(N Q k)``).  Each is accepted only if it equals the module's
   own autodiff operator (:func:`nqf.modules.from_module`, matrix-free) on a few samples to
   ``1e-10``: forward and adjoint on random arguments, linear term, cross term.  Layers before
   the units, a readout bias or anything else that keeps the quadratic form are allowed; anything
   that changes it fails the check, and the next option is taken;
2. the **dense autodiff** operator ``N × C × p × p`` when it fits in :data:`DENSE_BUDGET`;
3. the **matrix-free autodiff** operator (:class:`nqf.modules.from_module` with
   ``matrix_free=True``: ``forward_factor`` / ``adjoint_apply`` through ``torch.func``, memory
   ``O(N (p + C))`` plus one chunk).

The label (``"analytic mlp"``, ``"analytic conv2d"``, ``"autodiff (dense)"``, ``"autodiff
(matrix-free)"``) is what ``nqf analyze`` prints after the units.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._discover import FoundUnits, output_at_zero

__all__ = ["structure_of", "is_analytic", "DENSE_BUDGET", "AGREEMENT_RTOL"]

#: Bytes the dense autodiff array ``N × C × p × p`` (float64, built twice) may take; above it, matrix-free.
DENSE_BUDGET = 256 * 2**20
#: An analytic operator is used only if it equals the module's autodiff operator to this relative error.
AGREEMENT_RTOL = 1e-10


def structure_of(module: nn.Module, found: FoundUnits, X: torch.Tensor, *, check_samples: int = 8):
    """Structure operator of the chosen units on inputs ``X`` (see the module docstring).

    Returns
    -------
    op : StructureOperator
    offset : torch.Tensor, shape (N, C)
        ``f(0)``; for an analytic operator it is *not* part of ``op`` (subtract it from the
        targets), for the autodiff operators it is ``op.offset`` already.
    how : str
        Which operator: ``"analytic mlp"``, ``"analytic conv1d"``, ``"analytic conv2d"``,
        ``"autodiff (dense)"`` or ``"autodiff (matrix-free)"``.
    """
    from ..modules import from_module

    f0 = output_at_zero(module, found.layout, X)
    C = f0.shape[1]
    sub = torch.arange(min(check_samples, X.shape[0]))
    for build in (_analytic_mlp, _analytic_conv):
        built = build(module, found, X, C)
        if built is not None and _agrees(built[0], module, found, X, sub):
            return built[0], f0, built[1]
    N, p = X.shape[0], found.p
    if N * C * p * p * 8 * 2 <= DENSE_BUDGET:
        op = from_module(module, found.layout, X, zgz="carry", matrix_free=False)
        return op, op.offset, "autodiff (dense)"
    op = from_module(module, found.layout, X, zgz="carry", matrix_free=True)
    return op, op.offset, "autodiff (matrix-free)"


def is_analytic(how: str) -> bool:
    """``True`` for the labels of :func:`structure_of` whose operator leaves ``f(0)`` out."""
    return how.startswith("analytic")


def _activation_name(act: nn.Module | None) -> str | None:
    """The registry name of a smooth activation (analytic operator possible), else None."""
    from ..structure import Activation, activation_of_module

    if isinstance(act, Activation):
        return act.name
    rec = None if act is None else activation_of_module(act)
    return rec.name if rec is not None and rec.smooth else None


def _analytic_mlp(module: nn.Module, found: FoundUnits, X: torch.Tensor, C: int):
    from ..structure import mlp

    act = _activation_name(found.activation)
    if not (found.is_whole_mlp and act is not None and X.ndim == 2):
        return None
    return mlp(X, act, bias=found.bias, n_outputs=C), "analytic mlp"


def _layer_input(module: nn.Module, name: str, X: torch.Tensor) -> torch.Tensor:
    """What the submodule ``name`` receives when ``module`` runs on ``X`` (a forward pre-hook)."""
    seen: list[torch.Tensor] = []
    layer = module.get_submodule(name)
    handle = layer.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            module(X)
    finally:
        handle.remove()
    return seen[0]


def _analytic_conv(module: nn.Module, found: FoundUnits, X: torch.Tensor, C: int):
    """:func:`nqf.structure.conv1d`/``conv2d`` for channels of a plain zero-padded convolution."""
    from ..structure import conv1d, conv2d

    act = _activation_name(found.activation)
    if found.kind != "conv-channels" or act is None or len(found.names) != 2:
        return None
    conv, readout = (module.get_submodule(n) for n in found.names)
    if not isinstance(conv, (nn.Conv1d, nn.Conv2d)) or not isinstance(readout, nn.Linear):
        return None
    if conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return None
    if any(d != 1 for d in conv.dilation):
        return None
    m = conv.out_channels
    mode = "mean" if readout.in_features == m else "position"
    Xc = _layer_input(module, found.names[0], X)
    build, label = (conv1d, "analytic conv1d") if isinstance(conv, nn.Conv1d) else (conv2d, "analytic conv2d")
    try:
        op = build(Xc, conv.kernel_size, conv.stride, conv.padding, act, mode, C, bias=conv.bias is not None)
    except (ValueError, RuntimeError):  # shapes the analytic family does not cover
        return None
    return (op, label) if op.p == found.p else None


def _agrees(op, module: nn.Module, found: FoundUnits, X: torch.Tensor, sub: torch.Tensor) -> bool:
    """``op`` on samples ``sub`` equals the module's matrix-free autodiff operator (module docstring)."""
    from ..modules import from_module

    ref = from_module(module, found.layout, X[sub], check=False, zgz="carry", matrix_free=True)
    mine = op.take(sub)
    gen = torch.Generator().manual_seed(0)
    p = found.p
    G = torch.randn(p, p, generator=gen, dtype=X.dtype)
    M = G + G.T
    R = torch.randn(len(sub), ref.n_outputs, generator=gen, dtype=X.dtype)
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = [(mine.forward_unchecked(M), ref.forward_unchecked(M))]
    pairs.append((mine.adjoint_unchecked(R), ref.adjoint_unchecked(R)))
    b, b_ref, B, B_ref = mine.linear, ref.linear, mine.cross, ref.cross
    if (b is None) != (b_ref is None) or (B is None) != (B_ref is None):
        return False
    if b is not None and b_ref is not None:
        pairs.append((b, b_ref))
    if B is not None and B_ref is not None:
        pairs.append((B.forward_unchecked(M), B_ref.forward_unchecked(M)))
    for a, b in pairs:
        if a.shape != b.shape:
            return False
        scale = max(float(b.abs().max()), 1e-300)
        if not float((a - b).abs().max()) <= AGREEMENT_RTOL * scale or not math.isfinite(scale):
            return False
    return True
