"""The names of ``nqf.reductions.dormant``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._agf import (
    agf_staircase as agf_staircase,
)
from ._chain import (
    ChainTerm as ChainTerm,
    chain_staircase as chain_staircase,
    chain_term as chain_term,
)
from ._flow import (
    active_curvature as active_curvature,
    dormant_staircase as dormant_staircase,
)
from ._terms import (
    HomogeneousTerm as HomogeneousTerm,
    unit_term as unit_term,
)
from ._utility import (
    LeadingOrder as LeadingOrder,
    aligned_escape_time as aligned_escape_time,
    leading_order as leading_order,
)
