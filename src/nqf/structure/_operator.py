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
from ._subspace import DENSE_LIMIT, data_subspace

__all__ = ["StructureOperator", "DenseStructure", "ProjectedStructure", "project_operator"]


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
    def _take(self, index: torch.Tensor) -> StructureOperator:
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

    def take(self, index) -> StructureOperator:
        """The operator on a subset of samples (minibatches).

        Parameters
        ----------
        index : array_like of int, shape (B,)
        """
        index = torch.as_tensor(index, dtype=torch.long, device=self.device).reshape(-1)
        if index.numel() and (int(index.min()) < -self.n_samples or int(index.max()) >= self.n_samples):
            raise ShapeError(
                f"`index` must lie in [0, {self.n_samples}); found range [{int(index.min())}, {int(index.max())}]"
            )
        sub = self._take(index)
        sub.offset = self.offset[index]
        sub.linear = None if self.linear is None else self.linear[index]
        sub.cross = None if self.cross is None else self.cross.take(index)
        sub.layout = self.layout
        return sub

    # ------------------------------------------ unchecked fast paths (hot loops)
    def forward_unchecked(self, M: torch.Tensor) -> torch.Tensor:
        """𝒜(M) without validation: ``(N, C)`` values ``Tr[M A_c(x_n)]``.

        Hot-loop fast path of :meth:`__call__`: ``M`` must be a symmetric tensor of
        shape ``(p, p)`` with the operator's dtype and device (not checked, not
        symmetrised); the output keeps the axis ``C`` also when ``C = 1``.
        """
        return self._forward(M)

    def adjoint_unchecked(self, R: torch.Tensor) -> torch.Tensor:
        """𝒜*(R) without validation: the ``(p, p)`` matrix ``Σ_{n,c} R_{n,c} A_c(x_n)``.

        Hot-loop fast path of :meth:`adjoint`: ``R`` must be a tensor of shape
        ``(N, C)`` (also for ``C = 1``) with the operator's dtype and device.
        """
        return self._adjoint(R)

    # ------------------------------------------------------ the data subspace
    def data_subspace(self, *, method: str = "auto", rtol: float | None = None, seed: int = 0) -> torch.Tensor:
        """Orthonormal basis ``U`` (shape ``(p, r)``) of the data subspace (docs/theory.md §3.8).

        ``U`` spans the ranges of all ``A_c(x_n)`` (and of the linear and cross terms
        when the zero-gradient condition fails).

        Parameters
        ----------
        method : {"auto", "dense", "probe"}
            ``"auto"`` uses ``"dense"`` when ``N·C·p²`` is below 2·10⁷ entries, else the randomized range finder
            (``"probe"``).
        rtol : float, optional
            Singular values below ``rtol · s_max`` count as zero. Default: ``1e3 · eps · √p``.
        seed : int
            Seed of the random probes.

        Returns
        -------
        torch.Tensor, shape (p, r)
            Columns ``U`` with ``UᵀU = I``; ``r ≤ p`` is the dimension of the subspace.
        """
        return data_subspace(self, method=method, rtol=rtol, seed=seed)

    def compress(self, U: torch.Tensor | None = None) -> StructureOperator:
        """The operator compressed to a subspace: ``A_r = Uᵀ A U`` (``r × r`` matrices).

        ``Tr[M A] = Tr[(UᵀMU)(UᵀAU)]`` for every ``M`` supported on the subspace, so
        with the zero-gradient condition the dynamics close on the ``r × r`` block
        (docs/theory.md §3.8).

        Parameters
        ----------
        U : torch.Tensor, shape (p, r), optional
            Orthonormal columns; default :meth:`data_subspace`.

        Returns
        -------
        StructureOperator
            With ``p = r``; dense when small, else a lazy projection.
        """
        if U is None:
            U = self.data_subspace()
        U = as_tensor("U", U, ndim=2, dtype=self.dtype, device=self.device)
        if U.shape[0] != self.p:
            raise ShapeError(f"`U` must have shape ({self.p}, r); found {tuple(U.shape)}")
        return project_operator(self, U)

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
                raise InvalidParameterError(
                    "`mu` (the sum of the units, shape (p,)) is required: this operator "
                    "has a linear or cross-unit term (the zero-gradient condition fails)"
                )
            mu = as_tensor("mu", mu, ndim=1, dtype=self.dtype, device=self.device)
            check_shape("mu", mu, (self.p,))
            if self.linear is not None:
                out = out + self.linear @ mu
            if self.cross is not None:
                out = out + self.cross.forward_unchecked(torch.outer(mu, mu)) - self.cross.forward_unchecked(M)
        return self._squeeze(out)

    def to(self, dtype: torch.dtype | None = None, device=None) -> StructureOperator:
        """A copy with all tensors moved to ``dtype``/``device``."""
        new = self._to(dtype or self.dtype, torch.device(device) if device is not None else self.device)
        new.offset = self.offset.to(dtype=new.dtype, device=new.device)
        new.linear = None if self.linear is None else self.linear.to(dtype=new.dtype, device=new.device)
        new.cross = None if self.cross is None else self.cross.to(new.dtype, new.device)
        new.layout = self.layout
        return new

    def _to(self, dtype, device) -> StructureOperator:  # pragma: no cover - overridden
        raise NotImplementedError

    def __repr__(self) -> str:
        zgz = "" if self.satisfies_zgz else ", zgz=False"
        return (
            f"{type(self).__name__}(p={self.p}, n_samples={self.n_samples}, "
            f"n_outputs={self.n_outputs}, dtype={self.dtype}{zgz})"
        )

    # ------------------------------------------------------------- helpers
    def _check_matrix(self, name: str, M) -> torch.Tensor:
        M = as_tensor(name, M, ndim=2, dtype=self.dtype, device=self.device)
        check_shape(name, M, (self.p, self.p))
        return M

    def _check_outputs(self, name: str, R) -> torch.Tensor:
        R = as_tensor(name, R, ndim=(1, 2), dtype=self.dtype, device=self.device)
        if R.ndim == 1:
            if self.n_outputs != 1:
                raise ShapeError(
                    f"`{name}` must have shape ({self.n_samples}, {self.n_outputs}) for an "
                    f"operator with {self.n_outputs} outputs; found {tuple(R.shape)}"
                )
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

    def __init__(self, A, *, offset=None, linear=None, cross=None, layout: str = "", check_symmetric: bool = True):
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
                raise ShapeError(
                    f"`cross` must have shape {(N, C, p, p)}; found "
                    f"{(cross.n_samples, cross.n_outputs, cross.p, cross.p)}"
                )
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
        raise InvalidParameterError(
            f"`{name}` must be symmetric in its last two axes; found max |A − Aᵀ| = {err:.3e} (max |A| = {scale:.3e})"
        )


