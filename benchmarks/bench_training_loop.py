"""The real network's training loop against a plain torch loop on the same problem (issue 34).

``nqf.train_network`` trains a module's units with full-batch GD and records the full-data loss at every
step; the plain loop is what a user writes: ``torch.optim.SGD`` over the module's parameters, the MSE
``½ Σ_c (f_c − y_c)²`` averaged over samples, the loss read out (``float``) at every step.  Both start from
the same ``W(0)`` (ε = 1e-12) and take the same steps; their loss curves must agree to round-off (checked
here, printed as the largest relative difference).  Runs come in pairs, each loop first in half of them (the
first of a pair is the slower on this machine: digits, 0.82–0.97 with the plain loop first and 0.91–1.38 with
nqf's first), one torch thread, and the ratio of the medians is printed.

glibc's ``malloc`` moves its mmap and trim thresholds with what was freed before, so a loop that allocates
megabyte temporaries every step (both do) pays page faults on fresh memory in some runs and not in others: with
the default thresholds the digits ratio ranged 0.91–1.38 over runs of this script, the spread all inside torch's
kernels (backward, tanh, linear: 97 % of the profile, one loop's tanh 0.56–0.92 s over the same 402 calls).
With ``--fixed-malloc`` (glibc only: ``mallopt`` fixes both thresholds at 256 MiB / 1 GiB before anything
runs) neither loop pays them: digits 1.03–1.06, iris 1.04–1.12 (four runs).

    OMP_NUM_THREADS=1 python benchmarks/bench_training_loop.py [--fixed-malloc]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import torch

from nqf.app import load_dataset
from nqf.dynamics import GD, Save, initial_weights, train_network
from nqf.networks import TwoLayerMLP

SETUPS = {"iris": (64, 4000, 0.02), "digits": (128, 400, 0.0133)}
REPEATS = 6  # even: each loop runs first in half of the pairs


def _problem(name: str):
    d = load_dataset(name)
    X = torch.as_tensor(np.asarray(d.X), dtype=torch.float64)
    Y = torch.as_tensor(np.asarray(d.Y), dtype=torch.float64)
    return X, Y


def _nqf(X, Y, width, W0, lr, steps):
    net = TwoLayerMLP(X.shape[1], width, Y.shape[1], "tanh")
    t0 = time.perf_counter()
    tr = train_network(net, net.units, X, Y, W0=W0, optimizer=GD(lr), save=Save(every=1, M=False, W=False), steps=steps)
    return time.perf_counter() - t0, tr.loss.numpy()


def _plain(X, Y, width, W0, lr, steps):
    net = TwoLayerMLP(X.shape[1], width, Y.shape[1], "tanh")
    net.units.set_W(net, torch.as_tensor(W0))
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    losses = []
    t0 = time.perf_counter()
    for k in range(steps + 1):
        L = 0.5 * ((net(X) - Y) ** 2).sum(1).mean()
        losses.append(float(L.detach()))
        if k == steps:
            break
        opt.zero_grad()
        L.backward()
        opt.step()
    return time.perf_counter() - t0, np.array(losses)


def _fix_malloc() -> str:
    """Fix glibc's mmap and trim thresholds (``mallopt``), so that no run pays page faults for another's frees."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):
        return "default malloc (no glibc mallopt here)"
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    ok = libc.mallopt(M_MMAP_THRESHOLD, 256 << 20) and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    return "glibc malloc, mmap/trim thresholds fixed" if ok else "default malloc (mallopt refused)"


def main() -> None:
    torch.set_num_threads(1)
    if "--fixed-malloc" in sys.argv[1:]:
        print(_fix_malloc())
    print(
        f"{'set-up':8s} {'steps':>6s} {'train_network s':>16s} {'plain torch s':>14s} {'ratio':>6s} {'max |ΔL|/L':>11s}"
    )
    for name, (width, steps, lr) in SETUPS.items():
        X, Y = _problem(name)
        W0 = initial_weights(X.shape[1] + Y.shape[1], width, 1e-12, seed=0)
        a, b, diff = [], [], 0.0
        for i in range(REPEATS):  # each loop first in half of the pairs (module docstring)
            if i % 2:
                tb, Lb = _plain(X, Y, width, W0, lr, steps)
                ta, La = _nqf(X, Y, width, W0, lr, steps)
            else:
                ta, La = _nqf(X, Y, width, W0, lr, steps)
                tb, Lb = _plain(X, Y, width, W0, lr, steps)
            a.append(ta)
            b.append(tb)
            diff = max(diff, float(np.max(np.abs(La - Lb) / Lb)))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name:8s} {steps:6d} {ma:16.3f} {mb:14.3f} {ma / mb:6.2f} {diff:11.1e}")


if __name__ == "__main__":
    main()
