"""``jax.random.normal`` / ``jax.random.uniform`` with the same bits, computed in one fused elementwise pass.

JAX draws threefry2x32 bits on CPU through a *rolled* loop (five iterations of four rounds), which XLA:CPU runs as
a ``while`` with copies of the loop state on every iteration, separately from the float transform. The per-step
mechanism noise of DP-SGD (one normal per parameter, per step, per model) then dominates minibatch shadow
training. :func:`normal` and :func:`uniform` evaluate the same threefry2x32 hash (Salmon et al. 2011, 20 rounds,
the constants of ``jax.random``) written out round by round, on the same counters, with the same bits-to-float
map, so the result is *bitwise* what ``jax.random.normal`` / ``jax.random.uniform`` return for the same key
(tested in ``tests/mechanisms/test_threefry.py``), about twice as fast on XLA:CPU because the hash and the float
transform fuse into one loop. On GPU/TPU JAX already lowers the hash unrolled; there this is the same computation.

It applies to typed threefry2x32 keys (``jax.random.key``) with ``jax_threefry_partitionable`` on (JAX's
default) and float32/float64 outputs of fewer than 2**32 elements; anything else is handed to ``jax.random``
itself, so the result is always the ``jax.random`` one.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["normal", "uniform", "fused_path_applies"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotate_left(x, d: int):
    return lax.shift_left(x, np.uint32(d)) | lax.shift_right_logical(x, np.uint32(32 - d))


def _threefry2x32(k1, k2, x1, x2):
    """The threefry2x32 block cipher (20 rounds) of counters ``(x1, x2)`` under key ``(k1, k2)``, unrolled."""
    ks = (k1, k2, k1 ^ k2 ^ _PARITY)
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotate_left(x2, r)
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def fused_path_applies(key, shape, dtype) -> bool:
    """Whether :func:`normal` / :func:`uniform` compute the bits themselves (else they call ``jax.random``).

    >>> fused_path_applies(jax.random.key(0), (3,), jnp.float32)
    True
    >>> fused_path_applies(jax.random.PRNGKey(0), (3,), jnp.float32)  # a raw uint32 key
    False
    """
    if not jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key):
        return False
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if str(jax.random.key_impl(key)) != "threefry2x32" or not jax.config.jax_threefry_partitionable:
        return False
    return np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float64)) and math.prod(shape) < 2**32


def _unit_floats(key, shape, dtype):
    """Floats in [0, 1) from the key's random bits, exactly as ``jax.random.uniform`` forms them."""
    data = jax.random.key_data(key)
    k1, k2 = data[..., 0], data[..., 1]
    lo = lax.iota(np.uint32, math.prod(shape)).reshape(shape)
    b1, b2 = _threefry2x32(k1, k2, jnp.zeros(shape, np.uint32), lo)
    finfo = jnp.finfo(dtype)
    if finfo.bits == 32:
        bits, one = b1 ^ b2, np.array(1.0, np.float32).view(np.uint32)
    else:
        bits = lax.shift_left(b1.astype(np.uint64), np.uint64(32)) | b2.astype(np.uint64)
        one = np.array(1.0, np.float64).view(np.uint64)
    bits = lax.shift_right_logical(bits, np.array(finfo.bits - finfo.nmant, bits.dtype)) | one
    return lax.bitcast_convert_type(bits, dtype) - jnp.array(1.0, dtype)


def uniform(key, shape, dtype=float, minval=0.0, maxval=1.0) -> jax.Array:
    """``jax.random.uniform(key, shape, dtype, minval, maxval)``, bitwise, fused on CPU (module docstring).

    >>> k = jax.random.key(3)
    >>> bool(jnp.all(uniform(k, (5,)) == jax.random.uniform(k, (5,))))
    True
    """
    shape, dtype = tuple(shape), jax.dtypes.canonicalize_dtype(dtype)
    if not fused_path_applies(key, shape, dtype):
        return jax.random.uniform(key, shape, dtype, minval, maxval)
    return _uniform(key, shape, dtype, minval, maxval)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _uniform(key, shape, dtype, minval, maxval):
    # jitted as a whole, as jax.random's own, so that XLA contracts the multiply-add alike (eager op-by-op
    # execution would round differently from jax.random.uniform).
    lo, hi = jnp.asarray(minval, dtype), jnp.asarray(maxval, dtype)
    return lax.max(lo, _unit_floats(key, shape, dtype) * (hi - lo) + lo)


def normal(key, shape, dtype=float) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)`` (real dtypes), bitwise, fused on CPU (module docstring).

    >>> k = jax.random.key(3)
    >>> bool(jnp.all(normal(k, (5,)) == jax.random.normal(k, (5,))))
    True
    """
    shape, dtype = tuple(shape), jax.dtypes.canonicalize_dtype(dtype)
    if not fused_path_applies(key, shape, dtype):
        return jax.random.normal(key, shape, dtype)
    return _normal(key, shape, dtype)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _normal(key, shape, dtype):
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype), dtype=dtype)
    u = _uniform(key, shape, dtype, lo, np.array(1.0, dtype))
    return lax.mul(np.array(np.sqrt(2), dtype), lax.erf_inv(u))
