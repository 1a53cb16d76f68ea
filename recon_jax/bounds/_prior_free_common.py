"""The noise scale shared by the prior-free bounds (:mod:`recon_jax.bounds.prior_free` and
:mod:`recon_jax.bounds.prior_free_ncc`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["noise_std", "noise_variance"]


def noise_std(sigma: jax.Array, clip_norm: jax.Array, steps: jax.Array) -> jax.Array:
    """C sigma_eff = C sigma / sqrt(T), as ``C (sigma / sqrt(T))``: finite whenever the true value is representable
    (``C sigma`` first overflowed float32 for ``C sigma > 3.4e38`` with ``T`` large enough to bring it back)."""
    return clip_norm * (sigma / jnp.sqrt(steps))


def noise_variance(sigma: jax.Array, clip_norm: jax.Array, steps: jax.Array) -> jax.Array:
    """C^2 sigma_eff^2 = C^2 sigma^2 / T, squared from :func:`noise_std`: finite whenever the true value is.

    ``(C sigma)^2 / T`` overflowed float32 for ``C sigma > 1.8e19`` even when the quotient is representable
    (``sigma = 1e20, C = 1, T = 1e10``: exactly 1e30, computed as inf)."""
    return jnp.square(noise_std(sigma, clip_norm, steps))
