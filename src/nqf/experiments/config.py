"""Run configuration files (TOML), validated by pydantic with one-line errors.

A config names the experiment and its parameters::

    experiment = "lv-staircase"
    seed = 0
    device = "cpu"

    [params]
    eps = [1e-4, 1e-8, 1e-12]

Unknown keys, wrong types and bad values are rejected with a message that
names the key, the expected type and the value found.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["RunConfig", "ConfigError", "load_config", "parse_config", "format_validation_error"]


class ConfigError(ValueError):
    """A configuration file or value is invalid; the message is one line."""


class RunConfig(BaseModel):
    """Top level of a config file."""

    model_config = ConfigDict(extra="forbid")

    experiment: str
    seed: int = Field(0, ge=0)
    device: str = "cpu"
    params: dict[str, Any] = Field(default_factory=dict)


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line: ``key: expected …, found … (type)`` for the first error, and a count of the rest."""
    errs = exc.errors()
    e = errs[0]
    loc = ".".join(str(p) for p in ((prefix,) if prefix else ()) + tuple(e["loc"]))
    found = e.get("input")
    if e["type"] == "extra_forbidden":
        msg = f"{loc}: unknown key"
    elif e["type"] == "missing":
        msg = f"{loc}: required key is missing"
    else:
        msg = f"{loc}: {e['msg'].lower()}; found {found!r} ({type(found).__name__})"
    if len(errs) > 1:
        msg += f" (and {len(errs) - 1} more error{'s' if len(errs) > 2 else ''})"
    return msg


def parse_config(data: dict, source: str = "config"):
    """Validate a config mapping; returns ``(RunConfig, experiment, params)``."""
    from .base import get_experiment

    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation_error(exc)}") from None
    try:
        exp = get_experiment(cfg.experiment)
    except KeyError as exc:
        raise ConfigError(f"{source}: experiment: {exc.args[0]}") from None
    try:
        params = exp.Params.model_validate(cfg.params)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation_error(exc, 'params')}") from None
    return cfg, exp, params


def load_config(path) -> tuple:
    """Read and validate a TOML config file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, str(path))
