r"""The structure operator of a module without the ``N × C × p × p`` array (used by :func:`~nqf.modules.from_module`).

The closed dynamics touch the structure matrices only through products with a
few directions, and each product is a directional derivative of the one-unit
function ``f_x(w)`` (all other units at zero), taken at ``w = 0``:

* ``𝒜(L Lᵀ)_{n,c} = Σ_k l_kᵀ A_c(x_n) l_k = ½ Σ_k ∂_s∂_t f_{x_n,c}((s + t) l_k)``: a jvp of a jvp
  along each column ``l_k`` (:meth:`MatrixFreeStructure.forward_factor`);
* ``(𝒜^*(R) L)_{:,k} = ½ ∇_u Σ_{n,c} R_{n,c} ∂_t f_{x_n,c}(u + t l_k)``: the gradient (a vjp with
  cotangent ``R``) of a jvp along ``l_k`` (:meth:`MatrixFreeStructure.adjoint_apply`);
* ``𝒜(M)`` for symmetric ``M = Σ_j λ_j v_j v_jᵀ`` (eigendecomposition): ``Σ_j λ_j v_jᵀ A v_j``;
  ``𝒜^*(R) = 𝒜^*(R) I`` (``p`` columns; ``p × p`` is small, ``N × p × p`` is not).

Both kinds of matrices are written through one two-argument function ``h(u, v; x)`` with
``H = ∂²h/∂u∂v (0, 0)`` and structure matrix ``S = ¼ (H + Hᵀ)``, so that ``Tr[M S] = ½ Tr[M H]``
for symmetric ``M``: ``h(u, v) = f(w_1 = u + v)`` gives ``H = ∇²_{w_1} f`` and ``S = A``;
``h(u, v) = f(w_1 = u, w_2 = v)`` gives ``H = ∂²f/∂w_1∂w_2`` and ``S = B`` (the cross term; here
``Hᵀ l`` is the gradient in ``v`` of a jvp in ``u``, computed separately so that ``S`` is exactly
the symmetrised matrix of the dense path).  Samples are vectorised with :func:`torch.func.vmap`
in chunks sized to a memory budget from the activations one forward pass saves; the operator holds
the module copy and the inputs, ``O(N · input size)``, never anything of size ``N·p²``.

The data subspace (the span of the ranges of all ``A_c(x_n)``) is found by a randomized range
finder: columns ``𝒜^*(R_k) l_k`` for independent Gaussian ``R_k``, ``l_k``.  Every such column
lies in the span ``V``; and if ``U ⊊ V``, the set of ``(R, l)`` with ``Σ R_{n,c} A_{n,c} l ∈ U``
is a proper linear subspace (there is some ``n, c, l`` with ``A_{n,c} l ∉ U``), so a random
column adds a direction with probability one: ``k`` columns add ``min(k, dim V − dim U)``.  Batches
are added until one adds fewer directions than it has columns (then ``V`` is exhausted).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable

import torch
from torch.func import grad, jacrev, jvp, vmap

from .._validation import one_of, tolerance
from ..errors import InvalidParameterError
from ..structure import StructureOperator
from ._narrowed import evaluation_mode
from ._unit_function import UnitFunction

__all__ = ["MatrixFreeStructure", "COLUMN_BLOCK"]

#: Columns (directions) differentiated together in one vectorised pass.
COLUMN_BLOCK = 32


def _forward_mode_missing(exc: NotImplementedError) -> bool:
    """A kernel or ``autograd.Function`` without a forward-mode (jvp) rule."""
    return "forward" in str(exc).lower() or "jvp" in str(exc).lower()


def _with_fallback(method: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Run ``method``; when a layer has no forward-mode rule, switch the operator to reverse over reverse."""

    @functools.wraps(method)
    def run(self: MatrixFreeStructure, *args, **kwargs) -> torch.Tensor:
        try:
            return method(self, *args, **kwargs)
        except NotImplementedError as exc:
            if self.reverse or not _forward_mode_missing(exc):
                raise
            self.reverse = True
            return method(self, *args, **kwargs)

    return run


def _saved_bytes(fn: UnitFunction, x: torch.Tensor) -> int:
    """Bytes of the activations one forward pass of ``fn`` saves for its backward pass (one sample)."""
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    w = torch.zeros(fn.p, dtype=x.dtype, device=x.device, requires_grad=True)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), evaluation_mode():
        fn({0: w}, x)
    return saved[0] + fn.p * x.element_size()


