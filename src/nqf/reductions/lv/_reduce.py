r"""Reduction of commuting data to a Lotka–Volterra system (docs/theory.md §4.1).

If all structure matrices ``A_m`` (one per measurement ``m = (n, c)``: sample ``n``,
output coordinate ``c``) commute, they share an orthonormal eigenbasis ``U``,
``A_m = U diag(a_m) Uᵀ``; if also ``M(0) = U diag(z(0)) Uᵀ``, MSE gradient descent keeps
``M`` diagonal in ``U`` and ``z = diag(UᵀMU)`` follows the Lotka–Volterra system of
:class:`~nqf.reductions.lv._system.LotkaVolterra` with

.. math::

    β_k = \frac1N Σ_{n,c} ỹ_{nc} a_{nc,k}, \quad C = \frac1N Σ_{n,c} a_{nc} a_{nc}ᵀ, \quad
    ỹ = y − f(0),

where ``f(0)`` is ``op.offset`` (the module output at zero weights).  Conventions
(docs/theory.md §0): ``L = (1/N) Σ_n ½‖f_n − y_n‖²``, GD ``W ← W − η∇_W L``, ``t = η · steps``.

**Finding the shared basis.**  ``U`` is the eigenbasis of a random combination
``S = Σ_m c_m A_m/‖A_m‖_F`` with independent standard normal ``c_m``.  For commuting
matrices the eigenspaces of ``S`` are, with probability one, exactly the joint
eigenspaces; a joint eigenspace of dimension > 1 (a genuinely degenerate eigenvalue)
has every ``A_m`` scalar on it, so any orthonormal basis of it works, and nearly equal
eigenvalues of ``S`` only mix directions on which the ``A_m`` differ by round-off.  An
accidental near-cancellation is repaired by retrying with fresh coefficients (3 tries).
Every ``A_m`` is then checked to be diagonal in ``U``: the measured non-commutation is

.. math::

    δ = \max_m ‖\mathrm{offdiag}(Uᵀ A_m U)‖_F / ‖A_m‖_F,

an ``O(N p³)`` test (instead of ``O(N² p³)`` for all pairwise commutators); ``δ = 0``
iff the ``A_m`` commute, and ``‖[A_m, A_{m'}]‖_F / (‖A_m‖_F ‖A_{m'}‖_F) ≤ 4δ + O(δ²)``.
``M(0)`` is included in the random combination (a matrix that commutes with every
``A_m`` can be diagonalised together with them, which also picks the right basis inside
degenerate eigenspaces); if it does not commute, the error reports
``max_m ‖[M(0), A_m]‖_F / (‖M(0)‖_F ‖A_m‖_F)``.

**Modes.**  A direction ``k`` of ``U`` carries signal when its measurement column
``a_{·k}`` is non-zero (``‖a_{·k}‖ > tol · max_j ‖a_{·j}‖``); the others have
``β_k = 0`` and ``C_{k·} = 0``, never move and never affect the outputs, and are dropped
(their part of ``M(0)`` is kept in ``LotkaVolterra.rest``).  ``K`` is the number of
kept directions, ``K ≤ p``.  Modes are ordered by decreasing ``β_k``.
"""

from __future__ import annotations

import numpy as np
import torch

from ..._validation import as_tensor, positive_int
from ...errors import InvalidParameterError, InvalidTypeError, NonCommutingError, NotClosedError, ShapeError
from ...structure import StructureOperator, commutator_defect
from ._system import LotkaVolterra

__all__ = ["reduce", "commutation_defect"]


def _noncommuting(msg: str, value: float, index: int | None = None) -> NonCommutingError:
    err = NonCommutingError(msg)
    err.value = value
    err.index = index
    return err


def _offdiag_defect(U: np.ndarray, A: np.ndarray, norms: np.ndarray) -> tuple[float, int]:
    D = np.einsum("ip,mij,jq->mpq", U, A, U, optimize=True)
    diag = np.einsum("mpp->mp", D)
    off2 = np.maximum(np.sum(D * D, axis=(1, 2)) - np.sum(diag * diag, axis=1), 0.0)
    rel = np.sqrt(off2) / np.where(norms > 0, norms, 1.0)
    i = int(np.argmax(rel)) if rel.size else 0
    return (float(rel[i]) if rel.size else 0.0), i


def commutation_defect(A, *, seed: int = 0, tries: int = 3) -> tuple[float, np.ndarray]:
    """Shared eigenbasis of symmetric matrices and the measured non-commutation ``δ``.

    Parameters
    ----------
    A : array_like, shape (N, p, p)
        Symmetric matrices.
    seed : int
        Seed of the random combination.
    tries : int ≥ 1
        Number of random combinations tried; the best is returned.

    Returns
    -------
    delta : float
        ``max_m ‖offdiag(Uᵀ A_m U)‖_F / ‖A_m‖_F`` (0 for exactly commuting matrices).
    U : numpy.ndarray, shape (p, p)
        Orthonormal basis (columns).
    """
    A = as_tensor("A", A, ndim=3, dtype=torch.float64).numpy()
    delta, U, _ = _shared_basis(A, np.random.default_rng(seed), positive_int("tries", tries))
    return delta, U


