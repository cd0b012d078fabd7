"""The structure operator 𝒜 and its constructors (docs/theory.md §1–§2).

Analytic constructors (each documents its unit layout): :func:`mlp`,
:func:`linear_network`, :func:`factorization`, :func:`matrix_sensing`,
:func:`conv1d`, :func:`conv2d`, :func:`multi_head_attention`,
:func:`qk_attention`, :func:`mixture_of_experts`; the operator protocol
(:class:`StructureOperator`), the data subspace, the commutation test and the
activations.  The torch-module side (unit layouts, discovery, ``from_module``)
is :mod:`nqf.modules`.
"""

from ._activations import (
    ACTIVATIONS,
    REGISTRY,
    Activation,
    ActivationModule,
    get_activation,
)
from ._attention import (
    READOUTS as ATTENTION_READOUTS,
    multi_head_attention,
    qk_attention,
)
from ._bilinear import BilinearStructure, OneHotKronKernel
from ._channels import ChannelSplit, ChannelStructure, channel_split
from ._commute import COMMUTING_RTOL, commutator_defect, commutes
from ._conv import READOUTS as CONV_READOUTS, conv1d, conv2d, conv_output_size
from ._factorization import SensingStructure, factorization, linear_network, matrix_sensing
from ._higher import HigherOrderTerms, mlp_higher_order
from ._mlp import mlp
from ._moe import mixture_of_experts
from ._operator import DenseStructure, ProjectedStructure, StructureOperator, project_operator
from ._output_projection import OutputProjection, project_outputs
from ._readout import ReadoutStructure
from ._subspace import data_subspace

__all__ = [
    "REGISTRY",
    "ATTENTION_READOUTS",
    "CONV_READOUTS",
    "COMMUTING_RTOL",
    "StructureOperator",
    "ProjectedStructure",
    "data_subspace",
    "project_operator",
    "OutputProjection",
    "project_outputs",
    "DenseStructure",
    "BilinearStructure",
    "SensingStructure",
    "OneHotKronKernel",
    "Activation",
    "ACTIVATIONS",
    "ActivationModule",
    "get_activation",
    "mlp",
    "HigherOrderTerms",
    "mlp_higher_order",
    "linear_network",
    "factorization",
    "matrix_sensing",
    "conv1d",
    "conv2d",
    "ReadoutStructure",
    "ChannelSplit",
    "ChannelStructure",
    "channel_split",
    "conv_output_size",
    "multi_head_attention",
    "qk_attention",
    "mixture_of_experts",
    "commutator_defect",
    "commutes",
]
