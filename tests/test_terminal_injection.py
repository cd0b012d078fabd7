"""User strings that reach the terminal or a figure (issue 37, classes 2–4).

Every case feeds a string a terminal would act on (an OSC title, a screen clear, an OSC 8 hyperlink, a bell,
a carriage return, a bidirectional override) or rich markup or mathtext through one of the CLI's inputs and
asserts: the exit code, no control character in what nqf printed, and the text shown as typed (the escape
visible as ``\\x1b``).  A data file whose name is mathtext keeps the whole analysis (exit 0, a run directory).
"""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from nqf._text import figure_text, terminal_text
from nqf.app._cli import app

runner = CliRunner()

OSC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
HYPERLINK = "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"
BIDI = "\u202eevil"
PAYLOADS = {"osc-title": OSC_TITLE, "clear": CLEAR, "hyperlink": HYPERLINK, "bidi": BIDI, "cr": "a\rb"}
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _clean(res) -> str:
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert not CONTROL.search(out), repr(out)
    assert "Traceback" not in out
    return out


@pytest.mark.parametrize(("char", "shown"), [("\x1b", "\\x1b"), ("\x07", "\\x07"), ("\r", "\\x0d"), ("\x9b", "\\x9b"),
                                           ("\x7f", "\\x7f"), ("\u202e", "\\u202e"), ("\u2066", "\\u2066"),
                                           ("\x00", "\\x00")])  # fmt: skip
def test_terminal_text_shows_every_control(char, shown):
    assert terminal_text(f"a{char}b") == f"a{shown}b"


@pytest.mark.parametrize("plain", ["wine.csv", "ε = 1e-6 → ok", "tab\tand\nnewline", "[/x] $a$"])
def test_terminal_text_keeps_ordinary_text(plain):
    assert terminal_text(plain) == plain


def test_figure_text_escapes_mathtext():
    assert figure_text(r"a$\frac{$b.csv") == r"a\$\frac{\$b.csv"


def _model_file(tmp_path, body: str):
    path = tmp_path / "model.py"
    path.write_text(body)
    return path


def _csv(path, labels):
    rng = np.random.default_rng(0)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "b", "c", "label"])
        for i in range(60):
            lab = labels[i % len(labels)]
            x = rng.normal(size=3) + (2.0 if i % len(labels) else -2.0)
            w.writerow([*map(repr, x.tolist()), lab])
    return path


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_missing_data_file_name(name, tmp_path):
    bad = tmp_path / f"data{PAYLOADS[name]}.csv"
    res = runner.invoke(app, ["analyze", "--data", str(bad), "--out", str(tmp_path / "run")])
    assert res.exit_code == 2
    out = _clean(res)
    assert "--data" in out or "data" in out


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_missing_model_file_name(name, tmp_path):
    res = runner.invoke(app, ["analyze", "--model", f"{tmp_path}/m{PAYLOADS[name]}.py:make", "--data", "iris",
                              "--out", str(tmp_path / "run")])  # fmt: skip
    assert res.exit_code == 2
    _clean(res)


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_factory_exception_message(name, tmp_path):
    model = _model_file(tmp_path, f"def make(*args, **kwargs):\n    raise ValueError({PAYLOADS[name]!r})\n")
    res = runner.invoke(app, ["analyze", "--model", f"{model}:make", "--data", "iris", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2
    out = _clean(res)
    assert terminal_text(PAYLOADS[name]) in out


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_factory_name(name, tmp_path):
    model = _model_file(tmp_path, "def make(*args, **kwargs):\n    return None\n")
    res = runner.invoke(app, ["analyze", "--model", f"{model}:mk{PAYLOADS[name]}", "--data", "iris",
                              "--out", str(tmp_path / "r")])  # fmt: skip
    assert res.exit_code == 2
    _clean(res)


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_config_key_and_experiment_name(name, tmp_path):
    p = PAYLOADS[name]
    for text in (f'experiment = "demo"\n[params]\n"k{p}" = 1\n', f'experiment = "x{p}"\n'):
        cfg = tmp_path / "c.toml"
        cfg.write_text(text.replace("\x1b", "\\u001b").replace("\x07", "\\u0007").replace("\r", "\\r")
                       .replace("\u202e", "\\u202e"))  # fmt: skip
        res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "run")])
        assert res.exit_code == 2, res.output
        _clean(res)


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_sweep_dry_run_key(name, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('experiment = "demo"\n')
    res = runner.invoke(app, ["sweep", str(cfg), "--grid", f"w{PAYLOADS[name]}=1,2", "--dry-run"])
    assert res.exit_code == 2
    _clean(res)


@pytest.mark.parametrize("value", ["[/x]", "[link=http://evil.example]y[/link]", "[bold red]loud", OSC_TITLE + "[/]"])
def test_sweep_point_lines_show_markup_as_typed(value):
    """The sweep's rich lines (point done / failed, the summary): a swept value with markup is printed as typed,
    never parsed (a `[/x]` raised MarkupError, exit 1)."""
    from rich.console import Console

    from nqf.app._sweep._cli import _plain, _point_line

    class Point:
        short, seed, swept = "p0001", 0, {"name": value}

    console = Console(record=True, width=400, color_system=None)
    for row in ({"status": "complete", "checks": [], "wall_seconds": 1.0},
                {"status": "failed", "error_type": "ValueError", "error": value}):  # fmt: skip
        console.print(_point_line(Point(), row))
    console.print(_plain(f"1 points → {value}/sweep.csv"))
    text = console.export_text()
    assert text.count(terminal_text(value)) == 4 - (0 if "[" in value else 0), text
    assert not CONTROL.search(text)


def test_mathtext_data_file_name_keeps_the_analysis(tmp_path):
    data = _csv(tmp_path / r"a$\frac{$b.csv", ["x", "y"])
    out = tmp_path / "run"
    res = runner.invoke(app, ["analyze", "--model", "mlp:width=8,act=tanh", "--data", str(data), "--target", "label",
                              "--eps", "1e-3", "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (out / "report.html").exists() and any((out / "figures").glob("*.png"))


@pytest.mark.parametrize("name", ["osc-title", "clear", "bidi"])
def test_csv_class_names_reach_the_terminal_shown(name, tmp_path):
    p = PAYLOADS[name]
    data = _csv(tmp_path / "d.csv", [f"cat{p}", f"dog{p}"])
    res = runner.invoke(app, ["analyze", "--model", "mlp:width=8,act=tanh", "--data", str(data), "--target", "label",
                              "--eps", "1e-3", "--out", str(tmp_path / "run")])  # fmt: skip
    assert res.exit_code == 0, res.output
    _clean(res)
