"""Informed-adversary data splits (Balle et al., Sec. V-A).

Two layouts:

- :func:`informed_splits`: disjoint fixed set, shadow targets, evaluation targets and a held-out set; the
  adversary's pool (what the NN oracle searches) is the fixed set plus the shadow targets.
- :func:`pool_splits`: the paper's layout (Sec. V-A a, Table V, Fig. 3): every record but the evaluation
  targets belongs to the adversary's pool (MNIST train + test: 70K records, 1K targets, a 69K pool); the fixed
  set is the first ``fixed_size`` pool records and the shadow targets the last ``num_shadow`` (59K with a 10K
  fixed set), so a 1K fixed set is a subset of the 10K one and the shadow targets do not depend on it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from recon_jax._validation import check_integer
from recon_jax.io import seed_from_key

__all__ = ["InformedSplits", "informed_splits", "pool_splits"]


class InformedSplits(NamedTuple):
    """Disjoint index sets into the data, and the corresponding arrays.

    ``fixed_*``: the fixed set D- known to the adversary; ``shadow_*``: the pool of shadow targets (one
    shadow model each); ``target_*``: evaluation targets (one released model each); ``eval_*``: an optional
    held-out set (e.g. for test accuracy). ``*_idx`` index the arrays passed in. ``pool_*``: every record
    the adversary knows, the NN oracle's search set (fixed set + shadow targets for :func:`informed_splits`,
    all records but the evaluation targets for :func:`pool_splits`).
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
    pool_images: np.ndarray | None = None
    pool_labels: np.ndarray | None = None
    pool_idx: np.ndarray | None = None


def _seed_from(key_or_seed) -> int:
    """A NumPy seed: a non-negative int as it is; a jax key (typed or raw data) by :func:`recon_jax.io.seed_from_key`."""
    if isinstance(key_or_seed, (int, np.integer)):
        if key_or_seed < 0:
            raise ValueError(f"key_or_seed must be a non-negative int or a jax key, got {key_or_seed}")
        return int(key_or_seed)
    if isinstance(key_or_seed, jax.Array):
        return seed_from_key(key_or_seed)
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
      key_or_seed: an int seed or a jax key. A key is used up here (drawn from by
        :func:`recon_jax.io.seed_from_key`): give the training functions another key, e.g. a ``fold_in``
        of a common parent, never this one.

    Raises:
      ValueError: sizes that are not integers (floats and bools included) or negative, mismatched lengths, or
        sizes adding up to more than N.

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
    fixed_size, shadow_size, target_size, eval_size = (check_integer(name, value, 0) for name, value in sizes.items())
    total = fixed_size + shadow_size + target_size + eval_size
    n = images.shape[0]
    if total > n:
        raise ValueError(
            f"fixed_size + shadow_size + target_size + eval_size = {total} exceeds the {n} examples available"
        )
    perm = np.random.default_rng(_seed_from(key_or_seed)).permutation(n)
    bounds = np.cumsum([0, fixed_size, shadow_size, target_size, eval_size])
    idx = [np.sort(perm[bounds[i] : bounds[i + 1]]) for i in range(4)]
    pool = np.sort(np.concatenate([idx[0], idx[1]]))
    return _splits(images, labels, *idx, pool)


def _splits(images, labels, fixed, shadow, target, evals, pool) -> InformedSplits:
    arrays = [a for i in (fixed, shadow, target, evals) for a in (images[i], labels[i])]
    return InformedSplits(*arrays, fixed, shadow, target, evals, images[pool], labels[pool], pool)


def pool_splits(images: np.ndarray, labels: np.ndarray, *, fixed_size: int, num_shadow: int, num_targets: int,
                eval_size: int = 0, key_or_seed: int | jax.Array = 0) -> InformedSplits:
    """The paper's layout: evaluation targets apart, every other record in the adversary's pool.

    A seeded permutation puts the first ``num_targets`` records aside as evaluation targets; the remaining
    ``N - num_targets`` form the adversary's pool. The fixed set is the first ``fixed_size`` pool records, the
    shadow targets the last ``num_shadow``; pool records in neither are known to the adversary (the NN oracle
    searches them) but train no model. The held-out set (released models' test accuracy) is the ``eval_size``
    pool records after the fixed set: never in a released model's training set, but it may overlap the shadow
    targets when the pool has fewer than ``eval_size`` unused records.

    With MNIST train + test (70,000 records): ``fixed_size=10_000, num_shadow=59_000, num_targets=1_000`` is
    Balle et al.'s Table V, and a 69K pool for the NN oracle (Fig. 3a).

    Args:
      images: ``[N, ...]``.
      labels: ``[N]``.
      fixed_size: |D-| (>= 0).
      num_shadow: shadow targets (>= 0); ``fixed_size + num_shadow <= N - num_targets``.
      num_targets: evaluation targets (>= 1).
      eval_size: held-out records (>= 0, at most ``N - num_targets - fixed_size``).
      key_or_seed: an int seed or a jax key. A key is used up here (drawn from by
        :func:`recon_jax.io.seed_from_key`): give the training functions another key, e.g. a ``fold_in``
        of a common parent, never this one.

    Returns:
      :class:`InformedSplits` with ``pool_*`` set.

    Raises:
      ValueError: sizes that are not integers (floats and bools included) or out of range, mismatched lengths,
        or sizes that do not fit.

    >>> import numpy as np
    >>> s = pool_splits(np.zeros((20, 2)), np.arange(20), fixed_size=4, num_shadow=10, num_targets=3,
    ...                 eval_size=5, key_or_seed=0)
    >>> len(s.fixed_idx), len(s.shadow_idx), len(s.target_idx), len(s.eval_idx), len(s.pool_idx)
    (4, 10, 3, 5, 17)
    >>> bool(np.isin(s.target_idx, s.pool_idx).any()), bool(np.isin(s.fixed_idx, s.pool_idx).all())
    (False, True)
    """
    images, labels = np.asarray(images), np.asarray(labels)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"images and labels must have the same length, got {images.shape[0]} and {labels.shape[0]}")
    sizes = {"fixed_size": fixed_size, "num_shadow": num_shadow, "num_targets": num_targets, "eval_size": eval_size}
    fixed_size, num_shadow, num_targets, eval_size = (
        check_integer(name, value, 1 if name == "num_targets" else 0) for name, value in sizes.items())
    n = images.shape[0]
    n_pool = n - num_targets
    if n_pool < 0 or fixed_size + num_shadow > n_pool:
        raise ValueError(f"fixed_size + num_shadow = {fixed_size + num_shadow} must be <= N - num_targets = "
                         f"{n_pool} (N = {n})")
    if fixed_size + eval_size > n_pool:
        raise ValueError(f"eval_size must be <= N - num_targets - fixed_size = {n_pool - fixed_size}, got {eval_size}")
    perm = np.random.default_rng(_seed_from(key_or_seed)).permutation(n)
    target, pool = perm[:num_targets], perm[num_targets:]
    fixed, shadow = pool[:fixed_size], pool[n_pool - num_shadow:]
    evals = pool[fixed_size:fixed_size + eval_size]
    return _splits(images, labels, *(np.sort(i) for i in (fixed, shadow, target, evals, pool)))
