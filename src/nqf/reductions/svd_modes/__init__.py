"""Two-layer networks on whitened data: the SVD modes of the teacher and their sigmoidal switch-on.

The door of this reduction (docs/theory.md §4.5): :func:`two_layer_modes` reduces a two-layer MLP
on whitened inputs to one logistic (balanced start) or Riccati (isotropic start) mode per singular
value of ``Σ_yx`` and returns :class:`TwoLayerModes` (its :meth:`~TwoLayerModes.staircase` is the
prediction, its ``whitening_error`` the measured distance of the inputs from white); :func:`whiten`
prepares the inputs the reduction needs (:class:`NotWhitenedError` / :class:`NotWhitenedWarning` when they
are not whitened).

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
