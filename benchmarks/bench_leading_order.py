"""Benchmark: the dormant (degree k ≥ 3) clock of ``nqf.reductions.dormant`` against the real networks.

Every real time comes from plain numpy gradient descent (``benchmarks/leading_order_oracles.py``: relative
step ``η = min(η_max, c‖θ‖/‖∇L‖)``, ``t = Σ η``); a drop's real time is the first time the loss is below the
midpoint of the predicted levels before and after it.  The column "c/2" is the change of that time when the
oracle's step control is halved (its own discretisation error; "—" where the run was too long to repeat).

* (a) modular addition mod p (p = 7, 11; all p² pairs), inputs ``(S^a x, S^b x)`` of a zero-mean template with
  distinct Fourier magnitudes, target ``S^{a+b} x``; two-layer square net (it IS its cubic term), width 20,
  ``W0`` one Gaussian draw × ε/√(C+D).  Rows: each drop, and the order of the Fourier frequencies carried by
  the escaping units' readouts (prediction vs real units sorted by when their norm first passes 10× start).
  Then tanh on the same data: ``leading_order``'s sentence and whether the real net drops by t = 1e4.
* (b) sparse parity, n = 16 bits, N = 2000: y = x1 x2 (mish, k = 3) and x1 x2 x3 (tanh, k = 4);
  ``leading_order`` on the data and on shuffled labels; the real first drop (width 32) against
  ``dormant_staircase(..., lower=)`` (the Taylor flow through order k: the sample's spurious quadratic rate
  grows the units first, so the time is ``a + b log10(1/ρ)``, not a power), and the time added per decade of
  ρ, predicted against real (acceptance 10 %); the drop times themselves (5 %).
* (c) deep linear chains (L = 3, 4; D = C = 5, N = 400 whitened inputs, teacher singular values 3, 2, 1.2,
  0.6, width 6, every layer Gaussian × ε): every drop (``chain_staircase``) at the larger ε, the first drop
  down to ε = 1e-8 and its exponent vs L − 2; the Saxe/Arora closed form for a balanced aligned start.

Acceptance: (a), (c) each drop within 5 %, exponents within 5 %, predicted order of escapes = real order;
(b) the time per decade of ρ within 10 %.  Rows marked "info" have no acceptance.  FAIL rows are printed as measured.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_leading_order.py [--quick] [--table FILE]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.integrate import quad

sys.path.insert(0, str(Path(__file__).resolve().parent))
import leading_order_oracles as oracle  # noqa: E402

#: Acceptance: relative error of a drop time, of an exponent in (a)/(c), of the exponent in (b).
TOL_TIME, TOL_EXP, TOL_EXP_PARITY = 0.05, 0.05, 0.10
#: A run longer than this many steps is not repeated at half the step (its "c/2" column reads "—").
REFINE_STEPS = 400_000
#: Singular values of the chains' teacher (the fifth is 0: four drops).
TEACHER = (3.0, 2.0, 1.2, 0.6, 0.0)

# --- configurations (quick / default) ------------------------------------------------------------------------
QUICK = dict(
    mod=[(7, (1e-2,), 4)],
    tanh_p=7,
    parity_rho=(1e-2, 1e-3),
    chain_all={3: (1e-2,), 4: (1e-2,)},
    chain_first=(1e-2, 1e-3, 1e-4, 1e-5, 1e-6),
    saxe_eps=(1e-2, 1e-3),
)
DEFAULT = dict(
    mod=[(7, (1e-3, 1e-4), 6), (11, (1e-3,), 6)],
    tanh_p=7,
    parity_rho=(3e-2, 1e-2, 1e-3, 1e-4),
    chain_all={3: (1e-2, 1e-3, 1e-4), 4: (1e-2, 1e-3)},
    chain_first=(1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8),
    saxe_eps=(1e-2, 1e-3, 1e-4),
)


class Report:
    """Rows printed as they come (and kept for ``--table``), notes printed in between."""

    HEAD = "| set-up | ε or ρ | drop | predicted | real | rel. error | c/2 | verdict |"

    def __init__(self):
        self.rows: list[str] = []
        print(self.HEAD + "\n|---|---|---|---|---|---|---|---|", flush=True)

    def row(self, setup, eps, drop, pred, real, err=None, disc=None, verdict="info") -> None:
        cells = [setup, _g(eps), str(drop), _g(pred), _g(real), _pct(err), _pct(disc), verdict]
        line = "| " + " | ".join(cells) + " |"
        self.rows.append(line)
        print(line, flush=True)

    def time_row(self, setup, eps, drop, pred, real, disc, tol=TOL_TIME) -> None:
        """A drop time against its prediction (FAIL when the real drop never came)."""
        err = real / pred - 1.0 if math.isfinite(real) else math.nan
        self.row(setup, eps, drop, pred, real if math.isfinite(real) else "not reached", err, disc, _verdict(err, tol))

    def note(self, text: str) -> None:
        print(f"  · {text}", flush=True)

    def summary(self) -> str:
        n_pass = sum(r.endswith("| PASS |") for r in self.rows)
        n_fail = sum(r.endswith("| FAIL |") for r in self.rows)
        return f"summary: {n_pass} PASS, {n_fail} FAIL, {len(self.rows) - n_pass - n_fail} info rows"


def _g(x) -> str:
    return x if isinstance(x, str) else f"{x:.4g}"


def _pct(x) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{100 * x:+.2f} %"


def _verdict(err: float, tol: float) -> str:
    return "PASS" if math.isfinite(err) and abs(err) <= tol else "FAIL"


def _run(fn, *args, steps_hint: float, **kw):
    """``fn`` once, and again at half the step when the run is short enough: ``(run, change or None)``."""
    if steps_hint <= REFINE_STEPS:
        run, _, change = oracle.refined(fn, *args, **kw)
        return run, change
    return fn(*args, **kw), None


def _exponent(scales, times) -> float:
    """Least-squares slope of ``ln t`` against ``ln(1/scale)``."""
    ok = np.isfinite(times)
    return float(np.polyfit(-np.log(np.asarray(scales)[ok]), np.log(np.asarray(times)[ok]), 1)[0])


def _exponent_row(rep, label: str, scales, times, predicted: float, tol: float) -> None:
    """One row: the measured exponent of ``t`` against ``1/scale`` (:func:`_exponent`) against ``predicted``."""
    slope = _exponent(scales, np.array(times))
    err = slope / predicted - 1
    rep.row(label, f"{min(scales):g}–{max(scales):g}", "1", predicted, slope, err, verdict=_verdict(err, tol))


# --- (a) modular addition -------------------------------------------------------------------------------------
def modular_data(p: int, seed: int = 1):
    """All p² pairs: inputs ``(S^a x, S^b x)``, targets ``S^{a+b} x``; ``x`` zero-mean with distinct |DFT|."""
    rng = np.random.default_rng(seed)
    K = p // 2
    coef = np.zeros(p, complex)
    coef[1 : K + 1] = np.linspace(1.0, 0.3, K) * np.exp(1j * rng.uniform(0, 2 * np.pi, K))
    coef[p - K :] = np.conj(coef[1 : K + 1][::-1])
    x = np.fft.ifft(coef).real * np.sqrt(p)
    a, b = (g.ravel() for g in np.meshgrid(range(p), range(p), indexing="ij"))
    X = np.stack([np.concatenate([np.roll(x, i), np.roll(x, j)]) for i, j in zip(a, b, strict=True)])
    Y = np.stack([np.roll(x, (i + j) % p) for i, j in zip(a, b, strict=True)])
    return X, Y


def frequency(readout: np.ndarray) -> int:
    """The Fourier frequency (0 … p//2) with the largest |DFT| of a readout vector."""
    return int(np.argmax(np.abs(np.fft.fft(readout))[: readout.size // 2 + 1]))


def modular(rep: Report, p: int, eps_list, max_drops: int, m: int = 20) -> None:
    from nqf.reductions.dormant import dormant_staircase, unit_term
    from nqf.structure import mlp_higher_order

    X, Y = modular_data(p)
    C, D = p, 2 * p
    W1 = np.random.default_rng(2).standard_normal((C + D, m)) / math.sqrt(C + D)
    term = unit_term(mlp_higher_order(X, "square", n_outputs=C), 3)
    first = []
    for eps in eps_list:
        t0 = time.time()
        st = dormant_staircase(term, Y, W1 * eps, eps, max_drops=max_drops)
        rep.note(f"(a) p={p} ε={eps:g}: dormant_staircase {time.time() - t0:.0f} s, levels {np.round(st.levels, 4)}")
        t_last = float(st.times[-1])
        run, change = _run(
            oracle.two_layer_gd,
            X,
            Y,
            W1 * eps,
            "square",
            thresholds=oracle.midpoints(st.levels),
            t_end=2.0 * t_last,
            steps_hint=t_last / 0.02,
        )
        for j, (tp, tr) in enumerate(zip(st.times, run.crossings, strict=True)):
            rep.time_row(f"(a) mod {p} square", eps, j + 1, float(tp), float(tr), None if change is None else change[j])
        order_rows(rep, p, eps, st, run)
        rep.note(f"(a) p={p} ε={eps:g}: GD {run.steps} steps; loss at the end {run.loss[-1]:.4g}")
        first.append(float(run.crossings[0]))
    if len(first) > 1:  # the square net's cubic term: t ∝ ε^{−1}
        _exponent_row(rep, f"(a) mod {p} square: exponent of t₁ vs 1/ε", eps_list, first, 1.0, TOL_EXP)


def order_rows(rep: Report, p: int, eps: float, st, run) -> None:
    """The Fourier frequency of each escape's readout, predicted vs real (units by their 10× time)."""
    K = len(st.times)
    pred = [frequency(st.directions[:p, j]) for j in range(K)]
    done = np.flatnonzero(np.isfinite(run.escapes))
    first = done[np.argsort(run.escapes[done])][:K]
    real = [frequency(run.directions[:p, i]) for i in first]
    same = pred == real
    rep.row(
        f"(a) mod {p} Fourier order",
        eps,
        f"1–{K}",
        ",".join(map(str, pred)),
        ",".join(map(str, real)) or "none",
        verdict="PASS" if same else "FAIL",
    )
    rep.note(
        f"(a) units in order of escape: predicted {[int(i) for i in st.modes]}, real {[int(i) for i in first]} "
        f"(real 10× times {[_g(float(run.escapes[i])) for i in first]})"
    )


def modular_tanh(rep: Report, p: int, eps: float = 1e-2, m: int = 20, t_end: float = 1e4) -> None:
    from nqf.reductions.dormant import leading_order, unit_term
    from nqf.structure import mlp, mlp_higher_order

    X, Y = modular_data(p)
    C = p
    ho = mlp_higher_order(X, "tanh", n_outputs=C)
    lo = leading_order([unit_term(mlp(X, "tanh", n_outputs=C), 2), unit_term(ho, 3), unit_term(ho, 4)], Y, shuffles=39)
    rep.note(f"(a) tanh, mod {p}: leading_order {lo!r}: {lo.sentence()}")
    W0 = np.random.default_rng(2).standard_normal((C + 2 * p, m)) * eps / math.sqrt(3 * p)
    L0 = 0.5 * float((Y * Y).sum()) / Y.shape[0]
    run = oracle.two_layer_gd(X, Y, W0, "tanh", thresholds=[0.95 * L0], t_end=t_end)
    dropped = math.isfinite(run.crossings[0])
    rep.row(
        f"(a) mod {p} tanh: loss < 0.95 L0 by t=1e4?",
        eps,
        "1",
        f"order {lo.order}",
        f"yes, t={run.crossings[0]:.4g}" if dropped else f"no (L={run.loss[-1]:.4g}, L0={L0:.4g})",
    )


# --- (b) sparse parity ----------------------------------------------------------------------------------------
def parity_data(bits: int, n: int = 16, N: int = 2000, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.choice([-1.0, 1.0], size=(N, n))
    return X, X[:, :bits].prod(1)


def _beyond(lo) -> int | None:
    """The first order whose U* is above round-off and above the shuffled targets' largest U*."""
    return next((m.order for m in lo.maxima if m.value > m.tolerance and m.value > m.null), None)


def _per_decade(scales, times) -> float:
    """Least-squares slope of ``t`` against ``log10(1/scale)``: the time one decade of ``ρ`` adds."""
    ok = np.isfinite(times)
    return float(np.polyfit(-np.log10(np.asarray(scales)[ok]), np.asarray(times)[ok], 1)[0])


def parity(rep: Report, bits: int, act: str, rhos, m: int = 32) -> None:
    from nqf.reductions.dormant import dormant_staircase, leading_order, unit_term
    from nqf.structure import mlp, mlp_higher_order

    X, y = parity_data(bits)
    ho = mlp_higher_order(X, act)
    terms = [unit_term(mlp(X, act), 2), unit_term(ho, 3), unit_term(ho, 4)]
    name, k = f"(b) parity {bits} bits, {act}", bits + 1
    los = {
        lab: leading_order(terms, yy, shuffles=39)
        for lab, yy in (("data", y), ("shuffled", np.random.default_rng(5).permutation(y)))
    }
    for lab, lo in los.items():
        stats = ", ".join(f"k={u.order}: U*={u.value:.4g} null={u.null:.4g}" for u in lo.maxima)
        rep.note(f"{name}, {lab}: order {lo.order}; {stats}; {lo.sentence()}")
    pair = [_beyond(los["data"]), _beyond(los["shuffled"])]
    rep.row(
        f"{name}: first order beyond shuffled, data vs shuffled",
        "—",
        "—",
        f"{k} vs None",
        f"{pair[0]} vs {pair[1]}",
        verdict="PASS" if pair == [k, None] else "FAIL",
    )
    rep.row(  # by round-off alone both are order 2 (the sample's spurious rate): the test above decides
        f"{name}: leading_order .order (round-off), data vs shuffled",
        "—",
        "—",
        "2 vs 2",
        f"{los['data'].order} vs {los['shuffled'].order}",
    )
    W1 = np.random.default_rng(3).standard_normal((1 + X.shape[1], m))
    term, lower = unit_term(ho, k), terms[: k - 2]
    pred, pure, real = [], [], []
    for rho in rhos:
        st = dormant_staircase(term, y, W1 * rho, rho, lower=lower)
        pure.append(float(dormant_staircase(term, y, W1 * rho, rho, max_drops=1).times[0]))
        t_end = 3.0 * float(st.times[0])
        run, change = _run(
            oracle.two_layer_gd,
            X,
            y,
            W1 * rho,
            act,
            thresholds=oracle.midpoints(st.levels),
            t_end=t_end,
            steps_hint=t_end / 0.02,
        )
        pred.append(float(st.times[0]))
        real.append(float(run.crossings[0]))
        rep.time_row(
            f"{name}: Taylor flow, orders 2…{k}", rho, 1, pred[-1], real[-1], None if change is None else change[0]
        )
    rep.note(f"{name}: order {k} alone (no lower orders): {[round(t, 1) for t in pure]} (planted: a ρ^{2 - k} clock)")
    a, b = _per_decade(rhos, np.array(pred)), _per_decade(rhos, np.array(real))
    rep.row(
        f"{name}: time per decade of 1/ρ",
        f"{rhos[0]:g}–{rhos[-1]:g}",
        "—",
        a,
        b,
        b / a - 1,
        None,
        _verdict(b / a - 1, TOL_EXP_PARITY),
    )


def _unit(W: np.ndarray) -> float:
    return float(np.sqrt((W * W).sum(0)).max())


# --- (c) deep linear chains -----------------------------------------------------------------------------------
def chain_data(D: int = 5, C: int = 5, N: int = 400, seed: int = 0):
    """Exactly whitened inputs and a linear teacher ``T = U diag(TEACHER) Vᵀ``: ``(X, Y, U, V)``."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    X -= X.mean(0)
    ev, V = np.linalg.eigh(X.T @ X / N)
    X = X @ V @ np.diag(ev**-0.5) @ V.T
    U, _ = np.linalg.qr(rng.standard_normal((C, C)))
    Vt, _ = np.linalg.qr(rng.standard_normal((D, D)))
    return X, X @ (U @ np.diag(TEACHER) @ Vt.T).T, U, Vt


def _dims(L: int, D: int = 5, C: int = 5, h: int = 6) -> list[int]:
    return [D] + [h] * (L - 1) + [C]


def chain_layers(L: int, eps: float, seed: int = 4) -> list[np.ndarray]:
    """Every layer Gaussian × ε (one draw per depth, only scaled)."""
    rng, d = np.random.default_rng(seed), _dims(L)
    return [rng.standard_normal((d[i + 1], d[i])) * eps for i in range(L)]


def chain_prediction(X, Y, Ws, eps: float, max_drops: int):
    import torch
    from torch import nn

    from nqf.reductions.dormant import chain_staircase, chain_term

    net = nn.Sequential(*[nn.Linear(w.shape[1], w.shape[0], bias=False) for w in Ws]).double()
    with torch.no_grad():
        for lin, w in zip(net, Ws, strict=True):
            lin.weight.copy_(torch.as_tensor(w))
    return chain_staircase(chain_term(net, X), Y, eps, max_drops=max_drops)


def eta_max_chain(L: int) -> float:
    """``1/λ_max``, ``λ_max = L s_max^{2−2/L}`` the largest curvature at the balanced solution."""
    return 1.0 / (L * max(TEACHER) ** (2 - 2 / L))


def chain_all(rep: Report, L: int, eps_list) -> None:
    X, Y, _, _ = chain_data()
    eta = eta_max_chain(L)
    for eps in eps_list:
        st = chain_prediction(X, Y, chain_layers(L, eps), eps, 4)
        t_last = float(st.times[-1])
        run, change = _run(
            oracle.chain_gd,
            X,
            Y,
            chain_layers(L, eps),
            thresholds=oracle.midpoints(st.levels),
            t_end=2.0 * t_last,
            eta_max=eta,
            steps_hint=t_last / eta,
        )
        for j, (tp, tr) in enumerate(zip(st.times, run.crossings, strict=True)):
            rep.time_row(
                f"(c) chain L={L}, every drop", eps, j + 1, float(tp), float(tr), None if change is None else change[j]
            )
        rep.note(f"(c) L={L} ε={eps:g}: GD {run.steps} steps (η_max = {eta:.4g})")


def chain_first(rep: Report, L: int, eps_list) -> None:
    X, Y, _, _ = chain_data()
    eta, pred, real = eta_max_chain(L), [], []
    for eps in eps_list:
        st = chain_prediction(X, Y, chain_layers(L, eps), eps, 1)
        run, change = _run(
            oracle.chain_gd,
            X,
            Y,
            chain_layers(L, eps),
            thresholds=oracle.midpoints(st.levels),
            t_end=3.0 * float(st.times[0]),
            eta_max=eta,
            steps_hint=0,
        )
        pred.append(float(st.times[0]))
        real.append(float(run.crossings[0]))
        rep.time_row(f"(c) chain L={L}, first drop", eps, 1, pred[-1], real[-1], change[0])
    _exponent_row(rep, f"(c) chain L={L}: exponent of t1 vs 1/ε", eps_list, real, L - 2, TOL_EXP)


def balanced_layers(L: int, eps: float, U, V, seed: int = 6) -> list[np.ndarray]:
    """``W_l = R_{l+1} diag(ε) R_lᵀ`` with ``R_0 = V``, ``R_L = U`` and random orthonormal hidden frames."""
    rng, d = np.random.default_rng(seed), _dims(L)
    frames = [V] + [np.linalg.qr(rng.standard_normal((n, n)))[0] for n in d[1:-1]] + [U]
    n_modes = min(d)
    Ws = []
    for i in range(L):
        core = np.zeros((d[i + 1], d[i]))
        core[range(n_modes), range(n_modes)] = eps
        Ws.append(frames[i + 1] @ core @ frames[i].T)
    return Ws


def saxe_time(L: int, s: float, u0: float, u1: float) -> float:
    """``∫_{u0}^{u1} du / (L u^{2−2/L} (s − u))``, in ``v = ln u`` (the integrand is steep near ``u0``)."""
    f = lambda v: math.exp(-(1 - 2 / L) * v) / (L * (s - math.exp(v)))  # noqa: E731
    a, b = math.log(u0), math.log(u1)
    cuts = np.linspace(a, b, 9)
    return sum(
        quad(f, lo, hi, epsabs=0, epsrel=1e-11, limit=200)[0] for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)
    )


def saxe(rep: Report, L: int, eps_list) -> None:
    X, Y, U, V = chain_data()
    for eps in eps_list:
        st = chain_prediction(X, Y, balanced_layers(L, eps, U, V), eps, 4)
        for j, tp in enumerate(st.times):
            s = TEACHER[j]
            half = saxe_time(L, s, eps**L, s / 2)
            mid = saxe_time(L, s, eps**L, s * (1 - 2**-0.5))
            err = float(tp) / half - 1
            rep.row(
                f"(c) Saxe/Arora L={L}, u=s/2 [u at loss midpoint: t={mid:.6g}]",
                eps,
                j + 1,
                float(tp),
                half,
                err,
                verdict=_verdict(err, TOL_TIME),
            )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the ≤3-minute subset")
    ap.add_argument("--table", metavar="FILE", help="also write the Markdown table of the printed rows to FILE")
    ap.add_argument("--parts", default="a,b,c", help="comma-separated subset of a,b,c")
    args = ap.parse_args(argv)
    cfg, parts, t0 = (QUICK if args.quick else DEFAULT), set(args.parts.split(",")), time.time()
    rep = Report()
    if "a" in parts:
        for p, eps_list, drops in cfg["mod"]:
            modular(rep, p, eps_list, drops)
        modular_tanh(rep, cfg["tanh_p"])
    if "b" in parts:
        parity(rep, 2, "mish", cfg["parity_rho"])
        parity(rep, 3, "tanh", cfg["parity_rho"])
    if "c" in parts:
        for L, eps_list in cfg["chain_all"].items():
            chain_all(rep, L, eps_list)
        for L in cfg["chain_all"]:
            chain_first(rep, L, cfg["chain_first"])
            saxe(rep, L, cfg["saxe_eps"])
    print(rep.summary() + f" ({time.time() - t0:.0f} s)")
    if args.table:
        Path(args.table).write_text("\n".join([Report.HEAD, "|---|---|---|---|---|---|---|---|", *rep.rows]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
