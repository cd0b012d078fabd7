"""The time of the saddle sequence's two phases, estimated before each runs (printed by ``nqf analyze``).

Both are priced in right-hand sides of the integrations that dominate them, each timed on the problem
itself (the operator, the data, float64 on the CPU) rather than counted in bare operator calls: a
right-hand side of an orbit also pays the integrator's own work and the loss event of every step
(measured 1.4–1.9× a bare ``forward_factor`` + ``adjoint_apply`` pair).

* **The search with its first orbit** (:func:`search_cost`): :data:`SEARCH_EVALUATIONS` right-hand
  sides of the factored flow.  Counted on iris, wine, breast_cancer (SiLU), digits (an MLP, a CNN,
  attention) with ``benchmarks/bench_analyze_models.py``: the descents 5·10²–3·10³ evaluation
  equivalents, the first orbit 1.5·10³–3.6·10³ (seven segments of about 212 right-hand sides while it
  grows from ``√δ``, then the way to its stopping level), 2.2·10³–6.2·10³ together.
* **The O(1) clock of the later drops** (:func:`clock_cost`, once the drops are known): per drop one
  heteroclinic orbit of the chain (:data:`JUMP_EVALUATIONS`; 1.7·10³–3.2·10³ counted) and one transport of
  the small part along it (:data:`PROPAGATE_EVALUATIONS` right-hand sides ``−2 G(Φ) U``; 5.6·10²–1.4·10³).
  The recursion stops at the first plateau too short for it, so the clock costs between one and ``K``
  drops' worth; both bounds are returned.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ...dynamics import integrate_factor
from ._problem import LossProblem, float64_problem

__all__ = ["search_cost", "clock_cost", "SEARCH_EVALUATIONS", "JUMP_EVALUATIONS", "PROPAGATE_EVALUATIONS"]

#: Right-hand sides of the search with its first orbit (the module docstring has the measured range).
SEARCH_EVALUATIONS = 3500
#: Right-hand sides of one orbit of the O(1) clock's chain.
JUMP_EVALUATIONS = 2500
#: Right-hand sides of one transport of the small part along an orbit.
PROPAGATE_EVALUATIONS = 1000


def _orbit_rhs_seconds(prob: LossProblem) -> float:
    """Seconds per right-hand side of an orbit: two short DOP853 runs of the factored flow (8 steps each) from a
    small random rank-2 factor, with the orbit's tolerances and a loss event every step, the faster run over its
    evaluations (the minimum of two leaves out a run slowed by another job: on the CNN row of the benchmark
    one 16-step run's estimate ranged 1.23–1.92× the search's time)."""
    gen = torch.Generator().manual_seed(0)
    L = 1e-3 * torch.randn(prob.p, 2, generator=gen, dtype=torch.float64)
    shape = L.shape

    def level(_t, v):
        V = torch.from_numpy(np.ascontiguousarray(v).reshape(shape))
        return prob.loss(V @ V.T) - 0.0

    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        res = integrate_factor(  # 8 steps of at most 1e-4 (≈ 95 right-hand sides: the solver's set-up amortised)
            prob.op, prob.y, L, (0.0, 8e-4), rtol=1e-12, atol=1e-22, method="DOP853", events=[level], max_step=1e-4
        )
        best = min(best, (time.perf_counter() - t0) / max(int(res.nfev), 1))
    return best


def search_cost(op, y) -> tuple[float, float]:
    """``(seconds, seconds per right-hand side)`` of :func:`saddle_sequence` on ``(op, y)``: its search with the
    first heteroclinic orbit, priced at :data:`SEARCH_EVALUATIONS` right-hand sides of the orbit's flow, each
    timed on this problem (module docstring)."""
    per = _orbit_rhs_seconds(float64_problem(op, y))
    return SEARCH_EVALUATIONS * per, per


def clock_cost(seq) -> tuple[float, float]:
    """``(fewest, most)`` seconds of the O(1) clock of a :class:`SaddleSequence`'s later drops: one to
    ``K`` orbits of its chain with the transports between them (zero with a single drop, whose time
    needs no clock).  Each right-hand side is timed on the sequence's own problem (module docstring)."""
    K = len(seq.saddles) - 1
    if K <= 1:
        return 0.0, 0.0
    prob = seq._problem
    per = _orbit_rhs_seconds(prob)
    V, U = seq.saddles[1].V, torch.eye(prob.p, dtype=torch.float64)
    t0 = time.perf_counter()
    for _ in range(3):
        torch.mm(prob.G(V @ V.T), U).mul_(-2.0)
    per_transport = (time.perf_counter() - t0) / 3
    drop = JUMP_EVALUATIONS * per + PROPAGATE_EVALUATIONS * per_transport
    return drop, K * JUMP_EVALUATIONS * per + (K - 1) * PROPAGATE_EVALUATIONS * per_transport
