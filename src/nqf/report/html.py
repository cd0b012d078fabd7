"""One self-contained HTML report per run (figures embedded as base64 PNG; opens offline)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from .rundir import atomic_write_text

__all__ = ["render_report", "write_report", "rebuild_report"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:0.2em} h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:0.8em 0;font-size:0.92em} td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.pass{color:#116b1a;font-weight:600}.fail{color:#b00020;font-weight:600}.meta{color:#666;font-size:0.9em}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #eee} pre{background:#f7f7f7;padding:0.8em;overflow:auto}
.status-interrupted,.status-failed{background:#fff3cd;padding:0.6em;border:1px solid #e0c97a}
"""


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def render_report(results: dict, rundir: Path) -> str:
    """HTML text of the report for ``results`` (figures read from ``rundir``)."""
    e = html.escape
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>nqf — {e(results['experiment'])}</title><style>{_CSS}</style></head><body>"]
    parts.append(f"<h1>{e(results['experiment'])}</h1><p>{e(results['description'])}</p>")
    parts.append(f"<p class='meta'>status: <b>{e(results['status'])}</b> · seed {results['seed']} · device "
                 f"{e(results['device'])} · {results.get('wall_seconds')} s · started {e(results['started'])} · "
                 + " · ".join(f"{k} {e(v)}" for k, v in results["versions"].items()) + "</p>")
    if results["status"] != "complete":
        parts.append(f"<p class='status-{e(results['status'])}'>{e(results['message'])}</p>")
    if results.get("summary"):
        parts.append("<ul>" + "".join(f"<li>{e(s)}</li>" for s in results["summary"]) + "</ul>")
    if results["checks"]:
        parts.append("<h2>Predicted vs measured</h2><table><tr><th>quantity</th><th>predicted</th>"
                     "<th>measured</th><th>relative error</th><th>tolerance</th><th>within</th></tr>")
        for c in results["checks"]:
            ok = c["passed"]
            cls = "" if ok is None else (" class='pass'" if ok else " class='fail'")
            parts.append(f"<tr><td>{e(c['name'])}</td><td>{_fmt(c['predicted'])}</td><td>{_fmt(c['measured'])}</td>"
                         f"<td>{_fmt(c['relative_error'])}</td><td>{_fmt(c['tolerance'])}</td>"
                         f"<td{cls}>{_fmt(ok)}</td></tr>")
        parts.append("</table>")
    for name, files in results["figures"].items():
        png = rundir / files["png"]
        if png.exists():
            data = base64.b64encode(png.read_bytes()).decode("ascii")
            parts.append(f"<figure><img alt='{e(name)}' src='data:image/png;base64,{data}'>"
                         f"<figcaption>{e(name)} (<a href='{e(files['svg'])}'>SVG</a>)</figcaption></figure>")
    for t in results["tables"]:
        parts.append(f"<h2>{e(t['name'])}</h2>")
        if t.get("caption"):
            parts.append(f"<p>{e(t['caption'])}</p>")
        parts.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in t["columns"]) + "</tr>")
        for row in t["rows"]:
            parts.append("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in row) + "</tr>")
        parts.append("</table>")
    if results["metrics"]:
        parts.append("<h2>Metrics</h2><table>" + "".join(
            f"<tr><td>{e(k)}</td><td>{_fmt(v)}</td></tr>" for k, v in results["metrics"].items()) + "</table>")
    parts.append("<h2>Configuration</h2><pre>" + e(json.dumps(results["config"], indent=2)) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(rundir, results: dict) -> Path:
    rundir = Path(rundir)
    path = rundir / "report.html"
    atomic_write_text(path, render_report(results, rundir))
    return path


def rebuild_report(rundir) -> Path:
    """Rebuild ``report.html`` from a run directory's saved ``results.json`` and figures."""
    from .schema import validate_results

    rundir = Path(rundir)
    if not (rundir / "results.json").is_file():
        raise FileNotFoundError(f"{rundir} holds no results.json (not a run directory?)")
    validate_results(rundir)
    results = json.loads((rundir / "results.json").read_text())
    return write_report(rundir, results)
