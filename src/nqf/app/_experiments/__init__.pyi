"""The names of ``nqf.app._experiments``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._base import (
    Check as Check,
    EpsList as EpsList,
    Experiment as Experiment,
    Outcome as Outcome,
    Params as Params,
    Table as Table,
)
from ._catalog import (
    CATALOG as CATALOG,
    REGISTRY as REGISTRY,
    CatalogEntry as CatalogEntry,
    all_experiments as all_experiments,
    describe as describe,
    get_experiment as get_experiment,
    register as register,
)
from ._config import (
    ConfigError as ConfigError,
    RunConfig as RunConfig,
    apply_overrides as apply_overrides,
    config_hash as config_hash,
    load_config as load_config,
    parse_config as parse_config,
    parse_set as parse_set,
    read_config_data as read_config_data,
    resolved_config as resolved_config,
)
from ._demo import (
    teacher_task as teacher_task,
)
from ._runner import (
    RECORDED_FAILURES as RECORDED_FAILURES,
    RunContext as RunContext,
    redraw as redraw,
    run_experiment as run_experiment,
    versions as versions,
)
