"""The names of ``nqf.structure``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._activations import (
    ACTIVATIONS as ACTIVATIONS,
    REGISTRY as REGISTRY,
    Activation as Activation,
    ActivationModule as ActivationModule,
    get_activation as get_activation,
)
from ._attention import (
    ATTENTION_READOUTS as ATTENTION_READOUTS,
    multi_head_attention as multi_head_attention,
    qk_attention as qk_attention,
)
from ._bilinear import (
    BilinearStructure as BilinearStructure,
    OneHotKronKernel as OneHotKronKernel,
)
from ._channels import (
    ChannelSplit as ChannelSplit,
    ChannelStructure as ChannelStructure,
    channel_split as channel_split,
)
from ._commute import (
    COMMUTING_RTOL as COMMUTING_RTOL,
    commutator_defect as commutator_defect,
    commutes as commutes,
)
from ._conv import (
    CONV_READOUTS as CONV_READOUTS,
    conv1d as conv1d,
    conv2d as conv2d,
    conv_output_size as conv_output_size,
)
from ._factorization import (
    SensingStructure as SensingStructure,
    factorization as factorization,
    linear_network as linear_network,
    matrix_sensing as matrix_sensing,
)
from ._higher import (
    HigherOrderTerms as HigherOrderTerms,
    mlp_higher_order as mlp_higher_order,
)
from ._mlp import (
    mlp as mlp,
)
from ._moe import (
    mixture_of_experts as mixture_of_experts,
)
from ._operator import (
    DenseStructure as DenseStructure,
    ProjectedStructure as ProjectedStructure,
    StructureOperator as StructureOperator,
)
from ._output_projection import (
    OutputProjection as OutputProjection,
    project_outputs as project_outputs,
)
from ._readout import (
    ReadoutStructure as ReadoutStructure,
)
