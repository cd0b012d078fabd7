"""The names of ``nqf.app._study``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._cli import (
    register_cli as register_cli,
)
from ._discover import (
    FoundUnits as FoundUnits,
    choose_units as choose_units,
    find_unit_layers as find_unit_layers,
    unit_listing as unit_listing,
)
from ._forecast import (
    forecast as forecast,
)
from ._forecast_result import (
    Forecast as Forecast,
    LogJudgement as LogJudgement,
)
from ._models import (
    build_model as build_model,
)
from ._output import (
    save_analysis as save_analysis,
)
from ._pipeline import (
    analyze as analyze,
    prepare_analysis as prepare_analysis,
)
from ._plan import (
    Prepared as Prepared,
)
from ._result import (
    Analysis as Analysis,
    CheckRow as CheckRow,
)
from ._watch import (
    Monitor as Monitor,
    WatchStatus as WatchStatus,
    watch as watch,
)
