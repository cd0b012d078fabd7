"""The torch-module side: any ``nn.Module`` as a quadratic form (docs/architecture.md).

:func:`find_units` / :func:`select_units` find a module's layers of interchangeable
units (each network class declares its ``unit_kind``), :func:`from_module` computes
the structure operator for a :class:`UnitLayout` (helpers :func:`mlp_units`,
:func:`attention_units`, :func:`conv_units`) by differentiating a narrowed copy of
the module with fewer units, :func:`check_permutation_symmetry` and
:func:`check_truncation_order` check its assumptions, and
:func:`get_unit_weights` / :func:`set_unit_weights` read and write ``W``.  The
analytic operators are :mod:`nqf.structure`.
"""

from .assumptions import check_permutation_symmetry, check_truncation_order
from .attention_layouts import attention_units
from .autodiff import from_module
from .conv_layouts import conv_units
from .discover import UnitCandidate, find_units, select_units
from .layouts import mlp_units
from .units import UnitLayout, UnitScatter, UnitSlice, get_unit_weights, set_unit_weights

__all__ = [
    "UnitLayout",
    "UnitSlice",
    "UnitScatter",
    "get_unit_weights",
    "set_unit_weights",
    "from_module",
    "check_truncation_order",
    "check_permutation_symmetry",
    "mlp_units",
    "attention_units",
    "conv_units",
    "UnitCandidate",
    "find_units",
    "select_units",
]
