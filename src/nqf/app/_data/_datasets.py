"""Loading and preparing data sets (see :mod:`nqf.app._data` for the conventions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..._validation import not_one_of
from ...errors import DataError, NonFiniteError, ShapeError
from ._files import BUILTIN, MAX_FILE_BYTES, MAX_INFLATED_BYTES, _read_file, check_regular_file

#: What ``task`` may be: inferred from the targets, or given.
TASKS = ("auto", "classification", "regression")

__all__ = [
    "Dataset",
    "load_dataset",
    "prepare",
    "check_regular_file",
    "BUILTIN",
    "MAX_CLASSES",
    "MAX_FILE_BYTES",
    "MAX_INFLATED_BYTES",
]


#: Integer targets with at most this many distinct values are read as class labels.
MAX_CLASSES = 100


@dataclass(frozen=True)
class Dataset:
    """A prepared data set.

    Attributes
    ----------
    name : str
        Bundled name or file path.
    X : numpy.ndarray, shape (N, D) or (N, ...)
        Inputs (float64, standardised unless recorded otherwise); any shape after the sample axis
        (images ``(N, 1, 8, 8)``, sequences ``(N, T, d)``) is kept as given.
    Y : numpy.ndarray, shape (N, C)
        Targets (float64): centred one-hot for classification, centred values for regression.
    task : str
        ``"classification"`` or ``"regression"``.
    preprocessing : dict
        What was done: ``standardize``, ``one_hot``, ``center``, ``n_classes``,
        ``subset`` (JSON-ready).
    classes : tuple
        Class labels in one-hot order (classification), else empty.
    """

    name: str
    X: np.ndarray = field(repr=False)
    Y: np.ndarray = field(repr=False)
    task: str
    preprocessing: dict = field(default_factory=dict, repr=False)
    classes: tuple = field(default=(), repr=False)

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input, ``X.shape[1:]`` (``(D,)`` for a table, ``(1, 8, 8)`` for images)."""
        return tuple(int(d) for d in self.X.shape[1:])

    @property
    def n_features(self) -> int:
        """Entries of one input, ``prod(input_shape)`` (``D`` for a table)."""
        return int(np.prod(self.X.shape[1:], dtype=np.int64))

    @property
    def n_outputs(self) -> int:
        return int(self.Y.shape[1])

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, N={self.n_samples}, "
            + (f"D={self.n_features}" if self.X.ndim == 2 else f"input_shape={self.input_shape}")
            + f", C={self.n_outputs}, "
            f"task={self.task!r}, preprocessing={self.preprocessing})"
        )

    def to_dict(self) -> dict:
        """JSON-ready description (no arrays)."""
        return {
            "name": self.name,
            "n_samples": self.n_samples,
            "n_features": self.n_features,
            "input_shape": list(self.input_shape),
            "n_outputs": self.n_outputs,
            "task": self.task,
            "preprocessing": dict(self.preprocessing),
            "classes": [c if isinstance(c, (int, float, str)) else str(c) for c in self.classes],
        }


# --------------------------------------------------------------------------- raw sources
def _builtin(name: str):
    import sklearn.datasets as skd

    loader, task = BUILTIN[name]
    bunch = getattr(skd, loader)()  # reads the copy inside the scikit-learn package; no download
    return np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target), task


# --------------------------------------------------------------------------- preparation
def _is_labels(y: np.ndarray) -> bool:
    """Targets that are names, not numbers (strings, or other non-numeric labels)."""
    return not (np.issubdtype(y.dtype, np.number) or np.issubdtype(y.dtype, np.bool_))


def _infer_task(y: np.ndarray) -> str:
    """The inference rule (documented in :mod:`nqf.app._data`): class names → classification; one column of
    integers (integer dtype, or floats that are all whole numbers) with at most :data:`MAX_CLASSES`
    distinct values → classification; anything else → regression."""
    if _is_labels(y):
        return "classification"
    if y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1):
        v = y.reshape(-1)
        integral = (
            np.issubdtype(v.dtype, np.integer)
            or np.issubdtype(v.dtype, np.bool_)
            or (np.issubdtype(v.dtype, np.floating) and np.all(np.isfinite(v)) and np.all(v == np.round(v)))
        )
        if integral and len(np.unique(v)) <= MAX_CLASSES:
            return "classification"
    return "regression"


def _task_of(y: np.ndarray, task: str, one_hot: bool) -> tuple[str, str]:
    """``(task, how)``: the task and how it was decided (``"given"`` or the inference rule that applied)."""
    if task not in TASKS:
        raise DataError(str(not_one_of("task", task, TASKS)))  # a data error, in the one wording
    if _is_labels(y) and (task == "regression" or not one_hot):
        first = ", ".join(repr(str(v)) for v in np.unique(y)[:3])
        raise DataError(
            f"`task`: the targets are class names ({first}, …), which need classification with one-hot "
            f"targets; found task={task!r}, one_hot={one_hot}"
        )
    if task != "auto":
        return task, "given"
    task = _infer_task(y)
    if _is_labels(y):
        return task, "inferred: class names"
    if task == "classification":
        return task, f"inferred: integer targets with at most {MAX_CLASSES} distinct values"
    return task, "inferred: not integer class labels"


