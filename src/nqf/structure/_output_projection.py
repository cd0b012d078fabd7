"""An operator whose outputs lose their component in a subspace: the NQF with output-side parameters fitted.

When parameters outside the units move the output at zero units (a readout bias), they fit the part of the
residual in the span of their Jacobian at every instant; the units then see ``(I − P) 𝒜(M)``, ``P`` the
orthogonal projection onto that span over the ``N·C`` outputs (docs/watch.md).
"""

from __future__ import annotations

import torch

from ..errors import NormalFormError, ShapeError
from ._operator import StructureOperator

__all__ = ["OutputProjection", "project_outputs"]


def project_outputs(R: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """``(I − B Bᵀ) vec R``, reshaped as ``R`` (``B`` of shape ``(N·C, r)``, orthonormal columns; ``r = 0``: ``R``)."""
    if not basis.shape[1]:
        return R
    flat = R.reshape(-1)
    return (flat - basis @ (basis.T @ flat)).reshape(R.shape)


class OutputProjection(StructureOperator):
    """``𝒜_P(M) = (I − P) 𝒜(M)`` and ``𝒜_P*(R) = 𝒜*((I − P) R)``, ``P = B Bᵀ`` over the ``N·C`` outputs.

    Parameters
    ----------
    op : StructureOperator
        Satisfying the zero-gradient condition (no linear or cross terms).
    basis : torch.Tensor, shape (N·C, r)
        Orthonormal columns spanning what is projected out.
    what : str
        Names of the parameters fitted, for :attr:`layout`.

    Its ``offset`` is ``(I − P) f(0)``.  Sample subsets are refused: ``P`` couples the samples.
    """

    def __init__(self, op: StructureOperator, basis: torch.Tensor, what: str = ""):
        super().__init__(op.p, op.n_samples, op.n_outputs, op.dtype, op.device)
        if op.linear is not None or op.cross is not None:
            raise NormalFormError(
                "`op`: the zero-gradient condition fails (linear or cross terms); the fitted output-side "
                f"parameters ({what or 'a projection'}) are not modelled for such an operator"
            )
        if basis.ndim != 2 or basis.shape[0] != op.n_samples * op.n_outputs:
            raise ShapeError(
                f"`basis` must have shape (N·C, r) = ({op.n_samples * op.n_outputs}, r); found {tuple(basis.shape)}"
            )
        self.base, self.basis = op, basis.to(dtype=op.dtype, device=op.device)
        self.offset = project_outputs(op.offset, self.basis)
        self.layout = f"{op.layout or type(op).__name__} with {what or 'a subspace of outputs'} fitted"

    def _p(self, R: torch.Tensor) -> torch.Tensor:
        return project_outputs(R.reshape(self.n_samples, self.n_outputs), self.basis).reshape(R.shape)

    def _forward(self, M):
        return self._p(self.base.forward_unchecked(M))

    def _adjoint(self, R):
        return self.base.adjoint_unchecked(self._p(R))

    def forward_factor(self, L):
        return self._p(self.base.forward_factor(L))

    def adjoint_apply(self, R, L):
        return self.base.adjoint_apply(self._p(R), L)

    def _dense(self):
        A = self.base.dense().reshape(self.n_samples, self.n_outputs, self.p, self.p)
        flat = A.reshape(self.n_samples * self.n_outputs, -1)
        return (flat - self.basis @ (self.basis.T @ flat)).reshape(A.shape)

    def _take(self, index):
        raise NormalFormError(
            "`index`: an operator with projected outputs couples the samples (the projection runs over all of "
            "them); it has no sample subsets"
        )

    def _to(self, dtype, device):
        return OutputProjection(self.base.to(dtype, device), self.basis.to(dtype=dtype, device=device), self.layout)
