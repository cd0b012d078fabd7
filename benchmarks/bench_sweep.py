"""Benchmark: many runs of the demo problem, batched (`nqf.dynamics.simulate_batched`) vs one at a time.

The demo problem's closed order-parameter dynamics (a tanh MLP structure operator on
N = 512 exactly whitened inputs, D = 8, C = 3 teacher outputs, p = 11) for ``--runs``
runs of ``--steps`` GD steps that share the data and differ in the initial scale
ε ∈ {1e-2, 1e-4, 1e-6, 1e-8}, the seed of the initial weights
(``W0 = √ε G/√m``, ``G`` Gaussian of width m = 128, ``M(0) = W0 W0ᵀ``) and the step
η ∈ {4e-3, 5e-3}.  Both modes use the same ``--workers`` processes (one torch
thread each): one at a time = each process runs :func:`nqf.simulate` on its share of
the runs in turn; batched = each process runs one :func:`nqf.dynamics.simulate_batched`
over its share.  Prints both throughputs (run·steps per second), their ratio, and how
closely the results agree (max over runs of ``max|ΔM|/max|M|`` and ``max|ΔL|/L(0)``).

Run: ``python benchmarks/bench_sweep.py [--runs 100] [--steps 5000] [--workers 2]``
(on a machine with at least ``--workers`` free cores).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import time

from nqf.dynamics import GD, Save

EPS = (1e-2, 1e-4, 1e-6, 1e-8)
LRS = (4e-3, 5e-3)
SAVE_EVERY = 50
_STATE: dict = {}


def _init():
    import torch

    from nqf.app._experiments._demo import teacher_task
    from nqf.structure import mlp

    torch.set_num_threads(1)
    X, Y, _ = teacher_task(512, 8, [2.0, 1.0, 0.5], 0)
    _STATE["op"], _STATE["Y"] = mlp(X, "tanh", n_outputs=3), Y


def _setting(b: int, p: int):
    import torch

    eps, lr = EPS[b % len(EPS)], LRS[(b // len(EPS)) % len(LRS)]
    g = torch.Generator().manual_seed(b)
    W0 = math.sqrt(eps) * torch.randn(p, 128, dtype=torch.float64, generator=g) / math.sqrt(128)
    return W0 @ W0.T, lr


def _one_at_a_time(args):
    from nqf.dynamics import simulate

    runs, steps = args
    op, Y = _STATE["op"], _STATE["Y"]
    out = []
    for b in runs:
        M0, lr = _setting(b, op.p)
        tr = simulate(op, Y, M0=M0, optimizer=GD(lr), save=Save(every=SAVE_EVERY), steps=steps)
        out.append((b, tr.M.numpy(), tr.loss.numpy()))
    return out


def _batched(args):
    import torch

    from nqf.dynamics import Save, simulate_batched

    runs, steps = args
    op, Y = _STATE["op"], _STATE["Y"]
    settings = [_setting(b, op.p) for b in runs]
    trs = simulate_batched(
        op,
        Y,
        M0=torch.stack([s[0] for s in settings]),
        lr=[s[1] for s in settings],
        steps=steps,
        save=Save(every=SAVE_EVERY),
    )
    return [(b, tr.M.numpy(), tr.loss.numpy()) for b, tr in zip(runs, trs, strict=True)]


def _timed(pool, fn, runs, steps, workers):
    shares = [(runs[i::workers], steps) for i in range(workers)]
    t0 = time.perf_counter()
    parts = pool.map(fn, shares)
    dt = time.perf_counter() - t0
    return dt, {b: (M, L) for part in parts for b, M, L in part}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    import numpy as np

    runs = list(range(a.runs))
    ctx = mp.get_context("spawn")
    with ctx.Pool(a.workers, initializer=_init) as pool:
        pool.map(abs, range(a.workers))  # start (and initialise) every worker before timing
        t_batch, batch = _timed(pool, _batched, runs, a.steps, a.workers)
        t_one, one = _timed(pool, _one_at_a_time, runs, a.steps, a.workers)
    dM = max(float(np.max(np.abs(batch[b][0] - one[b][0])) / np.max(np.abs(one[b][0]))) for b in runs)
    dL = max(float(np.max(np.abs(batch[b][1] - one[b][1])) / one[b][1][0]) for b in runs)
    work = a.runs * a.steps
    print(
        f"demo problem (p = 11, N = 512, C = 3): {a.runs} runs × {a.steps} steps on {a.workers} worker processes "
        f"(1 thread each); ε ∈ {EPS}, η ∈ {LRS}, one seed per run"
    )
    print(f"one at a time (nqf.simulate):   {t_one:8.2f} s   {work / t_one:12.0f} run-steps/s")
    print(f"batched (simulate_batched):     {t_batch:8.2f} s   {work / t_batch:12.0f} run-steps/s")
    print(
        f"throughput ratio batched / one-at-a-time: {t_one / t_batch:.1f}x   (target ≥ 3x: "
        f"{'met' if t_one / t_batch >= 3 else 'NOT met'})"
    )
    print(
        f"agreement: max_b max|ΔM|/max|M| = {dM:.2e}, max_b max|ΔL|/L(0) = {dL:.2e}   (target ≤ 1e-12: "
        f"{'met' if max(dM, dL) <= 1e-12 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
