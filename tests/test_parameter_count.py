"""At most 13 parameters per public function of ``nqf.dynamics`` (issue 36, item 2: option objects, not loose
keywords).  ``seeded_nqf`` takes :class:`~nqf.dynamics.Seeding` and :class:`~nqf.dynamics.Save`; the functions
still over the cap are listed with their count today, so that none grows and each is struck off when converted
(its loose optimiser and save keywords are the aliases of the ``Optimizer`` and ``Save`` objects it also takes).
Planted: a function of 14 parameters is found."""

from __future__ import annotations

import inspect

import nqf.dynamics

CAP = 13
#: Not yet converted (issue 36 item 2), with their parameter count: the count may fall, never rise.
OVER_CAP = {"simulate": 22, "train_network": 21, "integrate_factor": 14}


def over_cap(module, cap: int = CAP) -> dict[str, int]:
    """``{name: number of parameters}`` of the public functions of ``module`` with more than ``cap``."""
    out = {}
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj) and (n := len(inspect.signature(obj).parameters)) > cap:
            out[name] = n
    return out


def test_no_public_function_of_dynamics_takes_more_than_13_parameters():
    found = over_cap(nqf.dynamics)
    assert set(found) <= set(OVER_CAP), f"new functions over {CAP} parameters: {set(found) - set(OVER_CAP)}"
    grown = {k: (v, OVER_CAP[k]) for k, v in found.items() if v > OVER_CAP[k]}
    assert not grown, f"grew (now, listed): {grown}"
    assert len(inspect.signature(nqf.dynamics.seeded_nqf).parameters) <= CAP


def test_planted_function_with_fourteen_parameters_is_found():
    import types

    def fourteen(a, b, c, d, e, f, g, h, i, j, k, m, n, o):
        return a

    planted = types.ModuleType("planted")
    planted.fourteen = fourteen  # type: ignore[attr-defined]
    planted.__all__ = ["fourteen"]  # type: ignore[attr-defined]
    assert over_cap(planted) == {"fourteen": 14}
