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
"""

from ._assumptions import check_permutation_symmetry, check_truncation_order
from ._attention_layouts import attention_units
from ._autodiff import from_module, is_non_smooth_layer
from ._conv_layouts import conv_units
from ._discover import ELEMENTWISE_MODULES, UnitCandidate, find_units, refused_units, select_units
from ._experts import ExpertStack, stack_experts
from ._higher import higher_order_terms
from ._kinks import kink_distances, readout_kinks
from ._layouts import mlp_units
from ._narrowed import evaluation_mode
from ._units import UnitLayout, UnitScatter, UnitSlice

__all__ = [
    "is_non_smooth_layer",
    "ELEMENTWISE_MODULES",
    "UnitLayout",
    "UnitSlice",
    "UnitScatter",
    "from_module",
    "higher_order_terms",
    "check_truncation_order",
    "check_permutation_symmetry",
    "mlp_units",
    "attention_units",
    "conv_units",
    "UnitCandidate",
    "find_units",
    "select_units",
    "refused_units",
    "ExpertStack",
    "stack_experts",
    "readout_kinks",
    "kink_distances",
    "evaluation_mode",
]
