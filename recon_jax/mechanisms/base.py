"""The noise-mechanism interface shared by DP-GD / DP-SGD and the gradient attacks.

A mechanism turns the sum of the clipped per-example gradients of one step (a flat vector) into the released,
privatised *average* gradient. Training algorithms call it once per step with a fresh key:

    noisy_mean = mechanism.privatize(key, clipped_sum, clip_norm=C, batch_size=B)

Mechanisms are frozen, keyword-only dataclasses: hashable, so they can be static arguments of jitted functions.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from recon_jax import threefry
from recon_jax._validation import (FINITE_NONNEGATIVE, FINITE_POSITIVE, POSITIVE, check, float_dtype, guard, invalid,
                                   nan_if)

__all__ = ["Mechanism", "GaussianMechanism", "NoNoise"]


@runtime_checkable
class Mechanism(Protocol):
    """Protocol: ``privatize(key, clipped_sum, clip_norm, batch_size) -> noisy mean gradient`` (same shape)."""

    def privatize(
        self, key: jax.Array, clipped_sum: jax.Array, clip_norm: float, batch_size: jax.Array | int
    ) -> jax.Array:
        ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoNoise:
    """The identity mechanism: returns the clipped average (clipping without noise)."""

    def privatize(self, key, clipped_sum, clip_norm, batch_size):  # noqa: D102
        del key, clip_norm
        return clipped_sum / batch_size


@dataclasses.dataclass(frozen=True, kw_only=True)
class GaussianMechanism:
    """Gaussian mechanism of DP-SGD (Abadi et al. 2016; Biswas et al. Alg. 1).

    Releases ``(sum_i clip(g_i) + N(0, C^2 sigma^2 I)) / B`` where ``sigma`` is the noise multiplier.

    Args:
      noise_multiplier: sigma, finite and >= 0 (noise standard deviation in units of the clip norm C); may be traced
        (the games of :mod:`recon_jax.attacks.prior_aware` vmap over noise levels): a traced sigma out of range
        releases NaN.

    ``privatize`` refuses a clip norm that is not finite and > 0 (at 0 it would release the sum without noise) and a
    batch size that is not > 0, with a ``ValueError`` (traced: a NaN release); an integer sum is released as floats.

    >>> import jax, jax.numpy as jnp
    >>> m = GaussianMechanism(noise_multiplier=0.0)
    >>> m.privatize(jax.random.key(0), jnp.ones(3), clip_norm=1.0, batch_size=2)
    Array([0.5, 0.5, 0.5], dtype=float32)
    """

    noise_multiplier: float

    def __post_init__(self):
        # a traced noise multiplier (a game vmapped over noise levels) is masked in privatize instead
        check("noise_multiplier", self.noise_multiplier, FINITE_NONNEGATIVE)

    def privatize(self, key, clipped_sum, clip_norm, batch_size):  # noqa: D102
        clipped_sum = jnp.asarray(clipped_sum)
        if not jnp.issubdtype(clipped_sum.dtype, jnp.floating):
            clipped_sum = clipped_sum.astype(float_dtype(clipped_sum))
        # Traced out-of-range values turn the scalars NaN, not the vector through a select: a select over the
        # release would change how XLA fuses the step (its roundings, in the last bit).
        clip_norm = nan_if(guard(("clip_norm", clip_norm, FINITE_POSITIVE)), clip_norm)
        batch_size = nan_if(guard(("batch_size", batch_size, POSITIVE)), batch_size)
        noise = threefry.normal(key, clipped_sum.shape, clipped_sum.dtype)  # = jax.random.normal, bitwise
        released = (clipped_sum + (clip_norm * self.noise_multiplier) * noise) / batch_size
        return nan_if(invalid(self.noise_multiplier, FINITE_NONNEGATIVE), released)
