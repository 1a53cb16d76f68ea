"""Shadow-model features for reconstructor networks (Balle et al. 2022, Sec. V-A c, VI-C, App. F).

- white-box: the flattened parameters (all layers concatenated, or a subset of layers selected by path with
  :func:`recon_jax.models.select`), see :func:`whitebox_features`;
- black-box: the concatenated logits of the model on a fixed probe set, see :func:`blackbox_features`.

Every coordinate is standardised to zero mean and unit variance with statistics fitted on the *training*
shadow models only (:func:`fit_standardizer`); the same transform is then applied to held-out shadows and
released models. ``scaling="minmax"`` maps each coordinate's training range to [0, 1] instead
(:func:`fit_minmax`; the dimensionality-reduction attack of Lumbut & Ponnoprat, :mod:`recon_jax.attacks.dimred`).
The reconstructor trainer that uses them is :mod:`recon_jax.attacks.reconn`.
"""

from __future__ import annotations

import concurrent.futures
import os
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.models.flatten import Layout, select

__all__ = [
    "Standardizer",
    "as_feature_matrix",
    "fit_standardizer",
    "fit_minmax",
    "standardize",
    "whitebox_features",
    "blackbox_features",
]


class Standardizer(NamedTuple):
    """Per-coordinate affine standardisation ``(features - mean) / scale`` (``[F]`` each)."""

    mean: jax.Array
    scale: jax.Array


def as_feature_matrix(features, name: str = "features"):
    """``features`` as a ``[K, F]`` array (one feature row per model), without copying NumPy, memory-mapped or jax input.

    Args:
      features: the features (anything ``np.asarray`` takes; NumPy and jax arrays are passed through).
      name: the argument's name in the error message.

    Returns:
      The array itself (NumPy / jax) or ``np.asarray(features)``.

    Raises:
      ValueError: if it is not 2-D.

    >>> as_feature_matrix([[1.0, 2.0]]).shape
    (1, 2)
    """
    f = features if isinstance(features, (np.ndarray, jax.Array)) else np.asarray(features)
    if f.ndim != 2:
        raise ValueError(f"{name} must be [K, F] (one feature row per model), got shape {f.shape}")
    return f


def fit_standardizer(features: jax.Array, min_scale: float = 1e-8) -> Standardizer:
    """Fits per-coordinate mean and standard deviation on the *training* shadow features ``[K, F]``.

    Coordinates whose standard deviation is below ``min_scale`` (e.g. parameters no model ever updates) get
    scale 1, so they are centred but not blown up.

    Args:
      features: ``[K, F]`` features of the training shadow models only (NumPy, memory-mapped or jax).
      min_scale: threshold below which a coordinate is treated as constant (>= 0).

    Returns:
      A :class:`Standardizer`.

    >>> import numpy as np
    >>> s = fit_standardizer(np.array([[0., 1.], [2., 1.]]))
    >>> s.mean.tolist(), s.scale.tolist()
    ([1.0, 1.0], [1.0, 1.0])
    """
    f = as_feature_matrix(features)
    if f.shape[0] < 2:
        raise ValueError(f"features needs at least 2 rows to estimate a variance, got {f.shape[0]}")
    if not min_scale >= 0:
        raise ValueError(f"min_scale must be >= 0, got {min_scale}")
    # Host-side float64 accumulation in row chunks: exact enough and never holds a second [K, F] copy. The
    # chunks' statistics are computed by a few threads (NumPy releases the GIL; a 59K x 79,510 store is 19 GB)
    # and merged in row order, so the result is the same whatever the thread count.
    def block_stats(start):
        block = np.asarray(f[start:start + 1024], np.float64)
        bmean = block.mean(axis=0)
        return block.shape[0], bmean, ((block - bmean) ** 2).sum(axis=0)

    starts = range(0, f.shape[0], 1024)
    workers = min(8, os.cpu_count() or 1, len(starts))
    n, mean, m2 = 0, np.zeros(f.shape[1]), np.zeros(f.shape[1])
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        stats = pool.map(block_stats, starts) if workers > 1 else map(block_stats, starts)
        for bn, bmean, bm2 in stats:
            delta = bmean - mean
            tot = n + bn
            mean = mean + delta * bn / tot
            m2 = m2 + bm2 + delta**2 * n * bn / tot
            n = tot
    std = np.sqrt(m2 / n)
    scale = np.where(std > min_scale, std, 1.0)
    dtype = f.dtype if np.issubdtype(np.dtype(f.dtype), np.floating) else np.float32
    dtype = jax.dtypes.canonicalize_dtype(dtype)  # float64 only under jax_enable_x64
    return Standardizer(jnp.asarray(mean, dtype), jnp.asarray(scale, dtype))


