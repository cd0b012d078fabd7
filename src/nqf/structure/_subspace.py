r"""The data subspace of a structure operator and compression onto it (docs/theory.md §3.8).

The data subspace is ``U = span ⋃_{n,c} range A_c(x_n)`` (plus the ranges of the
linear term ``b`` and of the cross matrices ``B`` when the zero-gradient condition
fails).  With ZGZ every ``G = (1/N) 𝒜*(r)`` lies in ``Sym(U)``, so in the
orthonormal basis ``Q = [U, U⊥]`` one GD step is block diagonal,
``I − 2ηG − ηλI = diag(T_r, (1 − ηλ) I)``: only the ``r × r`` block of ``M``
feeds back into the outputs, the ``U⊥`` rows of every unit just decay by the
scalar weight-decay factor (they stay constant without weight decay), and
``Tr[M A] = Tr[(UᵀMU)(UᵀAU)]``.

Two ways to find ``U``:

* ``"dense"``: stack all ``A_c(x_n)`` side by side (``p × NCp``) and take an SVD —
  exact, costs ``O(N C p²)`` memory;
* ``"probe"``: the ranges of ``𝒜*(R)`` for random Gaussian ``R``.  A single
  ``𝒜*(R) = Σ R_n A_n`` can have a smaller range than the union (e.g. the
  space ``[[0, a, b], [a, 0, 0], [b, 0, 0]]`` is rank 2 for every ``(a, b)``
  but spans ``R³``), so probes are added in batches until a batch adds no new
  direction.  Uses only ``op.adjoint`` (``O(N p)`` per probe for structured
  operators); correct with probability one.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from .._validation import one_of, tolerance


class _Spanned(Protocol):
    """What :func:`data_subspace` reads of a structure operator (``nqf.structure.StructureOperator`` is one; this
    module does not import it, which imports this one)."""

    @property
    def p(self) -> int: ...

    @property
    def n_samples(self) -> int: ...

    @property
    def n_outputs(self) -> int: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def linear(self) -> torch.Tensor | None: ...

    @property
    def cross(self) -> _Spanned | None: ...

    def _dense(self) -> torch.Tensor: ...

    def adjoint_unchecked(self, R: torch.Tensor) -> torch.Tensor: ...


__all__ = ["data_subspace", "DENSE_LIMIT"]

#: Above this many entries ``N·C·p²`` the dense array of structure matrices is not formed.
DENSE_LIMIT = 20_000_000


def _orth(cols: torch.Tensor, rtol: float) -> torch.Tensor:
    """Orthonormal basis of the column span of ``cols`` (p × k), rank by relative tolerance."""
    if cols.shape[1] == 0:
        return cols[:, :0]
    U, s, _ = torch.linalg.svd(cols, full_matrices=False)
    if s.numel() == 0 or float(s[0]) == 0.0:
        return U[:, :0]
    r = int((s > rtol * s[0]).sum())
    return U[:, :r]


def data_subspace(op: _Spanned, *, method: str = "auto", rtol: float | None = None, seed: int = 0) -> torch.Tensor:
    """Orthonormal basis of the data subspace of ``op``: the body of :meth:`StructureOperator.data_subspace`,
    which documents the parameters and the result (``op``: anything with the members of ``_Spanned``)."""
    one_of("method", method, ("auto", "dense", "probe"))
    p, N, C = op.p, op.n_samples, op.n_outputs
    rtol = tolerance(op.dtype) * math.sqrt(max(p, 1)) if rtol is None else float(rtol)
    if method == "auto":
        method = "dense" if N * C * p * p <= DENSE_LIMIT else "probe"
    extra = []
    if op.linear is not None:
        extra.append(op.linear.reshape(-1, p).T)
    if method == "dense":
        A = op._dense().reshape(N * C, p, p)
        blocks = [A.permute(1, 0, 2).reshape(p, N * C * p)]
        if op.cross is not None:
            B = op.cross._dense().reshape(N * C, p, p)
            blocks.append(B.permute(1, 0, 2).reshape(p, N * C * p))
        return _orth(torch.cat(blocks + extra, 1), rtol)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    ops = [op] + ([op.cross] if op.cross is not None else [])
    cols = torch.cat(extra, 1) if extra else torch.zeros(p, 0, dtype=op.dtype, device=op.device)
    U = _orth(cols, rtol)
    batch = 4
    while True:
        new = []
        for o in ops:
            for _ in range(batch):
                R = torch.randn(N, C, generator=gen, dtype=op.dtype).to(op.device)
                new.append(o.adjoint_unchecked(R))
        cols = torch.cat([U * 1.0] + new, 1)
        # rescale each probe so that no single one dominates the rank decision
        cols = cols / cols.norm(dim=0, keepdim=True).clamp_min(torch.finfo(op.dtype).tiny)
        U_new = _orth(cols, rtol)
        if U_new.shape[1] == U.shape[1] or U_new.shape[1] == p:
            return U_new
        U = U_new
