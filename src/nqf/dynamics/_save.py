r"""What a discrete run saves (:class:`Save`) and the record of it (:class:`Recorder`).

A run of ``steps`` steps saves the full-data loss (and the step) at step 0, every ``every``
steps and at the last step; ``M`` and (weight form, real networks) ``W`` at the same steps
when asked for.  ``every=None`` means ``max(1, steps // 1000)`` (about a thousand states), spaced further when the
states are large (at most :data:`DEFAULT_STATE_BYTES` of them) or costly to form (:meth:`Save.resolve`).
The keywords ``save_every``, ``save_M``, ``save_W`` of :func:`~nqf.dynamics.simulate`,
:func:`~nqf.dynamics.train_network` and :func:`~nqf.dynamics.simulate_batched` are the
string-free aliases of this object (:func:`as_save`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from .._validation import ParameterError, int_param
from ._trajectory import Trajectory

__all__ = ["Save", "as_save", "Recorder", "gram", "DEFAULT_STATE_BYTES", "COSTLY_SAVE_FLOPS"]

#: the default save policy keeps at most this many bytes of saved states (``M``, ``W``)
DEFAULT_STATE_BYTES = 256 * 2**20
#: a save costing more than this (floating-point operations) is spaced by the default policy so that
#: saving costs at most as much as the steps in between
COSTLY_SAVE_FLOPS = 2.0**24


def _flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"`{name}` must be True or False; found {value!r}")
    return bool(value)


@dataclass(frozen=True)
class Save:
    """The save policy of a run: every ``every`` steps (``None``: ``max(1, steps // 1000)``; step 0 and the last
    step always), with ``M`` and ``W`` or not.  The loss and the step are always saved."""

    every: int | None = None
    M: bool = True
    W: bool = True

    def __post_init__(self):
        if self.every is not None:
            object.__setattr__(self, "every", int_param("save_every", self.every, minimum=1))
        object.__setattr__(self, "M", _flag("save_M", self.M))
        object.__setattr__(self, "W", _flag("save_W", self.W))

    def resolve(self, steps: int, *, state_bytes: int = 0, save_flops: float = 0.0, step_flops: float = 0.0) -> Save:
        """This policy with ``every`` fixed for a run of ``steps`` steps.

        The default (``every=None``) saves about a thousand states, and fewer when they are large or
        expensive: at most :data:`DEFAULT_STATE_BYTES` of saved states (``state_bytes`` each), and, once one
        save costs more than :data:`COSTLY_SAVE_FLOPS` (``save_flops``, e.g. ``M = L Lᵀ``: ``p² r``), at most
        ``n = ⌊steps · step_flops / save_flops⌋`` saves after step 0 (saving then costs at most as much as the
        steps), spaced evenly: ``every = ⌈steps / n⌉`` (``n ≥ 1``: step 0 and the last step only when one save
        costs more than the whole run).  An explicit ``every`` is kept as it is (the memory estimate is checked
        before the run).
        """
        if self.every is not None:
            return self
        every = max(1, steps // 1000)
        if state_bytes > 0:
            fit = max(DEFAULT_STATE_BYTES // int(state_bytes) - 2, 1)
            every = max(every, math.ceil(steps / fit))
        if save_flops >= COSTLY_SAVE_FLOPS and step_flops > 0:  # evenly spaced, the last one at the end
            every = max(every, math.ceil(steps / max(1, math.floor(steps * step_flops / save_flops))))
        return dataclasses.replace(self, every=max(1, min(every, max(steps, 1))))

    def count(self, steps: int) -> int:
        """How many states a run of ``steps`` steps saves (step 0, every ``every``-th, the last; ``every`` resolved):
        exactly, so that a :class:`Recorder` of this capacity hands its buffers over without a copy."""
        assert self.every is not None, "Save.resolve(steps) first"
        return steps // self.every + 1 + (1 if steps % self.every else 0)

    def saves(self, k: int, steps: int) -> bool:
        """Whether step ``k`` of ``steps`` is saved (``every`` resolved)."""
        assert self.every is not None, "Save.resolve(steps) first"
        return k == steps or k % self.every == 0

    def to_dict(self) -> dict:
        """JSON-ready, with the keys of a trajectory's ``info``."""
        return {"save_every": self.every, "save_M": self.M, "save_W": self.W}


def as_save(save: Save | None = None) -> Save:
    """``save`` itself, or the default policy ``Save()`` for ``None``.

    Raises
    ------
    ParameterError
        ``save`` is neither a :class:`Save` nor ``None``.
    """
    if save is None:
        return Save()
    if not isinstance(save, Save):
        raise ParameterError(f"`save` must be a nqf.dynamics.Save or None; found {type(save).__name__}")
    return save


class Recorder:
    """The saved states of one run, turned into a :class:`~nqf.dynamics.Trajectory` at the end.

    Shared by every discrete run (:func:`~nqf.dynamics.simulate`, :func:`~nqf.dynamics.train_network`,
    each run of :func:`~nqf.dynamics.simulate_batched`): :meth:`add` stores a step with its full-data
    loss and whatever states the caller passes (``None``: not saved).

    The states are copied into one preallocated buffer per kind (``capacity`` saves, doubled when
    full), never kept as many small tensors: small long-lived allocations between the large
    temporaries of every step fragmented the heap (measured: training a CNN on digits, 83 KB of
    ``W`` per save, grew the resident memory by 4 MB per save, 2.3 GB after 300 saves; 0.6 GB with
    the buffers).
    """

    def __init__(self, capacity: int | None = None):
        self.capacity = max(1, int(capacity)) if capacity else 16
        self.step: list[int] = []
        self.loss: list[float] = []
        self._buffers: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {"M": 0, "W": 0, "mu": 0, "L": 0}
        self._factor_cols: int | None = None  # columns of the saved factors kept in p × p slots

    def __len__(self) -> int:
        return len(self.step)

    def add(self, k: int, loss: float, *, M=None, W=None, mu=None, M_factor=None) -> None:
        """Store step ``k``; ``M_factor`` (``L`` with ``M = L Lᵀ``, instead of ``M``) is copied as it is and
        multiplied out for all saved steps at once when the trajectory is built (one batched product instead
        of a ``p × p`` product and its symmetrisation at every save).  A factor of ``r ≤ p`` columns is kept
        in the first ``r`` columns of a ``p × p`` slot, and ``M`` later written over it: one buffer, not two."""
        self.step.append(k)
        self.loss.append(loss)
        for name, x in (("M", M), ("W", W), ("mu", mu), ("L", M_factor)):
            if x is not None:
                self._store(name, x, slot=name == "L" and x.shape[-1] <= x.shape[-2])

    def _store(self, name: str, x: torch.Tensor, slot: bool = False) -> None:
        buf, n = self._buffers.get(name), self._counts[name]
        shape = (*x.shape[:-1], x.shape[-2]) if slot else x.shape  # a p × r factor in a p × p slot
        if buf is None:
            buf = torch.empty((self.capacity, *shape), dtype=x.dtype, device=x.device)
        elif n == buf.shape[0]:
            grown = torch.empty((2 * n, *shape), dtype=x.dtype, device=x.device)
            grown[:n] = buf
            buf = grown
        buf[n][..., : x.shape[-1]].copy_(x)  # indexing then copy_: 9 µs against 22 for buf[n, ..., :r] = x
        self._buffers[name], self._counts[name] = buf, n + 1
        if slot:
            self._factor_cols = x.shape[-1]

    def saved(self, name: str) -> torch.Tensor | None:
        """The saved states of one kind (``"M"``, ``"W"``, ``"mu"``), stacked, or None."""
        n = self._counts[name]
        if not n:
            return None
        buf = self._buffers[name]
        return buf if n == buf.shape[0] else buf[:n].clone()

    def _products(self) -> torch.Tensor | None:
        """``M = L Lᵀ`` of every saved factor (:func:`gram`; over the factors' own slots, 64 at a time, when they
        have ``r ≤ p`` columns), else the saved ``M``."""
        Ls = self.saved("L")
        if Ls is None:
            return self.saved("M")
        r = self._factor_cols
        if Ls.shape[-1] != Ls.shape[-2] or r is None:
            return gram(Ls)
        src = torch.empty((min(Ls.shape[0], 64), Ls.shape[1], r), dtype=Ls.dtype, device=Ls.device)
        for j in range(0, Ls.shape[0], 64):  # the factors copied out of their slots (one reused buffer)
            L = src[: Ls[j : j + 64].shape[0]]
            gram(L.copy_(Ls[j : j + 64, :, :r]), out=Ls[j : j + 64])
        return Ls

    def trajectory(self, *, lr: float, dtype, device, status: int, message: str, info: dict) -> Trajectory:
        """The trajectory: ``t = η · step`` (``lr`` η), the stacked states (``None`` where none were saved)."""
        step = torch.tensor(self.step, dtype=torch.long)
        return Trajectory(
            t=step.to(dtype=dtype, device=device) * lr,
            loss=torch.tensor(self.loss, dtype=dtype, device=device),
            step=step,
            M=self._products(),
            W=self.saved("W"),
            mu=self.saved("mu"),
            status=status,
            message=message,
            info=info,
        )


#: rows per block of :func:`gram` (blocks below the diagonal are the transposes of those above it)
GRAM_BLOCK = 256


def gram(Ls: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``M = L Lᵀ`` of each factor of ``Ls`` (``K × p × r``), exactly symmetric, in equal row blocks of
    at most :data:`GRAM_BLOCK` rows: only the products on and above the block diagonal (``b (b + 1) / 2`` of the ``b²``
    block products of ``L Lᵀ`` with ``b`` blocks; ``p = 1025``: 15 of 25), the blocks below the diagonal their
    transposes, each diagonal block symmetrised ``½ (B + Bᵀ)``; 64 factors at a time (small temporaries).
    ``out`` (``K × p × p``, not overlapping ``Ls``) receives the result when given.  For ``p > GRAM_BLOCK``,
    factors with at most one non-zero per row and per column (the factor of ``M(0) = εI``) are multiplied out
    as ``diag(Σ_k L_ik²)`` — the same numbers, without the ``O(p² r)`` products."""
    K, p, _ = Ls.shape
    M = torch.empty((K, p, p), dtype=Ls.dtype, device=Ls.device) if out is None else out
    if p <= GRAM_BLOCK:  # one block: one batched product, symmetrised in chunks in place (one reused temporary)
        torch.bmm(Ls, Ls.transpose(1, 2), out=M)
        tmp = torch.empty((min(K, 64), p, p), dtype=M.dtype, device=M.device)
        for j in range(0, K, 64):
            blk = M[j : j + 64]
            t = tmp[: blk.shape[0]]
            blk.add_(t.copy_(blk.transpose(1, 2))).mul_(0.5)
        return M
    n = -(-p // GRAM_BLOCK)  # blocks of equal size, at most GRAM_BLOCK rows
    spans = [(p * i // n, p * (i + 1) // n) for i in range(n)]
    diagonal = torch.count_nonzero(Ls, dim=(1, 2)) <= min(p, Ls.shape[2])  # candidates, checked below
    if bool(diagonal.any()):  # ≤ one non-zero per row and per column
        nz = Ls[diagonal] != 0
        diagonal[diagonal.clone()] = (nz.sum(-1).amax(-1) <= 1) & (nz.sum(-2).amax(-1) <= 1)
    if bool(diagonal.any()):  # e.g. the factor of εI: L Lᵀ = diag(row norms²), exactly
        for k in diagonal.nonzero().flatten().tolist():
            M[k].zero_().diagonal().copy_((Ls[k] * Ls[k]).sum(-1))
        for k in (~diagonal).nonzero().flatten().tolist():
            gram(Ls[k : k + 1], out=M[k : k + 1])
        return M
    for j in range(0, K, 64):
        L, out = Ls[j : j + 64], M[j : j + 64]
        for i, (a, b) in enumerate(spans):
            for c, d in spans[i:]:
                B = torch.bmm(L[:, a:b], L[:, c:d].transpose(1, 2))
                if c == a:
                    out[:, a:b, a:b] = B.add_(B.transpose(1, 2).clone()).mul_(0.5)
                else:
                    out[:, a:b, c:d] = B
                    out[:, c:d, a:b] = B.transpose(1, 2)
    return M
