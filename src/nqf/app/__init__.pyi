"""The names of ``nqf.app``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._cli import main as main
from ._data import (
    Dataset as Dataset,
    LossLog as LossLog,
    load_dataset as load_dataset,
    prepare as prepare,
    read_loss_log as read_loss_log,
)
from ._experiments import (
    ConfigError as ConfigError,
    Outcome as Outcome,
    all_experiments as all_experiments,
    get_experiment as get_experiment,
    load_config as load_config,
    run_experiment as run_experiment,
)
from ._report import (
    read_results_json as read_results_json,
    rebuild_report as rebuild_report,
)
from ._study import (
    Analysis as Analysis,
    Forecast as Forecast,
    Monitor as Monitor,
    WatchStatus as WatchStatus,
    analyze as analyze,
    forecast as forecast,
    save_analysis as save_analysis,
    unit_listing as unit_listing,
    watch as watch,
)
from ._sweep import sweep_frame as sweep_frame
