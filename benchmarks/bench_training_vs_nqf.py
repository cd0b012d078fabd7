"""Benchmark: training the real tanh MLP at width 4096 vs the closed order-parameter dynamics.

All three runs start from the same ``W0`` (``M(0) = W0 W0ᵀ``), use the same data,
loss ``L = (1/N) Σ ½(f − y)²``, step ``η`` and number of steps (time ``t = η·steps``):

* network: :func:`nqf.dynamics.train_network` on :class:`nqf.networks.TwoLayerMLP` (autograd);
* weight form: :func:`nqf.simulate` with ``form="weights"`` (``W ← (I − 2ηG)W``, p × 4096);
* order-parameter form: :func:`nqf.simulate` (``M ← (I − 2ηG)M(I − 2ηG)ᵀ``, p × p) on the
  structured MLP operator (``O(N·D)`` per application, no ``N × p × p`` array).

Prints the wall-time ratios network ÷ order parameter (target ≥ 100) and
weight form ÷ order parameter, plus the agreement of the runs.

Usage: ``python benchmarks/bench_training_vs_nqf.py [--steps 300] [--width 4096] [--device cpu]``
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from nqf.dynamics import GD, Save, simulate, train_network
from nqf.networks._mlp import TwoLayerMLP
from nqf.structure._mlp import mlp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, default=512)
    ap.add_argument("--D", type=int, default=32)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--eps", type=float, default=1e-6, help="initial scale: M(0) = eps · W̃ W̃ᵀ")
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: on a shared 2-core machine OpenMP contention makes the "
        "small p × p kernels ~100× slower; 0 keeps torch's default)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    dt = torch.float64
    g = torch.Generator().manual_seed(0)
    X = torch.randn(args.N, args.D, generator=g, dtype=dt)
    teacher = torch.randn(args.D, generator=g, dtype=dt) / math.sqrt(args.D)
    y = torch.tanh(2 * X @ teacher)
    Wt = torch.randn(1 + args.D, args.width, generator=g, dtype=dt) / math.sqrt(args.width)
    X, y = X.to(dev), y.to(dev)
    W0 = math.sqrt(args.eps) * Wt.to(dev)
    op = mlp(X, "tanh")
    net = TwoLayerMLP(args.D, args.width, 1, "tanh").to(dev)
    common = dict(optimizer=GD(args.lr), steps=args.steps)

    def timed(fn):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return out, time.perf_counter() - t0

    simulate(op, y, W0=W0, optimizer=GD(args.lr), steps=5)  # warm-up (allocations, kernels)
    q, t_op = timed(lambda: simulate(op, y, W0=W0, save=Save(every=args.save_every, W=False), **common))
    w, t_w = timed(lambda: simulate(op, y, W0=W0, form="weights", save=Save(every=args.save_every, W=False), **common))
    n, t_net = timed(
        lambda: train_network(net, net.units, X, y, W0=W0, save=Save(every=args.save_every, W=False), **common)
    )
    U = op.data_subspace()
    note = "(= p: compression would not help)" if U.shape[1] == op.p else "(< p: pass compress=True)"
    print(
        f"device={dev}, threads={torch.get_num_threads()}, N={args.N}, D={args.D}, p={op.p}, "
        f"width m={args.width}, steps={args.steps}, lr={args.lr}, eps={args.eps:g}, "
        f"t_end={args.lr * args.steps:g}; data subspace dim r={U.shape[1]} {note}"
    )
    print(f"time: network {t_net:.3f} s | weight form {t_w:.3f} s | order parameter {t_op:.4f} s")
    print(f"network ÷ order parameter  = {t_net / t_op:8.1f}   (target ≥ 100)")
    print(f"weight form ÷ order param. = {t_w / t_op:8.1f}")
    dq = float(((q.M - w.M).flatten(1).norm(dim=1) / w.M.flatten(1).norm(dim=1)).max())
    print(f"order parameter vs weight form: max relative ‖ΔM‖ = {dq:.2e}")
    gap = float((n.loss - q.loss).abs().max())
    print(
        f"loss: L(0) = {float(q.loss[0]):.4f}, NQF L(end) = {float(q.loss[-1]):.4f}, network L(end) = "
        f"{float(n.loss[-1]):.4f}, max |L_net − L_NQF| = {gap:.3e}"
    )


if __name__ == "__main__":
    main()
