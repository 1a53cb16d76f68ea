"""The named key streams of one model's training: every random draw of :func:`recon_jax.training.train` derives
from the model's ``key`` (never carried, never reused) through these functions.

- random initialisation: ``init_key(key) = fold_in(key, INIT_STREAM)`` (``INIT_STREAM = 0``);
- shuffling: the base is ``shuffle_stream(key) = fold_in(key, SHUFFLE_STREAM)`` (``SHUFFLE_STREAM = 1``) for fresh
  shuffling, or the shared ``shuffle_key`` for known shuffling; epoch e permutes the points with
  ``epoch_shuffle_key(base, e) = fold_in(base, e)``, and Poisson step s of epoch e draws its batch with
  ``fold_in(epoch_shuffle_key(base, e), s)``;
- mechanism noise of step t (counted from 0 over all epochs): ``noise_key(key, t) = fold_in(noise_stream(key), t)``
  with ``noise_stream(key) = fold_in(key, NOISE_STREAM)`` (``NOISE_STREAM = 2``); this is the key the training
  step receives (:func:`recon_jax.training.make_train_step`).

The stream numbers are part of the library's reproducibility contract: stores and committed results were made
with them, so they never change. Each fold is :func:`recon_jax.threefry.fold_in`, bitwise
``jax.random.fold_in`` (one unrolled hash instead of JAX's rolled loop on CPU).
"""

from __future__ import annotations

import jax

from recon_jax import threefry

__all__ = ["INIT_STREAM", "SHUFFLE_STREAM", "NOISE_STREAM", "init_key", "shuffle_stream", "epoch_shuffle_key",
           "noise_stream", "noise_key"]

INIT_STREAM = 0
SHUFFLE_STREAM = 1
NOISE_STREAM = 2


def init_key(key: jax.Array) -> jax.Array:
    """The random-initialisation key of a model: ``fold_in(key, INIT_STREAM)``.

    >>> k = jax.random.key(0)
    >>> bool(jax.random.key_data(init_key(k)).tolist() == jax.random.key_data(jax.random.fold_in(k, 0)).tolist())
    True
    """
    return threefry.fold_in(key, INIT_STREAM)


def shuffle_stream(key: jax.Array) -> jax.Array:
    """The base of a model's own (fresh) shuffling: ``fold_in(key, SHUFFLE_STREAM)``."""
    return threefry.fold_in(key, SHUFFLE_STREAM)


def epoch_shuffle_key(base: jax.Array, epoch) -> jax.Array:
    """The shuffling key of ``epoch``: ``fold_in(base, epoch)``, ``base`` from :func:`shuffle_stream` (fresh) or
    the shared ``shuffle_key`` (known)."""
    return threefry.fold_in(base, epoch)


def noise_stream(key: jax.Array) -> jax.Array:
    """The base of a model's mechanism noise: ``fold_in(key, NOISE_STREAM)``."""
    return threefry.fold_in(key, NOISE_STREAM)


def noise_key(key: jax.Array, step) -> jax.Array:
    """The mechanism-noise key of training step ``step`` (counted from 0 over all epochs):
    ``fold_in(noise_stream(key), step)``; what :func:`recon_jax.training.train` passes to the training step.

    >>> k = jax.random.key(0)
    >>> ref = jax.random.fold_in(jax.random.fold_in(k, 2), 7)
    >>> bool(jax.random.key_data(noise_key(k, 7)).tolist() == jax.random.key_data(ref).tolist())
    True
    """
    return threefry.fold_in(noise_stream(key), step)