class MatrixFreeStructure(StructureOperator):
    """Structure operator of a module evaluated by directional derivatives, never stored as matrices.

    Parameters
    ----------
    fn : UnitFunction
        The module (or a checked reduced copy) as a function of units 0 (and 1), all others zero.
    X : torch.Tensor, shape (N, ...)
        Samples.
    pair : bool
        ``False``: ``A = ½ ∇²_{w_1} f``; ``True``: the cross term ``B = ½ ∂²f/∂w_1∂w_2`` (needs two units).
    n_outputs : int, optional
        ``C``; computed from one forward pass when omitted.
    budget : int
        Bytes one vectorised chunk may use (sets the samples per chunk).
    chunk_size : int, optional
        Samples per chunk, overriding the budget.
    """

    def __init__(
        self,
        fn: UnitFunction,
        X: torch.Tensor,
        *,
        pair: bool = False,
        n_outputs: int | None = None,
        budget: int = 256 * 2**20,
        chunk_size: int | None = None,
    ):
        if X.ndim < 1 or X.shape[0] == 0:
            raise InvalidParameterError(f"`X` must have a leading sample axis with N ≥ 1; found {tuple(X.shape)}")
        if pair and fn.layout.m < 2:
            raise InvalidParameterError(
                f"`fn` must hold at least 2 units for the cross term (pair=True); found {fn.layout.m}"
            )
        if n_outputs is None:
            with evaluation_mode(), torch.no_grad():
                n_outputs = fn({}, X[0]).numel()
        super().__init__(fn.p, X.shape[0], n_outputs, X.dtype, X.device)
        self.fn, self.X, self.pair = fn, X, bool(pair)
        self.budget, self.chunk_size = int(budget), chunk_size
        self._per_column: int | None = None
        #: Reverse over reverse instead of forward over reverse (set once a layer lacks forward-mode rules).
        self.reverse = False

    # ------------------------------------------------------------ derivatives of one sample
    def _h(self, u: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.fn({0: u, 1: v}, x) if self.pair else self.fn({0: u + v}, x)

    def _curvature(self, x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """``dᵀ H_c(x) d`` for every output ``c`` (shape ``(C,)``): a jvp in ``u`` of a jvp in ``v``."""
        zero = torch.zeros_like(d)
        if self.reverse:  # the same contraction by two reverse passes (C cotangents each)

            def inner(u):
                return jacrev(lambda v: self._h(u, v, x))(zero) @ d

            return jacrev(inner)(zero) @ d
        return jvp(lambda u: jvp(lambda v: self._h(u, v, x), (zero,), (d,))[1], (zero,), (d,))[1]

    def _pulled(self, xs: torch.Tensor, R: torch.Tensor, d: torch.Tensor, swap: bool) -> torch.Tensor:
        """``Σ_{n,c} R_{n,c} H_c(x_n) d`` (``Hᵀ`` when ``swap``), shape ``(p,)``.

        Forward over reverse: the jvp along ``d`` (in ``v``) of the gradient in ``u`` of ``Σ R h``
        (a vjp with cotangent ``R``), i.e. ``∂_v ∇_u ⟨R, h(u, v)⟩ · d = H d``.
        """
        zero = torch.zeros_like(d)

        def h(a, b, x):
            return self._h(b, a, x) if swap else self._h(a, b, x)

        def pulled(v):
            return grad(lambda u: (vmap(lambda x: h(u, v, x))(xs) * R).sum())(zero)

        if self.reverse:  # ∇_u ⟨∇_v ⟨R, h⟩, d⟩
            return grad(lambda u: grad(lambda v: (vmap(lambda x: h(u, v, x))(xs) * R).sum())(zero) @ d)(zero)
        return jvp(pulled, (zero,), (d,))[1]

    # -------------------------------------------------------------------- chunking
    def _chunks(self, n_columns: int):
        """Sample slices of the size that keeps ``n_columns`` directions within the budget."""
        if self._per_column is None:
            self._per_column = _saved_bytes(self.fn, self.X[0])
        if self.chunk_size is not None:
            size = int(self.chunk_size)
        else:
            size = self.budget // max(1, 4 * n_columns * self._per_column)
        size = max(1, min(self.n_samples, size))
        return [slice(s, min(s + size, self.n_samples)) for s in range(0, self.n_samples, size)]

    def _column_blocks(self, r: int):
        return [slice(s, min(s + COLUMN_BLOCK, r)) for s in range(0, r, COLUMN_BLOCK)]

    # ----------------------------------------------------------------- the products
    @_with_fallback
    def _weighted_forward(self, V: torch.Tensor, lam: torch.Tensor | None) -> torch.Tensor:
        """``Σ_k λ_k v_kᵀ S_c(x_n) v_k``, shape ``(N, C)`` (``λ = 1`` when ``lam`` is None)."""
        out = torch.zeros(self.n_samples, self.n_outputs, dtype=self.dtype, device=self.device)
        if V.shape[1] == 0:
            return out
        per_sample = vmap(vmap(self._curvature, in_dims=(None, 1)), in_dims=(0, None))
        with evaluation_mode():
            for cols in self._column_blocks(V.shape[1]):
                Vb = V[:, cols]
                w = None if lam is None else lam[cols]
                for sl in self._chunks(Vb.shape[1]):
                    q = per_sample(self.X[sl], Vb)  # (n, r, C)
                    out[sl] += q.sum(1) if w is None else torch.einsum("nrc,r->nc", q, w)
        return 0.5 * out

    @_with_fallback
    def _adjoint_columns(self, R: torch.Tensor, L: torch.Tensor, per_column: bool = False) -> torch.Tensor:
        """Column ``k``: ``Σ_{n,c} R_{n,c} S_c(x_n) l_k`` (``R[k]`` when ``per_column``), shape ``(p, r)``."""
        out = torch.zeros(self.p, L.shape[1], dtype=self.dtype, device=self.device)
        if L.shape[1] == 0:
            return out
        sides = (False, True) if self.pair else (False,)
        weight = 0.25 if self.pair else 0.5
        with evaluation_mode():
            for cols in self._column_blocks(L.shape[1]):
                Lb = L[:, cols]
                for sl in self._chunks(Lb.shape[1]):
                    Rb = R[cols, sl] if per_column else R[sl]
                    for swap in sides:
                        f = vmap(self._pulled, in_dims=(None, 0 if per_column else None, 1, None), out_dims=1)
                        out[:, cols] += f(self.X[sl], Rb, Lb, swap)
        return weight * out

    # ------------------------------------------------------------------ operator hooks
    def forward_factor(self, L: torch.Tensor) -> torch.Tensor:
        return self._weighted_forward(L, None)

    def adjoint_apply(self, R: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
        return self._adjoint_columns(R, L)

    def forward_unchecked(self, M: torch.Tensor) -> torch.Tensor:
        lam, V = torch.linalg.eigh(M)
        big = float(lam.abs().max()) if lam.numel() else 0.0
        keep = lam.abs() > torch.finfo(self.dtype).eps * big if big > 0 else torch.zeros_like(lam, dtype=torch.bool)
        return self._weighted_forward(V[:, keep], lam[keep])

    def adjoint_unchecked(self, R: torch.Tensor) -> torch.Tensor:
        G = self._adjoint_columns(R, torch.eye(self.p, dtype=self.dtype, device=self.device))
        return 0.5 * (G + G.T)

    def _forward(self, M):
        return self.forward_unchecked(M)

    def _adjoint(self, R):
        return self.adjoint_unchecked(R)

    def _dense_one(self, x: torch.Tensor, eye: torch.Tensor) -> torch.Tensor:
        zero = torch.zeros(self.p, dtype=self.dtype, device=self.device)

        def column(d):  # H d for every output: (C, p)
            return jacrev(lambda u: jvp(lambda v: self._h(u, v, x), (zero,), (d,))[1])(zero)

        if self.reverse:
            H = jacrev(lambda u: jacrev(lambda v: self._h(u, v, x))(zero))(zero)  # (C, p, p)
        else:
            H = vmap(column, in_dims=1, out_dims=2)(eye)  # (C, p, p): [c, i, k] = ∂²h/∂u_i∂v_k
        return 0.25 * (H + H.transpose(-1, -2))

    @_with_fallback
    def _dense(self) -> torch.Tensor:
        """All structure matrices ``(N, C, p, p)`` — memory ``N·C·p²``; for checks on small cases only."""
        eye = torch.eye(self.p, dtype=self.dtype, device=self.device)
        with evaluation_mode():
            parts = [vmap(self._dense_one, in_dims=(0, None))(self.X[sl], eye) for sl in self._chunks(self.p)]
        return torch.cat(parts, 0)

    def _take(self, index):
        sub = MatrixFreeStructure(
            self.fn,
            self.X[index],
            pair=self.pair,
            n_outputs=self.n_outputs,
            budget=self.budget,
            chunk_size=self.chunk_size,
        )
        sub.reverse = self.reverse
        return sub

    def _to(self, dtype, device):
        fn = self.fn
        if dtype != self.dtype or torch.device(device) != self.device:
            module = copy.deepcopy(fn.module).to(dtype=dtype, device=device)
            fn = UnitFunction(module, fn.layout, fn.output)
        X = self.X.to(dtype=dtype, device=device)
        new = MatrixFreeStructure(
            fn, X, pair=self.pair, n_outputs=self.n_outputs, budget=self.budget, chunk_size=self.chunk_size
        )
        new.reverse = self.reverse
        return new

    # -------------------------------------------------------------- the data subspace
    def data_subspace(self, *, method: str = "auto", rtol: float | None = None, seed: int = 0) -> torch.Tensor:
        """Orthonormal basis of the span of all ``A_c(x_n)`` (and of ``b``, ``B`` without ZGZ).

        ``method="dense"`` stacks :meth:`dense` (small cases); ``"auto"`` and ``"probe"`` run the
        randomized range finder of the module docstring (memory ``O(N C + p r)`` plus one chunk).
        """
        if one_of("method", method, ("auto", "dense", "probe")) == "dense":
            return super().data_subspace(method="dense", rtol=rtol, seed=seed)  # the dense stack of the base class
        rtol = tolerance(self.dtype) * math.sqrt(max(self.p, 1)) if rtol is None else float(rtol)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        ops: list[MatrixFreeStructure] = [self]
        if isinstance(self.cross, MatrixFreeStructure):
            ops.append(self.cross)
        cols = [self.linear.reshape(-1, self.p).T] if self.linear is not None else []
        U = _orthonormal(torch.cat(cols, 1), rtol) if cols else self.X.new_zeros(self.p, 0)
        for op in ops:
            U = op._range_finder(U, rtol, gen)
        return U

    def _range_finder(self, U: torch.Tensor, rtol: float, gen: torch.Generator) -> torch.Tensor:
        """Extend ``U`` to the span of ``U`` and all ranges ``S_c(x_n)``, by random columns ``𝒜*(R_k) l_k``.

        Until the span is exhausted each random column adds a direction with probability one
        (module docstring), so the first batch that adds fewer directions than it has columns
        ends the search.
        """
        batch = 8
        while U.shape[1] < self.p:
            R = torch.randn(batch, self.n_samples, self.n_outputs, generator=gen, dtype=self.dtype)
            L = torch.randn(self.p, batch, generator=gen, dtype=self.dtype)
            cols = self._adjoint_columns(R.to(self.device), L.to(self.device), per_column=True)
            U_new = _orthonormal(torch.cat([U, cols], 1), rtol)
            done = U_new.shape[1] < U.shape[1] + batch
            U, batch = U_new, max(batch, U_new.shape[1] // 2)
            if done:
                break
        return U


def _orthonormal(cols: torch.Tensor, rtol: float) -> torch.Tensor:
    """Orthonormal basis of the span of ``cols`` (each column rescaled to unit norm first)."""
    if cols.shape[1] == 0:
        return cols
    cols = cols / cols.norm(dim=0, keepdim=True).clamp_min(torch.finfo(cols.dtype).tiny)
    U, s, _ = torch.linalg.svd(cols, full_matrices=False)
    if s.numel() == 0 or float(s[0]) == 0.0:
        return U[:, :0]
    return U[:, : int((s > rtol * s[0]).sum())]


def _first_order(
    fn: UnitFunction, fn2: UnitFunction, X: torch.Tensor, v: torch.Tensor, chunk: int, keep: bool, reverse: bool
):
    """``f(0)`` (N, C), ``max |b|``, ``max |H v|``, ``max |H₁₂ v|`` and, when ``keep``, ``b`` (N, C, p).

    One forward-over-reverse pass per chunk: the gradient ``b = ∇_{w_1} f(0)`` with its jvp along
    ``v`` (``H v``), and ``(∂²f/∂w_1∂w_2) v`` on the two-unit function; only maxima are kept
    unless ``keep`` (so the ``N × C × p`` gradient is held only when it is needed).  With
    ``reverse`` the two products are reverse over reverse (layers without forward-mode rules).
    """
    zero = torch.zeros_like(v)

    def value(w, x):
        out = fn({0: w}, x)
        return out, out

    def first_reverse(x):
        g, out = jacrev(value, has_aux=True)(zero, x)
        hv = jacrev(lambda w: jacrev(value, has_aux=True)(w, x)[0] @ v)(zero)
        cross = jacrev(lambda w0: jacrev(lambda w1: fn2({0: w0, 1: w1}, x))(zero) @ v)(zero)
        return out, g, hv, cross

    def first(x):
        if reverse:
            return first_reverse(x)
        res = jvp(lambda w: jacrev(value, has_aux=True)(w, x), (zero,), (v,))
        (g, out), (hv, _) = res[0], res[1]
        cross = jvp(lambda w1: jacrev(lambda w0: fn2({0: w0, 1: w1}, x))(zero), (zero,), (v,))[1]
        return out, g, hv, cross

    f0, grads, maxima = [], [], torch.zeros(3, dtype=X.dtype)
    with evaluation_mode():
        for s in range(0, X.shape[0], chunk):
            out, g, hv, cross = vmap(first)(X[s : s + chunk])
            f0.append(out)
            if keep:
                grads.append(g)
            found = torch.stack([g.abs().max(), hv.abs().max(), cross.abs().max()]).cpu()
            maxima = torch.maximum(maxima, found)
    b = torch.cat(grads, 0) if keep else None
    return torch.cat(f0, 0), maxima.tolist(), b


def matrix_free_operator(
    fn: UnitFunction,
    fn2: UnitFunction,
    X: torch.Tensor,
    *,
    tol: float,
    seed: int,
    budget: int,
    chunk_size: int | None = None,
) -> tuple[MatrixFreeStructure, float, float]:
    """The matrix-free operator of :func:`~nqf.modules.from_module` with its zero-gradient terms.

    ``b`` and the cross term are found from probes along a random ``v``: ``b`` is kept (as the
    ``(N, C, p)`` array every operator carries) when ``max |b| > tol · scale``, and the cross term
    (a :class:`MatrixFreeStructure` of the two-unit function) when ``max |H₁₂ v| > 0.1 · tol ·
    scale · max |v|``, with ``scale = max(max |H v| / max |v|, max |b|)``.

    Returns
    -------
    (MatrixFreeStructure, float, float)
        The operator (``offset`` from ``fn``), ``max |b|`` and ``max |H₁₂ v| / max |v|``.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed + 3)
    v = torch.randn(fn.p, generator=gen, dtype=X.dtype).to(X.device)
    vmax = float(v.abs().max())
    if chunk_size is not None:
        chunk = int(chunk_size)
    else:
        with evaluation_mode(), torch.no_grad():
            C = fn({}, X[0]).numel()
        chunk = budget // max(1, 8 * (C + 2) * _saved_bytes(fn2, X[0]))
    chunk = max(1, min(X.shape[0], chunk))
    reverse = False
    try:
        f0, (b_max, hv_max, cross_max), _ = _first_order(fn, fn2, X, v, chunk, False, reverse)
    except NotImplementedError as exc:
        if not _forward_mode_missing(exc):
            raise
        reverse = True
        f0, (b_max, hv_max, cross_max), _ = _first_order(fn, fn2, X, v, chunk, False, reverse)
    scale = max(hv_max / vmax, b_max, 1e-300)
    op = MatrixFreeStructure(fn, X, n_outputs=f0.shape[1], budget=budget, chunk_size=chunk_size)
    op.offset, op.reverse = f0, reverse
    if b_max > tol * scale:
        op.linear = _first_order(fn, fn2, X, v, chunk, True, reverse)[2]
    if cross_max > 0.1 * tol * scale * vmax:
        cross = MatrixFreeStructure(fn2, X, pair=True, n_outputs=op.n_outputs, budget=budget, chunk_size=chunk_size)
        cross.reverse = reverse
        op.cross = cross
    return op, b_max, cross_max / vmax
