"""The names of ``nqf.app._sweep``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._cli import (
    register_cli as register_cli,
)
from ._grid import (
    SweepSpec as SweepSpec,
    parse_seeds as parse_seeds,
    parse_values as parse_values,
)
from ._points import (
    Point as Point,
    build_points as build_points,
    is_finished as is_finished,
    point_dir as point_dir,
)
from ._report import (
    rebuild_sweep_report as rebuild_sweep_report,
)
from ._table import (
    sweep_frame as sweep_frame,
)
