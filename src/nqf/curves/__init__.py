"""Analysis of loss curves and predictions from mode spectra (docs/theory.md §4–§5).

* :func:`compare_staircase` — a measured curve against a predicted :class:`nqf.Staircase`
  (levels, drop times, flatness): the one judge of a staircase;
* :func:`real_clock` — the real network's drop times from a seeded-NQF run, the seeds and the
  seeding floor ``ε*_k`` below which the leading-order clock fails (docs/theory.md §7);
* :func:`step_clock` — GD's clock at a step from runs at two larger steps (Richardson in the step);
* :func:`training_clock` — a user's optimiser (GD, SGD, momentum, a schedule; the loss's scale) on the NQF's
  clock: the step of their loop at which a predicted drop happens (:class:`TrainingClock`);
* :func:`detect_steps` — times of sudden drops and plateau levels of a loss curve;
* :func:`fit_power_law` — power-law fit over a chosen or automatic window, with a bootstrap interval;
* :func:`predict_exponent` — ``(a − 1)/b`` from per-mode losses ``ℓ_k`` and rates ``ζ_k``;
* :func:`predicted_curve` — the exact loss of a sum of logistic modes;
* :func:`crowded_prediction`, :func:`compare_crowded` — crowded drops: the curve they make together,
  its local exponent and ``(a − 1)/b``, against a measured curve;
* :func:`validity_report`, :func:`validity_sweep`, :func:`remainder_ratio` — where the real
  network leaves its NQF (docs/theory.md §6).

Conventions: ``L = (1/N) Σ_n ℓ(f_n, y_n)``, ``ℓ = ½(f − y)²``; time ``t = η · steps``.
Curves are taken as array_like or tensors; results are NumPy float64 arrays.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
