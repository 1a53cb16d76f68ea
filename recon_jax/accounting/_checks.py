"""Input validation shared by the accounting modules (skipped for traced values, which cannot be inspected)."""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np

__all__ = ["concrete_or_none", "check_range", "static_orders"]


def concrete_or_none(x) -> np.ndarray | None:
    """Returns ``x`` as a float64 NumPy array if it is concrete, ``None`` if it is a tracer."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x, dtype=np.float64)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError, TypeError):
        return None


def check_range(name: str, x, ok: Callable[[np.ndarray], np.ndarray], allowed: str) -> None:
    """Raises ``ValueError`` naming ``name`` and the ``allowed`` range if a concrete ``x`` violates ``ok``."""
    arr = concrete_or_none(x)
    if arr is None:
        return
    good = np.asarray(ok(arr), dtype=bool)
    if not np.all(good):
        bad = arr[~good] if arr.ndim else arr
        raise ValueError(f"{name} must be {allowed}; got {np.ravel(bad)[:4].tolist()}")


def static_orders(orders, name: str = "orders") -> np.ndarray:
    """Validates concrete RDP orders (> 1, finite) and returns them as a float64 array of shape [n] or []."""
    arr = concrete_or_none(orders)
    if arr is None:
        raise ValueError(
            f"{name} must be concrete (a Python/NumPy array, not a traced value): the RDP orders fix the "
            "static shape of the series; jit over the mechanism parameters instead"
        )
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a scalar or a 1-D array; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or not np.all(arr > 1.0):
        bad = np.ravel(arr)[np.ravel(~(arr > 1.0) | ~np.isfinite(arr))]
        raise ValueError(f"{name} must be finite and > 1; got {bad[:4].tolist()}")
    return arr


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
