r"""Low-rank-per-sample structure operators (docs/theory.md §2.1).

:class:`BilinearStructure` stores ``A_{n,c} = ½ (E_L K_{n,c} E_Rᵀ + E_R K_{n,c}ᵀ E_Lᵀ)``
where ``E_L`` and ``E_R`` embed two disjoint blocks of the unit vector and ``K``
is a :class:`BilinearKernel` that never materialises ``N × p × p``.  Every
two-layer architecture (MLP, linear network, CNN, attention values, experts) is
of this form.
"""

from __future__ import annotations

import abc

import torch

from .._validation import as_tensor
from ..errors import InvalidParameterError, ShapeError
from ._operator import StructureOperator, _as_output_axis

__all__ = ["BilinearStructure", "BilinearKernel", "DenseKernel", "OneHotKronKernel"]


# --------------------------------------------------------------------------- bilinear form
class BilinearKernel(abc.ABC):
    """A linear map between ``R^{N×C}`` and rectangular ``p1 × p2`` matrices.

    Represents matrices ``K_{n,c} ∈ R^{p1×p2}`` through ``forward(B)_{n,c} =
    ⟨B, K_{n,c}⟩`` and ``adjoint(R) = Σ_{n,c} R_{n,c} K_{n,c}``.
    """

    p1: int
    p2: int
    n_samples: int
    n_outputs: int
    dtype: torch.dtype
    device: torch.device

    @abc.abstractmethod
    def forward(self, B: torch.Tensor) -> torch.Tensor:
        """``(p1, p2)`` → ``(N, C)``."""

    @abc.abstractmethod
    def adjoint(self, R: torch.Tensor) -> torch.Tensor:
        """``(N, C)`` → ``(p1, p2)``."""

    @abc.abstractmethod
    def dense(self) -> torch.Tensor:
        """``(N, C, p1, p2)``."""

    @abc.abstractmethod
    def take(self, index: torch.Tensor) -> BilinearKernel:
        """Kernel on a subset of samples."""

    @abc.abstractmethod
    def to(self, dtype, device) -> BilinearKernel:
        """Kernel with tensors moved."""


class DenseKernel(BilinearKernel):
    """Kernel stored densely.

    Parameters
    ----------
    K : array_like, shape (N, p1, p2) or (N, C, p1, p2)
    """

    def __init__(self, K):
        K = as_tensor("K", K, ndim=(3, 4))
        K = _as_output_axis(K, "K", 2)
        self.K = K
        self.n_samples, self.n_outputs, self.p1, self.p2 = K.shape
        self.dtype, self.device = K.dtype, K.device

    def forward(self, B):
        return torch.einsum("ncij,ij->nc", self.K, B)

    def adjoint(self, R):
        return torch.einsum("nc,ncij->ij", R, self.K)

    def dense(self):
        return self.K

    def take(self, index):
        return DenseKernel(self.K[index])

    def to(self, dtype, device):
        return DenseKernel(self.K.to(dtype=dtype, device=device))


