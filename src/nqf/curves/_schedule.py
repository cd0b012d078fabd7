r"""Initial state, learning rate and run length for an analysis (docs/theory.md §0).

* :func:`initial_weights` (:mod:`nqf.dynamics._initial`) — ``W(0)`` of shape ``(p, m)`` at scale ``ε``:
  ``W(0) = √ε Qᵀ`` with ``Q`` (``m × p`` when ``m ≥ p``) having orthonormal
  columns, so ``M(0) = W Wᵀ = ε I`` and every unit starts non-zero.  **Width
  below p** (``m < p``): ``W(0) = √ε B`` with ``B`` (``p × m``) orthonormal columns
  spanning a uniformly random ``m``-dimensional subspace, so ``M(0) = ε Π`` with
  ``Π`` a random rank-``m`` orthogonal projector (the rank-deficient version of
  ``εI``: the same scale on every direction the units can reach).  The NQF
  simulation then runs in weight form (the order-parameter form cannot keep the
  rank, see :mod:`nqf.dynamics.simulate`).
* :func:`stable_learning_rate` — ``η = fraction / r_max`` with ``r_max`` the
  largest escape rate of the predicted staircase (``4 λ_max(−P G(M_k) P)``
  over the saddles, or ``ζ_max = 4 β_max`` for Lotka–Volterra): with
  ``fraction = 0.02`` a GD step changes the fastest-growing direction by 2 %,
  so GD follows gradient flow to ``O(η r)`` in the times (as measured on digits,
  where the real network and the flow agree to 0.4 %).
* :func:`step_count` — enough steps to pass the last predicted drop:
  ``t_end = margin · t_K + extra``.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import float_param

__all__ = ["stable_learning_rate", "step_count"]


def stable_learning_rate(rates, fraction: float = 0.02) -> float:
    """``η = fraction / max(rates)`` (see the module docstring).

    Parameters
    ----------
    rates : array_like
        Escape rates of the predicted staircase (growth rates of ``M``).
    fraction : float
        ``η · r_max``, in (0, 1].
    """
    fraction = float_param("fraction", fraction, positive=True)
    r = np.asarray(rates, float)
    r = r[np.isfinite(r) & (r > 0)]
    if r.size == 0:
        from ..errors import InvalidParameterError

        raise InvalidParameterError("`rates`: no positive escape rate — nothing grows from a small initialisation")
    return fraction / float(r.max())


def step_count(times, lr: float, *, margin: float = 1.25, extra: float = 2.0, max_steps: int | None = None) -> int:
    """GD steps to reach ``t_end = margin · t_K + extra`` (``t_K`` the last predicted drop).

    Parameters
    ----------
    times : array_like, shape (K,)
        Predicted drop times.
    lr : float
    margin, extra : float
    max_steps : int, optional
        Cap (no cap by default).
    """
    lr = float_param("lr", lr, positive=True)
    t = np.asarray(times, float)
    t = t[np.isfinite(t)]
    t_end = margin * (float(t.max()) if t.size else 0.0) + extra
    n = int(math.ceil(t_end / lr))
    return n if max_steps is None else min(n, int(max_steps))
