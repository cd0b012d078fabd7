"""Loss curves from the logs a training run already writes: a CSV of (step, loss), TensorBoard event files and a
Hugging Face ``trainer_state.json`` (docs/watch.md).

:func:`read_loss_log` returns a :class:`LossLog` (steps increasing, losses finite): points are sorted by step and,
where a step repeats (a resumed run), the last value written wins.  A file it cannot read gives one
:class:`nqf.errors.DataError` naming the file and what was expected; nothing in a log is executed.

* **CSV**: a header row; the step column is the first of :data:`STEP_COLUMNS` present (or ``step=``), the loss
  column the first of :data:`LOSS_KEYS` (or ``key=``);
* **trainer_state.json** (``transformers.Trainer``): the entries of ``log_history`` that hold the key (``loss``:
  the training loss, averaged over the ``logging_steps`` before each logged step; the log's ``step``);
* **TensorBoard** (an ``events.out.tfevents.*`` file, or a folder holding them): the scalar tag ``key``, or the
  only tag among :data:`LOSS_KEYS`; read with ``tensorboard``'s own reader (the ``logs`` extra).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import DataError, MissingDependencyError
from ...results import Result, clip, summarize
from ._files import check_regular_file

__all__ = ["LossLog", "read_loss_log", "STEP_COLUMNS", "LOSS_KEYS", "MAX_LOG_BYTES"]

#: Step columns of a CSV, in order of preference.
STEP_COLUMNS = ("step", "global_step", "iteration", "iter", "steps")
#: Loss columns or tags, in order of preference.
LOSS_KEYS = ("loss", "train_loss", "training_loss", "train/loss", "loss/train", "Loss/train", "train_loss_step")
#: Largest log read (a loss curve is small; anything larger is not one).
MAX_LOG_BYTES = 512 * 2**20


@dataclass(frozen=True, repr=False)
class LossLog(Result):
    """A loss curve read from a log: ``steps`` (increasing) and ``loss`` (finite), the ``path``, its ``format``
    (``"csv"``, ``"trainer_state"``, ``"tensorboard"``) and the column or tag read (``key``)."""

    steps: np.ndarray = field(repr=False)
    loss: np.ndarray = field(repr=False)
    path: str
    format: str
    key: str

    def __repr__(self) -> str:
        return clip(
            f"LossLog(path={summarize(self.path)}, format={self.format!r}, key={self.key!r}, points={self.steps.size})"
        )

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "format": self.format,
            "key": self.key,
            "steps": self.steps.tolist(),
            "loss": self.loss.tolist(),
        }


def read_loss_log(path, *, key: str | None = None, step: str | None = None) -> LossLog:
    """Read a loss curve from ``path`` (module docstring for the formats).

    Parameters
    ----------
    path : str or Path
        A ``.csv``, a ``trainer_state.json`` (any ``.json`` with ``log_history``), an ``events.out.tfevents.*`` file
        or a folder of them.
    key : str, optional
        The loss column, ``log_history`` key or scalar tag (default: the first of :data:`LOSS_KEYS` found).
    step : str, optional
        The CSV's step column (default: the first of :data:`STEP_COLUMNS` found).

    Raises
    ------
    DataError
        No such file, a format it does not know, no loss (naming what was found), fewer than two finite points.
    MissingDependencyError
        A TensorBoard log without the ``tensorboard`` package.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"`log`: no such file or folder: {p}")
    if p.name.startswith("events.out.tfevents"):
        check_regular_file(p, "log", MAX_LOG_BYTES)
    if p.is_dir() or p.name.startswith("events.out.tfevents"):
        steps, loss, k = _tensorboard(p, key)
        return _finished(steps, loss, p, "tensorboard", k)
    check_regular_file(p, "log", MAX_LOG_BYTES)  # a FIFO or a device is refused unopened; so is a huge file
    if p.suffix.lower() == ".csv":
        steps, loss, k = _csv(p, key, step)
        return _finished(steps, loss, p, "csv", k)
    if p.suffix.lower() == ".json":
        steps, loss, k = _trainer_state(p, key)
        return _finished(steps, loss, p, "trainer_state", k)
    raise DataError(
        f"`log`: {p.name} is not a log nqf reads: a .csv of (step, loss), a trainer_state.json, or TensorBoard "
        "event files (events.out.tfevents.*, or their folder)"
    )


