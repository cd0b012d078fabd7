r"""The structure operator 𝒜 of a dataset (docs/theory.md §2.1).

For a module with units ``w_i ∈ R^p`` and structure matrices ``A_c(x)`` (one per
output coordinate ``c``), the dataset ``x_1..x_N`` defines

.. math::

    𝒜: \mathrm{Sym}(p) → R^{N×C},\quad 𝒜(M)_{n,c} = \mathrm{Tr}[M A_c(x_n)]

    𝒜^*: R^{N×C} → \mathrm{Sym}(p),\quad 𝒜^*(R) = Σ_{n,c} R_{n,c} A_c(x_n)

with ``⟨𝒜(M), R⟩ = ⟨M, 𝒜^*(R)⟩``.  Two implementations are provided:

* :class:`DenseStructure` stores ``A`` as an ``(N, C, p, p)`` array;
* :class:`BilinearStructure` stores the low-rank-per-sample form
  ``A_{n,c} = ½ (E_L K_{n,c} E_Rᵀ + E_R K_{n,c}ᵀ E_Lᵀ)`` where ``E_L`` and ``E_R``
  embed two disjoint blocks of the unit vector and ``K`` is given by a
  :class:`BilinearKernel` that never materialises ``N × p × p``.  Every
  two-layer architecture (MLP, linear network, CNN, attention values, experts)
  is of this form.

Output-shape convention: when ``n_outputs == 1`` predictions are ``(N,)`` and
``dense()`` is ``(N, p, p)``; otherwise ``(N, C)`` and ``(N, C, p, p)``.

When the zero-gradient condition fails, the operator also carries the linear
term ``b_c(x_n)`` (``linear``, shape ``(N, C, p)``) and the cross-unit matrix
``B_c(x_n)`` (``cross``, a structure operator), and the output is

    f = f(0) + bᵀμ + μᵀBμ + Tr[M (A − B)],   μ = Σ_i w_i

(see :meth:`StructureOperator.predict`).
"""

from __future__ import annotations

import abc

import torch

from .._validation import as_tensor, check_shape, tolerance
from ..errors import InvalidParameterError, ShapeError

__all__ = [
    "StructureOperator",
    "DenseStructure",
    "BilinearStructure",
    "BilinearKernel",
    "DenseKernel",
    "OneHotKronKernel",
]


