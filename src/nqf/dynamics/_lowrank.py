r"""The large block of the factor on the hot path of :func:`~nqf.dynamics.simulate` (:mod:`nqf.dynamics._fast`).

A GD step changes the large block ``L_r`` (``p2 × r``) of the factor ``L = [L_l; L_r]`` by a product of rank
``p1`` (the number of outputs of an MLP): ``L_r ← d L_r + α K̄ᵀ L_l``.  Applied to a dense ``L_r`` this reads and
writes the whole block every step, beside the two reads of it for ``L_r L_lᵀ`` and ``K̄ L_r``.  Here the block
is kept as

    L_r = base + Q Z,        Q: p2 × m (the steps' K̄ᵀ),   Z: m × r (the steps' α L_l),

with the updates appended to ``Q`` and ``Z`` (``O((p2 + r) p1)`` a step) and folded into the base only when
``m`` reaches a capacity, in one blocked product (BLAS-3 instead of ``cap / p1`` rank-``p1`` updates).  The
products of a step read the base once each and ``Q``, ``Z`` twice.  The base is

* **a diagonal start** ``[0 | diag(δ)]`` (``M(0) = εI``, the full-rank start): its products are ``O(p2 p1)``
  and nothing of size ``p2 × r`` is read until the first fold, after ``p2 / (2 p1)`` steps — the
  early plateau of a full-rank start costs the two passes over the data plus ``O((p2 + r) m)``.  A save
  before then writes ``[0 | diag(δ)] + Q Z`` into the buffer (one product) and the collecting goes on;
* **a dense block** (the caller's buffer, scaled by ``s``): after the first fold, or from the start when the
  start is not diagonal.  Then a step reads the block twice, and the fold every ``cap / p1`` steps reads
  and writes it once.

With capacity 0 the block is updated in place every step (``addmm_``), as before this module existed; small
blocks (that fit in the cache) and re-orthogonalised factors use that.  Every state agrees with the dense
update to round-off: the sum ``base + Q Z`` is the same sum of the same rank-``p1`` terms.
"""

from __future__ import annotations

import torch

__all__ = ["RightBlock", "LOWRANK_MIN", "FOLD_COLUMNS"]

#: elements of ``L_r`` from which the low-rank updates are kept (smaller blocks live in the cache: dense is faster)
LOWRANK_MIN = 1 << 16

#: columns of ``Q`` collected before a fold into a dense base (measured in benchmarks/bench_simulate.py)
FOLD_COLUMNS = 64


class RightBlock:
    """``L_r = base + Q Z`` (module docstring) on the caller's buffer ``Lr`` (``p2 × r``), which holds ``L_r(0)``.

    ``lowrank=False`` keeps the dense in-place update (capacity 0).  :meth:`sync` makes ``Lr`` equal the
    current ``L_r``; read ``Lr`` only after it.
    """

    def __init__(self, Lr: torch.Tensor, p1: int, lowrank: bool = True):
        p2, r = Lr.shape
        self.buf, self.p1, self.c0 = Lr, p1, r - p2
        self.s, self.m, self.valid = 1.0, 0, True
        lowrank = lowrank and p2 * r >= LOWRANK_MIN
        diag_cap = (p2 // 2) // p1 * p1  # room for at least one step, else no implicit diagonal start
        self.delta = _diagonal_start(Lr) if lowrank and diag_cap else None
        self.dense_cap = max(FOLD_COLUMNS // p1, 1) * p1 if lowrank else 0
        self.cap = diag_cap if self.delta is not None else self.dense_cap
        cap = max(self.cap, self.dense_cap)
        self.Q, self.Z = Lr.new_empty(p2, cap), Lr.new_empty(cap, r)

    def times_T(self, Ll: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``L_r L_lᵀ`` (``p2 × p1``) into ``out``."""
        if self.delta is not None:
            torch.mul(Ll[:, self.c0 :].T, self.delta[:, None], out=out)
        else:
            torch.mm(self.buf, Ll.T, out=out)
            if self.s != 1.0:
                out.mul_(self.s)
        if self.m:
            out.addmm_(self.Q[:, : self.m], self.Z[: self.m] @ Ll.T)
        return out

    def stepped_left(self, Kb: torch.Tensor, Ll: torch.Tensor, decay: float, alpha: float, out: torch.Tensor):
        """``decay · L_l + alpha · K̄ L_r`` (the next ``L_l``, ``p1 × r``) into ``out``."""
        if self.delta is not None:
            torch.mul(Ll, decay, out=out)
            out[:, self.c0 :].addcmul_(Kb, self.delta, value=alpha)
        else:
            torch.addmm(Ll, Kb, self.buf, beta=decay, alpha=alpha * self.s, out=out)
        if self.m:
            out.addmm_(Kb @ self.Q[:, : self.m], self.Z[: self.m], alpha=alpha)
        return out

    def update(self, Kbt: torch.Tensor, Ll: torch.Tensor, decay: float, alpha: float) -> None:
        """``L_r ← decay · L_r + alpha · K̄ᵀ L_l`` (``Kbt`` is ``K̄ᵀ``, ``p2 × p1``)."""
        if self.cap == 0:
            self.buf.addmm_(Kbt, Ll, beta=decay, alpha=alpha)
            return
        if decay != 1.0:
            if self.delta is not None:
                self.delta.mul_(decay)
            else:
                self.s *= decay
            self.Z[: self.m].mul_(decay)
        if self.m + self.p1 > self.cap:
            self._fold()
        m, p1 = self.m, self.p1
        self.Q[:, m : m + p1] = Kbt
        torch.mul(Ll, alpha, out=self.Z[m : m + p1])
        self.m = m + p1
        self.valid = False  # after a fold (which leaves the buffer valid): the new term is not in it

    def sync(self) -> torch.Tensor:
        """The buffer, made equal to the current ``L_r``: a dense base folds what was collected; a diagonal start
        writes ``[0 | diag(δ)] + Q Z`` into it and keeps collecting (a save costs one product, ``p2 m r``)."""
        if not self.valid:
            if self.delta is not None:
                self._materialize()
            else:
                self._fold()
        return self.buf

    def _materialize(self) -> None:
        """``[0 | diag(δ)] + Q Z`` into the buffer (a diagonal start)."""
        assert self.delta is not None
        self.buf.zero_()
        self.buf[:, self.c0 :].diagonal().copy_(self.delta)
        if self.m:
            self.buf.addmm_(self.Q[:, : self.m], self.Z[: self.m])
        self.valid = True

    def _fold(self) -> None:
        """``base ← base + Q Z`` into the buffer; the base is dense from here on, ``s = 1``, ``m = 0``."""
        if self.delta is not None:
            self._materialize()
            self.delta, self.cap = None, self.dense_cap
        elif self.m:
            self.buf.addmm_(self.Q[:, : self.m], self.Z[: self.m], beta=self.s)
        elif self.s != 1.0:
            self.buf.mul_(self.s)
        self.s, self.m, self.valid = 1.0, 0, True


def _diagonal_start(Lr: torch.Tensor) -> torch.Tensor | None:
    """``δ`` when ``Lr = [0 | diag(δ)]`` exactly (the factor of a diagonal ``M(0)``, e.g. ``εI``), else None."""
    p2, r = Lr.shape
    if r < p2:
        return None
    d = Lr[:, r - p2 :].diagonal()
    if int(torch.count_nonzero(Lr)) != int(torch.count_nonzero(d)):
        return None
    return d.clone()
