"""Never render what a file injects (issue 23, class 2): every string and link of results.json / sweep.json is
escaped or dropped; SVGs are linked only when inert; big figures are linked, not embedded."""

import json
from html.parser import HTMLParser

import numpy as np
import pytest
from typer.testing import CliRunner

from nqf.app._cli import app
from nqf.app._experiments import Experiment, Outcome, Params, get_experiment, run_experiment
from nqf.app._report import MAX_EMBED_BYTES, new_figure, svg_is_safe

get_experiment("demo")
runner = CliRunner()


class _P(Params):
    n: int = 3


class _Fig(Experiment):
    name = "fig-test"
    description = "one figure"
    Params = _P

    def run(self, params, ctx, out: Outcome):
        out.arrays["x"] = np.arange(params.n, dtype=float)
        fig, ax = new_figure()
        ax.plot([0, 1], [0, 1])
        out.figures["one"] = fig


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href"):
                self.refs.append(v)
            assert not k.startswith("on"), (tag, k)


def _parse(html):
    p = _Refs()
    p.feed(html)
    return p


@pytest.fixture
def run(tmp_path):
    out = tmp_path / "r"
    run_experiment(_Fig(), _P(), out)
    return out


def _report(out):
    r = runner.invoke(app, ["report", str(out)])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    return (out / "report.html").read_text()


SVG_NS = 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'
HOSTILE_SVGS = {
    "script": f"<svg {SVG_NS}><script>alert(1)</script></svg>",
    "onload": f'<svg {SVG_NS} onload="alert(1)"><rect/></svg>',
    "onclick on a child": f'<svg {SVG_NS}><g><rect onclick="alert(1)"/></g></svg>',
    "foreignObject": f"<svg {SVG_NS}><foreignObject><iframe src='x'/></foreignObject></svg>",
    "a javascript: href": f"<svg {SVG_NS}><a xlink:href='javascript:alert(1)'><rect/></a></svg>",
    "external image": f"<svg {SVG_NS}><image href='http://evil.example/x.png'/></svg>",
    "use of an external file": f"<svg {SVG_NS}><use xlink:href='file:///etc/passwd#x'/></svg>",
    "entity": f'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaa">]><svg {SVG_NS}>&a;</svg>',
    "style @import": f"<svg {SVG_NS}><style>@import url(http://evil.example/x.css);</style></svg>",
    "style url()": f"<svg {SVG_NS}><rect style=\"fill:url('http://evil.example/p')\"/></svg>",
    "animate to javascript": f"<svg {SVG_NS}><a><set attributeName='href' to='javascript:alert(1)'/></a></svg>",
    "not XML": "<svg <script>",
    "an HTML page": "<html><script>alert(1)</script></html>",
}


@pytest.mark.parametrize("case", list(HOSTILE_SVGS))
def test_a_run_report_never_links_an_active_svg(run, case):
    (run / "figures" / "one.svg").write_text(HOSTILE_SVGS[case])
    assert not svg_is_safe(HOSTILE_SVGS[case].encode())
    html = _report(run)
    p = _parse(html)
    assert "figures/one.svg" not in p.refs
    assert "script" not in p.tags and "iframe" not in p.tags
    assert "SVG not linked" in html or case == "an HTML page"  # not an image at all: no note needed
    assert all(r.startswith("data:image/png;base64,") for r in p.refs), p.refs


def test_an_svg_only_figure_with_a_script_is_shown_only_as_an_inert_image(run):
    (run / "figures" / "one.svg").write_text(HOSTILE_SVGS["script"])
    data = json.loads((run / "results.json").read_text())
    data["figures"] = {"one": {"svg": "figures/one.svg"}}
    (run / "results.json").write_text(json.dumps(data))
    from nqf.app._report import write_report

    html = write_report(run, data).read_text()
    p = _parse(html)
    assert [r.split(",")[0] for r in p.refs] == ["data:image/svg+xml;base64"], p.refs  # inside <img>, never <a>
    assert "<script" not in html and "figures/one.svg" not in p.refs


def test_matplotlib_svgs_are_linked(run):
    html = _report(run)
    assert "figures/one.svg" in _parse(html).refs and "SVG not linked" not in html


