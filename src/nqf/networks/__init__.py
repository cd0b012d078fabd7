"""Real PyTorch modules of each family, each exposing its unit axis as ``.units``
(a :class:`nqf.modules.UnitLayout` in the order of the matching analytic constructor)."""

from .attention import MultiHeadAttention, QKAttention
from .conv import ConvNet1d, ConvNet2d
from .factorization import Factorization, MatrixSensing
from .mlp import TwoLayerMLP
from .moe import MixtureOfExperts

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
