"""``f(x)`` as a pure function of a few units' weights, all other units at zero (for :mod:`torch.func`).

Internal to :mod:`nqf.structure` (used by :func:`~nqf.modules.from_module` and its checks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call

from ._units import UnitLayout

__all__ = ["UnitFunction"]


class UnitFunction:
    """``f(w_i, w_j; x)`` with all other units at zero, as a pure function for torch.func.

    :meth:`pieces` evaluates unit 0 given as one tensor per slice (the blocks
    of ``w``); on a one-unit module a parameter tiled by the unit's slices is
    assembled by concatenation instead of a scatter into a zero tensor, which
    keeps the derivative passes free of parameter-sized temporaries.
    """

    def __init__(self, module: nn.Module, layout: UnitLayout, output: Callable | None):
        self.module = module
        params = {k: v.detach() for k, v in module.named_parameters()}
        self.buffers = {k: v.detach() for k, v in module.named_buffers()}
        self.layout = layout.resolve(params)
        self.params = params
        self.base = {**params, **self.layout.zero_units(params)}
        self.sizes = self.layout.block_sizes(params)
        self.p = sum(self.sizes)
        self.shapes = [tuple(s.block(params[s.param], 0).shape) for s in self.layout.slices]
        self.output = output
        self.tiles: dict[str, tuple[int, list[int]]] = {}
        if self.layout.n_units == 1:
            groups: dict[str, list[int]] = {}
            for j, s in enumerate(self.layout.slices):
                groups.setdefault(s.param, []).append(j)
            for name, js in groups.items():
                ax = self.layout.slices[js[0]].axis % params[name].ndim
                order = sorted(js, key=lambda j: self.layout.slices[j].offset)
                spans = [
                    (self.layout.slices[j].offset, self.layout.slices[j].offset + self.layout.slices[j].size)
                    for j in order
                ]
                same_axis = all(self.layout.slices[j].axis % params[name].ndim == ax for j in js)
                tiled = (
                    spans[0][0] == 0
                    and spans[-1][1] == params[name].shape[ax]
                    and all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
                )
                if same_axis and tiled:
                    self.tiles[name] = (ax, order)
        self._rest = [j for j, s in enumerate(self.layout.slices) if s.param not in self.tiles]

    def zero_pieces(self, dtype, device) -> tuple[torch.Tensor, ...]:
        return tuple(torch.zeros(k, dtype=dtype, device=device) for k in self.sizes)

    def _run(self, P, x):
        out = functional_call(self.module, (P, self.buffers), (x.unsqueeze(0),))
        if self.output is not None:
            out = self.output(out)
        return out.reshape(-1)

    def __call__(self, units: dict[int, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return self._run(self.layout.place(self.base, units), x)

    def pieces(self, pieces: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """``f(x)`` with unit 0 given blockwise (``pieces[j]`` of size ``block_sizes[j]``), others zero."""
        P = dict(self.base)
        for name, (axis, order) in self.tiles.items():
            blocks = [pieces[j].reshape(self.shapes[j]) for j in order]
            P[name] = blocks[0] if len(blocks) == 1 else torch.cat(blocks, axis)
        if self._rest:
            w = torch.cat([pieces[j].reshape(-1) for j in self._rest])
            P = UnitLayout([self.layout.slices[j] for j in self._rest], self.layout.n_units).place(P, {0: w})
        return self._run(P, x)
