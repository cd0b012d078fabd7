"""Named experiments reproducing the paper's claims, their configs and the runner.

The names below are imported on first use (PEP 562), so that ``import nqf.experiments.catalog``
(``nqf list``) does not import the experiments, the runner or torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Public name → the module of this package that defines it.
_LAZY_ATTRS: dict[str, str] = {
    "Check": "base",
    "Experiment": "base",
    "Outcome": "base",
    "Params": "base",
    "Table": "base",
    "REGISTRY": "catalog",
    "register": "catalog",
    "get_experiment": "catalog",
    "all_experiments": "catalog",
    "ConfigError": "config",
    "RunConfig": "config",
    "load_config": "config",
    "parse_config": "config",
    "RunContext": "runner",
    "run_experiment": "runner",
}

__all__ = [
    "REGISTRY",
    "Check",
    "Experiment",
    "Outcome",
    "Params",
    "Table",
    "get_experiment",
    "all_experiments",
    "register",
    "ConfigError",
    "RunConfig",
    "load_config",
    "parse_config",
    "RunContext",
    "run_experiment",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these are resolved lazily
    from .base import Check as Check
    from .base import Experiment as Experiment
    from .base import Outcome as Outcome
    from .base import Params as Params
    from .base import Table as Table
    from .catalog import REGISTRY as REGISTRY
    from .catalog import all_experiments as all_experiments
    from .catalog import get_experiment as get_experiment
    from .catalog import register as register
    from .config import ConfigError as ConfigError
    from .config import RunConfig as RunConfig
    from .config import load_config as load_config
    from .config import parse_config as parse_config
    from .runner import RunContext as RunContext
    from .runner import run_experiment as run_experiment


def __getattr__(name: str) -> Any:
    if name not in _LAZY_ATTRS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY_ATTRS[name]}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRS))
