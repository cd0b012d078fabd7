"""The catalogue of built-in experiments: names, modules and one-line descriptions, without importing them.

:data:`CATALOG` is the one place where a built-in experiment's name, the module that
defines it and its one-line description are written; the experiment class reads its
``description`` from here (``description = CATALOG[name].description``), so ``nqf list``
prints the names and descriptions without importing the experiments (and with them
torch, scipy and matplotlib).  An experiment module is imported on the first look-up of
one of its experiments (:func:`get_experiment`, ``REGISTRY[name]``), which registers it
(:func:`register`).

This module imports only :mod:`nqf.errors` at module level and imports the experiment modules
only by name (:func:`importlib.import_module`), so the import graph has no cycle:
experiments import ``base`` and this module, this module imports neither.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import InvalidParameterError, UnknownNameError

if TYPE_CHECKING:
    from ._base import Experiment

__all__ = ["CatalogEntry", "CATALOG", "REGISTRY", "register", "describe", "get_experiment", "all_experiments"]


@dataclass(frozen=True)
class CatalogEntry:
    """A built-in experiment: the module of :mod:`nqf.app._experiments` that defines it and its one-line description."""

    module: str
    description: str

    @property
    def qualified_module(self) -> str:
        return f"{__package__}.{self.module}"


#: Every built-in experiment, by name (``nqf list`` prints them in name order).
CATALOG: dict[str, CatalogEntry] = {
    "demo": CatalogEntry(
        "_demo", "real tanh MLP (vector outputs, whitened inputs) learns in steps at the predicted switch-on times"
    ),
    "interacting-modes": CatalogEntry(
        "_interacting", "correlated features: finite-ε LV trajectories converge to the ε → 0 saddle-to-saddle limit"
    ),
    "lv-staircase": CatalogEntry(
        "_lv_staircase", "commuting data: LV staircases for several ε, switch-on time vs ln(1/ε) with slopes 1/ζ_k"
    ),
    "modules-vs-nqf": CatalogEntry(
        "_modules", "MLP, CNN, attention, QK-only attention, MoE, factorization vs their NQF on an NQF teacher"
    ),
    "power-law": CatalogEntry(
        "_power_law",
        "headline loss exponent (a−1)/b at K ≥ 10³ modes and small ε vs the independent exact mode "
        "sum; finite-K/ε deviations; NQF and a real MLP at small K",
    ),
    "real-data": CatalogEntry(
        "_real_data", "real tanh MLP on scikit-learn digits and wine vs the greedy saddle sequence, at two ε"
    ),
    "scaling-real": CatalogEntry(
        "_scaling_real",
        "crowded drops on real digits data: loss curve and local exponent from the spectra vs a real MLP",
    ),
    "theories": CatalogEntry(
        "_theories",
        "NQF prediction, seeded NQF, Alternating Gradient Flows and the real network side by side, drop by drop",
    ),
    "saddles": CatalogEntry(
        "_saddles",
        "non-commuting staircases (tanh MLP, QK attention, CNN): greedy saddle sequence vs the real networks",
    ),
    "validity": CatalogEntry(
        "_validity", "teacher–student: real network vs NQF over ε — remainder, separation time, gap at first switch-on"
    ),
}


class _Registry(MutableMapping[str, "Experiment"]):
    """The registered experiments, by name: the built-in ones (:data:`CATALOG`, listed without importing them,
    imported on first look-up) and any added with :func:`register` or ``REGISTRY[name] = experiment``.

    Listing names (``sorted(REGISTRY)``, ``name in REGISTRY``) imports nothing; looking up an experiment
    imports its module; iterating over the values or items imports every built-in experiment.
    """

    def __init__(self) -> None:
        self._loaded: dict[str, Experiment] = {}

    def __getitem__(self, name: str) -> Experiment:
        if name not in self._loaded and name in CATALOG:
            entry = CATALOG[name]
            importlib.import_module(entry.qualified_module)  # its @register fills self._loaded
            if name not in self._loaded:
                raise LookupError(
                    f"module {entry.qualified_module} does not register the experiment {name!r} "
                    "that the catalogue says it defines"
                )
        return self._loaded[name]

    def __setitem__(self, name: str, experiment: Experiment) -> None:
        self._loaded[name] = experiment

    def __delitem__(self, name: str) -> None:
        if name in CATALOG:
            raise InvalidParameterError(
                f"name: {name!r} is a built-in experiment; only experiments added with register() can be removed"
            )
        del self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in CATALOG or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        yield from CATALOG
        yield from (name for name in self._loaded if name not in CATALOG)

    def __len__(self) -> int:
        return len(CATALOG) + sum(name not in CATALOG for name in self._loaded)

    def __repr__(self) -> str:
        return f"REGISTRY({sorted(self)})"


#: Every experiment by name (built-in ones are imported on first look-up).
REGISTRY = _Registry()


def register(cls: type[Experiment]) -> type[Experiment]:
    """Class decorator adding an experiment to :data:`REGISTRY`.

    A built-in experiment (one named in :data:`CATALOG`) must be defined in the catalogue's module and carry the
    catalogue's description, so that ``nqf list`` (which reads only the catalogue) describes what runs.
    """
    entry = CATALOG.get(cls.name)
    if entry is not None and (cls.__module__ != entry.qualified_module or cls.description != entry.description):
        raise InvalidParameterError(
            f"cls: experiment {cls.name!r} is a built-in name; expected a class in {entry.qualified_module} whose "
            f"description is CATALOG[{cls.name!r}].description, found one in {cls.__module__}"
            + ("" if cls.description == entry.description else f" with description {cls.description!r}")
        )
    REGISTRY[cls.name] = cls()
    return cls


def describe() -> dict[str, str]:
    """Every experiment's one-line description by name, sorted by name, without importing the built-in ones."""
    out = {name: entry.description for name, entry in CATALOG.items()}
    out.update({name: exp.description for name, exp in REGISTRY._loaded.items() if name not in CATALOG})
    return dict(sorted(out.items()))


def get_experiment(name: str) -> Experiment:
    """The registered experiment called ``name``.

    ``UnknownNameError`` (a ``KeyError``) listing the available names otherwise."""
    if name not in REGISTRY:
        raise UnknownNameError(f"unknown experiment {name!r}; available: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def all_experiments() -> dict[str, Experiment]:
    """Every registered experiment, sorted by name (imports every built-in experiment)."""
    return dict(sorted(REGISTRY.items()))
