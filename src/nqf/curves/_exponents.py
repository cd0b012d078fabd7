r"""Scaling exponents from mode spectra, and the exact predicted loss of a sum of logistic modes.

docs/theory.md §5: with modes ordered by decreasing rate, if the loss each
mode removes falls as ``ℓ_k ~ k^{−a}`` and its rate as ``ζ_k ~ k^{−b}``, the
modes still unlearned at time ``t`` are ``k > K(t) ~ (t/ln(1/ε))^{1/b}`` and

.. math:: L(t) − L_∞ \sim (t/\ln(1/ε))^{−(a−1)/b}.

Each mode is an exact logistic (feature-wise regime, docs/theory.md §4.2):
``z_k(t) = z*_k / (1 + (z*_k/z_k(0) − 1) e^{−ζ_k t})`` and its excess loss is
``ℓ_k (1 − z_k/z*_k)²`` with ``ℓ_k = ½ C_kk z*_k²``, so

.. math:: L(t) = L_∞ + Σ_k ℓ_k \left(\frac{q_k e^{−ζ_k t}}{1 + q_k e^{−ζ_k t}}\right)^2,
          \qquad q_k = z*_k / z_k(0) − 1.

Initial-scale conventions (state one every time):

* ``"relative"``: ``z_k(0) = ε z*_k`` → ``q_k = 1/ε − 1`` for every mode, and
  ``t*_k = ln(1/ε − 1)/ζ_k``;
* ``"absolute"``: ``z_k(0) = ε`` (e.g. ``M(0) = εI``) → ``q_k = z*_k/ε − 1``,
  ``t*_k = ln(z*_k/ε − 1)/ζ_k`` (needs ``z*_k``).

A weight scale ``σ`` (``W(0) = σ I`` or ``σ × `` orthonormal columns) gives
``M(0) = σ² I``, i.e. ``ε = σ²`` in the absolute convention.
Loss convention ``L = (1/N) Σ ½(f − y)²``; ``t = η · steps``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import log_expit

from .._validation import eps_value
from ..errors import InvalidParameterError, ShapeError
from ..reductions import logistic_switch_time
from ..results import Result
from ._curves import _as_1d

__all__ = ["ExponentPrediction", "predict_exponent", "predicted_curve"]


@dataclass(frozen=True, repr=False)
class ExponentPrediction(Result):
    """Result of :func:`predict_exponent`.

    Attributes
    ----------
    a, b : float
        Fitted ``ℓ_k ~ k^{−a}`` and ``ζ_k ~ k^{−b}``.
    exponent : float
        ``(a − 1)/b``.
    a_stderr, b_stderr : float
        OLS standard errors of ``a`` and ``b`` on ``log k``.
    k_range : tuple of int
        Ranks ``(k_min, k_max)`` (1-based, inclusive) used.
    order : ndarray of int, shape (K,)
        The permutation that sorts the modes by decreasing rate.
    """

    a: float
    b: float
    exponent: float
    a_stderr: float
    b_stderr: float
    k_range: tuple
    order: np.ndarray


def _check_spectra(ell, zeta):
    ell, zeta = _as_1d("ell", ell), _as_1d("zeta", zeta)
    if ell.shape != zeta.shape:
        raise ShapeError(f"`ell` and `zeta` must have the same length; found {ell.size} and {zeta.size}")
    if ell.size == 0:
        raise ShapeError("`ell` and `zeta` must hold at least one mode; found 0")
    for name, a in (("ell", ell), ("zeta", zeta)):
        if not np.all(np.isfinite(a)):
            from ..errors import NonFiniteError

            raise NonFiniteError(f"`{name}` must be finite; found {int((~np.isfinite(a)).sum())} NaN/inf entries")
    if np.any(zeta <= 0):
        raise InvalidParameterError(
            f"`zeta` (mode rates ζ_k = 4β_k) must be positive for learnable modes; found min "
            f"{zeta.min():.3g} — drop the modes with β_k ≤ 0 (they decay and remove no loss)"
        )
    if np.any(ell < 0):
        raise InvalidParameterError(f"`ell` (loss removed per mode) must be non-negative; found min {ell.min():.3g}")
    return ell, zeta


def _loglog_slope(k, v):
    x, y = np.log(k), np.log(v)
    xm = x.mean()
    sxx = ((x - xm) ** 2).sum()
    slope = ((x - xm) * (y - y.mean())).sum() / sxx
    res = y - y.mean() - slope * (x - xm)
    se = math.sqrt((res**2).sum() / max(x.size - 2, 1) / sxx)
    return slope, se


def predict_exponent(ell, zeta, k_range: tuple | None = None) -> ExponentPrediction:
    """Predict the loss exponent ``(a − 1)/b`` from per-mode losses and rates.

    Modes are sorted by decreasing rate ``ζ``; ``a`` and ``b`` are the OLS
    slopes of ``−ln ℓ_k`` and ``−ln ζ_k`` on ``ln k`` over ``k_range``.

    Parameters
    ----------
    ell : array_like, shape (K,)
        Loss removed by each mode, ``ℓ_k > 0`` on the fitted range.
    zeta : array_like, shape (K,)
        Rates ``ζ_k > 0``.
    k_range : (k_min, k_max), optional
        1-based inclusive ranks fitted; default all modes.  Exclude the first
        few modes when the spectra only become power laws asymptotically.

    Returns
    -------
    ExponentPrediction
    """
    ell, zeta = _check_spectra(ell, zeta)
    K = ell.size
    order = np.argsort(-zeta, kind="stable")
    ell_s, zeta_s = ell[order], zeta[order]
    k0, k1 = (1, K) if k_range is None else (int(k_range[0]), int(k_range[1]))
    if not (1 <= k0 < k1 <= K) or k1 - k0 < 2:
        raise InvalidParameterError(f"`k_range` must satisfy 1 ≤ k_min, k_min + 2 ≤ k_max ≤ K = {K}; found {k_range!r}")
    k = np.arange(k0, k1 + 1, dtype=np.float64)
    le, ze = ell_s[k0 - 1 : k1], zeta_s[k0 - 1 : k1]
    if np.any(le <= 0):
        raise InvalidParameterError("`ell` must be positive on `k_range` to fit ℓ_k ~ k^(−a); found zeros")
    sa, sea = _loglog_slope(k, le)
    sb, seb = _loglog_slope(k, ze)
    a, b = -sa, -sb
    if b <= 0:
        raise InvalidParameterError(
            f"rates do not decay with rank (fitted b = {b:.3g} ≤ 0): no power law from merged modes"
        )
    if a <= 1:
        warnings.warn(
            f"fitted a = {a:.3g} ≤ 1: Σ ℓ_k diverges and (a − 1)/b ≤ 0 is not a decay exponent",
            RuntimeWarning,
            stacklevel=2,
        )
    return ExponentPrediction(
        a=float(a),
        b=float(b),
        exponent=float((a - 1) / b),
        a_stderr=float(sea),
        b_stderr=float(seb),
        k_range=(k0, k1),
        order=order,
    )


def _q(zeta, eps, z0_convention, z_star):
    eps = eps_value(eps)
    if z0_convention == "relative":
        return np.full(zeta.shape, math.log1p(-eps) - math.log(eps)), np.ones(zeta.shape, bool)
    if z0_convention == "absolute":
        if z_star is None:
            raise InvalidParameterError(
                "`z_star` (the fixed points z*_k, shape (K,)) is required with z0_convention='absolute' (z_k(0) = ε)"
            )
        zs = _as_1d("z_star", z_star)
        if zs.shape != zeta.shape:
            raise ShapeError(f"`z_star` must have shape ({zeta.size},); found {zs.shape}")
        if np.any(zs <= 0):
            raise InvalidParameterError(f"`z_star` must be positive; found min {zs.min():.3g}")
        q = zs / eps - 1.0
        pos = q > 0
        logq = np.where(pos, np.log(np.where(pos, q, 1.0)), 0.0)
        return np.where(pos, logq, q), pos  # log q where q > 0, else q itself
    raise InvalidParameterError(
        f"`z0_convention` must be 'relative' (z_k(0) = ε z*_k) or 'absolute' (z_k(0) = ε); found {z0_convention!r}"
    )


def predicted_switch_times(zeta, eps: float, z0_convention: str = "relative", z_star=None) -> np.ndarray:
    """Exact half-saturation times ``t*_k = ln(z*_k/z_k(0) − 1)/ζ_k`` of logistic modes.

    The initial-scale conventions of this module on top of
    :func:`nqf.reductions.logistic_switch_time`.

    Parameters
    ----------
    zeta : array_like, shape (K,)
    eps : float
    z0_convention : {"relative", "absolute"}
        ``z_k(0) = ε z*_k`` or ``z_k(0) = ε`` (see the module docstring).
    z_star : array_like, shape (K,), optional
        Needed for ``"absolute"``.

    Returns
    -------
    ndarray, shape (K,)
        ``0`` for modes that start at or above half-saturation.
    """
    zeta = _as_1d("zeta", zeta)
    if np.any(zeta <= 0):
        raise InvalidParameterError(f"`zeta` must be positive; found min {zeta.min():.3g}")
    _q(zeta, eps, z0_convention, z_star)  # validates eps, the convention and z_star
    if z0_convention == "relative":  # z_k(0) = ε z*_k: ln(z*/z(0)) = ln(1/ε)
        return logistic_switch_time(zeta, log_ratio=np.full(zeta.shape, -math.log(eps)))
    return logistic_switch_time(zeta, _as_1d("z_star", z_star), np.full(zeta.shape, float(eps)))


def predicted_curve(
    t, ell, zeta, eps: float, z0_convention: str = "relative", z_star=None, L_inf: float = 0.0, chunk: int = 2_000_000
) -> np.ndarray:
    r"""Exact loss of a sum of independent logistic modes (see the module docstring).

    ``L(t) = L_∞ + Σ_k ℓ_k (q_k e^{−ζ_k t} / (1 + q_k e^{−ζ_k t}))²`` computed
    stably for any ``ε``: each term is ``exp(ln ℓ_k + 2 log expit(ln q_k − ζ_k t))``, so
    the exponential tail keeps full relative precision down to the smallest float64.

    Parameters
    ----------
    t : array_like, shape (T,)
        Non-negative times ``t = η · steps``.
    ell : array_like, shape (K,)
        Loss removed by each mode, ``ℓ_k = ½ C_kk z*_k²``.
    zeta : array_like, shape (K,)
        Rates ``ζ_k = 4β_k > 0``.
    eps : float
        Initial scale, in ``(0, 1)`` in either convention.
    z0_convention : {"relative", "absolute"}
        ``z_k(0) = ε z*_k`` or ``z_k(0) = ε``.
    z_star : array_like, shape (K,), optional
        Fixed points ``z*_k = β_k/C_kk`` (needed for ``"absolute"``).
    L_inf : float
        Loss left after all modes are learned.
    chunk : int
        Work in blocks of about this many ``(t, k)`` pairs (memory bound).

    Returns
    -------
    ndarray, shape (T,)
    """
    ell, zeta = _check_spectra(ell, zeta)
    t = _as_1d("t", t)
    if not np.all(np.isfinite(t)) or (t.size and t.min() < 0):
        raise InvalidParameterError("`t` must be finite and non-negative")
    lq, pos = _q(zeta, eps, z0_convention, z_star)
    out = np.full(t.shape, float(L_inf))
    step = max(1, int(chunk) // max(ell.size, 1))
    with np.errstate(divide="ignore"):
        log_ell = np.log(ell)
    for s in range(0, t.size, step):
        tt = t[s : s + step, None]
        # positive q: 1 − u = expit(ln q − ζt), and ℓ (1 − u)² = exp(ln ℓ + 2 log_expit(·)) keeps full
        # relative precision in the exponential tail (no 1 + tanh cancellation, no underflow of 1 − u before
        # the product does); q ≤ 0 (start above z*): direct formula, |q| < 1
        arg = lq[None, :] - zeta[None, :] * tt
        term_pos = np.exp(log_ell[None, :] + 2.0 * log_expit(arg))
        qe = lq[None, :] * np.exp(-zeta[None, :] * tt)
        term_neg = ell[None, :] * (qe / (1.0 + qe)) ** 2
        out[s : s + step] += np.where(pos[None, :], term_pos, term_neg).sum(1)
    return out
