"""Benchmark: the whole greedy saddle sequence for p = 500.

Vector-output two-layer tanh MLP NQF (``nqf.structure.mlp``) with ``C = 10``
outputs and ``D = 490`` correlated inputs (``p = C + D = 500``), ``N = 2000``
samples, targets from a rank-8 linear teacher with a decaying spectrum plus
noise restricted to 8 output directions, so the optimum has rank 8.  Prints
the wall time of :func:`nqf.reductions.saddles.saddle_sequence` (all saddles, the escape
trajectory and the bookkeeping), the per-saddle levels and how far they are
from the closed-form reduced-rank-regression losses.

Run: ``python benchmarks/bench_saddles.py`` (``--p`` to change the size, ``--threads N`` for the torch
CPU threads; default: every CPU of the machine, ``os.cpu_count()``).
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from nqf.reductions.saddles import saddle_sequence
from nqf.structure._mlp import mlp


def make_problem(p: int = 500, C: int = 10, N: int = 2000, rank: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    D = p - C
    cov = torch.linspace(2.0, 0.5, D, dtype=torch.float64)
    R, _ = torch.linalg.qr(torch.randn(D, D, generator=g, dtype=torch.float64))
    X = torch.randn(N, D, generator=g, dtype=torch.float64) @ torch.diag(cov.sqrt()) @ R.T
    U, _ = torch.linalg.qr(torch.randn(C, rank, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(D, rank, generator=g, dtype=torch.float64))
    s = 3.0 * 0.7 ** torch.arange(rank, dtype=torch.float64)
    Y = X @ (U @ torch.diag(s) @ V.T).T
    Y = Y + 0.05 * torch.randn(N, rank, generator=g, dtype=torch.float64) @ U.T
    return mlp(X, "tanh", n_outputs=C), X, Y


def rrr_losses(X, Y, kmax):
    N = X.shape[0]
    w, U = torch.linalg.eigh(X.T @ X / N)
    s = torch.linalg.svdvals((Y.T @ X / N) @ U @ torch.diag(w**-0.5) @ U.T)
    Eyy = float((Y * Y).sum()) / N
    return [0.5 * (Eyy - float((s[:k] ** 2).sum())) for k in range(kmax + 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=int, default=500)
    ap.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: the machine's CPU count, os.cpu_count())"
    )
    args = ap.parse_args()
    threads = args.threads or os.cpu_count() or 1
    if threads < 1:
        ap.error(f"--threads must be ≥ 1; found {threads}")
    torch.set_num_threads(threads)
    op, X, Y = make_problem(args.p)
    t0 = time.perf_counter()
    seq = saddle_sequence(op, Y)
    dt = time.perf_counter() - t0
    truth = rrr_losses(X, Y, int(seq.ranks[-1]))
    err = max(abs(L - truth[int(r)]) for L, r in zip(seq.plateau_levels, seq.ranks, strict=True))
    print(
        f"p = {op.p}, N = {op.n_samples}, C = {op.n_outputs}: {len(seq) - 1} saddles, final rank "
        f"{seq.ranks[-1]}, global minimum: {seq.global_minimum} ({seq.message})"
    )
    print(f"saddle sequence wall time: {dt:.2f} s ({threads} torch thread(s))")
    print(f"max |plateau − RRR closed form| = {err:.2e} (plateau 0 = {truth[0]:.3f})")
    for s in seq.saddles:
        print(
            f"  k={s.index:2d} rank={s.rank:2d} loss={s.loss:.6e} escape rate={s.escape_rate:.4e} "
            f"tau={s.tau:.4f} |GM|={s.stationarity:.1e}"
        )


if __name__ == "__main__":
    main()
