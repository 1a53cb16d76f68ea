"""The fused threefry samplers return exactly what ``jax.random.normal`` / ``jax.random.uniform`` return.

The reference is ``jax.random`` itself (a separate implementation: JAX's rolled-loop threefry lowering), compared
bit for bit, eagerly, under ``jit`` and under ``vmap`` over keys (how the shadow engine draws DP noise).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.mechanisms import GaussianMechanism
from recon_jax.mechanisms.threefry import fused_path_applies, normal, uniform

SHAPES = [(), (1,), (7,), (3, 5), (2, 3, 4), (7960,)]


def _same_bits(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(np.asarray(a), np.asarray(b)))


@pytest.mark.parametrize("shape", SHAPES)
def test_normal_and_uniform_bitwise_float32(shape):
    for seed in range(4):
        k = jax.random.key(seed)
        assert fused_path_applies(k, shape, jnp.float32)
        assert _same_bits(normal(k, shape, jnp.float32), jax.random.normal(k, shape, jnp.float32))
        assert _same_bits(uniform(k, shape, jnp.float32, -2.0, 3.0), jax.random.uniform(k, shape, jnp.float32, -2.0, 3.0))
        assert _same_bits(uniform(k, shape), jax.random.uniform(k, shape))


@pytest.mark.parametrize("shape", [(), (5,), (4, 3)])
def test_normal_and_uniform_bitwise_float64(x64, shape):
    for seed in range(3):
        k = jax.random.key(seed)
        assert fused_path_applies(k, shape, jnp.float64)
        assert _same_bits(normal(k, shape), jax.random.normal(k, shape))  # default dtype: float64 under x64
        assert normal(k, shape).dtype == jnp.float64
        assert _same_bits(uniform(k, shape, jnp.float64, 0.5, 1.5), jax.random.uniform(k, shape, jnp.float64, 0.5, 1.5))


def test_bitwise_under_jit_and_vmap():
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(11), i))(jnp.arange(6))
    ours = jax.jit(jax.vmap(lambda k: normal(k, (300,), jnp.float32)))(keys)
    ref = jax.jit(jax.vmap(lambda k: jax.random.normal(k, (300,), jnp.float32)))(keys)
    assert _same_bits(ours, ref)
    ours = jax.jit(jax.vmap(lambda k: uniform(k, (1001,), jnp.float32)))(keys)
    ref = jax.jit(jax.vmap(lambda k: jax.random.uniform(k, (1001,), jnp.float32)))(keys)
    assert _same_bits(ours, ref)


def test_other_keys_and_dtypes_fall_back_to_jax_random():
    raw = jax.random.PRNGKey(4)  # legacy uint32[2] key: not a typed key
    assert not fused_path_applies(raw, (3,), jnp.float32)
    assert _same_bits(normal(raw, (3,), jnp.float32), jax.random.normal(raw, (3,), jnp.float32))
    rbg = jax.random.key(4, impl="rbg")
    assert not fused_path_applies(rbg, (3,), jnp.float32)
    assert _same_bits(normal(rbg, (3,), jnp.float32), jax.random.normal(rbg, (3,), jnp.float32))
    k = jax.random.key(4)
    assert not fused_path_applies(k, (3,), jnp.bfloat16)
    assert _same_bits(normal(k, (3,), jnp.bfloat16), jax.random.normal(k, (3,), jnp.bfloat16))


def test_gaussian_mechanism_noise_is_jax_random_normal():
    # The mechanism draws with the fused sampler; its release must equal the formula with jax.random.normal.
    k, s = jax.random.key(2), jnp.linspace(-1.0, 1.0, 50, dtype=jnp.float32)
    got = jax.jit(lambda k: GaussianMechanism(noise_multiplier=0.7).privatize(k, s, 1.5, 4.0))(k)
    want = jax.jit(lambda k: (s + (1.5 * 0.7) * jax.random.normal(k, s.shape, s.dtype)) / 4.0)(k)
    assert _same_bits(got, want)
