"""The loss ``L(M) = (1/2N) ‖𝒜(M) + f_0 − y‖²`` of the saddle sequence and its factored descent.

Gradient ``G(M) = 𝒜^*(r)/N``; the factored problem on ``V`` (``M = V Vᵀ``) with its
Hessian-vector products ``H[D] = 2 G D + 2 G'(D Vᵀ + V Dᵀ) V``, ``G'(Δ) = 𝒜^*(𝒜(Δ))/N``
(docs/theory.md §4.6), minimised by trust-region Newton–CG and polished by Newton/MINRES
steps judged by the gradient norm.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import minimize
from scipy.sparse.linalg import LinearOperator, minres

from ..._validation import as_tensor
from ...structure import StructureOperator

__all__ = ["LossProblem", "float64_problem", "descend", "compress", "complement", "orth"]


# --------------------------------------------------------------------------- the loss
class LossProblem:
    """``L(M) = (1/2N) ‖𝒜(M) + f0 − y‖²`` with its gradient ``G`` and factored derivatives."""

    def __init__(self, op: StructureOperator, y: torch.Tensor):
        self.op, self.y = op, y
        self.N, self.C, self.p = op.n_samples, op.n_outputs, op.p
        self.f0 = op.offset
        self._cache = None  # (x, G(x)) of the last Hessian product

    def apply(self, M: torch.Tensor) -> torch.Tensor:
        return self.op.forward_unchecked(M)

    def residual(self, M: torch.Tensor) -> torch.Tensor:
        return self.f0 + self.apply(M) - self.y

    def loss_of_residual(self, r: torch.Tensor) -> float:
        return 0.5 * float((r * r).sum()) / self.N

    def loss(self, M: torch.Tensor) -> float:
        return self.loss_of_residual(self.residual(M))

    def G(self, M: torch.Tensor) -> torch.Tensor:
        return self.op.adjoint_unchecked(self.residual(M)) / self.N

    # factored problem on V (p × k), numpy in / out for scipy
    def fg(self, x: np.ndarray, k: int):
        """Loss and gradient of ``L(V Vᵀ)`` with ``x = vec(V)``, ``V`` of shape (p, k)."""
        V = torch.from_numpy(x.reshape(self.p, k))
        r = self.residual(V @ V.T)
        G = self.op.adjoint_unchecked(r) / self.N
        return self.loss_of_residual(r), (2.0 * (G @ V)).reshape(-1).numpy()

    def hessp(self, x: np.ndarray, d: np.ndarray, k: int) -> np.ndarray:
        """Hessian of ``L(V Vᵀ)`` applied to ``vec(D)``."""
        V = torch.from_numpy(x.reshape(self.p, k))
        D = torch.from_numpy(d.reshape(self.p, k))
        if self._cache is not None and self._cache[0].shape == x.shape and np.array_equal(self._cache[0], x):
            G = self._cache[1]
        else:
            G = self.G(V @ V.T)
            self._cache = (x.copy(), G)
        dM = D @ V.T
        dG = self.op.adjoint_unchecked(self.apply(dM + dM.T)) / self.N
        return (2.0 * (G @ D + dG @ V)).reshape(-1).numpy()


def float64_problem(op: StructureOperator, y) -> LossProblem:
    """The loss of ``(op, y)`` where the descents, orbits and eigenproblems run: float64 on the CPU (``y``
    checked against the operator's outputs; ``op`` and ``y`` copied when they are elsewhere)."""
    y = op._check_outputs("y", as_tensor("y", y, dtype=op.dtype, device=op.device))
    if op.device.type != "cpu" or op.dtype != torch.float64:
        op, y = op.to(torch.float64, "cpu"), y.to(torch.float64).cpu()
    return LossProblem(op, y)


# --------------------------------------------------------------------------- descent
class _Matvec(LinearOperator):
    """``n × n`` linear operator from a matrix-vector product (for MINRES)."""

    def __init__(self, matvec, n: int):
        super().__init__(dtype=np.float64, shape=(n, n))
        self._mv = matvec

    def _matvec(self, x):
        return self._mv(x)


def descend(prob: LossProblem, V0: torch.Tensor, gtol: float, maxiter: int):
    """Minimise ``L(V Vᵀ)`` from ``V0`` (trust-region Newton–CG with Hessian products).

    After the trust region stalls on round-off of the loss, Newton steps (MINRES on
    the singular Hessian) are accepted while they reduce the gradient norm.
    """
    k = V0.shape[1]
    x0 = V0.reshape(-1).numpy().copy()
    res = minimize(
        lambda x: prob.fg(x, k),
        x0,
        jac=True,
        method="trust-ncg",
        hessp=lambda x, d: prob.hessp(x, d, k),
        options={"gtol": max(gtol, 1e-9 * float(np.linalg.norm(x0))), "maxiter": maxiter},
    )
    x = res.x
    # the loss cannot resolve the last digits (round-off ~1e-16 L exceeds the predicted
    # decrease ~‖g‖²/‖H‖ once ‖g‖ ≲ 1e-8), so judge the polishing steps by the gradient norm
    gn = float(np.linalg.norm(prob.fg(x, k)[1]))
    n = x.size
    for _ in range(20):
        if gn <= gtol:
            break
        g = prob.fg(x, k)[1]
        xc = x
        Hop = _Matvec(lambda d, xc=xc: prob.hessp(xc, d, k), n)
        step, _ = minres(Hop, -g, rtol=1e-10, maxiter=min(10 * n, 500))
        xn = x + step
        gnn = float(np.linalg.norm(prob.fg(xn, k)[1]))
        if not gnn < gn:
            break
        x, gn = xn, gnn
    return torch.from_numpy(x.reshape(-1, k).copy()), res


def compress(V: torch.Tensor, rank_rtol: float):
    """Orthogonal-column factor of ``V Vᵀ`` with negligible directions removed."""
    U, S, _ = torch.linalg.svd(V, full_matrices=False)
    if S.numel() == 0 or float(S[0]) == 0.0:
        return V[:, :0], 0
    keep = S**2 > rank_rtol * float(S[0]) ** 2
    return U[:, keep] * S[keep], int(keep.sum())


def complement(Q: torch.Tensor, p: int) -> torch.Tensor:
    """Orthonormal basis ``(p, p − r)`` of the complement of ``range(Q)``."""
    if Q.shape[1] == 0:
        return torch.eye(p, dtype=Q.dtype)
    _, U = torch.linalg.eigh(torch.eye(p, dtype=Q.dtype) - Q @ Q.T)  # eigenvalues 0 (r times), then 1
    return U[:, Q.shape[1] :]


def orth(V: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis of ``range(V)``."""
    if V.shape[1] == 0:
        return V
    U, S, _ = torch.linalg.svd(V, full_matrices=False)
    return U[:, S > 0]
