"""Structured (low-rank-per-sample) vs dense MLP structure operator.

Prints, measured in this run:
* op(M) + op.adjoint(R) time, dense (N, p, p) array ÷ structured, at a size where dense fits;
* time and peak resident memory of the structured operator at N = 200 000, D = 512
  (a dense array there would need N·p²·8 B ≈ 421 GB).

Run: python benchmarks/bench_structure.py
"""

from __future__ import annotations

import resource
import time

import torch

from nqf.structure import DenseStructure, mlp


def _time(fn, repeat=5):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    torch.manual_seed(0)
    N, D, C = 2000, 127, 1
    X = torch.randn(N, D, dtype=torch.float64)
    op = mlp(X, "tanh", n_outputs=C)
    dense = DenseStructure(op.dense())
    M = torch.randn(op.p, op.p, dtype=torch.float64)
    R = torch.randn(N, dtype=torch.float64)
    t_s = _time(lambda: (op(M), op.adjoint(R)))
    t_d = _time(lambda: (dense(M), dense.adjoint(R)))
    print(f"N={N}, D={D}, p={op.p}: dense array {N * op.p**2 * 8 / 2**20:.0f} MiB")
    print(f"  dense     op+adjoint: {t_d * 1e3:9.3f} ms")
    print(f"  structured op+adjoint: {t_s * 1e3:8.3f} ms")
    print(f"  ratio dense / structured = {t_d / t_s:.1f}x")
    del dense

    N, D = 200_000, 512
    X = torch.randn(N, D, dtype=torch.float64)
    op = mlp(X, "tanh")
    M = torch.randn(op.p, op.p, dtype=torch.float64)
    t0 = time.perf_counter()
    f = op(M)
    t1 = time.perf_counter()
    op.adjoint(f)
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"N={N}, D={D}, p={op.p}: op(M) {t1 - t0:.3f} s, adjoint {t2 - t1:.3f} s, "
          f"peak RSS {peak:.2f} GiB (input X alone: {X.numel() * 8 / 2**30:.2f} GiB; "
          f"dense would be {N * op.p**2 * 8 / 2**30:.0f} GiB)")


if __name__ == "__main__":
    main()
