"""One self-contained HTML report per run (figures embedded as base64 data; opens offline).

The page is rendered by jinja2 with autoescaping, so every string from
``results.json`` is text, never markup.  Figures are embedded only when their
path is a relative path *inside* the run directory (after resolving symbolic
links) with a known image extension and matching file contents; absolute
paths, ``../`` traversal, URLs of any scheme (``javascript:``, ``http:``,
``file:``, ``data:``) and other files are refused: the report then says that
the figure was not shown, without echoing the path.

An SVG is linked only when :func:`svg_is_safe` finds nothing active in it
(scripts, event handlers, ``<foreignObject>``, animation, external
references); it is embedded (when there is no PNG) only as an ``<img>``, where
a browser runs nothing.  A figure file over :data:`MAX_EMBED_BYTES` (5 MiB), or
past :data:`MAX_EMBED_TOTAL` (25 MiB) for the whole report, is linked by its
relative path and not embedded, with a note in the report.
"""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path, PurePosixPath

import jinja2
from markupsafe import Markup

from ._rundir import RUN_ID_KEY, atomic_write_text

__all__ = [
    "render_report",
    "write_report",
    "rebuild_report",
    "format_cell",
    "svg_is_safe",
    "MAX_EMBED_BYTES",
    "MAX_EMBED_TOTAL",
]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;
     padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:0.2em} h2{margin-top:1.6em;border-bottom:1px solid #ddd}
.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:0.8em 0;font-size:0.85em}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f3f3f3;font-weight:600} td:first-child,th:first-child{text-align:left}
.pass{color:#116b1a;font-weight:600}.fail{color:#b00020;font-weight:600}.meta{color:#666;font-size:0.9em}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #eee}
pre{background:#f7f7f7;padding:0.8em;overflow:auto}
.status-interrupted,.status-failed{background:#fff3cd;padding:0.6em;border:1px solid #e0c97a}
"""

_TEMPLATE = """<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>
<meta name="{{ run_id_key }}" content="{{ r.run_id }}">
<title>nqf — {{ r.experiment }}</title><style>{{ css }}</style></head><body>
<h1>{{ r.experiment }}</h1><p>{{ r.description }}</p>
<p class='meta'>status: <b>{{ r.status }}</b> · seed {{ r.seed }} · device {{ r.device }} · {{ r.wall_seconds }} s · \
started {{ r.started }} · run {{ r.run_id }}{% for k, v in r.versions.items() %} · {{ k }} {{ v }}{% endfor %}</p>
{% if r.status != 'complete' %}<p class='status-{{ r.status }}'>{{ r.message }}</p>
{% endif %}{% if r.summary %}<ul>{% for s in r.summary %}<li>{{ s }}</li>{% endfor %}</ul>
{% endif %}{% if r.checks %}<h2>Predicted vs measured</h2><div class='scroll'><table><tr><th>quantity</th>\
<th>predicted</th><th>measured</th><th>error</th>{% if judged %}<th>tolerance</th><th>within</th>{% endif %}\
{% if noted %}<th>note</th>{% endif %}</tr>
{% for c in r.checks %}<tr><td>{{ c.name }}</td><td>{{ fmt(c.predicted) }}</td>\
<td>{{ fmt(c.measured) }}</td><td>{{ check_error(c) }}</td>{% if judged %}<td>{{ check_tolerance(c) }}</td>\
<td{% if c.passed is true %} class='pass'{% elif c.passed is false %} class='fail'{% endif %}>\
{{ fmt(c.passed) }}</td>{% endif %}{% if noted %}<td>{{ c.get('reason') or '' }}</td>{% endif %}</tr>
{% endfor %}</table></div>
{% endif %}{% for f in figures %}{% if f.src %}<figure><img alt='{{ f.name }}' src='{{ f.src }}'>\
<figcaption>{{ f.name }}{% if f.svg %} (<a href='{{ f.svg }}'>SVG</a>){% endif %}\
{% if f.note %} <span class='meta'>({{ f.note }})</span>{% endif %}</figcaption></figure>
{% elif f.link or f.note %}<p class='meta'>figure {{ f.name }}: {{ f.note }}{% if f.link %}: \
<a href='{{ f.link }}'>{{ f.link }}</a>{% endif %}{% if f.svg %} (<a href='{{ f.svg }}'>SVG</a>){% endif %}</p>
{% else %}<p class='meta'>figure {{ f.name }} not shown: its file is not an image inside the run directory</p>
{% endif %}{% endfor %}{% for t in r.tables %}<h2>{{ t.name }}</h2>
{% if t.caption %}<p>{{ t.caption }}</p>
{% endif %}<div class='scroll'><table><tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% for v in row %}<td>{{ fmt(v) }}</td>{% endfor %}</tr>
{% endfor %}</table></div>
{% endfor %}{% if r.metrics %}<h2>Metrics</h2><table>{% for k, v in r.metrics.items() %}<tr><td>{{ k }}</td>\
<td>{{ fmt(v) }}</td></tr>{% endfor %}</table>
{% endif %}<h2>Configuration</h2><pre>{{ config }}</pre>
</body></html>
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
_PAGE = _ENV.from_string(_TEMPLATE)

#: extension -> (MIME type, accepted leading bytes); only these files are ever embedded.
IMAGE_TYPES = {
    ".png": ("image/png", (b"\x89PNG\r\n\x1a\n",)),
    ".jpg": ("image/jpeg", (b"\xff\xd8\xff",)),
    ".jpeg": ("image/jpeg", (b"\xff\xd8\xff",)),
    ".gif": ("image/gif", (b"GIF87a", b"GIF89a")),
    ".svg": ("image/svg+xml", (b"<?xml", b"<svg")),
}
_SCHEME = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.\-]*:")


def format_cell(v) -> str:
    """A table cell as text: ``—`` for missing, ``yes``/``no`` for booleans, 4 significant digits for floats."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


#: A relative error above this (1000 %) is printed as the absolute difference: its reference is ~0.
MAX_RELATIVE_PRINTED = 10.0


def _pct(x: float, limit: float | None = None) -> str:
    """``x`` (a fraction) in percent, one decimal, more where one would print it on the other side of
    ``limit`` (or on it) than it is."""
    for d in range(1, 15):
        s = f"{100 * x:.{d}f}"
        if limit is None or (float(s) / 100 > limit) == (x > limit) and (float(s) / 100 == limit) == (x == limit):
            return f"{s} %"
    return f"{100 * x!r} %"


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def check_error(c) -> str:
    """The error cell of a check: the relative error in percent (as many decimals as its comparison with the
    tolerance needs), ``|Δ| = …`` for an absolute check or a relative error above 1000 %; ``—`` when missing."""
    rel, err, tol = _num(c.get("relative_error")), _num(c.get("error")), _num(c.get("tolerance"))
    if c.get("kind") == "absolute":
        diff = err
    elif rel is not None and rel > MAX_RELATIVE_PRINTED:
        p, m = _num(c.get("predicted")), _num(c.get("measured"))
        diff = abs(m - p) if p is not None and m is not None else None
        return "—" if diff is None else f"|Δ| = {diff:.4g} (relative error above {100 * MAX_RELATIVE_PRINTED:g} %)"
    else:
        return "—" if rel is None else _pct(rel, tol)
    return "—" if diff is None else f"|Δ| = {diff:.4g}"


def check_tolerance(c) -> str:
    """The tolerance cell of a check: percent for a relative check, the number for an absolute one."""
    tol = _num(c.get("tolerance"))
    if tol is None:
        return "—"
    return f"{tol:.4g}" if c.get("kind") == "absolute" else f"{100 * tol:g} %"


def safe_figure_path(rundir: Path, rel) -> Path | None:
    """The file ``rel`` names inside ``rundir``, or ``None`` when it must not be embedded or linked.

    Accepted: a relative POSIX path without ``..``, without a URL scheme, with an
    extension of :data:`IMAGE_TYPES`, naming a regular file that lies inside the run
    directory after resolving symbolic links and starts like an image of that type.
    """
    if not isinstance(rel, str) or not rel or len(rel) > 1024:
        return None
    if any(ch in rel for ch in ("\x00", "\\", "?", "#", "%")) or any(ord(ch) < 32 for ch in rel):
        return None
    if _SCHEME.match(rel) or rel.startswith(("/", "~")):
        return None
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("..", "") for p in parts):
        return None
    ext = PurePosixPath(rel).suffix.lower()
    if ext not in IMAGE_TYPES:
        return None
    try:
        root = Path(rundir).resolve(strict=True)
        p = (root / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not p.is_relative_to(root) or not p.is_file():
        return None
    try:
        with open(p, "rb") as fh:
            head = fh.read(16).lstrip()
    except OSError:
        return None
    if not head.startswith(IMAGE_TYPES[ext][1]):
        return None
    return p


#: The largest figure file embedded in a report (bytes); a bigger one is linked (relative path inside the run
#: directory), not embedded, and the report says so.
MAX_EMBED_BYTES = 5 * 2**20
#: The most figure bytes embedded in one report; figures past it are linked as above.
MAX_EMBED_TOTAL = 25 * 2**20
#: The largest SVG that is checked (and so linked); a bigger one is not linked.
MAX_SVG_CHECK_BYTES = 20 * 2**20

_SVG_BAD_TAGS = {"script", "foreignobject", "iframe", "embed", "object", "handler", "listener", "set", "animate"}
_SVG_BAD_TAGS |= {"animatemotion", "animatetransform", "animatecolor", "a"}
_SVG_DATA_OK = re.compile(r"^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*$")
_CSS_BAD = re.compile(r"@import|url\(\s*['\"]?\s*(?!#)|javascript:|expression\(", re.IGNORECASE)


def svg_is_safe(data: bytes) -> bool:
    """True when an SVG holds nothing active: no entities (a DOCTYPE without internal subset is allowed),
    no ``<script>``, ``<foreignObject>``, animation, ``<a>`` or event-handler attribute (``on…``), every
    ``href`` local (``#id``) or an embedded PNG/JPEG/GIF, and no style that loads or runs anything.  Only such
    an SVG is linked from a report.

    The SVG is parsed by ``defusedxml``, which refuses every entity declaration (internal, external, parameter:
    the way an external DTD is pulled in) and never resolves an external reference; a DOCTYPE that only names
    an external DTD (matplotlib's ``svg11.dtd``) is accepted, as nothing fetches it.  An internal DTD subset is
    refused before parsing too (it could also give attributes defaults)."""
    from xml.etree.ElementTree import ParseError

    import defusedxml.ElementTree as defused_etree
    from defusedxml import DefusedXmlException

    if re.search(rb"<!doctype[^>]*\[", data.lower()):  # an internal DTD subset
        return False
    try:
        root = defused_etree.fromstring(data)
    except (ParseError, DefusedXmlException, ValueError):  # not XML; a declaration defusedxml refuses
        return False
    if root.tag.rsplit("}", 1)[-1].lower() != "svg":
        return False
    for el in root.iter():
        tag = str(el.tag).rsplit("}", 1)[-1].lower()
        if tag in _SVG_BAD_TAGS:
            return False
        if tag == "style" and _CSS_BAD.search(el.text or ""):
            return False
        for k, v in el.attrib.items():
            attr = k.rsplit("}", 1)[-1].lower()
            if attr.startswith("on"):
                return False
            if attr == "href" and not (v.startswith("#") or _SVG_DATA_OK.match(v)):
                return False
            if attr == "style" and _CSS_BAD.search(v):
                return False
            if "javascript:" in v.lower().replace(" ", ""):
                return False
    return True


def _svg_link(rundir: Path, rel) -> tuple[str | None, str | None]:
    """``(link, note)``: the SVG's relative path when it is a safe image inside the run, else a note why not."""
    p = safe_figure_path(rundir, rel)
    if p is None or p.suffix.lower() != ".svg":
        return None, None
    if p.stat().st_size > MAX_SVG_CHECK_BYTES:
        return None, f"SVG not linked: larger than {MAX_SVG_CHECK_BYTES // 2**20} MiB"
    if not svg_is_safe(p.read_bytes()):
        return None, "SVG not linked: it carries scripts, event handlers or external references"
    return rel, None


def _figures(results: dict, rundir: Path) -> list[dict]:
    out = []
    figures = results.get("figures") or {}
    budget = MAX_EMBED_TOTAL
    for name, files in figures.items() if isinstance(figures, dict) else []:
        files = files if isinstance(files, dict) else {}
        src = link = note = None
        svg, svg_note = _svg_link(rundir, files.get("svg"))
        for key in ("png", "svg"):  # the PNG is embedded; an SVG only when there is no PNG (as <img>: inert)
            p = safe_figure_path(rundir, files.get(key))
            if p is None:
                continue
            size = p.stat().st_size
            if size > MAX_EMBED_BYTES or size > budget:
                link = files[key] if key == "png" or svg else None
                note = (
                    f"figure of {size / 2**20:.1f} MiB not embedded (the cap is {MAX_EMBED_BYTES // 2**20} MiB a "
                    f"figure, {MAX_EMBED_TOTAL // 2**20} MiB a report)" + ("; open the file" if link else "")
                )
                break
            budget -= size
            mime = IMAGE_TYPES[p.suffix.lower()][0]
            src = f"data:{mime};base64," + base64.b64encode(p.read_bytes()).decode("ascii")
            break
        notes = "; ".join(n for n in (note, svg_note) if n)
        out.append({"name": str(name), "src": src, "svg": svg, "link": link, "note": notes})
    return out


def render_report(results: dict, rundir: Path) -> str:
    """HTML text of the report for ``results`` (figures read from ``rundir``).

    The checks table shows the ``tolerance`` and ``within`` columns only when some check has a tolerance or a
    verdict, and ``note`` only when some check has a reason; errors are in percent (:func:`check_error`)."""
    checks = [c for c in results.get("checks") or [] if isinstance(c, dict)]
    return _PAGE.render(
        r=results,
        css=Markup(_CSS),
        run_id_key=RUN_ID_KEY,
        fmt=format_cell,
        check_error=check_error,
        check_tolerance=check_tolerance,
        judged=any(c.get("tolerance") is not None or c.get("passed") is not None for c in checks),
        noted=any(c.get("reason") for c in checks),
        figures=_figures(results, Path(rundir)),
        config=json.dumps(results["config"], indent=2),
    )


def write_report(rundir, results: dict) -> Path:
    rundir = Path(rundir)
    path = rundir / "report.html"
    atomic_write_text(path, render_report(results, rundir))
    return path


def rebuild_report(rundir) -> Path:
    """Rebuild ``report.html`` from a run directory's saved ``results.json`` and figures.

    Raises :class:`~nqf.app._report.ResultsFileError` (one line) when ``results.json``
    is missing, malformed or of another schema version, and
    :class:`~nqf.app._report.RunDirectoryLockedError` while a run is writing the directory.
    """
    from ._rundir import acquire_lock
    from ._schema import read_results_json, validate_results

    rundir = Path(rundir)
    validate_results(rundir)  # before taking the lock: no lock file beside a directory that is not a run
    lock = acquire_lock(rundir)  # no run may swap the directory while its report is rebuilt
    try:
        validate_results(rundir)
        return write_report(rundir, read_results_json(rundir))
    finally:
        lock.release()
