"""Shared test utilities (importable as `helpers` from any test module)."""

import json

import numpy as np


def loglog_slope(s, e):
    """Least-squares slope of log e against log s."""
    s, e = np.log(np.asarray(s, float)), np.log(np.asarray(e, float))
    return float(np.polyfit(s, e, 1)[0])


def toml_value(v):
    """A Python value (bool, str, number, list) as a TOML literal."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)
