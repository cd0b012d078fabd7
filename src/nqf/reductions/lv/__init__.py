"""Lotka–Volterra reduction of commuting data and its solvers (docs/theory.md §4.1–§4.3).

* :func:`reduce` — structure operator + targets + ``M(0)`` → :class:`LotkaVolterra`
  (commutation check, shared eigenbasis, ``β``, ``C``, ``z(0)``);
* :class:`LotkaVolterra` (``system.py``) — the system and its loss; its solver methods
  delegate to functions of the system: the exact discrete GD map and the stiff
  log-coordinate gradient flow (banded/sparse Jacobians, ``solvers.py``), exact logistic
  solutions of diagonal ``C`` (``logistic.py``), the final state the flow ends in — for
  singular ``C`` the one selected by the dynamics — and the plateaus (``final.py``);
  trajectories and switch times (``solution.py``);
* :func:`limit` — the ε → 0 saddle-to-saddle limit for interacting modes.

Conventions: ``L = (1/N) Σ_n ½‖f_n − y_n‖²``, GD ``W ← W − η∇_W L``, ``t = η · steps``.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
