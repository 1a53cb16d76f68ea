"""Reconstruction-risk figures: bound and attack on the same axes, one panel per threat model.

The bounds themselves come from :func:`recon_jax.accounting.privacy_bounds` (a typed
:class:`~recon_jax.accounting.PrivacyBounds`); :func:`plot_threat_models` draws them beside the measured attacks
(final model released; every update released).
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

__all__ = ["plot_threat_models"]


def plot_threat_models(final_rows: Sequence[dict], update_rows: Sequence[dict], path: str,
                       confidence: float = 0.95) -> str:
    """Bound and attack on the same axes, one panel per threat model (x: noise multiplier, log scale).

    Args:
      final_rows: "final model released", one per DP setting: ``noise_multiplier``, ``success_at_eta`` with
        ``success_at_eta_ci`` ([low, high]), and ``bound_at_eta`` (the ReRo bound at ``kappa(eta)``, or None).
      update_rows: "every update released", one per DP setting and prior size: ``noise_multiplier``,
        ``prior_size``, ``prior_aware_success``, ``prior_aware_ci``, ``prior_aware_bound`` and ``candidates``
        (``"records"`` as filled circles, crafted canaries as open squares beside them).
      path: PNG path.
      confidence: the level of the rows' intervals, for the legend.

    Returns:
      ``path``.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    level = f"{100 * confidence:g}%"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), sharey=True)

    def errbar(ax, xs, ys, cis, **kw):
        lo = [y - c[0] for y, c in zip(ys, cis)]
        hi = [c[1] - y for y, c in zip(ys, cis)]
        ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, linestyle="none", **kw)

    ax = axes[0]
    rows = sorted(final_rows, key=lambda r: r["noise_multiplier"])
    if rows:
        xs = [r["noise_multiplier"] for r in rows]
        errbar(ax, xs, [r["success_at_eta"] for r in rows], [r["success_at_eta_ci"] for r in rows], marker="s",
               color="black", label=f"RecoNN: P[MSE <= eta] ({level} CI)")
        ax.plot(xs, [np.nan if r.get("bound_at_eta") is None else r["bound_at_eta"] for r in rows], "-",
                color="black", marker="_", markersize=16, label="ReRo bound at kappa(eta) (approx.)")
    ax.set_title("final model released (informed adversary)", fontsize=10)
    ax.set_ylabel("probability of successful reconstruction")
    ax = axes[1]
    sizes = sorted({r["prior_size"] for r in update_rows})
    kinds = sorted({r.get("candidates", "records") for r in update_rows}, key=lambda c: c != "records")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, k in enumerate(sizes):
        c = colors[i % len(colors)]
        for j, kind in enumerate(kinds):
            rows = sorted((r for r in update_rows if r["prior_size"] == k and r.get("candidates", "records") == kind),
                          key=lambda r: r["noise_multiplier"])
            xs = [r["noise_multiplier"] * (1.0 + 0.06 * j) for r in rows]  # side by side
            errbar(ax, xs, [r["prior_aware_success"] for r in rows], [r["prior_aware_ci"] for r in rows],
                   marker="o" if kind == "records" else "s", mfc=c if kind == "records" else "none", color=c,
                   label=f"prior-aware attack, k={k}, {kind} ({level} CI)")
        rows = sorted((r for r in update_rows if r["prior_size"] == k and r.get("candidates", "records") == kinds[0]),
                      key=lambda r: r["noise_multiplier"])
        ax.plot([r["noise_multiplier"] for r in rows], [r["prior_aware_bound"] for r in rows], "-", color=c,
                marker="_", markersize=16, label=f"ReRo bound, kappa=1/{k}")
    ax.set_title("every update released (prior-aware adversary)", fontsize=10)
    sigmas = sorted({r["noise_multiplier"] for r in list(final_rows) + list(update_rows)})
    for ax in axes:
        ax.set_xscale("log")
        if sigmas:  # room for the side-by-side markers, and a readable axis with a single noise level
            ax.set_xlim(sigmas[0] / 1.5, sigmas[-1] * 1.5)
            ax.set_xticks(sigmas, [f"{s:g}" for s in sigmas])  # the settings' own noise levels, not decades
            ax.minorticks_off()
        ax.set_xlabel("noise multiplier sigma (lines join the settings)")
        ax.set_ylim(-0.02, 1.02)
        if ax.get_legend_handles_labels()[0]:  # below the panel, where it hides no point
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2 if ax is axes[1] else 1,
                      frameon=False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
