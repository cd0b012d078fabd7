r"""The closed dynamics on a factor ``M = L Lᵀ`` of the order parameter (docs/theory.md §3).

Every closed update of ``M = W Wᵀ`` is the image of a linear update of the units
``W`` (``W ← T W − η h 1ᵀ``, momentum ``V ← βV + S W + h 1ᵀ``).  All of them act on
``W`` from the left, so the right factor stays in a fixed subspace: with
``W(0) = L(0) Qᵀ`` (``Q`` of shape ``m × r`` with orthonormal columns spanning the
rows of ``W(0)``, and ``1`` as well without the zero-gradient condition) one has
``W(t) = L(t) Qᵀ`` and ``V(t) = K(t) Qᵀ`` for all ``t``, and

    L ← T L − η h cᵀ,   c = Qᵀ 1  (so ``μ = W 1 = L c`` and ``|c|² = m``),
    K ← β K + S L + h cᵀ,  L ← L − η K           (heavy-ball momentum),

with ``T = I − ηS``, ``S = 2G + λI``.  Then ``M = L Lᵀ``, ``P = W Vᵀ = L Kᵀ``,
``Q = V Vᵀ = K Kᵀ``, ``ν = V 1 = K c``, exactly the closed updates of
:mod:`nqf.dynamics.simulate`.  ``r ≤ p`` (``p + 1`` without ZGZ) whatever the
width ``m``.

Why a factor: ``M`` is positive semidefinite by construction, and a direction in
which ``M`` is ``ε`` small keeps a relative round-off of ``1e-16`` in ``L``
(entries ``√ε``) — the propagation ``M ← T M Tᵀ`` of the full matrix instead
carries an absolute round-off ``1e-16 ‖M‖`` into it, which swamps it once
``ε ≲ 1e-13`` and can make ``M`` indefinite.

The operator is applied through its factored fast paths
:meth:`~nqf.structure.StructureOperator.forward_factor` (``𝒜(L Lᵀ)``) and
:meth:`~nqf.structure.StructureOperator.adjoint_apply` (``𝒜*(R) L``), which for
two-layer structures never form a ``p × p`` matrix.
"""

from __future__ import annotations

import numpy as np
import torch

from ..structure import StructureOperator

__all__ = ["factor_from_matrix", "factor_from_weights", "predictions", "gradient_terms", "apply_G"]


def factor_from_matrix(M: torch.Tensor) -> torch.Tensor:
    """A factor ``L`` (p × r, r = rank) with ``L Lᵀ = M`` for a symmetric PSD ``M`` (p × p).

    Diagonal ``M`` (e.g. ``εI``) is factored exactly (``L = diag(√M_kk)``); otherwise by
    the eigendecomposition (eigenvalues ``≤ 0`` dropped).
    """
    d = torch.diagonal(M)
    if M.numel() == 0 or int(torch.count_nonzero(M)) == int(torch.count_nonzero(d)):  # diagonal
        keep = torch.nonzero(d > 0).flatten()
        L = M.new_zeros(M.shape[0], keep.numel())
        L[keep, torch.arange(keep.numel(), device=M.device)] = torch.sqrt(d[keep])
        return L
    lam, V = torch.linalg.eigh(M)
    keep = lam > 0
    return V[:, keep] * torch.sqrt(lam[keep])


def factor_from_weights(W: torch.Tensor, with_ones: bool):
    """Compress ``W`` (p × m) to ``(L, c)`` with ``W = L Qᵀ`` and ``1 = Q c`` (the latter only ``with_ones``).

    Returns
    -------
    L : torch.Tensor, shape (p, r)
        ``W`` itself when ``m ≤ p`` (``m ≤ p + 1`` with ones): then ``Q = I`` exactly.
    c : torch.Tensor of shape (r,), or None
        ``Qᵀ 1`` (``None`` without ``with_ones``).
    """
    p, m = W.shape
    cap = p + 1 if with_ones else p
    if m <= cap:
        return W.clone(), (torch.ones(m, dtype=W.dtype, device=W.device) if with_ones else None)
    B = torch.cat([W.T, torch.ones(m, 1, dtype=W.dtype, device=W.device)], 1) if with_ones else W.T
    Q = torch.linalg.qr(B)[0]  # (m, r): orthonormal basis of the rows of W (and of 1)
    return W @ Q, (Q.T @ torch.ones(m, dtype=W.dtype, device=W.device) if with_ones else None)


