"""The mode sums of the ``power-law`` experiment (:mod:`nqf.app._experiments._power_law`), written out with numpy and
``scipy.special.expit`` independently of the library: the Fourier-feature task, the exact and isotropic mode
sums, and the OLS exponent of a curve over a window; and the experiment's parameters."""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field, model_validator
from scipy.special import expit

from ...errors import InvalidParameterError
from ._base import Params


def fourier_task(n_modes: int, gamma: float):
    """Whitened Fourier features and the diagonal power-law teacher.

    Returns
    -------
    X : torch.Tensor, shape (N, K), ``N = 2K + 2``, ``XᵀX/N = I``
    Y : torch.Tensor, shape (N, K), ``Y = X diag(c)``
    c : numpy.ndarray, shape (K,)
    """
    K = n_modes
    N = 2 * K + 2
    theta = 2 * math.pi * torch.arange(N, dtype=torch.float64) / N
    k = torch.arange(1, K + 1, dtype=torch.float64)
    X = math.sqrt(2.0) * torch.cos(theta[:, None] * k[None, :])
    c = k ** (-gamma)
    return X, X * c[None, :], c.numpy()


def exact_mode_sum(t, ell, zeta, log_ratio) -> np.ndarray:
    """``Σ_k ℓ_k (1 − expit(ζ_k t − r_k))²`` with ``r_k = ln(z*_k/z_k(0) − 1)`` (logistic modes).

    Written out with numpy and ``scipy.special.expit`` only (the independent reference).

    Parameters
    ----------
    t : array_like, shape (T,)
    ell, zeta, log_ratio : array_like, shape (K,)

    Returns
    -------
    numpy.ndarray, shape (T,)
    """
    t = np.asarray(t, float)[:, None]
    out = np.zeros(t.shape[0])
    for s in range(0, len(ell), 2048):  # chunks of modes keep the (T, chunk) array small
        sl = slice(s, s + 2048)
        out += ((1.0 - expit(zeta[sl] * t - log_ratio[sl])) ** 2 * ell[sl]).sum(1)
    return out


def isotropic_mode_sum(t, lam, eps) -> np.ndarray:
    r"""Exact loss above ``L∞`` of two-layer modes from the isotropic start ``M(0) = εI`` (σ'(0) = 1).

    Each mode has ``z^±(0) = ε``, ``dz^±/dt = ±2(λ − p) z^±``, ``p = (z^+ − z^−)/2``; since
    ``z^+ z^− = ε²`` is conserved, ``u = z^+`` obeys the Riccati equation ``du/dt = ε² + 2λu − u²``
    with roots ``u_± = λ ± √(λ² + ε²)``: ``u = u_+ s + u_−(1 − s)``,
    ``s = expit(κt − ln(−R))``, ``κ = 2√(λ² + ε²)``, ``R = (ε − u_+)/(ε − u_−)``.  Written out
    here with numpy/``scipy.special.expit`` (independent of :mod:`nqf.reductions.svd_modes`).

    Parameters
    ----------
    t : array_like, shape (T,)
    lam : array_like, shape (K,)
        Singular values ``λ_k > 0``.
    eps : float

    Returns
    -------
    numpy.ndarray, shape (T,): ``½ Σ_k (λ_k − p_k(t))²``
    """
    lam = np.asarray(lam, float)
    root = np.sqrt(lam**2 + eps**2)
    up, um = lam + root, lam - root  # u_− = −ε²/u_+ < 0 (computed without cancellation below)
    um = -(eps**2) / up
    log_mR = np.log(up - eps) - np.log(eps - um)
    s = expit(2 * root * np.asarray(t, float)[:, None] - log_mR)
    u = up * s + um * (1 - s)
    p = 0.5 * (u - eps**2 / u)
    return 0.5 * ((lam - p) ** 2).sum(1)


def ols_exponent(t, L, window) -> float:
    """``−slope`` of the least-squares line of ``ln L`` on ``ln t`` over ``window`` (numpy only)."""
    t, L = np.asarray(t, float), np.asarray(L, float)
    sel = (t >= window[0]) & (t <= window[1]) & (L > 0)
    return float(-np.polyfit(np.log(t[sel]), np.log(L[sel]), 1)[0])


class PowerLawParams(Params):
    gamma: float = Field(1.0, gt=0.5, le=3.0, description="spectra β_k, c_k = k^(−γ): a = 2γ, b = γ")
    asymptotic_modes: int = Field(4000, ge=1000, le=100_000, description="K of the LV system (≥ 10³)")
    asymptotic_eps: float = Field(1e-300, gt=0, lt=1e-20, description="ε of the asymptotic configuration")
    first_mode: int = Field(10, ge=2, description="fit windows start at the switch-on of this mode")
    headline_tolerance: float = Field(0.05, gt=0, lt=1, description="relative |headline − reference| allowed")
    grid_modes: list[int] = Field([400, 1000, 4000, 16000], min_length=1, description="K of the deviation grid")
    grid_eps: list[float] = Field([1e-6, 1e-20, 1e-80, 1e-300], min_length=1, description="ε of the grid")
    n_modes: int = Field(16, ge=4, le=256, description="K Fourier features = outputs of the network part")
    eps: float = Field(1e-6, gt=0, lt=1, description="ε of the network part")
    step_fraction: float = Field(0.1, gt=0, le=0.25, description="η · ζ_max per GD step")
    fit_to_fraction: float = Field(0.5, gt=0, le=1, description="network window ends at mode ⌈fraction · K⌉")
    real_network: bool = Field(True, description="also train the real tanh MLP")
    width_factor: int = Field(2, ge=1, description="real network width = factor × 2K")
    save_points: int = Field(800, ge=50)
    n_boot: int = Field(200, ge=0)

    @model_validator(mode="after")
    def _windows(self):
        k_hi = self.asymptotic_modes // 30
        if self.first_mode + 3 > k_hi:
            raise InvalidParameterError(
                f"asymptotic fit window empty: `first_mode` = {self.first_mode} must be ≤ "
                f"`asymptotic_modes`/30 − 3 = {k_hi - 3}"
            )
        if 3 >= math.ceil(self.fit_to_fraction * self.n_modes):
            raise InvalidParameterError(
                f"network fit window empty: ⌈`fit_to_fraction` · `n_modes`⌉ = "
                f"{math.ceil(self.fit_to_fraction * self.n_modes)} must exceed 3"
            )
        if any(k // 30 < self.first_mode + 3 for k in self.grid_modes):
            raise InvalidParameterError(
                f"every `grid_modes` entry must be ≥ 30 · (`first_mode` + 3) = "
                f"{30 * (self.first_mode + 3)}; found {self.grid_modes}"
            )
        if any(not 0 < e < 1 for e in self.grid_eps):
            raise InvalidParameterError(f"every `grid_eps` entry must lie in (0, 1); found {self.grid_eps}")
        return self
