r"""Attention families: multi-head attention and query–key-only attention (heads as units).

Both modules act on a token matrix ``x ∈ R^{T×D}`` per sample and return a
vector ``f(x) ∈ R^C`` through a token readout.  Conventions (docs/theory.md §0): loss
``L = (1/N) Σ_n ℓ(f_n, y_n)``, GD ``W ← W − η∇_W L``, time ``t = η·steps``;
the structure operator is ``𝒜(M)_{n,c} = Tr[M A_c(x_n)]`` with
``A = ½ ∇²_{w_1} f(0)`` and ``M = Σ_h w_h w_hᵀ``.

Uniform attention at zero
-------------------------
At ``W = 0`` every score vanishes and the softmax is uniform over the tokens a
query may see: ``α⁰_{ts} = P_{ts}``, with ``P_{ts} = 1/T`` (non-causal) or
``P_{ts} = 1/(t+1)`` for ``s ≤ t`` and 0 otherwise (causal, tokens indexed
``t = 0..T−1``).  The readout is ``f = Σ_t ρ_t y_t`` with ``ρ_t = 1/T``
(``"mean"``) or ``ρ_t = δ_{t,T−1}`` (``"last"``).  Define the token weights
``c = Pᵀρ ∈ R^T`` and the *attended token average* ``x̄ = Σ_s c_s x_s``:

* non-causal, either readout: ``x̄ = (1/T) Σ_s x_s``;
* causal, ``"last"``: ``x̄ = (1/T) Σ_s x_s`` (the last token sees all);
* causal, ``"mean"``: ``c_s = (1/T) Σ_{t ≥ s} 1/(t+1)``.

Multi-head attention (:func:`multi_head_attention`)
---------------------------------------------------
Head ``h``: ``S_{ts} = (W_Q x_t)·(W_K x_s)/√d_k`` (masked to ``s ≤ t`` when
causal), ``α = softmax_s(S)``, ``o_t = W_O Σ_s α_{ts} W_V x_s`` and the layer
output ``y_t = Σ_h o^h_t``.  Unit layout (``p = C·d_h + d_h·D + 2 d_k·D``)::

    w_h = (vec W_O ∈ R^{C×d_h}, vec W_V ∈ R^{d_h×D}, vec W_Q ∈ R^{d_k×D}, vec W_K ∈ R^{d_k×D})

each flattened row-major.  Because ``α − α⁰ = O(S) = O(‖W_Q‖‖W_K‖)``,

.. math::

    f_c(x) = Σ_h (W_O^h W_V^h x̄)_c + O(‖W‖^4),

so ``A`` is bilinear between the ``W_O`` and ``W_V`` blocks with kernel
``K_c = e_c ⊗ I_{d_h} ⊗ x̄ᵀ`` (``K_c[(c',i),(i',k)] = δ_{cc'} δ_{ii'} x̄_k``);
``W_Q`` and ``W_K`` have zero rows and columns in ``A``.  ``f(0) = 0``, heads are
additive so the cross-unit term vanishes, and ``f`` is even in ``W`` with a
quartic first correction: the truncation error is ``O(‖W‖⁴)`` (exact order 4).
With ``bias=True`` each head also owns a value bias ``b_V ∈ R^{d_h}`` placed
right after ``W_V`` (``o_t = W_O Σ_s α_{ts}(W_V x_s + b_V)``) and query/key
biases ``b_Q, b_K ∈ R^{d_k}`` at the end; then ``K_c`` gains the block
``e_c ⊗ I_{d_h}`` on ``(W_O, b_V)`` and the query/key biases again do not enter.
This is exactly the head layout of :func:`torch.nn.MultiheadAttention`, see
:func:`nqf.modules.attention_units`.

Query–key-only attention (:func:`qk_attention`)
------------------------------------------------
Values are fixed, ``v_s = V x_s`` with ``V ∈ R^{C×D}`` not learned, and the unit
is ``w_h = (vec W_Q, vec W_K) ∈ R^{2 d_k D}``:
``f(x) = Σ_t ρ_t Σ_h Σ_s α^h_{ts} v_s``.  From
``softmax(S)_{ts} = P_{ts} + P_{ts}(S_{ts} − S̄_t) + O(S²)``, ``S̄_t = Σ_s P_{ts} S_{ts}``,

.. math::

    f_c(x) = H\,Σ_t ρ_t Σ_s P_{ts} v_{sc}
             + Σ_h Σ_a Σ_{jk} W_Q^h[a,j]\,W_K^h[a,k]\,Z_c[j,k] + O(‖W‖^4),

    Z_c = \frac{1}{\sqrt{d_k}} Σ_t ρ_t Σ_s P_{ts}\, x_t x_sᵀ\,(v_{sc} − v̄_{tc}),
    \qquad v̄_t = Σ_s P_{ts} v_s,

so ``A`` is bilinear between ``W_Q`` and ``W_K`` with ``K_c = I_{d_k} ⊗ Z_c``
(only the *centred* values enter; a causal row ``t`` averages over ``t+1``
tokens, so token 0 never contributes).  ``f`` depends on ``W`` only through the
scores ``S``, which are homogeneous of degree 2, and the next softmax term is
``O(S²)``: the truncation error is ``O(‖W‖⁴)`` (exact order 4, no odd terms).
"""

