"""The names of ``nqf.reductions.saddles``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._clock import (
    composite_loss as composite_loss,
    heteroclinic_chain as heteroclinic_chain,
)
from ._cost import (
    clock_cost as clock_cost,
    search_cost as search_cost,
)
from ._results import (
    Saddle as Saddle,
    SaddleSequence as SaddleSequence,
)
from ._search import (
    saddle_sequence as saddle_sequence,
)