@pytest.mark.parametrize("size", [MAX_EMBED_BYTES + 1, 3 * MAX_EMBED_BYTES])
def test_a_figure_over_the_cap_is_linked_not_embedded(run, size):
    big = run / "figures" / "one.png"
    big.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * (size - 8))
    html = _report(run)
    assert len(html) < 200_000, len(html)
    p = _parse(html)
    assert "figures/one.png" in p.refs and not any(r.startswith("data:") for r in p.refs)
    assert "not embedded" in html and "5 MiB" in html


def test_the_report_total_embedding_cap(run):
    data = json.loads((run / "results.json").read_text())
    blob = b"\x89PNG\r\n\x1a\n" + b"\0" * (MAX_EMBED_BYTES - 100)
    for i in range(6):  # 6 × 5 MiB: the 25 MiB budget embeds 4 at most
        (run / "figures" / f"f{i}.png").write_bytes(blob)
        data["figures"][f"f{i}"] = {"png": f"figures/f{i}.png"}
    (run / "results.json").write_text(json.dumps(data))
    html = _report(run)
    assert len(html) < 26 * 2**20 * 4 / 3 + 100_000
    p = _parse(html)
    assert sum(r.startswith("data:") for r in p.refs) <= 5 and "figures/f5.png" in p.refs


HOSTILE_STRINGS = {
    "script": "<script>alert(1)</script>",
    "img onerror": "<img src=x onerror=alert(1)>",
    "quote break": "' onmouseover='alert(1)",
    "double quote break": '" onmouseover="alert(1)',
    "closing title": "</title><script>alert(1)</script>",
}


@pytest.mark.parametrize("case", list(HOSTILE_STRINGS))
def test_a_run_report_escapes_every_string(run, case):
    bad = HOSTILE_STRINGS[case]
    data = json.loads((run / "results.json").read_text())
    data["description"] = bad
    data["summary"] = [bad]
    data["figures"][bad] = data["figures"]["one"]
    data["metrics"] = {bad: 1.0}
    (run / "results.json").write_text(json.dumps(data))
    html = _report(run)
    assert bad not in html
    p = _parse(html)
    assert "script" not in p.tags[p.tags.index("body") :] and p.tags.count("img") == 2


# --------------------------------------------------------------------------- the sweep report
@pytest.fixture
def sweep_dir(tmp_path):
    from nqf.app._experiments import REGISTRY
    from nqf.app._sweep import build_points
    from nqf.app._sweep._grid import SweepSpec
    from nqf.app._sweep._table import build_table, mark_sweep_directory, write_table

    base = {"experiment": "lv-staircase", "params": dict(REGISTRY["lv-staircase"].tiny)}
    spec = SweepSpec(grid={"eps": [1e-3, 1e-4]})
    points = build_points(base, spec)
    root = tmp_path / "S"
    root.mkdir()
    mark_sweep_directory(root)
    write_table(root, build_table(points, {}, experiment="lv-staircase", base=base, spec=spec, root=root))
    return root


SWEEP_INJECTIONS = {
    "javascript: directory": ("rows.0.directory", "javascript:alert(1)"),
    "data: directory": ("rows.0.directory", "data:text/html,<script>alert(1)</script>"),
    "http directory": ("rows.0.directory", "http://evil.example"),
    "traversal directory": ("rows.0.directory", "../../../etc"),
    "script point": ("rows.0.point", "<script>alert(1)</script>"),
    "javascript point": ("rows.0.point", "javascript:alert(1)//"),
    "error text": ("rows.0.error", "<img src=x onerror=alert(1)>"),
    "error type": ("rows.0.error_type", "<script>alert(1)</script>"),
    "experiment": ("experiment", "</title><script>alert(1)</script>"),
    "updated": ("updated", "<script>alert(1)</script>"),
    "status": ("rows.0.status", "<script>alert(1)</script>"),
}


def _set(doc, path, value):
    keys = path.split(".")
    for k in keys[:-1]:
        doc = doc[int(k)] if isinstance(doc, list) else doc[k]
    doc[keys[-1]] = value


@pytest.mark.parametrize("case", list(SWEEP_INJECTIONS))
def test_the_sweep_report_escapes_strings_and_builds_links_itself(sweep_dir, case):
    path, bad = SWEEP_INJECTIONS[case]
    doc = json.loads((sweep_dir / "sweep.json").read_text())
    _set(doc, path, bad)
    (sweep_dir / "sweep.json").write_text(json.dumps(doc))
    r = runner.invoke(app, ["report", str(sweep_dir)])
    assert r.exit_code == 0, r.output
    html = (sweep_dir / "report.html").read_text()
    assert bad not in html or "<" not in bad  # markup never appears raw; plain text may, as text
    p = _parse(html)
    assert "script" not in p.tags
    for ref in p.refs:
        assert ref.startswith("points/") and ref.endswith("/report.html") and ".." not in ref, ref
        assert len(ref.split("/")[1]) == 12
    assert not any(s in ref for ref in p.refs for s in ("javascript:", "data:", "http:"))