from __future__ import annotations

import math

import torch

from .._validation import as_tensor, one_of, positive_int
from ..errors import ShapeError
from ._bilinear import BilinearKernel, BilinearStructure

__all__ = [
    "multi_head_attention",
    "qk_attention",
    "HeadValueKernel",
    "EyeKronKernel",
    "attention_token_weights",
    "ATTENTION_READOUTS",
]

#: Token readouts: ``"mean"`` averages the layer output over tokens, ``"last"`` takes the last token.
ATTENTION_READOUTS = ("mean", "last")


# --------------------------------------------------------------------------- validation helpers
def _check_readout(readout) -> str:
    one_of("readout", readout, ATTENTION_READOUTS)
    return readout


def _tokens(X, dtype) -> torch.Tensor:
    X = as_tensor("X", X, ndim=3, dtype=dtype)
    if 0 in X.shape:
        raise ShapeError(
            f"`X` must have shape (N, T, D) with N, T, D ≥ 1 (samples, tokens, features); found {tuple(X.shape)}"
        )
    return X


def attention_token_weights(
    T: int, causal: bool = False, readout: str = "mean", *, dtype=torch.float64, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniform attention at zero weights and the readout weights.

    Parameters
    ----------
    T : int
        Number of tokens.
    causal : bool
        Token ``t`` attends to ``s ≤ t`` only.
    readout : {"mean", "last"}

    Returns
    -------
    rho : torch.Tensor, shape (T,)
        Readout weights ``ρ_t`` (``f = Σ_t ρ_t y_t``).
    P : torch.Tensor, shape (T, T)
        Attention at ``W = 0``: ``P_{ts} = 1/T``, or ``1/(t+1)`` for ``s ≤ t`` when causal.
    """
    T = positive_int("T", T)
    _check_readout(readout)
    if causal:
        P = torch.tril(torch.ones(T, T, dtype=dtype, device=device))
        P = P / torch.arange(1, T + 1, dtype=dtype, device=device)[:, None]
    else:
        P = torch.full((T, T), 1.0 / T, dtype=dtype, device=device)
    if readout == "mean":
        rho = torch.full((T,), 1.0 / T, dtype=dtype, device=device)
    else:
        rho = torch.zeros(T, dtype=dtype, device=device)
        rho[-1] = 1.0
    return rho, P


# --------------------------------------------------------------------------- kernels
class HeadValueKernel(BilinearKernel):
    r"""Kernel ``K_{n,c} = e_c ⊗ I_q ⊗ x̄_nᵀ`` (plus ``e_c ⊗ I_q`` with a value bias).

    Left block: ``vec W_O`` (``p1 = C·q``, index ``(c, i) → c·q + i``).  Right
    block: ``vec W_V`` (``q·D``, index ``(i, k) → i·D + k``), followed by a value
    bias ``b_V ∈ R^q`` when ``bias`` is set (``p2 = q·D + q``).  Then
    ``⟨B, K_{n,c}⟩ = Σ_i (Σ_k B[(c,i),(i,k)] x̄_{nk} + B[(c,i), qD + i])``, i.e.
    for ``B = vec W_O vec W_Vᵀ`` the value ``(W_O (W_V x̄_n + b_V))_c``.

    Stores only ``x̄`` (``N × D``); ``forward`` and ``adjoint`` cost
    ``O(N C D + C q² D)``.

    Parameters
    ----------
    xbar : torch.Tensor, shape (N, D)
        Attended token averages.
    n_outputs : int
        ``C``.
    d_head : int
        ``q = d_h``.
    bias : bool
        Include the value-bias block.
    """

    def __init__(self, xbar: torch.Tensor, n_outputs: int, d_head: int, bias: bool = False):
        if xbar.ndim != 2:
            raise ShapeError(f"`xbar` must have shape (N, D); found {tuple(xbar.shape)}")
        self.xbar = xbar
        self.n_samples, self.d = xbar.shape
        self.n_outputs, self.q, self.bias = int(n_outputs), int(d_head), bool(bias)
        self.p1 = self.n_outputs * self.q
        self.p2 = self.q * self.d + (self.q if self.bias else 0)
        self.dtype, self.device = xbar.dtype, xbar.device

    def forward(self, B):
        C, q, d = self.n_outputs, self.q, self.d
        Bv = B[:, : q * d].reshape(C, q, q, d)
        Pc = Bv.diagonal(dim1=1, dim2=2).sum(-1)  # (C, D): Σ_i B[(c,i),(i,k)]
        out = self.xbar @ Pc.T  # (N, C)
        if self.bias:
            tb = B[:, q * d :].reshape(C, q, q).diagonal(dim1=1, dim2=2).sum(-1)  # (C,)
            out = out + tb[None, :]
        return out

    def adjoint(self, R):
        C, q, d = self.n_outputs, self.q, self.d
        eye = torch.eye(q, dtype=self.dtype, device=self.device)
        Pc = R.T @ self.xbar  # (C, D)
        Kv = torch.einsum("ck,ij->cijk", Pc, eye).reshape(C * q, q * d)
        if not self.bias:
            return Kv
        Kb = torch.einsum("c,ij->cij", R.sum(0), eye).reshape(C * q, q)
        return torch.cat([Kv, Kb], dim=1)

    def dense(self):
        C, q, d, N = self.n_outputs, self.q, self.d, self.n_samples
        eC = torch.eye(C, dtype=self.dtype, device=self.device)
        eq = torch.eye(q, dtype=self.dtype, device=self.device)
        Kv = torch.einsum("ce,ij,nk->nceijk", eC, eq, self.xbar).reshape(N, C, C * q, q * d)
        if not self.bias:
            return Kv
        Kb = torch.einsum("ce,ij->ceij", eC, eq).reshape(1, C, C * q, q).expand(N, C, C * q, q)
        return torch.cat([Kv, Kb], dim=-1)

    def take(self, index):
        return HeadValueKernel(self.xbar[index], self.n_outputs, self.q, self.bias)

    def to(self, dtype, device):
        return HeadValueKernel(self.xbar.to(dtype=dtype, device=device), self.n_outputs, self.q, self.bias)


class EyeKronKernel(BilinearKernel):
    r"""Kernel ``K_{n,c} = I_r ⊗ Z_{n,c}``: block-diagonal copies of a per-sample matrix.

    With left block ``vec W_Q`` (``r × d1`` row-major) and right block ``vec W_K``
    (``r × d2``), ``⟨B, K_{n,c}⟩ = Σ_a Σ_{jk} B[(a,j),(a,k)] Z_{n,c}[j,k]``; for
    ``B = vec W_Q vec W_Kᵀ`` this is ``⟨W_Qᵀ W_K, Z_{n,c}⟩``.  Stores ``Z``
    (``N × C × d1 × d2``), never ``N × p × p``.

    Parameters
    ----------
    Z : torch.Tensor, shape (N, C, d1, d2)
    r : int
        Number of diagonal copies (the key dimension ``d_k``).
    """

    def __init__(self, Z: torch.Tensor, r: int):
        if Z.ndim != 4:
            raise ShapeError(f"`Z` must have shape (N, C, d1, d2); found {tuple(Z.shape)}")
        self.Z, self.r = Z, int(r)
        self.n_samples, self.n_outputs, self.d1, self.d2 = Z.shape
        self.p1, self.p2 = self.r * self.d1, self.r * self.d2
        self.dtype, self.device = Z.dtype, Z.device

    def forward(self, B):
        Bd = B.reshape(self.r, self.d1, self.r, self.d2).diagonal(dim1=0, dim2=2).sum(-1)  # (d1, d2)
        return torch.einsum("ncjk,jk->nc", self.Z, Bd)

    def adjoint(self, R):
        Zbar = torch.einsum("nc,ncjk->jk", R, self.Z)
        return torch.kron(torch.eye(self.r, dtype=self.dtype, device=self.device), Zbar)

    def dense(self):
        eye = torch.eye(self.r, dtype=self.dtype, device=self.device)
        K = torch.einsum("ab,ncjk->ncajbk", eye, self.Z)
        return K.reshape(self.n_samples, self.n_outputs, self.p1, self.p2)

    def take(self, index):
        return EyeKronKernel(self.Z[index], self.r)

    def to(self, dtype, device):
        return EyeKronKernel(self.Z.to(dtype=dtype, device=device), self.r)


# --------------------------------------------------------------------------- constructors
def multi_head_attention(
    X,
    d_head: int,
    d_key: int | None = None,
    n_outputs: int | None = None,
    causal: bool = False,
    readout: str = "mean",
    *,
    bias: bool = False,
    dtype=None,
) -> BilinearStructure:
    r"""Structure operator of multi-head attention with heads as units.

    ``f_c(x) = Σ_t ρ_t Σ_h (W_O^h Σ_s α^h_{ts} W_V^h x_s)_c`` (see the module
    docstring); to second order ``f_c = Σ_h (W_O^h W_V^h x̄)_c``, so

    .. math:: \mathrm{Tr}[M A_c(x_n)] = Σ_{i,k} M_{O V}[(c,i),(i,k)]\, x̄_{nk}.

    ``A`` does not depend on the number of heads, ``f(0) = 0`` and the
    zero-gradient condition holds (heads are additive).  Truncation error
    ``O(‖W‖⁴)``.

    Parameters
    ----------
    X : array_like, shape (N, T, D)
        Token matrices.
    d_head : int
        Value/head dimension ``d_h``.
    d_key : int, optional
        Query/key dimension ``d_k``; default ``d_head``.  Enters only ``p`` (the
        ``W_Q``, ``W_K`` blocks have zero rows and columns in ``A``).
    n_outputs : int, optional
        ``C``, rows of ``W_O``; default ``D``.
    causal : bool
        Causal mask (token ``t`` attends to ``s ≤ t``).
    readout : {"mean", "last"}
        Mean over tokens, or the last token.
    bias : bool
        Per-head biases ``(b_V, b_Q, b_K)`` as in ``nn.MultiheadAttention``;
        layout ``(W_O, W_V, b_V, W_Q, W_K, b_Q, b_K)``.
    dtype : torch.dtype, optional
        Default: ``X``'s floating dtype, or float64.

    Returns
    -------
    BilinearStructure
        ``p = C·d_h + d_h·D + 2 d_k·D (+ d_h + 2 d_k)``; blocks ``left = W_O``,
        ``right = (W_V [, b_V])``, kernel :class:`HeadValueKernel`.

    Raises
    ------
    ShapeError, NonFiniteError, ValueError
        Bad ``X``, non-positive sizes, unknown ``readout``.
    """
    X = _tokens(X, dtype)
    N, T, D = X.shape
    dh = positive_int("d_head", d_head)
    dk = dh if d_key is None else positive_int("d_key", d_key)
    C = D if n_outputs is None else positive_int("n_outputs", n_outputs)
    _check_readout(readout)
    rho, P = attention_token_weights(T, bool(causal), readout, dtype=X.dtype, device=X.device)
    xbar = torch.einsum("s,nsd->nd", P.T @ rho, X)
    kernel = HeadValueKernel(xbar, C, dh, bias=bias)
    nO, nV, nQ = C * dh, dh * D, dk * D
    nb = dh if bias else 0
    p = nO + nV + nb + 2 * nQ + (2 * dk if bias else 0)
    o = nO + nV + nb
    layout = (
        f"head w_h = (W_O ∈ R^{C}×{dh} [0:{nO}], W_V ∈ R^{dh}×{D} [{nO}:{nO + nV}]"
        + (f", b_V ∈ R^{dh} [{nO + nV}:{o}]" if bias else "")
        + f", W_Q ∈ R^{dk}×{D} [{o}:{o + nQ}], W_K ∈ R^{dk}×{D} [{o + nQ}:{o + 2 * nQ}]"
        + (f", b_Q ∈ R^{dk} [{o + 2 * nQ}:{o + 2 * nQ + dk}], b_K ∈ R^{dk} [{o + 2 * nQ + dk}:{p}]" if bias else "")
        + "), each row-major"
    )
    return BilinearStructure(p, slice(0, nO), slice(nO, nO + nV + nb), kernel, layout=layout)


def qk_attention(
    X, V, d_key: int, n_heads: int, causal: bool = False, *, readout: str = "mean", dtype=None
) -> BilinearStructure:
    r"""Structure operator of query–key-only attention (values fixed) with heads as units.

    ``f_c(x) = Σ_t ρ_t Σ_h Σ_s α^h_{ts} v_{sc}``, ``v_s = V x_s``;
    ``Tr[M A_c(x_n)] = Σ_a Σ_{jk} M_{QK}[(a,j),(a,k)] Z_{n,c}[j,k]`` with
    ``Z_c = d_k^{-1/2} Σ_t ρ_t Σ_s P_{ts} x_t x_sᵀ (v_{sc} − v̄_{tc})`` (module
    docstring).  Truncation error ``O(‖W‖⁴)``.

    The offset ``f(0) = H · Σ_t ρ_t Σ_s P_{ts} v_s`` is proportional to the
    number of heads ``H`` (each head attends uniformly at zero and the heads
    are summed); this is why ``n_heads`` is needed.  We keep the plain sum over
    heads rather than a ``1/H`` average: with the sum, ``A`` (hence the whole
    order-parameter dynamics) is independent of ``H``, as the normal form
    requires of a width, and only the constant ``f(0)`` carries ``H``; a
    ``1/H`` average would instead make ``A`` scale with ``1/H``.

    Parameters
    ----------
    X : array_like, shape (N, T, D)
        Token matrices.
    V : array_like, shape (C, D)
        Fixed value matrix.
    d_key : int
        ``d_k``.
    n_heads : int
        ``H`` (enters only the offset).
    causal : bool
        Causal mask.
    readout : {"mean", "last"}
        Token readout (the default ``"mean"`` is the paper's QK-only model).
    dtype : torch.dtype, optional

    Returns
    -------
    BilinearStructure
        ``p = 2 d_k D``, layout ``(vec W_Q, vec W_K)``, kernel :class:`EyeKronKernel`
        storing ``Z`` of shape ``(N, C, D, D)``; ``offset`` of shape ``(N, C)``.
    """
    X = _tokens(X, dtype)
    N, T, D = X.shape
    V = as_tensor("V", V, ndim=2, dtype=X.dtype, device=X.device)
    if V.shape[1] != D or V.shape[0] == 0:
        raise ShapeError(
            f"`V` must have shape (C, {D}) with C ≥ 1 (the token dimension of `X`); found {tuple(V.shape)}"
        )
    dk = positive_int("d_key", d_key)
    H = positive_int("n_heads", n_heads)
    _check_readout(readout)
    rho, P = attention_token_weights(T, bool(causal), readout, dtype=X.dtype, device=X.device)
    vals = X @ V.T  # (N, T, C)  v_s
    vbar = torch.einsum("ts,nsc->ntc", P, vals)  # v̄_t
    xatt = torch.einsum("ts,nsk->ntk", P, X)  # Σ_s P_ts x_s
    U = torch.einsum("ts,nsk,nsc->ntkc", P, X, vals)  # Σ_s P_ts x_s v_sc
    Z = (
        torch.einsum("t,ntj,ntkc->ncjk", rho, X, U) - torch.einsum("t,ntj,ntk,ntc->ncjk", rho, X, xatt, vbar)
    ) / math.sqrt(dk)
    nQ = dk * D
    layout = f"head w_h = (W_Q ∈ R^{dk}×{D} [0:{nQ}], W_K ∈ R^{dk}×{D} [{nQ}:{2 * nQ}]), each row-major"
    op = BilinearStructure(2 * nQ, slice(0, nQ), slice(nQ, 2 * nQ), EyeKronKernel(Z, dk), layout=layout)
    op.offset = H * torch.einsum("t,ntc->nc", rho, vbar)
    return op
