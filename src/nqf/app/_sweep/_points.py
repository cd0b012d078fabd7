"""The points of a sweep: the resolved config of each, its hash and its run directory.

A point is an ordinary run directory ``SWEEP/points/<h>/`` where ``<h>`` is the
first 12 hex digits of :func:`nqf.app._experiments.config_hash` of the point's
resolved config (experiment, seed, device and every parameter, defaults
included).  The same resolved config always lands in the same directory, and
any change to it (a parameter, a default, the seed) lands somewhere else, so a
stale point is never reused.

A point is *finished* when its ``results.json`` says ``"status": "complete"``
and the config recorded there has the point's hash; a rerun of the sweep skips
finished points without touching their files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import SweepError
from ...results import Result, clip, summarize, to_jsonable
from ._grid import MAX_POINTS, SweepSpec, coerce_for_param

__all__ = ["Point", "build_points", "is_finished", "point_dir", "SHORT"]

SHORT = 12


@dataclass(frozen=True)
class Point(Result):
    """One point of a sweep.

    Attributes
    ----------
    index : int
        Position in the sweep (grid order, seeds innermost).
    swept : dict
        The swept keys and their values at this point (as given, before validation).
    seed : int
    config : dict
        The (unvalidated) config mapping of this point: the base config with the swept values applied.
    resolved : dict or None
        The resolved config (every parameter); ``None`` when the parameters are invalid.
    hash : str
        SHA-256 of the resolved config (of the raw mapping for an invalid point).
    error : str or None
        Why the parameters are invalid (one line), else ``None``.
    """

    index: int
    swept: dict[str, Any]
    seed: int
    config: dict[str, Any] = field(repr=False)
    resolved: dict[str, Any] | None = field(repr=False)
    hash: str
    error: str | None = None

    @property
    def short(self) -> str:
        return self.hash[:SHORT]

    @property
    def valid(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        swept = ", ".join(f"{k}={summarize(v)}" for k, v in self.swept.items())
        text = f"Point({self.index}, {self.short}, {swept}, seed={self.seed}, valid={self.valid})"
        return clip(text)

    def to_dict(self) -> dict:
        return to_jsonable(
            {
                "index": self.index,
                "point": self.short,
                "hash": self.hash,
                "swept": self.swept,
                "seed": self.seed,
                "resolved": self.resolved,
                "error": self.error,
            }
        )


def point_dir(root, point: Point) -> Path:
    """``root/points/<first 12 hex of the config hash>``."""
    return Path(root) / "points" / point.short


def build_points(base: dict, spec: SweepSpec) -> list[Point]:
    """Every point of the sweep over the base config mapping ``base`` (without its ``[sweep]`` table).

    Invalid parameter values do not raise: the point carries the one-line message in ``error``.
    Points with the same resolved config are kept once (the first).

    Raises
    ------
    SweepError
        The experiment itself is unknown, or a swept key is not a parameter of the experiment.
    """
    from .._experiments import ConfigError, apply_overrides, config_hash, get_experiment, parse_config, resolved_config

    name = base.get("experiment")
    try:
        exp = get_experiment(str(name))
    except KeyError as exc:
        raise SweepError(f"experiment: {exc.args[0]}") from None
    fields = exp.Params.model_fields
    for key in spec.keys:
        if key not in fields and key not in ("device",):
            raise SweepError(f"`{key}`: not a parameter of {exp.name!r}; expected one of {', '.join(fields)}")
    seeds = spec.seeds if spec.seeds is not None else [base.get("seed", 0)]
    n = spec.n_combinations * len(seeds)
    if n > MAX_POINTS:
        sizes = " × ".join(f"{len(v)} {k}" for k, v in spec.grid.items())
        sizes += f"{' × ' if sizes else ''}{len(seeds)} seed(s)"
        raise SweepError(
            f"the sweep has {n} points ({sizes}{', zipped lists' if spec.zip else ''}); at most {MAX_POINTS} "
            "points in one sweep: split it into several sweeps"
        )
    points: list[Point] = []
    seen: set[str] = set()
    for combo in spec.combinations():
        for seed in seeds:
            over = {k: coerce_for_param(exp.Params, k, v) for k, v in combo.items()}
            over["seed"] = seed
            data = apply_overrides(base, over)
            try:
                cfg, _, params = parse_config(data, "point")
                resolved = resolved_config(cfg, params)
                h, error = config_hash(resolved), None
            except ConfigError as exc:
                resolved, error = None, str(exc).removeprefix("point: ")
                h = config_hash({"invalid": data})
            if h in seen:
                continue
            seen.add(h)
            points.append(Point(len(points), dict(combo), seed, data, resolved, h, error))
    return points


def recorded_hash(results: dict, point: Point) -> str | None:
    """The config hash of what a ``results.json`` recorded, with the point's requested device.

    (The device recorded is the one resolved at run time, e.g. ``"cpu"`` for ``"auto"``.)
    """
    from .._experiments import config_hash

    cfg = results.get("config") or {}
    try:
        return config_hash(
            {
                "experiment": cfg["experiment"],
                "seed": cfg["seed"],
                "device": (point.resolved or {}).get("device"),
                "params": cfg["params"],
            }
        )
    except (KeyError, TypeError, ValueError):
        return None


def read_results(path: Path) -> dict | None:
    try:
        return json.loads((Path(path) / "results.json").read_text())
    except (OSError, ValueError):
        return None


def is_finished(root, point: Point) -> bool:
    """True when the point's run directory holds complete results of exactly this config."""
    if not point.valid:
        return False
    res = read_results(point_dir(root, point))
    return bool(res) and res.get("status") == "complete" and recorded_hash(res, point) == point.hash
