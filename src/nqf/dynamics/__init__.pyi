"""The names of ``nqf.dynamics``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._batched import (
    simulate_batched as simulate_batched,
)
from ._cost_step import (
    active_levels as active_levels,
)
from ._flow import (
    gradient_flow as gradient_flow,
    integrate_factor as integrate_factor,
)
from ._initial import (
    initial_state as initial_state,
    initial_weights as initial_weights,
)
from ._loss import (
    MSE as MSE,
    CrossEntropy as CrossEntropy,
    Logistic as Logistic,
    Loss as Loss,
    as_loss as as_loss,
)
from ._network import (
    train_network as train_network,
)
from ._optim import (
    GD as GD,
    SGD as SGD,
    Adam as Adam,
    Optimizer as Optimizer,
    as_optimizer as as_optimizer,
)
from ._save import (
    Save as Save,
)
from ._seeded import (
    Seeding as Seeding,
    seeded_nqf as seeded_nqf,
)
from ._simulate import (
    simulate as simulate,
)
from ._trajectory import (
    Trajectory as Trajectory,
)
