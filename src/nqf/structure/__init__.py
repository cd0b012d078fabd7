"""The structure operator 𝒜 and its constructors (docs/theory.md §1–§2).

Analytic constructors (each documents its unit layout): :func:`mlp`,
:func:`linear_network`, :func:`factorization`, :func:`matrix_sensing`,
:func:`conv1d`, :func:`conv2d`, :func:`multi_head_attention`,
:func:`qk_attention`, :func:`mixture_of_experts`.  Any ``nn.Module``:
:func:`find_units` / :func:`select_units` find its layers of interchangeable
units, :func:`from_module` computes the operator for a :class:`UnitLayout`
(helpers :func:`mlp_units`, :func:`attention_units`, :func:`conv_units`), and
:func:`get_unit_weights` / :func:`set_unit_weights` read and write ``W``.
"""

from .activations import ACTIVATIONS, Activation, ActivationModule, activation_of_module, get_activation
from .assumptions import check_permutation_symmetry, check_truncation_order
from .attention import EyeKronKernel, HeadValueKernel, multi_head_attention, qk_attention
from .attention_layouts import attention_units
from .autodiff import from_module
from .bilinear import BilinearKernel, BilinearStructure, DenseKernel, OneHotKronKernel
from .commute import commutator_defect, commutes
from .conv import conv1d, conv2d, conv_output_size
from .conv_layouts import conv_units
from .discover import UnitCandidate, find_units, select_units
from .factorization import SensingStructure, factorization, linear_network, matrix_sensing
from .layouts import mlp_units
from .mlp import mlp
from .moe import mixture_of_experts
from .operator import DenseStructure, ProjectedStructure, StructureOperator, project_operator
from .subspace import data_subspace
from .units import UnitLayout, UnitScatter, UnitSlice, get_unit_weights, set_unit_weights

__all__ = [
    "StructureOperator",
    "ProjectedStructure",
    "data_subspace",
    "project_operator",
    "DenseStructure",
    "BilinearStructure",
    "SensingStructure",
    "BilinearKernel",
    "DenseKernel",
    "OneHotKronKernel",
    "HeadValueKernel",
    "EyeKronKernel",
    "UnitLayout",
    "UnitSlice",
    "Activation",
    "ACTIVATIONS",
    "ActivationModule",
    "get_activation",
    "activation_of_module",
    "from_module",
    "check_truncation_order",
    "mlp_units",
    "attention_units",
    "conv_units",
    "check_permutation_symmetry",
    "UnitCandidate",
    "find_units",
    "select_units",
    "UnitScatter",
    "get_unit_weights",
    "set_unit_weights",
    "mlp",
    "linear_network",
    "factorization",
    "matrix_sensing",
    "conv1d",
    "conv2d",
    "conv_output_size",
    "multi_head_attention",
    "qk_attention",
    "mixture_of_experts",
    "commutator_defect",
    "commutes",
]
