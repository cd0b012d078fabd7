"""Benchmark: drop times of the saddle-subspace flow against the full NQF flow, and their cost.

Set-up (the zoo's ``dropout_mlp`` / ``batchnorm_mlp`` rows as ``nqf analyze`` sees them): digits (1797 samples,
64 standardised pixels, ten one-hot classes), a tanh MLP with hidden biases (``p = 75``), ``m`` units from
``nqf.dynamics.initial_weights`` (``M(0) = W(0) W(0)ᵀ``).  For each ``(m, ε)``:

* the full NQF: ``nqf.dynamics.gradient_flow`` of the ``p × p`` order parameter (DOP853, rtol 1e-10), its
  midpoint crossings read by ``nqf.curves.compare_staircase`` (the independent reference);
* the saddle sequence's staircase at leading order with its O(1) corrections (``nqf.reductions.predict``) and
  with ``subspace=True`` (the NQF restricted to the span of the saddles and escape directions, ``K`` dimensions).

Prints, per drop, the relative time error of each clock against the full flow, ``K``, and the seconds of the
subspace clock and of the full flow (measured in this run).

Last, a case with fewer units than the span has dimensions (a correlated-input MLP with 3 units), where the
subspace flow is not enough.

Run: ``python benchmarks/bench_subspace_flow.py [--widths 32,256] [--eps 1e-6,1e-12]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from nqf.app import load_dataset
from nqf.curves import compare_staircase
from nqf.dynamics import gradient_flow, initial_weights
from nqf.reductions import predict
from nqf.reductions.saddles import saddle_sequence
from nqf.reductions.saddles._subspace import saddle_span
from nqf.structure import mlp


def row(X, Y, m: int, eps: float) -> dict:
    return row_op(mlp(X, "tanh", bias=True, n_outputs=Y.shape[1]), Y, m, eps)


def row_op(op, Y, m: int, eps: float) -> dict:
    W0 = initial_weights(op.p, m, eps, seed=0)
    M0 = W0 @ W0.T
    leading = predict(op, Y, eps, M0=M0, max_rank=m, method="saddle-sequence")
    t0 = time.perf_counter()
    sub = predict(op, Y, eps, M0=M0, max_rank=m, method="saddle-sequence", subspace=True)
    t_sub = time.perf_counter() - t0  # the saddle search included
    t0 = time.perf_counter()
    seq = saddle_sequence(op, Y, max_rank=m)
    t_search = time.perf_counter() - t0
    T = 1.3 * float(np.nanmax(sub.times))
    t0 = time.perf_counter()
    flow = gradient_flow(op, Y, M0=M0, t_span=(0, T), t_eval=np.linspace(0, T, 40001), rtol=1e-10, method="DOP853")
    t_flow = time.perf_counter() - t0
    t_nqf = compare_staircase(flow.t.numpy(), flow.loss.numpy(), leading).times_measured
    K = saddle_span(seq.saddles).shape[1]
    return dict(
        m=m, eps=eps, p=op.p, K=K, drops=leading.n_drops,
        leading=np.abs(leading.times / t_nqf - 1), subspace=np.abs(sub.times / t_nqf - 1),
        rules=leading.time_rules, s_clock=t_sub - t_search, s_flow=t_flow,
    )  # fmt: skip


def few_units(m: int = 3, eps: float = 1e-6) -> dict:
    """Fewer units than the span has dimensions: correlated inputs (N = 120, D = 6), a rank-4 teacher (2, 1.4, 0.9,
    0.5), tanh MLP (p = 10), ``m`` units."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(120, 6, generator=g, dtype=torch.float64) @ (torch.eye(6) + 0.3 * torch.ones(6, 6)).double()
    Y = X[:, :4] @ torch.diag(torch.tensor([2.0, 1.4, 0.9, 0.5], dtype=torch.float64))
    return row_op(mlp(X, "tanh", n_outputs=4), Y, m, eps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default="32")
    ap.add_argument("--eps", default="1e-6")
    args = ap.parse_args(argv)
    data = load_dataset("digits")
    X, Y = (torch.as_tensor(v, dtype=torch.float64) for v in (data.X, data.Y))
    cases = [(f"digits, m = {m}", lambda m=m, e=e: row(X, Y, m, e), e) for m in map(int, args.widths.split(","))
             for e in map(float, args.eps.split(","))]  # fmt: skip
    cases.append(("few units: correlated-input MLP, m = 3", few_units, 1e-6))
    for name, make, eps in cases:
        if True:
            r = make()
            print(f"{name}, ε = {eps:g}: p = {r['p']}, K = {r['K']}, {r['drops']} drops")
            print("  leading order (+O(1)):", " ".join(f"{100 * e:.1f}" for e in r["leading"]), "%")
            print("  subspace flow:        ", " ".join(f"{100 * e:.2f}" for e in r["subspace"]), "%")
            print(
                f"  worst: leading {100 * np.nanmax(r['leading']):.1f} %, "
                f"subspace {100 * np.nanmax(r['subspace']):.2f} %;"
                f" seconds: subspace clock {r['s_clock']:.2f} (after the search), full flow {r['s_flow']:.2f}"
                f" (ratio {r['s_clock'] / r['s_flow']:.2f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
