"""The structure operator 𝒜 and its constructors (THEORY.md sections 1–2)."""

from .activations import ACTIVATIONS, Activation, get_activation
from .autodiff import check_truncation_order, from_module
from .layouts import mlp_units
from .mlp import mlp
from .operator import (BilinearKernel, BilinearStructure, DenseKernel, DenseStructure, OneHotKronKernel,
                       StructureOperator)
from .units import UnitLayout, UnitSlice

__all__ = [
    "StructureOperator", "DenseStructure", "BilinearStructure", "BilinearKernel", "DenseKernel",
    "OneHotKronKernel", "UnitLayout", "UnitSlice", "Activation", "ACTIVATIONS", "get_activation",
    "from_module", "check_truncation_order", "mlp_units", "mlp",
]
