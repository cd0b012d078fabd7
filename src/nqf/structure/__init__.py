"""The structure operator 𝒜 and its constructors (docs/theory.md §1–§2).

Analytic constructors (each documents its unit layout): :func:`mlp`,
:func:`linear_network`, :func:`factorization`, :func:`matrix_sensing`,
:func:`conv1d`, :func:`conv2d`, :func:`multi_head_attention`,
:func:`qk_attention`, :func:`mixture_of_experts`; the operator protocol
(:class:`StructureOperator`), the data subspace, the commutation test and the
activations.  The torch-module side (unit layouts, discovery, ``from_module``)
is :mod:`nqf.modules`.
"""

from .activations import ACTIVATIONS, Activation, ActivationModule, activation_of_module, get_activation
from .attention import EyeKronKernel, HeadValueKernel, multi_head_attention, qk_attention
from .bilinear import BilinearKernel, BilinearStructure, DenseKernel, OneHotKronKernel
from .commute import commutator_defect, commutes
from .conv import conv1d, conv2d, conv_output_size
from .factorization import SensingStructure, factorization, linear_network, matrix_sensing
from .mlp import mlp
from .moe import mixture_of_experts
from .operator import DenseStructure, ProjectedStructure, StructureOperator, project_operator
from .subspace import data_subspace

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
    "Activation",
    "ACTIVATIONS",
    "ActivationModule",
    "get_activation",
    "activation_of_module",
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
