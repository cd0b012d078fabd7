r"""Data sets for ``nqf analyze``: bundled real data and the user's files, prepared the same way.

:func:`load_dataset` takes a bundled name or a file and returns a :class:`Dataset`
(inputs ``X`` of shape ``(N, D)`` or ``(N, …)`` — images, sequences: the shape is kept —,
targets ``Y`` of shape ``(N, C)``, float64),
after the preprocessing the NQF conventions expect (docs/theory.md §0, MSE
``ℓ = ½ ‖f − y‖²``):

* **inputs standardised**: every column (every entry ``X[:, i, j, …]`` for inputs
  of more axes) centred and divided by its standard deviation over the samples
  (constant columns are only centred);
* **classification targets → centred one-hot**: class ``k`` becomes ``e_k``,
  then every column is centred (``Σ_n Y_n = 0``), so the network at ``W = 0``
  (output 0) already predicts the class frequencies' mean and the loss measures
  what is left to learn;
* **regression targets centred** (each column minus its mean; not scaled).

Each step is optional (``standardize``, ``one_hot``, ``center``) and recorded in
:attr:`Dataset.preprocessing`.

Sources
-------
* Bundled (no network access; the copies that ship with scikit-learn):
  ``digits`` (1797 × 64, 10 classes), ``iris`` (150 × 4, 3), ``wine`` (178 × 13, 3),
  ``breast_cancer`` (569 × 30, 2), ``diabetes`` (442 × 10, regression),
  ``linnerud`` (20 × 3, 3 regression targets).
* ``FILE.npz`` with arrays ``X`` and ``Y`` (or ``y``).
* ``FILE.csv`` (header row; ``target`` names the target columns, comma-separated
  names or 0-based indices; the other columns are the inputs and must be numbers).
  A single target column of text holds class names (:attr:`Dataset.classes`).
* ``FILE.pt``: a dict with tensors ``X`` and ``Y`` (or ``y``) or a tuple ``(X, Y)``,
  read with ``torch.load(weights_only=True)`` (no code is executed).

The task is ``"classification"`` when the targets are class names, or one column of
integers (integer dtype, or float values that are all integers) with at most
:data:`MAX_CLASSES` distinct values, else ``"regression"``; pass ``task`` to override
(``task="regression"`` keeps integer targets as numbers).  The rule that decided is
``Dataset.preprocessing["task_rule"]``.

Loss logs (:func:`read_loss_log`, a :class:`LossLog`): a CSV of (step, loss), a Hugging Face
``trainer_state.json`` or TensorBoard event files, for judging a run against its forecast
(``nqf compare --log``, :meth:`nqf.app.Forecast.judge`).

Refused before anything runs (one :class:`nqf.errors.DataError` naming the file):
a path that is not a regular file (a FIFO, ``/dev/zero``, a directory:
:func:`check_regular_file`, never opened), a file above :data:`MAX_FILE_BYTES`,
an ``.npz``/``.pt`` archive whose members would inflate past
:data:`MAX_INFLATED_BYTES`, a file that is not what its extension says, duplicate
CSV column names, ragged rows, complex values, object arrays (pickle is never
used), a single sample, one class only or a constant regression target.  A UTF-8
byte-order mark before a CSV header is ignored; byte-string labels in an
``.npz`` are decoded as class names.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
