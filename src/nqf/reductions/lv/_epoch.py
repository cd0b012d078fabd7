r"""Blocked epochs of the ε → 0 limit for a dense ``C``: many events per pass over the factor.

Between two events the incremental solver of :class:`~nqf.reductions.lv._qp.ActiveSetQP` reads
its whole factor (``O(K·|P|)`` numbers) to update every inactive velocity; for ``K`` in the
thousands that is memory-bound.  An *epoch* instead freezes the factor of the passive set ``P₀``
at its start and works on the Schur complement ``S = C − L Lᵀ`` (the interaction of the
inactive modes ``I`` once ``P₀`` has relaxed):

* for a set ``J ⊂ I`` of candidate modes (the earliest to reach ``s = 0`` at the start) two BLAS-3
  products give ``S_{IJ} = C_{IJ} − L_{IP₀} L_{JP₀}ᵀ`` and ``W_J = C_{P₀P₀}⁻¹ C_{P₀J}``;
* while modes ``N ⊂ J`` join, the plateau is ``x_N = S_NN⁻¹ g⁰_N``, ``x_{P₀} = x⁰ − W_N x_N``, and
  every inactive velocity and log coordinate is exact at ``O(|I|·|N|)`` per event:
  ``v_I = v⁰_I − 4 S_IN x_N``, ``s_I = s⁰_I + v⁰_I (τ − τ₀) − 4 S_IN X_N`` with ``X_N = ∫ x_N dτ``;
* at the end the factor gains the rows ``F⁻¹ S_{N,I}`` (``F`` the Cholesky factor of ``S_NN``).

An epoch ends before an event whose mode is not a candidate, or a join that needs an active-set
step (a mode of ``P₀ ∪ N`` would reach zero, or a singular pivot); the caller then takes that
event with the exact per-event solver.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import get_blas_funcs, solve_triangular

from ._qp import ActiveSetQP

(dtrsv,) = get_blas_funcs(["trsv"], dtype=np.float64)
CANDIDATES = 96  # |J|
MAX_JOINS = 64  # |N| at most per epoch


class Epoch:
    """One epoch from the restricted optimum of ``qp`` at ``τ₀`` with log coordinates ``s`` (by mode)."""

    def __init__(self, qp: ActiveSetQP, s: np.ndarray, tau: float, q: int = CANDIDATES):
        self.qp = qp
        m0 = self.m0 = qp._m
        K = qp.K
        g = qp.free_gradient()
        self.I = qp._mode[m0:].copy()  # the inactive modes, in slot order (s = −inf ones never move)
        self.col = np.full(K, -1)  # mode -> column of S_JI
        self.col[self.I] = np.arange(self.I.shape[0])
        self.v0 = 4.0 * g[self.I]
        self.s0, self.tc = s[self.I].copy(), tau
        up = self.v0 > 0
        t = np.where(up, -self.s0 / np.where(up, self.v0, 1.0), np.inf)
        Jc = np.argpartition(t, q - 1)[:q] if t.shape[0] > q else np.arange(t.shape[0])
        self.Jc = Jc = Jc[np.isfinite(t[Jc])]  # candidates, as columns of I
        self.isJ = np.full(self.I.shape[0], -1)  # column of I -> position in J
        self.isJ[Jc] = np.arange(Jc.shape[0])
        J = self.I[Jc]
        BJ = qp._Lt[:m0, qp._slot[J]]
        self.S = qp._C[J][:, self.I] - BJ.T @ qp._Lt[:m0, m0:]  # S_JI, (|J|, |I|)
        if m0 and J.shape[0]:
            self.W = solve_triangular(np.ascontiguousarray(qp._Lt[:m0, :m0]), BJ, lower=False, check_finite=False)
        else:
            self.W = np.zeros((m0, J.shape[0]))
        self.P0 = qp._mode[:m0].copy()
        self.x0 = qp.z[self.P0].copy()
        self.N: list[int] = []  # positions in J, in join order
        self.active = np.zeros(self.I.shape[0], dtype=bool)  # joined, by column of I
        # Cholesky factor of S_NN in the leading block, identity after it (so that solves with the
        # whole buffer and zero-padded right-hand sides give the leading solution)
        self.F = np.eye(MAX_JOINS, order="F")
        self.SN = np.zeros((MAX_JOINS, self.I.shape[0]))  # rows S_{N,I} in join order
        self.WN = np.zeros((m0, MAX_JOINS), order="F")  # columns W_N in join order
        self.xN = self.XN = np.zeros(0)

    def state(self, tau: float):
        """``(s_I, v_I)`` at ``τ`` (exact)."""
        SN = self.SN[: len(self.N)]
        v = self.v0 - 4.0 * (self.xN @ SN)
        s = self.s0 + self.v0 * (tau - self.tc) - 4.0 * (self.XN @ SN)
        return s, v

    def advance(self, tau: float, vthr: float):
        """Move to the next event if its mode is a candidate: ``(τ, s_I)`` there, else None."""
        s, v = self.state(tau)
        ok = ~self.active & (v > vthr) & np.isfinite(s)
        if not ok.any():
            return None
        dt = np.where(ok, -s / np.where(ok, v, 1.0), np.inf)
        i = int(np.argmin(dt))
        if self.isJ[i] < 0:
            return None
        dtau = max(float(dt[i]), 0.0)
        self.XN = self.XN + dtau * self.xN
        s = np.minimum(s + dtau * v, 0.0)
        s[i] = 0.0
        s[self.active] = 0.0
        return tau + dtau, s, v

    def join(self, c: int, rtol: float) -> bool:
        """Mode ``I[c]`` joins if it is a candidate, the plateau stays positive and the pivot regular.

        False leaves everything unchanged.
        """
        i = int(self.isJ[c])
        if i < 0:
            return False
        N = self.N
        n = len(N)
        k = int(self.I[c])
        F = self.F
        f = _tri(F, self.SN[:n, c], 0)
        piv = float(self.S[i, c]) - float(f @ f)
        if not piv > rtol * max(float(self.qp._C[k, k]), 1e-300):
            return False
        F[n, :n] = f
        F[n, n] = np.sqrt(piv)
        idx = N + [i]
        r = 0.25 * self.v0[self.Jc[idx]]
        xN = _tri(F, _tri(F, r, 0), 1)
        self.WN[:, n] = self.W[:, i]
        xP0 = self.x0 - self.WN[:, : n + 1] @ xN
        big = max(1.0, float(abs(xN).max()), float(abs(xP0).max()) if xP0.size else 0.0)
        thr = 1e-13 * big
        if xN.min() <= thr or (xP0.size and xP0.min() <= thr):
            F[n, :n] = 0.0
            F[n, n] = 1.0
            return False
        N.append(i)
        self.SN[n] = self.S[i]
        self.active[c] = True
        self.xN = xN
        self.XN = np.append(self.XN, 0.0)
        qp = self.qp
        qp.z[self.P0] = xP0
        qp.z[self.I[self.Jc[idx]]] = xN
        qp.in_p[k] = True
        return True

    def commit(self, tau: float, s: np.ndarray) -> None:
        """Write the joins into the factor of ``qp``, and ``s`` (by mode) at ``τ``."""
        qp, m0 = self.qp, self.m0
        st, v = self.state(tau)
        fin = np.isfinite(st)
        s[self.I[fin]] = np.minimum(st[fin], 0.0)
        Nm = self.I[self.Jc[self.N]]
        s[Nm] = 0.0
        b = Nm.shape[0]
        if not b:
            return
        qp._grow(b)
        for i, k in enumerate(Nm):
            qp._swap_slots(qp._slot[k], m0 + i)
        SNr = self.SN[:b][:, self.col[qp._mode[m0 + b :]]]
        self._factor_rows(SNr)
        g = qp._g
        g[m0 + b :] -= self.xN @ SNr
        qp._m = m0 + b
        qp._free = None
        qp._solves += qp.CHECK_EVERY // 4  # a check every fourth epoch
        if qp._solves >= qp.CHECK_EVERY:
            qp._solves = 0
            qp._check_drift()

    def _factor_rows(self, SNr: np.ndarray) -> None:
        """Factor rows of the new pivots ``N`` (slots ``m₀ …``): ``[L_{N P₀}, F]`` and ``F⁻¹ S_{N,rest}``."""
        qp, m0 = self.qp, self.m0
        b = len(self.N)
        F = np.ascontiguousarray(self.F[:b, :b])
        Lt = qp._Lt
        LN = Lt[:m0, m0 : m0 + b]
        Lt[m0 : m0 + b, : m0 + b] = 0.0
        Lt[m0 : m0 + b, m0 : m0 + b] = F.T
        new = solve_triangular(F, SNr, lower=True, check_finite=False)
        Lt[m0 : m0 + b, m0 + b :] = new
        for i in range(b):
            off = (m0 + i) * (m0 + i + 1) // 2
            qp._ap[off : off + m0] = LN[:, i]
            qp._ap[off + m0 : off + m0 + i + 1] = F[i, : i + 1]
        y = qp._y
        y[m0 : m0 + b] = solve_triangular(F, qp._bs[m0 : m0 + b] - LN.T @ y[:m0], lower=True, check_finite=False)
        if qp._dvalid:
            qp._d[m0 + b :] -= np.einsum("ij,ij->j", new, new)


def _tri(F: np.ndarray, r: np.ndarray, trans: int) -> np.ndarray:
    """``F⁻¹ r`` (``trans = 0``) or ``F⁻ᵀ r`` (1) for the leading ``len(r)`` block of the padded factor ``F``."""
    n = r.shape[0]
    x = np.zeros(F.shape[0])
    x[:n] = r
    return dtrsv(F, x, lower=1, trans=trans, overwrite_x=1)[:n]
