"""What every hostile-input case of the CLI asserts (tests/test_hostile_*.py): one line on the output, the
error's, naming the input; the exit code of a bad input; no traceback."""

from __future__ import annotations


def assert_one_line(res, needles, code: int = 2) -> None:
    """``res`` (a Click ``Result``) exited with ``code`` and printed exactly one line, ``error: …``, holding
    every string of ``needles``, and no traceback."""
    out = res.output
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    assert res.exit_code == code, out
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    assert "Traceback" not in out
    for s in needles:
        assert s in lines[0], (s, lines[0])
