"""What a sweep varies: ``--grid``, ``--zip``, ``--seeds`` and the ``[sweep]`` table of a config.

* ``--grid KEY=V1,V2,…`` (repeatable): every combination of the grid keys (Cartesian product);
* ``--zip KEY=V1,V2,…`` (repeatable): lists of equal length, varied together (one axis);
* ``--seeds 0-9`` / ``--seeds 0,3,7`` / ``--seeds 0-3,7``: the seeds, innermost.

Each value is read as a TOML value (``1e-6``, ``[2.0, 1.0]``, ``true``, ``"tanh"``;
anything else is a plain string), exactly as ``--set`` reads it; commas inside
brackets or quotes do not split.  The same may be written in the config::

    [sweep]
    seeds = "0-3"            # or [0, 1, 2, 3]
    [sweep.grid]
    eps = [1e-4, 1e-6, 1e-8]
    [sweep.zip]
    lr = [1e-2, 5e-3]
    t_max = [12.0, 24.0]

A command-line key replaces the table's entry for the same key.

A scalar value ``v`` for a list-valued parameter is taken as the one-element
list ``[v]``.  The lists of initial scales ε (``eps`` of ``lv-staircase``,
``interacting-modes``, ``validity``) need at least ``L = 2`` values (each run
compares several ε); a scalar ``0 < v < 1`` for such a list becomes the
geometric completion ``[v^{1/L}, …, v]`` — for ``L = 2`` that is ``[√v, v]`` —
whose smallest value is ``v``.  These experiments take their checks at the
smallest ε, so each point measures at ``v``, and the sweep varies it.
"""

from __future__ import annotations

import itertools
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from ...errors import SweepError
from ...results import Result, clip, summarize, to_jsonable

__all__ = [
    "SweepSpec",
    "parse_values",
    "parse_seeds",
    "parse_assignments",
    "sweep_from_table",
    "combine",
    "coerce_for_param",
]


