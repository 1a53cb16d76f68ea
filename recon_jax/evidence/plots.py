"""Matplotlib figures shared by the experiments and the risk report (Agg backend; every function writes a PNG and
returns its path)."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

__all__ = ["image_grid", "histogram_vs_reference"]


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def image_grid(
    rows: Mapping[str, np.ndarray], path: str, max_columns: int = 10, title: str | None = None, cmap: str = "gray"
) -> str:
    """Draws one row of images per entry of ``rows`` (e.g. targets | reconstructions | NN oracle).

    Args:
      rows: row label -> images ``[n, H, W]`` or ``[n, H, W, C]`` in [0, 1]; the first ``max_columns`` are shown.
      path: output PNG path.
    """
    plt = _plt()
    n_rows = len(rows)
    n_cols = min(max_columns, max(len(v) for v in rows.values()))
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(1.1 * n_cols + 1.2, 1.15 * n_rows + 0.4), squeeze=False)
    for r, (label, images) in enumerate(rows.items()):
        images = np.asarray(images)
        for c in range(n_cols):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c < len(images):
                img = np.clip(images[c], 0, 1)
                if img.ndim == 3 and img.shape[-1] == 1:
                    img = img[..., 0]
                ax.imshow(img, cmap=cmap if img.ndim == 2 else None, vmin=0, vmax=1)
            else:
                ax.axis("off")
            if c == 0:
                ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def histogram_vs_reference(
    values: Mapping[str, Sequence[float]], path: str, xlabel: str, title: str | None = None, bins: int = 40,
    log_x: bool = False,
) -> str:
    """Overlaid histograms of several named samples (e.g. attack MSE vs NN-oracle MSE)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    allv = np.concatenate([np.asarray(v, float).ravel() for v in values.values()])
    allv = allv[np.isfinite(allv)]
    if log_x:
        allv = allv[allv > 0]
        edges = np.geomspace(allv.min(), allv.max(), bins + 1) if len(allv) else bins
        ax.set_xscale("log")
    else:
        edges = np.linspace(allv.min(), allv.max(), bins + 1) if len(allv) else bins
    for name, v in values.items():
        ax.hist(np.asarray(v, float), bins=edges, alpha=0.55, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.legend()
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
