"""Benchmark: ``nqf analyze`` on the models researchers bring (issue 32), one row per model.

The models are the factories of ``benchmarks/zoo/models.py``, each run as ``nqf analyze --model
benchmarks/zoo/models.py:NAME --data … --eps 1e-6`` runs it (``nqf.analyze`` with the model file's spec),
in a fresh process per row (its wall time and peak resident memory are the row's).  A row is either

* **refused**: the one-line reason (the exception's message, which names the layer), or
* **analysed**: the units (kind, ``m``, ``p``); the prediction's worst error against its *own* NQF
  over the drops the NQF reaches in the run (time and level, relative; a level below 1 % of ``L_0`` is
  compared to ``0.01 L_0`` instead of itself, so that a level that is ~0 does not give a relative error of
  10²³); the real network's worst error against the prediction (same rule); the trust of the verdict;
  and the largest percentage printed anywhere in the analysis's text (table, verdict, progress lines).

Data: scikit-learn's digits (1797 samples, 64 pixels, 10 classes) except ``deep_linear`` (exactly
whitened Gaussian inputs, D = 10, linear teacher of singular values 3, 2, 1, 0.5, its first layer's
units: ``--units 0``) and ``conv2d_rgb`` (60 random 3-channel 6×6 images, C = 1), both from
``benchmarks/zoo/models.py``.

Run: ``python benchmarks/bench_models_zoo.py [--rows transformer,moe] [--eps 1e-6] [--json]``; each row's JSON
goes to stderr as it finishes, and ``--table FILE`` prints the table of rows saved with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ZOO = Path(__file__).resolve().parent / "zoo" / "models.py"
#: row → (data, --units); data "digits" or the name of a data function of the zoo.
ROWS = {
    "transformer": ("digits", None),
    "conv1d_mean": ("digits", None),
    "layernorm_mlp": ("digits", None),
    "batchnorm_mlp": ("digits", None),
    "skip_readout": ("digits", None),
    "residual_mlp": ("digits", None),
    "rnn": ("digits", None),
    "moe": ("digits", None),
    "deep_linear": ("deep_linear_data", "0"),
    "gelu_float32": ("digits", None),
    "relu_mlp": ("digits", None),
    "dropout_mlp": ("digits", None),
    "conv2d_rgb": ("images_data", None),
}
#: A level below this fraction of ``L_0`` is compared to ``LEVEL_FLOOR · L_0`` (not to itself).
LEVEL_FLOOR = 0.01
#: Wall-clock limit of one row's process (s).
TIMEOUT_S = 1800
_PERCENT = re.compile(r"(\d[\d.,eE+]*)\s?%")


def _data(name: str):
    from nqf.app import load_dataset, prepare

    if name == "digits":
        return load_dataset("digits")
    sys.path.insert(0, str(ZOO.parent))
    import models  # the zoo

    X, Y = getattr(models, name)()
    return prepare(X, Y, task="regression", standardize=False, center=False, name=name)


def _worst(cmp, levels) -> tuple[float, float]:
    """Worst relative time and level errors of a comparison over the drops it reached (NaN: none reached)."""
    import numpy as np

    reached = np.isfinite(cmp.times_measured)
    t_err = np.abs(cmp.times_measured - cmp.times_predicted) / cmp.times_predicted
    ref = np.maximum(np.abs(cmp.levels_predicted[1:]), LEVEL_FLOOR * abs(float(levels[0])))
    l_err = np.abs(cmp.levels_measured[1:] - cmp.levels_predicted[1:]) / ref
    if not reached.any():
        return float("nan"), float("nan")
    return float(np.nanmax(t_err[reached])), float(np.nanmax(l_err[reached]))


def run_row(name: str, eps: float) -> dict:
    """One row, in this process (``main`` runs each in a fresh one)."""
    import nqf
    from nqf.errors import NQFError

    data_name, units = ROWS[name]
    data = _data(data_name)
    lines: list[str] = []
    t0 = time.perf_counter()
    row: dict = {"model": name, "data": data_name}
    try:
        a = nqf.analyze(f"{ZOO}:{name}", data, eps=eps, units=units, log=lines.append)
    except NQFError as exc:
        row.update(status="refused", reason=str(exc).replace(str(ZOO), "models.py"))
    else:
        from nqf.app._study._output import print_analysis  # what the terminal shows: header, checks, table, verdict

        printed: list[str] = []
        print_analysis(a, printed.append)
        text = "\n".join([*lines, *printed])
        percents = [float(m.replace(",", "")) for m in _PERCENT.findall(text) if _number(m)]
        nqf_t, nqf_l = _worst(a.nqf, a.prediction.levels)
        real_t, real_l = _worst(a.real, a.prediction.levels)
        row.update(
            status="analysed",
            units=f"{a.units}",
            m=a.width,
            p=a.p,
            drops=a.prediction.n_drops,
            levels=f"{a.prediction.levels[0]:.3g}→{a.prediction.levels[-1]:.3g}",
            nqf_time=nqf_t,
            nqf_level=nqf_l,
            real_time=real_t,
            real_level=real_l,
            trust=a.verdict.trust,
            max_printed_percent=max(percents, default=0.0),
            rules=list(a.prediction.time_rules),
        )
    row["seconds"] = round(time.perf_counter() - t0, 1)
    row["peak_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return row


def _number(s: str) -> bool:
    try:
        float(s.replace(",", ""))
    except ValueError:
        return False
    return True


def _fmt(x) -> str:
    return "—" if x is None or x != x else f"{100 * x:.1f} %"


def table(rows: list[dict]) -> str:
    out = [
        "| model | units or reason | drops | pred vs own NQF: time / level | real vs pred: time / level | trust | "
        "max % printed | s | MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["status"] == "refused":
            reason = r["reason"]
            cut = reason.rfind("refused `")  # the blocking layer's line, without the search's preamble
            reason = reason[cut:] if cut >= 0 else f"refused: {reason}"
            out.append(f"| {r['model']} | {reason} | | | | | | {r['seconds']} | {r['peak_mib']} |")
            continue
        out.append(
            f"| {r['model']} | {r['units']} | {r['drops']} ({r['levels']}) | "
            f"{_fmt(r['nqf_time'])} / {_fmt(r['nqf_level'])} | {_fmt(r['real_time'])} / {_fmt(r['real_level'])} | "
            f"{r['trust']} | {r['max_printed_percent']:.4g} | {r['seconds']} | {r['peak_mib']} |"
        )
    return "\n".join(out)


def _not_run(name: str, reason: str, seconds: float) -> dict:
    """The row of a model whose process timed out or crashed (shown like a refusal, with its reason)."""
    return dict(model=name, status="refused", reason=reason, seconds=seconds, peak_mib=0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--table", metavar="FILE", help="print the table of the rows a --json run saved in FILE")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one row here, print its JSON
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_row(args.one, args.eps)))
        return 0
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.rows.split(","):
            cmd = [sys.executable, __file__, "--one", name, "--eps", str(args.eps)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                row = _not_run(name, f"timed out after {TIMEOUT_S} s", TIMEOUT_S)
            else:
                ok = proc.returncode == 0
                row = (
                    json.loads(proc.stdout.strip().splitlines()[-1])
                    if ok
                    else _not_run(name, f"crashed: {proc.stderr.strip()[-300:]}", 0)
                )
            rows.append(row)
            print(f"{name}: {json.dumps(row)}", file=sys.stderr)
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
