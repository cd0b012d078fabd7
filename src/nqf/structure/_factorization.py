r"""Two-layer linear networks, asymmetric factorization and symmetric matrix sensing.

All three modules are exactly quadratic in their units, so the normal form
(docs/theory.md §1) has no remainder: ``f_x(W) = Tr[M A(x)]`` with
``M = W Wᵀ``, ``f_x(0) = 0`` and the zero-gradient condition holds.

**Asymmetric factorization** (a two-layer linear network on a matrix input)

.. math:: f_c(X) = Σ_i u_iᵀ X_c v_i,\qquad w_i = (u_i ∈ R^{d_1}, v_i ∈ R^{d_2}),\ p = d_1 + d_2,

    A_c(X) = ½ \begin{pmatrix} 0 & X_c \\ X_cᵀ & 0 \end{pmatrix},\qquad
    \mathrm{Tr}[M A_c(X)] = ⟨M_{uv}, X_c⟩.

**Symmetric matrix sensing**

.. math:: f_c(X) = \mathrm{Tr}[U Uᵀ X_c] = Σ_i u_iᵀ X_c u_i,\qquad w_i = u_i ∈ R^{p},

    A_c(X) = \mathrm{sym}(X_c) = ½ (X_c + X_cᵀ).

**Two-layer linear network on vectors**: ``f_c(x) = Σ_i a_{ic} (u_iᵀ x)`` is
the MLP form with the identity activation (:func:`nqf.structure.mlp` with
``activation="linear"``), unit ``w_i = (a_i ∈ R^C, u_i ∈ R^D)`` and
``A_c(x) = ½ [[0, e_c xᵀ], [x e_cᵀ, 0]]`` — the factorization of the rank-one
matrix ``e_c xᵀ`` with the blocks swapped.

Loss and time conventions (used by the dynamics built on these operators):
``L = (1/N) Σ_n ℓ(f_n, y_n)``, ``ℓ = ½ (f − y)²`` for MSE, GD
``W ← W − η ∇_W L`` and training time ``t = η · steps``.
"""

from __future__ import annotations

import torch

from .._validation import as_tensor
from ..errors import ShapeError
from ._bilinear import BilinearStructure, DenseKernel
from ._mlp import mlp
from ._operator import StructureOperator

__all__ = ["factorization", "matrix_sensing", "linear_network", "SensingStructure"]


def _check_nonempty(name: str, X: torch.Tensor, expected: str) -> None:
    if any(d == 0 for d in X.shape):
        raise ShapeError(f"`{name}` must have shape {expected} with every size ≥ 1; found {tuple(X.shape)}")


def factorization(X, *, dtype=None) -> BilinearStructure:
    r"""Structure operator of the asymmetric factorization ``f_c(X) = Σ_i u_iᵀ X_c v_i``.

    Unit ``w_i = (u_i ∈ R^{d1}, v_i ∈ R^{d2})`` (``p = d1 + d2``), structure
    matrix ``A_c(X) = ½ [[0, X_c], [X_cᵀ, 0]]``.  The operator stores ``X``
    itself (a dense kernel), so memory is the
    size of the input, never ``N × p × p``; ``op(M)`` and ``op.adjoint(R)``
    cost ``O(N C d1 d2)``.

    Parameters
    ----------
    X : array_like, shape (N, d1, d2) or (N, C, d1, d2)
        One matrix per sample (and per output ``c`` for vector outputs).
    dtype : torch.dtype, optional
        Default: ``X``'s floating dtype, or float64.

    Returns
    -------
    BilinearStructure
        ``p = d1 + d2``, blocks ``left = u = [0:d1]``, ``right = v = [d1:p]``;
        ``n_outputs = 1`` for a 3-D ``X``, ``C`` for a 4-D one.  The module is
        exactly quadratic: ``f(W) = Tr[W Wᵀ A]`` with no remainder.

    Raises
    ------
    ShapeError
        ``X`` not 3-D or 4-D, or with an empty axis.
    NonFiniteError
        ``X`` contains NaN or inf.
    """
    X = as_tensor("X", X, ndim=(3, 4), dtype=dtype)
    _check_nonempty("X", X, "(N, d1, d2) or (N, C, d1, d2)")
    d1, d2 = X.shape[-2:]
    p = d1 + d2
    kernel = DenseKernel(X)
    layout = f"w = (u ∈ R^{d1} left factor [0:{d1}], v ∈ R^{d2} right factor [{d1}:{p}])"
    return BilinearStructure(p, slice(0, d1), slice(d1, p), kernel, layout=layout)


