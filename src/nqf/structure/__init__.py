"""The structure operator 𝒜 and its constructors (docs/theory.md §1–§2).

Analytic constructors (each documents its unit layout): :func:`mlp`,
:func:`linear_network`, :func:`factorization`, :func:`matrix_sensing`,
:func:`conv1d`, :func:`conv2d`, :func:`multi_head_attention`,
:func:`qk_attention`, :func:`mixture_of_experts`.  Any ``nn.Module``:
:func:`from_module` with a :class:`UnitLayout` (helpers :func:`mlp_units`,
:func:`attention_units`, :func:`conv_units`).
"""

from .activations import ACTIVATIONS, Activation, get_activation
from .attention import EyeKronKernel, HeadValueKernel, multi_head_attention, qk_attention
from .attention_layouts import attention_units
from .autodiff import check_truncation_order, from_module
from .conv import conv1d, conv2d, conv_output_size
from .conv_layouts import conv_units
from .factorization import SensingStructure, factorization, linear_network, matrix_sensing
from .layouts import mlp_units
from .mlp import mlp
from .moe import mixture_of_experts
from .operator import (BilinearKernel, BilinearStructure, DenseKernel, DenseStructure, OneHotKronKernel,
                       StructureOperator)
from .units import UnitLayout, UnitSlice

__all__ = [
    "StructureOperator", "DenseStructure", "BilinearStructure", "SensingStructure", "BilinearKernel",
    "DenseKernel", "OneHotKronKernel", "HeadValueKernel", "EyeKronKernel", "UnitLayout", "UnitSlice",
    "Activation", "ACTIVATIONS", "get_activation", "from_module", "check_truncation_order",
    "mlp_units", "attention_units", "conv_units",
    "mlp", "linear_network", "factorization", "matrix_sensing", "conv1d", "conv2d", "conv_output_size",
    "multi_head_attention", "qk_attention", "mixture_of_experts",
]
