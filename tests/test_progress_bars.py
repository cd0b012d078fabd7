"""RunContext.progress draws rich's progress bars on stderr, only when asked, and erases them (transient); nested
loops share one live display; no module of nqf imports tqdm (no longer a dependency)."""

import ast
import io
import sys
from pathlib import Path

import pytest
import torch

from nqf.app._experiments import RunContext

SRC = Path(__file__).resolve().parents[1] / "src" / "nqf"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _terminal(monkeypatch) -> tuple[_Terminal, _Terminal]:
    """Terminals as stderr and stdout, set inside the test (pytest's capture resets them after fixtures)."""
    err, out = _Terminal(), _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    return err, out


def _ctx(show: bool) -> RunContext:
    return RunContext(None, torch.device("cpu"), 0, show)  # type: ignore[arg-type]  # no run directory needed


def test_off_returns_the_iterable_itself(monkeypatch):
    terminal = _terminal(monkeypatch)
    items = [1, 2, 3]
    assert _ctx(False).progress(items, "loop") is items
    assert terminal[0].getvalue() == "" and terminal[1].getvalue() == ""


def test_a_bar_on_stderr_erased_at_the_end(monkeypatch):
    err, out = _terminal(monkeypatch)
    ctx = _ctx(True)
    seen = list(ctx.progress(iter(range(5)), "parts", total=5))
    assert seen == [0, 1, 2, 3, 4]
    text = err.getvalue()
    assert "parts" in text and "0/5" in text  # rich's M/N column, with the total given
    assert text.rstrip("\r").endswith("\x1b[2K\x1b[?25h")  # the line erased, the cursor shown again: transient
    assert out.getvalue() == ""
    assert ctx._bars is None


def test_nested_loops_share_one_display(monkeypatch):
    err, _ = _terminal(monkeypatch)
    ctx = _ctx(True)
    pairs = [(a, b) for a in ctx.progress(["x", "y"], "outer") for b in ctx.progress(range(3), "inner")]
    assert pairs == [(a, b) for a in "xy" for b in range(3)]
    assert "outer" in err.getvalue() and "inner" in err.getvalue() and "0/3" in err.getvalue()
    assert ctx._bars is None


def test_a_loop_left_early_stops_the_display(monkeypatch):
    err, _ = _terminal(monkeypatch)
    ctx = _ctx(True)
    with pytest.raises(RuntimeError):
        for i in ctx.progress(range(10), "fails"):
            if i == 2:
                raise RuntimeError("stop")
    assert ctx._bars is None
    assert list(ctx.progress(range(2), "again")) == [0, 1]  # a new display can start
    assert "fails" in err.getvalue() and "again" in err.getvalue()


def test_no_module_imports_tqdm():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            found += [f"{path.relative_to(SRC)}:{node.lineno}" for n in names if n.split(".")[0] == "tqdm"]
    assert not found, found
