r"""Initial state, learning rate and run length for an analysis (docs/theory.md §0).

* :func:`initial_weights` — ``W(0)`` of shape ``(p, m)`` at scale ``ε``:
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
import torch

from .._validation import float_param, int_param

__all__ = ["initial_weights", "stable_learning_rate", "step_count"]


def initial_weights(p: int, width: int, eps: float, *, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    """Unit weights ``W(0)`` (p × width) with ``M(0) = εI`` (``width ≥ p``) or ``ε Π`` (``width < p``).

    Parameters
    ----------
    p : int
        Unit dimension.
    width : int
        Number of units ``m``.
    eps : float
        Initial scale ``ε`` in (0, 1).
    seed : int
        Seed of the random orthonormal frame.

    Returns
    -------
    torch.Tensor, shape (p, width)
    """
    p = int_param("p", p, minimum=1)
    width = int_param("width", width, minimum=1)
    eps = float_param("eps", eps, positive=True)
    if not eps < 1:
        from ..errors import InvalidParameterError

        raise InvalidParameterError(f"`eps` must lie in (0, 1) (M(0) = εI); found {eps}")
    g = torch.Generator().manual_seed(int(seed))
    if width >= p:
        Q, _ = torch.linalg.qr(torch.randn(width, p, generator=g, dtype=torch.float64))  # (m, p), QᵀQ = I
        W = Q.T
    else:
        B, _ = torch.linalg.qr(torch.randn(p, width, generator=g, dtype=torch.float64))  # (p, m), BᵀB = I
        W = B
    return (math.sqrt(eps) * W).to(dtype)


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
