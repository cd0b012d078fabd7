"""Real PyTorch modules of each family, each exposing its unit axis as ``.units``
(a :class:`nqf.modules.UnitLayout` in the order of the matching analytic constructor), and the record of
each family (:data:`FAMILIES`, one :class:`Family` each: the network, its analytic operator, an example
problem, the order of the first term its quadratic form leaves out).

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
