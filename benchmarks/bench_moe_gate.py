"""Benchmark: why the zoo's mixture of experts parts from its prediction (issue 32) — the gate.

The zoo's ``HandMoE`` (softmax gate over 4 tanh experts, digits) is predicted on the hidden neurons of its
experts: the gate's deviation from ``1/E`` is first order in the units, so it multiplies the experts'
second-order output into a *cubic* term that the NQF leaves out.  To see whether that term is what the real
network's gap is, the real network is trained by plain GD at the analysis's step ``η`` from the same kind of
start as the analysis (each unit — expert ``e``'s parameters and gate row ``e`` — a vector of norm ``√ε``,
the four orthonormal) twice: with the gate trained, and with the gate held at 0 (uniform ``1/E``: the model
is then exactly a sum of tanh MLPs, whose NQF error is fourth order).  The prediction is the same for both
(``nqf.analyze`` on the model); each run is judged against it by ``nqf.curves.compare_staircase``.

Run: ``python benchmarks/bench_moe_gate.py [--eps 1e-6]``; prints the analysis's check of the error order, the
per-drop relative time errors of its own real network and of the two GD runs, and each run's seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ZOO = Path(__file__).resolve().parent / "zoo" / "models.py"


def _start(net, eps: float, gen: torch.Generator) -> None:
    """Unit ``e`` = (gate row ``e``, expert ``e``'s parameters), the four orthonormal, each of norm ``√ε``."""
    E, D = net.gate.weight.shape
    p = D + sum(q.numel() for q in net.experts[0].parameters())
    Q = torch.linalg.qr(torch.randn(p, E, generator=gen, dtype=torch.float64))[0] * eps**0.5
    with torch.no_grad():
        for e, expert in enumerate(net.experts):
            net.gate.weight[e].copy_(Q[:D, e])
            off = D
            for q in expert.parameters():
                q.copy_(Q[off : off + q.numel(), e].reshape(q.shape))
                off += q.numel()


def _gd(net, X, Y, lr: float, steps: int, train_gate: bool):
    if not train_gate:
        with torch.no_grad():
            net.gate.weight.zero_()
    params = [q for e in net.experts for q in e.parameters()] + ([net.gate.weight] if train_gate else [])
    opt = torch.optim.SGD(params, lr=lr)
    every = max(1, steps // 4000)
    t, loss = [], []
    for k in range(steps + 1):
        opt.zero_grad()
        L = 0.5 * ((net(X) - Y) ** 2).sum(1).mean()
        if k % every == 0:
            t.append(k * lr)
            loss.append(float(L.detach()))
        if k < steps:
            L.backward()
            opt.step()
    return np.array(t), np.array(loss)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", type=float, default=1e-6)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import nqf
    from nqf.app import load_dataset
    from nqf.curves import compare_staircase

    sys.path.insert(0, str(ZOO.parent))
    import models  # the zoo

    data = load_dataset("digits")
    t0 = time.perf_counter()
    a = nqf.analyze(f"{ZOO}:moe", data, eps=args.eps)
    st, lr = a.prediction, float(a.lr)
    took = time.perf_counter() - t0
    print(f"analysis: {took:.0f} s, η = {lr:.4g}, {st.n_drops} drops at t = {np.round(st.times, 1)}")
    print(f"  its real network (20 η and 10 η, carried to η): {np.round(100 * a.real.time_errors, 1)} %")
    order = {r.name: r for r in a.checks}["NQF error order"]
    print(f"  check `NQF error order`: {order.status}, {order.value}")
    X = torch.as_tensor(np.asarray(data.X), dtype=torch.float64)
    Y = torch.as_tensor(np.asarray(data.Y), dtype=torch.float64)
    steps = int((1.5 * float(st.times[-1]) + 5) / lr) + 1
    for train_gate in (True, False):
        net = models.moe(X.shape[1], Y.shape[1]).double()
        _start(net, args.eps, torch.Generator().manual_seed(0))
        t0 = time.perf_counter()
        t, loss = _gd(net, X, Y, lr, steps, train_gate)
        cmp = compare_staircase(t, loss, st)
        what = "gate trained  " if train_gate else "gate held at 0"
        print(
            f"  GD at η, {what}: time errors {np.round(100 * cmp.time_errors, 1)} %, "
            f"level errors {np.round(100 * cmp.level_errors[1:], 1)} % ({time.perf_counter() - t0:.0f} s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
