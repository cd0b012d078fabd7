"""Imports every built-in experiment so that it registers itself."""

from . import demo, modules, validity  # noqa: F401
