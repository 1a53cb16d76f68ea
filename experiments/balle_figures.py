"""Figures for the informed-adversary experiments (Balle et al. 2022): Fig. 3, 5c, 9 and 11 analogues.

Every function writes a PNG (Agg backend) and returns its path. Inputs are plain arrays / lists. Drawn by
:mod:`experiments.balle_mnist_report`; the figures every run draws are :mod:`recon_jax.evidence.plots`'s.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

__all__ = ["oracle_histogram", "mse_vs_shadow_models", "dp_curve", "mia_loss_histograms"]


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def oracle_histogram(histogram: np.ndarray, bin_edges: np.ndarray, markers: Mapping[str, float], path: str,
                     title: str | None = None) -> str:
    """Fig. 3: the MSE histogram of a target to the adversary's pool (averaged over targets) with vertical
    lines at named values (NN oracle, percentiles, mean attack MSE)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.8, 3.6))
    edges = np.asarray(bin_edges, float)
    ax.stairs(np.asarray(histogram, float), edges, fill=True, alpha=0.5, label="MSE to pool (avg. over targets)")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, v) in enumerate(markers.items()):
        ax.axvline(float(v), color=colors[(i + 1) % len(colors)], ls="--", lw=1.2, label=f"{name}: {float(v):.4f}")
    ax.set_xlabel("MSE")
    ax.set_ylabel("average count")
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)


def mse_vs_shadow_models(counts: Sequence[int], mean_mse: Sequence[float], path: str,
                         reference: Mapping[str, float] | None = None, title: str | None = None) -> str:
    """Fig. 5c: mean reconstruction MSE against the number of shadow models, with horizontal references."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 3.5))
    order = np.argsort(counts)
    ax.plot(np.asarray(counts)[order], np.asarray(mean_mse)[order], "o-", label="RecoNN")
    for name, v in (reference or {}).items():
        ax.axhline(float(v), ls="--", lw=1, color="gray" if "oracle" in name.lower() else None, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("number of shadow models")
    ax.set_ylabel("mean MSE")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)


def dp_curve(eps: Sequence[float], mean_mse: Sequence[float], accuracy: Sequence[float], path: str,
             oracle_mse: float | None = None, nonprivate_mse: float | None = None,
             success_rate: Sequence[float] | None = None, rero_bound: Sequence[float] | None = None,
             title: str | None = None) -> str:
    """Fig. 9: attack MSE and released-model accuracy against epsilon (log x axis); optionally, a second panel
    with the empirical success probability next to a ReRo upper bound."""
    plt = _plt()
    two = success_rate is not None or rero_bound is not None
    fig, axes = plt.subplots(1, 2 if two else 1, figsize=(10 if two else 5.5, 3.6), squeeze=False)
    ax = axes[0, 0]
    e = np.asarray(eps, float)
    ax.plot(e, mean_mse, "o-", color="C0", label="attack MSE")
    if oracle_mse is not None:
        ax.axhline(oracle_mse, color="gray", ls="--", lw=1, label="NN oracle")
    if nonprivate_mse is not None:
        ax.axhline(nonprivate_mse, color="C2", ls=":", lw=1, label="no DP")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon (delta = 1e-5)")
    ax.set_ylabel("mean MSE")
    ax2 = ax.twinx()
    ax2.plot(e, accuracy, "s-", color="C1", label="released test acc.")
    ax2.set_ylabel("test accuracy")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7)
    if two:
        bx = axes[0, 1]
        if success_rate is not None:
            bx.plot(e, success_rate, "o-", label="attack: P[MSE <= eta]")
        if rero_bound is not None:
            bx.plot(e, rero_bound, "k--", label="ReRo upper bound (mu-GDP)")
        bx.set_xscale("log")
        bx.set_ylim(-0.02, 1.02)
        bx.set_xlabel("epsilon (delta = 1e-5)")
        bx.set_ylabel("success probability")
        bx.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def mia_loss_histograms(panels: Mapping[str, tuple[np.ndarray, np.ndarray]], path: str, bins: int = 30) -> str:
    """Fig. 11: per panel (e.g. known vs random initialisation), the target's loss under models trained with
    (``in``) and without (``out``) it."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.3), squeeze=False)
    for ax, (name, (loss_in, loss_out)) in zip(axes[0], panels.items()):
        both = np.concatenate([np.ravel(loss_in), np.ravel(loss_out)])
        lo, hi = float(both.min()), float(both.max())
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1)
        ax.hist(np.ravel(loss_in), bins=edges, alpha=0.6, label="with target")
        ax.hist(np.ravel(loss_out), bins=edges, alpha=0.6, label="without target")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("loss on target")
        # Few ticks in scientific notation: a narrow range of tiny losses printed every tick as 0.00058...
        ax.xaxis.set_major_locator(plt.MaxNLocator(nbins=4))
        ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
        ax.legend(fontsize=7)
    return _save(fig, path)
