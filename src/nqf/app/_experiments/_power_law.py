"""Power law from merged modes: the headline exponent ``(a−1)/b`` and where it holds.

Convention (docs/theory.md §5): modes sorted by rate, ``ℓ_k ~ k^{−a}`` (loss each
mode removes), ``ζ_k ~ k^{−b}`` (its rate); once many steps merge the loss decays
like ``(t/ln(1/ε))^{−(a−1)/b}``.  The asymptotic statement needs many modes and
``ln(1/ε) ≫ b ln K``, so the experiment has two parts.

**Asymptotic regime (K ≥ 10³, LV flow).** A commuting Lotka–Volterra system
``dz_k/dt = 4 z_k (β_k − z_k)`` with ``β_k = k^{−γ}`` (so ``ζ_k = 4k^{−γ}``,
``ℓ_k = ½k^{−2γ}``: ``a = 2γ``, ``b = γ``), ``z_k(0) = ε``, solved by the library
(:meth:`nqf.reductions.lv.LotkaVolterra.logistic`, :meth:`~nqf.reductions.lv.LotkaVolterra.loss`).
Headline: ``(a−1)/b`` from the spectra (:func:`nqf.curves.predict_exponent`).
Reference, independent of the library: the exact mode sum
``L(t) − L∞ = Σ_k ℓ_k (1 − expit(ζ_k t − ln(β_k/ε − 1)))²`` written out with numpy
and ``scipy.special.expit``, its exponent fitted by ordinary least squares of
``ln(L − L∞)`` on ``ln t`` over the switch-on times of modes ``k_lo … K/30`` (far from
the truncation at ``K``).  The same reference over a grid of ``K`` and ε shows the
finite-K, finite-ε deviations.

**A real network (finite K).** Inputs are Fourier features of a phase,
``x_{n,k} = √2 cos(k θ_n)`` (exactly whitened), teacher ``y = diag(c) x`` with
``c_k = k^{−γ}``; a two-layer tanh MLP learns it mode by mode (:mod:`nqf.reductions.svd_modes`:
``ζ_k = 2λ_k``, ``ℓ_k = ½λ_k²``).  The NQF order-parameter GD (and the real
network) are fitted over the switch-on times of modes ``k_lo … ⌈fit_to_fraction · K⌉``
and compared with the independent exact mode sum at the same ``K`` and ε, sampled at
the same times and fitted by the same estimator (:func:`nqf.curves.fit_power_law`);
its exponent is far from ``(a−1)/b`` at this ``K`` and depends on the window (the
finite-K curve steepens).  The tolerance is GD's clock error against the flow,
``η ζ_{k_lo}/4`` relative (``_power_law_network.gd_clock_tolerance``).
Initial scale ``M(0) = εI`` (``W0 = √ε Q``).
"""

from __future__ import annotations

import math

import numpy as np

from .._report import new_figure
from ._base import Check, Experiment, Outcome, Table, size_estimate
from ._catalog import CATALOG, register
from ._power_law_modes import PowerLawParams, exact_mode_sum, fourier_task, isotropic_mode_sum, ols_exponent
from ._power_law_network import (
    _network_figure,
    _network_measurement,
    _network_problem,
    _network_runs,
    _record_network,
    network_checks,
)

__all__ = ["PowerLaw", "fourier_task", "exact_mode_sum", "isotropic_mode_sum", "ols_exponent"]


