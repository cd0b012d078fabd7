"""The model zoo of issue 32: models written the way researchers write them, one factory each.

Each factory takes ``in_features`` and ``n_outputs`` (what ``nqf analyze --model FILE.py:FACTORY`` passes)
and returns a plain ``nn.Module``: ``nqf analyze --model benchmarks/zoo/models.py:transformer --data digits``.
:func:`deep_linear_data` and :func:`images_data` build the two synthetic data sets the zoo uses beside
scikit-learn's digits.  ``benchmarks/bench_models_zoo.py`` runs them all; the tests use the same factories.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class RowTransformer(nn.Module):
    """The 8 pixel rows of a digit as 8 tokens: Linear 8→16 embedding, one TransformerEncoderLayer
    (2 heads, ReLU feed-forward), mean over tokens, Linear(16, C, bias=False)."""

    def __init__(self, n_outputs: int):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.encoder = nn.TransformerEncoderLayer(
            d_model=16, nhead=2, dim_feedforward=32, batch_first=True, dropout=0.0
        )
        self.readout = nn.Linear(16, n_outputs, bias=False)

    def forward(self, x):
        h = self.encoder(self.embed(x.reshape(x.shape[0], 8, 8)))
        return self.readout(h.mean(dim=1))


def transformer(in_features: int, n_outputs: int) -> nn.Module:
    return RowTransformer(n_outputs)


class SeqConv(nn.Module):
    """A Conv1d over the 8 positions (rows) of a digit, tanh, the mean over positions in the forward."""

    def __init__(self, n_outputs: int, channels: int = 16):
        super().__init__()
        self.conv = nn.Conv1d(8, channels, kernel_size=3, padding=1)
        self.head = nn.Linear(channels, n_outputs, bias=False)

    def forward(self, x):
        h = torch.tanh(self.conv(x.reshape(x.shape[0], 8, 8)))
        return self.head(h.mean(dim=-1))


def conv1d_mean(in_features: int, n_outputs: int) -> nn.Module:
    return SeqConv(n_outputs)


def layernorm_mlp(in_features: int, n_outputs: int) -> nn.Module:
    return nn.Sequential(nn.Linear(in_features, 32), nn.LayerNorm(32), nn.Tanh(), nn.Linear(32, n_outputs, bias=False))


def batchnorm_mlp(in_features: int, n_outputs: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(in_features, 32), nn.BatchNorm1d(32), nn.Tanh(), nn.Linear(32, n_outputs, bias=False)
    )


class SkipThroughReadout(nn.Module):
    """``readout(x + tanh(W x))``: the readout reads the units and the skip path alike."""

    def __init__(self, in_features: int, n_outputs: int):
        super().__init__()
        self.hidden = nn.Linear(in_features, in_features)
        self.readout = nn.Linear(in_features, n_outputs, bias=False)

    def forward(self, x):
        return self.readout(x + torch.tanh(self.hidden(x)))


def skip_readout(in_features: int, n_outputs: int) -> nn.Module:
    return SkipThroughReadout(in_features, n_outputs)


class ResidualBlockMLP(nn.Module):
    """A residual block ``h = x + W₂ tanh(W₁ x)`` read out by a fixed ``Linear``: the units are the block's
    hidden neurons, the skip path does not pass through them."""

    def __init__(self, in_features: int, n_outputs: int, width: int = 32):
        super().__init__()
        self.up = nn.Linear(in_features, width)
        self.down = nn.Linear(width, in_features, bias=False)
        self.readout = nn.Linear(in_features, n_outputs, bias=False)

    def forward(self, x):
        return self.readout(x + self.down(torch.tanh(self.up(x))))


def residual_mlp(in_features: int, n_outputs: int) -> nn.Module:
    return ResidualBlockMLP(in_features, n_outputs)


class RowRNN(nn.Module):
    """An ``nn.RNN`` (tanh) over the 8 pixel rows, the last hidden state read out."""

    def __init__(self, n_outputs: int):
        super().__init__()
        self.rnn = nn.RNN(8, 16, batch_first=True)
        self.readout = nn.Linear(16, n_outputs, bias=False)

    def forward(self, x):
        out, _ = self.rnn(x.reshape(x.shape[0], 8, 8))
        return self.readout(out[:, -1])


def rnn(in_features: int, n_outputs: int) -> nn.Module:
    return RowRNN(n_outputs)


class HandMoE(nn.Module):
    """A hand-written mixture of experts: softmax gate over 4 tanh experts held in an ``nn.ModuleList``."""

    def __init__(self, in_features: int, n_outputs: int, n_experts: int = 4, hidden: int = 16):
        super().__init__()
        self.gate = nn.Linear(in_features, n_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(in_features, hidden), nn.Tanh(), nn.Linear(hidden, n_outputs, bias=False))
            for _ in range(n_experts)
        )

    def forward(self, x):
        g = torch.softmax(self.gate(x), dim=-1)
        return sum(g[:, e : e + 1] * expert(x) for e, expert in enumerate(self.experts))


def moe(in_features: int, n_outputs: int) -> nn.Module:
    return HandMoE(in_features, n_outputs)


def deep_linear(in_features: int, n_outputs: int) -> nn.Module:
    """A deep linear network D→10→10→C without biases (Saxe et al. 2014)."""
    return nn.Sequential(
        nn.Linear(in_features, 10, bias=False), nn.Linear(10, 10, bias=False), nn.Linear(10, n_outputs, bias=False)
    )


def gelu_float32(in_features: int, n_outputs: int) -> nn.Module:
    """A PyTorch user's default model: float32, ``bias=True`` everywhere, GELU."""
    return nn.Sequential(nn.Linear(in_features, 32), nn.GELU(), nn.Linear(32, n_outputs))


def relu_mlp(in_features: int, n_outputs: int) -> nn.Module:
    return nn.Sequential(nn.Linear(in_features, 32), nn.ReLU(), nn.Linear(32, n_outputs, bias=False))


def dropout_mlp(in_features: int, n_outputs: int) -> nn.Module:
    return nn.Sequential(nn.Linear(in_features, 32), nn.Tanh(), nn.Dropout(0.5), nn.Linear(32, n_outputs, bias=False))


class SmallCNN(nn.Module):
    """A Conv2d on 3-channel 6×6 images: 4 channels, tanh, global average pool, Linear readout."""

    def __init__(self, n_outputs: int):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, kernel_size=3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()
        self.readout = nn.Linear(4, n_outputs, bias=False)

    def forward(self, x):
        return self.readout(self.flat(self.pool(torch.tanh(self.conv(x)))))


def conv2d_rgb(in_features: int, n_outputs: int) -> nn.Module:
    return SmallCNN(n_outputs)


def deep_linear_data(n: int = 500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Exactly whitened inputs (D = 10) and a linear teacher of singular values 3, 2, 1, 0.5 (C = 4)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 10))
    X -= X.mean(0)
    U, _, Vt = np.linalg.svd(X, full_matrices=False)
    X = np.sqrt(n) * U @ Vt  # XᵀX / N = I exactly
    A, _ = np.linalg.qr(rng.standard_normal((10, 4)))
    B, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    T = A @ np.diag([3.0, 2.0, 1.0, 0.5]) @ B.T
    return X, X @ T


def images_data(n: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """3-channel 6×6 images whose target is a smooth function of the channel means (C = 1)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3, 6, 6))
    means = X.mean(axis=(2, 3))
    Y = means @ np.array([[2.0], [-1.0], [0.5]])
    return X, Y
