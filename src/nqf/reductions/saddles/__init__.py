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
  ε → 0 active-set limit of docs/theory.md §4.3, and the sequence is taken from
  it: :func:`nqf.reductions.lv.limit` on the mode coefficients (built
  matrix-free), each event time a saddle.
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
jumps, which no closed rule gives.  :mod:`nqf.reductions.saddles._clock` computes them
from the exact identity ``M(t) = ε U Uᵀ`` (``U̇ = −2 G U``) by carrying the
small part of ``U`` along the chain of heteroclinic orbits
(:meth:`SaddleSequence.corrected_escape_times`): against the exact flow of the
MLP example the drops 2 and 3 move from 0.15 and 0.11 off to within 0.006
(docs/analyze.md, "Escape times beyond leading order").  :meth:`escape_times`
keeps the leading order (cheap, and what the measured tables were made with).  When the data are neither commuting nor
in general position (e.g. commuting blocks inside a non-commuting problem,
or ties in the exponents) neither rule is guaranteed; ``rule="auto"`` uses
``"commuting"`` when the randomized commutation test
:func:`nqf.structure.commutes` passes and ``"generic"``
otherwise.  The descent reaches the stationary point the flow reaches
whenever the rank-``(k+1)`` factored problem has a single basin below the
saddle (true for reduced-rank regression, i.e. linear and tanh MLPs);
otherwise compare with a simulation.  A plateau is only visible when its
length ``Δτ_k ln(1/ε)`` exceeds the ``O(1)`` relaxation time into the saddle;
ill-conditioned inputs (slow directions of ``Σ_xx``) or overlapping CNN
patches can make that time so long that no plateau forms at any ε reachable
in float64, although the saddle itself is correct.

Modules: :mod:`~nqf.reductions.saddles._problem` (the loss and the factored
descent), :mod:`~nqf.reductions.saddles._search` (:func:`saddle_sequence`),
:mod:`~nqf.reductions.saddles._results` (:class:`Saddle`, :class:`SaddleSequence`),
:mod:`~nqf.reductions.saddles._orbit` (heteroclinic orbits, integrated with
:func:`nqf.dynamics._flow.integrate_factor`), :mod:`~nqf.reductions.saddles._clock`
(escape times beyond leading order), :mod:`~nqf.reductions.saddles._cost` (the time of the search and of
the clock, estimated before each runs: :func:`search_cost`, :func:`clock_cost`).

Numerics: each descent is a trust-region Newton–CG on ``V`` (Hessian-vector
products ``H[D] = 2 G D + 2 G'(D Vᵀ + V Dᵀ) V``, ``G'(Δ) = 𝒜^*(𝒜(Δ))/N``)
followed by Newton/MINRES polishing judged by the gradient norm, reaching
``‖∇_V L‖ ≈ 1e-12 · scale`` in float64; operators in another dtype or on
another device are copied to float64 on the CPU.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
