r"""Unit layout of the heads of PyTorch's :class:`torch.nn.MultiheadAttention`.

Head ``h`` of ``nn.MultiheadAttention(E, H)`` (``d_h = E/H``) owns

* ``out_proj.weight[:, h d_h:(h+1) d_h]`` — its ``W_O`` (``E × d_h``);
* rows ``h d_h:(h+1) d_h`` of the value, query and key projections — in the
  packed ``in_proj_weight`` (``3E × E``) at offsets ``2E``, ``0`` and ``E``, or in
  ``v_proj_weight``/``q_proj_weight``/``k_proj_weight`` when ``kdim``/``vdim`` differ;
* the same slices of ``in_proj_bias`` (if present);
* ``bias_k[..., h d_h:(h+1) d_h]`` and ``bias_v[...]`` (if ``add_bias_kv``).

The order is ``(W_O, W_V, [b_V], W_Q, W_K, [b_Q, b_K], [bias_k, bias_v])``, the
layout of :func:`nqf.structure.multi_head_attention` (with
``bias=True`` when the module has ``in_proj_bias``), so with mean readout of
``mha(x, x, x)`` the two operators agree entry by entry (``d_k = d_h``,
``C = E``; PyTorch scales scores by ``1/√d_h`` like ours).

Calling the module under autodiff
---------------------------------
With ``need_weights=False`` PyTorch routes ``nn.MultiheadAttention`` (and
``nn.TransformerEncoderLayer``, which always calls it so) to the fused
``scaled_dot_product_attention`` kernel or to a native fast path, neither of
which has a forward-mode derivative.  :func:`~nqf.modules.from_module`
therefore never differentiates PyTorch's attention module: it evaluates a
reduced copy of the model in which each ``nn.MultiheadAttention`` is replaced
by :class:`HeadSubsetAttention`, an explicit-softmax ("math") implementation
of the same forward with only the kept heads, and checks that the copy
reproduces the original module (see :func:`nqf.modules._narrowed.reduced_copy`).
Any model can therefore call ``self.attn(x, x, x, need_weights=False)``::

    class Wrapped(nn.Module):
        def __init__(self, E, H):
            super().__init__()
            self.attn = nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
        def forward(self, x):                      # x: (B, T, E)
            out, _ = self.attn(x, x, x, need_weights=False)
            return out.mean(1)                     # mean readout, (B, E)

    op = from_module(net := Wrapped(4, 2), attention_units(net.attn, "attn."), X)

Biases and the normal form
--------------------------
* ``out_proj.bias`` is shared by all heads: it is **not** part of any unit, is
  held fixed, and only shifts ``f(0)`` (the operator's ``offset``).
* The per-head ``in_proj_bias`` slices must belong to the units: held fixed at
  different (non-zero) values they would make the heads distinguishable (no
  permutation symmetry) and a fixed ``b_V`` would give a linear term
  ``W_O b_V`` (no zero gradient).  Inside the units they keep both: the head
  output is ``W_O(W_V x̄ + b_V) + O(‖w‖⁴)``, bilinear in ``W_O`` and ``(W_V, b_V)``, so
  the zero-gradient condition and additivity over heads still hold.  ``b_Q``
  and ``b_K`` enter only through the scores (``b_Q·W_K x_s``; ``b_Q·b_K`` and
  ``W_Q x_t·b_K`` are constant along a softmax row), hence at fourth order: they
  have zero rows and columns in ``A``.  PyTorch initialises these biases to
  zero, so a freshly built module is exactly at this configuration.
* ``add_bias_kv`` appends a learned key/value token per head; its slices are
  included for the same symmetry reason.  The extra token takes weight
  ``1/(T+1)`` at zero and ``bias_v`` pairs bilinearly with ``W_O``; the
  analytic constructors do not model it (use :func:`from_module`).
  ``add_zero_attn`` has no parameters; it changes the uniform weights only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InvalidTypeError
from ._compat import check_attention_torch
from ._units import UnitLayout, UnitSlice

__all__ = ["attention_units", "HeadSubsetAttention"]


def attention_units(mha: nn.MultiheadAttention, prefix: str = "") -> UnitLayout:
    """Heads of ``nn.MultiheadAttention`` as units, for :func:`nqf.modules.from_module`.

    Parameters
    ----------
    mha : torch.nn.MultiheadAttention
    prefix : str
        Name prefix of ``mha`` inside the module given to ``from_module``
        (e.g. ``"attn."``).

    Returns
    -------
    UnitLayout
        ``n_units = num_heads``; unit ``h`` is
        ``(vec W_O^h ∈ R^{E×d_h}, vec W_V^h ∈ R^{d_h×vdim}, [b_V^h], vec W_Q^h ∈ R^{d_h×E},
        vec W_K^h ∈ R^{d_h×kdim}, [b_Q^h, b_K^h], [bias_k^h, bias_v^h])``.

    Raises
    ------
    TypeError
        If ``mha`` is not an ``nn.MultiheadAttention``.
    """
    check_attention_torch(mha)
    if not isinstance(mha, nn.MultiheadAttention):
        raise InvalidTypeError(f"`mha` must be a torch.nn.MultiheadAttention; found {type(mha).__name__}")
    E, H = mha.embed_dim, mha.num_heads
    dh = mha.head_dim
    if mha._qkv_same_embed_dim:
        q = UnitSlice(f"{prefix}in_proj_weight", axis=0, size=dh, offset=0)
        k = UnitSlice(f"{prefix}in_proj_weight", axis=0, size=dh, offset=E)
        v = UnitSlice(f"{prefix}in_proj_weight", axis=0, size=dh, offset=2 * E)
    else:
        q = UnitSlice(f"{prefix}q_proj_weight", axis=0, size=dh)
        k = UnitSlice(f"{prefix}k_proj_weight", axis=0, size=dh)
        v = UnitSlice(f"{prefix}v_proj_weight", axis=0, size=dh)
    slices = [UnitSlice(f"{prefix}out_proj.weight", axis=1, size=dh), v]
    if mha.in_proj_bias is not None:
        slices.append(UnitSlice(f"{prefix}in_proj_bias", axis=0, size=dh, offset=2 * E))
    slices += [q, k]
    if mha.in_proj_bias is not None:
        slices += [
            UnitSlice(f"{prefix}in_proj_bias", axis=0, size=dh, offset=0),
            UnitSlice(f"{prefix}in_proj_bias", axis=0, size=dh, offset=E),
        ]
    if mha.bias_k is not None:
        slices += [UnitSlice(f"{prefix}bias_k", axis=2, size=dh), UnitSlice(f"{prefix}bias_v", axis=2, size=dh)]
    return UnitLayout(slices, n_units=H)


def _float_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Boolean mask (True = not allowed) → additive float mask, as PyTorch does."""
    if mask is None or mask.is_floating_point():
        return None if mask is None else mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))


