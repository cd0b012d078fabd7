"""The names of ``nqf.networks``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._attention import (
    MultiHeadAttention as MultiHeadAttention,
    QKAttention as QKAttention,
)
from ._conv import (
    ConvNet1d as ConvNet1d,
    ConvNet2d as ConvNet2d,
)
from ._factorization import (
    Factorization as Factorization,
    MatrixSensing as MatrixSensing,
)
from ._families import (
    FAMILIES as FAMILIES,
    Family as Family,
)
from ._mlp import (
    TwoLayerMLP as TwoLayerMLP,
)
from ._moe import (
    MixtureOfExperts as MixtureOfExperts,
)
