r"""Active-set solver for the non-negative quadratic program of the Lotka–Volterra loss.

Minimises ``ℓ(z) = −βᵀz + ½ zᵀCz`` over ``z ≥ 0`` for a symmetric positive
semi-definite ``C`` (possibly singular).  This is the Lawson–Hanson active-set
method written on the quadratic form instead of a least-squares factor: the
*passive set* ``P`` (modes with ``z_k > 0``) carries the unconstrained minimiser
of ``ℓ`` restricted to ``P`` through an incrementally updated inverse Cholesky factor
``R = L⁻¹`` of ``C_PP = L Lᵀ`` (``O(|P|²)`` per added or removed mode, see
:class:`ActiveSetQP`).  Adding a mode whose column is linearly dependent on ``P``
(``C_PP`` would become singular) is handled by a ray step along the null direction of
``C_{P∪k}``, on which the loss decreases linearly, until a mode of ``P`` hits zero.

The negative gradient ``β − Cz`` outside ``P`` — the growth rates the ε → 0 limit
(:func:`nqf.reductions.lv.limit`, docs/theory.md §4.3) needs after every event — is
recomputed exactly from the block ``C_{IP}`` (inactive rows, passive columns) of a copy of
``C`` whose rows and columns are kept permuted so that ``P`` comes first: ``O(|I|·|P|)``
per event instead of ``O(K²)``.

The same object drives the ε → 0 limit, where each join event adds one mode to ``P``
starting from the previous restricted optimum (a warm start), and the final state of a
dense ``LotkaVolterra``.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

from ...errors import NQFError


class UnboundedError(NQFError, ValueError):
    """The loss ``−βᵀz + ½zᵀCz`` is unbounded below on ``z ≥ 0``."""


class ActiveSetQP:
    r"""Incremental active-set state for ``min_{z ≥ 0} −βᵀz + ½zᵀCz``.

    The lower-triangular inverse Cholesky factor ``R = L⁻¹`` of the passive block
    (``C_PP = L Lᵀ``, ``C_PP⁻¹ = Rᵀ R``, rows in the order of :attr:`passive`) is updated

    * on adding a mode ``k`` by appending one row: with ``l = R C_Pk``, ``u = Rᵀ l = C_PP⁻¹ C_Pk``
      and the pivot ``ρ² = C_kk − lᵀl`` (the Schur complement), the new row is
      ``[−uᵀ/ρ, 1/ρ]`` — two matrix-vector products, ``O(|P|²)``;
    * on removing the mode at position ``j`` by Givens rotations of the rows ``j, …, |P|−1``
      that move column ``j`` into the last row, then dropping that row and column
      (``C_{P∖j}⁻¹`` is the Schur complement of ``C_PP⁻¹`` at ``j``) — ``O(|P|²)``.

    Round-off drift is monitored through the optimality residual ``(β − Cz)_P`` (which must
    vanish; checked after every solve from scratch and every 16th warm-started one) and removed
    by recomputing ``R`` from ``C_PP`` when it exceeds ``1e-10`` relative.

    Parameters
    ----------
    C : numpy.ndarray, shape (K, K)
        Symmetric positive semi-definite interaction matrix (a permuted copy is kept).
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
        How often ``R`` was recomputed from scratch because of drift.
    """

    CHECK_EVERY = 16  # warm-started solves between two residual checks
    BLOCK = 128  # rows of R per block in the fused products of :meth:`_border`

    def __init__(self, C: np.ndarray, beta: np.ndarray, rtol: float = 1e-11):
        self.beta = np.asarray(beta, dtype=float)
        self.K = K = self.beta.shape[0]
        self.rtol = rtol
        self.z = np.zeros(K)
        self.in_p = np.zeros(K, dtype=bool)
        self.refreshes = 0
        # C and β with rows/columns permuted by slot: slots 0..m−1 hold the passive modes
        self._Cs = np.array(C, dtype=float, order="C", copy=True)
        self._bs = self.beta.copy()
        self._mode = np.arange(K)  # slot -> mode
        self._slot = np.arange(K)  # mode -> slot
        self._order = np.zeros(K, dtype=np.int64)  # factor position -> mode
        self._m = 0
        self._R = np.zeros((min(64, K), min(64, K)))
        self._free = None  # cached β − Cz outside P
        self._optimal = True  # z is the optimum restricted to its support
        self._warm = 0  # warm-started solves since the last residual check

    # ------------------------------------------------------------------ bookkeeping
    @property
    def passive(self) -> list:
        """The support ``P`` of ``z`` in factor order (list of int)."""
        return self._order[: self._m].tolist()

    def support(self) -> np.ndarray:
        """The support ``P`` of ``z`` in factor order, shape (|P|,), int64 (a copy)."""
        return self._order[: self._m].copy()

    def _swap_slots(self, a: int, b: int) -> None:
        if a == b:
            return
        Cs = self._Cs
        row = Cs[a].copy()
        Cs[a] = Cs[b]
        Cs[b] = row
        col = Cs[:, a].copy()
        Cs[:, a] = Cs[:, b]
        Cs[:, b] = col
        self._bs[[a, b]] = self._bs[[b, a]]
        ka, kb = self._mode[a], self._mode[b]
        self._mode[a], self._mode[b] = kb, ka
        self._slot[ka], self._slot[kb] = b, a

    def _Rm(self) -> np.ndarray:
        m = self._m
        return self._R[:m, :m]

    def _border(self, k: int):
        """``(c, l, u, piv)`` for appending mode ``k``: ``c = C_Pk``, ``l = R c``, ``u = Rᵀl``."""
        m = self._m
        sk = self._slot[k]
        ckk = float(self._Cs[sk, sk])
        if m == 0:
            e = np.zeros(0)
            return e, e, e, ckk
        c = self._Cs[sk, self._slot[self._order[:m]]]
        # one pass over the lower triangle of R, a block of rows at a time (the block stays in
        # cache between its two products): l_I = R_{I,:i1} c, u_{:i1} += R_{I,:i1}ᵀ l_I
        R = self._R
        lv = np.empty(m)
        u = np.zeros(m)
        bs = self.BLOCK
        for i0 in range(0, m, bs):
            i1 = min(i0 + bs, m)
            blk = R[i0:i1, :i1]
            li = blk @ c[:i1]
            lv[i0:i1] = li
            u[:i1] += li @ blk
        return c, lv, u, ckk - float(lv @ lv)

    def _append(self, k: int, u: np.ndarray, piv: float) -> None:
        m = self._m
        if m + 1 > self._R.shape[0]:
            cap = min(self.K, max(2 * self._R.shape[0], m + 1))
            new = np.zeros((cap, cap))
            new[:m, :m] = self._R[:m, :m]
            self._R = new
        rho = np.sqrt(piv)
        self._R[m, :m] = -u / rho
        self._R[m, m] = 1.0 / rho
        self._swap_slots(self._slot[k], m)
        self._order[m] = k
        self._m = m + 1
        self.in_p[k] = True

    def _delete(self, pos: int) -> None:
        """Remove the mode at factor position ``pos`` (Givens rotations of ``R``)."""
        m = self._m
        R = self._R
        a = R[pos, pos]
        for i in range(pos, m - 1):
            b = R[i + 1, pos]
            r = float(np.hypot(a, b))
            c, s = b / r, a / r
            blk = R[i : i + 2, : i + 2]
            blk[:] = np.array([[c, -s], [s, c]]) @ blk
            R[i, pos] = 0.0
            a = r
        if pos < m - 1:
            R[pos : m - 1, pos : m - 1] = R[pos : m - 1, pos + 1 : m]
        R[m - 1, :m] = 0.0
        R[:m, m - 1] = 0.0
        k = int(self._order[pos])
        self._order[pos : m - 1] = self._order[pos + 1 : m]
        self._m = m - 1
        self._swap_slots(self._slot[k], m - 1)
        self.in_p[k] = False
        self.z[k] = 0.0
        self._free = None

    def _refresh(self) -> None:
        m = self._m
        if m:
            sl = self._slot[self._order[:m]]
            try:
                L = np.linalg.cholesky(self._Cs[np.ix_(sl, sl)])
            except np.linalg.LinAlgError:  # pragma: no cover - C_PP numerically singular: keep R
                return
            self._R[:m, :m] = solve_triangular(L, np.eye(m), lower=True)
        self.refreshes += 1

    def _solve_beta(self) -> np.ndarray:
        R = self._Rm()
        return (R @ self.beta[self._order[: self._m]]) @ R

    def _residual_ok(self) -> bool:
        """``max |(β − Cz)_P| ≤ 1e-10 · max |β|``."""
        m = self._m
        zs = self.z[self._mode[:m]]
        res = self._bs[:m] - self._Cs[:m, :m] @ zs
        scale = max(float(np.max(np.abs(self.beta))), 1e-300)
        return not np.max(np.abs(res)) > 1e-10 * scale

    # ------------------------------------------------------------------ API
    def gradient(self) -> np.ndarray:
        """``β − C z`` (the negative loss gradient) on all modes, shape (K,), ``O(K·|P|)``."""
        m = self._m
        g = np.empty(self.K)
        g[self._mode] = self._bs - self._Cs[:, :m] @ self.z[self._mode[:m]]
        return g

    def free_gradient(self) -> np.ndarray:
        """``β − C z`` on the modes outside ``P`` and 0 on ``P``, shape (K,), ``O((K−|P|)·|P|)``.

        At a restricted optimum the entries on ``P`` vanish up to round-off; this is all the
        active-set decisions (and the velocities of the ε → 0 limit) need.  Cached until ``z``
        changes; do not modify the returned array.
        """
        if self._free is None:
            m = self._m
            g = np.zeros(self.K)
            g[self._mode[m:]] = self._bs[m:] - self._Cs[m:, :m] @ self.z[self._mode[:m]]
            self._free = g
        return self._free

    def _ray_steps(self, k: int, removed: list[int]):
        """Ray steps along null directions of ``C_{P∪k}`` until mode ``k`` borders ``P`` with a positive pivot.

        Each step moves ``z`` along ``d`` (``d_k = 1``, ``d_P = −C_PP⁻¹ C_Pk``), on which the loss
        falls linearly, until a mode of ``P`` hits zero; that mode is deleted and appended to
        ``removed``.  Returns the border ``(C_Pk, u = C_PP⁻¹ C_Pk, ρ²)`` of :meth:`_border`.
        """
        guard = 0
        while True:
            c, _, u, piv = self._border(k)
            ckk = self._Cs[self._slot[k], self._slot[k]]
            if piv > self.rtol * max(ckk, 1e-300):
                return c, u, piv
            guard += 1
            if guard > self.K + 1:
                raise UnboundedError(
                    "active-set step made no progress; `C` is numerically singular beyond the pivot tolerance"
                )
            # ray along the null direction d (d_k = 1, d_P = −C_PP⁻¹ C_Pk): the loss falls linearly
            P = self._order[: self._m]
            if not self._m:
                raise UnboundedError(
                    f"the loss is unbounded below: mode {k} has C_kk = {ckk:.3e} "
                    f"and growth rate β_k − (Cz)_k > 0 (`beta` is not in the range of `C`)"
                )
            dP = -u
            neg = dP < 0
            if not neg.any():
                raise UnboundedError(
                    f"the loss is unbounded below along a null direction of `C` "
                    f"through mode {k} (`beta` is not in the range of `C`)"
                )
            zP = self.z[P]
            ratios = np.where(neg, zP / np.where(neg, -dP, 1.0), np.inf)
            j = int(np.argmin(ratios))
            t = ratios[j]
            self.z[P] = np.maximum(zP + t * dP, 0.0)
            self.z[k] += t
            removed.append(int(P[j]))
            self._delete(j)
            self._optimal = False

    def add(self, k: int) -> list[int]:
        """Add mode ``k`` (which must have ``(β − Cz)_k > 0``) and re-optimise.

        Returns
        -------
        list of int
            Modes removed from the support on the way (their optimum hit zero).
        """
        removed: list[int] = []
        self._free = None
        self._optimal = self._optimal and not self.in_p[k]
        c, u, piv = self._ray_steps(k, removed)
        # z_P was optimal on P ∖ {k}: x_k = (β_k − C_kP z_P)/s, x_P = z_P − x_k C_PP⁻¹C_Pk
        bordered = not removed and self._optimal
        if bordered:
            Pold = self._order[: self._m]
            zold = self.z[Pold]
            xk = (self.beta[k] - float(c @ zold)) / piv
            xb = np.append(zold - xk * u, xk)
        self._append(k, u, piv)
        # Lawson–Hanson inner loop: move from the feasible z towards the restricted optimum
        for _ in range(self.K + 2):
            P = self._order[: self._m]
            if bordered:
                x, bordered = xb, False
                self._warm += 1
                check = self._warm >= self.CHECK_EVERY
            else:
                x, check = self._solve_beta(), True
            thr = 1e-13 * max(1.0, float(np.max(np.abs(x))))
            if np.all(x > thr):
                self.z[P] = x
                self._free = None
                if check:
                    self._warm = 0
                    if not self._residual_ok():  # drift of the updated factor
                        self._refresh()
                        x = self._solve_beta()
                        if np.all(x > thr):
                            self.z[P] = x
                            self._optimal = True
                            return removed
                        continue
                self._optimal = True
                return removed
            zP = self.z[P]
            bad = x <= thr
            denom = np.where(bad, np.maximum(zP - x, 1e-300), 1.0)
            alpha = np.where(bad, zP / denom, np.inf)
            alpha = float(min(1.0, max(0.0, alpha.min())))
            znew = zP + alpha * (x - zP)
            drop = [i for i in range(len(P)) if bad[i] and znew[i] <= thr]
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
            vtol = 1e-12 * max(float(np.max(np.abs(self.beta))), float(np.max(np.diag(self._Cs))), 1e-300)
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
