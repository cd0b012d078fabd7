r"""Convolutional layer with its output channels as units (1-D and 2-D).

Module (one convolution without bias, a smooth activation ``σ``, a linear
readout), for an input ``x`` with ``in_channels`` channels and ``Q`` output
positions ``patch_q(x) ∈ R^k`` (``k = in_channels · kernel``, flattened in the
order of ``nn.Conv1d.weight[ch]`` / ``nn.Conv2d.weight[ch]``, i.e.
in-channel-major; positions row-major)::

    readout="position":  f_c(x) = Σ_ch Σ_q a_{ch,c,q} σ(u_ch · patch_q(x)),   a_ch ∈ R^{C×Q}
    readout="mean":      f_c(x) = Σ_ch a_{ch,c} · (1/Q) Σ_q σ(u_ch · patch_q(x)),   a_ch ∈ R^C

Unit ``w_ch = (a_ch, u_ch)``: the readout weights of channel ``ch``
(flattened output-major, index ``c·Q + q`` for the per-position readout) then
its flattened filter ``u_ch ∈ R^k``; ``p = C·Q + k`` or ``C + k``.

Structure matrices (docs/theory.md §1).  At ``W = 0`` the only non-zero
second derivative of one channel is ``∂²f_c/∂a_{c,q}∂u = σ'(0) patch_q(x)``
(the ``u``–``u`` block is ``σ''(0) Σ a … = 0`` at ``a = 0``), so

.. math::

    A_c(x) = \frac{σ'(0)}{2}\begin{pmatrix} 0 & e_c ⊗ P(x) \\ (e_c ⊗ P(x))ᵀ & 0 \end{pmatrix},

with ``P(x) ∈ R^{Q×k}`` the patch matrix (per-position readout) or the mean
patch ``P̄(x) = (1/Q) Σ_q patch_q(x) ∈ R^{1×k}`` (mean readout).  The operator
stores only ``P`` (``N × Q × k``) or ``P̄`` (``N × k``) in a
:class:`~nqf.structure.OneHotKronKernel`, never ``N × p × p``.

When ``σ(0) ≠ 0`` (sigmoid) the zero-gradient condition fails: a channel at
zero still has ``∂f_c/∂a_{c,q} = σ(0)`` (per position) or ``∂f_c/∂a_c = σ(0)``
(mean), so the operator carries the linear term ``b_c(x)`` with ``σ(0)`` on the
readout entries of output ``c`` and zero elsewhere; the filter gradient
``σ'(0) Σ_q a_{c,q} patch_q`` vanishes at ``a = 0``, ``B = 0`` (the module is
additive over channels) and ``f(0) = 0``.

Truncation order: the remainder ``f(W) − f(0) − bᵀμ − Tr[M A]`` is
``O(‖W‖³)`` when ``σ''(0) ≠ 0`` (gelu, centred softplus) and ``O(‖W‖⁴)``
when ``σ''(0) = 0`` (tanh, sin, erf, sigmoid), because the next term of a
channel is ``a · σ^{(j)}(0) (u·patch)^j / j!``.

Loss and time conventions of the dynamics built on this operator:
``L = (1/N) Σ_n ℓ(f_n, y_n)``, ``ℓ = ½ (f − y)²`` for MSE, GD
``W ← W − η ∇_W L``, ``t = η · steps``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as Fn

from .._validation import as_tensor, int_tuple, one_of, positive_int
from ..errors import ShapeError
from ._activations import get_activation
from ._bilinear import BilinearStructure, OneHotKronKernel

__all__ = ["conv1d", "conv2d", "conv_output_size", "CONV_READOUTS"]

#: Readouts of the channel outputs.
CONV_READOUTS = ("mean", "position")


def conv_output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Number of output positions along one axis: ``⌊(size + 2·padding − kernel)/stride⌋ + 1``."""
    return (size + 2 * padding - kernel) // stride + 1


def _check_common(readout, n_outputs) -> int:
    one_of("readout", readout, CONV_READOUTS)
    return positive_int("n_outputs", n_outputs)


