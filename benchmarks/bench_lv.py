"""Benchmark of the Lotka–Volterra solvers (nqf.reductions.lv).

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
   diagonal-plus-low-rank C — checked against scipy's NNLS on the square-root factor, and side by
   side with the previous implementation (``benchmarks/lv_limit_reference.py``: explicit inverse of
   ``C_SS``, ``β − Cz`` recomputed in ``O(K²)`` after every event), same events required;
4. the ε → 0 limit for the K = 10 000 tridiagonal C of part 2 given as a scipy.sparse matrix (the
   banded path: never densified) — checked against the sparse solve of the final state, and on its
   first ``--K-banded-check`` modes against the dense path on the same matrix (same events, times).

Times are wall-clock and CPU (``time.process_time``) with single-threaded BLAS by default, so
that the ratios measured in one run are meaningful on a shared machine.

Run: ``python benchmarks/bench_lv.py [--K 10000] [--K-limit 2000] [--parts limit,banded] [--no-before]``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.optimize import nnls

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - optional
    threadpool_limits = None

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lv_limit_reference import reference_limit

from nqf.reductions.lv._limit import limit
from nqf.reductions.lv._system import LotkaVolterra


def bench_diagonal(K: int, eps: float, rng) -> None:
    beta = rng.uniform(0.05, 1.0, K) * np.where(rng.random(K) < 0.9, 1.0, -1.0)
    c = rng.uniform(0.5, 2.0, K)
    t0 = time.perf_counter()
    lv = LotkaVolterra(beta, c, eps, y2=float(np.sum(np.maximum(beta, 0) ** 2 / c)) + 1.0)
    ts = lv.logistic_switch_times().numpy()
    T = 1.2 * np.nanmax(ts[np.isfinite(ts)])
    z = lv.logistic(np.linspace(0.0, T, 400)).numpy()
    lv.plateaus()
    dt = time.perf_counter() - t0
    on = beta > 0
    ref = np.log(beta[on] / c[on] / eps - 1) / (4 * beta[on])
    err = np.max(np.abs(ts[on] / ref - 1))
    print(
        f"[diagonal C]  K = {K}, eps = {eps:g}: logistic for all modes on 400 times "
        f"+ {int(on.sum())} switch times + plateau sequence: {dt:.3f} s "
        f"(max rel. deviation from ln(z*/eps-1)/zeta: {err:.1e}; z grid {z.shape})"
    )


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
    print(
        f"[tridiagonal C] K = {K}, eps = {eps:g}: final state (L-BFGS-B) {t1 - t0:.2f} s, "
        f"stiff log-coordinate flow to t = {T:.0f} {t2 - t1:.2f} s "
        f"(success={sol.success}, {sol.stats}), switch times of {fin} modes {t3 - t2:.3f} s; "
        f"max |z(T) - z_inf| = {dev:.1e}"
    )
    if before:
        # the implementation before the banded Jacobian: Radau with the sparse Jacobian (complex sparse LU)
        t4 = time.perf_counter()
        old = lv.flow(T, n_points=301, dense_output=False, rtol=1e-8, atol=1e-8, method="Radau")
        t5 = time.perf_counter()
        diff = float(np.max(np.abs(old.z.numpy() - sol.z.numpy())))
        print(
            f"    before (Radau, sparse Jacobian): {t5 - t4:.2f} s -> now {(t5 - t4) / (t2 - t1):.1f}x faster; "
            f"max |z_before - z_now| over the grid = {diff:.1e}"
        )


def _timed(f, *args):
    t0, c0 = time.perf_counter(), time.process_time()
    out = f(*args)
    return out, time.perf_counter() - t0, time.process_time() - c0


def bench_limit(K: int, rng, before: bool = True) -> None:
    V = rng.standard_normal((K, 20)) * 3.0 / np.sqrt(K)
    C = np.diag(np.linspace(0.5, 1.5, K)) + V @ V.T
    zt = np.where(rng.random(K) < 0.6, rng.random(K), 0.0)
    beta = C @ zt + 0.05 * rng.standard_normal(K)
    chol = [_timed(np.linalg.cholesky, C)[1:] for _ in range(3)]  # the unit: one Cholesky of C (wall, cpu)
    t_chol, c_chol = min(w for w, _ in chol), min(c for _, c in chol)
    res, dt, cpu = _timed(limit, beta, C)
    n_on = sum(e.kind == "on" for e in res.events)
    n_off = len(res.events) - n_on
    t1 = time.perf_counter()
    lam, U = np.linalg.eigh(C)
    x, _ = nnls((U * np.sqrt(lam)).T, (U.T @ beta) / np.sqrt(lam), maxiter=100 * K)
    dt_ref = time.perf_counter() - t1
    err = np.max(np.abs(res.z_final.numpy() - x))
    print(
        f"[eps -> 0 limit] K = {K} dense C: {len(res.events)} events ({n_on} on, {n_off} off) in {dt:.2f} s "
        f"= {dt / t_chol:.1f} x one Cholesky of C ({t_chol:.3f} s) "
        f"(cpu {cpu:.2f} s = {cpu / c_chol:.1f} x the Cholesky's cpu {c_chol:.3f} s; "
        f"final active set {len(res.final_active)}); reference NNLS of the final state alone: "
        f"{dt_ref:.2f} s, max |z_final - z_nnls| = {err:.1e}"
    )
    if before:
        # the implementation before the incremental factor (benchmarks/lv_limit_reference.py), same run
        old, dt_old, cpu_old = _timed(reference_limit, beta, C)
        same = [(e.mode, e.kind) for e in old.events] == [(e.mode, e.kind) for e in res.events]
        msg = "different event sequence!"
        if same:
            t_new, t_old = res.taus.numpy(), old.taus.numpy()
            dtau = float(np.max(np.abs(t_new - t_old)) / max(float(np.max(np.abs(t_old))), 1e-300))
            dz = float(np.max(np.abs(res.z_final.numpy() - old.z_final.numpy())) / np.max(np.abs(x)))
            msg = (
                f"same {len(res.events)} events, max rel. |tau_new - tau_old| = {dtau:.1e}, rel. |dz_final| = {dz:.1e}"
            )
        print(
            f"    before (explicit inverse, O(K^2) gradient per event): {dt_old:.2f} s = {dt_old / t_chol:.1f} x one "
            f"Cholesky (cpu {cpu_old:.2f} s = {cpu_old / c_chol:.1f} x) "
            f"-> now {dt_old / dt:.1f}x faster (cpu {cpu_old / cpu:.1f}x); {msg}"
        )


def tridiagonal(K: int, rng):
    """The tridiagonal ``(β, C)`` of part 2 (``β = C z*`` with ``z* > 0``)."""
    main = rng.uniform(1.0, 2.0, K)
    off = 0.25 * rng.standard_normal(K - 1)
    C = sp.diags([off, main, off], [-1, 0, 1]).tocsr()
    return C @ rng.uniform(0.2, 1.0, K), C


def bench_banded(K: int, K_check: int, rng) -> None:
    beta, C = tridiagonal(K, rng)
    res, dt, cpu = _timed(limit, beta, C)
    zs = spla.spsolve(C.tocsc(), beta)
    n_on = sum(e.kind == "on" for e in res.events)
    dz = float(np.max(np.abs(res.z_final.numpy() - zs)))
    print(
        f"[eps -> 0 limit] K = {K} tridiagonal C (scipy.sparse, banded path): {len(res.events)} events "
        f"({n_on} on) in {dt:.2f} s (cpu {cpu:.2f} s); max |z_final - C^-1 beta| = {dz:.1e}"
    )
    b2, C2 = beta[:K_check], C[:K_check, :K_check].tocsr()
    band, dt_b, _ = _timed(limit, b2, C2)
    dense, dt_d, _ = _timed(limit, b2, C2.toarray())
    same = [(e.mode, e.kind) for e in band.events] == [(e.mode, e.kind) for e in dense.events]
    msg = "different event sequence!"
    if same:
        t_b, t_d = band.taus.numpy(), dense.taus.numpy()
        dtau = float(np.max(np.abs(t_b - t_d)) / max(float(np.max(np.abs(t_d))), 1e-300))
        dzf = float(np.max(np.abs(band.z_final.numpy() - dense.z_final.numpy())))
        msg = (
            f"same {len(band.events)} events, max rel. |tau_banded - tau_dense| = {dtau:.1e}, "
            f"max |dz_final| = {dzf:.1e}"
        )
    print(
        f"    first {K_check} modes: banded path {dt_b:.3f} s, dense path (C.toarray()) {dt_d:.3f} s "
        f"-> banded {dt_d / dt_b:.1f}x faster; {msg}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--K", type=int, default=10_000)
    ap.add_argument("--K-limit", type=int, default=2000)
    ap.add_argument("--K-banded-check", type=int, default=2000, help="modes of the banded-vs-dense check")
    ap.add_argument("--eps", type=float, default=1e-30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-before", action="store_true", help="skip the slow runs of the previous implementation")
    ap.add_argument(
        "--parts", default="diagonal,sparse,limit,banded", help="comma-separated subset of diagonal,sparse,limit,banded"
    )
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads (via threadpoolctl when installed)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    ctx = threadpool_limits(args.threads) if threadpool_limits is not None else contextlib.nullcontext()
    with ctx:
        # one generator per part, so that --parts does not change the problems
        if "diagonal" in parts:
            bench_diagonal(args.K, args.eps, np.random.default_rng([args.seed, 0]))
        if "sparse" in parts:
            bench_sparse(args.K, args.eps, np.random.default_rng([args.seed, 1]), before=not args.no_before)
        if "limit" in parts:
            bench_limit(args.K_limit, np.random.default_rng([args.seed, 2]), before=not args.no_before)
        if "banded" in parts:
            bench_banded(args.K, args.K_banded_check, np.random.default_rng([args.seed, 1]))


if __name__ == "__main__":
    main()