def _as_float_inputs(X, y, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``X`` as float64 and ``y`` as numbers or ``str`` names; complex values refused (never cast silently)."""
    try:
        if np.iscomplexobj(X) or np.iscomplexobj(y):
            which = "X" if np.iscomplexobj(X) else "Y"
            raise DataError(
                f"`{which}` of {name} must be real; found complex values (pass the real and imaginary parts "
                "as separate features)"
            )
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        if y.dtype == object:  # labels given as Python objects: their names
            y = y.astype(str)
        elif y.dtype.kind == "S":  # byte strings (np.savez of encoded names): decoded as names
            y = np.char.decode(y, "utf-8")
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"`data`: inputs and targets of {name} must be numeric arrays ({exc})") from exc
    return X, y


def _check_inputs(X: np.ndarray, name: str) -> None:
    """Refuse inputs nothing can be learned from or computed with: every input the same for every sample, or
    values so large that sums of their squares overflow float64 (standardising and the structure matrices would
    turn them into zeros or infinities)."""
    Xf = X.reshape(X.shape[0], -1)
    if Xf.shape[0] > 1 and Xf.shape[1] and not np.any(Xf != Xf[:1]):
        raise DataError(
            f"`X` of {name}: every input is the same for every sample ({Xf.shape[1]} constant column(s)); "
            "nothing distinguishes the samples, so there is nothing to learn"
        )
    big = float(np.max(np.abs(Xf))) if Xf.size else 0.0
    limit = float(np.sqrt(np.finfo(np.float64).max / max(Xf.size, 1)))
    if big > limit:
        raise DataError(
            f"`X` of {name}: inputs as large as {big:.3g}; sums of their squares overflow float64 (above "
            f"{limit:.3g}), so standardising and the structure matrices would fail: rescale the inputs"
        )


def _check_learnable(y: np.ndarray, task: str, name: str) -> None:
    """Refuse, before anything runs, targets nothing can be learned from: a single sample, one class only,
    or a regression target that is the same for every sample."""
    if y.shape[0] < 2:
        raise ShapeError(f"`Y` of {name}: at least 2 samples are needed to learn anything; found {y.shape[0]}")
    if task == "classification":
        n = len(np.unique(y.reshape(y.shape[0], -1)[:, 0]))
        if n < 2:
            raise DataError(f"`Y` of {name}: classification needs at least 2 classes; every target is {y.flat[0]!r}")
    elif (np.issubdtype(y.dtype, np.number) or y.dtype == bool) and np.all(y == y[:1]):
        raise DataError(
            f"`Y` of {name}: the target is constant ({y.flat[0]!r} for every sample); after centring there is "
            "nothing to learn"
        )


def prepare(
    X, y, *, task: str = "auto", standardize: bool = True, one_hot: bool = True, center: bool = True, name: str = "data"
) -> Dataset:
    """Validate and preprocess inputs and targets (see :mod:`nqf.app._data`).

    Parameters
    ----------
    X : array_like, shape (N, D) or (N, ...)
        Inputs; any shape after the sample axis is kept (images for a conv model, sequences).
        Standardisation is per entry of one input (every ``X[:, i, j, …]`` over the samples),
        computed on the flattened ``(N, prod(shape))`` view and reshaped back.
    y : array_like, shape (N,) or (N, C)
        Class labels (integers or names) or regression targets.
    task : {"auto", "classification", "regression"}
        ``"auto"``: class names or integer labels with at most :data:`MAX_CLASSES` distinct values are
        classification, anything else regression (recorded as ``preprocessing["task_rule"]``).
    standardize, one_hot, center : bool
        The preprocessing steps.
    name : str

    Returns
    -------
    Dataset

    Raises
    ------
    ShapeError
        ``X`` and ``y`` have different numbers of samples, or no samples.
    NonFiniteError
        NaN or infinite entries (the message gives the first one).
    DataError
        Unknown ``task``, class names with ``task="regression"`` or without one-hot encoding, or a
        one-hot encoding of several target columns.
    """
    X, y = _as_float_inputs(X, y, name)
    if X.ndim < 2 or X.shape[0] == 0:
        raise ShapeError(f"`X` must have shape (N, D) or (N, …) with N ≥ 1; found {X.shape} in {name}")
    if y.ndim not in (1, 2):
        raise ShapeError(f"`Y` must have shape (N,) or (N, C); found {y.shape} in {name}")
    if X.shape[0] != y.shape[0]:
        raise ShapeError(
            f"`X` and `Y` must have the same number of samples; found {X.shape[0]} inputs and {y.shape[0]} targets "
            f"in {name}"
        )
    for nm, a in (("X", X), ("Y", y)):
        if np.issubdtype(a.dtype, np.number) and not np.all(np.isfinite(a)):
            bad = np.argwhere(~np.isfinite(a))[0]
            raise NonFiniteError(
                f"`{nm}` must be finite; found {a[tuple(bad)]} at index {tuple(int(i) for i in bad)} "
                f"in {name} (remove or impute missing values first)"
            )
    _check_inputs(X, name)
    task, how = _task_of(y, task, one_hot)
    _check_learnable(y, task, name)
    rec = {
        "standardize": bool(standardize),
        "one_hot": False,
        "center": bool(center),
        "n_classes": None,
        "task_rule": how,
    }
    classes: tuple = ()
    if task == "classification" and one_hot:
        labels = y.reshape(-1) if y.ndim == 1 or y.shape[1] == 1 else None
        if labels is None:
            raise DataError(f"`Y`: classification with one-hot encoding needs one column of labels; found {y.shape}")
        cls, inv = np.unique(labels, return_inverse=True)
        Y = np.eye(len(cls))[inv]
        classes = tuple(c.item() for c in cls)
        rec.update(one_hot=True, n_classes=len(cls))
    else:
        Y = np.asarray(y, dtype=np.float64)
        Y = Y[:, None] if Y.ndim == 1 else Y
    if center:
        Y = Y - Y.mean(0, keepdims=True)
    if standardize:
        Xf = X.reshape(X.shape[0], -1)
        sd = Xf.std(0)
        Xf = (Xf - Xf.mean(0)) / np.where(sd > 0, sd, 1.0)
        X = Xf.reshape(X.shape)
        rec["constant_columns"] = int((sd == 0).sum())
    return Dataset(
        name=name,
        X=np.ascontiguousarray(X),
        Y=np.ascontiguousarray(Y, dtype=np.float64),
        task=task,
        preprocessing=rec,
        classes=classes,
    )


def _no_target(target: str | None, src: str, what: str) -> None:
    """``target`` names CSV columns: refused (not ignored) for any other source."""
    if target is not None:
        raise DataError(
            f"`target`: --target names the target column(s) of a CSV file; {src!r} is {what}, whose targets are "
            f"its own (Y); found target={target!r}"
        )


def load_dataset(
    source,
    *,
    target: str | None = None,
    task: str = "auto",
    standardize: bool = True,
    one_hot: bool = True,
    center: bool = True,
    subset: int | None = None,
    seed: int = 0,
) -> Dataset:
    """Load a bundled data set or a file and prepare it.

    Parameters
    ----------
    source : str or Path
        A name in :data:`BUILTIN` or a ``.npz``/``.csv``/``.pt`` file.
    target : str, optional
        CSV target columns (names or 0-based indices, comma-separated); refused for any other source.
    task, standardize, one_hot, center
        See :func:`prepare`.
    subset : int, optional
        Keep a random subset of this many samples (drawn with ``seed`` along the
        sample axis 0, before preprocessing; recorded).
    seed : int

    Returns
    -------
    Dataset

    Raises
    ------
    DataError
        An unknown name, a missing or unreadable file, ``target`` given for a source that is not a CSV file.
    ShapeError, NonFiniteError
    """
    src = str(source)
    rule = None
    if src in BUILTIN:
        _no_target(target, src, "a bundled data set")
        X, y, builtin_task = _builtin(src)
        if task == "auto":
            task, rule = builtin_task, "bundled data set"
    else:
        path = Path(src)
        if not path.exists():
            raise DataError(
                f"`data`: {src!r} is neither a bundled data set ({', '.join(BUILTIN)}) nor an existing file"
            )
        X, y, _ = _read_file(path, target)
        if path.suffix.lower() != ".csv":  # after the file itself was found readable: its faults come first
            _no_target(target, src, "not a CSV file")
    if subset is not None and np.asarray(X).shape[:1] == np.asarray(y).shape[:1]:
        n = int(np.asarray(X).shape[0])
        if not 1 <= int(subset) <= n:
            raise DataError(f"`subset` must lie in [1, {n}]; found {subset}")
        keep = np.sort(np.random.default_rng(seed).permutation(n)[: int(subset)])
        X, y = np.asarray(X)[keep], np.asarray(y)[keep]
    ds = prepare(X, y, task=task, standardize=standardize, one_hot=one_hot, center=center, name=src)
    if rule is not None:
        ds.preprocessing["task_rule"] = rule
    if subset is not None:
        ds.preprocessing["subset"] = {"n": int(subset), "seed": int(seed)}
    return ds
