r"""A fixed linear map after the units: the structure operator of ``g(h(W))`` from that of ``h``.

When the units sit inside a larger network, ``f(x) = g_x(h(x; W))`` with ``h`` the layer the
units feed (its ``d`` outputs) and ``g_x`` the rest of the network, held fixed.  Under the
zero-gradient condition for ``h`` (its outputs have no first-order term in the units), the
quadratic term of ``f`` is the quadratic term of ``h`` read out by the Jacobian of ``g`` at the
zero-unit point,

.. math:: A^f_c(x_n) = Σ_j J_n[c, j]\, A^h_j(x_n),\qquad J_n = ∂g_{x_n}/∂h\,\big|_{W = 0},

so ``𝒜_f(M) = J ⋅ 𝒜_h(M)`` sample by sample and ``𝒜_f^*(R) = 𝒜_h^*(Jᵀ R)``: the analytic,
structured operator of ``h`` (an MLP block, conv channels, attention heads) serves a deep
network at the cost of one ``N × C × d`` array (e.g. hidden neurons of the first layer of a deep
MLP: ``h`` the second linear layer, ``J = W_3 diag σ'(z_2(0))``).  The offset ``f(0)`` is the
caller's (the module's output at zero units).
"""

from __future__ import annotations

import torch

from .._validation import as_tensor
from ..errors import ShapeError
from ._operator import StructureOperator

__all__ = ["ReadoutStructure"]


class ReadoutStructure(StructureOperator):
    """``𝒜(M)_{n,c} = Σ_j J[n, c, j] 𝒜_inner(M)_{n,j}`` (module docstring).

    Parameters
    ----------
    inner : StructureOperator
        Operator of the layer the units feed (``N`` samples, ``d`` outputs), satisfying the
        zero-gradient condition.
    J : array_like, shape (N, C, d) or (C, d)
        Jacobian of the rest of the network at the zero-unit point (one per sample, or shared).
    """

    def __init__(self, inner: StructureOperator, J):
        if not inner.satisfies_zgz:
            raise ShapeError("`inner` must satisfy the zero-gradient condition (no linear or cross term)")
        J = as_tensor("J", J, ndim=(2, 3), dtype=inner.dtype, device=inner.device)
        if J.ndim == 2:
            J = J.expand(inner.n_samples, *J.shape)
        if J.shape[0] != inner.n_samples or J.shape[2] != inner.n_outputs:
            raise ShapeError(
                f"`J` must have shape (N, C, d) = ({inner.n_samples}, C, {inner.n_outputs}); found {tuple(J.shape)}"
            )
        super().__init__(inner.p, inner.n_samples, J.shape[1], inner.dtype, inner.device)
        self.inner, self.J = inner, J
        self.layout = inner.layout

    def _read(self, values: torch.Tensor) -> torch.Tensor:
        return torch.einsum("ncd,nd->nc", self.J, values)

    def _pull(self, R: torch.Tensor) -> torch.Tensor:
        return torch.einsum("nc,ncd->nd", R, self.J)

    def _forward(self, M):
        return self._read(self.inner.forward_unchecked(M))

    def _adjoint(self, R):
        return self.inner.adjoint_unchecked(self._pull(R))

    def forward_factor(self, L):
        return self._read(self.inner.forward_factor(L))

    def adjoint_apply(self, R, L):
        return self.inner.adjoint_apply(self._pull(R), L)

    def _dense(self):
        A = self.inner.dense()
        A = A[:, None] if self.inner.n_outputs == 1 else A
        return torch.einsum("ncd,ndij->ncij", self.J, A)

    def _take(self, index):
        return ReadoutStructure(self.inner.take(index), self.J[index])

    def _to(self, dtype, device):
        return ReadoutStructure(self.inner.to(dtype, device), self.J.to(dtype=dtype, device=device))
