"""Benchmark: ``nqf analyze`` on the models of issue 24 (full bundled data sets), one row each.

Each row runs ``nqf analyze`` in a fresh process (``/usr/bin/time`` measures its wall time and
peak resident memory) and reads the run's ``results.json``: the structure operator used, the
time of the prediction and of the real training, *NQF step ÷ real step* (each run's time over
its steps: the real network takes larger steps, see docs/analyze.md), the trust of the verdict,
the largest per-plateau time and level errors (relative) of the real network against the
prediction (in the quadratic regime), and for each stage the estimate printed before it ÷ the
time it took (``est/<stage>``, with that time; ``prediction`` is the saddle search with its first
orbit, ``prediction_clock`` the O(1) clock of the later drops, whose estimate is a range), and the
peak memory of the process estimated before the long runs ÷ the peak ``/usr/bin/time`` measured
(``est/peak``, with that peak).

Rows (digits: all 1797 samples; models written to a temporary ``models.py``):

* ``cnn-seq`` / ``cnn-sub``: ``Conv2d(1, 16, 3, padding=1) → Tanh → Flatten → Linear(1024, 10)``
  on 1×8×8 images, as ``nn.Sequential`` and as an ``nn.Module`` subclass;
* ``mha``: ``nn.MultiheadAttention(8, 4 heads)`` over the 8 rows of the image, mean over
  tokens, ``Linear(8, 10)``;
* ``deep-wine``: three-layer tanh MLP on wine (units: the first hidden layer);
* ``iris-bias`` / ``iris``: tanh MLP width 64 on iris with and without the hidden bias;
* ``silu-bias`` / ``gelu-bias``: width-64 MLPs with the default hidden bias on breast_cancer;
* ``iris-csv``: iris as CSV with its string label column (``--target species``).

Run: ``python benchmarks/bench_analyze_models.py [--rows cnn-seq,iris] [--eps 1e-6] [--timeout 600]``.
Prints one table (and ``--json`` the rows as JSON).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

MODELS = """
import torch
from torch import nn


def cnn_seq(n_outputs):
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.Tanh(), nn.Flatten(),
                         nn.Linear(1024, n_outputs, bias=False))


class CNN(nn.Module):
    def __init__(self, n_outputs):
        super().__init__()
        self.conv, self.act = nn.Conv2d(1, 16, 3, padding=1), nn.Tanh()
        self.readout = nn.Linear(1024, n_outputs, bias=False)

    def forward(self, x):
        return self.readout(self.act(self.conv(x.view(-1, 1, 8, 8))).flatten(1))


def cnn_sub(n_outputs):
    return CNN(n_outputs)


class MHA(nn.Module):
    def __init__(self, n_outputs):
        super().__init__()
        self.att = nn.MultiheadAttention(8, 4, batch_first=True)
        self.readout = nn.Linear(8, n_outputs, bias=False)

    def forward(self, x):
        t = x.view(-1, 8, 8)
        return self.readout(self.att(t, t, t, need_weights=False)[0].mean(1))


def mha(n_outputs):
    return MHA(n_outputs)


def deep(in_features, n_outputs):
    return nn.Sequential(nn.Linear(in_features, 64, bias=False), nn.Tanh(), nn.Linear(64, 64, bias=False), nn.Tanh(),
                         nn.Linear(64, n_outputs, bias=False))
