"""nqf.predict and nqf.Staircase: one door for the predicted staircase, the same numbers as each reduction.

Each case compares the Staircase with the reduction it came from called directly (the numbers of the
previous entry points, to 1e-12) and, where one exists, with an independent closed form.
"""

import ast
import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import nqf
from helpers import interacting_commuting_modes
from nqf.curves._compare import compare_staircase
from nqf.errors import InvalidParameterError, NQFError, ShapeError
from nqf.reductions import Staircase
from nqf.reductions._timing import staircase as timing_staircase  # the kernel behind Staircase.loss_curve
from nqf.structure import DenseStructure, mlp

F64 = torch.float64
SRC = Path(__file__).parents[1] / "src" / "nqf"


def _commuting_dense(seed=3):
    U, a, y = interacting_commuting_modes(seed)
    A = torch.as_tensor(np.einsum("ij,nj,kj->nik", U, a, U))[:, None]
    return DenseStructure(A), torch.as_tensor(y)[:, None]


def test_commuting_mlp_is_lotka_volterra_with_the_closed_form_limit():
    """A tanh MLP with one input and one output has A(x) = (x/2)[[0, 1], [1, 0]]: commuting, with modes
    q± = (1, ±1)/√2, a± = ±x/2, β± = ±E[xy]/2 and C = (E[x²]/4)[[1, −1], [−1, 1]] (interacting): the +
    mode switches on at t = ln(1/ε)/(4β₊) in the ε → 0 limit, to L₁ = L₀ − β₊²/(2C₊₊)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(50, 1, generator=g, dtype=F64)
    y = 0.8 * X[:, 0] + 0.1 * torch.randn(50, generator=g, dtype=F64)
    op = mlp(X, "tanh")
    eps = 1e-6
    st = nqf.predict(op, y, eps)
    assert isinstance(st, Staircase) and st.method == "lotka-volterra" and st.time_rules == ("ε → 0 limit",)
    beta = float((X[:, 0] * y).mean()) / 2
    C = float((X[:, 0] ** 2).mean()) / 4
    np.testing.assert_allclose(st.times, [math.log(1 / eps) / (4 * beta)], rtol=1e-10)
    L0 = 0.5 * float((y**2).mean())
    np.testing.assert_allclose(st.levels, [L0, L0 - beta**2 / (2 * C)], rtol=1e-10)
    np.testing.assert_allclose(np.abs(st.directions[:, 0]), [2**-0.5, 2**-0.5], rtol=1e-10)
    # the same numbers as the reduction called directly
    lv = nqf.reductions.lv.reduce(op, y, eps * torch.eye(2, dtype=F64))
    pl = lv.plateaus(eps)
    np.testing.assert_allclose(st.times, pl.times.numpy(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(st.levels, pl.losses.numpy(), rtol=1e-12, atol=0)


def test_isolated_modes_have_exact_logistic_times():
    """Diagonal C (orthogonal measurement columns): t_k = ln(z*_k/ε − 1)/ζ_k, the closed form."""
    a = torch.zeros(9, 3, dtype=F64)
    a[0:3, 0], a[3:6, 1], a[6:9, 2] = 2.0, 1.0, 0.5
    y = torch.tensor([3.0, 3, 3, 1, 1, 1, 0.2, 0.2, 0.2], dtype=F64)[:, None]
    eps = 1e-6
    st = nqf.predict(DenseStructure(torch.diag_embed(a)[:, None]), y, eps)
    assert st.time_rules == ("logistic",) * 3
    beta, Ckk = ((a * y).sum(0) / 9).numpy(), ((a * a).sum(0) / 9).numpy()
    t = np.log(beta / Ckk / eps - 1.0) / (4 * beta)
    np.testing.assert_allclose(st.times, np.sort(t), rtol=1e-10)
    np.testing.assert_array_equal(st.modes, np.argsort(t))


def test_interacting_commuting_modes_lotka_volterra_and_the_limit():
    """Interacting C: the default reduction is the ε → 0 limit (rule per drop), with method "limit" on request;
    both equal LotkaVolterra.limit to 1e-12; on a diagonal C the limit's times are ln(1/ε)/ζ_k exactly."""
    op, y = _commuting_dense()
    eps = 1e-8
    st = nqf.predict(op, y, eps)
    lim = nqf.predict(op, y, eps, method="limit")
    assert st.method == "lotka-volterra" and lim.method == "limit"
    assert set(st.time_rules) == {"ε → 0 limit"}
    lv = nqf.reductions.lv.reduce(op, y, eps * torch.eye(op.p, dtype=F64))
    res, pl = lv.limit(eps), lv.plateaus(eps)
    for s in (st, lim):
        np.testing.assert_allclose(s.times, res.taus.numpy() * math.log(1 / eps), rtol=1e-12, atol=0)
        np.testing.assert_allclose(s.levels, pl.losses.numpy(), rtol=1e-12, atol=0)
    # one mode leaves the active set in this problem: the ranks count on-minus-off events
    kinds = res.kinds
    assert "off" in kinds
    np.testing.assert_array_equal(np.diff(st.ranks), [1 if k == "on" else -1 for k in kinds])
    # diagonal C (the commuting MLP above has one mode; here three isolated modes): τ_k = 1/ζ_k
    a = torch.zeros(9, 3, dtype=F64)
    a[0:3, 0], a[3:6, 1], a[6:9, 2] = 2.0, 1.0, 0.5
    yd = torch.tensor([3.0, 3, 3, 1, 1, 1, 0.2, 0.2, 0.2], dtype=F64)[:, None]
    opd = DenseStructure(torch.diag_embed(a)[:, None])
    d = nqf.predict(opd, yd, eps, method="limit")
    zeta = 4 * ((a * yd).sum(0) / 9).numpy()
    np.testing.assert_allclose(np.sort(d.times), np.sort(math.log(1 / eps) / zeta), rtol=1e-12)


