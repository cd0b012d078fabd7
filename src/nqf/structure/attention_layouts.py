r"""Unit layout of the heads of PyTorch's :class:`torch.nn.MultiheadAttention`.

Head ``h`` of ``nn.MultiheadAttention(E, H)`` (``d_h = E/H``) owns

* ``out_proj.weight[:, h d_h:(h+1) d_h]`` — its ``W_O`` (``E × d_h``);
* rows ``h d_h:(h+1) d_h`` of the value, query and key projections — in the
  packed ``in_proj_weight`` (``3E × E``) at offsets ``2E``, ``0`` and ``E``, or in
  ``v_proj_weight``/``q_proj_weight``/``k_proj_weight`` when ``kdim``/``vdim`` differ;
* the same slices of ``in_proj_bias`` (if present);
* ``bias_k[..., h d_h:(h+1) d_h]`` and ``bias_v[...]`` (if ``add_bias_kv``).

The order is ``(W_O, W_V, [b_V], W_Q, W_K, [b_Q, b_K], [bias_k, bias_v])``, the
layout of :func:`nqf.structure.attention.multi_head_attention` (with
``bias=True`` when the module has ``in_proj_bias``), so with mean readout of
``mha(x, x, x)`` the two operators agree entry by entry (``d_k = d_h``,
``C = E``; PyTorch scales scores by ``1/√d_h`` like ours).

Calling the module under autodiff
---------------------------------
:func:`from_module` takes Hessians forward-over-reverse.  With
``need_weights=False`` PyTorch routes ``nn.MultiheadAttention`` to the fused
``scaled_dot_product_attention`` kernel, whose CPU flash variant has no
forward-mode derivative (``NotImplementedError: Trying to use forward AD with
_scaled_dot_product_flash_attention_for_cpu``, torch 2.x).  Call it with
``need_weights=True`` (the explicit softmax path), or inside
``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)``; both give the exact
Hessian.  A minimal wrapper::

    class Wrapped(nn.Module):
        def __init__(self, E, H):
            super().__init__()
            self.attn = nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
        def forward(self, x):                      # x: (B, T, E)
            out, _ = self.attn(x, x, x, need_weights=True)
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

from torch import nn

from .units import UnitLayout, UnitSlice

__all__ = ["attention_units"]


def attention_units(mha: nn.MultiheadAttention, prefix: str = "") -> UnitLayout:
    """Heads of ``nn.MultiheadAttention`` as units, for :func:`nqf.structure.autodiff.from_module`.

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
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(f"`mha` must be a torch.nn.MultiheadAttention; found {type(mha).__name__}")
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
        slices += [UnitSlice(f"{prefix}in_proj_bias", axis=0, size=dh, offset=0),
                   UnitSlice(f"{prefix}in_proj_bias", axis=0, size=dh, offset=E)]
    if mha.bias_k is not None:
        slices += [UnitSlice(f"{prefix}bias_k", axis=2, size=dh), UnitSlice(f"{prefix}bias_v", axis=2, size=dh)]
    return UnitLayout(slices, n_units=H)