# --------------------------------------------------------------------------- a malformed sweep.json
def _pop(*path):
    def edit(doc):
        *parents, last = path
        for k in parents:
            doc = doc[k]
        doc.pop(last)

    return edit


def _put(value, *path):
    def edit(doc):
        *parents, last = path
        for k in parents:
            doc = doc[k]
        doc[last] = value

    return edit


# (id, the file's text or an edit of the good document, what the message names besides the file)
MALFORMED_SWEEP_JSON = [
    ("a list instead of an object", "[1, 2]", "JSON object"),
    ("a string", '"sweep"', "JSON object"),
    ("null", "null", "JSON object"),
    ("not JSON", "{rows: [", "not valid JSON"),
    ("truncated", '{"schema": "nqf.sweep/1", "rows": [', "not valid JSON"),
    ("nested too deeply", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("not UTF-8", b"\xff\xfe{}", "UTF-8"),
    ("no schema", _pop("schema"), "schema"),
    ("no rows", _pop("rows"), "`rows`"),
    ("rows a dict", _put({}, "rows"), "`rows`"),
    ("rows that are not dicts", _put([1, "a"], "rows"), "`rows.0`"),
    ("a row without measured", _pop("rows", 0, "measured"), "`rows.0.measured`"),
    ("a row without status", _pop("rows", 1, "status"), "`rows.1.status`"),
    ("a row without swept", _pop("rows", 0, "swept"), "`rows.0.swept`"),
    ("measured a list", _put([1.0], "rows", 0, "measured"), "`rows.0.measured`"),
    ("a measured value that is text", _put({"t_1": "abc"}, "rows", 0, "measured"), "`rows.0.measured.t_1`"),
    ("predicted a string", _put("x", "rows", 0, "predicted"), "`rows.0.predicted`"),
    ("swept a list", _put([1], "rows", 0, "swept"), "`rows.0.swept`"),
    ("status a number", _put(3, "rows", 0, "status"), "`rows.0.status`"),
    ("no keys", _pop("keys"), "`keys`"),
    ("keys a string", _put("eps", "keys"), "`keys`"),
    ("no counts", _pop("counts"), "`counts`"),
    ("counts.total text", _put("many", "counts", "total"), "`counts.total`"),
    ("sweep null", _put(None, "sweep"), "`sweep`"),
    ("seeds a string", _put("0-3", "sweep", "seeds"), "`sweep.seeds`"),
    ("experiment a list", _put([1], "experiment"), "`experiment`"),
    (
        "a swept value nested 500 deep",
        _put(json.loads("[" * 500 + "1" + "]" * 500), "rows", 0, "swept", "eps"),
        "`rows.0.swept.eps.0.0",
    ),
    (
        "a metric nested 60 deep",
        _put(json.loads('{"a":' * 60 + "1" + "}" * 60), "rows", 1, "metrics"),
        "`rows.1.metrics.a.a",
    ),
]


@pytest.mark.parametrize("case", MALFORMED_SWEEP_JSON, ids=[c[0] for c in MALFORMED_SWEEP_JSON])
def test_a_malformed_sweep_json_is_one_line_naming_the_file_and_the_field(sweep_dir, case):
    _, content, needle = case
    path = sweep_dir / "sweep.json"
    if callable(content):
        doc = json.loads(path.read_text())
        content(doc)
        content = json.dumps(doc)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = {p.name: p.read_bytes() for p in sweep_dir.iterdir() if p.is_file()}
    r = runner.invoke(app, ["report", str(sweep_dir)])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    assert str(path) in lines[0] and needle in lines[0], lines[0]
    assert {p.name: p.read_bytes() for p in sweep_dir.iterdir() if p.is_file()} == before  # nothing written


def test_a_well_formed_sweep_json_still_renders(sweep_dir):
    """The check can pass: the table written by nqf is accepted (no field is over-constrained)."""
    r = runner.invoke(app, ["report", str(sweep_dir)])
    assert r.exit_code == 0, r.output
    assert (sweep_dir / "report.html").is_file()