class OneHotKronKernel(BilinearKernel):
    r"""Kernel ``K_{n,c} = s · e_c ⊗ F̃_n``: output ``c`` reads only row block ``c``.

    ``F̃_n = [F_n, 1]`` (a column of ones appended) when ``append_one`` is set,
    else ``F_n``.  The left block has size ``p1 = C·q`` ordered output-major
    (``(c, j)`` → ``c·q + j``), the right block ``p2 = d (+1)``.  Costs
    ``O(N C q d)`` per application and stores only ``F`` (no copy of a
    contiguous input).

    Parameters
    ----------
    F : torch.Tensor, shape (N, q, d)
        Per-sample factor (MLP: ``q = 1``, ``F_n = x_nᵀ``; CNN: patch matrix).
    n_outputs : int
        ``C``.
    scale : float
        ``s`` (``σ'(0)`` for an MLP).
    append_one : bool
        Append a constant 1 to ``F_n`` along its last axis (a bias input).
    """

    def __init__(self, F: torch.Tensor, n_outputs: int, scale: float = 1.0, append_one: bool = False):
        if F.ndim != 3:
            raise ShapeError(f"`F` must have shape (N, q, d); found {tuple(F.shape)}")
        self.F = F
        self.n_samples, self.q, self.d = F.shape
        self._F2 = F.reshape(self.n_samples, self.q * self.d)
        self.n_outputs = int(n_outputs)
        self.scale = float(scale)
        self.append_one = bool(append_one)
        self.p1 = self.n_outputs * self.q
        self.p2 = self.d + (1 if append_one else 0)
        self.dtype, self.device = F.dtype, F.device

    def forward(self, B):
        B = B.reshape(self.n_outputs, self.q, self.p2)
        # plain matmuls on the (N, q·d) view: no copy of F (einsum may permute it)
        out = self._F2 @ B[..., : self.d].reshape(self.n_outputs, self.q * self.d).T
        if self.append_one:
            out = out + B[..., self.d].sum(1)[None, :]
        return self.scale * out

    def adjoint(self, R):
        out = (R.T @ self._F2).reshape(self.n_outputs, self.q, self.d)
        if self.append_one:
            ones = R.sum(0)[:, None, None].expand(self.n_outputs, self.q, 1)
            out = torch.cat([out, ones], dim=-1)
        return self.scale * out.reshape(self.p1, self.p2)

    def dense(self):
        Ft = self.F
        if self.append_one:
            Ft = torch.cat([Ft, torch.ones(*Ft.shape[:2], 1, dtype=self.dtype, device=self.device)], -1)
        eye = torch.eye(self.n_outputs, dtype=self.dtype, device=self.device)
        K = torch.einsum("ce,nqj->necqj", eye, Ft)  # (N, C_out, C_block, q, p2)
        return self.scale * K.reshape(self.n_samples, self.n_outputs, self.p1, self.p2)

    def take(self, index):
        return OneHotKronKernel(self.F[index], self.n_outputs, self.scale, self.append_one)

    def to(self, dtype, device):
        return OneHotKronKernel(self.F.to(dtype=dtype, device=device), self.n_outputs, self.scale, self.append_one)


