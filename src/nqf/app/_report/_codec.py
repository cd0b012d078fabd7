"""Safe (pickle-free) storage of checkpointed values: one JSON tree plus named arrays in an ``.npz``.

A checkpoint file ``checkpoints/KEY.ckpt.npz`` is a NumPy zip archive, read
with ``np.load(..., allow_pickle=False)``; it holds

* ``__nqf__``: the UTF-8 bytes (a ``uint8`` array) of a JSON document: the
  header (format, key, run id, config hash, resolved config, seed, nqf version)
  and the value as a JSON tree;
* ``a0``, ``a1``, …: the numeric arrays and tensors the tree refers to.

The tree supports ``None``, ``bool``, ``int``, ``float`` (NaN/±inf included,
bit-exact), ``str``, lists, tuples, dicts (any of these as keys), NumPy
arrays and scalars of numeric dtype, torch tensors, ``torch.dtype``/``torch.device``,
SciPy sparse matrices, and instances of a fixed allow-list of nqf's own result classes
(:data:`ALLOWED_TYPES`: trajectories, validity reports, Lotka–Volterra systems and
solutions).  An instance is stored as its attribute dictionary and restored by
setting those attributes on a bare instance — no constructor, ``__reduce__`` or
other code named by the file runs.  Third-party classes (SciPy's private ODE
interpolants, say) are never on the list: what a checkpoint holds is arrays, so a
new release of a dependency cannot change what ``--resume`` reads; an experiment
stores what it needs of such an object as arrays (e.g. the Lotka–Volterra
solution without its dense output, and the crossing times refined on it).
Anything else is refused when saving (:class:`CheckpointError`, naming the type),
and a file naming a type outside the allow-list is refused when loading: loading
a checkpoint can never execute code.
"""

from __future__ import annotations

import importlib
import io
import json
import math
import zipfile
from typing import Any

import numpy as np

from ...errors import NQFError

__all__ = ["CheckpointError", "CHECKPOINT_FORMAT", "ALLOWED_TYPES", "encode", "decode", "dumps", "loads", "read_header"]

CHECKPOINT_FORMAT = "nqf.checkpoint/1"
_HEADER = "__nqf__"

#: tag -> (module, class name), the nqf class looked up by name in that module.  Only these classes are
#: ever instantiated by :func:`decode`; the tags, not the classes' own modules, are what files record.
ALLOWED_TYPES: dict[str, tuple[str, str]] = {
    "Trajectory": ("nqf.dynamics", "Trajectory"),
    "ValidityReport": ("nqf.curves", "ValidityReport"),
    "ValiditySweep": ("nqf.curves", "ValiditySweep"),
    "LVSolution": ("nqf.reductions.lv", "LVSolution"),
    "LotkaVolterra": ("nqf.reductions.lv", "LotkaVolterra"),
    "Plateaus": ("nqf.reductions.lv", "Plateaus"),
    "LimitResult": ("nqf.reductions.lv", "LimitResult"),
    "LimitEvent": ("nqf.reductions.lv", "LimitEvent"),
}
_CLASSES: dict[str, type | None] = {}
_NUMERIC_KINDS = "biufc"
_SPARSE_FORMATS = ("csr", "csc", "coo")


class CheckpointError(NQFError, ValueError):
    """A value cannot be stored safely, or a checkpoint file is malformed, foreign or does not match the run."""


