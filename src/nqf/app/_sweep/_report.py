"""``SWEEP/report.html``: each headline quantity against each swept parameter, with a band across seeds.

Headline quantities are the checks' measured values (``measured: Q`` columns of
the sweep table).  Quantities that differ only in a number (``t_1``, ``t_2``, …)
share a figure.  For every numeric swept key with at least two values there is
one figure per family: the mean over seeds (line), mean ± one standard
deviation (band), every seed (dots), and the prediction (dashed, mean over
seeds).  Initial scales — a key named ``eps`` or values in (0, 1) spanning at
least two decades — are plotted against ``ln(1/ε)``, where the theory predicts
straight lines (switch-on times ``t_k ≈ ln(1/ε)/ζ_k``); the legend then gives the
fitted slope of the measured means and of the predictions.  Other keys spanning
two decades get a log axis.  ``nqf report SWEEP`` rebuilds the report from
``sweep.json``.
"""

from __future__ import annotations

import base64
import io
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..._text import figure_text
from ._table import read_table

__all__ = ["write_sweep_report", "rebuild_sweep_report", "sweep_figures", "is_sweep_dir"]

_TEMPLATE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>nqf sweep — {{ doc.experiment }}</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#222}
h2{margin-top:1.6em;border-bottom:1px solid #ddd} table{border-collapse:collapse;font-size:0.86em}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right} th{background:#f3f3f3}
td.l,th.l{text-align:left} .failed{color:#b00020;font-weight:600} .complete{color:#116b1a}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #eee} pre{background:#f7f7f7;padding:0.8em}
.meta{color:#666}
</style></head><body>
<h1>Sweep: {{ doc.experiment }}</h1>
<p class="meta">{{ doc.counts.total }} points · {{ doc.counts.complete }} complete · {{ doc.counts.failed }} failed
{% if doc.counts.pending %}· {{ doc.counts.pending }} not run{% endif %} · {{ doc.counts.reused }} reused
from an earlier invocation · updated {{ doc.updated }}</p>
<p>Swept: {% for k in doc["keys"] %}<code>{{ k }}</code> {% endfor %}{% if doc.sweep.seeds %}· seeds
{{ doc.sweep.seeds|join(", ") }}{% endif %}</p>
{% for fig in figures %}<figure><img alt="{{ fig.name }}" src="data:image/png;base64,{{ fig.data }}">
<figcaption>{{ fig.caption }} (<a href="{{ fig.svg }}">SVG</a>)</figcaption></figure>{% endfor %}
{% if not figures %}<p>No figure: a plot needs a numeric swept key with at least two values and complete
points.</p>{% endif %}
<h2>Points</h2>
<table><tr><th class="l">point</th>{% for k in doc["keys"] %}<th>{{ k }}</th>{% endfor %}<th>seed</th>
<th>status</th><th>wall (s)</th>{% for q in quantities %}<th>{{ q }}</th>{% endfor %}<th class="l">error</th></tr>
{% for r in doc.rows %}<tr><td class="l">{% if link(r) %}<a href="{{ link(r) }}">{{ r.point }}</a>
{% else %}{{ r.point }}{% endif %}</td>{% for k in doc["keys"] %}<td>{{ fmt(r.swept[k]) }}</td>{% endfor %}
<td>{{ r.seed }}</td><td class="{{ r.status }}">{{ r.status }}</td><td>{{ fmt(r.wall_seconds) }}</td>
{% for q in quantities %}<td>{{ fmt(r.measured.get(q)) }}</td>{% endfor %}
<td class="l">{% if r.error_type %}{{ r.error_type }}: {% endif %}{{ r.error or "" }}</td></tr>{% endfor %}</table>
<h2>Base configuration</h2><pre>{{ base }}</pre>
</body></html>
"""


def is_sweep_dir(path) -> bool:
    """True when ``path`` holds a ``sweep.json`` (a sweep directory rather than a run directory)."""
    return (Path(path) / "sweep.json").is_file()


def _point_link(row) -> str | None:
    """The relative link to a point's report, built from its short hash (never a path or URL read from
    ``sweep.json``); ``None`` for a row without a point directory."""
    point = row.get("point") if isinstance(row, dict) else None
    if not row.get("directory") or not isinstance(point, str) or not re.fullmatch(r"[0-9a-f]{12}", point):
        return None
    return f"points/{point}/report.html"


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _scalar(v):
    """A number for the x axis (a one-element list counts as its element), else ``None``."""
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _axis(key: str, xs: np.ndarray):
    """``(transform, label, log_axis)`` for the swept key ``key`` with values ``xs``."""
    pos = bool(np.all(xs > 0))
    span = pos and xs.max() / xs.min() >= 100
    if pos and (key.lower().startswith("eps") or (span and xs.max() < 1)):
        sym = "ε" if key.lower() == "eps" else key
        return (lambda v: np.log(1.0 / v)), f"ln(1/{sym})", False
    return (lambda v: v), key, bool(span)


def _family(q: str) -> str:
    """Quantities that differ only in an index (``t_1``, ``t_2``; ``mode 1``, ``mode 2``) share a family."""
    return re.sub(r"(?<=_)\d+|(?<=mode )\d+", "#", q)


def sweep_figures(doc: dict, root) -> list[dict]:
    """Draw the figures of the sweep report into ``root/figures``; returns their descriptions."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from .._report import atomic_write_bytes

    rows = [r for r in doc["rows"] if r["status"] == "complete"]
    quantities = list(dict.fromkeys(q for r in rows for q, v in r["measured"].items() if v is not None))
    families: dict[str, list[str]] = defaultdict(list)
    for q in quantities:
        families[_family(q)].append(q)
    out = []
    for key in doc["keys"]:
        xs_all = [_scalar(r["swept"].get(key)) for r in rows]
        if any(x is None for x in xs_all) or len(set(xs_all)) < 2:
            continue
        others = [k for k in doc["keys"] if k != key]
        transform, xlabel, logx = _axis(key, np.array(xs_all))
        for fam, qs in families.items():
            fig = Figure(figsize=(10.0, 4.6), constrained_layout=True)
            ax = fig.add_subplot()
            groups = defaultdict(list)
            fits: dict[str, dict] = {}
            for r, x in zip(rows, xs_all, strict=False):
                groups[tuple(_fmt(r["swept"].get(k)) for k in others)].append((x, r))
            ci = 0
            for gkey, members in groups.items():
                for q in qs:
                    color = f"C{ci % 10}"
                    ci += 1
                    where = ", ".join(f"{k}={v}" for k, v in zip(others, gkey, strict=True))
                    label = q + (f" ({where})" if others else "")
                    fit = _plot_one(ax, members, q, transform, color, figure_text(label))
                    if fit:
                        fits[label] = fit
            ax.set_xlabel(figure_text(xlabel))
            ax.set_ylabel(fam.replace("#", "k"))
            if logx:
                ax.set_xscale("log")
            nseeds = len(doc["sweep"].get("seeds") or [None])
            ax.set_title(
                f"{fam.replace('#', 'k')} vs {figure_text(xlabel)}: mean ± sd over {nseeds} seed(s), dots: seeds, "
                "dashed: predicted",
                fontsize=9,
            )
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{fam.replace('#', 'k')}_vs_{key}").strip("_")
            files = {}
            for ext in ("png", "svg"):
                buf = io.BytesIO()
                fig.savefig(buf, format=ext, dpi=110)
                atomic_write_bytes(Path(root) / "figures" / f"{name}.{ext}", buf.getvalue())
                files[ext] = f"figures/{name}.{ext}"
                if ext == "png":
                    data = base64.b64encode(buf.getvalue()).decode("ascii")
            slopes = "; ".join(
                f"{lab}: slope {f['slope']:.4g}"
                + (f" (predicted {f['predicted_slope']:.4g})" if f.get("predicted_slope") is not None else "")
                for lab, f in fits.items()
                if f.get("slope") is not None
            )
            out.append(
                {
                    "name": name,
                    "png": files["png"],
                    "svg": files["svg"],
                    "data": data,
                    "fits": fits,
                    "caption": f"{fam.replace('#', 'k')} against {xlabel}" + (f" — {slopes}" if slopes else ""),
                }
            )
    return out


def _plot_one(ax, members, q, transform, color, label) -> dict | None:
    """Draw one quantity; returns ``{slope, predicted_slope, sd_max}`` (slopes in the plotted x coordinate)."""
    by_x = defaultdict(list)
    pred = defaultdict(list)
    for x, r in members:
        v = r["measured"].get(q)
        if v is not None:
            by_x[x].append(v)
        p = r["predicted"].get(q)
        if p is not None:
            pred[x].append(p)
    if not by_x:
        return None
    xs = np.array(sorted(by_x))
    tx = transform(xs)
    order = np.argsort(tx)
    xs, tx = xs[order], tx[order]
    mean = np.array([np.mean(by_x[x]) for x in xs])
    sd = np.array([np.std(by_x[x]) for x in xs])
    for x, t in zip(xs, tx, strict=False):
        ax.plot([t] * len(by_x[x]), by_x[x], ".", color=color, ms=4, alpha=0.6)
    ax.fill_between(tx, mean - sd, mean + sd, color=color, alpha=0.25, lw=0)
    note = []
    fit = {"slope": None, "predicted_slope": None, "sd_max": float(sd.max())}
    if len(xs) >= 2:
        fit["slope"] = float(np.polyfit(tx, mean, 1)[0])
        note.append(f"slope {fit['slope']:.3g}")
    if max(len(v) for v in by_x.values()) > 1:
        note.append(f"sd ≤ {float(sd.max()):.2g}")
    ax.plot(tx, mean, "-o", color=color, ms=3, lw=1.6, label=label + (": " + ", ".join(note) if note else ""))
    px = [x for x in xs if pred.get(x)]
    if px:
        tp = transform(np.array(px))
        pm = np.array([np.mean(pred[x]) for x in px])
        ps = ""
        if len(px) >= 2:
            fit["predicted_slope"] = float(np.polyfit(tp, pm, 1)[0])
            ps = f" (slope {fit['predicted_slope']:.3g})"
        ax.plot(tp, pm, "--", color=color, lw=1, label=f"{q} predicted{ps}")
    return fit


def write_sweep_report(root, doc: dict | None = None) -> Path:
    """Write ``root/report.html`` (and ``root/figures/``) from ``doc`` or the saved ``sweep.json``."""
    import json

    from jinja2 import Environment

    from .._report import atomic_write_text

    root = Path(root)
    doc = doc if doc is not None else read_table(root)
    figures = sweep_figures(doc, root)
    quantities = list(dict.fromkeys(q for r in doc["rows"] for q in r["measured"]))
    env = Environment(autoescape=True)
    html = env.from_string(_TEMPLATE).render(
        doc=doc,
        figures=figures,
        quantities=quantities,
        fmt=_fmt,
        link=_point_link,
        base=json.dumps(doc.get("base_config"), indent=2),
    )
    path = root / "report.html"
    atomic_write_text(path, html)
    return path


def rebuild_sweep_report(root) -> Path:
    """Rebuild ``SWEEP/report.html`` from ``SWEEP/sweep.json`` (``nqf report SWEEP``)."""
    return write_sweep_report(root)
