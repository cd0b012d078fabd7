r"""The percentile bootstrap of :func:`nqf.curves.fit_power_law`: the exponent of every replicate of the cell
regression, all replicates drawn at once and their regressions solved as one batch.

The cells are ``(x_c, y_c)`` (mean ``ln t`` and mean ``ln(L − L_∞)`` of cell ``c``, ``n_c`` points), the fitted
line ``ŷ_c`` and the residuals ``r_c = y_c − ŷ_c``.  A replicate is a set of cells ``(x*_c, y*_c)``:

* ``"residuals"`` — ``y*_c = ŷ_c + z_j/√n_c`` with ``z = √n_c r`` (standardised residuals) drawn with
  replacement (``j`` uniform);
* ``"block"`` — the same, with the standardised residuals drawn in moving blocks of ``ℓ`` consecutive cells
  (Künsch 1989): ``⌈n/ℓ⌉`` block starts uniform in ``[0, n − ℓ]``, the blocks laid end to end and cut to
  ``n`` cells, so residuals correlated over fewer than ``ℓ`` cells stay together.  ``ℓ = 1`` is
  ``"residuals"``; the default ``ℓ = ⌈n^{1/3}⌉`` has the order that Hall, Horowitz & Jing (1995) find optimal
  for estimating a variance; ``ℓ`` is at most ``n/2``;
* ``"wild"`` — ``y*_c = ŷ_c + s_c r_c`` with Rademacher signs ``s_c``;
* ``"pairs"`` — the cells ``(x_j, y_j)`` drawn with replacement, redrawn while all ``x_j`` coincide.

The exponent of a replicate is ``−slope`` of its least-squares line; where ``L_∞`` is fitted and the scheme
is ``"wild"`` or ``"pairs"``, the caller's ``refit`` gives it instead (one profile fit per replicate: the
only part that stays a loop).  Draws come from ``numpy.random.default_rng(seed)`` in chunks of at most
:data:`CHUNK_CELLS` cells, so a seed gives the same replicates on every run and the memory stays bounded.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import InvalidParameterError

__all__ = ["SCHEMES", "CHUNK_CELLS", "check_block", "block_length", "bootstrap_exponents"]

SCHEMES = ("residuals", "block", "wild", "pairs")
CHUNK_CELLS = 1 << 21  # replicates × cells drawn at once (16 MiB of float64)


def check_block(block, bootstrap: str) -> int | None:
    """``block`` of :func:`nqf.curves.fit_power_law` checked: ``None`` or an integer ≥ 1, and only with
    ``bootstrap="block"``."""
    if block is None:
        return None
    if bootstrap != "block":
        raise InvalidParameterError(
            f"`block` is the block length of bootstrap='block'; found block={block!r} with bootstrap={bootstrap!r}"
        )
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise InvalidParameterError(f"`block` must be an integer ≥ 1 (cells per block); found {block!r}")
    return int(block)


def block_length(n_cells: int, block: int | None) -> int:
    """The moving-block length used for ``n_cells`` cells: ``block`` (default ``⌈n^{1/3}⌉``), at most ``n/2``."""
    ell = math.ceil(n_cells ** (1.0 / 3.0) - 1e-9) if block is None else int(block)
    return max(1, min(ell, n_cells // 2))


def _block_draws(rng: np.random.Generator, n: int, ell: int, reps: int) -> np.ndarray:
    """Cell indices of ``reps`` moving-block resamples, shape ``(reps, n)``."""
    k = -(-n // ell)
    starts = rng.integers(0, n - ell + 1, (reps, k))
    return (starts[:, :, None] + np.arange(ell)).reshape(reps, k * ell)[:, :n]


def _pair_draws(rng: np.random.Generator, bx: np.ndarray, reps: int) -> np.ndarray:
    """Cell indices of ``reps`` pairs resamples, shape ``(reps, n)``; a draw of a single ``x`` is redrawn."""
    n = bx.size
    j = rng.integers(0, n, (reps, n))
    bad = np.ptp(bx[j], axis=1) == 0
    while bad.any():
        j[bad] = rng.integers(0, n, (int(bad.sum()), n))
        bad = np.ptp(bx[j], axis=1) == 0
    return j


def _slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of each row of ``y`` on ``x`` (one row, or one per row of ``y``)."""
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    return (xc * yc).sum(axis=-1) / (xc * xc).sum(axis=-1)


def _replicates(rng, bx, by, res, cnt, scheme: str, ell: int, reps: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x*, y*)`` of ``reps`` replicates: ``x*`` of shape ``(n,)`` (fixed design) or ``(reps, n)``."""
    n = bx.size
    if scheme == "pairs":
        j = _pair_draws(rng, bx, reps)
        return bx[j], by[j]
    fitted = by - res
    if scheme == "wild":
        return bx, fitted + res * rng.choice((-1.0, 1.0), (reps, n))
    root = np.sqrt(cnt)
    z = res * root  # standardised residuals: exchangeable for i.i.d. per-point noise in ln L
    j = rng.integers(0, n, (reps, n)) if scheme == "residuals" else _block_draws(rng, n, ell, reps)
    return bx, fitted + z[j] / root


def bootstrap_exponents(
    bx: np.ndarray,
    by: np.ndarray,
    res: np.ndarray,
    cnt: np.ndarray,
    *,
    scheme: str,
    n_boot: int,
    seed,
    block: int | None = None,
    refit: Callable[[np.ndarray, np.ndarray], float] | None = None,
) -> np.ndarray:
    """Bootstrap exponents ``α*`` (shape ``(n_boot,)``) of the cell regression (see the module docstring).

    Parameters
    ----------
    bx, by, res, cnt : numpy.ndarray, shape (n,)
        Cell abscissae, ordinates, residuals about the fitted line and point counts.
    scheme : {"residuals", "block", "wild", "pairs"}
    n_boot : int
    seed : int or None
    block : int, optional
        Block length of ``"block"`` (:func:`block_length`).
    refit : callable, optional
        ``(x*, y*) ↦ α*`` replacing the least-squares line for every replicate (a refit of ``L_∞``).
    """
    rng = np.random.default_rng(seed)
    n = bx.size
    ell = block_length(n, block)
    out = np.empty(int(n_boot))
    chunk = max(1, CHUNK_CELLS // n)
    for lo in range(0, int(n_boot), chunk):
        reps = min(chunk, int(n_boot) - lo)
        xs, ys = _replicates(rng, bx, by, res, cnt, scheme, ell, reps)
        if refit is None:
            out[lo : lo + reps] = -_slopes(xs, ys)
        else:
            xs = np.broadcast_to(xs, ys.shape)
            out[lo : lo + reps] = [refit(xs[b], ys[b]) for b in range(reps)]
    return out
