r"""Channels inside a unit: when a unit's quadratic form is ``k`` identical copies of a smaller one.

An attention head ``w_h = (W_O, W_V[, b_V], W_Q, W_K, …)`` is, to second order in the weights,

.. math:: f_c(x) = Σ_h (W_O^h (W_V^h x̄ + b_V^h))_c = Σ_h Σ_{i < d_h} W_O^h[c, i]\,(W_V^h[i, :] x̄ + b_V^h[i]),

so its structure matrix is ``I_{d_h} ⊗ A'`` on the value–output coordinates (zero on the query and key ones):
each of the head's ``d_h`` value–output *channels* ``u_{h,i} = (W_O^h[:, i], W_V^h[i, :], b_V^h[i])`` enters
the loss as a unit of its own.  With ``P_i`` the selection of channel ``i``'s coordinates,

.. math:: \mathrm{Tr}[M A_c(x)] = \mathrm{Tr}[M' A'_c(x)],\qquad M' = Σ_i P_i M P_iᵀ = Σ_{h,i} u_{h,i} u_{h,i}ᵀ,

and the NQF flow ``dW/dt = −2 𝒜^*(r) W`` moves every channel by the same ``G' = 𝒜'^*(r)``: ``M'`` follows the
NQF of ``A'`` with ``k·m`` units (``k = d_h`` channels per head, ``m`` heads).  Query–key-only attention is the
same with ``I_{d_k} ⊗ Z``: channel ``a`` is ``(W_Q[a, :], W_K[a, :])``.

What this changes: the rank a layer of ``m`` heads can reach is ``min(k·m, p')``, not ``m``, and the plateaus are
those of the channel operator.  In the head picture the top escape rate is ``k``-fold degenerate (one copy per
channel) and a saddle search over rank-``r`` head factors sees ``r·k`` channels at once, skipping the channels'
own plateaus; :func:`nqf.predict` therefore predicts on :attr:`ChannelSplit.op`.
"""

from __future__ import annotations

import torch

from ..errors import NormalFormError, ShapeError
from ._attention import EyeKronKernel, HeadValueKernel
from ._bilinear import BilinearStructure
from ._operator import StructureOperator
from ._readout import ReadoutStructure

__all__ = ["ChannelSplit", "ChannelStructure", "channel_split"]


class ChannelSplit:
    """An operator whose units are ``k`` channels each: ``Tr[M A] = Tr[M' A']`` (module docstring).

    Attributes
    ----------
    op : StructureOperator
        The channel operator ``A'`` (unit dimension ``p'``).
    index : torch.Tensor of int64, shape (k, p')
        ``index[i]``: the coordinates of channel ``i`` in the unit (``P_i`` selects them).
    k : int
        Channels per unit.
    """

    def __init__(self, op: StructureOperator, index: torch.Tensor):
        if index.ndim != 2 or index.shape[1] != op.p:
            raise ShapeError(f"`index` must have shape (k, {op.p}); found {tuple(index.shape)}")
        self.op, self.index, self.k = op, index.to(torch.int64), int(index.shape[0])

    def __repr__(self) -> str:
        return f"ChannelSplit(k={self.k}, p'={self.op.p})"

    def reduce(self, M: torch.Tensor) -> torch.Tensor:
        """``M' = Σ_i P_i M P_iᵀ`` of ``M`` of shape ``(..., p, p)``: shape ``(..., p', p')``."""
        i = self.index.to(M.device)
        return M[..., i[:, :, None], i[:, None, :]].sum(-3)

    def units(self, W: torch.Tensor) -> torch.Tensor:
        """The channels of ``W`` (``(..., p, m)``) as units: ``(..., p', k·m)``, ``W' W'ᵀ = M'``."""
        Wc = W[..., self.index.to(W.device), :]  # (..., k, p', m)
        return Wc.movedim(-3, -2).reshape(*W.shape[:-2], self.op.p, self.k * W.shape[-1])

    def rank(self, m: int) -> int:
        """The largest rank ``M'`` reaches with ``m`` units: ``min(k·m, p')``."""
        return min(self.k * int(m), self.op.p)


