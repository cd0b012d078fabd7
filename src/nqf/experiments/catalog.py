"""Imports every built-in experiment so that it registers itself."""

from . import demo  # noqa: F401
