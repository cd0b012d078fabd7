"""Named experiments reproducing the paper's claims, their configs and the runner."""

from .base import REGISTRY, Check, Experiment, Outcome, Params, Table, register
from .catalog import all_experiments, get_experiment
from .config import ConfigError, RunConfig, load_config, parse_config
from .runner import RunContext, run_experiment

__all__ = ["REGISTRY", "Check", "Experiment", "Outcome", "Params", "Table", "get_experiment", "all_experiments", "register",
           "ConfigError", "RunConfig", "load_config", "parse_config", "RunContext", "run_experiment"]
