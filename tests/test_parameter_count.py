"""At most 13 parameters per public function of ``nqf.dynamics`` (issue 36, item 2: option objects, not loose
keywords).  ``simulate`` and ``train_network`` take an :class:`~nqf.dynamics.Optimizer` and a
:class:`~nqf.dynamics.Save`, ``seeded_nqf`` a :class:`~nqf.dynamics.Seeding` and a ``Save``, ``integrate_factor``
its ``solve_ivp`` options as keywords it checks by name.  No public run function of ``nqf.dynamics`` keeps an alias
keyword of an ``Optimizer`` or a ``Save`` setting beside the object.  Planted: a function of 14 parameters is
found, and so is an alias keyword."""

from __future__ import annotations

import inspect

import nqf.dynamics

CAP = 13
#: The settings a ``Save`` owns, under the names of their old loose keywords: no run takes them.
SAVE_ALIASES = {"save_every", "save_M", "save_W"}
#: The settings an ``Optimizer`` owns: the runs that take one take none of them.  (``lr`` and ``weight_decay`` stay
#: parameters of the GD-only ``seeded_nqf`` and ``active_levels``, of the gradient flow and of ``simulate_batched``,
#: whose step sizes and decays are its batch axis.)
OPTIMIZER_ALIASES = {"lr", "momentum", "weight_decay", "batch_size", "adam_betas", "adam_eps"}
OPTIMIZER_RUNS = ("simulate", "train_network")
RUNS = ("simulate", "train_network", "seeded_nqf", "gradient_flow", "simulate_batched", "active_levels")


def over_cap(module, cap: int = CAP) -> dict[str, int]:
    """``{name: number of parameters}`` of the public functions of ``module`` with more than ``cap``."""
    out = {}
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj) and (n := len(inspect.signature(obj).parameters)) > cap:
            out[name] = n
    return out


def aliases(module, keys, names=None) -> dict[str, set[str]]:
    """``{name: parameters in keys}`` of the public functions of ``module`` (``names``: only these)."""
    out = {}
    for name in names or module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj) and (found := set(inspect.signature(obj).parameters) & keys):
            out[name] = found
    return out


def test_no_public_function_of_dynamics_takes_more_than_13_parameters():
    assert over_cap(nqf.dynamics) == {}


def test_runs_keep_no_alias_keyword_beside_their_objects():
    assert aliases(nqf.dynamics, SAVE_ALIASES, RUNS) == {}
    assert aliases(nqf.dynamics, OPTIMIZER_ALIASES, OPTIMIZER_RUNS) == {}


def test_planted_alias_keyword_is_found():
    import types

    def run(op, y, *, optimizer, save_every=None):
        return op

    planted = types.ModuleType("planted")
    planted.run = run  # type: ignore[attr-defined]
    planted.__all__ = ["run"]  # type: ignore[attr-defined]
    assert aliases(planted, SAVE_ALIASES) == {"run": {"save_every"}}


def test_planted_function_with_fourteen_parameters_is_found():
    import types

    def fourteen(a, b, c, d, e, f, g, h, i, j, k, m, n, o):
        return a

    planted = types.ModuleType("planted")
    planted.fourteen = fourteen  # type: ignore[attr-defined]
    planted.__all__ = ["fourteen"]  # type: ignore[attr-defined]
    assert over_cap(planted) == {"fourteen": 14}


def test_integrate_factor_refuses_a_solver_keyword_it_does_not_pass():
    """``integrate_factor``'s ``solve_ivp`` options are checked by name: scipy would only warn of ``first_stp``."""
    import pytest
    import torch

    from nqf.dynamics import integrate_factor
    from nqf.errors import InvalidParameterError
    from nqf.structure import mlp

    X = torch.randn(8, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    op, y = mlp(X, "tanh"), torch.ones(8, 1, dtype=torch.float64)
    L0 = 1e-3 * torch.eye(op.p, dtype=torch.float64)
    with pytest.raises(InvalidParameterError, match="'first_stp'"):
        integrate_factor(op, y, L0, (0.0, 1.0), rtol=1e-8, atol=1e-12, first_stp=0.1)
    res = integrate_factor(op, y, L0, (0.0, 1.0), rtol=1e-8, atol=1e-12, max_step=0.5, t_eval=[0.5, 1.0])
    assert res.success and res.t.tolist() == [0.5, 1.0]
