"""The names of ``nqf.app._data``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._datasets import (
    BUILTIN as BUILTIN,
    MAX_CLASSES as MAX_CLASSES,
    MAX_FILE_BYTES as MAX_FILE_BYTES,
    MAX_INFLATED_BYTES as MAX_INFLATED_BYTES,
    Dataset as Dataset,
    check_regular_file as check_regular_file,
    load_dataset as load_dataset,
    prepare as prepare,
)
from ._logs import (
    LOSS_KEYS as LOSS_KEYS,
    STEP_COLUMNS as STEP_COLUMNS,
    LossLog as LossLog,
    read_loss_log as read_loss_log,
)
