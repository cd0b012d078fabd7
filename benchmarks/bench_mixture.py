"""Benchmark: ``nqf analyze`` at scale on a synthetic Gaussian-mixture classification problem (issue 21).

The problem (:func:`make_mixture`): ``N`` samples (default 10⁵) in ``D = 128`` dimensions, 10
classes of equal size; class ``c`` has mean ``s_c e_c`` (``e_c`` orthonormal random directions,
separations ``s_c`` spaced evenly from 3 down to 2, so the classes are learned one after the
other) and unit isotropic noise.  The model is the built-in tanh MLP of width 512
(``mlp:width=512,act=tanh``), ``ε = 1e-6``, everything else at the defaults of ``nqf analyze``.

The analysis runs in this process with a progress bar (rich) for every stage: the data, the
structure operator and checks, the prediction, the NQF simulation, the real network and the
output; the bars of the long stages advance against the estimate the analysis prints before
the stage starts (its time of a few timed steps × the steps).  At the end the script prints the
CPU time, wall time and peak resident memory of the whole run and of each stage, and the
verdict.  With ``--out DIR`` the run directory (``results.json``, figures, report) is written
(``nqf.app.save_analysis``).

Threads: ``--threads`` (default 1) for torch.  On free cores the real network's matrix products
on 10⁵ samples can use more; on the shared 2-core machine a second thread competing with other
jobs made the run slower (the saddle search's small eigenproblems spin: 29 s instead of 2 s).

Run: ``python benchmarks/bench_mixture.py [--n 100000] [--threads 2] [--out DIR] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import threading
import time

import numpy as np

STAGES = (  # (name, the progress line that starts it, the line that ends it)
    ("data", r"^data:", r"^units:"),
    ("structure operator and checks", r"^units:", r"^prediction \("),
    ("prediction", r"^prediction \(", r"^prediction: "),
    ("NQF simulation", r"^NQF simulation: \d+ steps", r"^NQF simulation: [\d.]+ s$"),
    ("clock (NQF at the larger step)", r"^NQF simulation: [\d.]+ s$", r"^clock:"),
    ("real network", r"^real network: \d+ steps", r"^real network: [\d.]+ s$"),
)


def make_mixture(n: int = 100_000, d: int = 128, classes: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``(n, d)`` and integer labels ``(n,)`` of the mixture described in the module docstring."""
    rng = np.random.default_rng(seed)
    E, _ = np.linalg.qr(rng.standard_normal((d, classes)))
    sep = np.linspace(3.0, 2.0, classes)
    y = np.arange(n) % classes
    X = rng.standard_normal((n, d)) + (E * sep).T[y]
    return X, y


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class StageBars:
    """Progress bars driven by the analysis's progress lines (``log`` of ``nqf.analyze``).

    A stage starts and ends at the lines of :data:`STAGES`; a line with ``~X s`` gives the bar its
    estimate (the bar advances with elapsed / estimate, up to 99 % until the stage ends).  CPU time,
    wall time and peak memory are recorded per stage.
    """

    def __init__(self, progress):
        self.progress, self.current, self.rows = progress, None, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.2):
            cur = self.current
            if cur is not None and cur["estimate"]:
                frac = min(0.99, (time.perf_counter() - cur["wall"]) / cur["estimate"])
                self.progress.update(cur["task"], completed=100 * frac)

    def log(self, line: str) -> None:
        for name, start, end in STAGES:
            if self.current is not None and self.current["name"] == name and re.search(end, line):
                self._finish()
            if re.search(start, line) and (self.current is None or self.current["name"] != name):
                self._finish()
                self._start(name)
        est = re.search(r"~(\d+(?:\.\d+)?) s", line)
        if est and self.current is not None:
            self.current["estimate"] += float(est.group(1))
            self.progress.update(
                self.current["task"], description=f"{self.current['name']} (~{self.current['estimate']:.0f} s)"
            )
        self.progress.console.print(f"[dim]{line}[/dim]")

    def _start(self, name: str) -> None:
        task = self.progress.add_task(name, total=100)
        self.current = {
            "name": name,
            "task": task,
            "wall": time.perf_counter(),
            "cpu": time.process_time(),
            "estimate": 0.0,
        }

    def _finish(self) -> None:
        cur, self.current = self.current, None
        if cur is None:
            return
        self.progress.update(cur["task"], completed=100)
        self.rows.append(
            {
                "stage": cur["name"],
                "wall_s": round(time.perf_counter() - cur["wall"], 2),
                "cpu_s": round(time.process_time() - cur["cpu"], 2),
                "estimate_s": cur["estimate"] or None,
                "peak_MiB": round(_peak_mib()),
            }
        )

    def stage(self, name: str):
        """A stage outside the analysis's own lines (data generation, output): a context manager."""
        bars = self

        class _Stage:
            def __enter__(self):
                bars._finish()
                bars._start(name)

            def __exit__(self, *exc):
                bars._finish()

        return _Stage()

    def close(self) -> None:
        self._finish()
        self._stop.set()
        self._thread.join()


def run(n: int, out: str | None) -> dict:
    """Generate the data, analyse, optionally write the run directory; CPU, wall, peak memory per stage."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    import nqf
    from nqf.app import prepare

    wall0, cpu0 = time.perf_counter(), time.process_time()
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as progress:
        bars = StageBars(progress)
        with bars.stage("generate the mixture"):
            X, y = make_mixture(n)
            data = prepare(X, y, task="classification", name=f"mixture-{n}")
            del X, y
        a = nqf.analyze("mlp:width=512,act=tanh", data, eps=1e-6, log=bars.log)
        if out:
            from nqf.app import save_analysis

            with bars.stage("output (results, figures, report)"):
                save_analysis(a, out)
        bars.close()
    return {
        "n": n,
        "cpu_s": round(time.process_time() - cpu0, 1),
        "wall_s": round(time.perf_counter() - wall0, 1),
        "peak_MiB": round(_peak_mib()),
        "steps": a.steps,
        "drops": a.prediction.n_drops,
        "trust": a.verdict.trust,
        "verdict": a.verdict.text[0],
        "timings": a.timings,
        "stages": bars.rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="samples (default 10⁵)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--out", default=None, help="write the run directory here")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    res = run(args.n, args.out)
    res["threads"] = args.threads
    if args.json:
        print(json.dumps(res, indent=2))
        return
    for r in res["stages"]:
        print(f"  {r['stage']:<34} wall {r['wall_s']:7.1f} s  cpu {r['cpu_s']:7.1f} s  peak {r['peak_MiB']:5d} MiB")
    head = f"N = {res['n']} ({res['threads']} threads)"
    print(f"{head}: CPU {res['cpu_s']} s, wall {res['wall_s']} s, peak {res['peak_MiB']} MiB; {res['verdict']}")


if __name__ == "__main__":
    main()
