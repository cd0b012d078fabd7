"""The names of ``nqf.modules``: what type checkers see and what is loaded on first use (lazy_loader)."""

from ._assumptions import (
    check_permutation_symmetry as check_permutation_symmetry,
    check_truncation_order as check_truncation_order,
)
from ._attention_layouts import (
    attention_units as attention_units,
)
from ._autodiff import (
    from_module as from_module,
    is_non_smooth_layer as is_non_smooth_layer,
)
from ._conv_layouts import (
    conv_units as conv_units,
)
from ._discover import (
    ELEMENTWISE_MODULES as ELEMENTWISE_MODULES,
    UnitCandidate as UnitCandidate,
    find_units as find_units,
    refused_units as refused_units,
    select_units as select_units,
)
from ._experts import (
    ExpertStack as ExpertStack,
    stack_experts as stack_experts,
)
from ._higher import (
    higher_order_terms as higher_order_terms,
)
from ._kinks import (
    kink_distances as kink_distances,
    readout_kinks as readout_kinks,
)
from ._layouts import (
    mlp_units as mlp_units,
)
from ._narrowed import (
    evaluation_mode as evaluation_mode,
)
from ._units import (
    UnitLayout as UnitLayout,
    UnitScatter as UnitScatter,
    UnitSlice as UnitSlice,
)
