"""Sweeps: one experiment over grids of parameters and seeds, run in parallel on Dask (``nqf sweep``).

* :mod:`nqf.sweep.grid` — ``--grid`` / ``--zip`` / ``--seeds`` and the ``[sweep]`` table;
* :mod:`nqf.sweep.points` — the resolved config of each point, its hash and run directory;
* :mod:`nqf.sweep.execute` — the points on a ``distributed.Client`` (local processes or a cluster);
* :mod:`nqf.sweep.table` — ``sweep.csv`` / ``sweep.json``;
* :mod:`nqf.sweep.report` — ``report.html`` with each headline quantity against the swept parameter.

Importing this package imports neither Dask nor torch.  See ``docs/sweeps.md``.
"""

from .grid import SweepSpec, parse_seeds, parse_values
from .points import Point, build_points, is_finished, point_dir

__all__ = ["SweepSpec", "parse_seeds", "parse_values", "Point", "build_points", "is_finished", "point_dir"]
