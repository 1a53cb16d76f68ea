"""Informed-adversary data splits (Balle et al., Sec. V-A)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

__all__ = ["InformedSplits", "informed_splits"]


class InformedSplits(NamedTuple):
    """Disjoint index sets into the data, and the corresponding arrays.

    ``fixed_*``: the fixed set D- known to the adversary; ``shadow_*``: the pool of shadow targets (one
    shadow model each); ``target_*``: evaluation targets (one released model each); ``eval_*``: an optional
    held-out set (e.g. for test accuracy). ``*_idx`` index the arrays passed in.
    """

    fixed_images: np.ndarray
    fixed_labels: np.ndarray
    shadow_images: np.ndarray
    shadow_labels: np.ndarray
    target_images: np.ndarray
    target_labels: np.ndarray
    eval_images: np.ndarray
    eval_labels: np.ndarray
    fixed_idx: np.ndarray
    shadow_idx: np.ndarray
    target_idx: np.ndarray
    eval_idx: np.ndarray


def _seed_from(key_or_seed) -> int:
    if isinstance(key_or_seed, (int, np.integer)):
        if key_or_seed < 0:
            raise ValueError(f"key_or_seed must be a non-negative int or a jax key, got {key_or_seed}")
        return int(key_or_seed)
    if isinstance(key_or_seed, jax.Array):
        data = jax.random.key_data(key_or_seed) if jax.dtypes.issubdtype(key_or_seed.dtype, jax.dtypes.prng_key) else key_or_seed
        return int(np.asarray(data, dtype=np.uint64).ravel().sum() % (2**63))
    raise ValueError(f"key_or_seed must be a non-negative int or a jax key, got {type(key_or_seed).__name__}")


def informed_splits(
    images: np.ndarray,
    labels: np.ndarray,
    fixed_size: int,
    shadow_size: int,
    target_size: int,
    eval_size: int = 0,
    key_or_seed: int | jax.Array = 0,
) -> InformedSplits:
    """Splits a dataset into disjoint fixed set, shadow-target pool, evaluation targets and held-out set.

    Deterministic for a given seed (a NumPy permutation of the indices).

    Args:
      images: ``[N, ...]``.
      labels: ``[N]``.
      fixed_size: |D-| (>= 0).
      shadow_size: number of shadow targets (>= 0).
      target_size: number of evaluation targets (>= 0).
      eval_size: size of the optional held-out set (>= 0).
      key_or_seed: an int seed or a jax key.

    Raises:
      ValueError: negative sizes, mismatched lengths, or sizes adding up to more than N.

    >>> import numpy as np
    >>> s = informed_splits(np.zeros((10, 2)), np.arange(10), 4, 3, 2, 1, key_or_seed=0)
    >>> len(s.fixed_idx), len(s.shadow_idx), len(s.target_idx), len(s.eval_idx)
    (4, 3, 2, 1)
    >>> sorted(np.concatenate([s.fixed_idx, s.shadow_idx, s.target_idx, s.eval_idx]).tolist()) == list(range(10))
    True
    """
    images, labels = np.asarray(images), np.asarray(labels)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"images and labels must have the same length, got {images.shape[0]} and {labels.shape[0]}")
    sizes = {"fixed_size": fixed_size, "shadow_size": shadow_size, "target_size": target_size, "eval_size": eval_size}
    for name, value in sizes.items():
        if int(value) != value or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value}")
    total = sum(int(v) for v in sizes.values())
    n = images.shape[0]
    if total > n:
        raise ValueError(
            f"fixed_size + shadow_size + target_size + eval_size = {total} exceeds the {n} examples available"
        )
    perm = np.random.default_rng(_seed_from(key_or_seed)).permutation(n)
    bounds = np.cumsum([0, fixed_size, shadow_size, target_size, eval_size])
    idx = [np.sort(perm[bounds[i] : bounds[i + 1]]) for i in range(4)]
    return InformedSplits(
        images[idx[0]], labels[idx[0]], images[idx[1]], labels[idx[1]], images[idx[2]], labels[idx[2]],
        images[idx[3]], labels[idx[3]], *idx,
    )