@dataclass(frozen=True)
class SweepSpec(Result):
    """The varied keys of a sweep.

    Attributes
    ----------
    grid : dict[str, list]
        Keys varied as a Cartesian product (in insertion order, the last fastest).
    zip : dict[str, list]
        Keys varied together (all lists of the same length); one axis of the product, after the grid.
    seeds : list[int] or None
        Seeds (innermost); ``None`` keeps the config's seed.
    """

    grid: dict[str, list] = field(default_factory=dict)
    zip: dict[str, list] = field(default_factory=dict)
    seeds: list[int] | None = None

    def __post_init__(self):
        lengths = {k: len(v) for k, v in self.zip.items()}
        if len(set(lengths.values())) > 1:
            raise SweepError(f"`--zip` lists must have the same length; found {lengths}")
        for k, v in list(self.grid.items()) + list(self.zip.items()):
            if not v:
                raise SweepError(f"`{k}`: a swept key needs at least one value")
        both = set(self.grid) & set(self.zip)
        if both:
            raise SweepError(f"`{sorted(both)[0]}` is both in the grid and in a zip; give it once")
        if "seed" in self.grid or "seed" in self.zip:
            raise SweepError("`seed`: vary seeds with `--seeds` (or `seeds` in [sweep]), not in a grid or zip")

    @property
    def keys(self) -> list[str]:
        """The swept keys, in column order (grid, then zip; ``seed`` is separate)."""
        return list(self.grid) + list(self.zip)

    @property
    def n_combinations(self) -> int:
        """How many combinations :meth:`combinations` gives, counted without building them."""
        n = math.prod(len(v) for v in self.grid.values())
        return n * (len(next(iter(self.zip.values()))) if self.zip else 1)

    def combinations(self) -> list[dict[str, Any]]:
        """Every combination of the swept keys (without seeds), grid outermost, zip innermost."""
        gkeys = list(self.grid)
        zkeys = list(self.zip)
        n_zip = len(next(iter(self.zip.values()))) if self.zip else 1
        out = []
        for gvals in itertools.product(*(self.grid[k] for k in gkeys)):
            for i in range(n_zip):
                combo = dict(zip(gkeys, gvals, strict=False))
                combo.update({k: self.zip[k][i] for k in zkeys})
                out.append(combo)
        return out

    def __repr__(self) -> str:
        text = (
            f"SweepSpec(grid={list(self.grid)}, zip={list(self.zip)}, combinations={self.n_combinations}, "
            f"seeds={summarize(self.seeds)})"
        )
        return clip(text)

    def to_dict(self) -> dict:
        return to_jsonable({"grid": self.grid, "zip": self.zip, "seeds": self.seeds})


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets, braces and quotes."""
    parts, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def parse_values(text: str, key: str = "value") -> list:
    """``"1e-4,1e-6"`` → ``[0.0001, 1e-06]``; each item read as a TOML value (see module docstring)."""
    from .._experiments import parse_set

    items = _split_top_level(text)
    if any(not it for it in items):
        raise SweepError(f"`{key}`: empty value in {text!r}; expected V1,V2,…")
    return [parse_set([f"v={it}"])["v"] for it in items]


def parse_assignments(items, flag: str) -> dict[str, list]:
    """``["eps=1e-4,1e-6", "lr=0.1"]`` → ``{"eps": [...], "lr": [...]}`` (a key given twice is an error)."""
    out: dict[str, list] = {}
    for item in items or ():
        if "=" not in item:
            raise SweepError(f"`{flag}`: expected KEY=V1,V2,…; found {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if key.startswith("params."):
            key = key[len("params.") :]
        if not key:
            raise SweepError(f"`{flag}`: empty key in {item!r}")
        if key in out:
            raise SweepError(f"`{flag}`: key `{key}` given twice")
        out[key] = parse_values(raw, key)
    return out


#: At most this many points in one sweep (combinations × seeds, counted before any point is built: a grid of
#: 10⁶ points is refused at once instead of being built for minutes, dry run included).
MAX_POINTS = 100_000

#: At most this many seeds in one sweep (a range is counted before it is expanded, so that
#: ``--seeds 0-10000000`` is refused at once instead of building ten million points).
MAX_SEEDS = 100_000


def _check_seed_count(n: int, spec) -> None:
    if n > MAX_SEEDS:
        raise SweepError(
            f"`seeds`: at most {MAX_SEEDS} seeds in one sweep; {spec!r} asks for {n} "
            "(split the sweep into several sweeps of fewer seeds)"
        )


def parse_seeds(spec) -> list[int]:
    """``"0-9"``, ``"0,3,7"``, ``"0-3,7"``, an int or a list of ints → sorted-as-given list without repeats.

    More than :data:`MAX_SEEDS` seeds are refused (counted before a range is expanded)."""
    if isinstance(spec, bool):
        raise SweepError(f"`seeds`: expected a range like 0-9 or a list like 0,3,7; found {spec!r}")
    if isinstance(spec, int):
        items = [spec]
    elif isinstance(spec, (list, tuple)):
        items = list(spec)
    elif isinstance(spec, str):
        items = []
        for part in (p.strip() for p in spec.split(",")):
            lo, sep, hi = part.partition("-")
            try:
                a, b = (int(lo), int(hi)) if sep else (int(part), int(part))
            except ValueError:
                raise SweepError(f"`seeds`: expected a range like 0-9 or a list like 0,3,7; found {spec!r}") from None
            if b < a:
                raise SweepError(f"`seeds`: range {part!r} is empty (end before start)")
            _check_seed_count(len(items) + b - a + 1, spec)
            items += list(range(a, b + 1))
    else:
        raise SweepError(f"`seeds`: expected a range like 0-9 or a list like 0,3,7; found {spec!r}")
    _check_seed_count(len(items), spec)
    if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in items):
        raise SweepError(f"`seeds`: seeds must be non-negative integers; found {spec!r}")
    return list(dict.fromkeys(items))


def sweep_from_table(table) -> SweepSpec:
    """The ``[sweep]`` table of a config (``grid``, ``zip``, ``seeds``) as a :class:`SweepSpec`."""
    if table is None:
        return SweepSpec()
    if not isinstance(table, dict):
        raise SweepError(f"[sweep]: expected a table; found {table!r}")
    unknown = set(table) - {"grid", "zip", "seeds"}
    if unknown:
        raise SweepError(f"[sweep]: unknown key `{sorted(unknown)[0]}`; expected grid, zip or seeds")

    def lists(name):
        sub = table.get(name) or {}
        if not isinstance(sub, dict):
            raise SweepError(f"[sweep.{name}]: expected a table of KEY = [V1, V2, …]; found {sub!r}")
        out = {}
        for k, v in sub.items():
            if not isinstance(v, list):
                raise SweepError(f"[sweep.{name}] `{k}`: expected a list of values; found {v!r}")
            out[k[len("params.") :] if k.startswith("params.") else k] = v
        return out

    seeds = table.get("seeds")
    return SweepSpec(lists("grid"), lists("zip"), None if seeds is None else parse_seeds(seeds))


def combine(table: SweepSpec, grid: dict, zipped: dict, seeds) -> SweepSpec:
    """The config's table overridden by the command line (a key on the command line replaces the table's)."""
    g = {k: v for k, v in table.grid.items() if k not in zipped}
    z = {k: v for k, v in table.zip.items() if k not in grid}
    if zipped:  # a zip on the command line replaces the table's zip group as a whole
        z = {}
    g.update(grid)
    z.update(zipped)
    return SweepSpec(g, z, table.seeds if seeds is None else parse_seeds(seeds))


def _is_list_annotation(ann) -> bool:
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _is_list_annotation(typing.get_args(ann)[0])
    if origin in (list, tuple):
        return True
    if origin is typing.Union or str(origin) == "types.UnionType":
        return any(_is_list_annotation(a) for a in typing.get_args(ann) if a is not type(None))
    return ann in (list, tuple)


def _min_length(field) -> int:
    return max([int(getattr(m, "min_length", 0) or 0) for m in getattr(field, "metadata", ())] + [0])


def coerce_for_param(params_cls, key: str, value):
    """A scalar swept value for a list-valued parameter becomes a list (see module docstring).

    ``[v]``; for a list of initial scales that needs ``L ≥ 2`` entries and ``0 < v < 1``:
    ``[v^{1/L}, v^{2/L}, …, v]`` (distinct, in (0, 1), smallest ``v``).
    """
    fields = getattr(params_cls, "model_fields", {})
    if key not in fields or isinstance(value, list) or not _is_list_annotation(fields[key].annotation):
        return value
    n = _min_length(fields[key])
    if n >= 2 and isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1:
        return [float(value) ** (j / n) for j in range(1, n)] + [value]
    return [value]
