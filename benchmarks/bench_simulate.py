"""Benchmark of one step of the closed dynamics (`nqf.simulate`, order-parameter form) against the
implementation before the factored update (loaded from git at run time) — side by side, in one run.

Prints, for a tanh MLP on N = 2048 inputs of width D ∈ {64, 1024} (``p = D + C``, ``M(0) = εI``):

* the time per GD step of the previous implementation (``M ← T M Tᵀ`` with dense ``p × p`` products),
* the time per step now (the blocks ``[L_l; L_r]`` of the factor, ``L_r = base + Q Z``: ``nqf.dynamics._lowrank``),
* the time of two passes over ``X`` (``X v`` and ``Xᵀ r``), the floor of any step,
* the speed-up, the ratio to two passes, and the largest relative difference of the saved ``M``
  (the results must agree to 1e-10);
* the time per step from a dense (not diagonal) ``M(0)``: the large block of the factor is then a dense
  base from the first step (``nqf.dynamics._lowrank``), as after the first fold of an ``εI`` start, which
  keeps its diagonal base implicit for the first ``p2 / 2`` steps (``D / 2`` for one output).

Times are the shortest of several runs (3–5), on the wall clock; the ratios are printed also in CPU
time of this process (one thread), which leaves out the waits for a core on a machine shared
with other jobs (the cache they evict still counts).

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
from nqf.dynamics import GD, Save, simulate
from nqf.structure import mlp

ROOT = Path(__file__).resolve().parents[1]
#: old module name -> where its names (data_subspace, project_operator) live now
MOVED = {"nqf.dynamics.subspace": "nqf.structure"}
#: (old module, name) -> the module that holds the name now
MOVED_NAMES = {("nqf._validation", "check_saved_memory"): "nqf._memory"}


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
    for (old, name), now in MOVED_NAMES.items():  # the old file imports it from where it was
        module = importlib.import_module(old)
        if not hasattr(module, name):
            setattr(module, name, getattr(importlib.import_module(now), name))
    path = Path(tempfile.mkdtemp()) / "_simulate_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("nqf.dynamics._simulate_before", path)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "nqf.dynamics"
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def best_of(fn, repeat: int = 3) -> torch.Tensor:
    """The shortest wall-clock and CPU time (of this process) of ``repeat`` calls, as a tensor ``[wall, cpu]``:
    on a machine shared with other jobs the CPU time leaves out the waits for a core (not the cache misses)."""
    best = torch.full((2,), math.inf, dtype=torch.float64)
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        now = torch.tensor([time.perf_counter() - w0, time.process_time() - c0], dtype=torch.float64)
        best = torch.minimum(best, now)
    return best


def ratios(t: torch.Tensor, t_pass: torch.Tensor) -> str:
    """``t / t_pass`` on the wall clock and in CPU time."""
    q = t / t_pass
    return f"{float(q[0]):4.2f} (CPU time {float(q[1]):4.2f})"


def bench(D: int, N: int, C: int, steps: int, old) -> None:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, D, generator=g, dtype=torch.float64) / math.sqrt(D)
    y = torch.tanh(X @ torch.randn(D, C, generator=g, dtype=torch.float64))
    op = mlp(X, "tanh", n_outputs=C)
    M0 = 1e-6 * torch.eye(op.p, dtype=torch.float64)
    kw = dict(M0=M0, optimizer=GD(0.05))

    A = torch.randn(op.p, op.p, generator=g, dtype=torch.float64) / op.p
    M0_dense = 1e-6 * (torch.eye(op.p, dtype=torch.float64) + A @ A.T)  # not diagonal: no implicit base

    def off(fn, n, M0=M0):  # saving off: the loss and M at step 0 and the last step only
        return fn(op, y, **{**kw, "M0": M0}, steps=n, save_every=n, save_M=False)

    def per_step(fn, repeat, M0=M0):
        # marginal cost of a step with saving off: runs of 2s and s steps (set-up and checks cancel)
        t2 = best_of(lambda: off(fn, 2 * steps, M0), repeat)
        t1 = best_of(lambda: off(fn, steps, M0), repeat)
        return torch.clamp(t2 - t1, min=1e-12) / steps

    v, r = torch.randn(D, C, dtype=torch.float64), torch.randn(N, C, dtype=torch.float64)
    t_pass = best_of(lambda: [(X @ v, X.T @ r) for _ in range(200)], 5) / 200
    t_old = per_step(old.simulate, 2)
    t_new = per_step(simulate, 5)
    t_dense = per_step(simulate, 3, M0_dense)
    # default arguments: the whole run (set-up, checks, the default saves of M) divided by its steps
    t_def = best_of(lambda: simulate(op, y, **kw, steps=steps), 5) / steps
    every = simulate(op, y, **kw, steps=steps).info["save_every"]
    a = old.simulate(op, y, **kw, steps=steps, save=Save(every=steps))
    b = simulate(op, y, **kw, steps=steps, save=Save(every=steps))
    diff = float(((a.M - b.M).flatten(1).norm(dim=1) / b.M.flatten(1).norm(dim=1)).max())
    ms = lambda t: f"{1e3 * float(t[0]):7.3f} ms"  # noqa: E731  (wall clock)
    print(
        f"N = {N}, D = {D}, C = {C} (p = {op.p}), {steps} steps: two passes over X {ms(t_pass)}; "
        f"per step, saving off: before {ms(t_old)}, now {ms(t_new)} "
        f"({float(t_old[0] / t_new[0]):4.1f}x faster; now / two passes = {ratios(t_new, t_pass)}); "
        f"default arguments (save_every={every}, whole run / steps): {ms(t_def)} "
        f"(/ two passes = {ratios(t_def, t_pass)}); max rel. difference of M before/now {diff:.1e}; "
        f"a dense (non-diagonal) start M(0), saving off: {ms(t_dense)} (/ two passes = {ratios(t_dense, t_pass)})"
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
