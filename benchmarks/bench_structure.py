"""Structured (low-rank-per-sample) vs dense MLP structure operator.

Prints, measured in this run:
* op(M) + op.adjoint(R) time, dense (N, p, p) array ÷ structured, at a size where dense fits;
* time and peak resident memory of the structured operator at N = 200 000, D = 512
  (a dense array there would need N·p²·8 B ≈ 421 GB);
* ``from_module`` (autodiff) on a tanh ``nn.Sequential`` MLP ÷ the analytic operator
  ``mlp(X).dense()`` (the same dense (N, p, p) array), at widths 256 and 4096: both ratios
  and their quotient (acceptance: each ratio ≤ 10, quotient ≤ 1.5).  CPU time of this
  process (``time.process_time``, best of 3, interleaved), robust to other load on the machine.

Run: python benchmarks/bench_structure.py            (all)
     python benchmarks/bench_structure.py autodiff   (only the from_module comparison)
"""

from __future__ import annotations

import resource
import sys
import time

import torch
from torch import nn

from nqf.modules import from_module, mlp_units
from nqf.structure import DenseStructure, mlp


def _time(fn, repeat=5):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _cpu_best(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def autodiff_vs_analytic(N=4000, D=64, widths=(256, 4096)):
    """from_module on nn.Sequential(Linear(D, m), Tanh, Linear(m, 1)) vs mlp(X, 'tanh').dense()."""
    torch.manual_seed(0)
    X = torch.randn(N, D, dtype=torch.float64)
    ratios = {}
    for m in widths:
        seq = nn.Sequential(
            nn.Linear(D, m, bias=False, dtype=torch.float64),
            nn.Tanh(),
            nn.Linear(m, 1, bias=False, dtype=torch.float64),
        )
        units = mlp_units(seq)
        op = from_module(seq, units, X[:8])  # warm-up (first forward-AD call imports decompositions)
        err = float((from_module(seq, units, X).dense() - mlp(X, "tanh").dense()).abs().max())
        t_auto, t_ana = [], []
        for _ in range(3):
            t_auto.append(_cpu_best(lambda seq=seq, units=units: from_module(seq, units, X), 1))
            t_ana.append(_cpu_best(lambda: mlp(X, "tanh").dense(), 1))
        ta, tn = min(t_auto), min(t_ana)
        ratios[m] = ta / tn
        print(
            f"tanh MLP N={N}, D={D}, p={op.p}, width {m:5d}: from_module {ta:.3f} s, analytic dense "
            f"{tn:.4f} s, ratio {ta / tn:.1f}x  (max |ΔA| = {err:.1e})"
        )
    a, b = (ratios[w] for w in widths)
    print(f"  ratio at width {widths[1]} ÷ ratio at width {widths[0]} = {b / a:.2f}")
    return ratios


def dense_vs_structured():
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


def main():
    torch.set_num_threads(1)
    autodiff_vs_analytic()
    if sys.argv[1:] == ["autodiff"]:
        return
    dense_vs_structured()
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
    print(
        f"N={N}, D={D}, p={op.p}: op(M) {t1 - t0:.3f} s, adjoint {t2 - t1:.3f} s, "
        f"peak RSS {peak:.2f} GiB (input X alone: {X.numel() * 8 / 2**30:.2f} GiB; "
        f"dense would be {N * op.p**2 * 8 / 2**30:.0f} GiB)"
    )


if __name__ == "__main__":
    main()
