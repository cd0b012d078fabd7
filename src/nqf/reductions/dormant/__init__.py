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

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
