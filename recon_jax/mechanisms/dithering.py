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
      ValueError: if ``noise_sigma`` is negative or not finite (concrete values), or if ``features`` is not
        floating-point (integer or boolean features: noise cannot be added in their dtype).

    >>> import jax
    >>> dither(jax.random.key(0), jnp.zeros(3), 0.0).tolist()
    [0.0, 0.0, 0.0]
    """
    f = jnp.asarray(features)
    if not jnp.issubdtype(f.dtype, jnp.inexact):
        raise ValueError(f"features must be floating-point; got dtype {f.dtype} (cast them, e.g. to float32)")
    bad = guard(("noise_sigma", noise_sigma, FINITE_NONNEGATIVE))
    return nan_if(bad, f + jnp.asarray(noise_sigma, f.dtype) * jax.random.normal(key, f.shape, f.dtype))


def feature_rms(features: jax.Array) -> jax.Array:
    """Root-mean-square of all entries, ``sqrt(mean(a^2))`` (the paper's dither scale unit).

    Computed as ``2^e * sqrt(mean((a / 2^e)^2))`` with ``2^e`` the power of two just above ``max|a|`` (1 when every
    entry is 0; exact, so other inputs give the bits ``sqrt(mean(a^2))`` gives), so that squaring neither overflows
    nor underflows: float32 ``[1e30, 1e30]`` gives ``1e30`` (not inf) and ``[1e-30, 1e-30]``
    gives ``1e-30`` (not 0). Integer features are taken as floats.

    Raises:
      ValueError: if ``features`` has no entries (the mean of nothing is undefined).

    >>> float(feature_rms(jnp.array([3.0, 4.0, 0.0, 0.0])))
    2.5
    """
    f = jnp.asarray(features)
    if f.size == 0:
        raise ValueError(f"features must have at least one entry; got shape {f.shape}")
    if not jnp.issubdtype(f.dtype, jnp.inexact):
        f = f.astype(jnp.result_type(float))
    m = jnp.max(jnp.abs(f))
    # Scale by 2^-e with m = mant * 2^e (0.5 <= mant < 1): exact, so ordinary inputs round as sqrt(mean(a^2)) did.
    # Two factors 2^-lo and 2^-hi, each a normal number: 2^-e alone is subnormal for m near the largest float, and
    # XLA on CPU flushes subnormals to zero (so does its division, a multiplication by the reciprocal).
    _, e = jnp.frexp(jnp.where(jnp.isfinite(m), m, jnp.zeros_like(m)))  # m = 0: e = 0, the result is 0
    lo = e // 2
    hi = e - lo
    one = jnp.ones((), f.dtype)
    g = f * jnp.ldexp(one, -lo) * jnp.ldexp(one, -hi)
    rms = jnp.sqrt(jnp.mean(jnp.square(g))) * jnp.ldexp(one, lo) * jnp.ldexp(one, hi)
    return jnp.where(jnp.isinf(m), m, rms)  # NaN features: NaN (from the mean)
