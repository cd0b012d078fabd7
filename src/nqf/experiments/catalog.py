"""Imports every built-in experiment so that it registers itself."""

from . import demo, lv_staircase, modules, validity  # noqa: F401
