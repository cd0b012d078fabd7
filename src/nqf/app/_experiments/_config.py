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

from ...errors import NQFError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # pyright: ignore[reportMissingImports]  # installed only on Python < 3.11

__all__ = [
    "RunConfig",
    "ConfigError",
    "load_config",
    "parse_config",
    "parse_set",
    "apply_overrides",
    "resolved_config",
    "config_hash",
    "read_config_data",
]


class ConfigError(NQFError, ValueError):
    """A configuration file or value is invalid; the message is one line (the CLI exits with code 2)."""


class RunConfig(BaseModel):
    """Top level of a config file."""

    model_config = ConfigDict(extra="forbid")

    experiment: str
    seed: int = Field(0, ge=0, lt=2**32, strict=True, description="an integer in [0, 2**32); not a boolean")
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
    from ._catalog import get_experiment

    if isinstance(data, dict) and "sweep" in data:  # the sweep's own table: not a run's key
        raise ConfigError(
            f"{source}: sweep: a [sweep] table is read by `nqf sweep` (run `nqf sweep {source}`); remove it to "
            "run the config as one run"
        )
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


_MAX_CONFIG_BYTES = 16 * 2**20


def read_config_data(path) -> dict:
    """Read a TOML config file into a mapping (not yet validated); one-line :class:`ConfigError` on failure."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; expected a TOML file")
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    if not path.is_file():
        raise ConfigError(f"config file {path} is not a regular file; expected a TOML file")
    try:
        if path.stat().st_size > _MAX_CONFIG_BYTES:
            raise ConfigError(
                f"config file {path} is larger than {_MAX_CONFIG_BYTES // 2**20} MiB; expected a TOML file"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from None
    if b"\x00" in raw:
        raise ConfigError(f"config file {path} is a binary file (it holds NUL bytes); expected a TOML file")
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (an editor's "UTF-8 with BOM") is not part of the TOML
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text (a binary file?); expected a TOML file") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def load_config(path, overrides: dict | None = None) -> tuple:
    """Read and validate a TOML config file, with optional ``--set`` overrides applied first."""
    data = read_config_data(path)
    if overrides:
        data = apply_overrides(data, overrides)
    return parse_config(data, str(path))


_TOP_LEVEL = ("experiment", "seed", "device")


def parse_set(items) -> dict[str, Any]:
    """Parse ``--set key=value`` items into ``{key: value}``.

    The value is read as a TOML value (``1e-6``, ``[1e-4, 1e-8]``, ``true``,
    ``"tanh"``); anything that is not valid TOML is taken as a plain string,
    so ``--set activation=tanh`` works.  Keys are ``experiment``, ``seed``,
    ``device`` or a parameter name (optionally written ``params.NAME``).
    """
    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise ConfigError(f"--set: expected KEY=VALUE; found {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"--set: empty key in {item!r}")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out[key] = value
    return out


def apply_overrides(data: dict, overrides: dict[str, Any]) -> dict:
    """A copy of the config mapping ``data`` with ``overrides`` applied (see :func:`parse_set` for keys)."""
    new = {k: v for k, v in data.items()}
    given = new.get("params")
    if given is not None and not isinstance(given, dict):
        raise ConfigError(
            f"params: expected a table of parameters ([params] or params = {{…}}); found {given!r} "
            f"({type(given).__name__}), so --set cannot add to it"
        )
    params = dict(given or {})
    for key, value in overrides.items():
        if key == "params":
            raise ConfigError(
                f"--set: `params` is the table of parameters; set one with --set NAME=VALUE; found params={value!r}"
            )
        if key in _TOP_LEVEL:
            new[key] = value
        else:
            name = key[len("params.") :] if key.startswith("params.") else key
            if not name or "." in name:
                raise ConfigError(f"--set: unknown key {key!r}; expected experiment, seed, device or a parameter name")
            params[name] = value
    new["params"] = params
    return new


def resolved_config(cfg: RunConfig, params) -> dict[str, Any]:
    """The full resolved config of a run: experiment, seed, device and *every* parameter (defaults included)."""
    return {
        "experiment": cfg.experiment,
        "seed": cfg.seed,
        "device": cfg.device,
        "params": params.model_dump(mode="json"),
    }


def config_hash(resolved: dict[str, Any]) -> str:
    """SHA-256 (hex) of a resolved config in canonical JSON (sorted keys, no whitespace)."""
    import hashlib
    import json

    blob = json.dumps(resolved, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
