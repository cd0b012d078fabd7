"""Real attention modules with their heads as units (see :mod:`nqf.structure._attention`)."""

from __future__ import annotations

import math

import torch
from torch import nn

from .._validation import one_of, positive_int
from ..errors import NonFiniteError, ShapeError
from ..modules import UnitLayout, UnitSlice
from ..structure import ATTENTION_READOUTS as READOUTS

__all__ = ["MultiHeadAttention", "QKAttention"]


def _check_tokens(x: torch.Tensor, D: int) -> None:
    if x.ndim != 3 or x.shape[-1] != D:
        raise ShapeError(f"`x` must have shape (B, T, {D}) (batch, tokens, features); found {tuple(x.shape)}")


def _attention(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    """``softmax_s(q_t·k_s/√d_k)`` for ``q, k`` of shape (B, H, T, d_k) → (B, H, T, T)."""
    S = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        T = S.shape[-1]
        mask = torch.ones(T, T, dtype=torch.bool, device=S.device).triu(1)
        S = S.masked_fill(mask, float("-inf"))
    return torch.softmax(S, dim=-1)


def _readout(y: torch.Tensor, readout: str) -> torch.Tensor:
    return y.mean(1) if readout == "mean" else y[:, -1]


class MultiHeadAttention(nn.Module):
    r"""Multi-head self-attention with a token readout, ``(B, T, D) → (B, C)``.

    Head ``h``: ``S_{ts} = (W_Q^h x_t)·(W_K^h x_s)/√d_k`` (masked to ``s ≤ t``
    when causal), ``α = softmax_s(S)``, ``o^h_t = W_O^h Σ_s α_{ts} W_V^h x_s``;
    ``y_t = Σ_h o^h_t`` and ``f = mean_t y_t`` (``"mean"``) or ``y_{T−1}``
    (``"last"``).  No biases.

    Parameters (all float64 by default) are stacked per head:
    ``W_O`` (H, C, d_h), ``W_V`` (H, d_h, D), ``W_Q`` and ``W_K`` (H, d_k, D).
    Units (``.units``): heads, ``w_h = (vec W_O^h, vec W_V^h, vec W_Q^h, vec W_K^h)``,
    the layout of :func:`nqf.structure.multi_head_attention`.

    Parameters
    ----------
    d_model : int
        ``D``.
    n_heads : int
        ``H`` (number of units).
    d_head : int
        ``d_h``.
    d_key : int, optional
        ``d_k``; default ``d_head``.
    n_outputs : int, optional
        ``C``; default ``D``.
    causal : bool
    readout : {"mean", "last"}
    dtype : torch.dtype
    """

    #: What :func:`nqf.modules.find_units` reports as the kind of :attr:`units`.
    unit_kind = "attention-heads"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        d_key: int | None = None,
        n_outputs: int | None = None,
        causal: bool = False,
        readout: str = "mean",
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        D, H, dh = positive_int("d_model", d_model), positive_int("n_heads", n_heads), positive_int("d_head", d_head)
        dk = dh if d_key is None else positive_int("d_key", d_key)
        C = D if n_outputs is None else positive_int("n_outputs", n_outputs)
        one_of("readout", readout, READOUTS)
        self.d_model, self.n_heads, self.d_head, self.d_key, self.n_outputs = D, H, dh, dk, C
        self.causal, self.readout = bool(causal), readout
        self.W_O = nn.Parameter(torch.randn(H, C, dh, dtype=dtype) / math.sqrt(dh))
        self.W_V = nn.Parameter(torch.randn(H, dh, D, dtype=dtype) / math.sqrt(D))
        self.W_Q = nn.Parameter(torch.randn(H, dk, D, dtype=dtype) / math.sqrt(D))
        self.W_K = nn.Parameter(torch.randn(H, dk, D, dtype=dtype) / math.sqrt(D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_tokens(x, self.d_model)
        q = torch.einsum("hjd,btd->bhtj", self.W_Q, x)
        k = torch.einsum("hjd,btd->bhtj", self.W_K, x)
        v = torch.einsum("hid,btd->bhti", self.W_V, x)
        o = _attention(q, k, self.causal) @ v  # (B, H, T, d_h)
        y = torch.einsum("hci,bhti->btc", self.W_O, o)  # Σ_h W_O^h o^h_t
        return _readout(y, self.readout)

    @property
    def units(self) -> UnitLayout:
        return UnitLayout(
            [UnitSlice("W_O", axis=0), UnitSlice("W_V", axis=0), UnitSlice("W_Q", axis=0), UnitSlice("W_K", axis=0)],
            n_units=self.n_heads,
        )


class QKAttention(nn.Module):
    r"""Query–key-only attention with fixed values, ``(B, T, D) → (B, C)``.

    ``f(x) = Σ_t ρ_t Σ_h Σ_s α^h_{ts} V x_s`` with ``α^h = softmax_s((W_Q^h x_t)·(W_K^h x_s)/√d_k)``
    (masked to ``s ≤ t`` when causal), ``ρ`` the mean (default) or last-token
    readout.  ``V`` (C, D) is a fixed buffer; the learned parameters are
    ``W_Q``, ``W_K`` of shape (H, d_k, D).  Heads are summed (not averaged),
    so ``f(0) = H · mean-value`` and the structure matrix is independent of
    ``H`` (see :func:`nqf.structure.qk_attention`).

    Units (``.units``): heads, ``w_h = (vec W_Q^h, vec W_K^h)``.

    Parameters
    ----------
    d_model : int
        ``D``.
    n_heads : int
        ``H``.
    d_key : int
        ``d_k``.
    V : array_like, shape (C, D)
        Fixed value matrix (copied to ``dtype``).
    causal : bool
    readout : {"mean", "last"}
    dtype : torch.dtype
    """

    #: What :func:`nqf.modules.find_units` reports as the kind of :attr:`units`.
    unit_kind = "attention-heads"

    V: torch.Tensor  # registered buffer

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_key: int,
        V,
        causal: bool = False,
        *,
        readout: str = "mean",
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        D, H, dk = positive_int("d_model", d_model), positive_int("n_heads", n_heads), positive_int("d_key", d_key)
        one_of("readout", readout, READOUTS)
        V = torch.as_tensor(V, dtype=dtype)
        if V.ndim != 2 or V.shape[1] != D or V.shape[0] == 0:
            raise ShapeError(f"`V` must have shape (C, {D}) with C ≥ 1; found {tuple(V.shape)}")
        if not bool(torch.isfinite(V).all()):
            raise NonFiniteError("`V` must be finite; found NaN/inf entries")
        self.d_model, self.n_heads, self.d_key, self.n_outputs = D, H, dk, V.shape[0]
        self.causal, self.readout = bool(causal), readout
        self.register_buffer("V", V.clone())
        self.W_Q = nn.Parameter(torch.randn(H, dk, D, dtype=dtype) / math.sqrt(D))
        self.W_K = nn.Parameter(torch.randn(H, dk, D, dtype=dtype) / math.sqrt(D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_tokens(x, self.d_model)
        q = torch.einsum("hjd,btd->bhtj", self.W_Q, x)
        k = torch.einsum("hjd,btd->bhtj", self.W_K, x)
        vals = x @ self.V.T  # (B, T, C)
        y = torch.einsum("bhts,bsc->btc", _attention(q, k, self.causal), vals)
        return _readout(y, self.readout)

    @property
    def units(self) -> UnitLayout:
        return UnitLayout([UnitSlice("W_Q", axis=0), UnitSlice("W_K", axis=0)], n_units=self.n_heads)
