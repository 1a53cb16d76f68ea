"""The accounting modules' view of :mod:`recon_jax._validation`, plus batch padding for their jitted kernels."""

from __future__ import annotations

import numpy as np

from recon_jax._validation import check_range, check_shapes, concrete_or_none, invalid, nan_if, static_orders  # noqa: F401

__all__ = ["concrete_or_none", "check_range", "check_shapes", "invalid", "nan_if", "static_orders", "pad_batch"]


def pad_batch(*arrays):
    """Flattens equally-shaped arrays and pads them (repeating the last item) to a power-of-two length >= 4.

    Jitted kernels are compiled per input shape; bucketing batch sizes keeps the number of compilations small
    when callers pass grids of varying size. Returns (padded flat arrays, original size).
    """
    import jax.numpy as jnp  # local: keep this module importable without touching jax.numpy at import time

    n = int(np.prod(arrays[0].shape)) if arrays[0].shape else 1
    size = max(4, 1 << (max(n, 1) - 1).bit_length())
    out = []
    for a in arrays:
        flat = jnp.reshape(a, (-1,))
        if size > n and n:
            flat = jnp.concatenate([flat, jnp.broadcast_to(flat[-1:], (size - n,))])
        elif size > n:
            flat = jnp.zeros((size,), flat.dtype)
        out.append(flat)
    return out, n
