"""Named experiments reproducing the paper's claims, their configs and the runner.

This package is the one door: its modules are private. The names below are imported on first use
(PEP 562), so that listing the catalogue (``nqf list``: :data:`CATALOG`, :func:`describe`) does not
import the experiments, the runner or torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Public name → the module of this package that defines it.
_LAZY_ATTRS: dict[str, str] = {
    "Check": "_base",
    "Experiment": "_base",
    "Outcome": "_base",
    "Params": "_base",
    "Table": "_base",
    "EpsList": "_base",
    "REGISTRY": "_catalog",
    "register": "_catalog",
    "get_experiment": "_catalog",
    "all_experiments": "_catalog",
    "describe": "_catalog",
    "CATALOG": "_catalog",
    "CatalogEntry": "_catalog",
    "ConfigError": "_config",
    "RunConfig": "_config",
    "load_config": "_config",
    "parse_config": "_config",
    "parse_set": "_config",
    "apply_overrides": "_config",
    "resolved_config": "_config",
    "config_hash": "_config",
    "read_config_data": "_config",
    "format_validation_error": "_config",
    "RunContext": "_runner",
    "run_experiment": "_runner",
    "RECORDED_FAILURES": "_runner",
    "check_sizes": "_runner",
    "redraw": "_runner",
    "resolve_device": "_runner",
    "versions": "_runner",
    "run_identity": "_runner",
    "teacher_task": "_demo",
}

__all__ = [
    "Check",
    "Experiment",
    "Outcome",
    "Params",
    "Table",
    "EpsList",
    "REGISTRY",
    "register",
    "get_experiment",
    "all_experiments",
    "describe",
    "CATALOG",
    "CatalogEntry",
    "ConfigError",
    "RunConfig",
    "load_config",
    "parse_config",
    "parse_set",
    "apply_overrides",
    "resolved_config",
    "config_hash",
    "read_config_data",
    "format_validation_error",
    "RunContext",
    "run_experiment",
    "RECORDED_FAILURES",
    "check_sizes",
    "redraw",
    "resolve_device",
    "versions",
    "run_identity",
    "teacher_task",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these are resolved lazily
    from ._base import Check as Check
    from ._base import EpsList as EpsList
    from ._base import Experiment as Experiment
    from ._base import Outcome as Outcome
    from ._base import Params as Params
    from ._base import Table as Table
    from ._catalog import CATALOG as CATALOG
    from ._catalog import REGISTRY as REGISTRY
    from ._catalog import CatalogEntry as CatalogEntry
    from ._catalog import all_experiments as all_experiments
    from ._catalog import describe as describe
    from ._catalog import get_experiment as get_experiment
    from ._catalog import register as register
    from ._config import ConfigError as ConfigError
    from ._config import RunConfig as RunConfig
    from ._config import apply_overrides as apply_overrides
    from ._config import config_hash as config_hash
    from ._config import format_validation_error as format_validation_error
    from ._config import load_config as load_config
    from ._config import parse_config as parse_config
    from ._config import parse_set as parse_set
    from ._config import read_config_data as read_config_data
    from ._config import resolved_config as resolved_config
    from ._demo import teacher_task as teacher_task
    from ._runner import RECORDED_FAILURES as RECORDED_FAILURES
    from ._runner import RunContext as RunContext
    from ._runner import check_sizes as check_sizes
    from ._runner import redraw as redraw
    from ._runner import resolve_device as resolve_device
    from ._runner import run_experiment as run_experiment
    from ._runner import run_identity as run_identity
    from ._runner import versions as versions


def __getattr__(name: str) -> Any:
    if name not in _LAZY_ATTRS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY_ATTRS[name]}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRS))