def test_whitened_two_layer_network_is_svd_modes():
    """The demo's set-up: whitened inputs and a linear teacher; the staircase is the SVD-mode reduction's."""
    from nqf.app._experiments._demo import teacher_task
    from nqf.reductions.svd_modes import two_layer_modes

    X, Y, _ = teacher_task(400, 8, [2.0, 1.0, 0.5], 0)
    eps = 1e-6
    st = nqf.predict(mlp(X, "tanh", n_outputs=3), Y, eps, method="svd-modes")
    m = two_layer_modes(X, Y, "tanh", eps=eps, init="isotropic")
    assert st.method == "svd-modes" and st.n_drops == 3 and st.time_rules == ("exact flow",) * 3
    np.testing.assert_allclose(st.times, m.switch_times.numpy(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(st.levels, m.plateau_losses.numpy(), rtol=1e-12, atol=0)
    # independent: L_k = ½(E‖y‖² − Σ_{j≤k} λ_j²) with the teacher's singular values (whitened X: Σ_yx = B)
    lam = torch.linalg.svdvals(Y.T @ X / X.shape[0]).numpy()
    y2 = float((Y**2).sum(1).mean())
    np.testing.assert_allclose(st.levels, 0.5 * (y2 - np.concatenate([[0], np.cumsum(lam**2)])), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(st.directions, m.mode_vectors()[0].numpy(), rtol=0, atol=0)
    with pytest.raises(InvalidParameterError, match="svd-modes"):
        nqf.predict(mlp(X, "tanh", bias=True, n_outputs=3), Y, eps, method="svd-modes")


def test_non_commuting_digits_is_the_saddle_sequence_with_its_time_rules():
    from nqf.app._data import load_dataset
    from nqf.reductions.saddles import saddle_sequence
    from nqf.reductions.saddles._clock import predicted_escape_times

    d = load_dataset("digits", subset=120, seed=0)
    X, Y = torch.as_tensor(d.X), torch.as_tensor(d.Y)
    op = mlp(X, "tanh", n_outputs=Y.shape[1])
    eps = 1e-6
    st = nqf.predict(op, Y, eps)
    assert st.method == "saddle-sequence"
    seq = saddle_sequence(op, Y, rule="generic")
    times, rules = predicted_escape_times(seq, eps)
    np.testing.assert_allclose(st.times, times, rtol=1e-12, atol=0)
    np.testing.assert_allclose(st.levels, seq.plateau_levels, rtol=1e-12, atol=0)
    np.testing.assert_allclose(st.times_leading, seq.taus[1:] * math.log(1 / eps), rtol=1e-12)
    assert st.time_rules == rules and st.time_rules[0] == "exact offset"
    assert st.times[0] == pytest.approx(seq.first_escape_time(eps), rel=1e-12)


def test_staircase_curve_markers_checks_and_conventions():
    st = Staircase("lotka-volterra", 1e-3, [3.0, 2.0, 0.5], [1.0, 4.0], ("logistic",) * 2, [1.0, 4.0],
                   [2.0, 0.5, 0.0], [0, 1, 2], np.eye(3)[:, :2], [0, 1])  # fmt: skip
    t = np.array([0.0, 0.5, 1.0, 3.9, 4.0, 10.0])
    np.testing.assert_array_equal(st.loss_curve(t), [3.0, 3.0, 2.0, 2.0, 0.5, 0.5])
    np.testing.assert_array_equal(st.loss_curve(t), timing_staircase(t, st.times, st.levels))
    assert st.markers() == [(0.0, 3.0), (1.0, 2.0), (4.0, 0.5)]
    assert [d["to"] for d in st.drops()] == [2.0, 0.5]
    assert st.levels.dtype == np.float64 and st.ranks.dtype == np.int64 and not st.levels.flags.writeable
    assert json.loads(json.dumps(st.to_dict()))["time_rules"] == ["logistic", "logistic"]
    assert pickle.loads(pickle.dumps(st)).times.tolist() == [1.0, 4.0]
    assert len(repr(st)) < 120
    with pytest.raises(ShapeError, match="`times`"):
        Staircase("limit", 1e-3, [3.0, 2.0], [1.0, 2.0], ("ε → 0 limit",) * 2, [1.0, 2.0], [1, 0, 0], [0, 1, 2],
                  np.zeros((0, 2)), [0, 1])  # fmt: skip
    with pytest.raises(InvalidParameterError, match="`time_rules`"):
        Staircase("limit", 1e-3, [3.0, 2.0], [1.0], ("guess",), [1.0], [1, 0], [0, 1], np.zeros((0, 1)), [0])
    with pytest.raises(InvalidParameterError, match="`method`"):
        Staircase("magic", 1e-3, [3.0], [], (), [], [0], [0], np.zeros((0, 0)), [])


def test_compare_staircase_takes_the_staircase_itself():
    st = Staircase("limit", 1e-3, [3.0, 1.0], [2.0], ("ε → 0 limit",), [2.0], [1.0, 0.0], [0, 1],
                   np.zeros((0, 1)), [0])  # fmt: skip
    t = np.linspace(0, 6, 601)
    loss = 1.0 + 2.0 / (1.0 + np.exp(4 * (t - 2.1)))
    a, b = compare_staircase(t, loss, st), compare_staircase(t, loss, st.levels, st.times)
    np.testing.assert_array_equal(a.times_measured, b.times_measured)
    assert a.times_measured[0] == pytest.approx(2.1, abs=1e-3)
    with pytest.raises(ShapeError, match="`times` must be omitted"):
        compare_staircase(t, loss, st, st.times)
    with pytest.raises(ShapeError, match="levels with `times`"):
        compare_staircase(t, loss, st.levels)


def test_predict_refuses_bad_input_with_the_parameter_named():
    op, y = _commuting_dense()
    for kwargs, match in [({"method": "best"}, "`method`"), ({"eps": 1.5}, "`eps`"), ({"eps": 0.0}, "`eps`")]:
        with pytest.raises(NQFError, match=match):
            nqf.predict(op, y, **{"eps": 1e-6, **kwargs})
    with pytest.raises(NQFError, match="`op`"):
        nqf.predict(np.eye(3), y, 1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "lotka-volterra", "init": "balanced"}, "`init` is the start of the SVD-mode reduction"),
        ({"method": "saddle-sequence", "init": "balanced"}, "`init`"),
        ({"method": "limit", "chain": []}, "`chain`"),
        ({"method": "auto", "chain": []}, "'auto' chose the Lotka–Volterra"),  # commuting data: LV, no chain
    ],
)
def test_predict_refuses_a_keyword_its_method_would_ignore(kwargs, match):
    """Issue 36: ``predict(method=…)`` used to drop ``init``/``chain``/``M0`` of other methods silently."""
    op, y = _commuting_dense()
    with pytest.raises(InvalidParameterError, match=match):
        nqf.predict(op, y, 1e-6, **kwargs)
    rest = {k: v for k, v in kwargs.items() if k not in ("init", "chain")}
    assert nqf.predict(op, y, 1e-6, **rest).n_drops >= 1  # the same call without the keyword runs


