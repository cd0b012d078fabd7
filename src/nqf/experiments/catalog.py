"""Imports every built-in experiment so that it registers itself."""

from . import demo, interacting, lv_staircase, modules, power_law, real_data, saddles, validity  # noqa: F401
