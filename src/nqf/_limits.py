"""Caps on what one command may ask for, in one place (imports nothing: ``nqf --version`` stays fast).

A run past a cap is refused before it starts, with one line naming the flag that raises it (issue 23).
"""

from __future__ import annotations

__all__ = ["MAX_STEPS", "MAX_THREADS", "DEFAULT_TIMEOUT"]

#: The most GD steps one loop of a run started from the command line takes unless ``--max-steps`` raises it
#: (``nqf run``, ``nqf demo``, ``nqf sweep``, ``nqf analyze``): a run of 10¹² steps is refused, not started.
MAX_STEPS = 10_000_000
#: ``--threads`` above this is a flag error (torch cannot start that many threads).
MAX_THREADS = 1024
#: Seconds that one call into the user's model code may take during ``nqf analyze``'s input checks
#: (``--timeout``): the import of a model file, its factory, and the one forward over the data.
DEFAULT_TIMEOUT = 120.0
