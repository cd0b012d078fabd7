"""Real PyTorch modules of each family, each exposing its unit axis as ``.units``."""

from .mlp import TwoLayerMLP

__all__ = ["TwoLayerMLP"]
