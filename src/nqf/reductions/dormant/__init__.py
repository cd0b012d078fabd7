"""When the quadratic form is silent: the first order that carries signal and its power-law clock.

* :class:`HomogeneousTerm`, :func:`unit_term` — the term of one order of a layer, matrix-free;
  :func:`chain_term` — a whole chain of layers with every parameter small (its homogeneous degree);
* :func:`leading_order` — the utility of a dormant unit, maximised on the sphere order by order, and the
  first order whose maximum is above round-off (:class:`LeadingOrder`);
* :func:`dormant_staircase` — dormant flows between active phases: a :class:`nqf.reductions.Staircase`
  (method ``"dormant-flow"``) whose times scale as ``ρ^{2−k}``; :func:`chain_staircase` the same for a
  chain (every drop for a linear chain, by deflation; the first escape otherwise);
* :func:`agf_staircase` — Alternating Gradient Flows at order two: the NQF's dormant flow alternating with
  the module's own cost minimisation over the active span (method ``"agf"``).

Equations and assumptions: docs/theory.md, "When the quadratic form is silent".
"""

from ._agf import agf_staircase
from ._chain import ChainTerm, chain_staircase, chain_term
from ._flow import active_curvature, dormant_staircase
from ._terms import HomogeneousTerm, unit_term
from ._utility import LeadingOrder, aligned_escape_time, leading_order

__all__ = [
    "HomogeneousTerm",
    "unit_term",
    "ChainTerm",
    "chain_term",
    "chain_staircase",
    "LeadingOrder",
    "leading_order",
    "aligned_escape_time",
    "dormant_staircase",
    "agf_staircase",
    "active_curvature",
]