"""

ROWS = {  # name: (model, data, extra flags)
    "cnn-seq": ("{models}:cnn_seq", "digits", []),
    "cnn-sub": ("{models}:cnn_sub", "digits", []),
    "mha": ("{models}:mha", "digits", []),
    "deep-wine": ("{models}:deep", "wine", ["--units", "0"]),
    "iris-bias": ("mlp:width=64,act=tanh,bias=true", "iris", []),
    "iris": ("mlp:width=64,act=tanh", "iris", []),
    "silu-bias": ("mlp:width=64,act=silu,bias=true", "breast_cancer", []),
    "gelu-bias": ("mlp:width=64,act=gelu,bias=true", "breast_cancer", []),
    "iris-csv": ("mlp:width=64,act=tanh", "{csv}", ["--target", "species"]),
}


def _iris_csv(path: Path) -> Path:
    from sklearn.datasets import load_iris

    d = load_iris()
    lines = [",".join([*d.feature_names, "species"])]
    lines += [",".join([*(f"{v:g}" for v in x), d.target_names[y]]) for x, y in zip(d.data, d.target, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _row(name: str, tmp: Path, eps: float, timeout: int) -> dict:
    model, data, extra = ROWS[name]
    model = model.format(models=tmp / "models.py")
    data = data.format(csv=tmp / "iris.csv")
    out = tmp / f"run-{name}"
    cmd = ["/usr/bin/time", "-f", "TIME %e %M", sys.executable, "-m", "nqf", "analyze", "--model", model]
    cmd += ["--data", data, "--eps", str(eps), "--out", str(out), "--force", *extra]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"row": name, "status": f"timeout {timeout} s"}
    m = re.search(r"TIME ([\d.]+) (\d+)", res.stderr)
    row = {"row": name, "wall_s": float(m.group(1)) if m else None, "peak_MiB": int(m.group(2)) / 1024 if m else None}
    if res.returncode != 0:
        last = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("TIME")]
        return {**row, "status": f"exit {res.returncode}: {last[-1] if last else ''}"[:160]}
    row = {**row, **_read_results(out / "results.json")}
    if row.get("est_peak_MiB") and row.get("peak_MiB"):  # the whole process's peak, report and figure included
        row["est/peak"] = f"{row['est_peak_MiB'] / row['peak_MiB']:.2f} ({row['peak_MiB']:.0f} MiB)"
    return row


def _read_results(path: Path) -> dict:
    res = json.loads(path.read_text())
    m = res["metrics"]
    operator = re.search(r"operator ([^;]+);", res["summary"][0])
    return {
        "status": "ok",
        "operator": operator.group(1) if operator else None,
        "p": m.get("p"),
        "predict_s": (m.get("seconds_prediction") or 0.0) + (m.get("seconds_prediction_clock") or 0.0),
        "nqf_over_real": m["seconds_nqf_step"] / m["seconds_real_step"] if m.get("seconds_real_step") else None,
        "real_s": m.get("seconds_real_training"),
        "trust": m.get("trust"),
        "max_t_err": m.get("max_time_error_real"),
        "max_L_err": m.get("max_level_error_real"),
        **_estimate_ratios(m),
    }


#: Stages whose time ``nqf analyze`` estimates before it starts them (metrics ``seconds_estimate_<stage>``).
STAGES = ("prediction", "prediction_clock", "nqf_simulation", "real_training_large", "real_training", "seeded_nqf")


def _estimate_ratios(m: dict) -> dict:
    """Estimate ÷ measured of each stage's time (``est/<stage>``, with the measured seconds) and of the
    process's peak memory (``est/peak``)."""
    out = {}
    for stage in STAGES:
        est, took = m.get(f"seconds_estimate_{stage}"), m.get(f"seconds_{stage}")
        if est is not None and took:
            out[f"est/{stage}"] = f"{est / took:.2f} ({took:.2g} s)"
    low, took = m.get("seconds_estimate_prediction_clock_low"), m.get("seconds_prediction_clock")
    if low is not None and took:  # the clock's estimate is a range: one later drop's cost to all of theirs
        high = m["seconds_estimate_prediction_clock"]
        out["est/prediction_clock"] = f"{low / took:.2f}–{high / took:.2f} ({took:.2g} s)"
    if m.get("memory_estimate_peak_mib"):
        out["est_peak_MiB"] = m["memory_estimate_peak_mib"]
    return out


def _print(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    cols = ["row", "status", "operator", "p", "wall_s", "peak_MiB", "predict_s", "real_s", "nqf_over_real", "trust"]
    cols += ["max_t_err", "max_L_err", *(f"est/{s}" for s in STAGES), "est/peak"]
    table = Table(*cols)
    for r in rows:
        table.add_row(*(f"{r[c]:.3g}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols))
    Console(width=320).print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated row names")
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "models.py").write_text(MODELS)
        _iris_csv(tmp / "iris.csv")
        for name in args.rows.split(","):
            rows.append(_row(name, tmp, args.eps, args.timeout))
            print(json.dumps(rows[-1]), flush=True)
    _print(rows)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
