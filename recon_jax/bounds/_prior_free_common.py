"""Argument checks and the noise variance shared by the prior-free bounds (:mod:`recon_jax.bounds.prior_free` and
:mod:`recon_jax.bounds.prior_free_ncc`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from recon_jax import _validation as v

__all__ = ["check_noise_args", "noise_variance"]


def check_noise_args(sigma, clip_norm, steps, validate: bool, sigma_name: str = "sigma") -> None:
    """Checks the DP-SGD arguments the bounds share (None skips one): sigma > 0, clip_norm > 0, steps >= 1."""
    if sigma is not None:
        v.check_positive(sigma_name, sigma, validate)
    if clip_norm is not None:
        v.check_positive("clip_norm", clip_norm, validate)
    if steps is not None:
        v.check_at_least("steps", steps, 1, validate)


def noise_variance(sigma: jax.Array, clip_norm: jax.Array, steps: jax.Array) -> jax.Array:
    """C^2 sigma_eff^2 = C^2 sigma^2 / T, as a product (no overflow for C, sigma up to ~1e150 in float64)."""
    return jnp.square(clip_norm * sigma) / steps