def _number(text, where: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise DataError(f"`log`: {where} is not a number: {str(text)[:40]!r}") from None


def _csv(p: Path, key, step) -> tuple[list, list, str]:
    with p.open(newline="", encoding="utf-8", errors="replace") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise DataError(f"`log`: {p} is empty; expected a header row with a step and a loss column")
    head = [h.strip() for h in rows[0]]
    s_col = _column(head, step, STEP_COLUMNS, "step", p)
    l_col = _column(head, key, LOSS_KEYS, "loss", p)
    steps, loss = [], []
    for i, row in enumerate(rows[1:], 2):
        if len(row) <= max(s_col, l_col) or not row[l_col].strip():
            continue  # a row without this column's value (another metric logged on its own row)
        steps.append(_number(row[s_col], f"row {i}, column {head[s_col]!r}"))
        loss.append(_number(row[l_col], f"row {i}, column {head[l_col]!r}"))
    return steps, loss, head[l_col]


def _column(head: list, wanted, choices: tuple, what: str, p: Path) -> int:
    names = [wanted] if wanted else list(choices)
    for name in names:
        if name in head:
            return head.index(name)
    raise DataError(
        f"`log`: {p.name} has no {what} column ({', '.join(repr(n) for n in names)}); found columns "
        f"{', '.join(repr(h) for h in head[:12])}"
        + (f"; name it with {what if what == 'step' else 'key'}=" if not wanted else "")
    )


def _trainer_state(p: Path, key) -> tuple[list, list, str]:
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"`log`: {p.name} is not valid JSON ({exc}); expected a trainer_state.json") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise DataError(f"`log`: {p.name} has no 'log_history' list; expected a Hugging Face trainer_state.json")
    k = key or "loss"
    pts = [(e.get("step"), e[k]) for e in history if isinstance(e, dict) and k in e]
    if not pts:
        found = sorted({x for e in history if isinstance(e, dict) for x in e})
        raise DataError(f"`log`: no {k!r} in {p.name}'s log_history; found keys {', '.join(found[:12])}")
    steps = [_number(s, f"a 'step' of {p.name}") for s, _ in pts]
    return steps, [_number(v, f"a {k!r} of {p.name}") for _, v in pts], k


def _tensorboard(p: Path, key) -> tuple[list, list, str]:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise MissingDependencyError(
            "`log`: TensorBoard event files need the tensorboard package: pip install 'nqf[logs]'"
        ) from None
    acc = EventAccumulator(str(p), size_guidance={"scalars": 0})
    try:
        acc.Reload()
    except Exception as exc:  # a corrupt or foreign file: tensorboard's reader raises its own types
        raise DataError(f"`log`: {p} is not a readable TensorBoard log ({type(exc).__name__}: {exc})") from None
    tags = list(acc.Tags().get("scalars", []))
    if key is not None:
        chosen = key if key in tags else None
    else:
        hits = [t for t in LOSS_KEYS if t in tags]
        chosen = hits[0] if hits else None
    if chosen is None:
        raise DataError(
            f"`log`: no scalar {'tag ' + repr(key) if key else 'loss tag'} in {p}; found tags "
            f"{', '.join(repr(t) for t in tags[:12]) or 'none'}" + ("" if key else "; name it with key=")
        )
    events = acc.Scalars(chosen)
    return [float(e.step) for e in events], [float(e.value) for e in events], chosen


def _finished(steps: list, loss: list, p: Path, fmt: str, key: str) -> LossLog:
    s, L = np.asarray(steps, float), np.asarray(loss, float)
    ok = np.isfinite(s) & np.isfinite(L)
    s, L = s[ok], L[ok]
    order = np.argsort(s, kind="stable")
    s, L = s[order], L[order]
    last = np.concatenate([s[1:] != s[:-1], [True]]) if s.size else np.zeros(0, bool)  # a repeated step: the last
    s, L = s[last], L[last]
    if s.size < 2:
        raise DataError(f"`log`: {p.name} holds {s.size} finite point(s) of {key!r}; a curve needs at least two")
    if not math.isfinite(float(L.max())):
        raise DataError(f"`log`: {p.name}: the losses are not finite")
    return LossLog(s, L, str(p), fmt, key)
