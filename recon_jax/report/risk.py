"""Reconstruction-risk summaries: every theoretical route for one DP-SGD configuration, in one call.

:func:`privacy_bounds` collects, for a Gaussian DP-SGD / DP-GD configuration (noise multiplier ``sigma``,
sampling rate ``q``, ``steps``, clip norm ``C``):

- epsilon at ``delta`` from our RDP accountant and from the PLD accountant (``dp_accounting``);
- ReRo upper bounds (probability of a successful reconstruction) for priors ``kappa`` through the RDP curve
  (the optimal RDP-to-trade-off conversion, tighter than Balle et al. Thm 2), zCDP (likewise; full batch only)
  and the hypothesis-testing/GDP route (Hayes et al. 2023;
  ``Phi(Phi^-1(kappa) + mu)`` with ``mu = sqrt(T)/sigma`` for full batches, the PLD trade-off curve otherwise);
- Ziller et al.'s prior-free bounds for an adversary who sees the T noisy gradient releases (expected MSE lower
  bound, PSNR upper bound, NCC upper bound, and P[MSE <= eta]);
- the log Bayes' capacity of the Gaussian mechanism (Biswas et al. Thm 5).

:func:`tightest_rero` picks the smallest of the applicable ReRo routes (each is a valid upper bound, so the
minimum is one too); :func:`plot_threat_models` draws bound and attack on the same axes, one panel per threat
model (final model released; every update released).

Adjacency is add/remove-one with sensitivity C (the usual DP-SGD accounting), which is what the ReRo argument
needs: it compares training on D- u {z} with training on D- alone, where no attack beats the prior. Ziller et
al.'s bounds hold in their threat model (the noisy gradient of a linear layer reveals the clipped record).
"""

from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

__all__ = ["privacy_bounds", "tightest_rero", "plot_threat_models"]

ROUTES = ("rero_gdp", "rero_rdp", "rero_zcdp")


def privacy_bounds(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    clip_norm: float,
    data_dim: int,
    kappas: Sequence[float],
    eta_mse: float | None = None,
    kappa_at_eta: float | None = None,
    num_params: int | None = None,
) -> dict:
    """All bounds for one Gaussian DP-SGD configuration (see the module docstring).

    Args:
      noise_multiplier: sigma > 0.
      sample_rate: q in (0, 1] (1 = full-batch DP-GD).
      steps: T >= 1 noisy gradient releases.
      delta: target delta in (0, 1).
      clip_norm: C > 0.
      data_dim: dimension N of one training example (for the NCC and P[MSE <= eta] bounds).
      kappas: priors (baseline success probabilities) in (0, 1) for the ReRo table.
      eta_mse: optional MSE success threshold; adds Ziller's ``P[MSE <= eta]`` bound.
      kappa_at_eta: optional baseline success probability of the threshold ``eta_mse``; adds ReRo bounds at it.
      num_params: model size for Bayes' capacity (default ``data_dim``).

    Returns:
      A JSON-able dict of floats (``None`` where a route does not apply: zCDP for ``q < 1``).
    """
    from recon_jax import accounting, bounds

    sigma, q, T = float(noise_multiplier), float(sample_rate), int(steps)
    if not sigma > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    if not 0 < q <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if T < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    out: dict = {"noise_multiplier": sigma, "sample_rate": q, "steps": T, "delta": float(delta)}
    out["eps_rdp"] = float(accounting.dpsgd_epsilon(sigma, q, T, delta, accountant="rdp"))
    out["eps_pld"] = float(accounting.dpsgd_epsilon(sigma, q, T, delta, accountant="pld"))
    orders = np.asarray(accounting.DEFAULT_ORDERS, np.float64)
    if q == 1.0:
        rdp_curve = T * np.asarray(accounting.rdp_gaussian(sigma, orders))
    else:
        rdp_curve = T * np.asarray(accounting.rdp_subsampled_gaussian(q, sigma, orders))
    all_kappas = [float(k) for k in kappas]
    if kappa_at_eta is not None and 0 < kappa_at_eta < 1:
        all_kappas.append(float(kappa_at_eta))
    rero = []
    for k in all_kappas:
        row = {"kappa": k}
        row["rero_rdp"] = float(bounds.rero_from_rdp_curve(k, orders, rdp_curve))
        row["rero_zcdp"] = float(bounds.rero_from_zcdp(k, T / (2 * sigma**2))) if q == 1.0 else None
        if q == 1.0:
            row["rero_gdp"] = float(bounds.rero_gdp(k, math.sqrt(T) / sigma))
        else:
            row["rero_gdp"] = float(np.asarray(accounting.rero_dpsgd_tradeoff([k], sigma, q, T))[0])
        row["rero_dp"] = float(bounds.rero_from_dp(k, out["eps_rdp"]))
        rero.append(row)
    out["rero"] = rero
    if kappa_at_eta is not None:
        out["kappa_at_eta"] = float(kappa_at_eta)
    out["ziller_mse_lower_bound"] = float(bounds.mse_lower_bound(sigma, clip_norm, steps=T))
    out["ziller_psnr_upper_bound"] = float(bounds.psnr_upper_bound(sigma, clip_norm, data_range=1.0, steps=T))
    out["ziller_ncc_upper_bound"] = float(bounds.ncc_upper_bound(sigma, data_dim, steps=T))
    if eta_mse is not None:
        out["eta_mse"] = float(eta_mse)
        out["ziller_p_mse_below_eta"] = float(bounds.rero_mse(eta_mse, sigma, clip_norm, data_dim, steps=T))
    out["log_bayes_capacity"] = float(
        bounds.log_bayes_capacity_gaussian(sigma / math.sqrt(T), num_params or data_dim)
    )
    return out