class BilinearStructure(StructureOperator):
    r"""Structure operator that is bilinear between two disjoint blocks of the unit.

    ``A_{n,c} = ½ (E_L K_{n,c} E_Rᵀ + E_R K_{n,c}ᵀ E_Lᵀ)``, so for symmetric ``M``

    .. math:: \mathrm{Tr}[M A_{n,c}] = ⟨M_{LR}, K_{n,c}⟩,\qquad
              𝒜^*(R) = ½ \begin{pmatrix}0 & K̄\\ K̄ᵀ & 0\end{pmatrix},\ K̄ = Σ R_{n,c} K_{n,c}

    where ``M_{LR} = M[left, right]``.  Unit coordinates outside both blocks
    have zero rows and columns in every ``A``.

    Parameters
    ----------
    p : int
        Unit dimension.
    left, right : slice
        Disjoint blocks of the unit vector with sizes ``kernel.p1`` and ``kernel.p2``.
    kernel : BilinearKernel
    layout : str
    """

    def __init__(self, p: int, left: slice, right: slice, kernel: BilinearKernel, layout: str = ""):
        l_idx, r_idx = range(p)[left], range(p)[right]
        if len(l_idx) != kernel.p1 or len(r_idx) != kernel.p2:
            raise ShapeError(
                f"block sizes ({len(l_idx)}, {len(r_idx)}) do not match the kernel ({kernel.p1}, {kernel.p2})"
            )
        if set(l_idx) & set(r_idx):
            raise InvalidParameterError("`left` and `right` blocks must be disjoint")
        super().__init__(p, kernel.n_samples, kernel.n_outputs, kernel.dtype, kernel.device)
        self.left, self.right, self.kernel = left, right, kernel
        self.layout = layout

    def _forward(self, M):
        return self.kernel.forward(M[self.left, self.right])

    def _adjoint(self, R):
        Kbar = self.kernel.adjoint(R)
        out = torch.zeros(self.p, self.p, dtype=self.dtype, device=self.device)
        out[self.left, self.right] = 0.5 * Kbar
        out[self.right, self.left] = 0.5 * Kbar.T
        return out

    def forward_factor(self, L):
        # Tr[L Lᵀ A_{n,c}] = ⟨L_left L_rightᵀ, K_{n,c}⟩: O(p1 p2 r) + one kernel pass
        return self.kernel.forward(L[self.left] @ L[self.right].T)

    def factor_blocks(self) -> int | None:
        """``p1`` when the left block is ``[0:p1]`` and the right block ``[p1:p]`` (the MLP layout), else None.

        Then ``L = [L_left; L_right]`` and one closed step of ``M = L Lᵀ`` needs only the two kernel passes
        ``kernel.forward(L_left L_rightᵀ)`` and ``K̄ = kernel.adjoint(R)`` plus ``K̄ L_right`` and
        ``K̄ᵀ L_left`` (``𝒜*(R)`` has rank ``≤ 2 p1``): no ``p × p`` matrix (used by ``nqf.dynamics.simulate``).
        """
        lo, hi = range(self.p)[self.left], range(self.p)[self.right]
        if lo.step == 1 and hi.step == 1 and lo.start == 0 and hi.start == lo.stop and hi.stop == self.p:
            return len(lo)
        return None

    def factor_passes(self, base: torch.Tensor | None = None):
        """``(forward, adjoint, scale)`` for a loop over the two blocks (:meth:`factor_blocks`), each one pass over
        the data writing into a caller's buffer: ``forward(Bt, out)`` writes ``base + kernel.forward(Btᵀ)`` into
        ``out`` (``N × C``; ``Bt = L_r L_lᵀ``, ``p2 × p1``; ``base`` defaults to the offset ``f(0)``, e.g.
        ``f(0) − y`` gives the MSE residual) and ``adjoint(R, out)`` writes ``kernel.adjoint(R)ᵀ / scale`` into
        ``out`` (``p2 × p1``).  For an MLP-style kernel (one row block per output, no appended one) a single
        ``addmm``/``mm`` each, the scale ``σ'(0)`` left to the caller."""
        k = self.kernel
        base = self.offset if base is None else base
        if isinstance(k, OneHotKronKernel) and k.q == 1 and not k.append_one:
            F2, F2t, s = k._F2, k._F2.T, k.scale
            return (
                (lambda Bt, out: torch.addmm(base, F2, Bt, alpha=s, out=out)),
                (lambda R, out: torch.mm(F2t, R, out=out)),
                s,
            )
        return (
            (lambda Bt, out: torch.add(base, k.forward(Bt.T), out=out)),
            (lambda R, out: out.copy_(k.adjoint(R).T)),
            1.0,
        )

    def adjoint_apply(self, R, L):
        # 𝒜*(R) L = ½ [K̄ L_right; K̄ᵀ L_left] on the two blocks, zero elsewhere
        Kbar = 0.5 * self.kernel.adjoint(R)
        top, bottom = Kbar @ L[self.right], Kbar.T @ L[self.left]
        lo, hi = range(self.p)[self.left], range(self.p)[self.right]
        if lo.step == 1 and hi.step == 1 and lo.start == 0 and hi.start == lo.stop and hi.stop == self.p:
            return torch.cat([top, bottom], 0)  # the two blocks tile the unit (MLP layout): no zero fill
        out = torch.zeros(self.p, L.shape[1], dtype=self.dtype, device=self.device)
        out[self.left] = top
        out[self.right] = bottom
        return out

    def _dense(self):
        K = self.kernel.dense()
        A = torch.zeros(self.n_samples, self.n_outputs, self.p, self.p, dtype=self.dtype, device=self.device)
        A[:, :, self.left, self.right] = 0.5 * K
        A[:, :, self.right, self.left] = 0.5 * K.transpose(-1, -2)
        return A

    def _take(self, index):
        return BilinearStructure(self.p, self.left, self.right, self.kernel.take(index))

    def _to(self, dtype, device):
        return BilinearStructure(self.p, self.left, self.right, self.kernel.to(dtype, device))