def _check_fits(sizes, kernel, padding, axis_names) -> None:
    for size, k, pad, ax in zip(sizes, kernel, padding, axis_names, strict=True):
        if size + 2 * pad < k:
            raise ShapeError(
                f"`kernel_size` {k} along {ax} is larger than the padded input ({size} + 2·{pad} = "
                f"{size + 2 * pad}); reduce the kernel or increase `padding`"
            )


def _build(F: torch.Tensor, act, readout: str, C: int, Q: int, k: int, desc: str, bias: bool) -> BilinearStructure:
    """Operator from the per-sample factor ``F`` of shape ``(N, q, k)`` (``q = Q`` or 1); with ``bias`` the
    filter has one more entry, the channel's bias, seen by every patch as a constant input 1."""
    N, q, _ = F.shape
    p1 = C * q
    k = k + (1 if bias else 0)
    p = p1 + k
    kernel = OneHotKronKernel(F, C, scale=act.s1, append_one=bias)
    desc = f"{desc}, then the channel's bias" if bias else desc
    if readout == "position":
        a_desc = f"a ∈ R^{p1} readout [0:{p1}] (index c·Q + q, C = {C}, Q = {Q})"
    else:
        a_desc = f"a ∈ R^{C} readout of the mean over Q = {Q} positions [0:{C}]"
    layout = f"w = ({a_desc}, u ∈ R^{k} filter [{p1}:{p}] ({desc}))"
    op = BilinearStructure(p, slice(0, p1), slice(p1, p), kernel, layout=layout)
    if not act.zgz:
        b = torch.zeros(1, C, p, dtype=F.dtype, device=F.device)
        for c in range(C):
            b[0, c, c * q : (c + 1) * q] = act.s0
        op.linear = b.expand(N, C, p)
    return op


def conv1d(
    X,
    kernel_size: int | tuple[int, ...],
    stride: int | tuple[int, ...] = 1,
    padding: int | tuple[int, ...] = 0,
    activation="tanh",
    readout: str = "mean",
    n_outputs: int = 1,
    *,
    bias: bool = False,
    dtype=None,
) -> BilinearStructure:
    r"""Structure operator of a 1-D convolution with channels as units.

    ``f_c(x) = Σ_ch Σ_q a_{ch,c,q} σ(u_ch · patch_q(x))`` (``readout="position"``)
    or ``f_c(x) = Σ_ch a_{ch,c} mean_q σ(u_ch · patch_q(x))`` (``readout="mean"``);
    ``A_c(x) = σ'(0)/2 [[0, e_c ⊗ P], [(e_c ⊗ P)ᵀ, 0]]`` (module docstring).
    The real module is :class:`nqf.networks.ConvNet1d`
    (``nn.Conv1d(in_channels, m, kernel_size, stride, padding, bias=False)``,
    zero padding).

    Parameters
    ----------
    X : array_like, shape (N, in_channels, L)
        Inputs (use ``X[:, None, :]`` for one channel).
    kernel_size, stride, padding : int
        As in ``nn.Conv1d`` (``kernel_size ≥ 1``, ``stride ≥ 1``, ``padding ≥ 0``, zeros).
    activation : str or callable
        Smooth activation (see :func:`nqf.structure.get_activation`).
    readout : {"mean", "position"}
    n_outputs : int
        ``C``.
    bias : bool
        The convolution has a bias (``nn.Conv1d(..., bias=True)``, the default of torch): each
        channel's bias is the last entry of its unit (after the filter), a constant input 1 of every
        patch (the layout of :func:`nqf.modules.conv_units`).
    dtype : torch.dtype, optional
        Default: ``X``'s floating dtype, or float64.

    Returns
    -------
    BilinearStructure
        ``p = C·Q + in_channels·kernel_size`` (position) or ``C + in_channels·kernel_size``
        (mean), one more with ``bias``, ``Q = ⌊(L + 2·padding − kernel_size)/stride⌋ + 1``.  Carries
        ``linear`` when ``σ(0) ≠ 0``.

    Raises
    ------
    ShapeError
        ``X`` not 3-D, an empty axis, or a kernel larger than the padded input.
    NonFiniteError
        ``X`` contains NaN or inf.
    NormalFormError
        Non-smooth activation (ReLU …).
    ValueError
        Unknown ``readout``, bad ``kernel_size``/``stride``/``padding``/``n_outputs``.
    """
    X = as_tensor("X", X, ndim=3, dtype=dtype)
    if any(d == 0 for d in X.shape):
        raise ShapeError(f"`X` must have shape (N, in_channels, L) with every size ≥ 1; found {tuple(X.shape)}")
    (k,) = int_tuple("kernel_size", kernel_size, 1, 1)
    (s,) = int_tuple("stride", stride, 1, 1)
    (pad,) = int_tuple("padding", padding, 1, 0)
    C = _check_common(readout, n_outputs)
    act = get_activation(activation)
    N, cin, L = X.shape
    _check_fits((L,), (k,), (pad,), ("the length",))
    Xp = Fn.pad(X, (pad, pad)) if pad else X
    win = Xp.unfold(2, k, s)  # (N, cin, Q, k), a view
    Q = win.shape[2]
    if readout == "mean":
        F = win.mean(2).reshape(N, 1, cin * k)
    else:
        F = win.permute(0, 2, 1, 3).reshape(N, Q, cin * k)
    return _build(F, act, readout, C, Q, cin * k, f"in_channels = {cin} × kernel {k}, as Conv1d.weight[ch]", bias)