def _shared_basis(A: np.ndarray, rng, tries: int, tol: float = 0.0) -> tuple[float, np.ndarray, int]:
    """The best of ``tries`` (≥ 1) random combinations: ``(δ, U, worst measurement)``."""
    norms = np.linalg.norm(A, axis=(1, 2))
    w = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)
    best: tuple[float, np.ndarray, int] | None = None
    for _ in range(tries):
        c = rng.standard_normal(A.shape[0]) * w
        S = np.einsum("m,mij->ij", c, A)
        _, U = np.linalg.eigh(0.5 * (S + S.T))
        d, i = _offdiag_defect(U, A, norms)
        if best is None or d < best[0]:
            best = (d, U, i)
        if d <= tol:
            break
    assert best is not None  # tries ≥ 1
    return best


def reduce(op: StructureOperator, y, M0, *, tol: float | None = None, seed: int = 0) -> LotkaVolterra:
    r"""Lotka–Volterra reduction of MSE training on commuting data.

    Parameters
    ----------
    op : StructureOperator
        Structure operator with the zero-gradient condition (``op.satisfies_zgz``); all
        ``A_c(x_n)`` must commute.  Its ``offset`` ``f(0)`` is subtracted from the targets.
    y : array_like, shape (N,) or (N, C)
        Targets.
    M0 : array_like, shape (p, p)
        Initial order parameter ``W(0)W(0)ᵀ`` (PSD), e.g. ``ε I``.
    tol : float, optional
        Relative tolerance of the commutation test, of the diagonality of ``M0`` and of the
        signal threshold for keeping a mode; default ``1e-8`` (``1e-4`` for float32 operators).
    seed : int
        Seed of the random linear combination that finds the shared eigenbasis.

    Returns
    -------
    LotkaVolterra
        With ``beta`` (K,), ``C`` (K, K), ``zeta = 4β``, ``z0`` (K,), ``basis`` (p, K),
        ``y2 = (1/N) Σ_n ‖y_n − f_n(0)‖²``, the least-squares factor
        ``(a/√N, ỹ/√N)``, ``rest`` (``M(0)`` on dropped directions) and
        ``commutation_defect`` (the measured ``δ`` of the basis used).

    Raises
    ------
    NonCommutingError
        The ``A_m`` do not commute: found first by the matrix-free randomized test
        (``err.value`` = :func:`nqf.structure.commutator_defect`, ``err.index`` None; nothing
        dense is built), else by the basis test (``err.value`` = measured ``δ``, ``err.index`` =
        worst measurement); or ``M0`` does not commute with them (``err.value`` = relative
        commutator of ``M0``).
    NotClosedError
        The operator has a linear or cross-unit term (no closed dynamics on ``M`` alone).
    ShapeError, NonFiniteError, ValueError
        Bad shapes, NaN/inf, ``M0`` not symmetric or not PSD.
    """
    if not isinstance(op, StructureOperator):
        raise InvalidTypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    if not op.satisfies_zgz:
        raise NotClosedError(
            "`op` has a linear or cross-unit term (the zero-gradient condition fails); "
            "the Lotka–Volterra reduction needs dynamics closed on M alone"
        )
    N, Cout, p = op.n_samples, op.n_outputs, op.p
    if tol is None:
        tol = 1e-8 if op.dtype == torch.float64 else 1e-4
    yt = as_tensor("y", y, ndim=(1, 2), dtype=torch.float64)
    if yt.ndim == 1:
        yt = yt[:, None]
    if tuple(yt.shape) != (N, Cout):
        raise ShapeError(f"`y` must have shape ({N},) or ({N}, {Cout}) to match `op`; found {tuple(yt.shape)}")
    ytil = (yt - op.offset.to(dtype=torch.float64, device=yt.device)).cpu().numpy().reshape(-1)
    M0n = as_tensor("M0", M0, ndim=2, dtype=torch.float64).cpu().numpy()
    if M0n.shape != (p, p):
        raise ShapeError(f"`M0` must have shape ({p}, {p}); found {M0n.shape}")
    m0scale = float(np.abs(M0n).max())
    if float(np.abs(M0n - M0n.T).max()) > 1e-10 * max(m0scale, 1e-300):
        raise InvalidParameterError("`M0` must be symmetric")
    # matrix-free test first: non-commuting data fail here, before N·C·p² numbers are built
    rand = commutator_defect(op)
    if rand > tol:
        raise _noncommuting(
            f"`op`: the structure matrices do not commute: relative commutator of two random adjoints "
            f"‖[𝒜*(R), 𝒜*(S)]‖/(‖𝒜*(R)‖‖𝒜*(S)‖) = {rand:.3e} > tol = {tol:.1e} (nqf.structure.commutator_defect); "
            f"the Lotka–Volterra reduction needs commuting data — use the greedy saddle sequence "
            f"(nqf.reductions.saddles.saddle_sequence) and the order-parameter dynamics (nqf.simulate) instead",
            rand,
        )
    A = op.dense().to(dtype=torch.float64).cpu().numpy().reshape(N * Cout, p, p)
    norms = np.linalg.norm(A, axis=(1, 2))
    if not (norms > 0).any():
        raise InvalidParameterError("`op`: every structure matrix is zero; nothing can be learned")
    delta, U = _joint_basis(A, M0n, norms, seed=seed, tol=tol, n_outputs=Cout)
    a = np.einsum("ip,mij,jp->mp", U, A, U, optimize=True)  # (N·C, p)
    z0 = np.einsum("ip,ij,jp->p", U, M0n, U)
    if (z0 < -tol * max(m0scale, 1e-300)).any():
        raise InvalidParameterError(f"`M0` must be positive semi-definite; found an eigenvalue {z0.min():.3e} < 0")
    z0 = np.maximum(z0, 0.0)
    colnorm = np.linalg.norm(a, axis=0)
    keep = np.flatnonzero(colnorm > tol * colnorm.max())
    a = a[:, keep]
    beta = a.T @ ytil / N
    order = np.argsort(-beta, kind="stable")
    keep, a, beta = keep[order], a[:, order], beta[order]
    Cmat = a.T @ a / N
    Cmat = 0.5 * (Cmat + Cmat.T)
    Uk = U[:, keep]
    z0k = z0[keep]
    rest = M0n - (Uk * z0k) @ Uk.T
    if not (z0k > 0).any():
        raise InvalidParameterError("`M0` has no weight on any signal-carrying direction (z(0) = 0): nothing can grow")
    lv = LotkaVolterra(
        beta, Cmat, z0k, y2=float(ytil @ ytil) / N, basis=Uk, factor=(a / np.sqrt(N), ytil / np.sqrt(N)), rest=rest
    )
    lv.commutation_defect = float(delta if delta <= tol else _offdiag_defect(U, A, norms)[0])
    return lv