def test_svd_modes_refuse_a_start_matrix():
    from nqf.app._experiments._demo import teacher_task

    X, Y, _ = teacher_task(200, 8, [2.0, 1.0], 0)
    with pytest.raises(InvalidParameterError, match="`M0`: the SVD-mode reduction starts from `init`"):
        nqf.predict(mlp(X, "tanh", n_outputs=2), Y, 1e-6, method="svd-modes", M0=1e-6 * torch.eye(10))
    assert nqf.predict(mlp(X, "tanh", n_outputs=2), Y, 1e-6, method="svd-modes", init="balanced").n_drops == 2


#: Where a staircase is judged (flatness, plateau read points, midpoint crossings of a loss) or predicted.
_JUDGE = {"curves/_compare.py"}
_RULE_NAMES = {"plateau_flatness", "downward_crossings", "midpoint_levels"}


def test_no_other_flatness_or_crossing_rule_in_src():
    """compare_staircase is the one judge: outside curves/_compare.py no module computes flatness of its own
    (a name `flat`/`flatness` bound to a comparison or an arithmetic expression) or calls the judge's parts
    (midpoint levels, downward crossings) — only the reductions use the midpoint level to place a drop."""
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC).as_posix()
        if rel in _JUDGE:
            continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                if names & {"flat", "flatness", "is_flat"} and isinstance(node.value, ast.Compare | ast.BinOp):
                    bad.append(f"{rel}:{node.lineno}: computes flatness")
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if name in _RULE_NAMES and not rel.startswith("reductions/"):
                    bad.append(f"{rel}:{node.lineno}: calls {name}")
    assert not bad, bad


