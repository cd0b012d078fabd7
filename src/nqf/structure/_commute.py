r"""Do the structure matrices commute?  One randomized, matrix-free test (docs/theory.md §4.1).

``[𝒜^*(R), 𝒜^*(S)] = Σ R_{n,c} S_{m,d} [A_{n,c}, A_{m,d}]`` is a bilinear form in
``(R, S)``; for independent Gaussian ``R, S`` it vanishes (with probability one)
only if every commutator ``[A_{n,c}, A_{m,d}]`` vanishes.  So

.. math:: δ_{\rm rand} = \max_{\rm trials} \frac{‖[X, Y]‖_F}{‖X‖_F ‖Y‖_F}, \qquad X = 𝒜^*(R),\ Y = 𝒜^*(S)

is zero (to round-off) iff all ``A_c(x_n)`` commute.  Cost: ``2·trials`` adjoints
and ``O(p³)``; nothing dense is built, so non-commuting data are recognised in
milliseconds also when ``N·C·p²`` would not fit in memory.  Above ``p =``
:data:`EXACT_BELOW` the norm of the commutator is estimated from ``PROBES``
Gaussian probe vectors instead (``‖C‖_F² = E‖Cz‖²``, matrix–vector products only:
``O(p²)``; 10 000 inputs to one hidden layer took minutes of ``X @ Y``).  The
estimate is exactly zero when ``C`` is, and within a factor ``1 ± 0.4`` of the norm
(``√(2/PROBES)``) otherwise, far from the round-off threshold it is compared with.  Commuting data go to
the Lotka–Volterra reduction (:mod:`nqf.reductions.lv`), the others to the
greedy saddle sequence (:mod:`nqf.reductions.saddles`).
"""

from __future__ import annotations

import torch

from .._validation import as_tensor, positive_int
from ..errors import InvalidParameterError, InvalidTypeError
from ._operator import StructureOperator

__all__ = ["commutator_ratio", "relative_commutator", "commutator_defect", "commutes", "COMMUTING_RTOL"]

#: Largest :func:`commutator_defect` of float64 structure matrices called commuting (round-off).
COMMUTING_RTOL = 1e-9
#: Unit dimensions from which :func:`commutator_defect` estimates ``‖[X, Y]‖_F`` with probe vectors (``O(p²)``)
#: instead of forming ``XY − YX`` (``O(p³)``).
EXACT_BELOW = 2048
#: Probe vectors of that estimate.
PROBES = 12


def _probed_ratio(X: torch.Tensor, Y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """:func:`commutator_ratio` of two ``p × p`` matrices with ``‖[X, Y]‖_F`` estimated from :data:`PROBES`
    Gaussian vectors ``z``: ``‖C‖_F² = E‖Cz‖²`` (``Cz = X(Yz) − Y(Xz)``, four products with a ``p × PROBES``
    block)."""
    Z = torch.randn(X.shape[-1], PROBES, generator=gen, dtype=X.dtype).to(X.device)
    CZ = X @ (Y @ Z) - Y @ (X @ Z)
    num = torch.sqrt((CZ * CZ).sum() / PROBES)
    den = torch.linalg.matrix_norm(X) * torch.linalg.matrix_norm(Y)
    return num / den if float(den) > 0 else torch.zeros_like(num)


def commutator_ratio(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``‖[X, Y]‖_F / (‖X‖_F ‖Y‖_F)`` over the last two axes (broadcast over the leading ones; 0 where a norm is 0).

    The core of every commutation test: :func:`commutator_defect` applies it to random
    adjoints, :func:`relative_commutator` to all pairs of an explicit list.
    """
    num = torch.linalg.matrix_norm(X @ Y - Y @ X)
    den = torch.linalg.matrix_norm(X) * torch.linalg.matrix_norm(Y)
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(num))


def relative_commutator(A) -> float:
    """Exact ``max_{m,m'} ‖[A_m, A_m']‖_F / (‖A_m‖_F ‖A_m'‖_F)`` over all pairs (``O(N² p³)``).

    A diagnostic for small sets; :func:`commutator_defect` estimates the same from two random
    adjoints without the list, and :func:`nqf.reductions.lv.reduce` tests a list in ``O(N p³)``.

    Parameters
    ----------
    A : array_like, shape (N, p, p)
    """
    A = as_tensor("A", A, ndim=3, dtype=torch.float64)
    val = commutator_ratio(A[:, None], A[None, :])  # zero-norm matrices give 0
    return float(val.max()) if val.numel() else 0.0


def commutator_defect(op: StructureOperator, *, trials: int = 2, seed: int = 0) -> float:
    """``max ‖[X, Y]‖_F / (‖X‖_F ‖Y‖_F)`` over ``trials`` pairs ``X = 𝒜*(R)``, ``Y = 𝒜*(S)``, ``R, S`` Gaussian.

    Parameters
    ----------
    op : StructureOperator
    trials : int
        Number of random pairs (each costs two adjoints).
    seed : int
        Seed of the CPU generator that draws ``R, S`` (reproducible on any device).

    Returns
    -------
    float
        0 to round-off iff all structure matrices commute (with probability one);
        0 for an operator whose adjoints vanish.
    """
    if not isinstance(op, StructureOperator):
        raise InvalidTypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    trials = positive_int("trials", trials)
    gen = torch.Generator().manual_seed(int(seed))
    worst = 0.0
    for _ in range(trials):
        R = torch.randn(op.n_samples, op.n_outputs, generator=gen, dtype=op.dtype).to(op.device)
        S = torch.randn(op.n_samples, op.n_outputs, generator=gen, dtype=op.dtype).to(op.device)
        X, Y = op.adjoint_unchecked(R), op.adjoint_unchecked(S)
        ratio = commutator_ratio(X, Y) if op.p < EXACT_BELOW else _probed_ratio(X, Y, gen)
        worst = max(worst, float(ratio))
    return worst


def commutes(op: StructureOperator, *, trials: int = 2, rtol: float = COMMUTING_RTOL, seed: int = 0) -> bool:
    """True when :func:`commutator_defect` ``≤ rtol`` (all structure matrices commute).

    Parameters
    ----------
    rtol : float
        Largest relative commutator accepted as round-off (``1e-9`` suits float64
        operators; use ``~1e-4`` for float32).
    """
    rtol = float(rtol)
    if not rtol >= 0:
        raise InvalidParameterError(f"`rtol` must be ≥ 0; found {rtol!r}")
    return commutator_defect(op, trials=trials, seed=seed) <= rtol