# --------------------------------------------------------------------------- encoding
def encode(value: Any, arrays: list, where: str = "value"):
    """JSON tree of ``value``; arrays are appended to ``arrays`` and referred to by index."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and type(value) is int:
        return value
    if type(value) is float:
        if math.isfinite(value):
            return value
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, np.generic):
        if value.dtype.kind not in _NUMERIC_KINDS:
            raise CheckpointError(f"cannot store {where}: NumPy scalar of dtype {value.dtype}")
        return {"$npscalar": _put(np.asarray(value), arrays)}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMERIC_KINDS:
            raise CheckpointError(f"cannot store {where}: NumPy array of dtype {value.dtype} (numeric only)")
        return {"$ndarray": _put(value, arrays)}
    torch = _torch()
    if torch is not None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu()
            name = str(t.dtype).replace("torch.", "")
            if t.dtype == torch.bfloat16:
                t = t.to(torch.float32)
            if (
                t.is_complex()
                or t.dtype.is_floating_point
                or t.dtype in (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
            ):
                return {"$tensor": _put(t.numpy(), arrays), "dtype": name}
            raise CheckpointError(f"cannot store {where}: tensor of dtype {t.dtype}")
        if isinstance(value, torch.dtype):
            return {"$torch_dtype": str(value).replace("torch.", "")}
        if isinstance(value, torch.device):
            return {"$torch_device": str(value)}
    if isinstance(value, (list, tuple)):
        items = [encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if type(value) is list else {"$tuple": items}
    if isinstance(value, dict) and type(value) is dict:
        return {
            "$dict": [
                [encode(k, arrays, f"{where} key"), encode(v, arrays, f"{where}[{k!r}]")] for k, v in value.items()
            ]
        }
    sp = _sparse()
    if sp is not None and sp.issparse(value):
        mat: Any = value  # a scipy sparse array or matrix (the isinstance checks above do not exclude it)
        fmt = mat.format if mat.format in _SPARSE_FORMATS else "csr"
        m = mat.asformat(fmt)
        if fmt == "coo":
            parts = {"data": m.data, "row": m.row, "col": m.col}
        else:
            parts = {"data": m.data, "indices": m.indices, "indptr": m.indptr}
        return {
            "$sparse": fmt,
            "shape": list(m.shape),
            "parts": {k: _put(np.asarray(v), arrays) for k, v in parts.items()},
        }
    tag = _tag_of(type(value))
    if tag is None:
        key = (type(value).__module__, type(value).__qualname__)
        raise CheckpointError(
            f"cannot store {where}: values of type {key[0]}.{key[1]} are not checkpointable "
            f"(allowed: numbers, strings, lists, dicts, arrays, tensors and "
            f"{', '.join(sorted(ALLOWED_TYPES))}); checkpoint the arrays it holds instead"
        )
    state = getattr(value, "__dict__", None)
    if state is None:
        raise CheckpointError(f"cannot store {where}: {tag} has no attribute dictionary")
    return {"$obj": tag, "state": {k: encode(v, arrays, f"{where}.{k}") for k, v in state.items()}}


def _class(tag: str) -> type | None:
    """The allowed class of ``tag`` (imported from its fixed module), or None where it cannot be imported."""
    if tag not in _CLASSES:
        mod, name = ALLOWED_TYPES[tag]
        try:
            cls = getattr(importlib.import_module(mod), name)
        except (ImportError, AttributeError):
            cls = None
        _CLASSES[tag] = cls if isinstance(cls, type) else None
    return _CLASSES[tag]


def _tag_of(cls: type) -> str | None:
    for tag in ALLOWED_TYPES:
        if _class(tag) is cls:
            return tag
    return None


def _put(a: np.ndarray, arrays: list) -> int:
    arrays.append(np.asarray(a))
    return len(arrays) - 1


# --------------------------------------------------------------------------- decoding
def decode(tree, arrays) -> Any:
    """Inverse of :func:`encode`; ``arrays`` maps ``"a{i}"`` to arrays.  Refuses anything unexpected."""
    if tree is None or isinstance(tree, (bool, str, int, float)):
        return tree
    if isinstance(tree, list):
        return [decode(v, arrays) for v in tree]
    if not isinstance(tree, dict) or len(tree) == 0:
        raise CheckpointError(f"malformed checkpoint tree node {type(tree).__name__}")
    if "$float" in tree:
        return float({"nan": "nan", "inf": "inf", "-inf": "-inf"}[_str(tree["$float"])])
    if "$tuple" in tree:
        return tuple(decode(v, arrays) for v in _list(tree["$tuple"]))
    if "$dict" in tree:
        out = {}
        for pair in _list(tree["$dict"]):
            if not isinstance(pair, list) or len(pair) != 2:
                raise CheckpointError("malformed checkpoint dict entry")
            k = decode(pair[0], arrays)
            if isinstance(k, (list, dict)):
                raise CheckpointError("malformed checkpoint dict key")
            out[k] = decode(pair[1], arrays)
        return out
    if "$ndarray" in tree:
        return _get(tree["$ndarray"], arrays)
    if "$npscalar" in tree:
        a = _get(tree["$npscalar"], arrays)
        if a.shape != ():
            raise CheckpointError("malformed checkpoint scalar")
        return a[()]
    if "$tensor" in tree:
        import torch

        a = _get(tree["$tensor"], arrays)
        name = _str(tree.get("dtype"))
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise CheckpointError(f"unknown tensor dtype {name!r} in checkpoint")
        t = torch.from_numpy(np.array(a, copy=True))
        return t.to(dtype)
    if "$torch_dtype" in tree:
        import torch

        dtype = getattr(torch, _str(tree["$torch_dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise CheckpointError(f"unknown torch dtype {tree['$torch_dtype']!r} in checkpoint")
        return dtype
    if "$torch_device" in tree:
        import torch

        try:
            return torch.device(_str(tree["$torch_device"]))
        except RuntimeError:
            raise CheckpointError(f"bad device {tree['$torch_device']!r} in checkpoint") from None
    if "$sparse" in tree:
        import scipy.sparse as sp

        fmt = _str(tree["$sparse"])
        if fmt not in _SPARSE_FORMATS:
            raise CheckpointError(f"unknown sparse format {fmt!r} in checkpoint")
        shape = tuple(int(s) for s in _list(tree["shape"]))
        parts = {k: _get(v, arrays) for k, v in tree["parts"].items()}
        if fmt == "coo":
            return sp.coo_matrix((parts["data"], (parts["row"], parts["col"])), shape=shape)
        cls = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
        return cls((parts["data"], parts["indices"], parts["indptr"]), shape=shape)
    if "$obj" in tree:
        tag = _str(tree["$obj"])
        if tag not in ALLOWED_TYPES:
            raise CheckpointError(f"checkpoint names type {tag!r}, which is not on the allow-list; refusing it")
        cls = _class(tag)
        if cls is None:
            raise CheckpointError(f"checkpoint type {tag!r} is not available in this installation")
        state = tree.get("state")
        if not isinstance(state, dict):
            raise CheckpointError("malformed checkpoint object")
        obj = object.__new__(cls)
        obj.__dict__.update({_str(k): decode(v, arrays) for k, v in state.items()})
        return obj
    raise CheckpointError(f"unknown checkpoint tree node with keys {sorted(tree)[:3]}")


def _str(v) -> str:
    if not isinstance(v, str):
        raise CheckpointError("malformed checkpoint (expected a string)")
    return v


def _list(v) -> list:
    if not isinstance(v, list):
        raise CheckpointError("malformed checkpoint (expected a list)")
    return v


def _get(i, arrays) -> np.ndarray:
    if not isinstance(i, int) or isinstance(i, bool) or f"a{i}" not in arrays:
        raise CheckpointError(f"checkpoint refers to a missing array {i!r}")
    return arrays[f"a{i}"]


# --------------------------------------------------------------------------- files
def dumps(value: Any, header: dict) -> bytes:
    """The bytes of a checkpoint file holding ``value`` with ``header`` (a JSON-able dict)."""
    arrays: list = []
    tree = encode(value, arrays)
    doc = dict(header, format=CHECKPOINT_FORMAT, value=tree)
    blob = json.dumps(doc, allow_nan=False, separators=(",", ":")).encode("utf-8")
    buf = io.BytesIO()
    np.savez(buf, **{_HEADER: np.frombuffer(blob, dtype=np.uint8)}, **{f"a{i}": a for i, a in enumerate(arrays)})
    return buf.getvalue()


def _open(data: bytes, source: str):
    try:
        z = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise CheckpointError(f"{source} is not a readable checkpoint ({exc})") from None
    if not hasattr(z, "files"):
        raise CheckpointError(f"{source} is not a checkpoint archive")
    if _HEADER not in z.files:
        raise CheckpointError(f"{source} has no nqf header; not an nqf checkpoint")
    try:
        raw = z[_HEADER]
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise CheckpointError(f"{source}: malformed header")
        doc = json.loads(raw.tobytes().decode("utf-8"))
    except CheckpointError:
        raise
    except (ValueError, UnicodeDecodeError, zipfile.BadZipFile, OSError, EOFError, RecursionError) as exc:
        raise CheckpointError(f"{source}: unreadable header ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else None
        raise CheckpointError(f"{source}: checkpoint format {found!r} is not {CHECKPOINT_FORMAT!r}")
    return z, doc


def read_header(data: bytes, source: str = "checkpoint") -> dict:
    """The header of a checkpoint (everything but the value)."""
    z, doc = _open(data, source)
    z.close()
    return {k: v for k, v in doc.items() if k != "value"}


def loads(data: bytes, source: str = "checkpoint") -> tuple[dict, Any]:
    """``(header, value)`` from the bytes of a checkpoint file (never unpickles)."""
    z, doc = _open(data, source)
    try:
        arrays = {}
        for name in z.files:
            if name == _HEADER:
                continue
            try:
                arrays[name] = z[name]
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
                raise CheckpointError(f"{source}: array {name!r} is not readable without pickle ({exc})") from None
        value = decode(doc.get("value"), arrays)
    except CheckpointError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{source}: malformed checkpoint ({type(exc).__name__}: {exc})") from None
    finally:
        z.close()
    return {k: v for k, v in doc.items() if k != "value"}, value


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    return torch


def _sparse():
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover
        return None
    return sp
