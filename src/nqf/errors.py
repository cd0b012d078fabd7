"""Exception hierarchy of nqf.

Every error raised on bad input is an instance of :class:`NQFError` and of the
matching built-in (``ValueError`` or ``TypeError``), so callers can catch
either.  Messages name the parameter in backticks, say what was expected and
what was found.
"""

from __future__ import annotations

from typing import Any


class NQFError(Exception):
    """Base class of every error nqf raises on purpose."""


class ShapeError(NQFError, ValueError):
    """An array has the wrong number of dimensions or the wrong size."""


class NonFiniteError(NQFError, ValueError):
    """An array contains NaN or infinite entries."""


class NormalFormError(NQFError, ValueError):
    """A module violates an assumption of the normal form (docs/theory.md §1).

    Raised when the module is not three times differentiable at zero (e.g.
    ReLU), when its units are not interchangeable (permutation symmetry), or
    when the zero-gradient condition is required but fails.
    """


class NotClosedError(NQFError, ValueError):
    """The requested dynamics do not close on the order parameter ``M = W Wᵀ``."""


class NonCommutingError(NQFError, ValueError):
    """The structure matrices do not commute, so no Lotka–Volterra reduction exists."""

    #: The measured non-commutation (set by :func:`nqf.reductions.lv.reduce`), else None.
    value: float | None = None
    #: The worst measurement (``sample · C + output``) where the test names one, else None.
    index: int | None = None


class DivergenceError(NQFError, ArithmeticError):
    """A simulation diverged (loss became non-finite or grew without bound)."""

    #: The run up to the divergence (a :class:`nqf.dynamics.Trajectory`) where the simulation records it.
    trajectory: Any = None


class InvalidParameterError(NQFError, ValueError):
    """A parameter has a value outside its allowed range (the message names it and the value found)."""


class InvalidTypeError(NQFError, TypeError):
    """An argument has the wrong type (the message names it, with the type expected and the type found)."""


class DataError(NQFError, ValueError):
    """A data set cannot be loaded or prepared (unknown name, missing file or column, bad format)."""


class ModelSpecError(NQFError, ValueError):
    """A model specification (``mlp:width=…``, ``FILE.py:FACTORY``) cannot be parsed, loaded or built."""


class ModelCodeError(ModelSpecError):
    """The user's model code (a model file, its factory or its forward) failed or did what nqf cannot analyse:
    it exited, raised, recursed forever, ran past its time budget, modified its input in place, drew random
    numbers, or returned non-finite, non-floating or detached outputs."""


class SweepError(NQFError, ValueError):
    """A sweep specification (``--grid``, ``--zip``, ``--seeds``, ``[sweep]``) or a ``sweep.json`` is invalid.

    For a ``sweep.json`` (``nqf report SWEEP``) the message names the file and the field."""


class NoUnitsError(NQFError, ValueError):
    """No layer of interchangeable units was found in a module, or the choice among several is ambiguous."""


class UnknownNameError(NQFError, KeyError):
    """A name (experiment, parameter, submodule) that is not among the available ones; the message lists them."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class NoPowerLawError(NQFError, ValueError):
    """A loss curve has no power-law range to fit (too short, or no straight stretch in log–log)."""


class SilentError(NQFError, ValueError):
    """No order up to 4 of the analysed units carries signal on the data: nothing grows, nothing to compare."""


class MissingDependencyError(NQFError, ImportError):
    """An optional dependency is not installed; the message names what needs it and the one ``pip install`` line
    (``pandas`` for the ``to_frame()`` tables: ``pip install 'nqf[frames]'``)."""
