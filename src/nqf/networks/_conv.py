"""Real convolutional modules with their output channels as units (1-D and 2-D)."""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

from .._validation import int_tuple, one_of, positive_int
from ..errors import InvalidParameterError
from ..modules import UnitLayout, UnitSlice
from ..structure import CONV_READOUTS as READOUTS, Activation, conv_output_size, get_activation

__all__ = ["ConvNet1d", "ConvNet2d"]


class _ConvNet(nn.Module):
    """Shared readout logic: ``h = σ(conv(x))`` of shape ``(B, m, Q)``, then the readout."""

    #: What :func:`nqf.modules.find_units` reports as the kind of :attr:`units`.
    unit_kind = "conv-channels"

    conv: nn.Module
    activation: Activation

    def _init_readout(self, readout, n_outputs, n_channels, Q, dtype):
        one_of("readout", readout, READOUTS)
        positive_int("n_outputs", n_outputs)
        positive_int("n_channels", n_channels)
        self.readout_name = readout
        shape = (n_outputs, n_channels, Q) if readout == "position" else (n_outputs, n_channels)
        self.readout = nn.Parameter(torch.randn(*shape, dtype=dtype) / math.sqrt(n_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.activation(self.conv(x)).flatten(2)  # (B, m, Q)
        if self.readout_name == "position":
            return torch.einsum("bhq,chq->bc", h, self.readout)
        return torch.einsum("bh,ch->bc", h.mean(-1), self.readout)

    @property
    def units(self) -> UnitLayout:
        """Channel ``ch``: ``(readout[:, ch] flattened, conv.weight[ch] flattened)``."""
        return UnitLayout([UnitSlice("readout", axis=1), UnitSlice("conv.weight", axis=0)])


class ConvNet1d(_ConvNet):
    r"""``f_c(x) = Σ_ch Σ_q a_{ch,c,q} σ(u_ch · patch_q(x))`` or its mean-pooled readout.

    An ``nn.Conv1d(in_channels, n_channels, kernel_size, stride, padding,
    bias=False)`` (channels are the units), the activation, then the readout
    parameter ``readout`` of shape ``(C, n_channels, Q)`` (``"position"``) or
    ``(C, n_channels)`` (``"mean"``: applied to the average over positions).
    Unit layout as :func:`nqf.structure.conv1d`:
    ``w_ch = (readout[:, ch], conv.weight[ch])``.

    Parameters
    ----------
    in_channels, n_channels : int
    kernel_size, stride, padding : int
    activation : str or callable
        Smooth activation (ReLU is refused).
    readout : {"mean", "position"}
    n_outputs : int
        ``C``.
    input_length : int, optional
        ``L``; required for ``readout="position"`` (it fixes ``Q``).
    dtype : torch.dtype

    Notes
    -----
    ``forward``: ``x`` of shape ``(B, in_channels, L)`` → ``(B, C)``.
    """

    def __init__(
        self,
        in_channels: int,
        n_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        activation="tanh",
        readout: str = "mean",
        n_outputs: int = 1,
        input_length: int | None = None,
        *,
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        self.activation = get_activation(activation)
        (k,) = int_tuple("kernel_size", kernel_size, 1, 1)
        (s,) = int_tuple("stride", stride, 1, 1)
        (pad,) = int_tuple("padding", padding, 1, 0)
        self.conv = nn.Conv1d(in_channels, n_channels, k, stride=s, padding=pad, bias=False, dtype=dtype)
        Q = 1
        if readout == "position":
            if input_length is None:
                raise InvalidParameterError(
                    "`input_length` is required for readout='position' (the readout has one weight per output position)"
                )
            Q = conv_output_size(int(input_length), k, s, pad)
            if Q < 1:
                raise InvalidParameterError(
                    f"`kernel_size` {k} is larger than the padded input ({input_length} + 2·{pad})"
                )
        self._init_readout(readout, n_outputs, n_channels, Q, dtype)


class ConvNet2d(_ConvNet):
    r"""2-D version of :class:`ConvNet1d` on ``nn.Conv2d``.

    Parameters
    ----------
    in_channels, n_channels : int
    kernel_size, stride, padding : int or (int, int)
    activation : str or callable
    readout : {"mean", "position"}
    n_outputs : int
    input_size : (int, int), optional
        ``(H, W)``; required for ``readout="position"`` (``Q = H_out · W_out``,
        positions row-major, readout shape ``(C, n_channels, Q)``).
    dtype : torch.dtype

    Notes
    -----
    ``forward``: ``x`` of shape ``(B, in_channels, H, W)`` → ``(B, C)``.
    """

    def __init__(
        self,
        in_channels: int,
        n_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        activation="tanh",
        readout: str = "mean",
        n_outputs: int = 1,
        input_size=None,
        *,
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        self.activation = get_activation(activation)
        # int_tuple(..., 2, ...) returns exactly two ints
        ks = cast("tuple[int, int]", int_tuple("kernel_size", kernel_size, 2, 1))
        st = cast("tuple[int, int]", int_tuple("stride", stride, 2, 1))
        pd = cast("tuple[int, int]", int_tuple("padding", padding, 2, 0))
        self.conv = nn.Conv2d(in_channels, n_channels, ks, stride=st, padding=pd, bias=False, dtype=dtype)
        Q = 1
        if readout == "position":
            if input_size is None:
                raise InvalidParameterError(
                    "`input_size` (H, W) is required for readout='position' (the readout "
                    "has one weight per output position)"
                )
            H, W = int_tuple("input_size", input_size, 2, 1)
            Q = conv_output_size(H, ks[0], st[0], pd[0]) * conv_output_size(W, ks[1], st[1], pd[1])
            if conv_output_size(H, ks[0], st[0], pd[0]) < 1 or conv_output_size(W, ks[1], st[1], pd[1]) < 1:
                raise InvalidParameterError(
                    f"`kernel_size` {ks} is larger than the padded input {input_size} (padding {pd})"
                )
        self._init_readout(readout, n_outputs, n_channels, Q, dtype)