class StructureOperator(abc.ABC):
    """Abstract structure operator 𝒜 over a dataset.

    Attributes
    ----------
    p : int
        Dimension of one unit (the order parameter is ``p × p``).
    n_samples : int
        Number of samples ``N``.
    n_outputs : int
        Number of output coordinates ``C``.
    offset : torch.Tensor, shape (N, C)
        Module output at zero unit weights, ``f_c(x_n; W=0)``.
    linear : torch.Tensor of shape (N, C, p), or None
        Linear term ``b_c(x_n) = ∇_{w_1} f_c(x_n; 0)``; ``None`` when it vanishes.
    cross : StructureOperator or None
        Cross-unit matrices ``B_c(x_n) = ½ ∂²f_c/∂w_1∂w_2 (0)``; ``None`` when they vanish.
    layout : str
        Human-readable description of the unit vector layout.
    """

    layout: str = ""

    def __init__(self, p: int, n_samples: int, n_outputs: int, dtype: torch.dtype, device: torch.device):
        self.p = int(p)
        self.n_samples = int(n_samples)
        self.n_outputs = int(n_outputs)
        self.dtype = dtype
        self.device = torch.device(device)
        self.offset = torch.zeros(self.n_samples, self.n_outputs, dtype=dtype, device=self.device)
        self.linear: torch.Tensor | None = None
        self.cross: StructureOperator | None = None

    # ----------------------------------------------------------- subclass API
    @abc.abstractmethod
    def _forward(self, M: torch.Tensor) -> torch.Tensor:
        """``(p, p)`` symmetric ``M`` → ``(N, C)`` values ``Tr[M A_c(x_n)]``."""

    @abc.abstractmethod
    def _adjoint(self, R: torch.Tensor) -> torch.Tensor:
        """``(N, C)`` ``R`` → ``(p, p)`` symmetric ``Σ R_{n,c} A_c(x_n)``."""

    @abc.abstractmethod
    def _dense(self) -> torch.Tensor:
        """All structure matrices, shape ``(N, C, p, p)``."""

    @abc.abstractmethod
    def _take(self, index: torch.Tensor) -> "StructureOperator":
        """Operator restricted to the samples ``index`` (A only; extras copied by :meth:`take`)."""

    # ------------------------------------------------------------ public API
    @property
    def satisfies_zgz(self) -> bool:
        """True when the zero-gradient condition holds (no linear and no cross term)."""
        return self.linear is None and self.cross is None

    def __call__(self, M) -> torch.Tensor:
        """Apply 𝒜: ``Tr[M A_c(x_n)]``.

        Parameters
        ----------
        M : array_like, shape (p, p)
            Order parameter (only its symmetric part matters).

        Returns
        -------
        torch.Tensor, shape (N,) if ``n_outputs == 1`` else (N, C)
        """
        M = self._check_matrix("M", M)
        return self._squeeze(self._forward(0.5 * (M + M.T)))

    def adjoint(self, R) -> torch.Tensor:
        """Apply 𝒜*: ``Σ_{n,c} R_{n,c} A_c(x_n)``.

        Parameters
        ----------
        R : array_like, shape (N,) (only if ``n_outputs == 1``) or (N, C)

        Returns
        -------
        torch.Tensor, shape (p, p), symmetric
        """
        return self._adjoint(self._check_outputs("R", R))

    def dense(self) -> torch.Tensor:
        """Materialise the structure matrices.

        Returns
        -------
        torch.Tensor, shape (N, p, p) if ``n_outputs == 1`` else (N, C, p, p)
        """
        A = self._dense()
        return A[:, 0] if self.n_outputs == 1 else A

    def take(self, index) -> "StructureOperator":
        """The operator on a subset of samples (minibatches).

        Parameters
        ----------
        index : array_like of int, shape (B,)
        """
        index = torch.as_tensor(index, dtype=torch.long, device=self.device).reshape(-1)
        if index.numel() and (int(index.min()) < -self.n_samples or int(index.max()) >= self.n_samples):
            raise ShapeError(f"`index` must lie in [0, {self.n_samples}); found range "
                             f"[{int(index.min())}, {int(index.max())}]")
        sub = self._take(index)
        sub.offset = self.offset[index]
        sub.linear = None if self.linear is None else self.linear[index]
        sub.cross = None if self.cross is None else self.cross.take(index)
        sub.layout = self.layout
        return sub

    # ------------------------------------------------- factored fast paths (hot loops)
    def forward_factor(self, L: torch.Tensor) -> torch.Tensor:
        """``𝒜(L Lᵀ)`` from a factor, without forming ``L Lᵀ`` where the structure allows.

        Hot-loop fast path (no validation): ``L`` must be a tensor of shape ``(p, r)``
        with the operator's dtype and device.

        Returns
        -------
        torch.Tensor, shape (N, C) (also for ``C = 1``)
        """
        return self._forward(L @ L.T)

    def adjoint_apply(self, R: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
        """``𝒜*(R) L`` without forming the ``p × p`` matrix ``𝒜*(R)`` where the structure allows.

        Hot-loop fast path (no validation): ``R`` of shape ``(N, C)``, ``L`` of shape
        ``(p, r)``, both with the operator's dtype and device.

        Returns
        -------
        torch.Tensor, shape (p, r)
        """
        return self._adjoint(R) @ L

    def predict(self, M, mu=None) -> torch.Tensor:
        """Normal-form output of the module (docs/theory.md §1).

        ``f_c(x_n) = f_c(x_n; 0) + b_cᵀμ + μᵀB_cμ + Tr[M (A_c − B_c)]``; with
        the zero-gradient condition this is ``f(0) + Tr[M A]``.

        Parameters
        ----------
        M : array_like, shape (p, p)
            Order parameter ``Σ_i w_i w_iᵀ``.
        mu : array_like, shape (p,), optional
            Sum of the units ``Σ_i w_i``; required when ``satisfies_zgz`` is False.

        Returns
        -------
        torch.Tensor, shape (N,) or (N, C)
        """
        M = self._check_matrix("M", M)
        M = 0.5 * (M + M.T)
        out = self.offset + self._forward(M)
        if not self.satisfies_zgz:
            if mu is None:
                raise InvalidParameterError("`mu` (the sum of the units, shape (p,)) is required: this operator "
                                 "has a linear or cross-unit term (the zero-gradient condition fails)")
            mu = as_tensor("mu", mu, ndim=1, dtype=self.dtype, device=self.device)
            check_shape("mu", mu, (self.p,))
            if self.linear is not None:
                out = out + self.linear @ mu
            if self.cross is not None:
                out = out + self.cross._forward(torch.outer(mu, mu)) - self.cross._forward(M)
        return self._squeeze(out)

    def to(self, dtype: torch.dtype | None = None, device=None) -> "StructureOperator":
        """A copy with all tensors moved to ``dtype``/``device``."""
        new = self._to(dtype or self.dtype, torch.device(device) if device is not None else self.device)
        new.offset = self.offset.to(dtype=new.dtype, device=new.device)
        new.linear = None if self.linear is None else self.linear.to(dtype=new.dtype, device=new.device)
        new.cross = None if self.cross is None else self.cross.to(new.dtype, new.device)
        new.layout = self.layout
        return new

    def _to(self, dtype, device) -> "StructureOperator":  # pragma: no cover - overridden
        raise NotImplementedError

    def __repr__(self) -> str:
        zgz = "" if self.satisfies_zgz else ", zgz=False"
        return (f"{type(self).__name__}(p={self.p}, n_samples={self.n_samples}, "
                f"n_outputs={self.n_outputs}, dtype={self.dtype}{zgz})")

    # ------------------------------------------------------------- helpers
    def _check_matrix(self, name: str, M) -> torch.Tensor:
        M = as_tensor(name, M, ndim=2, dtype=self.dtype, device=self.device)
        check_shape(name, M, (self.p, self.p))
        return M

    def _check_outputs(self, name: str, R) -> torch.Tensor:
        R = as_tensor(name, R, ndim=(1, 2), dtype=self.dtype, device=self.device)
        if R.ndim == 1:
            if self.n_outputs != 1:
                raise ShapeError(f"`{name}` must have shape ({self.n_samples}, {self.n_outputs}) for an "
                                 f"operator with {self.n_outputs} outputs; found {tuple(R.shape)}")
            R = R[:, None]
        check_shape(name, R, (self.n_samples, self.n_outputs))
        return R

    def _squeeze(self, out: torch.Tensor) -> torch.Tensor:
        return out[:, 0] if self.n_outputs == 1 else out


def _as_output_axis(A: torch.Tensor, name: str, extra: int) -> torch.Tensor:
    """Insert the output axis ``C = 1`` when a per-sample array lacks it."""
    return A.unsqueeze(1) if A.ndim == 1 + extra else A


class DenseStructure(StructureOperator):
    """Structure operator stored as dense matrices.

    Parameters
    ----------
    A : array_like, shape (N, p, p) or (N, C, p, p)
        Symmetric structure matrices ``A_c(x_n)``.
    offset : array_like, shape (N,) or (N, C), optional
        ``f_c(x_n; 0)``; zero by default.
    linear : array_like, shape (N, p) or (N, C, p), optional
        Linear term ``b_c(x_n)`` (only when the zero-gradient condition fails).
    cross : array_like, shape like ``A``, optional
        Cross-unit matrices ``B_c(x_n)`` (only when the zero-gradient condition fails).
    layout : str, optional
        Description of the unit vector layout.
    check_symmetric : bool
        Raise if ``A`` (or ``cross``) is not symmetric to round-off.
    """

    def __init__(self, A, *, offset=None, linear=None, cross=None, layout: str = "",
                 check_symmetric: bool = True):
        A = as_tensor("A", A, ndim=(3, 4))
        if A.shape[-1] != A.shape[-2]:
            raise ShapeError(f"`A` must have shape (N, p, p) or (N, C, p, p); found {tuple(A.shape)}")
        A = _as_output_axis(A, "A", 2)
        if check_symmetric:
            _check_symmetric("A", A)
        N, C, p, _ = A.shape
        super().__init__(p, N, C, A.dtype, A.device)
        self.A = A
        self.layout = layout
        if offset is not None:
            off = as_tensor("offset", offset, ndim=(1, 2), dtype=A.dtype, device=A.device)
            off = off[:, None] if off.ndim == 1 else off
            check_shape("offset", off, (N, C))
            self.offset = off
        if linear is not None:
            b = as_tensor("linear", linear, ndim=(2, 3), dtype=A.dtype, device=A.device)
            b = _as_output_axis(b, "linear", 1)
            check_shape("linear", b, (N, C, p))
            self.linear = b
        if cross is not None:
            if not isinstance(cross, StructureOperator):
                cross = DenseStructure(cross, check_symmetric=check_symmetric)
            if (cross.n_samples, cross.n_outputs, cross.p) != (N, C, p):
                raise ShapeError(f"`cross` must have shape {(N, C, p, p)}; found "
                                 f"{(cross.n_samples, cross.n_outputs, cross.p, cross.p)}")
            self.cross = cross

    def _forward(self, M):
        return torch.einsum("ncij,ij->nc", self.A, M)

    def _adjoint(self, R):
        return torch.einsum("nc,ncij->ij", R, self.A)

    def _dense(self):
        return self.A

    def _take(self, index):
        return DenseStructure(self.A[index], check_symmetric=False)

    def _to(self, dtype, device):
        return DenseStructure(self.A.to(dtype=dtype, device=device), check_symmetric=False)


def _check_symmetric(name: str, A: torch.Tensor) -> None:
    scale = float(A.abs().max()) if A.numel() else 0.0
    err = float((A - A.transpose(-1, -2)).abs().max()) if A.numel() else 0.0
    if err > tolerance(A.dtype) * max(scale, 1e-300):
        raise InvalidParameterError(f"`{name}` must be symmetric in its last two axes; found max |A − Aᵀ| = {err:.3e} "
                         f"(max |A| = {scale:.3e})")


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
    def take(self, index: torch.Tensor) -> "BilinearKernel":
        """Kernel on a subset of samples."""

    @abc.abstractmethod
    def to(self, dtype, device) -> "BilinearKernel":
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
        return OneHotKronKernel(self.F.to(dtype=dtype, device=device), self.n_outputs, self.scale,
                                self.append_one)


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
            raise ShapeError(f"block sizes ({len(l_idx)}, {len(r_idx)}) do not match the kernel "
                             f"({kernel.p1}, {kernel.p2})")
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
