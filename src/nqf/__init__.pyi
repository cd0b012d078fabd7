"""The names of ``nqf``: what type checkers see and what is loaded on first use (lazy_loader)."""

__version__: str

from . import (
    app as app,
    curves as curves,
    dynamics as dynamics,
    errors as errors,
    modules as modules,
    networks as networks,
    reductions as reductions,
    structure as structure,
)
from .app import (
    analyze as analyze,
    forecast as forecast,
    watch as watch,
)
from .dynamics import (
    Trajectory as Trajectory,
    gradient_flow as gradient_flow,
    simulate as simulate,
    train_network as train_network,
)
from .reductions import (
    Staircase as Staircase,
    predict as predict,
)
from .reductions.svd_modes import (
    two_layer_modes as two_layer_modes,
)
