"""The noise variance shared by the prior-free bounds (:mod:`recon_jax.bounds.prior_free` and
:mod:`recon_jax.bounds.prior_free_ncc`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["noise_variance"]


def noise_variance(sigma: jax.Array, clip_norm: jax.Array, steps: jax.Array) -> jax.Array:
    """C^2 sigma_eff^2 = C^2 sigma^2 / T, as a product (no overflow for C, sigma up to ~1e150 in float64)."""
    return jnp.square(clip_norm * sigma) / steps
