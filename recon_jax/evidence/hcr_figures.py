"""Figures for the HCR bounds (Tygert et al. Figs. 1 and 2 analogues): histograms and visualisations.

Matplotlib with whatever backend is active (experiments set Agg). Functions return the figure and, when
given a path, also save it. Drawn by ``experiments/tygert_hcr.py`` and the ``colab/hcr`` notebook; the bounds they
show are :mod:`recon_jax.bounds.hcr`'s.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["plot_bound_histograms", "plot_rademacher_grid"]


def plot_bound_histograms(
    std_bounds: np.ndarray,
    low_freq: int = 8,
    bins: int = 256,
    title: str = "",
    path: str | None = None,
):
    """Histograms of per-mode HCR standard-deviation bounds: all modes, and the lowest-frequency modes.

    Args:
      std_bounds: ``[N, H, W, C]`` bounds in DCT coordinates (mode ``(0, 0)`` is the lowest frequency).
      low_freq: keep modes ``[:low_freq, :low_freq]`` in the right panel (the paper uses 8 for MNIST).
      bins: histogram bins.
      title: figure title prefix.
      path: if given, the PNG is written there.

    Returns:
      The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    b = np.asarray(std_bounds)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, data, name in (
        (axes[0], b.ravel(), "all modes"),
        (axes[1], b[:, :low_freq, :low_freq].ravel(), f"lowest {low_freq}x{low_freq} modes"),
    ):
        finite = data[np.isfinite(data)]
        ax.hist(finite, bins=bins, color="k")
        ax.set_xlabel("lower bound on the standard deviation")
        ax.set_ylabel("number of modes")
        ax.set_title(f"{title} {name}".strip())
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def plot_rademacher_grid(
    originals: np.ndarray,
    perturbed: np.ndarray,
    titles: Sequence[str] | None = None,
    path: str | None = None,
):
    """Originals (top row) and their Rademacher-perturbed versions (bottom row), pixel values in [0, 1].

    Args:
      originals: ``[K, H, W, C]`` images in display space.
      perturbed: ``[K, H, W, C]`` images in display space (clipped to [0, 1] here).
      titles: optional per-column titles.
      path: if given, the PNG is written there.

    Returns:
      The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    originals = np.clip(np.asarray(originals), 0.0, 1.0)
    perturbed = np.clip(np.asarray(perturbed), 0.0, 1.0)
    k = originals.shape[0]
    fig, axes = plt.subplots(2, k, figsize=(2.2 * k, 4.6), squeeze=False)
    for i in range(k):
        for row, img in ((0, originals[i]), (1, perturbed[i])):
            ax = axes[row, i]
            if img.shape[-1] == 1:
                ax.imshow(img[..., 0], cmap="gray", vmin=0.0, vmax=1.0)
            else:
                ax.imshow(img)
            ax.set_xticks([])
            ax.set_yticks([])
        if titles is not None:
            axes[0, i].set_title(titles[i], fontsize=8)
    axes[0, 0].set_ylabel("original")
    axes[1, 0].set_ylabel("+- HCR bound")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