def test_drop_times_out_of_order_are_flagged():
    """Seen on digits with attention heads (t₁ = 524 with its exact offset, t₂ = 222 at leading order): the
    saddle sequence's staircase then carries a warning naming both drops; ordered times carry none."""
    from nqf.reductions.saddles._results import _order_warning

    (w,) = _order_warning([523.8, 222.4], ("exact offset", "leading order"))
    assert w.startswith("warning:") and "t_1 = 523.8 (exact offset) > t_2 = 222.4 (leading order)" in w
    assert _order_warning([1.0, 2.0, np.nan], ("exact offset", "leading order", "leading order")) == ()


def test_carrying_cuts_the_tail_that_removes_at_most_the_fraction_of_the_fall():
    """Levels 10 → 1 → 0.2 → 0.05 → 0.0: after drop 3 the loss left to fall is 0.05 of 10 (0.5 %), so with the
    default 1 % the staircase keeps 3 drops; with 0.1 % all 4; a staircase that does not fall keeps everything."""
    K = 4
    st = Staircase("saddle-sequence", 1e-6, [10.0, 1.0, 0.2, 0.05, 0.0], [1.0, 2.0, 5.0, 40.0],
                   ("leading order",) * K, [1.0, 2.0, 5.0, 40.0], [1.0, 0.5, 0.2, 0.01, 0.0], [0, 1, 2, 3, 4],
                   np.eye(5)[:, :K], np.full(K, -1), True, ("a note",))  # fmt: skip
    cut = st.carrying()
    assert cut.n_drops == 3 and cut.levels.tolist() == [10.0, 1.0, 0.2, 0.05] and cut.directions.shape == (5, 3)
    assert not cut.global_minimum and cut.notes[0].startswith("tail: drops 4–4") and cut.notes[1] == "a note"
    assert cut.ranks.tolist() == [0, 1, 2, 3] and cut.time_rules == ("leading order",) * 3
    assert st.carrying(0.001) is st and st.carrying(0.6).n_drops == 1  # 1 of 10 left after drop 1: 10 %
    flat = Staircase("limit", 1e-3, [3.0], [], (), [], [0], [0], np.zeros((2, 0)), [])
    assert flat.carrying() is flat
    with pytest.raises(InvalidParameterError, match="fraction"):
        st.carrying(0.0)
