"""Benchmark: the cost of ``nqf analyze`` (issue 21) and whether its digits table is unchanged.

Two runs, each in a fresh process under ``/usr/bin/time`` (CPU = user + system time, peak resident
memory):

1. ``nqf analyze --model mlp:width=256,act=tanh --data digits --eps 1e-6`` (limits: 20 s CPU,
   500 MB).  Its per-plateau table is compared with the table of docs/analyze.md ("Measured"):
   the largest relative change of any level or time (``L pred``, ``L NQF``, ``L real``,
   ``t pred``, ``t NQF``, ``t real``; limit 0.5 %) and the largest absolute change of the error
   and flatness columns (both printed; these are ratios, e.g. 0.0269 for 2.7 %).
2. ``benchmarks/bench_mixture.py``: N = 10⁵ samples of a Gaussian mixture, D = 128, 10 classes,
   tanh MLP width 512 (limits: 5 minutes, 4 GB).

Run: ``python benchmarks/bench_analyze.py [--skip-large] [--threads N]``.  Timing depends on the
machine's load: the numbers are those of one run, with the load average printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "analyze.md"
LEVEL_TIME = ("L pred", "L NQF", "L real", "t pred", "t NQF", "t real")
RATIOS = ("err L", "err t", "flatness")


def docs_table(path: Path = DOCS) -> list[dict]:
    """The digits table of docs/analyze.md ("Measured"): one dict per plateau ``k ≥ 1``."""
    rows, started = [], False
    for line in path.read_text().splitlines():
        if line.startswith("| k | L pred | L NQF | L real |"):
            started = True
            continue
        if started and not line.startswith("|"):
            break
        m = re.match(r"\| (\d+) \|", line) if started else None
        if not m:
            continue
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        rows.append(
            {
                "k": int(c[0]),
                **dict(zip(("L pred", "L NQF", "L real"), map(float, c[1:4]), strict=True)),
                "err L": float(c[4].rstrip(" %")) / 100,
                "t pred": float(c[5]),
                "t NQF": float(c[7]),
                "t real": float(c[8]),
                "err t": float(c[9].rstrip(" %")) / 100,
                "flatness": float(re.search(r"\(([\d.]+)\)", c[10]).group(1)),  # type: ignore[union-attr]
            }
        )
    return rows


def _cell(value) -> float:
    """A cell of the report's table as a number: numbers as they are, ``"0 (round-off)"`` as 0, an error
    printed as an absolute difference (``"|Δ| …"``, not a percent) as NaN."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.startswith("0 (round-off)"):
        return 0.0
    return float("nan")


def run_table(results: Path) -> list[dict]:
    """The same columns from a run's ``results.json`` (table "Plateaus and drops", the report's cells: errors in
    percent, flat as ``"yes (ratio)"``)."""
    res = json.loads(results.read_text())
    table = next(t for t in res["tables"] if t["name"] == "Plateaus and drops")
    i = {name: j for j, name in enumerate(table["columns"])}
    out = []
    for r in table["rows"]:
        if r[0] == 0:
            continue
        flat = re.search(r"\(([\d.e+-]+)\)", str(r[i["flat (real)"]]))
        out.append(
            {
                "k": r[0],
                **{c: _cell(r[i[c]]) for c in ("L pred", "L NQF", "L real", "t pred", "t NQF", "t real")},
                "err L": _cell(r[i["err L real %"]]) / 100,
                "err t": _cell(r[i["err t real %"]]) / 100,
                "flatness": float(flat.group(1)) if flat else float("nan"),
            }
        )
    return out


def table_change(new: list[dict], ref: list[dict]) -> dict:
    """Largest relative change of a level or time, largest absolute change of an error or flatness ratio."""
    rel, ab = (0.0, None), (0.0, None)
    by_k = {r["k"]: r for r in new}
    for r in ref:
        n = by_k.get(r["k"])
        if n is None:
            return {"missing_plateau": r["k"]}
        for c in LEVEL_TIME:
            # the docs print 4 significant digits: changes below half a unit of the last digit are rounding
            d = abs(float(f"{n[c]:.4g}") / r[c] - 1)
            if d > rel[0]:
                rel = (d, f"k={r['k']} {c}: {r[c]} → {n[c]:.4g}")
        for c in RATIOS:
            d = abs(n[c] - r[c])
            if d > ab[0]:
                ab = (d, f"k={r['k']} {c}: {r[c]} → {n[c]:.4g}")
    return {"max_rel_level_time": rel[0], "where_rel": rel[1], "max_abs_ratio": ab[0], "where_abs": ab[1]}


def _timed(cmd: list[str], env: dict) -> tuple[dict, subprocess.CompletedProcess]:
    res = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M", *cmd], capture_output=True, text=True, env=env)
    m = re.search(r"TIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)", res.stderr)
    if not m:
        raise RuntimeError(f"{cmd}: no timing (exit {res.returncode}): {res.stderr[-2000:]}")
    wall, user, sys_, kb = map(float, m.groups())
    return {"wall_s": wall, "cpu_s": round(user + sys_, 1), "peak_MB": round(kb / 1024)}, res


def digits(env: dict) -> dict:
    """The digits analysis: cost and the change of its table against docs/analyze.md."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "digits"
        cmd = [sys.executable, "-m", "nqf", "analyze", "--model", "mlp:width=256,act=tanh", "--data", "digits"]
        cost, res = _timed([*cmd, "--eps", "1e-6", "--out", str(out)], env)
        if res.returncode != 0:
            raise RuntimeError(f"nqf analyze failed: {res.stderr[-2000:]}")
        change = table_change(run_table(out / "results.json"), docs_table())
    return {**cost, **change}


def mixture(env: dict, threads: int) -> dict:
    """The 10⁵-sample Gaussian mixture (benchmarks/bench_mixture.py)."""
    script = str(Path(__file__).with_name("bench_mixture.py"))
    cost, res = _timed([sys.executable, script, "--json", "--threads", str(threads)], env)
    if res.returncode != 0:
        raise RuntimeError(f"bench_mixture failed: {res.stderr[-2000:]}")
    out = json.loads(res.stdout[res.stdout.index("{") :])
    keep = ("steps", "drops", "trust", "stages", "verdict")
    return {**cost, **{k: out[k] for k in keep}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-large", action="store_true", help="only the digits analysis")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the 10⁵ run (default 1)")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    d = digits(env)
    print(
        f"digits (width 256, ε = 1e-6): CPU {d['cpu_s']} s (limit 20), peak {d['peak_MB']} MB (limit 500), "
        f"wall {d['wall_s']} s"
    )
    print(
        f"  table vs docs/analyze.md: largest relative change of a level or time {100 * d['max_rel_level_time']:.3f} %"
    )
    print(f"    ({d['where_rel']}; limit 0.5 %)")
    print(f"  largest absolute change of an error or flatness ratio {d['max_abs_ratio']:.4f} ({d['where_abs']})")
    if args.skip_large:
        return
    env_large = {**env, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    m = mixture(env_large, args.threads)
    print(
        f"mixture N = 10⁵, D = 128, width 512 ({args.threads} threads): wall {m['wall_s']} s (limit 300), "
        f"CPU {m['cpu_s']} s, peak {m['peak_MB']} MB (limit 4096); {m['steps']} steps, {m['drops']} drops, "
        f"trust {m['trust']}"
    )
    for s in m["stages"]:
        print(f"  {s['stage']:<34} wall {s['wall_s']:7.1f} s  cpu {s['cpu_s']:7.1f} s  peak {s['peak_MiB']:5d} MiB")
    print(f"  {m['verdict']}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