class ChannelStructure(StructureOperator):
    """Units of ``k`` channels, each a unit of ``channel``: ``𝒜(M) = 𝒜'(Σ_i P_i M P_iᵀ)`` (module docstring).

    The operator of a layer whose units hold several copies of a smaller unit, e.g. experts that are two-layer
    MLPs (each hidden neuron a channel, the gate row outside every channel).  Coordinates in no channel have zero
    rows and columns.

    Parameters
    ----------
    channel : StructureOperator
        The operator of one channel (``p'`` coordinates), satisfying the zero-gradient condition.
    index : array_like of int, shape (k, p')
        ``index[i]``: channel ``i``'s coordinates in the unit, disjoint across channels.
    p : int
        The unit dimension.
    layout : str
    """

    def __init__(self, channel: StructureOperator, index, p: int, layout: str = ""):
        index = torch.as_tensor(index, dtype=torch.int64)
        if not channel.satisfies_zgz:
            raise NormalFormError(
                "`channel` must satisfy the zero-gradient condition (no linear or cross term); found an operator "
                "with one"
            )
        flat = index.reshape(-1)
        if index.ndim != 2 or index.shape[1] != channel.p or int(flat.min()) < 0 or int(flat.max()) >= int(p):
            raise ShapeError(
                f"`index` must have shape (k, {channel.p}) with entries in [0, {p}); found {tuple(index.shape)}"
            )
        if flat.unique().numel() != flat.numel():
            raise ShapeError("`index` must give disjoint channels (no coordinate twice)")
        super().__init__(int(p), channel.n_samples, channel.n_outputs, channel.dtype, channel.device)
        self.channel, self.index, self.layout = channel, index.to(channel.device), layout
        self.split = ChannelSplit(channel, self.index)

    def _forward(self, M):
        return self.channel._forward(self.split.reduce(M))

    def _adjoint(self, R):
        out = torch.zeros(self.p, self.p, dtype=self.dtype, device=self.device)
        i = self.index
        out[i[:, :, None], i[:, None, :]] = self.channel._adjoint(R)
        return out

    def forward_factor(self, L):
        return self.channel.forward_factor(self.split.units(L))

    def adjoint_apply(self, R, L):
        k, r = self.split.k, L.shape[1]
        G = self.channel.adjoint_apply(R, self.split.units(L))  # (p', k·r), channel-major columns
        out = torch.zeros(self.p, r, dtype=self.dtype, device=self.device)
        out[self.index.reshape(-1)] = G.reshape(self.channel.p, k, r).transpose(0, 1).reshape(-1, r)
        return out

    def _dense(self):
        out = torch.zeros(self.n_samples, self.n_outputs, self.p, self.p, dtype=self.dtype, device=self.device)
        i = self.index
        out[:, :, i[:, :, None], i[:, None, :]] = self.channel._dense()[:, :, None]
        return out

    def _take(self, index):
        return ChannelStructure(self.channel.take(index), self.index, self.p, self.layout)

    def _to(self, dtype, device):
        return ChannelStructure(self.channel.to(dtype, device), self.index, self.p, self.layout)


def channel_split(op: StructureOperator) -> ChannelSplit | None:
    """The channels of ``op``'s units (module docstring), or None when a unit is one channel.

    Recognised: :class:`ChannelStructure`, multi-head attention (:func:`nqf.structure.multi_head_attention`,
    ``d_h > 1``) and query–key-only attention (:func:`nqf.structure.qk_attention`, ``d_k > 1``), each possibly
    read out by the rest of a network (:class:`nqf.structure.ReadoutStructure`).
    """
    if isinstance(op, ChannelStructure):
        return op.split
    if isinstance(op, ReadoutStructure):
        inner = channel_split(op.inner)
        if inner is None:
            return None
        outer = ReadoutStructure(inner.op, op.J)
        outer.offset = op.offset
        return ChannelSplit(outer, inner.index)
    if not isinstance(op, BilinearStructure) or op.linear is not None or op.cross is not None:
        return None
    left, right = torch.arange(op.p)[op.left], torch.arange(op.p)[op.right]
    kern = op.kernel
    if isinstance(kern, HeadValueKernel) and kern.q > 1:
        k, C, D = kern.q, kern.n_outputs, kern.d
        ch = torch.arange(k)
        cols = [left[torch.arange(C)[None, :] * k + ch[:, None]], right[ch[:, None] * D + torch.arange(D)[None, :]]]
        if kern.bias:
            cols.append(right[k * D + ch][:, None])
        sub = HeadValueKernel(kern.xbar, C, 1, bias=kern.bias)
        layout = f"value–output channel u = (W_O[:, i] ∈ R^{C} [0:{C}], W_V[i, :] ∈ R^{D}" + (
            ", b_V[i])" if kern.bias else ")"
        )
    elif isinstance(kern, EyeKronKernel) and kern.r > 1:
        k, d1, d2 = kern.r, kern.d1, kern.d2
        ch = torch.arange(k)
        cols = [left[ch[:, None] * d1 + torch.arange(d1)[None, :]], right[ch[:, None] * d2 + torch.arange(d2)[None, :]]]
        sub = EyeKronKernel(kern.Z, 1)
        layout = f"query–key channel u = (W_Q[a, :] ∈ R^{d1} [0:{d1}], W_K[a, :] ∈ R^{d2})"
    else:
        return None
    index = torch.cat(cols, 1)
    p1 = cols[0].shape[1]
    out = BilinearStructure(index.shape[1], slice(0, p1), slice(p1, index.shape[1]), sub, layout=layout)
    out.offset = op.offset
    return ChannelSplit(out, index)
