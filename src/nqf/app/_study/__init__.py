"""``nqf.analyze``: your own model, your own data (docs/analyze.md).

:func:`analyze` predicts how a real network learns on real data (plateau levels and
drop times: Lotka–Volterra for commuting data, the greedy saddle sequence
otherwise), simulates its NQF, trains the real module from the same small
initial state ``M(0) = εI``, compares per plateau, and returns an
:class:`Analysis` with assumption checks and a verdict.

Public helpers: :func:`find_unit_layers`, :func:`choose_units`, :func:`unit_listing`, :func:`build_model`.
The initial state is :func:`nqf.dynamics.initial_weights`, the step size and step
count :func:`nqf.curves.stable_learning_rate` and :func:`nqf.curves.step_count`; the
prediction is :func:`nqf.predict` (a :class:`nqf.Staircase`), judged by
:func:`nqf.curves.compare_staircase`.

Names are imported on first use, so that ``nqf --version`` — whose
command table registers ``nqf analyze`` with :func:`register_cli` — does not load torch.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
