"""The finite-K half of the ``power-law`` experiment (:mod:`nqf.app._experiments._power_law`): a real two-layer tanh
MLP on Fourier features of a phase, its NQF order-parameter GD, the exponent fitted over a window against the
exact mode sum at the same ``K`` and ε, and the figure."""

from __future__ import annotations

import math

import numpy as np

from ...dynamics import GD, Save, initial_weights
from .._report import new_figure
from ._base import Check, Outcome, Table
from ._common import mark_stop_at, mark_unfinished, stop_reason, to_cpu
from ._power_law_modes import PowerLawParams, fourier_task, isotropic_mode_sum


def _network_problem(P: PowerLawParams, ctx) -> dict:
    """Fourier-feature task, its two-layer modes (the prediction), fit window, step, run length and ``W0``."""
    from ...reductions.svd_modes import two_layer_modes
    from ...structure import mlp

    K = P.n_modes
    X, Y, _ = fourier_task(K, P.gamma)
    modes = two_layer_modes(X, Y, "tanh", eps=P.eps, init="isotropic")
    zeta = modes.rates.numpy()
    t_switch = np.sort(modes.switch_times.numpy())
    k_hi = math.ceil(P.fit_to_fraction * K)
    k_lo = min(3, k_hi - 2)
    lr = P.step_fraction / float(zeta.max())
    steps = int(math.ceil(1.5 * float(t_switch[-1]) / lr))
    m = P.width_factor * 2 * K
    return {
        "X": X,
        "Y": Y,
        "op": mlp(X, "tanh", n_outputs=K),
        "lam": modes.singular_values.numpy(),
        "zeta": zeta,
        "loss_inf": modes.loss_inf,
        "t_switch": t_switch,
        "k_lo": k_lo,
        "k_hi": k_hi,
        "window": (float(t_switch[k_lo - 1]), float(t_switch[k_hi - 1])),
        "lr": lr,
        "steps": steps,
        "save": max(steps // P.save_points, 1),
        "m": m,
        "W0": initial_weights(2 * K, m, P.eps, ctx.generator(5)),
    }


def _network_runs(net: dict, P: PowerLawParams, ctx) -> dict:
    """The NQF order-parameter GD (and the real tanh MLP) from the same ``W0``, checkpointed."""
    from ...dynamics import simulate, train_network
    from ...networks import TwoLayerMLP

    X, Y, W0, lr, steps, save = (net[k] for k in ("X", "Y", "W0", "lr", "steps", "save"))
    runs = {}
    for part in ctx.progress(["nqf"] + (["real"] if P.real_network else []), "GD runs"):
        if part == "nqf":
            runs[part] = ctx.checkpoint(
                "nqf",
                lambda: to_cpu(
                    simulate(net["op"], Y, M0=W0 @ W0.T, optimizer=GD(lr), save=Save(every=save, M=False), steps=steps)
                ),
            )
        else:
            mlp_net = TwoLayerMLP(P.n_modes, net["m"], P.n_modes, "tanh")
            runs[part] = ctx.checkpoint(
                "real",
                lambda mlp_net=mlp_net: to_cpu(
                    train_network(
                        mlp_net,
                        mlp_net.units,
                        X,
                        Y,
                        W0=W0,
                        optimizer=GD(lr),
                        save=Save(every=save, M=False, W=False),
                        steps=steps,
                    )
                ),
            )
    return runs


def _network_measurement(net: dict, runs: dict, P: PowerLawParams, ctx) -> dict:
    """The power-law fits of the NQF (and real network) losses, and of the exact mode sum at the same times.

    The exact mode sum (:func:`isotropic_mode_sum`, numpy) is sampled at the NQF run's own times and fitted by the
    same :func:`nqf.curves.fit_power_law` over the same window, so the two exponents differ only where the curves
    differ.  (An ordinary least squares on the run's samples, uniform in ``t``, weighs the late, steeper part of
    the window more than the fit's log-time cells do: a different quantity.)
    """
    from ...curves import fit_power_law

    sim, window, L_inf = runs["nqf"], net["window"], net["loss_inf"]
    t, L_sim = sim.t.numpy()[1:], sim.loss.numpy()[1:]
    ref_curve = isotropic_mode_sum(t, net["lam"], P.eps)
    reason = stop_reason(nqf=sim)
    fit = {"n_boot": P.n_boot, "seed": ctx.seed, "window": window}
    fit_sim = fit_power_law(t, L_sim, L_inf=L_inf, **fit) if not reason else None
    ref = fit_power_law(t, ref_curve + L_inf, L_inf=L_inf, window=window, n_boot=0).exponent
    meas = {"t": t, "L_sim": L_sim, "ref_curve": ref_curve, "ref": ref}
    meas.update({"reason": reason, "fit_sim": fit_sim, "fit_real": None})
    if P.real_network:
        L_real = runs["real"].loss.numpy()[1:]
        n = min(len(L_real), len(t))
        ok = not stop_reason(real=runs["real"])
        meas["fit_real"] = fit_power_law(t[:n], L_real[:n], L_inf=0.0, **fit) if ok else None
        meas["L_real"] = L_real
    return meas


def gd_clock_tolerance(net: dict) -> float:
    """Relative exponent error allowed between the NQF GD and the exact (gradient-flow) mode sum: ``η ζ_{k_lo}/4``.

    In its growth phase a GD step multiplies a mode's order parameter by ``(1 + η ζ/2)²`` where the flow multiplies
    it by ``e^{η ζ}``: GD's clock for mode ``k`` runs slow by the relative ``η ζ_k/4 + O(η² ζ_k²)``, i.e. the loss
    at ``t`` is the flow's at ``t/(1 + η ζ(t)/4)`` (``ζ(t)`` the rate of the mode switching on at ``t``).  The local
    log–log slope ``α(t)`` then moves by ``(η ζ(t)/4) (α − dα/d ln t)``; the finite-K curve steepens
    (``0 ≤ dα/d ln t ≲ α``), so to first order the change is at most the relative ``η ζ(t)/4``, and the fitted
    exponent — a positively weighted average of the local slopes over the window — moves by at most that of the
    window's fastest mode, ``k_lo``.
    """
    rates = np.sort(np.asarray(net["zeta"], float))[::-1]
    return float(net["lr"] * rates[net["k_lo"] - 1] / 4)


def network_checks(meas: dict, net: dict, P: PowerLawParams) -> list[Check]:
    """The exact mode sum's exponent vs the NQF GD's fitted one at the same K and ε (failed if the run stopped)."""
    fit_sim = meas["fit_sim"]
    checks = [
        Check(
            f"exponent at K = {P.n_modes}, ε = {P.eps:g}, modes {net['k_lo']}–{net['k_hi']}: mode sum vs NQF GD",
            meas["ref"],
            fit_sim.exponent if fit_sim is not None else None,
            gd_clock_tolerance(net),
            reference="NQF order-parameter GD (simulate), fit_power_law over the same window and samples",
            tolerance_origin="GD vs gradient flow: relative clock error η ζ_k/4 of the window's fastest mode",
        )
    ]
    mark_unfinished(checks, meas["reason"], start=-1)
    return checks


def _stop_marker(traj, y=None) -> dict:
    """Where a figure marks a stopped run: flag, time, and the height (``y``, else the last finite loss)."""
    stopped = stop_reason(run=traj) != ""
    yy = math.nan if y is None else float(y)
    if not math.isfinite(yy):
        finite = np.asarray(traj.loss, float)
        finite = finite[np.isfinite(finite)]
        yy = float(finite[-1]) if finite.size else 1.0
    return {"stopped": np.array(stopped), "t_stop": np.array(float(traj.t[-1])), "stop_y": np.array(yy)}


def _record_network(out: Outcome, net: dict, runs: dict, meas: dict, P: PowerLawParams) -> None:
    """Arrays (everything the network figure draws), table, metrics and summary of the network part."""
    fit_sim, L_sim = meas["fit_sim"], meas["L_sim"]
    y = float(L_sim[-1] - net["loss_inf"]) if len(L_sim) else None
    arrays = {f"nqf_{k}": v for k, v in _stop_marker(runs["nqf"], y).items()}
    if P.real_network:
        arrays.update({f"real_{k}": v for k, v in _stop_marker(runs["real"]).items()})
        arrays["loss_real"] = meas["L_real"]
    if fit_sim is not None:
        start, stop = net["window"]
        tt = np.geomspace(start, stop, 20)
        arrays.update(
            {"fit_t": tt, "fit_loss": fit_sim(tt) - fit_sim.L_inf, "fit_exponent": np.array(fit_sim.exponent)}
        )
        arrays["fit_ci"] = np.asarray(fit_sim.ci, float)
    out.arrays.update(arrays)
    out.arrays.update(
        {
            "t": meas["t"],
            "loss_nqf": L_sim,
            "loss_exact_sum": meas["ref_curve"],
            "lambda": net["lam"],
            "zeta": net["zeta"],
            "switch_times": net["t_switch"],
            "loss_inf": np.array(net["loss_inf"]),
            "window": np.asarray(net["window"], float),
        }
    )
    _report_network(out, net, meas, P)


def _report_network(out: Outcome, net: dict, meas: dict, P: PowerLawParams) -> None:
    """The finite-K exponent table, the metrics and the summary line."""
    fit_sim, fit_real, ref, window = meas["fit_sim"], meas["fit_real"], meas["ref"], net["window"]
    measured = fit_sim.exponent if fit_sim is not None else None
    rows = [
        ["(a−1)/b from the spectra (asymptotic)", out.metrics["headline_exponent"], None, None],
        ["exact mode sum at this K, ε (numpy; same fit and times)", ref, None, None],
        ["NQF order-parameter GD", measured, *(fit_sim.ci if fit_sim is not None else (None, None))],
    ]
    if P.real_network:
        real = fit_real.exponent if fit_real is not None else None
        rows.append(["real tanh MLP", real, *(fit_real.ci if fit_real is not None else (None, None))])
        out.metrics["exponent_real_network"] = real
    out.tables.append(
        Table(
            "Loss exponent at finite K (network)",
            ["source", "exponent", "CI low", "CI high"],
            rows,
            caption=f"window t ∈ [{window[0]:.3g}, {window[1]:.3g}] (switch-on of modes "
            f"{net['k_lo']} and {net['k_hi']}); L∞ = {net['loss_inf']:.3g}; CI: 95 % bootstrap of the fit",
        )
    )
    out.metrics.update(
        {
            "exponent_exact_sum_network_K": ref,
            "exponent_nqf": measured,
            "exponent_nqf_ci_low": None if fit_sim is None else fit_sim.ci[0],
            "exponent_nqf_ci_high": None if fit_sim is None else fit_sim.ci[1],
            "lr": net["lr"],
            "steps": net["steps"],
            "window_start": window[0],
            "window_end": window[1],
            "window_first_mode": net["k_lo"],
            "window_last_mode": net["k_hi"],
        }
    )

    def f(fit):
        return "—" if fit is None else f"{fit.exponent:.3f} [{fit.ci[0]:.3f}, {fit.ci[1]:.3f}]"

    out.summary.append(
        f"at K = {P.n_modes}, ε = {P.eps:g}, over the switch-on of modes {net['k_lo']}–{net['k_hi']}, the exact mode "
        f"sum decays with exponent {ref:.3f} (the unlearned tail is truncated and late modes start relatively early, "
        f"both steepen the decay); NQF GD {f(fit_sim)}" + (f", real tanh MLP {f(fit_real)}" if P.real_network else "")
    )


def _network_figure(arrays: dict, P: PowerLawParams):
    """NQF (and real network) loss above L∞ with the exact mode sum, the fit and its window — from the arrays."""
    t, L = arrays["t"], arrays["loss_nqf"] - float(arrays["loss_inf"])
    fig, ax = new_figure(figsize=(7.5, 4.6))
    ax.loglog(t, L, lw=2.2, label="NQF (order-parameter GD)")
    ax.loglog(t, arrays["loss_exact_sum"], ":", color="k", lw=1.4, label="exact mode sum (numpy)")
    _mark(ax, arrays, "nqf", "NQF run stopped")
    if P.real_network:
        n = min(len(arrays["loss_real"]), len(t))
        ax.loglog(t[:n], arrays["loss_real"][:n], lw=1.5, alpha=0.8, label="real tanh MLP")
        _mark(ax, arrays, "real", "real network stopped")
    if "fit_loss" in arrays:
        ci = arrays["fit_ci"]
        label = f"fit ×1.3: α = {float(arrays['fit_exponent']):.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
        ax.loglog(arrays["fit_t"], 1.3 * arrays["fit_loss"], "--", color="C3", label=label)
    for w in arrays["window"]:
        ax.axvline(float(w), color="0.6", lw=0.8)
    ax.set_xlabel("training time t = η·steps (dimensionless)")
    ax.set_ylabel("L − L∞")
    ax.set_title(f"finite K = {P.n_modes}, ε = {P.eps:g}: grey lines bound the fit window", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    return fig


def _mark(ax, arrays: dict, run: str, label: str) -> None:
    """Mark where run ``run`` (``nqf`` or ``real``) stopped, from its saved stop flag, time and height."""
    a = {k: arrays[f"{run}_{k}"] for k in ("stopped", "t_stop", "stop_y")}
    mark_stop_at(ax, float(a["t_stop"]), [], bool(a["stopped"]), y=float(a["stop_y"]), label=label)