def predictions(op: StructureOperator, L: torch.Tensor, mu: torch.Tensor | None) -> torch.Tensor:
    """Normal-form predictions ``f(0) + 𝒜(L Lᵀ) [+ bᵀμ + 𝒜_B(μμᵀ − L Lᵀ)]``, shape (N, C)."""
    f = op.offset + op.forward_factor(L)
    if op.linear is None and op.cross is None:
        return f
    assert mu is not None, "an operator with a bias part (no ZGZ) always comes with the bias mean μ = L c"
    if op.linear is not None:
        f = f + op.linear @ mu
    if op.cross is not None:
        f = f + op.cross.forward_factor(mu[:, None]) - op.cross.forward_factor(L)
    return f


def apply_G(op: StructureOperator, r: torch.Tensor, X: torch.Tensor, nb: int) -> torch.Tensor:
    """``G X`` with ``G = (1/N)(𝒜* − 𝒜_B*)(r)`` (the cross term only without ZGZ), shape like ``X`` (p × k)."""
    rs = r / nb  # (N, C): scale the residual, not the (p, k) result
    GX = op.adjoint_apply(rs, X)
    if op.cross is not None:
        GX = GX - op.cross.adjoint_apply(rs, X)
    return GX


def gradient_terms(op: StructureOperator, r: torch.Tensor, L: torch.Tensor, mu: torch.Tensor | None, nb: int):
    """``(G L, h)`` with ``G`` as in :func:`apply_G` and ``h = (1/N) Σ r (b + 2Bμ)`` (``None`` with ZGZ)."""
    GL = apply_G(op, r, L, nb)
    h = None
    if op.cross is not None:
        assert mu is not None, "an operator with a bias part (no ZGZ) always comes with the bias mean μ = L c"
        h = 2.0 * op.cross.adjoint_apply(r, mu[:, None])[:, 0] / nb
    if op.linear is not None:
        hb = torch.einsum("nc,ncp->p", r, op.linear) / nb
        h = hb if h is None else h + hb
    return GL, h


_ROUNDS: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}


