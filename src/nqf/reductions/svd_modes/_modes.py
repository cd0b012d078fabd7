r"""The two-layer-linear regime: mode reduction by the SVD of the input–output correlation.

Setting (docs/theory.md §4.5, conventions of :func:`nqf.structure.mlp`)
-------------------------------------------------------------------------
A two-layer MLP ``f_c(x) = Σ_i a_{ic} σ(u_iᵀx)`` with ``σ(0) = 0`` has units
``w_i = (a_i ∈ R^C, u_i ∈ R^D)`` (``p = C + D``, readout first) and structure
matrices ``A_c(x) = σ₁/2 [[0, e_c xᵀ], [x e_cᵀ, 0]]`` with ``σ₁ = σ'(0)``, so the
NQF output is

.. math:: f(x) = σ₁ M_{au} x,\qquad M_{au} = Σ_i a_i u_iᵀ \in R^{C×D}

(the ``a``–``u`` block of ``M = W Wᵀ``): the NQF of an MLP *is* a two-layer
linear network ``P x`` with ``P = σ₁ M_{au}``.  Loss ``L = (1/N) Σ_n ½‖f(x_n) − y_n‖²``,
GD ``W ← W − η∇_W L``, time ``t = η · steps``.

Derivation
----------
With ``Σ_xx = (1/N) Σ x xᵀ`` and ``Σ_yx = (1/N) Σ y xᵀ`` (C × D),

.. math:: G = \frac1N 𝒜^*(r) = \frac12\begin{pmatrix}0 & K\\ Kᵀ & 0\end{pmatrix},
          \qquad K = σ₁ (P Σ_{xx} − Σ_{yx}),

and ``dM/dt = −2(GM + MG)``.  For **whitened inputs** (``Σ_xx = I``) take the
SVD ``Σ_yx = Σ_k λ_k u_k v_kᵀ`` and the unit vectors
``e_k^± = (u_k, ± s v_k)/√2`` (``s = sign σ₁``).  If ``P = Σ_k p_k u_k v_kᵀ`` then
``G = Σ_k g_k (e_k^+ e_k^{+ᵀ} − e_k^- e_k^{-ᵀ})`` with ``g_k = ½|σ₁|(p_k − λ_k)``:
``G`` is diagonal in the ``e^±`` basis, so a start ``M(0)`` diagonal in that
basis stays diagonal, with ``M = Σ_k z_k^+ e_k^+e_k^{+ᵀ} + z_k^- e_k^-e_k^{-ᵀ} + …`` and

.. math:: \dot z_k^± = ∓ 4 g_k z_k^±,\qquad p_k = \frac{|σ₁|}{2}(z_k^+ − z_k^-).

This is a Lotka–Volterra pair per singular value with ``β^± = ±|σ₁|λ_k/2``,
``C = (σ₁²/4)[[1, −1], [−1, 1]]``; ``z_k^+ z_k^-`` is conserved.  The mode
strength ``p_k`` (the product of the ``a``- and ``u``-components) obeys

* **balanced start** ``M(0) = ε Σ_k e_k^+ e_k^{+ᵀ}`` (``z^+ = ε``, ``z^- = 0``; a
  network ``W0 = √ε [e_1^+, …, e_K^+, 0, …]``): the exact logistic

  .. math:: \dot p_k = 2|σ₁| p_k (λ_k − p_k),\quad p_k(0) = p_0 = |σ₁|ε/2,\quad
            p_k(t) = \frac{λ_k}{1 + (λ_k/p_0 − 1) e^{−ζ_k t}},\quad ζ_k = 2|σ₁|λ_k = 4β_k^+;

  half-saturation (``p_k = λ_k/2``) at ``t_k = ln(2λ_k/(|σ₁|ε) − 1)/ζ_k``.
* **isotropic start** ``M(0) = εI`` (``z^± = ε``, a network ``W0 = √ε [I_p, 0]``):
  with ``w = z^+/ε`` (``z^- = ε/w``, ``p = |σ₁|ε(w − 1/w)/2``) the flow is the
  Riccati equation ``ẇ = −|σ₁|²ε (w − w_+)(w − w_-)``,
  ``w_± = λ/a ± √(λ²/a² + 1)``, ``a = |σ₁|ε``, solved exactly by

  .. math:: \frac{w_+ − w}{w − w_-} = R_0 e^{−κ t},\quad R_0 = \frac{w_+ − 1}{1 − w_-},
            \quad κ = 2|σ₁|\sqrt{λ² + a²},

  half-saturation at ``t_k = ln(R_0/R_h)/κ`` with ``w_h = λ/(2a) + √(λ²/(4a²) + 1)``,
  ``R_h = (w_+ − w_h)/(w_h − w_-)``; to leading order again ``ln(2λ_k/(|σ₁|ε))/ζ_k``.

Both give, to leading order, ``t_k ≈ ln(1/ε)/ζ_k``.  With whitened inputs the
loss is exactly

.. math:: L = ½ E‖y‖² − Σ_k λ_k p_k + ½ Σ_k p_k² = L_∞ + ½ Σ_k (λ_k − p_k)²,
          \qquad L_∞ = ½ (E‖y‖² − Σ_k λ_k²),

so the plateau after modes ``1..k`` (sorted by ``λ``) are learned sits at
``L_k = ½ (E‖y‖² − Σ_{j≤k} λ_j²)`` (up to ``O(ε)``).  Discrete GD is exact in
the same basis: ``z^± ← (1 ∓ 2η g_k)² z^±`` (:meth:`TwoLayerModes.gd`).

Inputs that are not whitened break the diagonalisation (``G`` then involves
``P Σ_xx``); :func:`two_layer_modes` measures ``‖Σ_xx − I‖_F / ‖I‖_F`` and
raises :class:`NotWhitenedError` above ``whiten_tol`` (or warns, on request).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..._validation import as_tensor, eps_value, one_of, positive_float, steps_value
from ...errors import InvalidParameterError, NormalFormError, ShapeError
from ...results import Result
from ...structure import get_activation
from .._staircase import Staircase
from .._timing import leading_switch_time, logistic_switch_time
from ._whitening import NotWhitenedError, NotWhitenedWarning, whitening_error

__all__ = ["TwoLayerModes", "two_layer_modes"]


_INITS = ("balanced", "isotropic")


@dataclass(frozen=True, repr=False)
class TwoLayerModes(Result):
    r"""SVD-mode prediction for a two-layer MLP / linear network with whitened inputs.

    All tensors float64 (``K = min(C, D)`` modes, sorted by decreasing ``λ``).
    Loss ``L = (1/N) Σ ½‖f − y‖²``; time ``t = η · steps``.

    Attributes
    ----------
    singular_values : torch.Tensor, shape (K,)
        ``λ_k`` of ``Σ_yx = (1/N) Σ y xᵀ``.
    left : torch.Tensor, shape (C, K)
        Output singular vectors ``u_k``.
    right : torch.Tensor, shape (D, K)
        Input singular vectors ``v_k``.
    sigma1 : float
        ``σ'(0)``.
    eps : float
        Initial scale (see ``init``).
    init : str
        ``"balanced"``: ``M(0) = ε Σ_k e_k^+ e_k^{+ᵀ}``, ``p_k(0) = |σ₁|ε/2``;
        ``"isotropic"``: ``M(0) = ε I``, ``p_k(0) = 0``.
    rates : torch.Tensor, shape (K,)
        ``ζ_k = 2|σ₁|λ_k`` (the Lotka–Volterra growth rate ``4β_k``).
    switch_times : torch.Tensor, shape (K,)
        Exact half-saturation times (``p_k = λ_k/2``) of the gradient flow; ``inf`` for ``λ_k = 0``.
    switch_times_leading : torch.Tensor, shape (K,)
        Leading order ``ln(1/ε)/ζ_k``.
    plateau_losses : torch.Tensor, shape (K + 1,)
        ``L_k = ½(E‖y‖² − Σ_{j≤k} λ_j²)`` for ``k = 0..K``.
    loss_inf : float
        ``L_∞ = L_K``.
    y_sq_mean : float
        ``E‖y‖² = (1/N) Σ_n ‖y_n‖²``.
    whitening_error : float
        ``‖Σ_xx − I‖_F/√D`` of the inputs used.
    """

    singular_values: torch.Tensor
    left: torch.Tensor
    right: torch.Tensor
    sigma1: float
    eps: float
    init: str
    rates: torch.Tensor
    switch_times: torch.Tensor
    switch_times_leading: torch.Tensor
    plateau_losses: torch.Tensor
    loss_inf: float
    y_sq_mean: float
    whitening_error: float

    # ---------------------------------------------------------------- helpers
    @property
    def n_modes(self) -> int:
        return int(self.singular_values.numel())

    @property
    def p(self) -> int:
        """Unit dimension ``C + D``."""
        return int(self.left.shape[0] + self.right.shape[0])

    def mode_vectors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Unit-space directions ``e_k^± = (u_k, ± sign(σ₁) v_k)/√2``.

        Returns
        -------
        e_plus, e_minus : torch.Tensor, shape (C + D, K)
        """
        s = 1.0 if self.sigma1 > 0 else -1.0
        r = self.right * s
        e_plus = torch.cat([self.left, r], 0) / math.sqrt(2.0)
        e_minus = torch.cat([self.left, -r], 0) / math.sqrt(2.0)
        return e_plus, e_minus

    def _times(self, t) -> np.ndarray:
        t = as_tensor("t", t, ndim=(0, 1)).reshape(-1).cpu().numpy().astype(np.float64)
        if t.size and t.min() < 0:
            raise InvalidParameterError(f"`t` must be non-negative; found min {t.min():.3g}")
        return t

    def _z(self, t) -> tuple[np.ndarray, np.ndarray]:
        """``z^+`` and ``z^-`` of every mode under gradient flow, shapes (T, K)."""
        t = self._times(t)[:, None]
        lam = self.singular_values.cpu().numpy()[None, :]
        s1, eps = abs(self.sigma1), self.eps
        if self.init == "balanced":
            p0 = s1 * eps / 2
            p = np.empty((t.shape[0], lam.shape[1]))
            big, small, zero = lam[0] > p0, (lam[0] > 0) & (lam[0] <= p0), lam[0] <= 0
            lb = lam[:, big]
            # p/λ = expit(ζ t − ln(λ/p0 − 1)): stable for every ε
            p[:, big] = lb * _expit(2 * s1 * lb * t - np.log(lb / p0 - 1.0))
            ls = lam[:, small]
            p[:, small] = ls / (1.0 + (ls / p0 - 1.0) * np.exp(-2 * s1 * ls * t))
            p[:, zero] = p0 / (1.0 + 2 * s1 * p0 * t) * np.ones((1, int(zero.sum())))
            return 2.0 * p / s1, np.zeros_like(p)
        a = s1 * eps
        w = np.ones((t.shape[0], lam.shape[1]))
        pos = lam[0] > 0
        w_plus, w_minus, kappa = _riccati(lam[:, pos], s1, a)
        R0 = (w_plus - 1.0) / (1.0 - w_minus)
        R = R0 * np.exp(-kappa * t)
        w[:, pos] = (w_plus + w_minus * R) / (1.0 + R)
        return eps * w, eps / w

    # -------------------------------------------------------------- dynamics
    def strength(self, t) -> torch.Tensor:
        """Mode strengths ``p_k(t) = u_kᵀ P(t) v_k`` of the function map ``P = σ₁ M_au``.

        Parameters
        ----------
        t : array_like, shape (T,)
            Times ``t = η · steps`` (gradient flow).

        Returns
        -------
        torch.Tensor, shape (T, K)
        """
        zp, zm = self._z(t)
        return torch.as_tensor(abs(self.sigma1) / 2 * (zp - zm), dtype=torch.float64)

    def loss(self, t) -> torch.Tensor:
        """Predicted gradient-flow loss ``L(t) = L_∞ + ½ Σ_k (λ_k − p_k(t))²``.

        Parameters
        ----------
        t : array_like, shape (T,)

        Returns
        -------
        torch.Tensor, shape (T,)
        """
        p = self.strength(t)
        return self.loss_inf + 0.5 * ((self.singular_values[None, :] - p) ** 2).sum(1)

    def order_parameter(self, t) -> torch.Tensor:
        """Predicted ``M(t)`` (unit layout ``(a, u)``).

        ``M = Σ_k z_k^+ e_k^+e_k^{+ᵀ} + z_k^- e_k^-e_k^{-ᵀ}`` plus ``ε`` times the
        projector on the complement (isotropic start only).

        Parameters
        ----------
        t : array_like, shape (T,)

        Returns
        -------
        torch.Tensor, shape (T, p, p)
        """
        zp, zm = self._z(t)
        ep, em = self.mode_vectors()
        zp, zm = torch.as_tensor(zp), torch.as_tensor(zm)
        M = torch.einsum("ik,tk,jk->tij", ep, zp, ep) + torch.einsum("ik,tk,jk->tij", em, zm, em)
        if self.init == "isotropic":
            E = torch.cat([ep, em], 1)
            P = torch.eye(self.p, dtype=torch.float64) - E @ E.T
            M = M + self.eps * P[None]
        return M

    def initial_weights(self, width: int) -> torch.Tensor:
        """Unit weights ``W0`` (p × m) realising the stated start exactly.

        ``"balanced"``: ``W0 = √ε [e_1^+, …, e_K^+, 0, …]`` (needs ``m ≥ K``);
        ``"isotropic"``: ``W0 = √ε [I_p, 0]`` (needs ``m ≥ p``).  Zero units stay
        zero (zero-gradient condition).  ``W0 W0ᵀ = M(0)``.

        Parameters
        ----------
        width : int
            ``m``.

        Returns
        -------
        torch.Tensor, shape (p, width)
        """
        need = self.n_modes if self.init == "balanced" else self.p
        if int(width) != width or width < need:
            raise InvalidParameterError(f"`width` must be an integer ≥ {need} for init={self.init!r}; found {width!r}")
        W = torch.zeros(self.p, int(width), dtype=torch.float64)
        if self.init == "balanced":
            W[:, : self.n_modes] = math.sqrt(self.eps) * self.mode_vectors()[0]
        else:
            W[:, : self.p] = math.sqrt(self.eps) * torch.eye(self.p, dtype=torch.float64)
        return W

    def gd(self, eta: float, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Exact discrete gradient descent in the mode basis.

        ``g_k = ½|σ₁|(p_k − λ_k)``, ``z_k^± ← (1 ∓ 2η g_k)² z_k^±`` — identical to
        ``M ← (I − 2ηG) M (I − 2ηG)`` for the stated start (no flow approximation).

        Parameters
        ----------
        eta : float
            Learning rate ``η > 0``.
        steps : int

        Returns
        -------
        times : torch.Tensor, shape (steps + 1,)
            ``η · (0..steps)``.
        losses : torch.Tensor, shape (steps + 1,)
        strengths : torch.Tensor, shape (steps + 1, K)
        """
        eta, steps = positive_float("eta", eta), steps_value(steps)
        zp0, zm0 = self._z([0.0])
        zp, zm = torch.as_tensor(zp0[0]), torch.as_tensor(zm0[0])
        s1 = abs(self.sigma1)
        lam = self.singular_values
        hist = torch.empty(int(steps) + 1, self.n_modes, dtype=torch.float64)
        hist[0] = s1 / 2 * (zp - zm)
        for n in range(int(steps)):
            g = 0.5 * s1 * (hist[n] - lam)
            zp = (1 - 2 * eta * g) ** 2 * zp
            zm = (1 + 2 * eta * g) ** 2 * zm
            hist[n + 1] = s1 / 2 * (zp - zm)
        losses = self.loss_inf + 0.5 * ((lam[None, :] - hist) ** 2).sum(1)
        times = eta * torch.arange(int(steps) + 1, dtype=torch.float64)
        return times, losses, hist

    def staircase(self) -> Staircase:
        """The predicted staircase (:class:`nqf.reductions.Staircase`, method ``"svd-modes"``).

        Drop ``k``: mode ``k`` (decreasing ``λ_k``) at its exact half-saturation time
        (``switch_times``, rule ``"exact flow"``), from ``L_{k−1}`` to ``L_k``
        (``plateau_losses``); modes with ``λ_k = 0`` never switch on and are left out.
        Directions: ``e_k^+`` (:meth:`mode_vectors`).
        """
        t = self.switch_times.numpy()
        K = int(np.isfinite(t).sum())  # λ sorted decreasing: the finite times come first
        return Staircase(
            "svd-modes",
            self.eps,
            self.plateau_losses.numpy()[: K + 1],
            t[:K],
            ("exact flow",) * K,
            self.switch_times_leading.numpy()[:K],
            np.concatenate([self.rates.numpy()[:K], [0.0]]),
            np.arange(K + 1),
            self.mode_vectors()[0].numpy()[:, :K],
            np.arange(K),
            True,
            (f"two-layer network on whitened inputs: SVD modes of Σ_yx ({self.init} start)",),
        )

    def summary(self) -> str:
        lines = [
            f"two-layer SVD modes (σ'(0) = {self.sigma1:.4g}, ε = {self.eps:.3g}, init = {self.init}; "
            f"L = (1/N)Σ½‖f−y‖², t = η·steps)",
            "  k    λ_k        ζ_k        t_k (exact)   ln(1/ε)/ζ_k   plateau after",
        ]
        for k in range(self.n_modes):
            lines.append(
                f"  {k + 1:<3d}  {float(self.singular_values[k]):<9.4g}  {float(self.rates[k]):<9.4g}  "
                f"{float(self.switch_times[k]):<12.5g}  {float(self.switch_times_leading[k]):<12.5g}  "
                f"{float(self.plateau_losses[k + 1]):.5g}"
            )
        return "\n".join(lines)


def _expit(x):
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def two_layer_modes(
    X,
    Y,
    activation="tanh",
    *,
    sigma1: float | None = None,
    eps: float,
    init: str = "balanced",
    whiten_tol: float = 1e-6,
    on_not_whitened: str = "raise",
) -> TwoLayerModes:
    r"""Predict the staircase of a two-layer MLP / linear network from the SVD of ``Σ_yx``.

    See the module docstring for the derivation.  Conventions: units
    ``w_i = (a_i ∈ R^C, u_i ∈ R^D)``; ``L = (1/N) Σ_n ½‖f(x_n) − y_n‖²``; GD
    ``W ← W − η∇L``; ``t = η·steps``; initial scale ``ε`` as ``M(0) = εI``
    (``init="isotropic"``, weights ``√ε I``) or ``M(0) = ε Σ_k e_k^+e_k^{+ᵀ}``
    (``init="balanced"``, weights ``√ε e_k^+``).  A weight scale ``σ_w`` gives
    ``ε = σ_w²``.

    Parameters
    ----------
    X : array_like, shape (N, D)
        Inputs; must be whitened, ``(1/N) Σ x xᵀ = I`` (see :func:`whiten`).
    Y : array_like, shape (N,) or (N, C)
        Targets.
    activation : str or callable
        Hidden activation; only ``σ'(0)`` enters (``"linear"`` for a linear network).
        Must satisfy ``σ(0) = 0`` and ``σ'(0) ≠ 0``.
    sigma1 : float, optional
        ``σ'(0)`` directly (overrides ``activation``).
    eps : float
        Initial scale ``ε`` in ``(0, 1)``.
    init : {"balanced", "isotropic"}
    whiten_tol : float
        Largest accepted ``‖Σ_xx − I‖_F/√D``.
    on_not_whitened : {"raise", "warn"}
        ``"raise"`` a :class:`NotWhitenedError`, or emit a
        :class:`NotWhitenedWarning` and return the (then approximate) prediction.

    Returns
    -------
    TwoLayerModes
    """
    X = as_tensor("X", X, ndim=2, dtype=torch.float64).cpu()
    Y = as_tensor("Y", Y, ndim=(1, 2), dtype=torch.float64).cpu()
    if Y.ndim == 1:
        Y = Y[:, None]
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ShapeError(f"`X` must have shape (N, D) with N, D ≥ 1; found {tuple(X.shape)}")
    if Y.shape[0] != X.shape[0]:
        raise ShapeError(f"`Y` must have N = {X.shape[0]} rows like `X`; found {tuple(Y.shape)}")
    one_of("init", init, _INITS)
    one_of("on_not_whitened", on_not_whitened, ("raise", "warn"))
    eps = eps_value(eps)
    if sigma1 is None:
        act = get_activation(activation)
        if not act.zgz:
            raise NormalFormError(
                f"`activation` {act.name!r} has σ(0) = {act.s0:g} ≠ 0: the zero-gradient condition fails and "
                f"the NQF is not a two-layer linear network (use a centred activation)"
            )
        sigma1 = act.s1
    sigma1 = float(sigma1)
    if not math.isfinite(sigma1) or sigma1 == 0.0:
        raise NormalFormError(f"`sigma1` = σ'(0) must be finite and non-zero; found {sigma1!r}")
    N, D = X.shape
    werr = whitening_error(X)
    if not werr <= whiten_tol:
        msg = (
            f"`X` is not whitened: ‖(1/N)XᵀX − I‖_F/√D = {werr:.3e} > whiten_tol = {whiten_tol:.1e}; "
            f"the SVD modes of Σ_yx are exact only for whitened inputs (use nqf.reductions.svd_modes.whiten(X))"
        )
        if on_not_whitened == "raise":
            raise NotWhitenedError(msg)
        warnings.warn(msg, NotWhitenedWarning, stacklevel=2)
    Syx = Y.T @ X / N
    U, S, Vh = torch.linalg.svd(Syx, full_matrices=False)
    # fix the sign of each singular pair (largest |entry| of u_k positive) for reproducibility
    idx = U.abs().argmax(0)
    sgn = torch.sign(U[idx, torch.arange(U.shape[1])])
    sgn[sgn == 0] = 1.0
    U, V = U * sgn, Vh.T * sgn
    s1 = abs(sigma1)
    rates = 2 * s1 * S
    y2 = float((Y**2).sum(1).mean())
    cum = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(S**2, 0)])
    plateaus = 0.5 * (y2 - cum)
    lead = torch.as_tensor(leading_switch_time(rates.numpy(), eps), dtype=torch.float64)
    modes = TwoLayerModes(
        S, U, V, sigma1, float(eps), init, rates, torch.empty(0), lead, plateaus, float(plateaus[-1]), y2, werr
    )
    return dataclasses.replace(modes, switch_times=_half_times(modes))


def _riccati(lam: np.ndarray, s1: float, a: float):
    """Roots ``w_± = λ/a ± √(λ²/a² + 1)`` and rate ``κ = 2|σ₁|√(λ² + a²)`` (λ > 0), overflow-free."""
    r = a / lam
    w_plus = (1.0 + np.sqrt(1.0 + r * r)) / r
    return w_plus, -1.0 / w_plus, 2 * s1 * lam * np.sqrt(1.0 + r * r)


def _half_times(m: TwoLayerModes) -> torch.Tensor:
    lam = m.singular_values.numpy()
    s1, eps = abs(m.sigma1), m.eps
    out = np.full(lam.shape, np.inf)
    pos = lam > 0
    if m.init == "balanced":
        # each mode a logistic p' = 2|σ₁|λ p (1 − p/λ) from p(0) = |σ₁|ε/2 (0 if it starts at or above λ/2)
        out[pos] = logistic_switch_time(2 * s1 * lam[pos], lam[pos], s1 * eps / 2)
    else:
        a = s1 * eps
        w_plus, w_minus, kappa = _riccati(lam[pos], s1, a)
        r = a / lam[pos]
        w_h = 0.5 / r * (1.0 + np.sqrt(1.0 + 4 * r * r))  # root of w² − w/r − 1, p = λ/2
        R0 = (w_plus - 1.0) / (1.0 - w_minus)
        Rh = (w_plus - w_h) / (w_h - w_minus)
        out[pos] = (np.log(R0) - np.log(Rh)) / kappa
    return torch.as_tensor(out, dtype=torch.float64)
