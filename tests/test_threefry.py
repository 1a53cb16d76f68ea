"""The fused threefry samplers return exactly what ``jax.random.normal`` / ``jax.random.uniform`` return.

The reference is ``jax.random`` itself (a separate implementation: JAX's rolled-loop threefry lowering), compared
bit for bit, eagerly, under ``jit`` and under ``vmap`` over keys (how the shadow engine draws DP noise).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.mechanisms import GaussianMechanism
from recon_jax.threefry import fused_path_applies, normal, uniform

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


# --- bits, fold_in and permutation: bitwise jax.random ---------------------------------------------------------

from jax import lax  # noqa: E402

from recon_jax import threefry  # noqa: E402


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (1001,)])
def test_bits32_is_jax_random_bits(shape):
    for seed in range(3):
        k = jax.random.key(seed)
        assert _same_bits(threefry.bits32(k, shape), jax.random.bits(k, shape, jnp.uint32))


def test_fold_in_is_jax_random_fold_in_for_every_data_type():
    k = jax.random.key(9)
    for d in [0, 1, 7, 2**31 - 1, jnp.int32(-5), jnp.uint32(2**32 - 1), jnp.int16(3), jnp.uint8(200)]:
        assert _same_bits(jax.random.key_data(threefry.fold_in(k, d)), jax.random.key_data(jax.random.fold_in(k, d)))
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(11), i))(jnp.arange(6))
    ours = jax.jit(jax.vmap(threefry.fold_in))(keys, jnp.arange(6) * 1000)
    ref = jax.vmap(jax.random.fold_in)(keys, jnp.arange(6) * 1000)
    assert _same_bits(jax.random.key_data(ours), jax.random.key_data(ref))
    raw = jax.random.PRNGKey(4)  # legacy raw key: jax.random itself
    assert _same_bits(threefry.fold_in(raw, 3), jax.random.fold_in(raw, 3))


# n = 1626 is the first size JAX shuffles in two sort rounds (ceil(3 ln n / ln(2**32 - 1)) = 2); 2**16 is the
# largest the packed sort handles, above it the call is jax.random.permutation itself.
@pytest.mark.parametrize("n", [1, 2, 3, 10, 1001, 1625, 1626, 5000, 2**16, 2**16 + 1])
def test_permutation_is_jax_random_permutation(n):
    for seed in range(2):
        k = jax.random.key(seed)
        assert _same_bits(jax.jit(threefry.permutation, static_argnums=1)(k, n), jax.random.permutation(k, n))


def test_permutation_under_vmap_as_the_trainer_draws_it():
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(5), i))(jnp.arange(8))
    ours = jax.jit(jax.vmap(lambda k: threefry.permutation(k, 1001)))(keys)
    ref = jax.vmap(lambda k: jax.random.permutation(k, 1001))(keys)
    assert _same_bits(ours, ref)
    assert sorted(np.asarray(ours[0]).tolist()) == list(range(1001))


def test_stable_argsort_breaks_ties_by_index_like_sort_key_val():
    rng = np.random.default_rng(0)
    for high, n in [(3, 300), (50, 1001), (2**32 - 1, 999), (1, 17)]:
        keys = jnp.asarray(rng.integers(0, high, n, dtype=np.uint64).astype(np.uint32))
        ref = lax.sort_key_val(keys, jnp.arange(n, dtype=jnp.int32))[1]  # stable by default
        assert _same_bits(threefry._stable_argsort_u32(keys), ref)
    top = jnp.full((40,), 2**32 - 1, jnp.uint32)  # the largest key, every one tied
    assert _same_bits(threefry._stable_argsort_u32(top), jnp.arange(40, dtype=jnp.int32))


def test_dp_step_computes_each_noise_hash_once_on_cpu():
    """In a DP-SGD step the noise feeds several fusions; without the division in ``_normal`` XLA:CPU recomputed
    the 20-round hash inside each of them (100 rotations for this step, 5 hashes per normal). The compiled step
    must hold the hash once: 20 rotations (``shift-left``), the step's only ones."""
    if jax.default_backend() != "cpu":
        pytest.skip("the CPU lowering is what is checked")
    from recon_jax import models, training

    fns = models.from_flax(models.balle_mnist_mlp())
    alg = training.dp_sgd(8, 1.0, noise_multiplier=1.0, momentum=0.9)
    step = training.make_train_step(fns, alg)
    x, y = jnp.zeros((4, 8, 784)), jnp.zeros((4, 8), jnp.int32)
    params = jax.vmap(lambda k: fns.init(k, x[0, :1]))(jax.random.split(jax.random.key(0), 4))
    state = jax.vmap(lambda p: training.TrainState.create(p, alg))(params)
    f = jax.jit(jax.vmap(lambda s, a, b, k: step(s, training.Batch(a, b), k)))
    hlo = f.lower(state, x, y, jax.random.split(jax.random.key(1), 4)).compile().as_text()
    assert hlo.count("shift-left(") == 20


def test_permutation_under_x64_has_jax_dtype(x64):
    k = jax.random.key(2)
    assert _same_bits(jax.jit(threefry.permutation, static_argnums=1)(k, 1001), jax.random.permutation(k, 1001))
