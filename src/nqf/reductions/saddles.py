r"""Greedy low-rank saddle sequence of the NQF loss: staircases for any architecture and data.

The NQF with mean-squared error is matrix sensing with a PSD factorisation
(docs/theory.md §2, §4.6).  With ``M = W Wᵀ`` and the loss convention
``L = (1/N) Σ_n ½ ‖f_n − y_n‖²`` (sum over the ``C`` outputs),

.. math::

    L(M) = \frac{1}{2N} ‖𝒜(M) + f_0 − y‖^2,\qquad
    G(M) = \frac1N 𝒜^*(r),\ r = f_0 + 𝒜(M) − y,\qquad
    \dot M = −2 (G M + M G),

with training time ``t = η · steps`` (gradient flow).  ``L`` is convex in ``M``
but the flow moves on the PSD cone through the factor ``W``; from a small
start it learns one rank at a time (greedy low-rank learning, Li, Luo & Lyu
2021).  :func:`saddle_sequence` computes that staircase:

1. start at ``M_0 = 0``;
2. at a stationary point ``M_k`` (``G(M_k) M_k = 0``) take the escape
   direction ``q`` (for generic, non-commuting data the top eigenvector of
   ``−P G(M_k) P``, ``P`` the projector on the complement of ``range(M_k)``),
   put ``M_k + z* q qᵀ`` (``z*`` the best step along the ray) and descend, with
   the factor ``V ∈ R^{p×(r+1)}``, ``M = V Vᵀ``, to the next stationary point
   ``M_{k+1}`` (trust-region Newton–CG on the factored loss, polished to a
   gradient norm ≈ 1e-12 in float64);
3. stop when ``λ_max(−G(M_k)) ≤ tol``: then ``G ⪰ 0`` and ``G M = 0`` are the
   KKT conditions of the convex problem ``min_{M ⪰ 0} L(M)``, so ``M_k`` is its
   **global** minimiser (reported as ``global_minimum``).

Escape rate and projection
--------------------------
Near ``M_k`` a small perturbation ``W_⊥`` in the complement of ``range(M_k)``
evolves as ``Ẇ_⊥ = −2 P G(M_k) P W_⊥``, so its order parameter grows as
``exp(4 λ t)`` with ``λ`` an eigenvalue of ``−P G P``: the escape rate is
``4 λ_max(−P G(M_k) P)``.  Directions inside ``range(M_k)`` are already at
equilibrium (``G M_k = 0``, the factored gradient ``2 G V`` vanishes), so they
carry no growth; at an exact stationary point ``G`` maps ``range(M_k)`` to 0,
so ``−P G P`` and ``−G`` share their non-zero spectrum and projecting only
removes the zero eigenvalues of the equilibrated block (and round-off).

Escape times: the ε → 0 rule (log-magnitude bookkeeping)
--------------------------------------------------------
**Initial-scale convention**: ``M(0) = ε I`` (e.g. ``W(0) = √ε I_p``, or any
``W(0)`` with ``W Wᵀ = ε I``).  Write ``t = τ ln(1/ε)``.  Every small
direction has a log-magnitude exponent ``e`` (``size ≈ ε^e``; all start at
``e = 1``); during the plateau at ``M_k`` a small direction with rate ``h``
(eigenvalue of ``−P G(M_k) P``) moves as ``de/dτ = −4 h``, and it escapes
(the next drop) when ``e`` reaches 0.  Plateaus last ``Δτ = O(1)`` while jumps
take ``O(1)`` time, i.e. ``O(1/ln(1/ε))`` in ``τ``.

* First escape (exact to leading order): ``t*_1 = ln(1/ε) / (4 λ_1)`` with
  ``λ_1 = λ_max(𝒜^*(y − f_0)/N)``.  The ``O(1)`` offset is computed exactly:
  the flow from ``εI`` follows, up to ``O(ε^{1 − λ_2/λ_1})`` corrections, the
  escape trajectory ``Φ(s)`` (rank-one flow from ``0`` along the top
  eigenvector ``q``, normalised so that ``qᵀΦ(s)q ≈ e^{4λ_1 s}`` as
  ``s → −∞``) shifted by ``ln(1/ε)/(4 λ_1)``.  Hence the time at which the
  loss falls a fraction ``level`` of the way from ``L_0`` to ``L_1`` is
  ``ln(1/ε)/(4λ_1) + s_level`` (:attr:`SaddleSequence.first_offset`).
* Commuting data (all ``A_c(x_n)`` commute; ``rule="commuting"``): in the
  shared eigenbasis each mode keeps its identity, exponent ``e_i`` moves with
  slope ``−4 (−G(M_k))_{ii}``; the next mode to join is the first to reach
  ``e = 0`` (not necessarily the fastest one!), a mode whose restricted
  optimum is 0 leaves with ``e = 0``.  This is exactly the Lotka–Volterra
  ε → 0 active-set limit of docs/theory.md §4.3.
* Non-commuting data in general position (``rule="generic"``): each jump
  rotates the small directions by an ``O(1)`` invertible map, after which the
  flag of small directions has ``O(1)`` overlaps with every eigenvector of the
  next ``−P G P``.  By the exterior-power argument (the product of the ``j``
  largest magnitudes is the top eigenvalue of ``Λ^j M_⊥``, which grows at rate
  ``4 (h_1 + … + h_j)``) the *sorted* exponents ``e_(1) ≤ e_(2) ≤ …`` move with
  the *sorted* rates ``h_1 ≥ h_2 ≥ …``; the largest small component escapes
  along the top eigenvector, after ``Δτ = e_(1) / (4 h_1)``.  This is greedy
  low-rank learning with its clock.

Validation (tests/test_saddles.py, order-parameter flow from ``εI``): the
first drop with its offset agrees with simulation to 8e-9 relative at
ε = 1e-12 (tanh MLP, C = 3, non-whitened inputs); the bare leading order is
2.4 % early there, an error that times ``ln(1/ε)`` stays at 0.62–0.66 for
ε = 1e-4 … 1e-24.  For later drops the offsets ``t_meas − τ_k ln(1/ε)`` tend
to constants (0.152 and 0.108 for that MLP; −3.3 and ≈ 40 for a QK-only
attention example whose slowest rate is 0.097), i.e. the slopes
``dt_k/d ln(1/ε)`` converge to ``τ_k`` (6.83, 6.49, 6.42 → 6.408).  On
commuting data the sequence equals the Lotka–Volterra limit to round-off.

Only the leading order ``τ_k ln(1/ε)`` is predicted for the later escapes
(``k ≥ 2``): their ``O(1)`` offsets depend on the overlaps produced by the
jumps, which no closed rule gives.  :mod:`nqf.reductions._saddle_clock` computes them
from the exact identity ``M(t) = ε U Uᵀ`` (``U̇ = −2 G U``) by carrying the
small part of ``U`` along the chain of heteroclinic orbits
(:meth:`SaddleSequence.corrected_escape_times`): against the exact flow of the
MLP example the drops 2 and 3 move from 0.15 and 0.11 off to within 0.006
(docs/analyze.md, "Escape times beyond leading order").  :meth:`escape_times`
keeps the leading order (cheap, and what the measured tables were made with).  When the data are neither commuting nor
in general position (e.g. commuting blocks inside a non-commuting problem,
or ties in the exponents) neither rule is guaranteed; ``rule="auto"`` uses
``"commuting"`` when a randomized commutation test passes and ``"generic"``
otherwise.  The descent reaches the stationary point the flow reaches
whenever the rank-``(k+1)`` factored problem has a single basin below the
saddle (true for reduced-rank regression, i.e. linear and tanh MLPs);
otherwise compare with a simulation.  A plateau is only visible when its
length ``Δτ_k ln(1/ε)`` exceeds the ``O(1)`` relaxation time into the saddle;
ill-conditioned inputs (slow directions of ``Σ_xx``) or overlapping CNN
patches can make that time so long that no plateau forms at any ε reachable
in float64, although the saddle itself is correct.

Numerics: each descent is a trust-region Newton–CG on ``V`` (Hessian-vector
products ``H[D] = 2 G D + 2 G'(D Vᵀ + V Dᵀ) V``, ``G'(Δ) = 𝒜^*(𝒜(Δ))/N``)
followed by Newton/MINRES polishing judged by the gradient norm, reaching
``‖∇_V L‖ ≈ 1e-12 · scale`` in float64; operators in another dtype or on
another device are copied to float64 on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.integrate import solve_ivp
from scipy.optimize import minimize
from scipy.sparse.linalg import LinearOperator, minres

from .._validation import as_tensor
from ..errors import InvalidParameterError, InvalidTypeError, NotClosedError
from ..structure.operator import StructureOperator

__all__ = ["Saddle", "SaddleSequence", "saddle_sequence", "commutes"]


# --------------------------------------------------------------------------- the loss
class _Problem:
    """``L(M) = (1/2N) ‖𝒜(M) + f0 − y‖²`` with its gradient ``G`` and factored derivatives."""

    def __init__(self, op: StructureOperator, y: torch.Tensor):
        self.op, self.y = op, y
        self.N, self.C, self.p = op.n_samples, op.n_outputs, op.p
        self.f0 = op.offset
        self._cache = None  # (x, G(x)) of the last Hessian product

    def apply(self, M: torch.Tensor) -> torch.Tensor:
        return _op_forward(self.op, M)

    def residual(self, M: torch.Tensor) -> torch.Tensor:
        return self.f0 + self.apply(M) - self.y

    def loss_of_residual(self, r: torch.Tensor) -> float:
        return 0.5 * float((r * r).sum()) / self.N

    def loss(self, M: torch.Tensor) -> float:
        return self.loss_of_residual(self.residual(M))

    def G(self, M: torch.Tensor) -> torch.Tensor:
        return self.op.adjoint_unchecked(self.residual(M)) / self.N

    # factored problem on V (p × k), numpy in / out for scipy
    def fg(self, x: np.ndarray, k: int, B: torch.Tensor | None = None):
        """Loss and gradient of ``L(V Vᵀ)``; with ``B`` (p × q), ``V = B Z`` and ``x = vec(Z)``."""
        q = self.p if B is None else B.shape[1]
        Z = torch.from_numpy(x.reshape(q, k))
        V = Z if B is None else B @ Z
        r = self.residual(V @ V.T)
        G = self.op.adjoint_unchecked(r) / self.N
        g = 2.0 * (G @ V)
        g = g if B is None else B.T @ g
        return self.loss_of_residual(r), g.reshape(-1).numpy()

    def hessp(self, x: np.ndarray, d: np.ndarray, k: int, B: torch.Tensor | None = None) -> np.ndarray:
        q = self.p if B is None else B.shape[1]
        Z = torch.from_numpy(x.reshape(q, k))
        E = torch.from_numpy(d.reshape(q, k))
        V, D = (Z, E) if B is None else (B @ Z, B @ E)
        if self._cache is not None and self._cache[0].shape == x.shape and np.array_equal(self._cache[0], x):
            G = self._cache[1]
        else:
            G = self.G(V @ V.T)
            self._cache = (x.copy(), G)
        dM = D @ V.T
        dG = self.op.adjoint_unchecked(self.apply(dM + dM.T)) / self.N
        h = 2.0 * (G @ D + dG @ V)
        h = h if B is None else B.T @ h
        return h.reshape(-1).numpy()


def _op_forward(op: StructureOperator, M: torch.Tensor) -> torch.Tensor:
    """``𝒜(M)`` as ``(N, C)`` for a symmetric ``M`` (no validation, internal use)."""
    return op.forward_unchecked(M)


def commutes(op: StructureOperator, *, trials: int = 2, rtol: float = 1e-9, seed: int = 0) -> bool:
    """Randomized test that all structure matrices ``A_c(x_n)`` commute.

    ``[𝒜^*(R), 𝒜^*(S)] = Σ R_{n,c} S_{m,d} [A_{n,c}, A_{m,d}]`` is a bilinear
    form in ``(R, S)``; it vanishes for random Gaussian ``R, S`` (with
    probability one) only if every commutator vanishes.  Costs ``2·trials``
    adjoints and ``O(p³)``; never materialises ``A``.

    Returns
    -------
    bool
        True when ``‖[X, Y]‖ ≤ rtol ‖X‖ ‖Y‖`` for every trial.
    """
    gen = torch.Generator().manual_seed(seed)
    for _ in range(trials):
        R = torch.randn(op.n_samples, op.n_outputs, generator=gen, dtype=op.dtype)
        S = torch.randn(op.n_samples, op.n_outputs, generator=gen, dtype=op.dtype)
        X, Y = op.adjoint_unchecked(R), op.adjoint_unchecked(S)
        if float(torch.linalg.norm(X @ Y - Y @ X)) > rtol * float(torch.linalg.norm(X) * torch.linalg.norm(Y)):
            return False
    return True


# --------------------------------------------------------------------------- results
@dataclass
class Saddle:
    """One stationary point of the flow (one plateau of the staircase).

    Attributes
    ----------
    index : int
        ``k`` (``0`` is ``M = 0``).
    M : torch.Tensor, shape (p, p)
        The stationary point ``M_k = V Vᵀ`` (one representative when the loss
        is invariant under a group acting on ``M``, e.g. the MLP balance
        rescaling ``a → c a, u → u / c``; ``loss``, ``G`` and the rates do not
        depend on the representative).
    V : torch.Tensor, shape (p, rank)
        Factor of ``M_k`` with orthogonal columns.
    rank : int
    loss : float
        Plateau level ``L(M_k)``.
    G : torch.Tensor, shape (p, p)
        ``G(M_k) = 𝒜^*(r)/N``.
    stationarity : float
        ``‖G(M_k) M_k‖_F`` (0 at an exact stationary point).
    rates : torch.Tensor, shape (p − rank,)
        Eigenvalues ``h`` of ``−P G(M_k) P`` on the complement of
        ``range(M_k)``, descending.
    escape_rate : float
        ``4 λ_max(−P G(M_k) P)`` = ``4 rates[0]`` (≤ 0 at the global minimiser).
    escape_direction : torch.Tensor of shape (p, m), or None
        Orthonormal directions along which the flow leaves ``M_k`` (``m > 1``
        for a degenerate top eigenvalue); ``None`` for the last saddle.
    escape_mode_rate : float
        ``4 h`` of the direction that actually escapes (equals
        ``escape_rate`` except under the commuting rule, where a slower mode
        that is already larger can escape first).
    tau : float
        Leading-order arrival time in units of ``ln(1/ε)``: the flow from
        ``M(0) = ε I`` reaches this plateau at ``t ≈ tau · ln(1/ε)``.
    """

    index: int
    M: torch.Tensor
    V: torch.Tensor
    rank: int
    loss: float
    G: torch.Tensor
    stationarity: float
    rates: torch.Tensor
    escape_rate: float
    escape_direction: torch.Tensor | None = None
    escape_mode_rate: float = float("nan")
    tau: float = 0.0


@dataclass
class SaddleSequence:
    """Result of :func:`saddle_sequence`: the predicted staircase.

    Attributes
    ----------
    saddles : list of Saddle
        ``saddles[0]`` is ``M = 0``.
    global_minimum : bool
        True when the last saddle satisfies ``λ_max(−G) ≤ tol`` (``G ⪰ 0``,
        ``G M = 0``): it is then the global minimiser of the convex loss over
        the PSD cone.
    certificate : float
        ``λ_max(−G)`` at the last saddle.
    rule : str
        ``"commuting"`` or ``"generic"`` (the log-magnitude bookkeeping used).
    first_offset : float
        ``s_level`` of the first escape (see :meth:`escape_times`), computed
        from the escape trajectory at ``level = first_level``.
    first_level : float
    message : str
        Why the sequence stopped.
    notes : list of str
        Caveats met on the way (e.g. a rank drop under the generic rule).
    """

    saddles: list
    global_minimum: bool
    certificate: float
    rule: str
    first_offset: float = float("nan")
    first_level: float = 0.5
    message: str = ""
    notes: list = field(default_factory=list)
    _escape_curve: tuple = field(default=None, repr=False)
    _problem: object = field(default=None, repr=False)

    # ------------------------------------------------------------------ arrays
    @property
    def plateau_levels(self) -> np.ndarray:
        """``(K+1,)`` losses ``L(M_k)``, ``k = 0..K``."""
        return np.array([s.loss for s in self.saddles])

    @property
    def ranks(self) -> np.ndarray:
        """``(K+1,)`` ranks of ``M_k``."""
        return np.array([s.rank for s in self.saddles])

    @property
    def escape_rates(self) -> np.ndarray:
        """``(K+1,)`` escape rates ``4 λ_max(−P G(M_k) P)``."""
        return np.array([s.escape_rate for s in self.saddles])

    @property
    def taus(self) -> np.ndarray:
        """``(K+1,)`` leading-order arrival times ``τ_k`` (``t ≈ τ_k ln(1/ε)``); ``τ_0 = 0``."""
        return np.array([s.tau for s in self.saddles])

    @property
    def order_parameters(self) -> list:
        """The stationary points ``M_k``, each ``(p, p)``."""
        return [s.M for s in self.saddles]

    def __len__(self) -> int:
        return len(self.saddles)

    # ------------------------------------------------------------------ times
    def escape_times(self, eps: float, *, offset: bool = True) -> np.ndarray:
        """Predicted times of the drops for ``M(0) = ε I``.

        Parameters
        ----------
        eps : float
            Initial scale ``ε`` (``M(0) = ε I``), ``0 < ε < 1``.
        offset : bool
            Add the exact ``O(1)`` offset to the first drop (only the first one
            has a known offset).

        Returns
        -------
        numpy.ndarray, shape (K,)
            ``t_k ≈ τ_k ln(1/ε)`` for ``k = 1..K`` (drop from plateau ``k−1`` to
            ``k``); with ``offset`` the first entry is ``ln(1/ε)/(4λ_1) +
            s_level``, the time at which the loss crosses
            ``L_0 − level (L_0 − L_1)`` (``level = first_level``).
        """
        eps = _check_eps(eps)
        t = self.taus[1:] * math.log(1.0 / eps)
        if offset and t.size and np.isfinite(self.first_offset):
            t[0] += self.first_offset
        return t

    def corrected_escape_times(self, eps: float) -> np.ndarray:
        """Drop times with their ``O(1)`` offsets (small-part recursion, :mod:`nqf.reductions._saddle_clock`).

        Time at which the loss crosses ``(L_{k−1} + L_k)/2`` for ``M(0) = ε I``,
        ``k = 1..K``; NaN from the first plateau that is shorter than the
        relaxation into its saddle (no stretch of pure exponential growth).
        Validated against the exact flow for drops 2 and 3 of an MLP example
        (error ≤ 0.006 where the leading order is 0.11–0.15 off); costs one
        heteroclinic integration with a ``p × p`` propagator per drop.

        Returns
        -------
        numpy.ndarray, shape (K,)
        """
        from ._saddle_clock import corrected_escape_times

        eps = _check_eps(eps)
        return corrected_escape_times(self._problem, self.saddles, eps)

    def first_escape_time(self, eps: float, level: float | None = None) -> float:
        """Time at which the loss from ``M(0) = ε I`` crosses ``L_0 − level (L_0 − L_1)``.

        ``t = ln(1/ε)/(4 λ_1) + s_level`` with ``s_level`` read off the escape
        trajectory (exact up to ``o(1)`` as ``ε → 0``).
        """
        eps = _check_eps(eps)
        if len(self.saddles) < 2:
            return float("inf")
        level = self.first_level if level is None else float(level)
        if not 0.0 < level < 1.0:
            raise InvalidParameterError(f"`level` must lie in (0, 1); found {level}")
        L0, L1 = self.saddles[0].loss, self.saddles[1].loss
        s_level = self._escape_curve(L0 - level * (L0 - L1))
        return self.saddles[1].tau * math.log(1.0 / eps) + s_level

    def predicted_loss_curve(self, t, eps: float, *, offset: bool = True) -> np.ndarray:
        """Leading-order staircase ``L(t)``: ``L_k`` on ``[t_k, t_{k+1})``.

        Parameters
        ----------
        t : array_like, shape (T,)
            Training times (``t = η · steps``).
        eps : float
            ``M(0) = ε I``.

        Returns
        -------
        numpy.ndarray, shape (T,)
        """
        t = np.asarray(t, dtype=float)
        tk = self.escape_times(eps, offset=offset)
        idx = np.searchsorted(tk, t, side="right")
        return self.plateau_levels[idx]

    def markers(self, eps: float) -> list:
        """``[(t_k, L_k)]`` for marking predicted plateaus on measured curves (``t_0 = 0``)."""
        tk = np.concatenate([[0.0], self.escape_times(eps)])
        return [(float(a), float(b)) for a, b in zip(tk, self.plateau_levels, strict=True)]

    def summary(self) -> dict:
        """JSON-serialisable summary."""
        return {
            "plateau_levels": self.plateau_levels.tolist(),
            "ranks": self.ranks.tolist(),
            "escape_rates": self.escape_rates.tolist(),
            "taus": self.taus.tolist(),
            "first_offset": self.first_offset,
            "first_level": self.first_level,
            "global_minimum": self.global_minimum,
            "certificate": self.certificate,
            "rule": self.rule,
            "message": self.message,
            "notes": list(self.notes),
        }


def _check_eps(eps) -> float:
    eps = float(eps)
    if not 0.0 < eps < 1.0:
        raise InvalidParameterError(f"`eps` must lie in (0, 1) (the initial scale, M(0) = ε I); found {eps}")
    return eps


# --------------------------------------------------------------------------- descent
def _descend(prob: _Problem, V0: torch.Tensor, gtol: float, maxiter: int, B: torch.Tensor | None = None):
    """Minimise ``L(V Vᵀ)`` from ``V0`` (trust-region Newton–CG with Hessian products).

    With ``B`` (orthonormal columns, p × q) the factor is restricted to
    ``V = B Z`` (used under the commuting rule, where the flow never leaves
    the span of the active modes).  After the trust region stalls on
    round-off of the loss, Newton steps (MINRES on the singular Hessian) are
    accepted while they reduce the gradient norm.
    """
    k = V0.shape[1]
    x0 = (V0 if B is None else B.T @ V0).reshape(-1).numpy().copy()
    res = minimize(lambda x: prob.fg(x, k, B), x0, jac=True, method="trust-ncg",
                   hessp=lambda x, d: prob.hessp(x, d, k, B),
                   options={"gtol": max(gtol, 1e-9 * float(np.linalg.norm(x0))), "maxiter": maxiter})
    x = res.x
    # the loss cannot resolve the last digits (round-off ~1e-16 L exceeds the predicted
    # decrease ~‖g‖²/‖H‖ once ‖g‖ ≲ 1e-8), so judge the polishing steps by the gradient norm
    gn = float(np.linalg.norm(prob.fg(x, k, B)[1]))
    n = x.size
    for _ in range(20):
        if gn <= gtol:
            break
        g = prob.fg(x, k, B)[1]
        xc = x
        Hop = LinearOperator((n, n), matvec=lambda d, xc=xc: prob.hessp(xc, d, k, B), dtype=float)
        step, _ = minres(Hop, -g, rtol=1e-10, maxiter=min(10 * n, 500))
        xn = x + step
        gnn = float(np.linalg.norm(prob.fg(xn, k, B)[1]))
        if not gnn < gn:
            break
        x, gn = xn, gnn
    Z = torch.from_numpy(x.reshape(-1, k).copy())
    return (Z if B is None else B @ Z), res


def _compress(V: torch.Tensor, rank_rtol: float):
    """Orthogonal-column factor of ``V Vᵀ`` with negligible directions removed."""
    U, S, _ = torch.linalg.svd(V, full_matrices=False)
    if S.numel() == 0 or float(S[0]) == 0.0:
        return V[:, :0], 0
    keep = S ** 2 > rank_rtol * float(S[0]) ** 2
    return U[:, keep] * S[keep], int(keep.sum())


def _complement(Q: torch.Tensor, p: int) -> torch.Tensor:
    """Orthonormal basis ``(p, p − r)`` of the complement of ``range(Q)``."""
    if Q.shape[1] == 0:
        return torch.eye(p, dtype=Q.dtype)
    _, U = torch.linalg.eigh(torch.eye(p, dtype=Q.dtype) - Q @ Q.T)  # eigenvalues 0 (r times), then 1
    return U[:, Q.shape[1]:]


# --------------------------------------------------------------------------- main entry
def saddle_sequence(op: StructureOperator, y, *, max_rank: int | None = None, tol: float = 1e-9,
                    rule: str = "auto", gtol: float = 1e-12, rank_rtol: float = 1e-10,
                    degeneracy_rtol: float = 1e-9, first_level: float = 0.5,
                    maxiter: int = 2000) -> SaddleSequence:
    r"""The greedy low-rank saddle sequence of the NQF flow and its ε → 0 clock.

    Loss and time convention: ``L = (1/2N) ‖f_0 + 𝒜(M) − y‖²`` (MSE, summed over
    outputs), ``G = 𝒜^*(r)/N``, gradient flow ``Ṁ = −2 (G M + M G)``,
    ``t = η · steps``; initial scale ``M(0) = ε I``.  See the module docstring
    for the derivation of the escape rates and times.

    Parameters
    ----------
    op : StructureOperator
        Structure operator satisfying the zero-gradient condition (the flow
        closes on ``M`` only then).
    y : array_like, shape (N,) or (N, C)
        Targets.
    max_rank : int, optional
        Stop after reaching this rank (default ``p``).
    tol : float
        Stop when ``λ_max(−G(M_k)) ≤ tol · scale`` with ``scale = max(1, ‖G(0)‖₂)``.
    rule : {"auto", "commuting", "generic"}
        Log-magnitude bookkeeping of the small directions.  ``"auto"``:
        ``"commuting"`` if :func:`commutes` passes, else ``"generic"``.
    gtol : float
        Gradient-norm target of the factored descent, relative to ``scale``.
    rank_rtol : float
        Eigenvalues of ``M_k`` below ``rank_rtol · λ_max(M_k)`` are dropped.
    degeneracy_rtol : float
        Top rates within this relative distance escape together.
    first_level : float
        Fraction of the first drop at which the first-escape offset is read.
    maxiter : int
        Iteration cap of each descent.

    Returns
    -------
    SaddleSequence

    Raises
    ------
    NotClosedError
        If ``op`` lacks the zero-gradient condition.
    ShapeError
        If ``y`` does not match the operator's outputs.
    """
    if not isinstance(op, StructureOperator):
        raise InvalidTypeError(f"`op` must be a StructureOperator; found {type(op).__name__}")
    if not op.satisfies_zgz:
        raise NotClosedError("`op` has a linear or cross-unit term (the zero-gradient condition fails): the flow "
                             "does not close on M alone, so the saddle sequence of L(M) does not describe it")
    if rule not in ("auto", "commuting", "generic"):
        raise InvalidParameterError(f"`rule` must be one of 'auto', 'commuting', 'generic'; found {rule!r}")
    if not 0.0 < first_level < 1.0:
        raise InvalidParameterError(f"`first_level` must lie in (0, 1); found {first_level}")
    y = op._check_outputs("y", as_tensor("y", y, dtype=op.dtype, device=op.device))
    if op.device.type != "cpu" or op.dtype != torch.float64:  # the descent and eigenproblems run in float64 on CPU
        op, y = op.to(torch.float64, "cpu"), y.to(torch.float64).cpu()
    p = op.p
    max_rank = p if max_rank is None else int(max_rank)
    if max_rank < 0:
        raise InvalidParameterError(f"`max_rank` must be ≥ 0; found {max_rank}")
    prob = _Problem(op, y)
    if rule == "auto":
        rule = "commuting" if commutes(op) else "generic"

    G0 = prob.G(torch.zeros(p, p, dtype=op.dtype))
    scale = max(1.0, float(torch.linalg.eigvalsh(G0).abs().max()))

    basis = None
    if rule == "commuting":
        gen = torch.Generator().manual_seed(1)
        R = torch.randn(op.n_samples, op.n_outputs, generator=gen, dtype=op.dtype)
        _, basis = torch.linalg.eigh(op.adjoint_unchecked(R))
        e_modes = np.ones(p)       # exponent of each shared-eigenbasis mode
    else:
        e_sorted = np.ones(p)      # sorted exponents of the complement

    saddles: list[Saddle] = []
    V = torch.zeros(p, 0, dtype=op.dtype)
    tau = 0.0
    message = ""
    notes: list[str] = []
    while True:
        M = V @ V.T
        G = prob.G(M)
        r = V.shape[1]
        Qc = _complement(_orth(V), p)
        H = -(Qc.T @ G @ Qc)
        h, U = torch.linalg.eigh(0.5 * (H + H.T))
        h, U = h.flip(0), U.flip(1)
        lam = float(h[0]) if h.numel() else 0.0
        sad = Saddle(index=len(saddles), M=M, V=V.clone(), rank=r, loss=prob.loss(M), G=G,
                     stationarity=float(torch.linalg.norm(G @ M)), rates=h, escape_rate=4.0 * lam, tau=tau)
        saddles.append(sad)
        if lam <= tol * scale:
            message = f"converged: λ_max(−G) = {lam:.3e} ≤ tol·scale = {tol * scale:.3e}"
            break
        if r >= max_rank:
            message = f"stopped at `max_rank` = {max_rank}"
            break

        # ---- which direction escapes, and when (log-magnitude bookkeeping)
        if rule == "generic":
            m = int((h >= lam - degeneracy_rtol * abs(lam)).sum())
            hn = h.numpy()
            n = min(len(e_sorted), len(hn))
            e0 = e_sorted[0]
            dtau = e0 / (4.0 * lam)
            e_sorted = e_sorted[:n] - 4.0 * hn[:n] * dtau
            direction = Qc @ U[:, :m]
            mode_rate = 4.0 * lam
        else:
            z = torch.einsum("ik,ij,jk->k", basis, M, basis).numpy()
            zmax = max(float(z.max()), 0.0) if z.size else 0.0
            active = z > rank_rtol * max(zmax, 1e-300) if zmax > 0 else np.zeros(p, bool)
            hm = -torch.einsum("ik,ij,jk->k", basis, G, basis).numpy()
            cand = (~active) & (hm > tol * scale)
            if not cand.any():
                message = "no inactive mode grows (commuting rule)"
                break
            with np.errstate(divide="ignore"):
                tj = np.where(cand, np.maximum(e_modes, 0.0) / np.where(cand, 4.0 * hm, 1.0), np.inf)
            dtau = float(tj.min())
            first = np.nonzero(cand & (tj <= dtau + degeneracy_rtol * max(dtau, 1e-300)))[0]
            inactive = ~active
            e_modes[inactive] = e_modes[inactive] - 4.0 * hm[inactive] * dtau
            e_modes[active] = 0.0
            e_modes[first] = 0.0
            direction = basis[:, first]
            m = len(first)
            mode_rate = 4.0 * float(hm[first].max())
        tau += dtau
        sad.escape_direction = direction
        sad.escape_mode_rate = mode_rate

        # ---- grow along the direction (best step on the ray) and descend
        D = direction
        AD = prob.apply(D @ D.T)
        curv = float((AD * AD).sum()) / prob.N
        slope = float(torch.trace(D.T @ (-G) @ D))
        zstar = slope / curv if curv > 0 else 1.0
        V0 = torch.cat([V, math.sqrt(max(zstar / m, 1e-12)) * D], 1)
        B = None
        if rule == "commuting":  # the flow stays in the span of the active and the joining modes
            B = basis[:, np.nonzero(active)[0].tolist() + first.tolist()]
        Vn, res = _descend(prob, V0, gtol * scale, maxiter, B)
        Vn, rn = _compress(Vn, rank_rtol)
        if rn < V0.shape[1] and rn > 0:  # a direction left: polish the smaller factor
            Vn, _ = _descend(prob, Vn, gtol * scale, maxiter, B)
            Vn, rn = _compress(Vn, rank_rtol)
        # bookkeeping of the rank change
        if rule == "generic":
            lost = r + m - rn  # directions that left range(M): they start decaying from exponent 0
            e_sorted = np.sort(np.concatenate([np.zeros(max(lost, 0)), e_sorted[m:]]))
            if lost > 0:
                notes.append(f"saddle {len(saddles)}: {lost} direction(s) left range(M) under the generic rule; "
                             "the clock after this point is not derived (a decaying direction is not in "
                             "general position) and later taus are unreliable")
        V = Vn

    seq = SaddleSequence(saddles=saddles, global_minimum=lam <= tol * scale, certificate=lam, rule=rule,
                         first_level=first_level, message=message, notes=notes, _problem=prob)
    if len(saddles) >= 2:
        seq._escape_curve = _escape_trajectory(prob, saddles[0], saddles[1].loss)
        L0, L1 = saddles[0].loss, saddles[1].loss
        seq.first_offset = seq._escape_curve(L0 - first_level * (L0 - L1))
    return seq


def _orth(V: torch.Tensor) -> torch.Tensor:
    if V.shape[1] == 0:
        return V
    U, S, _ = torch.linalg.svd(V, full_matrices=False)
    return U[:, S > 0]


def _escape_trajectory(prob: _Problem, s0: Saddle, L1: float, delta: float = 1e-14):
    """Escape trajectory ``Φ(s)`` from ``M = 0`` along the top eigenspace of ``−G(0)``.

    Integrates the factored flow ``Ẇ = −2 G(W Wᵀ) W`` from ``W = √δ Q`` (``Q``
    the ``m`` escape directions, ``p × m``) and shifts time by
    ``ln(1/δ)/(4 λ_1)`` so that ``qᵀΦ(s)q ≈ e^{4 λ_1 s}`` as ``s → −∞``
    (the relative error of this normalisation is ``O(δ)``).

    Returns
    -------
    callable
        ``target ↦ s`` at which the loss along ``Φ`` first falls to ``target``
        (NaN if it never does within the integrated window).
    """
    Q = s0.escape_direction
    lam = s0.escape_rate / 4.0
    p, m = Q.shape
    W0 = math.sqrt(delta) * Q

    def rhs(t, w):
        W = torch.from_numpy(w.reshape(p, m))
        return (-2.0 * (prob.G(W @ W.T) @ W)).reshape(-1).numpy()

    def loss(w):
        W = torch.from_numpy(np.ascontiguousarray(w).reshape(p, m))
        return prob.loss(W @ W.T)

    shift = math.log(1.0 / delta) / (4.0 * lam)
    L0 = s0.loss
    floor = L0 - 0.999 * (L0 - L1)  # integrate until 99.9 % of the first drop is done

    def done(t, w):
        return loss(w) - floor
    done.terminal = True

    T = shift + 4000.0 / (4.0 * lam)
    sol = solve_ivp(rhs, (0.0, T), W0.reshape(-1).numpy(), method="DOP853", rtol=1e-12,
                    atol=1e-15 * math.sqrt(delta), dense_output=True, events=done)
    ts = np.linspace(0.0, sol.t[-1], 401)
    Ls = np.array([loss(w) for w in sol.sol(ts).T])

    def crossing(target: float) -> float:
        below = np.nonzero(Ls <= target)[0]
        if below.size == 0 or below[0] == 0:
            return float("nan")
        j = int(below[0])
        a, b = ts[j - 1], ts[j]
        for _ in range(60):  # bisection on the dense output
            c = 0.5 * (a + b)
            if loss(sol.sol(c)) <= target:
                b = c
            else:
                a = c
        return 0.5 * (a + b) - shift

    return crossing
