"""The dithering mechanism of Tygert et al.: Gaussian noise added to released features (their eq. 7).

A model that releases features ``a(x)`` publishes ``a(x) + N(0, sigma^2 I)`` instead (:func:`dither`). The paper
sets ``sigma`` as a multiple of the features' root-mean-square (:func:`feature_rms`), which is why the scale unit
lives with the mechanism. The confidentiality this buys is bounded by :mod:`recon_jax.bounds.hcr` (HCR) and
:mod:`recon_jax.bounds.cramer_rao`; its cost in accuracy is measured by
:func:`recon_jax.bounds.hcr_eval.dithered_accuracy`.

Notation: ``a`` features (any shape), ``sigma`` the dither's standard deviation (``noise_sigma``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from recon_jax._validation import FINITE_NONNEGATIVE, guard, nan_if

__all__ = ["dither", "feature_rms"]


def dither(key: jax.Array, features: jax.Array, noise_sigma: float | jax.Array) -> jax.Array:
    """Dithered features ``a + N(0, sigma^2 I)`` (Tygert et al. eq. 7); usually ``sigma = scale * RMS``.

    Args:
      key: typed PRNG key.
      features: ``[..., d]`` features.
      noise_sigma: ``sigma >= 0``.

    Returns:
      Noisy features, shaped like ``features``.

    Returns NaN features where a traced ``noise_sigma`` is negative, infinite or NaN (under ``jax.jit``).

    Raises:
      ValueError: if ``noise_sigma`` is negative or not finite (concrete values).

    >>> import jax
    >>> dither(jax.random.key(0), jnp.zeros(3), 0.0).tolist()
    [0.0, 0.0, 0.0]
    """
    bad = guard(("noise_sigma", noise_sigma, FINITE_NONNEGATIVE))
    f = jnp.asarray(features)
    return nan_if(bad, f + jnp.asarray(noise_sigma, f.dtype) * jax.random.normal(key, f.shape, f.dtype))


def feature_rms(features: jax.Array) -> jax.Array:
    """Root-mean-square of all entries, ``sqrt(mean(a^2))`` (the paper's dither scale unit).

    Raises:
      ValueError: if ``features`` has no entries (the mean of nothing is undefined).

    >>> float(feature_rms(jnp.array([3.0, 4.0, 0.0, 0.0])))
    2.5
    """
    f = jnp.asarray(features)
    if f.size == 0:
        raise ValueError(f"features must have at least one entry; got shape {f.shape}")
    return jnp.sqrt(jnp.mean(jnp.square(f)))
