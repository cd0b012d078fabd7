"""Sweeps: one experiment over grids of parameters and seeds, run in parallel on Dask (``nqf sweep``).

* :mod:`nqf.app._sweep._grid` — ``--grid`` / ``--zip`` / ``--seeds`` and the ``[sweep]`` table;
* :mod:`nqf.app._sweep._points` — the resolved config of each point, its hash and run directory;
* :mod:`nqf.app._sweep._execute` — the points on a ``distributed.Client`` (local processes or a cluster);
* :mod:`nqf.app._sweep._table` — ``sweep.csv`` / ``sweep.json``, and :func:`sweep_frame`, the table as a DataFrame;
* :mod:`nqf.app._sweep._report` — ``report.html`` with each headline quantity against the swept parameter.

Importing this package imports neither Dask nor torch; :func:`register_cli` adds ``nqf sweep`` to the
``nqf`` command-line app.  See ``docs/sweeps.md``.
"""

from ._cli import register_cli
from ._grid import SweepSpec, parse_seeds, parse_values
from ._points import Point, build_points, is_finished, point_dir
from ._report import rebuild_sweep_report
from ._table import sweep_frame

__all__ = [
    "SweepSpec",
    "parse_seeds",
    "parse_values",
    "Point",
    "build_points",
    "is_finished",
    "point_dir",
    "rebuild_sweep_report",
    "register_cli",
    "sweep_frame",
]