def _rounds(r: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Round-robin pairings of ``r`` (even) columns: ``r − 1`` rounds of ``r/2`` disjoint pairs (cached)."""
    if r not in _ROUNDS:
        idx, out = list(range(r)), []
        for _ in range(r - 1):
            out.append((torch.tensor(idx[: r // 2]), torch.tensor(idx[r // 2 :][::-1])))
            idx = [idx[0], idx[-1]] + idx[1:-1]
        _ROUNDS[r] = out
    return _ROUNDS[r]


def orthogonalize_columns(L: torch.Tensor, *, tol: float = 1e-15, max_sweeps: int = 8) -> torch.Tensor:
    r"""Rotate the columns of ``L`` (``L ← L O``, ``O`` orthogonal) until they are mutually orthogonal.

    One-sided Jacobi (Hestenes): each rotation of a pair of columns ``(l_i, l_j)`` is chosen
    from their norms and the cosine of their angle, so the new columns carry round-off
    relative to *their own* norms — a column a factor ``10^{100}`` smaller than another keeps
    its relative accuracy (Demmel & Veselić 1992).  ``L Lᵀ`` is unchanged (to round-off
    relative to each column), and afterwards every column lies along an eigenvector of
    ``M = L Lᵀ``.  Pairs are processed in a round-robin order, ``r/2`` disjoint pairs at a
    time; a sweep costs ``O(p r²)``.

    Parameters
    ----------
    L : torch.Tensor, shape (p, r) or (B, p, r)
        One factor, or a batch of factors (each run rotated independently: a run whose columns
        are already orthogonal, all cosines ``≤ tol``, is left exactly unchanged; columns with
        disjoint supports, no row with two non-zeros, are returned without a sweep).

    Returns
    -------
    torch.Tensor, same shape as ``L``
    """
    *batch, p, r = L.shape
    if r < 2 or L.numel() == 0:
        return L
    if int((L != 0).sum(-1).amax()) <= 1:  # columns with disjoint supports (e.g. εI's diagonal factor): orthogonal
        return L.clone()
    if not batch and L.device.type == "cpu" and L.dtype in (torch.float64, torch.float32):
        return torch.from_numpy(_jacobi_numpy(L.numpy(), tol, max_sweeps))
    pad = r % 2
    L = torch.cat([L, L.new_zeros(*batch, p, 1)], -1) if pad else L.clone()
    rounds = _rounds(L.shape[-1])
    for _ in range(max_sweeps):
        worst = 0.0
        for a, b in rounds:
            if a.device != L.device:
                a, b = a.to(L.device), b.to(L.device)
            La, Lb = L[..., a], L[..., b]
            na, nb = La.norm(dim=-2, keepdim=True), Lb.norm(dim=-2, keepdim=True)
            ok = (na > 0) & (nb > 0)
            sa, sb = torch.where(ok, na, 1.0), torch.where(ok, nb, 1.0)
            gam = ((La / sa) * (Lb / sb)).sum(-2, keepdim=True)  # cosines of the angles, (..., 1, r/2)
            act = ok & (gam.abs() > tol)
            if not bool(act.any()):
                continue
            worst = max(worst, float(gam.abs().max()))
            g = torch.where(act, gam, 1.0)
            rho = sb / sa
            zeta = (rho - 1.0 / rho) / (2.0 * g)
            t = torch.sign(zeta) / (zeta.abs() + torch.hypot(torch.ones_like(zeta), zeta))
            t = torch.where(zeta == 0, torch.ones_like(t), t)
            cs = 1.0 / torch.sqrt(1.0 + t * t)
            sn = cs * t
            cs, sn = torch.where(act, cs, 1.0), torch.where(act, sn, 0.0)
            L[..., a] = cs * La - sn * Lb
            L[..., b] = sn * La + cs * Lb
        if worst <= tol:
            break
    return L[..., :r] if pad else L


def _jacobi_numpy(L: np.ndarray, tol: float, max_sweeps: int) -> np.ndarray:
    """:func:`orthogonalize_columns` of one factor on the CPU, the same rotations in NumPy: its element-wise
    operations on ``p × r/2`` arrays cost about a third of PyTorch's per call, and a sweep is ``r − 1`` rounds
    of some forty of them (the same arithmetic; reductions may round differently, so the rotated columns agree
    with PyTorch's to round-off, and ``L Lᵀ`` is unchanged to round-off relative to each column)."""
    p, r = L.shape
    A = np.zeros((p, r + r % 2), dtype=L.dtype)
    A[:, :r] = L
    rounds = [(a.numpy(), b.numpy()) for a, b in _rounds(A.shape[1])]
    for _ in range(max_sweeps):
        worst = 0.0
        for a, b in rounds:
            La, Lb = A[:, a], A[:, b]
            na, nb = np.sqrt((La * La).sum(0)), np.sqrt((Lb * Lb).sum(0))
            ok = (na > 0) & (nb > 0)
            sa, sb = np.where(ok, na, 1.0), np.where(ok, nb, 1.0)
            gam = ((La / sa) * (Lb / sb)).sum(0)  # cosines of the angles
            ag = np.abs(gam)
            act = ok & (ag > tol)
            if not act.any():
                continue
            worst = max(worst, float(ag.max()))
            rho = sb / sa
            zeta = (rho - 1.0 / rho) / (2.0 * np.where(act, gam, 1.0))
            t = np.sign(zeta) / (np.abs(zeta) + np.hypot(1.0, zeta))
            t = np.where(zeta == 0, 1.0, t)
            cs = 1.0 / np.sqrt(1.0 + t * t)
            cs, sn = np.where(act, cs, 1.0), np.where(act, cs * t, 0.0)
            A[:, a] = cs * La - sn * Lb
            A[:, b] = sn * La + cs * Lb
        if worst <= tol:
            break
    return np.ascontiguousarray(A[:, :r])
