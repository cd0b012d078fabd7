"""What ``nqf analyze`` and ``nqf compare`` share on the command line: the one-line exit, and their flags checked
as :class:`nqf.app._study._output.AnalyzeParams` (a bad flag is one line naming it, exit 2)."""

from __future__ import annotations

from typing import NoReturn

import typer

from ..._text import terminal_echo

__all__ = ["fail", "analyze_params"]


def fail(msg: str, code: int = 2) -> NoReturn:
    """One line ``error: MSG`` on stderr, then exit with ``code`` (2: bad input, 1: the analysis failed)."""
    terminal_echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def analyze_params(**fields):
    """The flags as validated :class:`._output.AnalyzeParams`; a bad one ends in :func:`fail`, naming it."""
    from pydantic import ValidationError

    from ._output import AnalyzeParams

    try:
        return AnalyzeParams(**fields)
    except ValidationError as exc:  # one line naming the flag
        err = exc.errors()[0]
        fail(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}; found {err.get('input')!r}")