# --------------------------------------------------------------------------- compression
class ProjectedStructure(StructureOperator):
    """``𝒜_U(M_r) = 𝒜(U M_r Uᵀ)``: the operator restricted to a subspace (``A_r = Uᵀ A U``).

    Parameters
    ----------
    op : StructureOperator
        Must satisfy the zero-gradient condition.
    U : torch.Tensor, shape (p, r)
        Orthonormal columns.
    """

    def __init__(self, op: StructureOperator, U: torch.Tensor):
        super().__init__(U.shape[1], op.n_samples, op.n_outputs, op.dtype, op.device)
        self.base, self.U = op, U
        self.offset = op.offset
        self.layout = f"projection of {op.layout or type(op).__name__} onto a {U.shape[1]}-dim data subspace"

    def _forward(self, M):
        return self.base._forward(self.U @ M @ self.U.T)

    def _adjoint(self, R):
        return self.U.T @ self.base._adjoint(R) @ self.U

    def forward_factor(self, L: torch.Tensor) -> torch.Tensor:
        return self.base.forward_factor(self.U @ L)  # r products in p dimensions, not the p × p matrix U M Uᵀ

    def adjoint_apply(self, R: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
        return self.U.T @ self.base.adjoint_apply(R, self.U @ L)

    def _dense(self):
        return torch.einsum("pi,ncpq,qj->ncij", self.U, self.base._dense(), self.U)

    def _take(self, index):
        return ProjectedStructure(self.base.take(index), self.U)

    def _to(self, dtype, device):
        return ProjectedStructure(self.base.to(dtype, device), self.U.to(dtype=dtype, device=device))


def project_operator(op: StructureOperator, U: torch.Tensor) -> StructureOperator:
    """The ``r × r`` operator ``A_r = Uᵀ A U`` (dense when small, else a :class:`ProjectedStructure`)."""
    N, C, r = op.n_samples, op.n_outputs, U.shape[1]
    if N * C * op.p * op.p <= DENSE_LIMIT:
        A_r = torch.einsum("pi,ncpq,qj->ncij", U, op._dense(), U)
        A_r = 0.5 * (A_r + A_r.transpose(-1, -2))
        out = DenseStructure(A_r, check_symmetric=False, layout=f"data subspace of dimension {r}")
        out.offset = op.offset
        return out
    return ProjectedStructure(op, U)
