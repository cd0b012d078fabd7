"""Shared test utilities (importable as `helpers` from any test module)."""

import numpy as np


def loglog_slope(s, e):
    """Least-squares slope of log e against log s."""
    s, e = np.log(np.asarray(s, float)), np.log(np.asarray(e, float))
    return float(np.polyfit(s, e, 1)[0])
