"""Evaluation around the HCR bounds of Tygert et al.: the accuracy cost of dithering, and the bound's picture.

- :func:`dithered_accuracy`: a classifier's accuracy on clean and on dithered features, the utility half of the
  paper's trade-off between accuracy and confidentiality.
- :func:`rademacher_perturbation`: the visualisation of their Figs. 2 and 4, every mode of an input moved by its
  HCR standard-deviation bound with a random sign.

Why in the bounds package: :func:`rademacher_perturbation` works in the bounds' coordinates
(:mod:`recon_jax.bounds.dct`), so it cannot live in :mod:`recon_jax.mechanisms` (a lower layer);
:func:`dithered_accuracy` evaluates a classifier under the dithering mechanism
(:mod:`recon_jax.mechanisms.dithering`), which :mod:`recon_jax.metrics` (bottom layer) may not import. Neither
is a bound, so both are kept out of :mod:`recon_jax.bounds.hcr`; :mod:`recon_jax.bounds` exports them.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from recon_jax._validation import check_integer
from recon_jax.bounds.dct import from_coordinates, to_coordinates
from recon_jax.mechanisms.dithering import dither

__all__ = ["dithered_accuracy", "rademacher_perturbation"]


def dithered_accuracy(
    classifier_fn: Callable[[jax.Array], jax.Array],
    features: jax.Array,
    labels: jax.Array,
    noise_sigma: float | jax.Array,
    key: jax.Array,
    num_draws: int = 1,
) -> tuple[jax.Array, jax.Array]:
    """Classifier accuracy on clean features and on dithered features (averaged over ``num_draws``).

    Args:
      classifier_fn: ``[N, d] features -> [N, classes]`` logits.
      features: ``[N, d]`` clean features.
      labels: ``[N]`` integer labels.
      noise_sigma: dither standard deviation ``>= 0``.
      key: typed PRNG key; draw ``t`` uses ``fold_in(key, t)``.
      num_draws: independent dithers averaged.

    Returns:
      ``(clean_accuracy, dithered_accuracy)`` in ``[0, 1]``.

    Raises:
      ValueError: if ``num_draws < 1`` or ``noise_sigma`` is invalid.

    >>> import jax
    >>> f = jnp.array([[5.0, 0.0], [0.0, 5.0]])
    >>> clean, noisy = dithered_accuracy(lambda a: a, f, jnp.array([0, 1]), 0.1, jax.random.key(0))
    >>> float(clean), float(noisy)
    (1.0, 1.0)
    """
    check_integer("num_draws", num_draws, 1)
    features = jnp.asarray(features)
    labels = jnp.asarray(labels)
    clean = jnp.mean(jnp.argmax(classifier_fn(features), axis=-1) == labels)

    def one(t):
        noisy = dither(jax.random.fold_in(key, t), features, noise_sigma)
        return jnp.mean(jnp.argmax(classifier_fn(noisy), axis=-1) == labels)

    noisy = jnp.mean(jax.lax.map(one, jnp.arange(num_draws)))
    return clean, noisy


def rademacher_perturbation(
    key: jax.Array,
    x: jax.Array,
    std_bound: jax.Array,
    *,
    coordinates="dct",
    dct_axes: Sequence[int] | None = None,
) -> jax.Array:
    """Adds ``+-std_bound`` (independent Rademacher signs) to ``x`` in the bound's coordinates.

    The visualisation of Tygert et al. Figs. 2 and 4: move every DCT mode of the (normalised) input by
    its HCR standard-deviation bound with a random sign and transform back; the result shows how much
    uncertainty any unbiased reconstruction must carry. (Undo the input normalisation and clip to
    ``[0, 1]`` for display.)

    Args:
      key: typed PRNG key.
      x: one input (normalised), any shape.
      std_bound: bounds shaped like ``x``, from :func:`~recon_jax.bounds.hcr_search.hcr_bounds` with the same
        coordinates.
      coordinates: as in :func:`~recon_jax.bounds.dct.to_coordinates`.
      dct_axes: DCT axes.

    Returns:
      The perturbed input in the original (pixel) coordinates, shaped like ``x``.

    Raises:
      ValueError: if the shapes differ.

    >>> import jax
    >>> out = rademacher_perturbation(jax.random.key(0), jnp.zeros(4), jnp.ones(4), coordinates="pixel")
    >>> sorted(set(abs(float(t)) for t in out))
    [1.0]
    """
    x = jnp.asarray(x)
    std_bound = jnp.asarray(std_bound)
    if x.shape != std_bound.shape:
        raise ValueError(f"std_bound must have the shape of x {x.shape}; got {std_bound.shape}")
    signs = jax.random.rademacher(key, x.shape, dtype=x.dtype)
    c = to_coordinates(x, coordinates, dct_axes) + signs * std_bound.astype(x.dtype)
    return from_coordinates(c, coordinates, dct_axes)