def _reference(K: int, gamma: float, eps: float, first: int, n_t: int = 600):
    """Independent exact-sum exponent of the LV power-law system, window modes ``first … K//30``."""
    k = np.arange(1, K + 1, dtype=float)
    beta = k**-gamma
    ell, zeta = 0.5 * beta**2, 4 * beta
    lr = np.log(beta) - math.log(eps)
    log_ratio = lr + np.log1p(-np.exp(-lr))  # ln(β/ε − 1), no overflow
    t_on = log_ratio / zeta
    window = (float(t_on[first - 1]), float(t_on[K // 30 - 1]))
    t = np.geomspace(*window, n_t)
    return ols_exponent(t, exact_mode_sum(t, ell, zeta, log_ratio), window), window, (ell, zeta, log_ratio)


@register
class PowerLaw(Experiment):
    name = "power-law"
    description = CATALOG[name].description
    reproduces = (
        "Theorems 8–11: when many modes switch on at nearby times the steps merge into L − L∞ ~ (t/ln(1/ε))^(−(a−1)/b)"
    )
    Params = PowerLawParams

    def memory_estimate(self, params):
        """The network part's sizes: ``N = 2K + 2`` samples of ``D = K`` features, width ``m = width_factor · 2K``."""
        K = params.n_modes  # pyright: ignore[reportAttributeAccessIssue]
        factor = params.width_factor  # pyright: ignore[reportAttributeAccessIssue]
        nbytes, named, what = size_estimate(params, {"N": 2 * K + 2, "D": K, "m": factor * 2 * K})
        return nbytes, {**named, "n_modes": K, "width_factor": factor}, what

    tiny = {
        "asymptotic_modes": 1000,
        "grid_modes": [1000],
        "grid_eps": [1e-6, 1e-300],
        "n_modes": 16,
        "eps": 1e-6,
        "step_fraction": 0.15,
        "width_factor": 1,
        "save_points": 200,
        "n_boot": 20,
        "first_mode": 5,
    }
    checks = (
        "headline exponent (a−1)/b (nqf.curves.predict_exponent on the spectra) vs the exponent fitted by "
        "OLS on the exact mode sum written out with numpy/scipy.special.expit at K = `asymptotic_modes`, "
        "ε = `asymptotic_eps`; relative tolerance `headline_tolerance` (5%: discreteness of the sum and "
        "the theory's O(b ln k/ln(1/ε)) and O(k/K) corrections over the window, each ≲ 2%)",
        "loss of the library's LV solution (nqf.reductions.lv.LotkaVolterra.logistic/loss) vs the independent "
        "exact sum at the same K and ε over the window; relative tolerance 1e-9 (round-off)",
        "exponent of the independent exact mode sum (numpy/scipy.special.expit) at the same K and ε vs the "
        "exponent fitted on the NQF order-parameter GD of the Fourier-feature MLP — both by "
        "nqf.curves.fit_power_law over the same window and at the same times; relative tolerance η ζ_{k_lo}/4 "
        "(GD's clock runs slow by η ζ_k/4 against the flow, largest for the window's fastest mode k_lo)",
    )

    def plot(self, arrays: dict, params: PowerLawParams) -> dict:
        return {
            "asymptotic_exponent": _asymptotic_figure(arrays, params),
            "network_power_law": _network_figure(arrays, params),
        }

    def run(self, params: PowerLawParams, ctx, out: Outcome) -> None:
        P = params
        asym = _asymptotic(P, ctx)  # prediction (a−1)/b, the library's LV curve and the independent reference
        out.checks.extend(asymptotic_checks(asym, P))
        _record_asymptotic(out, asym, P)
        net = _network_problem(P, ctx)  # problem and its mode prediction
        runs = _network_runs(net, P, ctx)
        meas = _network_measurement(net, runs, P, ctx)
        out.checks.extend(network_checks(meas, net, P))
        _record_network(out, net, runs, meas, P)


# ---------------------------------------------------------------------- asymptotic regime (LV flow)
def _asymptotic(P: PowerLawParams, ctx) -> dict:
    """Headline (a−1)/b, the library's LV loss, the independent exact sum, and the finite-K, finite-ε grid."""
    from ...curves import predict_exponent
    from ...reductions import lv

    K, e = P.asymptotic_modes, P.asymptotic_eps
    ref, window, (ell, zeta, log_ratio) = _reference(K, P.gamma, e, P.first_mode)
    pred = predict_exponent(ell, zeta)
    system = lv.LotkaVolterra(zeta / 4, np.ones(K), e)
    t = np.geomspace(*window, 400)
    L_lib = system.excess_loss(system.logistic(t)).numpy()
    L_ref = exact_mode_sum(t, ell, zeta, log_ratio)
    rows = []
    grid = np.full((len(P.grid_modes), len(P.grid_eps)), np.nan)
    for i, Kg in enumerate(ctx.progress(P.grid_modes, "finite-K grid")):
        for j, eg in enumerate(P.grid_eps):
            grid[i, j], _, (ell_g, zeta_g, _) = _reference(Kg, P.gamma, eg, P.first_mode, 300)
            pg = predict_exponent(ell_g, zeta_g).exponent
            rows.append([Kg, eg, math.log(1 / eg), pg, grid[i, j], (grid[i, j] - pg) / pg])
    return {
        "pred": pred,
        "ref": ref,
        "window": window,
        "t": t,
        "L_lib": L_lib,
        "L_ref": L_ref,
        "curve_err": float(np.max(np.abs(L_lib - L_ref) / L_ref)),
        "grid": grid,
        "rows": rows,
    }


def asymptotic_checks(asym: dict, P: PowerLawParams) -> list[Check]:
    """Headline exponent vs the exact-sum OLS exponent; the library's LV curve vs the exact sum."""
    K, e = P.asymptotic_modes, P.asymptotic_eps
    return [
        Check(
            f"headline exponent (a−1)/b at K = {K}, ε = {e:g}",
            asym["pred"].exponent,
            asym["ref"],
            P.headline_tolerance,
            reference="OLS exponent of the exact mode sum (numpy + scipy.special.expit)",
            tolerance_origin="discreteness of the sum, O(b ln k / ln(1/ε)) and O(k/K) over the window",
        ),
        Check(
            f"LV loss curve at K = {K} (max relative difference)",
            0.0,
            asym["curve_err"],
            1e-9,
            kind="absolute",
            reference="exact mode sum (numpy + scipy.special.expit)",
            tolerance_origin="round-off",
        ),
    ]


def _record_asymptotic(out: Outcome, asym: dict, P: PowerLawParams) -> None:
    """Tables, metrics, arrays and summary of the asymptotic part."""
    K, e, pred, ref, window = P.asymptotic_modes, P.asymptotic_eps, asym["pred"], asym["ref"], asym["window"]
    headline = pred.exponent
    rel = abs(ref - headline) / abs(headline)  # what the headline check judges (relative to the prediction)
    out.tables.append(
        Table(
            "Headline exponent (asymptotic regime)",
            ["quantity", "value"],
            [
                ["a (ℓ_k ~ k^−a)", pred.a],
                ["b (ζ_k ~ k^−b)", pred.b],
                ["headline (a−1)/b", headline],
                ["reference: exact mode sum, OLS", ref],
                ["relative difference |reference − headline|/headline", rel],
                ["window t", f"[{window[0]:.4g}, {window[1]:.4g}] (modes {P.first_mode}…{K // 30})"],
            ],
            caption=f"LV system with β_k = k^−{P.gamma:g}, K = {K}, z(0) = ε = {e:g}",
        )
    )
    out.tables.append(
        Table(
            "Finite-K, finite-ε deviations",
            ["K", "ε", "ln(1/ε)", "(a−1)/b", "exact-sum exponent", "relative deviation"],
            asym["rows"],
            caption=(f"window: switch-on of modes {P.first_mode} … K/30; the deviation shrinks as K and ln(1/ε) grow"),
        )
    )
    out.metrics.update(
        {
            "headline_exponent": headline,
            "reference_exponent": ref,
            "headline_relative_difference": rel,
            "a": pred.a,
            "b": pred.b,
            "asymptotic_modes": K,
            "asymptotic_eps": e,
        }
    )
    out.arrays.update(
        {
            "asymptotic_t": asym["t"],
            "asymptotic_loss_lv": asym["L_lib"],
            "asymptotic_loss_reference": asym["L_ref"],
            "grid_modes": np.asarray(P.grid_modes),
            "grid_eps": np.asarray(P.grid_eps),
            "grid_exponent": asym["grid"],
            "headline_exponent": np.array(headline),
        }
    )
    out.summary.append(
        f"headline exponent (a−1)/b = {headline:.4f}; independent exact mode sum at K = {K}, "
        f"ε = {e:g}: {ref:.4f} (relative difference {rel:.2%})"
    )


def _asymptotic_figure(arrays: dict, P: PowerLawParams):
    """Exact sum, LV curve and the headline slope; the exponent over the (K, ε) grid — from the saved arrays."""
    K, e, headline = P.asymptotic_modes, P.asymptotic_eps, float(arrays["headline_exponent"])
    t, L_ref = arrays["asymptotic_t"], arrays["asymptotic_loss_reference"]
    fig, (ax, ax2) = new_figure(2, figsize=(12, 4.6))
    ax.loglog(t, L_ref, lw=2.4, label=f"exact mode sum (numpy), K = {K}")
    ax.loglog(t, arrays["asymptotic_loss_lv"], "--", lw=1.3, color="C1", label="LV logistic (library)")
    icpt = float(np.mean(np.log(L_ref) + headline * np.log(t)))
    label = f"slope −(a−1)/b = −{headline:.3f} (fitted intercept)"
    ax.loglog(t, np.exp(icpt) * t**-headline, ":", color="k", lw=1.5, label=label)
    ax.set_xlabel("training time t (dimensionless)")
    ax.set_ylabel("L − L∞")
    ax.set_title(f"asymptotic regime: ε = {e:g}, window of modes {P.first_mode}…{K // 30}", fontsize=10)
    ax.legend(fontsize=8)
    for Kg, row in zip(arrays["grid_modes"], arrays["grid_exponent"], strict=True):
        ax2.plot(np.log10(1 / arrays["grid_eps"]), row, "o-", label=f"exact sum, K = {int(Kg)}")
    ax2.axhline(headline, color="k", ls=":", label=f"(a−1)/b = {headline:.3f}")
    ax2.axhspan(
        headline * (1 - P.headline_tolerance),
        headline * (1 + P.headline_tolerance),
        color="0.9",
        zorder=0,
        label=f"±{P.headline_tolerance:.0%}",
    )
    ax2.set_xlabel("log₁₀(1/ε)")
    ax2.set_ylabel("fitted exponent (dimensionless)")
    ax2.set_title("finite-K, finite-ε deviations of the exponent", fontsize=10)
    ax2.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------- NQF and real network at finite K
