"""Unit layouts: which parameter slices of a PyTorch module form one unit.

A module with ``m`` interchangeable units has, for each unit ``i``, a vector
``w_i ∈ R^p`` made by concatenating (flattened, in the order given) slices of
its parameters.  A :class:`UnitSlice` names one parameter and how unit ``i``
sits in it: ``param.narrow(axis, offset + i * size, size)``.  Parameters not
named in the layout are held fixed at their current values.

Example: the hidden neurons of ``nn.Sequential(nn.Linear(D, m), nn.Tanh(),
nn.Linear(m, C))`` in the order (readout, input weights)::

    UnitLayout([UnitSlice("2.weight", axis=1), UnitSlice("0.weight", axis=0)])

which gives ``w_i = (a_i ∈ R^C, u_i ∈ R^D)``, ``p = C + D``.

:meth:`UnitLayout.get_W` / :meth:`UnitLayout.set_W` read and write the unit
weights as ``W`` of shape ``(p, m)`` (e.g. ``W = √ε Q`` for ``M(0) = εI``), and
:class:`UnitScatter` is the differentiable map ``W ↦ parameters`` used to train
the units with :func:`torch.func.functional_call`; all three share one set of
index maps.  Layouts are found automatically by :func:`nqf.modules.find_units`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from .._validation import as_tensor, check_shape
from ..errors import InvalidParameterError, InvalidTypeError, ShapeError, UnknownNameError

__all__ = ["UnitSlice", "UnitLayout", "UnitScatter"]


@dataclass(frozen=True)
class UnitSlice:
    """One parameter's share of a unit.

    Parameters
    ----------
    param : str
        Name of the parameter as in ``module.named_parameters()``.
    axis : int
        Axis along which the units are laid out.
    size : int
        Extent of one unit along ``axis`` (e.g. the head dimension).
    offset : int
        Start of unit 0 along ``axis`` (e.g. ``E`` for the key rows of a
        packed ``in_proj_weight``).
    """

    param: str
    axis: int = 0
    size: int = 1
    offset: int = 0

    def block(self, tensor: torch.Tensor, unit: int) -> torch.Tensor:
        """The block of ``tensor`` that belongs to ``unit``."""
        return tensor.narrow(self.axis, self.offset + unit * self.size, self.size)

    def indices(self, unit: int, device=None) -> torch.Tensor:
        start = self.offset + unit * self.size
        return torch.arange(start, start + self.size, device=device)


class UnitLayout:
    """The unit axis of a module: an ordered list of :class:`UnitSlice`.

    Parameters
    ----------
    slices : sequence of UnitSlice
        In the order their flattened blocks are concatenated into ``w_i``.
    n_units : int, optional
        Number of units ``m``; inferred from the first slice when omitted.
    """

    def __init__(self, slices: Sequence[UnitSlice], n_units: int | None = None):
        if not slices:
            raise InvalidParameterError("`slices` must name at least one parameter slice")
        self.slices = tuple(slices)
        self.n_units = n_units

    @property
    def m(self) -> int:
        """Number of units of a resolved layout (see :meth:`resolve`)."""
        if self.n_units is None:
            raise InvalidParameterError("the layout's number of units is not known yet: call `resolve(params)`")
        return self.n_units

    def resolve(self, params: Mapping[str, torch.Tensor]) -> UnitLayout:
        """Check the layout against a module's parameters; fill in ``n_units``.

        Raises
        ------
        UnknownNameError (a KeyError), ShapeError
            Unknown parameter name, axis out of range, or slices that do not
            hold the same number of units.
        """
        counts = []
        for s in self.slices:
            if s.param not in params:
                raise UnknownNameError(
                    f"unit slice names parameter `{s.param}`, which the module does not have; "
                    f"its parameters are {sorted(params)}"
                )
            t = params[s.param]
            if not -t.ndim <= s.axis < t.ndim:
                raise ShapeError(
                    f"unit slice of `{s.param}` uses axis {s.axis}; the parameter has shape {tuple(t.shape)}"
                )
            avail = t.shape[s.axis] - s.offset
            if s.size <= 0 or avail < s.size:
                raise ShapeError(
                    f"unit slice of `{s.param}`: size {s.size} at offset {s.offset} does not fit "
                    f"axis {s.axis} of shape {tuple(t.shape)}"
                )
            counts.append(avail // s.size)
        m = self.n_units if self.n_units is not None else counts[0]
        for s, c in zip(self.slices, counts, strict=True):
            if c < m:
                raise ShapeError(f"unit slice of `{s.param}` holds {c} units, the layout needs {m}")
        return UnitLayout(self.slices, m)

    def block_sizes(self, params: Mapping[str, torch.Tensor]) -> list[int]:
        """Number of entries each slice contributes to ``w_i``."""
        return [s.block(params[s.param], 0).numel() for s in self.slices]

    def p(self, params: Mapping[str, torch.Tensor]) -> int:
        """Unit dimension ``p``."""
        return sum(self.block_sizes(params))

    # ------------------------------------------------------------ W <-> params
    def get_W(self, module: torch.nn.Module) -> torch.Tensor:
        """The unit weights of ``module``: ``W`` of shape ``(p, m)``, column ``i`` = ``w_i``.

        Parameters
        ----------
        module : torch.nn.Module
            A module this layout describes (``module.units`` for :mod:`nqf.networks`, or a layout from
            :func:`nqf.modules.find_units`).

        Returns
        -------
        torch.Tensor, shape (p, m)
            A copy; ``M = W Wᵀ`` is the order parameter.
        """
        return UnitScatter(module, self).gather()

    def set_W(self, module: torch.nn.Module, W) -> None:
        """Write ``W`` of shape ``(p, m)`` into the unit parameters of ``module`` (in place).

        Everything that belongs to no unit is left as it is.  Put a module at the
        small-initialisation scale ``M(0) = W Wᵀ = εI`` with ``W = √ε Q``
        (``Q`` with orthonormal rows, needs ``m ≥ p``).

        Raises
        ------
        ShapeError, NonFiniteError
            ``W`` is not ``(p, m)`` or not finite.
        """
        scatter = UnitScatter(module, self)
        params = dict(module.named_parameters())
        ref = params[next(iter(scatter.rows))]
        W = as_tensor("W", W, ndim=2, dtype=ref.dtype, device=ref.device)
        check_shape("W", W, (scatter.p, scatter.m))
        new = scatter(W)
        with torch.no_grad():
            for name in scatter.rows:
                params[name].copy_(new[name])

    def zero_units(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Copies of the named parameters with every unit block set to zero."""
        lay = self.resolve(params)
        out = {}
        for name in {s.param for s in lay.slices}:
            t = params[name].detach().clone()
            for s in lay.slices:
                if s.param != name:
                    continue
                t.index_fill_(s.axis % t.ndim, torch.cat([s.indices(i, t.device) for i in range(lay.m)]), 0.0)
            out[name] = t
        return out

    def place(self, base: Mapping[str, torch.Tensor], units: Mapping[int, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Functional (autodiff- and vmap-safe) insertion of unit vectors.

        Parameters
        ----------
        base : mapping name → tensor
            Parameters with zero unit blocks (from :meth:`zero_units`).
        units : mapping unit index → tensor of shape (p,)

        Returns
        -------
        dict name → tensor, ``base`` with ``w_i`` added into unit ``i``'s blocks.
        """
        sizes = [s.block(base[s.param], 0).numel() for s in self.slices]
        out = dict(base)
        for i, w in units.items():
            start = 0
            for s, k in zip(self.slices, sizes, strict=True):
                t = out[s.param]
                shape = list(t.shape)
                shape[s.axis % t.ndim] = s.size
                piece = w[start : start + k].reshape(shape)
                out[s.param] = t.index_add(s.axis % t.ndim, s.indices(i, t.device), piece)
                start += k
        return out

    def describe(self, params: Mapping[str, torch.Tensor]) -> str:
        parts, start = [], 0
        for s, k in zip(self.slices, self.block_sizes(params), strict=True):
            parts.append(f"[{start}:{start + k}] {s.param} (axis {s.axis}, size {s.size})")
            start += k
        return "; ".join(parts)

    def __repr__(self) -> str:
        return f"UnitLayout({list(self.slices)!r}, n_units={self.n_units})"


def _unit_index(flat: torch.Tensor, s: UnitSlice, m: int) -> torch.Tensor:
    """Flat indices of every unit's block of one slice, shape ``(k, m)`` (column ``i`` = unit ``i``)."""
    ax = s.axis % flat.ndim
    t = flat.narrow(ax, s.offset, m * s.size)
    t = t.reshape(*t.shape[:ax], m, s.size, *t.shape[ax + 1 :])
    return t.movedim(ax, -1).reshape(-1, m)


class UnitScatter:
    """Differentiable map ``W (p × m) → {name: parameter}`` for a module's unit layout.

    Built once (index maps into the flattened parameters, no Python loop over
    units), then each call is one ``index_put`` per parameter, so it can be
    used inside autograd / :mod:`torch.func` (e.g. with
    :func:`torch.func.functional_call`).  Entries that belong to no unit keep
    their values in ``module``.

    Parameters
    ----------
    module : torch.nn.Module
    units : UnitLayout

    Attributes
    ----------
    p, m : int
        Unit dimension and number of units.
    base : dict name → tensor
        The module's parameters (detached) at construction.
    """

    def __init__(self, module: torch.nn.Module, units: UnitLayout):
        if not isinstance(units, UnitLayout):
            raise InvalidTypeError(
                f"`units` must be a UnitLayout (``module.units`` of an nqf network, or a layout from "
                f"nqf.modules.find_units); found {type(units).__name__}"
            )
        params = dict(module.named_parameters())
        self.layout = units.resolve(params)
        sizes = self.layout.block_sizes(params)
        self.p, self.m = sum(sizes), self.layout.m
        self.base = {k: v.detach() for k, v in params.items()}
        rows: dict[str, tuple[list, list]] = {}
        start = 0
        for s, k in zip(self.layout.slices, sizes, strict=True):
            t = self.base[s.param]
            flat = torch.arange(t.numel(), device=t.device).reshape(t.shape)
            rows.setdefault(s.param, ([], []))
            rows[s.param][0].append(torch.arange(start, start + k, device=t.device))
            rows[s.param][1].append(_unit_index(flat, s, self.m))
            start += k
        #: name → (rows of W, flat indices (k, m) into the parameter)
        self.rows = {n: (torch.cat(a), torch.cat(b, 0)) for n, (a, b) in rows.items()}

    def __call__(self, W: torch.Tensor) -> dict:
        """Parameters with unit ``i``'s blocks replaced by ``W[:, i]`` (out of place, differentiable)."""
        out = dict(self.base)
        for name, (w_rows, idx) in self.rows.items():
            t = self.base[name]
            flat = t.reshape(-1).index_put((idx.reshape(-1),), W[w_rows].reshape(-1))
            out[name] = flat.reshape(t.shape)
        return out

    def module_output(self, module: torch.nn.Module, W: torch.Tensor, x: torch.Tensor, output=None) -> torch.Tensor:
        """``module(x)`` with the units at ``W`` (every other parameter as in :attr:`base`), shape ``(n, C)``.

        ``output`` (optional) maps the module's raw output first (e.g. picks one element of a tuple);
        the result is flattened per sample.  Differentiable in ``W`` (:func:`torch.func.functional_call`).
        """
        from torch.func import functional_call

        out = functional_call(module, self(W), (x,))
        if output is not None:
            out = output(out)
        return out.reshape(out.shape[0], -1)

    def gather(self, params: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """``W`` of shape ``(p, m)`` read from ``params`` (default: :attr:`base`)."""
        params = self.base if params is None else params
        ref = params[next(iter(self.rows))]
        W = torch.empty(self.p, self.m, dtype=ref.dtype, device=ref.device)
        for name, (w_rows, idx) in self.rows.items():
            W[w_rows] = params[name].detach().reshape(-1)[idx]
        return W
