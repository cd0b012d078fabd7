"""Benchmark of the power-law fit's bootstrap (nqf.curves.fit_power_law): one Python loop per replicate (the
previous implementation, reimplemented below) against the vectorised one (``nqf.curves._bootstrap``: every
replicate drawn at once, the cell regressions solved as one batch), in the same run.

For each scheme (``residuals``, ``wild``, ``pairs``; ``L_∞`` fixed) both are given the same cells and seed;
they draw the same random numbers, so the replicates must agree to rounding (checked).  The moving-block
scheme is new (no loop to compare with) and is timed alone.  Times are the best of ``--repeat`` runs, with
single-threaded BLAS (``OMP_NUM_THREADS=1`` is set before NumPy loads), so the ratio is meaningful on a shared
machine.

Run: ``python benchmarks/bench_bootstrap.py [--n-boot 2000] [--points 2000] [--n-bins 60] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from nqf.curves._bootstrap import bootstrap_exponents  # noqa: E402
from nqf.curves._powerlaw import _fit_once  # noqa: E402


def _ols_slope(x: np.ndarray, y: np.ndarray) -> float:
    xm, ym = x.mean(), y.mean()
    return float(((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum())


def loop_bootstrap(bx, by, res, cnt, *, scheme: str, n_boot: int, seed) -> np.ndarray:
    """The previous implementation: one replicate per iteration (``L_∞`` fixed)."""
    rng = np.random.default_rng(seed)
    boot = np.empty(n_boot)
    fitted = by - res
    for b in range(n_boot):
        if scheme == "pairs":
            while True:
                j = rng.integers(0, bx.size, bx.size)
                if np.ptp(bx[j]) > 0:
                    break
            xb, yb = bx[j], by[j]
        elif scheme == "wild":
            xb, yb = bx, fitted + res * rng.choice((-1.0, 1.0), res.size)
        else:
            z = res * np.sqrt(cnt)
            xb, yb = bx, fitted + z[rng.integers(0, z.size, z.size)] / np.sqrt(cnt)
        boot[b] = -_ols_slope(xb, yb)
    return boot


def _best(fn, repeat: int) -> tuple[float, np.ndarray]:
    best, out = np.inf, np.empty(0)
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--n-bins", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    t = np.linspace(1.0, 1e3, args.points)  # uniform in t, as a GD curve: dense at late times
    loss = t**-1.0 * np.exp(0.1 * rng.standard_normal(t.size))
    _, _, res, _, _, bx, by, cnt = _fit_once(np.log(t), loss, 0.0, args.n_bins)
    print(f"{args.points} points in {bx.size} cells, n_boot = {args.n_boot}, best of {args.repeat}")
    print(f"{'scheme':<10} {'loop [ms]':>10} {'vectorised [ms]':>16} {'ratio':>8} {'max |Δα*|':>11}")
    for scheme in ("residuals", "wild", "pairs"):
        kw = {"scheme": scheme, "n_boot": args.n_boot, "seed": 1}
        t_loop, b_loop = _best(lambda kw=kw: loop_bootstrap(bx, by, res, cnt, **kw), args.repeat)
        t_vec, b_vec = _best(lambda kw=kw: bootstrap_exponents(bx, by, res, cnt, **kw), args.repeat)
        diff = float(np.max(np.abs(b_loop - b_vec)))
        assert diff < 1e-10, (scheme, diff)
        print(f"{scheme:<10} {1e3 * t_loop:>10.2f} {1e3 * t_vec:>16.2f} {t_loop / t_vec:>7.1f}× {diff:>11.1e}")
    t_blk, _ = _best(
        lambda: bootstrap_exponents(bx, by, res, cnt, scheme="block", n_boot=args.n_boot, seed=1), args.repeat
    )
    print(f"{'block':<10} {'—':>10} {1e3 * t_blk:>16.2f} {'(new)':>8}")


if __name__ == "__main__":
    main()
