"""Sweeps: one experiment over grids of parameters and seeds, run in parallel on Dask (``nqf sweep``).

* :mod:`nqf.app._sweep._grid` — ``--grid`` / ``--zip`` / ``--seeds`` and the ``[sweep]`` table;
* :mod:`nqf.app._sweep._points` — the resolved config of each point, its hash and run directory;
* :mod:`nqf.app._sweep._execute` — the points on a ``distributed.Client`` (local processes or a cluster);
* :mod:`nqf.app._sweep._table` — ``sweep.csv`` / ``sweep.json``, and :func:`sweep_frame`, the table as a DataFrame;
* :mod:`nqf.app._sweep._report` — ``report.html`` with each headline quantity against the swept parameter.

Importing this package imports neither Dask nor torch; :func:`register_cli` adds ``nqf sweep`` to the
``nqf`` command-line app.  See ``docs/sweeps.md``.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