class SensingStructure(StructureOperator):
    r"""Structure operator of symmetric matrix sensing, ``A_c(x_n) = sym(X_{n,c})``.

    Stores the measurement matrices ``X`` as given (no symmetrised copy):
    for symmetric ``M``, ``Tr[M sym(X)] = ⟨sym(M), X⟩``, and
    ``𝒜^*(R) = sym(Σ_{n,c} R_{n,c} X_{n,c})``.  Both cost ``O(N C p²)``, the
    size of the input; only :meth:`dense` materialises ``sym(X)``.

    Parameters
    ----------
    X : torch.Tensor, shape (N, C, p, p)
        Measurement matrices (need not be symmetric; only their symmetric
        part enters the module ``Tr[U Uᵀ X]``).
    layout : str
    """

    def __init__(self, X: torch.Tensor, layout: str = ""):
        if X.ndim != 4 or X.shape[-1] != X.shape[-2]:
            raise ShapeError(f"`X` must have shape (N, C, p, p); found {tuple(X.shape)}")
        N, C, p, _ = X.shape
        super().__init__(p, N, C, X.dtype, X.device)
        self.X = X
        self.layout = layout

    def _forward(self, M):
        return torch.einsum("ncij,ij->nc", self.X, 0.5 * (M + M.T))

    def _adjoint(self, R):
        S = torch.einsum("nc,ncij->ij", R, self.X)
        return 0.5 * (S + S.T)

    def _dense(self):
        return 0.5 * (self.X + self.X.transpose(-1, -2))

    def _take(self, index):
        return SensingStructure(self.X[index])

    def _to(self, dtype, device):
        return SensingStructure(self.X.to(dtype=dtype, device=device))


def matrix_sensing(X, *, dtype=None) -> SensingStructure:
    r"""Structure operator of symmetric matrix sensing ``f_c(X) = Tr[U Uᵀ X_c]``.

    Unit ``w_i = u_i ∈ R^p`` (the ``i``-th column of ``U``), structure matrix
    ``A_c(X) = sym(X_c) = ½ (X_c + X_cᵀ)``.  The module is exactly quadratic:
    ``f(W) = Tr[W Wᵀ A]``.

    A dedicated :class:`SensingStructure` is used instead of
    ``DenseStructure(sym(X))``: it keeps a reference to ``X`` (no
    ``N × C × p × p`` symmetrised copy, which would double the memory) and
    accepts non-symmetric measurements, whose antisymmetric part the module
    ignores.

    Parameters
    ----------
    X : array_like, shape (N, p, p) or (N, C, p, p)
        Measurement matrices.
    dtype : torch.dtype, optional
        Default: ``X``'s floating dtype, or float64.

    Returns
    -------
    SensingStructure
        ``n_outputs = 1`` for a 3-D ``X``, ``C`` for a 4-D one.

    Raises
    ------
    ShapeError
        ``X`` not 3-D/4-D, its last two axes not square, or an empty axis.
    NonFiniteError
        ``X`` contains NaN or inf.
    """
    X = as_tensor("X", X, ndim=(3, 4), dtype=dtype)
    if X.shape[-1] != X.shape[-2]:
        raise ShapeError(f"`X` must hold square matrices, shape (N, p, p) or (N, C, p, p); found {tuple(X.shape)}")
    _check_nonempty("X", X, "(N, p, p) or (N, C, p, p)")
    if X.ndim == 3:
        X = X.unsqueeze(1)
    p = X.shape[-1]
    return SensingStructure(X, layout=f"w = u ∈ R^{p} (one column of U) [0:{p}]")


def linear_network(X, n_outputs: int = 1, *, dtype=None) -> BilinearStructure:
    r"""Structure operator of the two-layer linear network ``f_c(x) = Σ_i a_{ic} (u_iᵀ x)``.

    This is the two-layer MLP with the identity activation: it calls
    ``nqf.structure.mlp(X, "linear", n_outputs=n_outputs)``.  Unit
    ``w_i = (a_i ∈ R^C, u_i ∈ R^D)``, ``p = C + D``, and
    ``A_c(x) = ½ [[0, e_c xᵀ], [x e_cᵀ, 0]]``; exactly quadratic.  The real
    module is :class:`nqf.networks.TwoLayerMLP` with ``activation="linear"``.

    Parameters
    ----------
    X : array_like, shape (N, D)
    n_outputs : int
        ``C``.
    dtype : torch.dtype, optional

    Returns
    -------
    BilinearStructure
        Blocks ``left = a = [0:C]``, ``right = u = [C:C+D]``.
    """
    return mlp(X, "linear", bias=False, n_outputs=n_outputs, dtype=dtype)