def conv2d(
    X,
    kernel_size: int | tuple[int, ...],
    stride: int | tuple[int, ...] = 1,
    padding: int | tuple[int, ...] = 0,
    activation="tanh",
    readout: str = "mean",
    n_outputs: int = 1,
    *,
    bias: bool = False,
    dtype=None,
) -> BilinearStructure:
    r"""Structure operator of a 2-D convolution with channels as units.

    Same module and ``A`` as :func:`conv1d`, with patches of ``kh × kw``
    pixels over ``in_channels`` (flattened as ``nn.Conv2d.weight[ch]``,
    ``(in_channels, kh, kw)``) at ``Q = H_out · W_out`` positions in row-major
    order.  The real module is :class:`nqf.networks.ConvNet2d`.

    Parameters
    ----------
    X : array_like, shape (N, in_channels, H, W)
    kernel_size, stride, padding : int or (int, int)
        As in ``nn.Conv2d`` (zero padding).
    activation : str or callable
    readout : {"mean", "position"}
    n_outputs : int
    bias : bool
        As for :func:`conv1d`.
    dtype : torch.dtype, optional

    Returns
    -------
    BilinearStructure
        ``p = C·Q + in_channels·kh·kw`` (position) or ``C + in_channels·kh·kw`` (mean), one more with ``bias``.

    Raises
    ------
    ShapeError, NonFiniteError, NormalFormError, ValueError
        As for :func:`conv1d` (``X`` must be 4-D).
    """
    X = as_tensor("X", X, ndim=4, dtype=dtype)
    if any(d == 0 for d in X.shape):
        raise ShapeError(f"`X` must have shape (N, in_channels, H, W) with every size ≥ 1; found {tuple(X.shape)}")
    ks = int_tuple("kernel_size", kernel_size, 2, 1)
    st = int_tuple("stride", stride, 2, 1)
    pd = int_tuple("padding", padding, 2, 0)
    C = _check_common(readout, n_outputs)
    act = get_activation(activation)
    N, cin, H, W = X.shape
    _check_fits((H, W), ks, pd, ("the height", "the width"))
    cols = Fn.unfold(X, ks, padding=pd, stride=st)  # (N, cin·kh·kw, Q)
    Q = cols.shape[-1]
    k = cin * ks[0] * ks[1]
    F = cols.mean(-1).reshape(N, 1, k) if readout == "mean" else cols.transpose(1, 2).contiguous()
    return _build(F, act, readout, C, Q, k, f"in_channels = {cin} × kernel {ks[0]}×{ks[1]}, as Conv2d.weight[ch]", bias)
