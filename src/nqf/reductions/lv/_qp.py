r"""Active-set solver for the non-negative quadratic program of the Lotka–Volterra loss.

Minimises ``ℓ(z) = −βᵀz + ½ zᵀCz`` over ``z ≥ 0`` for a symmetric positive
semi-definite ``C`` (possibly singular).  This is the Lawson–Hanson active-set
method written on the quadratic form instead of a least-squares factor: the
*passive set* ``P`` (modes with ``z_k > 0``) carries the unconstrained minimiser
of ``ℓ`` restricted to ``P`` through an incrementally updated *partial* (pivoted)
Cholesky factor of ``C`` with the modes of ``P`` as pivots (see :class:`ActiveSetQP`).
Adding a mode whose column is linearly dependent on ``P`` (``C_PP`` would become singular)
is handled by a ray step along the null direction of ``C_{P∪k}``, on which the loss
decreases linearly, until a mode of ``P`` hits zero.

The factor has a row for every mode: its block ``L_{IP}`` on the inactive modes ``I`` gives
the Schur pivot of a mode about to join (``C_kk − ‖L_{kP}‖²``) without any product, and the
negative gradient ``β − Cz`` outside ``P`` — the growth rates the ε → 0 limit
(:func:`nqf.reductions.lv.limit`, docs/theory.md §4.3) needs after every event — is updated
from its newest column in ``O(K)``.  Adding a mode costs one matrix-vector product with
``L_{IP}`` (``O(|I|·|P|)``, one BLAS call) and one packed triangular solve with ``L_PP``
(``O(|P|²)``); removing one, Givens rotations of the factor's columns (``O(K·|P|)``).

The same object drives the ε → 0 limit, where each join event adds one mode to ``P``
starting from the previous restricted optimum, and the final state of a dense
``LotkaVolterra``.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import get_blas_funcs, solve_triangular

from ...errors import NQFError

(dtpsv,) = get_blas_funcs(["tpsv"], dtype=np.float64)  # packed triangular solve


class UnboundedError(NQFError, ValueError):
    """The loss ``−βᵀz + ½zᵀCz`` is unbounded below on ``z ≥ 0``."""


class ActiveSetQP:
    r"""Incremental active-set state for ``min_{z ≥ 0} −βᵀz + ½zᵀCz``.

    The modes are kept in *slots*: slots ``0 … |P|−1`` hold the passive modes in pivot order,
    the rest the inactive ones.  The partial Cholesky factor ``L`` (``K × |P|``, rows by slot,
    ``C_{:,P} = L L_PPᵀ`` with ``L_PP`` lower triangular) is stored by columns (``Lt = Lᵀ``), and
    ``L_PP`` once more packed by rows for the BLAS solves; ``y = L_PP⁻¹ β_P`` gives the restricted
    optimum ``x_P = L_PP⁻ᵀ y`` and the gradient ``(β − Cx)_I = β_I − L_{IP} y``.

    * Adding mode ``k``: its row ``l = L_{kP}`` is stored, the pivot is ``ρ² = C_kk − lᵀl``; the
      new column ``(C_{Ik} − L_{IP} l)/ρ`` is one matrix-vector product, ``y`` gains the entry
      ``(β_k − lᵀy)/ρ`` and the gradient changes by that column times it.
    * Removing the mode at position ``j``: Givens rotations of the columns ``j+1, …`` against
      column ``j`` restore a triangular ``L_PP`` without it (a rank-one update of the trailing
      factor); its row becomes that of an inactive mode.

    Round-off drift is monitored through the optimality residual ``(β − Cz)_P`` (which must
    vanish; checked every :attr:`CHECK_EVERY` solves, with one product ``Cz``, which also resets
    the updated gradient) and removed by recomputing the factor from ``C`` when it exceeds
    ``1e-10`` relative.

    Parameters
    ----------
    C : numpy.ndarray, shape (K, K)
        Symmetric positive semi-definite interaction matrix (read, never modified).
    beta : numpy.ndarray, shape (K,)
        Linear coefficients.
    rtol : float
        Relative pivot tolerance: a Schur complement below ``rtol · C_kk`` is treated as
        zero (the new column is in the span of the passive set).

    Attributes
    ----------
    z : numpy.ndarray, shape (K,)
        Current feasible point; optimal over its support after each :meth:`add`.
    in_p : numpy.ndarray of bool, shape (K,)
        Membership in the passive set ``P``.
    refreshes : int
        How often the factor was recomputed from scratch because of drift.
    """

    CHECK_EVERY = 64  # solves between two residual checks

    def __init__(self, C: np.ndarray, beta: np.ndarray, rtol: float = 1e-11):
        self.beta = np.asarray(beta, dtype=float)
        self.K = K = self.beta.shape[0]
        self.rtol = rtol
        self.z = np.zeros(K)
        self.in_p = np.zeros(K, dtype=bool)
        self.refreshes = 0
        self._C = np.ascontiguousarray(C, dtype=float)
        self._bs = self.beta.copy()  # β by slot
        self._g = self._bs.copy()  # β − C x by slot (x the restricted optimum), on slots ≥ m when valid
        self._gvalid = True
        self._d = np.diag(self._C).copy()  # Schur pivots C_kk − ‖L_kP‖² by slot, on slots ≥ m when valid
        self._dvalid = True
        self._mode = np.arange(K)  # slot -> mode
        self._slot = np.arange(K)  # mode -> slot
        self._m = 0
        cap = min(64, K)
        self._Lt = np.zeros((cap, K))  # row i: column i of L, by slot
        self._ap = np.zeros(cap * (cap + 1) // 2)  # rows of L_PP packed (= L_PPᵀ packed by columns)
        self._y = np.zeros(cap)
        self._free = None  # cached β − Cz outside P, by mode
        self._solves = 0  # solves since the last residual check

    # ------------------------------------------------------------------ bookkeeping
    @property
    def passive(self) -> list:
        """The support ``P`` of ``z`` in factor order (list of int)."""
        return self._mode[: self._m].tolist()

    def support(self) -> np.ndarray:
        """The support ``P`` of ``z`` in factor order, shape (|P|,), int64 (a copy)."""
        return self._mode[: self._m].copy()

    def _swap_slots(self, a: int, b: int) -> None:
        if a == b:
            return
        m = self._m
        Lt = self._Lt
        col = Lt[:m, a].copy()
        Lt[:m, a] = Lt[:m, b]
        Lt[:m, b] = col
        for arr in (self._bs, self._g, self._d):
            arr[a], arr[b] = arr[b], arr[a]
        ka, kb = self._mode[a], self._mode[b]
        self._mode[a], self._mode[b] = kb, ka
        self._slot[ka], self._slot[kb] = b, a

    def _grow(self, n: int = 1) -> None:
        """Room for ``n`` more pivots."""
        m, cap = self._m, self._Lt.shape[0]
        if m + n <= cap:
            return
        cap = min(self.K, max(2 * cap, m + n))
        Lt = np.zeros((cap, self.K))
        Lt[:m] = self._Lt[:m]
        self._Lt = Lt
        ap = np.zeros(cap * (cap + 1) // 2)
        ap[: m * (m + 1) // 2] = self._ap[: m * (m + 1) // 2]
        self._ap = ap
        self._y = np.concatenate([self._y[:m], np.zeros(cap - m)])

    def _row(self, k: int):
        """``(l, ρ²)``: the factor row ``L_{kP}`` of an inactive mode ``k`` and its Schur pivot ``C_kk − lᵀl``."""
        lrow = self._Lt[: self._m, self._slot[k]].copy()
        return lrow, float(self._C[k, k]) - float(lrow @ lrow)

    def _append(self, k: int, lrow: np.ndarray, piv: float) -> None:
        """Make ``k`` the next pivot: one new column of the factor, one new entry of ``y``."""
        self._grow()
        m = self._m
        self._swap_slots(self._slot[k], m)
        rho = float(np.sqrt(piv))
        Lt = self._Lt
        col = Lt[m, m + 1 :]
        np.take(self._C[k], self._mode[m + 1 :], out=col)
        if m:
            col -= lrow @ Lt[:m, m + 1 :]
        col /= rho
        Lt[m, m] = rho
        off = m * (m + 1) // 2
        self._ap[off : off + m] = lrow
        self._ap[off + m] = rho
        ym = (self._bs[m] - float(lrow @ self._y[:m])) / rho
        self._y[m] = ym
        if self._gvalid:
            self._g[m + 1 :] -= ym * col
        if self._dvalid:
            self._d[m + 1 :] -= col * col
        self._m = m + 1
        self.in_p[k] = True
        self._free = None

    def _pack(self, start: int) -> None:
        """Rows ``start …`` of ``L_PP`` into the packed copy, and ``y = L_PP⁻¹ β_P`` anew."""
        m, K = self._m, self.K
        rows = np.arange(start, m)
        cnt = rows + 1
        first = np.cumsum(cnt) - cnt
        cols = np.arange(int(cnt.sum())) - np.repeat(first, cnt)
        off = start * (start + 1) // 2
        self._ap[off : off + cols.shape[0]] = self._Lt.ravel()[cols * K + np.repeat(rows, cnt)]
        self._y[:m] = dtpsv(m, self._ap, self._bs[:m], lower=0, trans=1) if m else 0.0
        self._gvalid = self._dvalid = False
        self._free = None

    def _delete(self, pos: int) -> None:
        """Remove the mode at factor position ``pos`` (Givens rotations of the factor's columns)."""
        m = self._m
        Lt = self._Lt
        w = Lt[pos].copy()  # the column to remove, rotated into the trailing ones
        for i in range(pos + 1, m):
            a, b = Lt[i, i], w[i]
            r = float(np.hypot(a, b))
            c, s = a / r, b / r
            ri, wi = Lt[i, i:], w[i:]
            new = c * ri + s * wi
            wi *= c
            wi -= s * ri
            ri[:] = new
            Lt[i, pos] = s * w[pos]  # the removed mode's row (slot pos) as an inactive mode
            w[pos] *= c
        # drop row pos; cycle slots pos … m−1 so that the removed mode sits at slot m−1
        Lt[pos : m - 1] = Lt[pos + 1 : m]
        Lt[m - 1] = 0.0
        cyc = np.concatenate([np.arange(pos + 1, m), [pos]])
        Lt[: m - 1, pos:m] = Lt[: m - 1, cyc]
        for arr in (self._mode, self._bs, self._g, self._d):
            arr[pos:m] = arr[cyc]
        self._slot[self._mode[pos:m]] = np.arange(pos, m)
        k = int(self._mode[m - 1])
        self._m = m - 1
        self.in_p[k] = False
        self.z[k] = 0.0
        self._pack(pos)

    def _refresh(self) -> None:
        """The factor recomputed from ``C``: ``L_PP = chol(C_PP)``, ``L_{IP} = C_{IP} L_PP⁻ᵀ``."""
        m = self._m
        if m:
            P, rest = self._mode[:m], self._mode[m:]
            try:
                L = np.linalg.cholesky(self._C[np.ix_(P, P)])
            except np.linalg.LinAlgError:  # pragma: no cover - C_PP numerically singular: keep the factor
                return
            self._Lt[:m, :m] = L.T
            self._Lt[:m, m:] = solve_triangular(L, self._C[np.ix_(P, rest)], lower=True, check_finite=False)
            self._pack(0)
        self.refreshes += 1

    def _solve_beta(self) -> np.ndarray:
        """The restricted optimum ``x_P = L_PP⁻ᵀ y`` on ``P`` (factor order)."""
        m = self._m
        return dtpsv(m, self._ap, self._y[:m], lower=0, trans=0) if m else np.zeros(0)

    def _residual_ok(self) -> bool:
        """``max |(β − Cz)_P| ≤ 1e-10 · max |β|``; also resets the updated gradient to ``β − Cz``."""
        m = self._m
        h = self.beta - self._C @ self.z
        self._g[m:] = h[self._mode[m:]]
        self._gvalid = True
        self._free = None
        scale = max(float(np.max(np.abs(self.beta))), 1e-300)
        return not np.max(np.abs(h[self._mode[:m]]), initial=0.0) > 1e-10 * scale

    def schur_diag(self) -> np.ndarray:
        """Schur pivots ``C_kk − ‖L_{kP}‖²`` by slot (entries of slots ≥ ``|P|`` are meaningful; do not modify)."""
        if not self._dvalid:
            m = self._m
            blk = self._Lt[:m, m:]
            self._d[m:] = np.diag(self._C)[self._mode[m:]] - np.einsum("ij,ij->j", blk, blk)
            self._dvalid = True
        return self._d

    # ------------------------------------------------------------------ API
    def gradient(self) -> np.ndarray:
        """``β − C z`` (the negative loss gradient) on all modes, shape (K,), ``O(K²)``."""
        return self.beta - self._C @ self.z

    def free_gradient(self) -> np.ndarray:
        """``β − C z`` on the modes outside ``P`` and 0 on ``P``, shape (K,), ``O(K)`` after an :meth:`add`.

        At a restricted optimum the entries on ``P`` vanish up to round-off; this is all the
        active-set decisions (and the velocities of the ε → 0 limit) need.  Valid at the
        restricted optimum (after :meth:`add`); cached until ``z`` changes; do not modify the
        returned array.
        """
        if self._free is None:
            m = self._m
            if not self._gvalid:
                self._g[m:] = self._bs[m:] - self._y[:m] @ self._Lt[:m, m:]
                self._gvalid = True
            g = np.zeros(self.K)
            g[self._mode[m:]] = self._g[m:]
            self._free = g
        return self._free

    def _ray_steps(self, k: int, removed: list[int]):
        """Ray steps along null directions of ``C_{P∪k}`` until mode ``k`` borders ``P`` with a positive pivot.

        Each step moves ``z`` along ``d`` (``d_k = 1``, ``d_P = −C_PP⁻¹ C_Pk``), on which the loss
        falls linearly, until a mode of ``P`` hits zero; that mode is deleted and appended to
        ``removed``.  Returns ``(L_{kP}, ρ²)`` of :meth:`_row`.
        """
        ckk = float(self._C[k, k])
        for _ in range(self.K + 2):
            lrow, piv = self._row(k)
            if piv > self.rtol * max(ckk, 1e-300):
                return lrow, piv
            if not self._m:
                raise UnboundedError(
                    f"the loss is unbounded below: mode {k} has C_kk = {ckk:.3e} "
                    f"and growth rate β_k − (Cz)_k > 0 (`beta` is not in the range of `C`)"
                )
            # ray along the null direction d (d_k = 1, d_P = −C_PP⁻¹ C_Pk = −L_PP⁻ᵀ l)
            dP = -dtpsv(self._m, self._ap, lrow, lower=0, trans=0)
            neg = dP < 0
            if not neg.any():
                raise UnboundedError(
                    f"the loss is unbounded below along a null direction of `C` "
                    f"through mode {k} (`beta` is not in the range of `C`)"
                )
            P = self._mode[: self._m]
            zP = self.z[P]
            ratios = np.where(neg, zP / np.where(neg, -dP, 1.0), np.inf)
            j = int(np.argmin(ratios))
            t = ratios[j]
            self.z[P] = np.maximum(zP + t * dP, 0.0)
            self.z[k] += t
            removed.append(int(P[j]))
            self._delete(j)
        raise UnboundedError("active-set step made no progress; `C` is numerically singular beyond the pivot tolerance")

    def _accept(self, x: np.ndarray) -> bool:
        """Set ``z_P = x``; every :attr:`CHECK_EVERY` solves check the residual, refreshing the factor on drift.

        Returns False when a refresh changed the factor (the caller solves again).
        """
        self.z[self._mode[: self._m]] = x
        self._free = None
        self._solves += 1
        if self._solves < self.CHECK_EVERY:
            return True
        self._solves = 0
        if self._residual_ok():
            return True
        self._refresh()
        return False

    def _check_drift(self) -> bool:
        """Residual check at the restricted optimum; on drift the factor is recomputed and ``z_P`` solved anew."""
        if self._residual_ok():
            return True
        self._refresh()
        x = self._solve_beta()
        if np.all(x > 0):
            self.z[self._mode[: self._m]] = x
            self._free = None
        return False

    def add(self, k: int) -> list[int]:
        """Add mode ``k`` (which must have ``(β − Cz)_k > 0``) and re-optimise.

        Returns
        -------
        list of int
            Modes removed from the support on the way (their optimum hit zero).
        """
        removed: list[int] = []
        self._free = None
        lrow, piv = self._ray_steps(k, removed)
        self._append(k, lrow, piv)
        refreshed = False
        # Lawson–Hanson inner loop: move from the feasible z towards the restricted optimum
        for _ in range(self.K + 2):
            P = self._mode[: self._m]
            x = self._solve_beta()
            thr = 1e-13 * max(1.0, float(np.max(np.abs(x))))
            if np.all(x > thr):
                if self._accept(x) or refreshed:
                    return removed
                refreshed = True
                continue
            zP = self.z[P]
            bad = x <= thr
            denom = np.where(bad, np.maximum(zP - x, 1e-300), 1.0)
            alpha = np.where(bad, zP / denom, np.inf)
            alpha = float(min(1.0, max(0.0, alpha.min())))
            znew = zP + alpha * (x - zP)
            drop = np.flatnonzero(bad & (znew <= thr)).tolist()
            if not drop:
                drop = [int(np.argmin(np.where(bad, znew, np.inf)))]
            self.z[P] = np.maximum(znew, 0.0)
            for pos in sorted(drop, reverse=True):
                removed.append(int(P[pos]))
                self._delete(pos)
        raise UnboundedError("active-set inner loop did not terminate")  # pragma: no cover

    def solve(self, candidates: np.ndarray | None = None, vtol: float | None = None) -> np.ndarray:
        """Run to the global minimiser: add the most positive-gradient mode until KKT holds.

        Parameters
        ----------
        candidates : numpy.ndarray of bool, shape (K,), optional
            Restrict the support to these modes (default: all).
        vtol : float, optional
            Gradient tolerance for optimality (default ``1e-12 · scale``).

        Returns
        -------
        numpy.ndarray, shape (K,)
        """
        if vtol is None:
            vtol = 1e-12 * max(float(np.max(np.abs(self.beta))), float(np.max(np.diag(self._C))), 1e-300)
        for _ in range(10 * self.K + 10):
            v = self.free_gradient()
            mask = ~self.in_p & (v > vtol)
            if candidates is not None:
                mask &= candidates
            if not mask.any():
                return self.z.copy()
            k = int(np.argmax(np.where(mask, v, -np.inf)))
            self.add(k)
        raise UnboundedError("active-set method did not converge")  # pragma: no cover
