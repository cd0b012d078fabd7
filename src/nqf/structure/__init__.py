"""The structure operator 𝒜 and its constructors (docs/theory.md §1–§2).

Analytic constructors (each documents its unit layout): :func:`mlp`,
:func:`linear_network`, :func:`factorization`, :func:`matrix_sensing`,
:func:`conv1d`, :func:`conv2d`, :func:`multi_head_attention`,
:func:`qk_attention`, :func:`mixture_of_experts`; the operator protocol
(:class:`StructureOperator`), the data subspace, the commutation test and the
activations.  The torch-module side (unit layouts, discovery, ``from_module``)
is :mod:`nqf.modules`.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