def _joint_basis(A: np.ndarray, M0n: np.ndarray, norms: np.ndarray, *, seed: int, tol: float, n_outputs: int):
    """Shared eigenbasis ``U`` of the structure matrices ``A`` (and ``M0``), with its measured defect ``δ``.

    The basis is sought for ``A`` and ``M0`` together (which picks the right basis inside
    degenerate eigenspaces); when that fails, for ``A`` alone, which must commute, and then
    ``M0`` must commute with every ``A_m`` to ``tol``.  Raises :class:`NonCommutingError`
    naming the worst sample and output, or the commutator of ``M0``.
    """
    rng = np.random.default_rng(seed)
    # joint basis with M0 included (picks the right basis inside degenerate eigenspaces)
    m0n = float(np.linalg.norm(M0n))
    stack = np.concatenate([A, M0n[None]], axis=0) if m0n > 0 else A
    delta, U, _ = _shared_basis(stack, rng, 3, tol)
    if delta > tol:
        dA, UA, iA = _shared_basis(A, rng, 3, tol)
        if dA > tol:
            n, c = divmod(iA, n_outputs)
            raise _noncommuting(
                f"`op`: the structure matrices do not commute: relative off-diagonal norm in the best "
                f"shared basis δ = {dA:.3e} > tol = {tol:.1e} (worst: sample {n}, output {c}); the "
                f"Lotka–Volterra reduction needs commuting data — use the greedy saddle sequence "
                f"(nqf.reductions.saddles.saddle_sequence) and the order-parameter dynamics (nqf.simulate) "
                "instead",
                dA,
                iA,
            )
        comm = np.einsum("ij,mjk->mik", M0n, A)
        comm = comm - comm.transpose(0, 2, 1)
        rel = np.linalg.norm(comm, axis=(1, 2)) / (m0n * np.where(norms > 0, norms, 1.0))
        i = int(np.argmax(rel))
        if rel[i] > tol:
            raise _noncommuting(
                f"`M0` is not diagonal in the shared eigenbasis of the structure matrices: relative "
                f"commutator max_m ‖[M0, A_m]‖/(‖M0‖‖A_m‖) = {rel[i]:.3e} > tol = {tol:.1e}; start "
                f"from M0 = ε I or another matrix that commutes with the data",
                float(rel[i]),
                i,
            )
        U = UA  # M0 commutes to tolerance: the A-basis diagonalises it up to that tolerance
    return delta, U
