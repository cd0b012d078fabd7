"""Real PyTorch modules of each family, each exposing its unit axis as ``.units``
(a :class:`nqf.modules.UnitLayout` in the order of the matching analytic constructor)."""

from ._attention import MultiHeadAttention, QKAttention
from ._conv import ConvNet1d, ConvNet2d
from ._factorization import Factorization, MatrixSensing
from ._mlp import TwoLayerMLP
from ._moe import MixtureOfExperts

__all__ = [
    "TwoLayerMLP",
    "Factorization",
    "MatrixSensing",
    "ConvNet1d",
    "ConvNet2d",
    "MultiHeadAttention",
    "QKAttention",
    "MixtureOfExperts",
]
