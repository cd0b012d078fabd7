"""Benchmark of the Lotka–Volterra solvers (nqf.lv).

Prints wall-clock times for

1. a K = 10 000-mode system with diagonal C (orthogonal features): the exact logistic
   solution of every mode on a time grid, all half-saturation (switch-on) times and the
   plateau sequence — checked against ``ln(z*/ε − 1)/ζ``;
2. the same K = 10 000 modes with a tridiagonal (sparse) interacting C, integrated by the
   stiff log-coordinate solver (LSODA with the banded analytic Jacobian ``−4 C diag(z)``),
   switch times by interpolation on the output grid — checked against the final state, and side
   by side with the previous implementation (Radau with the sparse Jacobian; slow: ``--no-before``
   skips it);
3. the ε → 0 limit (active-set construction) for K = 2000 interacting modes with a dense
   diagonal-plus-low-rank C — checked against scipy's NNLS on the square-root factor.

Run: ``python benchmarks/bench_lv.py [--K 10000] [--K-limit 2000]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp
from scipy.optimize import nnls

from nqf.lv.limit import limit
from nqf.lv.system import LotkaVolterra


def bench_diagonal(K: int, eps: float, rng) -> None:
    beta = rng.uniform(0.05, 1.0, K) * np.where(rng.random(K) < 0.9, 1.0, -1.0)
    c = rng.uniform(0.5, 2.0, K)
    t0 = time.perf_counter()
    lv = LotkaVolterra(beta, c, eps, y2=float(np.sum(np.maximum(beta, 0) ** 2 / c)) + 1.0)
    ts = lv.logistic_switch_times().numpy()
    T = 1.2 * np.nanmax(ts[np.isfinite(ts)])
    z = lv.logistic(np.linspace(0.0, T, 400)).numpy()
    pl = lv.plateaus()
    dt = time.perf_counter() - t0
    on = beta > 0
    ref = np.log(beta[on] / c[on] / eps - 1) / (4 * beta[on])
    err = np.max(np.abs(ts[on] / ref - 1))
    print(f"[diagonal C]  K = {K}, eps = {eps:g}: logistic for all modes on 400 times "
          f"+ {int(on.sum())} switch times + plateau sequence: {dt:.3f} s "
          f"(max rel. deviation from ln(z*/eps-1)/zeta: {err:.1e}; z grid {z.shape})")


def bench_sparse(K: int, eps: float, rng, before: bool = True) -> None:
    main = rng.uniform(1.0, 2.0, K)
    off = 0.25 * rng.standard_normal(K - 1)
    C = sp.diags([off, main, off], [-1, 0, 1]).tocsr()
    beta = C @ rng.uniform(0.2, 1.0, K)
    t0 = time.perf_counter()
    lv = LotkaVolterra(beta, C, eps)
    zf = lv.final_state().numpy()
    t1 = time.perf_counter()
    T = 3.0 * np.log(1 / eps) / (4 * max(float(np.min(beta[beta > 0])), 1e-3))
    sol = lv.flow(T, n_points=301, dense_output=False, rtol=1e-8, atol=1e-8)
    t2 = time.perf_counter()
    st = sol.switch_times(final=zf).numpy()
    t3 = time.perf_counter()
    fin = np.isfinite(st).sum()
    dev = np.max(np.abs(sol.z.numpy()[-1] - zf))
    print(f"[tridiagonal C] K = {K}, eps = {eps:g}: final state (L-BFGS-B) {t1 - t0:.2f} s, "
          f"stiff log-coordinate flow to t = {T:.0f} {t2 - t1:.2f} s "
          f"(success={sol.success}, {sol.stats}), switch times of {fin} modes {t3 - t2:.3f} s; "
          f"max |z(T) - z_inf| = {dev:.1e}")
    if before:
        # the implementation before the banded Jacobian: Radau with the sparse Jacobian (complex sparse LU)
        t4 = time.perf_counter()
        old = lv.flow(T, n_points=301, dense_output=False, rtol=1e-8, atol=1e-8, method="Radau")
        t5 = time.perf_counter()
        diff = float(np.max(np.abs(old.z.numpy() - sol.z.numpy())))
        print(f"    before (Radau, sparse Jacobian): {t5 - t4:.2f} s -> now {(t5 - t4) / (t2 - t1):.1f}x faster; "
              f"max |z_before - z_now| over the grid = {diff:.1e}")


def bench_limit(K: int, rng) -> None:
    V = rng.standard_normal((K, 20)) * 3.0 / np.sqrt(K)
    C = np.diag(np.linspace(0.5, 1.5, K)) + V @ V.T
    zt = np.where(rng.random(K) < 0.6, rng.random(K), 0.0)
    beta = C @ zt + 0.05 * rng.standard_normal(K)
    t0 = time.perf_counter()
    res = limit(beta, C)
    dt = time.perf_counter() - t0
    n_on = sum(e.kind == "on" for e in res.events)
    n_off = len(res.events) - n_on
    t1 = time.perf_counter()
    lam, U = np.linalg.eigh(C)
    x, _ = nnls((U * np.sqrt(lam)).T, (U.T @ beta) / np.sqrt(lam), maxiter=100 * K)
    dt_ref = time.perf_counter() - t1
    err = np.max(np.abs(res.z_final.numpy() - x))
    print(f"[eps -> 0 limit] K = {K} dense C: {len(res.events)} events ({n_on} on, {n_off} off) in {dt:.2f} s "
          f"(final active set {len(res.final_active)}); reference NNLS of the final state alone: "
          f"{dt_ref:.2f} s, max |z_final - z_nnls| = {err:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--K", type=int, default=10_000)
    ap.add_argument("--K-limit", type=int, default=2000)
    ap.add_argument("--eps", type=float, default=1e-30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-before", action="store_true", help="skip the slow runs of the previous implementation")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    bench_diagonal(args.K, args.eps, rng)
    bench_sparse(args.K, args.eps, rng, before=not args.no_before)
    bench_limit(args.K_limit, rng)


if __name__ == "__main__":
    main()
