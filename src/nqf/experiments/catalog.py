"""Imports every built-in experiment so that it registers itself."""

from . import demo, modules  # noqa: F401