class HeadSubsetAttention(nn.Module):
    r"""The first ``n_heads`` heads of an ``nn.MultiheadAttention``, by an explicit softmax.

    Same call signature and output as :class:`torch.nn.MultiheadAttention`
    (``batch_first``, unbatched inputs, boolean or additive ``attn_mask`` and
    ``key_padding_mask``, ``bias_k``/``bias_v``, ``add_zero_attn``, separate
    ``kdim``/``vdim`` projections), but with ``n_heads ≤ num_heads`` heads of
    dimension ``head_dim = embed_dim / num_heads``: its parameters are those of
    ``mha`` already narrowed to the kept heads (``in_proj_weight`` of shape
    ``(3 · n_heads · head_dim, E)``, ``out_proj.weight`` of shape
    ``(E, n_heads · head_dim)``, …).  Every operation has forward- and
    reverse-mode derivatives, so :mod:`torch.func` Hessians work.  A 3-D
    ``attn_mask`` of shape ``(B · num_heads, T, S)`` is cut to the kept heads.
    Dropout on the attention weights applies in training mode, as in PyTorch.

    ``f = out_proj(concat_h softmax(q_h k_hᵀ/√d_h + mask) v_h)``; with all heads
    kept this is PyTorch's forward up to round-off.
    """

    def __init__(self, mha: nn.MultiheadAttention, n_heads: int):
        super().__init__()
        self.embed_dim, self.kdim, self.vdim = mha.embed_dim, mha.kdim, mha.vdim
        self.head_dim, self.num_heads, self.orig_heads = mha.head_dim, int(n_heads), mha.num_heads
        self.batch_first, self.dropout, self.add_zero_attn = mha.batch_first, mha.dropout, mha.add_zero_attn
        self._qkv_same_embed_dim = mha._qkv_same_embed_dim
        for name in (
            "in_proj_weight",
            "q_proj_weight",
            "k_proj_weight",
            "v_proj_weight",
            "in_proj_bias",
            "bias_k",
            "bias_v",
        ):
            self.register_parameter(name, getattr(mha, name, None))
        self.out_proj = mha.out_proj

    def _param(self, name: str) -> torch.Tensor:
        t = getattr(self, name)
        assert isinstance(t, torch.Tensor)
        return t

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        batched = query.dim() == 3
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        T, B, _ = query.shape
        H, d = self.num_heads, self.head_dim
        dt = query.dtype
        par = self._param
        if self._qkv_same_embed_dim:
            w_q, w_k, w_v = par("in_proj_weight").chunk(3)
        else:
            w_q, w_k, w_v = par("q_proj_weight"), par("k_proj_weight"), par("v_proj_weight")
        b_q = b_k = b_v = None
        if self.in_proj_bias is not None:
            b_q, b_k, b_v = par("in_proj_bias").chunk(3)
        q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        if is_causal and attn_mask is None:
            attn_mask = torch.ones(T, key.shape[0], dtype=torch.bool, device=query.device).triu(1)
        mask = _float_mask(attn_mask, dt)
        kpm = _float_mask(key_padding_mask, dt)
        if mask is not None and mask.dim() == 3:  # (B·num_heads, T, S): keep the first H heads
            mask = mask.reshape(B, self.orig_heads, *mask.shape[1:])[:, :H].reshape(B * H, *mask.shape[1:])
        if self.bias_k is not None:
            k = torch.cat([k, par("bias_k").repeat(1, B, 1)])
            v = torch.cat([v, par("bias_v").repeat(1, B, 1)])
            mask = None if mask is None else F.pad(mask, (0, 1))
            kpm = None if kpm is None else F.pad(kpm, (0, 1))
        q = q.reshape(T, B * H, d).transpose(0, 1)
        k = k.reshape(k.shape[0], B * H, d).transpose(0, 1)
        v = v.reshape(v.shape[0], B * H, d).transpose(0, 1)
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(B * H, 1, d)], dim=1)
            v = torch.cat([v, v.new_zeros(B * H, 1, d)], dim=1)
            mask = None if mask is None else F.pad(mask, (0, 1))
            kpm = None if kpm is None else F.pad(kpm, (0, 1))
        S = k.shape[1]
        scores = (q * math.sqrt(1.0 / d)) @ k.transpose(-2, -1)  # (B·H, T, S)
        if mask is not None:
            scores = scores + mask
        if kpm is not None:
            scores = scores + kpm.reshape(B, 1, 1, S).expand(-1, H, -1, -1).reshape(B * H, 1, S)
        alpha = torch.softmax(scores, dim=-1)
        if self.training and self.dropout > 0:
            alpha = F.dropout(alpha, p=self.dropout)
        out = (alpha @ v).transpose(0, 1).reshape(T * B, H * d)
        out = self.out_proj(out).reshape(T, B, -1)
        weights = None
        if need_weights:
            weights = alpha.reshape(B, H, T, S)
            weights = weights.mean(1) if average_attn_weights else weights
        if not batched:
            return out.squeeze(1), (None if weights is None else weights.squeeze(0))
        return (out.transpose(0, 1) if self.batch_first else out), weights
