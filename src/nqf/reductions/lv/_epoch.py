r"""Blocked epochs of the ε → 0 limit for a dense ``C``: many events per pass over the factor.

Between two events the incremental solver of :class:`~nqf.reductions.lv._qp.ActiveSetQP` reads
its whole factor (``O(K·|P|)`` numbers) to update every inactive velocity; for ``K`` in the
thousands that is memory-bound.  An *epoch* instead freezes the factor of the passive set ``P₀``
at its start and works on the Schur complement ``S = C − L Lᵀ`` (the interaction of the
inactive modes once ``P₀`` has relaxed):

* a set ``J`` of candidate modes (those that can reach ``s = 0`` first) gets ``S_JJ`` and
  ``W_J = C_{P₀P₀}⁻¹ C_{P₀J}`` from two BLAS-3 products; while modes ``N ⊂ J`` join, the plateau
  is ``x_N = S_NN⁻¹ g⁰_N``, ``x_{P₀} = x⁰ − W_N x_N`` and the candidates' velocities and log
  coordinates are exact: ``v_J = v⁰_J − 4 S_JN x_N``, ``s_J = s⁰_J + v⁰_J (τ − τ₀) − 4 S_JN X_N`` with
  ``X_N = ∫ x_N dτ``;
* every other inactive mode ``i`` is bounded with ``|S_ij| ≤ √(S_ii S_jj)`` (``S`` is positive
  semi-definite): ``s_i(τ) ≤ s⁰_i + v⁰_i (τ − τ₀) + 4 √S_ii Ψ(τ)``, ``Ψ = Σ_{j∈N} √S_jj X_j``;
  the epoch ends before an event at which one bound reaches ``−stol``;
* at the end the new factor columns of ``N`` and the exact gradient and ``s`` of every inactive
  mode follow from one product ``S_{N,I} = C_{N,I} − L_{N P₀} L_{I P₀}ᵀ`` (BLAS-3).

An epoch also ends before a join that needs an active-set step (a mode of ``P₀ ∪ N`` would hit
zero, or a singular pivot); the caller then takes that event with the exact per-event solver.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

from ._qp import ActiveSetQP

CANDIDATES = 96  # |J|
MAX_JOINS = 48  # |N| at most per epoch


class Epoch:
    """One epoch from the restricted optimum of ``qp`` at ``τ₀`` with log coordinates ``s`` (by mode)."""

    def __init__(self, qp: ActiveSetQP, s: np.ndarray, tau: float, phi: float, q: int = CANDIDATES):
        self.qp = qp
        m0 = self.m0 = qp._m
        self.v0 = 4.0 * qp.free_gradient()
        self.sc, self.tc = s.copy(), tau
        inactive = qp._mode[m0:]
        self.sqd = np.zeros(qp.K)
        self.sqd[inactive] = np.sqrt(np.maximum(qp.schur_diag()[m0:], 0.0))
        elig = inactive[np.isfinite(s[inactive])]
        # candidates: the earliest bound-crossing times with the previous epoch's rate of Ψ
        den = self.v0[elig] + 4.0 * self.sqd[elig] * phi
        t = np.where(den > 0, -s[elig] / np.where(den > 0, den, 1.0), np.inf)
        J = elig[np.argpartition(t, q - 1)[:q]] if elig.shape[0] > q else elig
        self.J = J
        rest = np.ones(qp.K, dtype=bool)
        rest[J] = False
        self.nc = elig[rest[elig]]  # bounded, non-candidate modes
        BJ = qp._Lt[:m0, qp._slot[J]]
        if m0 and J.shape[0]:
            self.W = solve_triangular(np.ascontiguousarray(qp._Lt[:m0, :m0]), BJ, lower=False, check_finite=False)
        else:
            self.W = np.zeros((m0, J.shape[0]))
        self.S = qp._C[np.ix_(J, J)] - BJ.T @ BJ
        self.P0 = qp._mode[:m0].copy()
        self.x0 = qp.z[self.P0].copy()
        self.xP0 = self.x0
        self.N: list[int] = []  # positions in J, in join order
        self.inN = np.zeros(J.shape[0], dtype=bool)
        self.F = np.zeros((0, 0))  # Cholesky factor of S_NN
        self.xN = self.XN = np.zeros(0)
        self.psi = 0.0
        self.rows: list[tuple[float, np.ndarray, np.ndarray]] = []  # (τ, path row, X_N) per breakpoint

    def candidates(self, tau: float):
        """``(s_J, v_J)`` at ``τ`` (exact)."""
        J, SJN = self.J, self.S[:, self.N]
        v = self.v0[J] - 4.0 * (SJN @ self.xN)
        s = self.sc[J] + self.v0[J] * (tau - self.tc) - 4.0 * (SJN @ self.XN)
        return s, v

    def advance(self, tau: float, vthr: float, stol: float):
        """Move to the next candidate event: its ``τ`` and ``s_J`` there, or None (no candidate, or a bound fails)."""
        s, v = self.candidates(tau)
        ok = ~self.inN & (v > vthr)
        if not ok.any():
            return None
        dt = np.where(ok, -s / np.where(ok, v, 1.0), np.inf)
        i = int(np.argmin(dt))
        dtau = max(float(dt[i]), 0.0)
        tnew = tau + dtau
        psi = self.psi + dtau * float(self.sqd[self.J[self.N]] @ self.xN)
        nc = self.nc
        if nc.shape[0]:
            lin = self.sc[nc] + self.v0[nc] * (tnew - self.tc)
            bound = 4.0 * self.sqd[nc] * psi
            slack = stol + 1e-9 * (np.abs(lin) + bound)
            if np.any(lin + bound + slack >= 0.0):
                return None
        self.XN = self.XN + dtau * self.xN
        self.psi = psi
        s = np.minimum(s + dtau * v, 0.0)
        s[i] = 0.0
        return tnew, s, i

    def record(self, tau: float, sJ: np.ndarray) -> np.ndarray:
        """The path row at a breakpoint ``τ`` (non-candidates completed at :meth:`commit`)."""
        row = self.sc + self.v0 * (tau - self.tc)
        row[self.J] = sJ
        row[self.J[self.N]] = 0.0
        self.rows.append((tau, row, self.XN.copy()))
        return row

    def join(self, i: int, rtol: float) -> bool:
        """Candidate ``J[i]`` joins if the plateau stays positive and the pivot regular; False leaves all unchanged."""
        N = self.N
        col = self.S[N, i]
        f = solve_triangular(self.F, col, lower=True, check_finite=False) if N else np.zeros(0)
        k = int(self.J[i])
        piv = float(self.S[i, i]) - float(f @ f)
        if not piv > rtol * max(float(self.qp._C[k, k]), 1e-300):
            return False
        n = len(N)
        F = np.zeros((n + 1, n + 1))
        F[:n, :n] = self.F
        F[n, :n] = f
        F[n, n] = np.sqrt(piv)
        idx = N + [i]
        r = 0.25 * self.v0[self.J[idx]]
        xN = solve_triangular(F, solve_triangular(F, r, lower=True, check_finite=False), lower=True, trans="T")
        xP0 = self.x0 - self.W[:, idx] @ xN
        thr = 1e-13 * max(1.0, float(np.max(np.abs(xN))), float(np.max(np.abs(xP0), initial=0.0)))
        if np.any(xN <= thr) or np.any(xP0 <= thr):
            return False
        N.append(i)
        self.inN[i] = True
        self.F, self.xN, self.xP0 = F, xN, xP0
        self.XN = np.append(self.XN, 0.0)
        qp = self.qp
        qp.z[self.P0] = xP0
        qp.z[self.J[idx]] = xN
        qp.in_p[k] = True
        return True

    def commit(self, tau: float, s: np.ndarray) -> float:
        """Write the joins into the factor of ``qp``, complete the path rows and ``s`` (by mode) at ``τ``.

        Returns the rate ``Ψ/(τ − τ₀)`` of the bound (0 for an empty epoch).
        """
        qp, m0 = self.qp, self.m0
        Nm = self.J[self.N]
        b = Nm.shape[0]
        qp._grow(b)
        for i, k in enumerate(Nm):
            qp._swap_slots(qp._slot[k], m0 + i)
        Lt = qp._Lt
        rest = qp._mode[m0 + b :]
        LN = Lt[:m0, m0 : m0 + b]
        SNr = qp._C[Nm][:, rest] - LN.T @ Lt[:m0, m0 + b :]  # S_{N, rest}
        if b:
            self._factor_rows(LN, SNr)
        # inactive modes: exact s on the recorded rows and now, and the gradient at the new plateau
        cols = np.flatnonzero(np.isfinite(self.sc[rest]))
        fin = rest[cols]
        if self.rows:
            X = np.zeros((len(self.rows), b))
            for t, (_, _, xb) in enumerate(self.rows):
                X[t, : xb.shape[0]] = xb
            corr = 4.0 * (X @ SNr[:, cols])
            for t, (tb, row, _) in enumerate(self.rows):
                row[fin] = np.minimum(self.sc[fin] + self.v0[fin] * (tb - self.tc) - corr[t], 0.0)
        s[fin] = np.minimum(self.sc[fin] + self.v0[fin] * (tau - self.tc) - 4.0 * (self.XN @ SNr[:, cols]), 0.0)
        s[Nm] = 0.0
        if b:
            qp._g[m0 + b :] -= self.xN @ SNr
            qp._m = m0 + b
            qp._free = None
            qp._solves += b
            if qp._solves >= qp.CHECK_EVERY:
                qp._solves = 0
                qp._check_drift()
        return self.psi / (tau - self.tc) if tau > self.tc else 0.0

    def _factor_rows(self, LN: np.ndarray, SNr: np.ndarray) -> None:
        """Factor rows of the new pivots ``N`` (slots ``m₀ …``): ``[L_{N P₀}, F]`` and ``F⁻¹ S_{N,rest}``."""
        qp, m0, F = self.qp, self.m0, self.F
        b = F.shape[0]
        Lt = qp._Lt
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
