"""The names of ``nqf.reductions.svd_modes``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._modes import (
    TwoLayerModes as TwoLayerModes,
    two_layer_modes as two_layer_modes,
)
from ._whitening import (
    NotWhitenedError as NotWhitenedError,
    NotWhitenedWarning as NotWhitenedWarning,
    whiten as whiten,
)
