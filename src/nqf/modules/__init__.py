"""The torch-module side: any ``nn.Module`` as a quadratic form (docs/architecture.md).

:func:`find_units` / :func:`select_units` find a module's layers of interchangeable
units (each network class declares its ``unit_kind``; :func:`refused_units` says which layer blocks the
others and why; experts held in an ``nn.ModuleList`` are laid out on :func:`stack_experts`'s copy),
:func:`from_module` computes the structure operator for a :class:`UnitLayout` (helpers :func:`mlp_units`,
:func:`attention_units`, :func:`conv_units`) by differentiating a narrowed copy of
the module with fewer units, :func:`check_permutation_symmetry` and
:func:`check_truncation_order` check its assumptions, and
:meth:`UnitLayout.get_W` / :meth:`UnitLayout.set_W` read and write ``W``.  The
analytic operators are :mod:`nqf.structure`.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
