"""The one convention of nqf's result types: immutable, compact repr, JSON-ready ``to_dict()``, picklable.

Every public result type (a trajectory, a Lotka–Volterra solution, a power-law fit, an
analysis, a check, …) is a frozen dataclass deriving from :class:`Result`:

* ``repr(obj)`` is short (:func:`compact_repr`): scalars with their values, arrays and
  tensors as ``dtype[shape]``, containers by their length — never whole arrays;
* ``obj.to_dict()`` is JSON-ready (:func:`to_jsonable` of the public fields, or of what the
  type chooses to report), so ``json.dumps(obj.to_dict())`` works and
  ``json.loads(json.dumps(d)) == d``;
* ``pickle`` round-trips (instances hold only data: tensors, arrays, numbers, strings).
* a result that is a table (:class:`nqf.Staircase`, :class:`nqf.app.Analysis`) also gives it as a
  pandas DataFrame, ``obj.to_frame()``; pandas is optional (the ``frames`` extra, :func:`require_pandas`).

The JSON conventions are those of ``results.json`` (:mod:`nqf.app._report._schema`): a NaN or
±inf float is ``null``, arrays and tensors are nested lists, tuples are lists, mapping keys
are strings.  Units and conventions of the quantities are those of docs/theory.md.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

import numpy as np

from .errors import InvalidTypeError, MissingDependencyError

__all__ = ["Result", "to_jsonable", "compact_repr", "summarize", "clip", "MAX_REPR", "require_pandas", "FRAMES_HINT"]

#: Longest ``repr`` of a result; longer ones are cut (the convention asks for well under 400 characters).
MAX_REPR = 360
_MAX_STR = 48


#: How to install the optional pandas that the ``to_frame()`` tables need (the ``frames`` extra).
FRAMES_HINT = "pip install 'nqf[frames]'"


def require_pandas(what: str):
    """The ``pandas`` module, imported on first use (it is optional: the ``frames`` extra).

    Parameters
    ----------
    what : str
        What needs it (``"Staircase.to_frame()"``), named in the message.

    Raises
    ------
    MissingDependencyError
        pandas is not installed: one line naming ``what`` and :data:`FRAMES_HINT`.
    """
    try:
        import pandas
    except ImportError:
        raise MissingDependencyError(f"`{what}` needs pandas: install it with `{FRAMES_HINT}`") from None
    return pandas


def _torch():
    """torch if it is loaded (a tensor can exist only then); the module itself stays torch-free to import."""
    return sys.modules.get("torch")


def _array_to_lists(a: np.ndarray, where: str):
    kind = a.dtype.kind
    if kind == "b" or kind in "iu":
        return a.tolist()
    if kind == "f":
        obj = a.astype(object)
        obj[~np.isfinite(a)] = None
        return obj.tolist()
    raise InvalidTypeError(
        f"`{where}`: cannot write an array of dtype {a.dtype} as JSON (expected bool, integer or real floating point)"
    )


def to_jsonable(value: Any, where: str = "value") -> Any:
    """``value`` as JSON-ready Python data, with the conventions of ``results.json``.

    Tensors and arrays become nested lists (a NaN/±inf entry becomes ``None``), NumPy
    scalars Python numbers, non-finite floats ``None``, tuples lists, mapping keys strings,
    ``torch.dtype``/``torch.device`` their names; an object with a ``to_dict()`` method
    (every result type) its dictionary, any other dataclass its public fields.

    Raises
    ------
    InvalidTypeError
        For a value with no JSON form (naming where in ``value`` it sits).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.dtype == torch.bfloat16 or t.dtype == torch.float16:
            t = t.to(torch.float32)
        if t.is_complex():
            raise InvalidTypeError(f"`{where}`: cannot write a complex tensor as JSON")
        return _array_to_lists(t.numpy(), where)
    if isinstance(value, np.ndarray):
        return _array_to_lists(value, where)
    if torch is not None and isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool, np.integer)) and k is not None:
                raise InvalidTypeError(
                    f"`{where}`: mapping keys must be strings or numbers for JSON; found {type(k).__name__}"
                )
            out[str(k)] = to_jsonable(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, type):
        return to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_jsonable(getattr(value, f.name), f"{where}.{f.name}")
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    raise InvalidTypeError(
        f"`{where}`: values of type {type(value).__module__}.{type(value).__qualname__} have no "
        "JSON form (expected numbers, strings, lists, dicts, arrays, tensors or results)"
    )


def summarize(value: Any) -> str:
    """A short text for ``value`` in a repr: numbers by value, arrays/tensors as ``dtype[shape]``."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return repr(None if value is None else bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.4g}"
    torch = _torch()
    if isinstance(value, np.ndarray) or (torch is not None and isinstance(value, torch.Tensor)):
        dtype = str(value.dtype).replace("torch.", "")
        if value.ndim == 0:
            return f"{dtype}({summarize(value.item())})"
        return f"{dtype}[{', '.join(str(int(s)) for s in value.shape)}]"
    if isinstance(value, str):
        return repr(value if len(value) <= _MAX_STR else value[: _MAX_STR - 1] + "…")
    if isinstance(value, (list, tuple)):
        if len(value) <= 4 and all(v is None or isinstance(v, (bool, int, float, np.number, str)) for v in value):
            inner = ", ".join(summarize(v) for v in value)
            return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
        return f"{type(value).__name__}[{len(value)}]"
    if isinstance(value, dict):
        return f"dict[{len(value)}]"
    return type(value).__name__


def compact_repr(obj: Any, fields: list[str] | tuple[str, ...] | None = None) -> str:
    """``Type(name=summary, …)`` over ``fields`` (default: the dataclass fields shown in repr, not private).

    Values are shown by :func:`summarize`; the text is cut at :data:`MAX_REPR` characters.
    """
    if fields is None:
        fields = [f.name for f in dataclasses.fields(obj) if f.repr and not f.name.startswith("_")]
    return clip(f"{type(obj).__name__}({', '.join(f'{n}={summarize(getattr(obj, n))}' for n in fields)})")


def clip(text: str) -> str:
    """``text`` (a repr ending in ``)``) cut to at most :data:`MAX_REPR` characters."""
    return text if len(text) <= MAX_REPR else text[: MAX_REPR - 2] + "…)"


class Result:
    """Base of nqf's result dataclasses: compact :meth:`__repr__` and JSON-ready :meth:`to_dict`.

    Subclasses are declared ``@dataclass(frozen=True, repr=False)`` (or define their own
    ``__repr__`` with the key numbers) and override :meth:`to_dict` where they report
    something other than all their public fields.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return compact_repr(self)

    def to_dict(self) -> dict:
        """The public fields (not starting with ``_``), JSON-ready (see :func:`to_jsonable`)."""
        fields = dataclasses.fields(self)  # type: ignore[arg-type]  # subclasses are dataclasses
        return {f.name: to_jsonable(getattr(self, f.name), f.name) for f in fields if not f.name.startswith("_")}
