"""Text that leaves nqf for a terminal or a figure, shown as the user typed it (issue 37: classes 2–4).

No heavy imports (the CLI's fast paths use it without torch).
"""

from __future__ import annotations

import re

__all__ = ["terminal_text", "terminal_echo", "figure_text"]


#: Characters a terminal acts on instead of showing: C0 controls but newline and tab, DEL, C1 controls, and the
#: bidirectional overrides and isolates (they reorder what is shown).
_TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_text(value) -> str:
    """``str(value)`` as it may reach a terminal: every character the terminal would act on (an escape
    sequence's ESC, a bell, a carriage return, a bidirectional override) shown as ``\\xNN`` / ``\\uNNNN``.

    The one helper for every string nqf prints (its own text has no such characters, so everything printed
    passes through it): class names, file and module names, a user's exception message, sweep keys and values.
    """
    return _TERMINAL_CONTROLS.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", str(value)
    )


def terminal_echo(text="", *, err: bool = False) -> None:
    """Print ``text`` (``typer.echo``) through :func:`terminal_text`."""
    import typer

    typer.echo(terminal_text(text), err=err)


def figure_text(value) -> str:
    """``str(value)`` as matplotlib should show it: ``$`` escaped, so that a user's string (a file name, a swept
    value) is never parsed as mathtext (``a$\\frac{$b.csv`` raised inside the finished analysis' figure)."""
    return str(value).replace("$", r"\$")
