"""``jax.random.normal`` / ``jax.random.uniform`` with the same bits, computed in one fused elementwise pass.

JAX draws threefry2x32 bits on CPU through a *rolled* loop (five iterations of four rounds), which XLA:CPU runs as
a ``while`` with copies of the loop state on every iteration, separately from the float transform. The per-step
mechanism noise of DP-SGD (one normal per parameter, per step, per model) then dominates minibatch shadow
training. :func:`normal` and :func:`uniform` evaluate the same threefry2x32 hash (Salmon et al. 2011, 20 rounds,
the constants of ``jax.random``) written out round by round, on the same counters, with the same bits-to-float
map, so the result is *bitwise* what ``jax.random.normal`` / ``jax.random.uniform`` return for the same key
(tested in ``tests/test_threefry.py``), about twice as fast on XLA:CPU because the hash and the float
transform fuse into one loop. On GPU/TPU JAX already lowers the hash unrolled; there this is the same computation.

It applies to typed threefry2x32 keys (``jax.random.key``) with ``jax_threefry_partitionable`` on (JAX's
default) and float32/float64 outputs of fewer than 2**32 elements; anything else is handed to ``jax.random``
itself, so the result is always the ``jax.random`` one.

The same hash gives the other draws of minibatch shadow training, each bitwise its ``jax.random`` counterpart:
:func:`bits32` (``jax.random.bits``), :func:`fold_in` (``jax.random.fold_in``: one unrolled hash, where JAX's CPU
lowering runs a rolled loop per training step) and :func:`permutation` (``jax.random.permutation``: the same
stable sort of random keys, computed from sorts of plain ``uint32`` arrays, which XLA:CPU runs without a
comparator call per comparison).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["normal", "uniform", "bits32", "fold_in", "permutation", "fused_path_applies", "fused_key"]

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
    if not fused_key(key):
        return False
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    return np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float64)) and math.prod(shape) < 2**32


def fused_key(key) -> bool:
    """Whether ``key`` is a typed threefry2x32 key with ``jax_threefry_partitionable`` on: the keys whose
    ``jax.random`` bits this module reproduces (:func:`bits32`, :func:`fold_in`, :func:`permutation`)."""
    return (jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key)
            and str(jax.random.key_impl(key)) == "threefry2x32" and bool(jax.config.jax_threefry_partitionable))


def _hash_pair(key, shape):
    """Both output words of threefry2x32 on the counters ``(0, i)``, ``i = 0 .. prod(shape) - 1`` (row-major)."""
    data = jax.random.key_data(key)
    k1, k2 = data[..., 0], data[..., 1]
    lo = lax.iota(np.uint32, math.prod(shape)).reshape(shape)
    return _threefry2x32(k1, k2, jnp.zeros(shape, np.uint32), lo)


def bits32(key, shape) -> jax.Array:
    """``jax.random.bits(key, shape, jnp.uint32)``, bitwise (the xor of the hash's two words, as JAX forms 32-bit
    draws), in one fused pass; other keys, or 2**32 elements or more, go to ``jax.random.bits``.

    >>> k = jax.random.key(3)
    >>> bool(jnp.all(bits32(k, (5,)) == jax.random.bits(k, (5,), jnp.uint32)))
    True
    """
    shape = tuple(shape)
    if not (fused_key(key) and math.prod(shape) < 2**32):
        return jax.random.bits(key, shape, jnp.uint32)
    b1, b2 = _hash_pair(key, shape)
    return b1 ^ b2


def fold_in(key, data) -> jax.Array:
    """``jax.random.fold_in(key, data)``, bitwise, as one unrolled hash (JAX's CPU lowering runs a rolled loop whose
    per-iteration overhead dominates when a training step folds in its step number); other keys go to
    ``jax.random.fold_in``.

    >>> k = jax.random.key(3)
    >>> bool(jnp.all(jax.random.key_data(fold_in(k, 7)) == jax.random.key_data(jax.random.fold_in(k, 7))))
    True
    """
    if not fused_key(key) or key.shape:
        return jax.random.fold_in(key, data)
    d = jnp.asarray(data)
    if not (jnp.issubdtype(d.dtype, jnp.integer) and d.shape == () and d.dtype.itemsize <= 4):
        return jax.random.fold_in(key, data)
    k = jax.random.key_data(key)
    y1, y2 = _threefry2x32(k[0], k[1], jnp.zeros((), np.uint32), lax.convert_element_type(d, np.uint32))
    return jax.random.wrap_key_data(jnp.stack([y1, y2]), impl=jax.random.key_impl(key))


def _stable_argsort_u32(keys):
    """The permutation that stably sorts ``keys`` ``uint32[n]`` (``n <= 2**16``), i.e. what
    ``lax.sort_key_val(keys, iota)`` returns, from two sorts of single ``uint32`` arrays (XLA:CPU sorts one
    primitive array without calling a comparator, several times faster than sorting a key-value pair): the sorted
    keys give each key's rank ``r_i = #{j: k_j < k_i}`` by binary search, and sorting ``r_i * 2**16 + i`` orders
    by rank, ties by index, exactly the stable order."""
    n = keys.shape[-1]
    srt = lax.sort(keys)
    lo = jnp.zeros((n,), np.uint32)  # count of sorted keys < k_i, by a branchless binary search
    step = 1 << max(0, (n - 1).bit_length())
    while step:
        cand = lo + np.uint32(step)
        probe = srt[jnp.minimum(cand, n) - 1]
        lo = jnp.where((cand <= n) & (probe < keys), cand, lo)
        step >>= 1
    packed = lax.sort(lax.shift_left(lo, np.uint32(16)) | lax.iota(np.uint32, n))
    return (packed & np.uint32(0xFFFF)).astype(np.int32)


def permutation(key, n: int) -> jax.Array:
    """``jax.random.permutation(key, n)``, bitwise, for typed threefry keys and ``n <= 2**16``; otherwise (or on
    GPU/TPU, whose sorts are fast) ``jax.random.permutation`` itself.

    JAX shuffles by stably sorting random ``uint32`` keys (``ceil(3 ln n / ln(2**32 - 1))`` rounds, each with a
    fresh subkey). On XLA:CPU sorting a key-value pair calls a compiled comparator per comparison; here each
    round's stable order comes from sorts of single ``uint32`` arrays instead (:func:`_stable_argsort_u32`), with
    the keys drawn by :func:`bits32`: the same permutation, about three times faster for n = 1,001.

    >>> k = jax.random.key(3)
    >>> bool(jnp.all(permutation(k, 50) == jax.random.permutation(k, 50)))
    True
    """
    n = int(n)
    if not (fused_key(key) and not key.shape and 1 <= n <= 2**16):
        return jax.random.permutation(key, n)

    def cpu():
        rounds = int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))
        x, k = jnp.arange(n), key  # the dtype jax.random.permutation returns (int64 under x64)
        for _ in range(rounds):
            k, sub = jax.random.split(k)
            x = x[_stable_argsort_u32(bits32(sub, (n,)))]
        return x

    return lax.platform_dependent(cpu=cpu, default=lambda: jax.random.permutation(key, n))


def _unit_floats(key, shape, dtype):
    """Floats in [0, 1) from the key's random bits, exactly as ``jax.random.uniform`` forms them."""
    b1, b2 = _hash_pair(key, shape)
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
    # erf_inv reads u twice (log1p(-u^2), and the final u * p(w)); XLA:CPU then recomputes the whole 20-round hash
    # inside both fusions (integer ops count as cheap to duplicate). Dividing by a 1.0 it cannot fold (a division
    # counts as expensive, so its producer is materialised once) computes each hash once: x / 1 == x exactly.
    # CPU only: elsewhere the division is not guaranteed exact and the hash is not duplicated this way.
    u = lax.platform_dependent(u, cpu=lambda u: u / (np.array(1.0, dtype) + np.array(0.0, dtype) * u),
                               default=lambda u: u)
    return lax.mul(np.array(np.sqrt(2), dtype), lax.erf_inv(u))
