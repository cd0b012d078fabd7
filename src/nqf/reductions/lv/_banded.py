r"""The ε → 0 limit for a banded (e.g. tridiagonal) ``C`` without a dense matrix (docs/theory.md §4.3).

For ``C`` of half-bandwidth ``w`` the restricted optimum on an active set ``S`` decouples into
*components*: maximal runs of active modes whose consecutive gaps are at most ``w``.  A join
changes ``z`` only on its component, and ``Cz`` only within ``w`` of it, so an event costs

* one banded Cholesky solve (LAPACK ``pbsv`` through :func:`scipy.linalg.solveh_banded`) on the
  component, ``O(r w²)`` for ``r`` modes, repeated by the Lawson–Hanson steps when a mode leaves;
* new velocities ``4(β − Cz)`` for the inactive modes within ``w`` of the component;
* a heap of the times at which the inactive modes reach ``s = 0``, updated for those modes.

``C`` is never densified: it is read through its ``2w + 1`` diagonals.  The records
(active sets, plateau states, paths) are logs of changes (:mod:`nqf.reductions.lv._lazy`).
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import scipy.sparse as sp
from scipy.linalg import LinAlgError, get_lapack_funcs, solveh_banded

from ...errors import InvalidParameterError
from ._lazy import Knots, States, Support

(dptsv,) = get_lapack_funcs(["ptsv"], dtype=np.float64)


def band_of(C, K: int, w_max: int):
    """``(w, diags)`` of a sparse ``C``: its half-bandwidth and ``diags[d][i] = C[i, i + d]`` for ``d = 0 … w``.

    Raises InvalidParameterError when ``C`` is not symmetric or its bandwidth exceeds ``w_max``.
    """
    A = sp.coo_matrix(C)
    if A.shape != (K, K):
        raise InvalidParameterError(f"`C` must have shape ({K}, {K}) to match `beta`; found {A.shape}")
    off = A.col.astype(np.int64) - A.row.astype(np.int64)
    w = int(np.max(np.abs(off), initial=0))
    if w > w_max:
        raise InvalidParameterError(
            f"`C` (sparse) must be banded with half-bandwidth ≤ {w_max} for the structured limit; found {w} "
            "(convert with `C.toarray()` for the dense path)"
        )
    A = sp.dia_matrix(A)
    diags = []
    for d in range(w + 1):
        up, lo = np.zeros(K - d), np.zeros(K - d)
        up[:] = A.diagonal(d)
        lo[:] = A.diagonal(-d)
        scale = max(float(np.max(np.abs(up), initial=0.0)), 1e-300)
        if np.max(np.abs(up - lo), initial=0.0) > 1e-10 * scale:
            raise InvalidParameterError(f"`C` must be symmetric; diagonal {d} differs from diagonal {-d}")
        diags.append(up)
    if np.any(diags[0] < 0):
        raise InvalidParameterError("`C` must be positive semi-definite; found a negative diagonal entry")
    return w, diags


class BandedWalk:
    """Event loop of the banded limit; outputs as logs (see :func:`run`)."""

    def __init__(self, beta: np.ndarray, w: int, diags: list, s0: np.ndarray, vthr: float, stol: float):
        K = beta.shape[0]
        self.K, self.b, self.w, self.D = K, beta, w, diags
        self.vthr, self.stol, self.rtol = vthr, stol, 1e-11
        self.z = np.zeros(K)
        self.act = np.zeros(K, dtype=bool)
        # per mode, as Python lists (scalar access): s at the time of its last velocity change,
        # that time, the velocity (0 on the active set), the version of its heap entry
        self.srec, self.trec = s0.tolist(), [0.0] * K
        self.v = (4.0 * beta).tolist()
        self.ver = [0] * K
        self.heap: list = []
        self.tau = 0.0
        fin = np.isfinite(s0)
        self.knots0 = (np.zeros(int(fin.sum())), np.flatnonzero(fin), s0[fin], 4.0 * beta[fin])
        self.s_init = s0.copy()
        self.kt, self.km, self.ks, self.kv = [], [], [], []
        self.events: list = []
        self.zidx: list = []
        self.zval: list = []
        self.log = {"K": K, "modes": [], "signs": []}
        self.path_tau = [0.0]
        self.bz = 0.0  # βᵀz
        self.ev_idx: list = []  # state changes per event
        self.ev_val: list = []
        for k in np.flatnonzero(fin & (4.0 * beta > vthr)).tolist():
            self._push(k)

    # ---------------------------------------------------------------- velocities and the heap
    def _push(self, k: int) -> None:
        self.ver[k] += 1
        v = self.v[k]
        if v > self.vthr and not self.act[k] and self.srec[k] > -math.inf:
            heapq.heappush(self.heap, (self.trec[k] - self.srec[k] / v, k, self.ver[k]))

    def s_now(self, k: int) -> float:
        return min(self.srec[k] + self.v[k] * (self.tau - self.trec[k]), 0.0)

    def _set_velocity(self, k: int, v: float, s: float | None = None) -> None:
        """Mode ``k`` moves with velocity ``v`` from ``τ`` on (from ``s``, default its current value)."""
        s = self.s_now(k) if s is None else s
        self.srec[k] = s
        self.trec[k] = self.tau
        self.v[k] = v
        if s > -math.inf:
            self.kt.append(self.tau)
            self.km.append(k)
            self.ks.append(s)
            self.kv.append(v)
        self._push(k)

    def _cz1(self, i: int) -> float:
        """``(Cz)_i`` for a tridiagonal ``C``."""
        z, D = self.z, self.D
        out = float(D[0][i] * z[i])
        if i + 1 < self.K:
            out += float(D[1][i] * z[i + 1])
        if i:
            out += float(D[1][i - 1] * z[i - 1])
        return out

    def _Cz(self, lo: int, hi: int) -> np.ndarray:
        """``(Cz)_i`` for ``i`` in ``[lo, hi)``."""
        z, D, K = self.z, self.D, self.K
        out = D[0][lo:hi] * z[lo:hi]
        for d in range(1, self.w + 1):
            # upper: C[i, i+d] z[i+d] for i + d < K; lower: C[i, i−d] z[i−d] = D[d][i−d] z[i−d] for i ≥ d
            a, b = lo, min(hi, K - d)
            if b > a:
                out[: b - a] += D[d][a:b] * z[a + d : b + d]
            a, b = max(lo, d), hi
            if b > a:
                out[a - lo :] += D[d][a - d : b - d] * z[a - d : b - d]
        return out

    # ---------------------------------------------------------------- components and solves
    def _component(self, k: int) -> tuple[int, int]:
        """``[a, b]``: the span of the component of the active set containing ``k``."""
        w, act, K = self.w, self.act, self.K
        if w == 1:
            return self._run(k)
        a = k
        L = 64
        while True:  # leftwards: stop at a gap of more than w inactive modes
            lo = max(a - L, 0)
            idx = np.flatnonzero(act[lo:a]) + lo
            gaps = np.diff(np.append(idx, a))
            big = np.flatnonzero(gaps > w)
            if big.size:
                a = int(idx[big[-1] + 1]) if big[-1] + 1 < idx.size else a
                break
            if not idx.size:
                break
            a = int(idx[0])
            if lo == 0:
                break
            L *= 2
        b = k
        L = 64
        while True:
            hi = min(b + 1 + L, K)
            idx = np.flatnonzero(act[b + 1 : hi]) + b + 1
            gaps = np.diff(np.insert(idx, 0, b))
            big = np.flatnonzero(gaps > w)
            if big.size:
                b = int(idx[big[0] - 1]) if big[0] > 0 else b
                break
            if not idx.size:
                break
            b = int(idx[-1])
            if hi == K:
                break
            L *= 2
        return a, b

    def _run(self, k: int) -> tuple[int, int]:
        """:meth:`_component` for ``w = 1``: the maximal run of active modes around ``k``."""
        act, K = self.act, self.K
        a, L = k, 64
        while a > 0:
            lo = max(a - L, 0)
            win = act[lo:a][::-1]
            j = int(win.argmin())
            if not win[j]:
                a -= j
                break
            a, L = lo, 2 * L
        b, L = k, 64
        while b < K - 1:
            hi = min(b + 1 + L, K)
            win = act[b + 1 : hi]
            j = int(win.argmin())
            if not win[j]:
                b += j
                break
            b, L = hi - 1, 2 * L
        return a, b

    def _solve(self, S: np.ndarray) -> np.ndarray:
        """Restricted optimum on the sorted active modes ``S`` (one banded solve)."""
        r = S.shape[0]
        w = min(self.w, r - 1)
        if not w:
            return self._single(S)
        ab = np.zeros((w + 1, r))
        ab[w] = self.D[0][S]
        for d in range(1, w + 1):
            gap = S[d:] - S[:-d]  # original distance of compressed neighbours at distance d
            ok = gap <= self.w
            vals = np.zeros(r - d)
            for o in np.unique(gap[ok]):
                sel = ok & (gap == o)
                vals[sel] = self.D[int(o)][S[:-d][sel]]
            ab[w - d, d:] = vals
        try:
            return solveh_banded(ab, self.b[S], check_finite=False)
        except LinAlgError:
            return self._solve_error()

    def _single(self, S: np.ndarray) -> np.ndarray:
        c = float(self.D[0][S[0]])
        if not c > 0:
            return self._solve_error()
        return self.b[S] / c

    def _solve_error(self):
        raise InvalidParameterError(
            "`C` (banded): a block C_SS of the active set is not positive definite; "
            "the structured limit needs C_SS > 0 on every support it visits (use a dense `C`)"
        )

    def _solve_fast(self, S: np.ndarray) -> np.ndarray:
        if S[-1] - S[0] + 1 != S.shape[0]:
            return self._solve(S)
        a, r = int(S[0]), S.shape[0]
        w = min(self.w, r - 1)
        if not w:
            return self._single(S)
        if w == 1:  # tridiagonal: LAPACK ptsv
            _, _, x, info = dptsv(self.D[0][a : a + r], self.D[1][a : a + r - 1], self.b[a : a + r])
            return x if info == 0 else self._solve_error()
        ab = np.zeros((w + 1, r))
        ab[w] = self.D[0][a : a + r]
        for d in range(1, w + 1):
            ab[w - d, d:] = self.D[d][a : a + r - d]
        try:
            return solveh_banded(ab, self.b[a : a + r], check_finite=False)
        except LinAlgError:
            return self._solve(S)  # raises the explanatory error

    def add(self, k: int) -> list[int]:
        """Mode ``k`` joins; Lawson–Hanson steps on its component.  Returns the modes that left."""
        self.act[k] = True
        a, b = self._component(k)
        self._zold = self.z[a : b + 1].copy()
        removed: list[int] = []
        for _ in range(b - a + 3):
            S = np.arange(a, b + 1) if self.w == 1 and not removed else np.flatnonzero(self.act[a : b + 1]) + a
            x = self._solve_fast(S)
            thr = 1e-13 * max(1.0, float(abs(x).max()))
            bad = x <= thr
            if not bad.any():
                self.z[S] = x
                self._touch(a, b, bool(removed))
                return removed
            zS = self.z[S]
            denom = np.where(bad, np.maximum(zS - x, 1e-300), 1.0)
            alpha = float(min(1.0, max(0.0, np.min(np.where(bad, zS / denom, np.inf)))))
            znew = zS + alpha * (x - zS)
            drop = np.flatnonzero(bad & (znew <= thr))
            if not drop.size:
                drop = np.array([int(np.argmin(np.where(bad, znew, np.inf)))])
            self.z[S] = np.maximum(znew, 0.0)
            for j in S[drop]:
                self.act[j] = False
                self.z[j] = 0.0
                removed.append(int(j))
        raise InvalidParameterError("`C` (banded): active-set steps did not terminate")  # pragma: no cover

    def _touch(self, a: int, b: int, dropped: bool) -> None:
        """After a solve on ``[a, b]``: the state log, and new velocities within ``w`` of it."""
        self.zidx.append(np.arange(a, b + 1))
        self.zval.append(self.z[a : b + 1].copy())
        self.bz += float(self.b[a : b + 1] @ (self.zval[-1] - self._zold))
        lo, hi = max(a - self.w, 0), min(b + self.w + 1, self.K)
        if self.w == 1 and not dropped:  # the two neighbours of the run, when inactive
            out = [i for i in (a - 1, b + 1) if 0 <= i < self.K and not self.act[i]]
            for k in out:
                g = 4.0 * (float(self.b[k]) - self._cz1(k))
                if g != self.v[k]:
                    self._set_velocity(k, g)
            return
        g = (4.0 * (self.b[lo:hi] - self._Cz(lo, hi))).tolist()
        for i in np.flatnonzero(~self.act[lo:hi]).tolist():
            if g[i] != self.v[lo + i]:
                self._set_velocity(lo + i, g[i])

    def process(self) -> bool:
        """All joins and leaves at ``τ`` (as :meth:`nqf.reductions.lv._walk.Walk.process`)."""
        was: dict = {}
        pending: dict = {}
        n0 = len(self.zidx)
        while True:
            while self.heap:  # every mode at s ≥ −stol with v > 0
                t, k, ver = self.heap[0]
                if ver != self.ver[k]:
                    heapq.heappop(self.heap)
                    continue
                if self.s_now(k) < -self.stol:
                    break
                heapq.heappop(self.heap)
                pending[k] = ver
            live = [k for k, ver in pending.items() if ver == self.ver[k] and not self.act[k] and self.v[k] > self.vthr]
            if not live:
                break
            k = max(live, key=lambda j: self.v[j])
            del pending[k]
            self._set_velocity(k, 0.0, 0.0)
            was.setdefault(k, False)
            for r in self.add(k):
                was.setdefault(r, True)
        for k, ver in pending.items():  # still valid but not taken (cannot happen; kept consistent)
            if ver == self.ver[k]:
                self._push(k)
        on = sorted(k for k, w in was.items() if not w and self.act[k])
        off = sorted(k for k, w in was.items() if w and not self.act[k])
        self._emit(on, off, n0)
        return bool(on or off)

    def _emit(self, on: list, off: list, n0: int) -> None:
        """Events at ``τ`` (on before off), all with the state and active set after them."""
        if not (on or off):
            return
        if len(self.zidx) == n0 + 1:
            u, vals = self.zidx[n0], self.zval[n0]
        else:
            idx = np.concatenate(self.zidx[n0:])
            val = np.concatenate(self.zval[n0:])
            u, first = np.unique(idx[::-1], return_index=True)  # the latest value of each mode
            vals = val[::-1][first]
        del self.zidx[n0:], self.zval[n0:]
        log = self.log
        log["modes"].extend(on + off)
        log["signs"].extend([1] * len(on) + [-1] * len(off))
        act = Support(log, len(log["modes"]))
        loss = -0.5 * self.bz
        for j, k in enumerate(on + off):
            self.ev_idx.append(u if j == 0 else u[:0])
            self.ev_val.append(vals if j == 0 else vals[:0])
            value = float(self.z[k]) if j < len(on) else 0.0
            self.events.append((self.tau, k, "on" if j < len(on) else "off", act, loss, value))

    def run(self, max_events: int) -> None:
        """Events until no inactive mode has ``v > 0`` (InvalidParameterError past ``max_events``)."""
        self.process()
        while len(self.events) <= max_events:
            while self.heap and self.heap[0][2] != self.ver[self.heap[0][1]]:
                heapq.heappop(self.heap)
            if not self.heap:
                return
            t, k, _ = self.heap[0]
            self.tau = max(t, self.tau)
            self.path_tau.append(self.tau)
            self.srec[k], self.trec[k] = 0.0, self.tau  # it reaches s = 0 (as the dense loop sets it)
            self.process()
        raise InvalidParameterError(f"`limit` exceeded `max_events` = {max_events}")

    def knots(self) -> Knots:
        t0, m0, s0, v0 = self.knots0
        return Knots(
            self.s_init,
            np.concatenate([t0, self.kt]),
            np.concatenate([m0, self.km]),
            np.concatenate([s0, self.ks]),
            np.concatenate([v0, self.kv]),
        )

    def states(self) -> States:
        return States(self.K, self.ev_idx, self.ev_val)