def tightest_rero(bounds_row: dict) -> tuple[float, str]:
    """The smallest applicable ReRo bound of a :func:`privacy_bounds` ``rero`` row and the route that gave it.

    >>> tightest_rero({"kappa": 0.1, "rero_gdp": 0.4, "rero_rdp": 0.5, "rero_zcdp": None})
    (0.4, 'rero_gdp')
    """
    best = min((bounds_row[r], r) for r in ROUTES if bounds_row.get(r) is not None)
    return float(best[0]), best[1]


def plot_threat_models(final_rows: Sequence[dict], update_rows: Sequence[dict], path: str) -> str:
    """Bound and attack on the same axes, one panel per threat model (x: noise multiplier, log scale).

    Args:
      final_rows: "final model released", one per DP setting: ``noise_multiplier``, ``success_at_eta`` with
        ``success_at_eta_ci`` ([low, high]), and ``bound_at_eta`` (the ReRo bound at ``kappa(eta)``, or None).
      update_rows: "every update released", one per DP setting and prior size: ``noise_multiplier``,
        ``prior_size``, ``prior_aware_success``, ``prior_aware_ci`` and ``prior_aware_bound``.
      path: PNG path.

    Returns:
      ``path``.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9), sharey=True)

    def errbar(ax, xs, ys, cis, **kw):
        lo = [y - c[0] for y, c in zip(ys, cis)]
        hi = [c[1] - y for y, c in zip(ys, cis)]
        ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, linestyle="none", **kw)

    ax = axes[0]
    rows = sorted(final_rows, key=lambda r: r["noise_multiplier"])
    if rows:
        xs = [r["noise_multiplier"] for r in rows]
        errbar(ax, xs, [r["success_at_eta"] for r in rows], [r["success_at_eta_ci"] for r in rows], marker="s",
               color="black", label="RecoNN: P[MSE <= eta] (95% CI)")
        ax.plot(xs, [np.nan if r.get("bound_at_eta") is None else r["bound_at_eta"] for r in rows], "-",
                color="black", marker="_", markersize=16, label="ReRo bound at kappa(eta) (approx.)")
    ax.set_title("final model released (informed adversary)", fontsize=10)
    ax.set_ylabel("probability of successful reconstruction")
    ax = axes[1]
    sizes = sorted({r["prior_size"] for r in update_rows})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, k in enumerate(sizes):
        rows = sorted((r for r in update_rows if r["prior_size"] == k), key=lambda r: r["noise_multiplier"])
        xs = [r["noise_multiplier"] for r in rows]
        c = colors[i % len(colors)]
        errbar(ax, xs, [r["prior_aware_success"] for r in rows], [r["prior_aware_ci"] for r in rows], marker="o",
               color=c, label=f"prior-aware attack, k={k} (95% CI)")
        ax.plot(xs, [r["prior_aware_bound"] for r in rows], "-", color=c, marker="_", markersize=16,
                label=f"ReRo bound, kappa=1/{k}")
    ax.set_title("every update released (prior-aware adversary)", fontsize=10)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("noise multiplier sigma")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=6.5, loc="best")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
