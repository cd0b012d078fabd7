"""Reductions of the closed dynamics: what the order-parameter flow reduces to.

The central output is a :class:`Staircase` (plateau levels, drop times and the
rule behind each), returned by every reduction and by :func:`predict`, which
picks the reduction for an operator (``nqf.predict`` is the same function).

* :mod:`nqf.reductions.lv` — commuting structure matrices: the Lotka–Volterra
  system of the mode strengths, its logistic closed forms and its ε → 0 limit;
* :mod:`nqf.reductions.svd_modes` — two-layer networks on whitened data: the
  SVD modes of the teacher and their Saxe-type sigmoidal switch-on;
* :mod:`nqf.reductions.saddles` — non-commuting data: the greedy low-rank saddle
  sequence (plateau levels and escape times);
* :mod:`nqf.reductions.dormant` — when the quadratic form is silent: the first order that carries
  signal and its power-law clock (dormant flows between active phases; chains with every layer small);
* switch-on times and level crossings shared by all of them (:func:`logistic_switch_time`,
  :func:`crossing_times`, :func:`crossing_time`, :func:`midpoint_levels`); the staircase curve itself is
  :meth:`Staircase.loss_curve`;
* the drops that carry the learning (:func:`learning_drops`; :meth:`Staircase.carrying` cuts the tail
  after them).

The submodules are imported on first use (``nqf.reductions.lv`` loads scipy).
Conventions and equations: docs/theory.md.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