def fit_minmax(features: jax.Array) -> Standardizer:
    """Fits a per-coordinate min-max map to [0, 1] on the *training* features ``[K, F]``, as a :class:`Standardizer`.

    ``mean`` holds the minimum and ``scale`` the range (1 for a constant coordinate), so :func:`standardize` maps
    the training rows into [0, 1] (the scaling of the DR attack's reference implementation, Lumbut & Ponnoprat).

    Args:
      features: ``[K, F]`` features of the training shadows only (K >= 1; NumPy, memory-mapped or jax).

    Returns:
      A :class:`Standardizer` in the features' (canonical) float dtype.

    >>> import numpy as np
    >>> s = fit_minmax(np.array([[0., 5.], [2., 5.]]))
    >>> standardize(s, np.array([[1., 5.]])).tolist()
    [[0.5, 0.0]]
    """
    f = as_feature_matrix(features)
    if f.shape[0] < 1:
        raise ValueError(f"features needs at least 1 row, got {f.shape[0]}")
    dtype = f.dtype if np.issubdtype(np.dtype(f.dtype), np.floating) else np.float32
    dtype = jax.dtypes.canonicalize_dtype(dtype)  # float64 only under jax_enable_x64
    low, high = np.full(f.shape[1], np.inf, dtype), np.full(f.shape[1], -np.inf, dtype)
    for start in range(0, f.shape[0], 1024):  # row blocks: never a second copy of a memory map
        block = np.asarray(f[start:start + 1024], dtype)
        low, high = np.minimum(low, block.min(axis=0)), np.maximum(high, block.max(axis=0))
    span = high - low
    return Standardizer(jnp.asarray(low, dtype), jnp.asarray(np.where(span > 0, span, 1).astype(dtype)))


def standardize(standardizer: Standardizer, features: jax.Array) -> jax.Array:
    """Applies a fitted :class:`Standardizer` to ``[K, F]`` (or ``[F]``) features.

    >>> import numpy as np
    >>> s = fit_standardizer(np.array([[0., 1.], [2., 1.]]))
    >>> standardize(s, np.array([[4., 3.]])).tolist()
    [[3.0, 2.0]]
    """
    f = jnp.asarray(features)
    if f.shape[-1] != standardizer.mean.shape[-1]:
        raise ValueError(f"features must have {standardizer.mean.shape[-1]} columns, got shape {f.shape}")
    return (f - standardizer.mean) / standardizer.scale


def whitebox_features(flat_params, layout: Layout | None = None, include: str | Sequence[str] | None = None):
    """White-box features: flattened parameters ``[K, P]``, optionally restricted to layers matched by path.

    Args:
      flat_params: ``[K, P]`` flat parameters (e.g. ``ShadowSet.params``).
      layout: their :class:`~recon_jax.models.Layout` (required with ``include``).
      include: layer paths, prefixes or globs (Balle et al. App. F: ``"Dense_1"``, the second layer only).

    Returns:
      ``[K, F]`` (a view for ``include=None``; NumPy in, NumPy out).

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import balle_mnist_mlp, ravel
    >>> flat, layout = ravel(balle_mnist_mlp().init(jax.random.key(0), jnp.zeros((1, 784)))["params"])
    >>> whitebox_features(flat[None], layout, "Dense_1").shape
    (1, 110)
    """
    f = as_feature_matrix(flat_params, "flat_params")
    if include is None:
        return f
    if layout is None:
        raise ValueError("layout is required to select layers with include")
    if f.shape[1] != layout.size:
        raise ValueError(f"flat_params must have {layout.size} columns (the layout size), got {f.shape[1]}")
    return select(f, layout, include)


def blackbox_features(probe_logits) -> jax.Array:
    """Black-box features (Balle et al. Sec. VI-C): logits on a probe set, concatenated, ``[K, m * C]``.

    >>> import numpy as np
    >>> blackbox_features(np.zeros((3, 200, 10))).shape
    (3, 2000)
    """
    p = probe_logits if isinstance(probe_logits, (np.ndarray, jax.Array)) else np.asarray(probe_logits)
    if p.ndim < 2:
        raise ValueError(f"probe_logits must be [K, m, C] or [K, F], got shape {p.shape}")
    return p.reshape(p.shape[0], -1)
