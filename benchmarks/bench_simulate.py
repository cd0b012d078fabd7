"""Benchmark of one step of the closed dynamics (`nqf.simulate`, order-parameter form) against the
implementation before the factored update (loaded from git at run time) — side by side, in one run.

Prints, for a tanh MLP on N = 2048 inputs of width D ∈ {64, 1024} (``p = D + C``, ``M(0) = εI``):

* the time per GD step of the previous implementation (``M ← T M Tᵀ`` with dense ``p × p`` products),
* the time per step now (factor ``L ← T L`` through ``op.forward_factor`` / ``op.adjoint_apply``),
* the time of two passes over ``X`` (``X v`` and ``Xᵀ r``), the floor of any step,
* the speed-up, the ratio to two passes, and the largest relative difference of the saved ``M``
  (the results must agree to 1e-10).

Run: ``python benchmarks/bench_simulate.py [--steps 40] [--ref 439519e]`` (``--ref`` is the git revision
of the previous implementation).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import nqf
from nqf.dynamics import simulate
from nqf.structure import mlp

ROOT = Path(__file__).resolve().parents[1]
#: old module name -> where its names (data_subspace, project_operator) live now
MOVED = {"nqf.dynamics.subspace": "nqf.structure"}


def load_previous(ref: str):
    """The `simulate` module of git revision ``ref``, imported inside the ``nqf.dynamics`` package."""
    src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:src/nqf/dynamics/_simulate.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # modules that moved since ``ref``: the old file's relative imports find them under their old names
    for name, now in MOVED.items():
        sys.modules.setdefault(name, importlib.import_module(now))
    path = Path(tempfile.mkdtemp()) / "_simulate_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("nqf.dynamics._simulate_before", path)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "nqf.dynamics"
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench(D: int, N: int, C: int, steps: int, old) -> None:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, D, generator=g, dtype=torch.float64) / math.sqrt(D)
    y = torch.tanh(X @ torch.randn(D, C, generator=g, dtype=torch.float64))
    op = mlp(X, "tanh", n_outputs=C)
    M0 = 1e-6 * torch.eye(op.p, dtype=torch.float64)
    kw = dict(M0=M0, lr=0.05)

    def off(fn, n):  # saving off: the loss and M at step 0 and the last step only
        return fn(op, y, **kw, steps=n, save_every=n, save_M=False)

    def per_step(fn, repeat):
        # marginal cost of a step with saving off: runs of 2s and s steps (set-up and checks cancel)
        t2 = best_of(lambda: off(fn, 2 * steps), repeat)
        t1 = best_of(lambda: off(fn, steps), repeat)
        return max(t2 - t1, 1e-12) / steps

    v, r = torch.randn(D, C, dtype=torch.float64), torch.randn(N, C, dtype=torch.float64)
    t_pass = best_of(lambda: [(X @ v, X.T @ r) for _ in range(200)], 5) / 200
    t_old = per_step(old.simulate, 2)
    t_new = per_step(simulate, 3)
    # default arguments: the whole run (set-up, checks, the default saves of M) divided by its steps
    t_def = best_of(lambda: simulate(op, y, **kw, steps=steps), 2) / steps
    every = simulate(op, y, **kw, steps=steps).info["save_every"]
    a = old.simulate(op, y, **kw, steps=steps, save_every=steps)
    b = simulate(op, y, **kw, steps=steps, save_every=steps)
    diff = float(((a.M - b.M).flatten(1).norm(dim=1) / b.M.flatten(1).norm(dim=1)).max())
    print(
        f"N = {N}, D = {D}, C = {C} (p = {op.p}), {steps} steps: two passes over X {1e3 * t_pass:6.3f} ms; "
        f"per step, saving off: before {1e3 * t_old:7.3f} ms, now {1e3 * t_new:7.3f} ms "
        f"({t_old / t_new:4.1f}x faster; now / two passes = {t_new / t_pass:4.2f}); "
        f"default arguments (save_every={every}, whole run / steps): {1e3 * t_def:7.3f} ms "
        f"(/ two passes = {t_def / t_pass:4.2f}); max rel. difference of M before/now {diff:.1e}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--ref", default="439519e", help="git revision of the previous implementation")
    args = ap.parse_args()
    torch.set_num_threads(1)
    old = load_previous(args.ref)
    print(f"nqf {getattr(nqf, '__version__', '')}; previous implementation from git {args.ref}; one thread")
    bench(64, 2048, 1, args.steps * 100, old)
    bench(1024, 2048, 1, args.steps * 5, old)


if __name__ == "__main__":
    main()
