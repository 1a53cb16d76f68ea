"""Ghost clipping == materialised per-example gradients (vmap(grad)) + clip + sum, in float64."""

import dataclasses

import flax.linen as nn
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from recon_jax.models import ModelFns, balle_cifar_cnn, balle_mnist_mlp, biswas_mlp, from_flax, from_haiku
from recon_jax.shadow import generate_shadow_models
from recon_jax.training import dp_gd, dp_sgd, per_example_gradients, train
from recon_jax.training.ghost import ghost_clipped_sum, ghost_supported


class _SequenceMLP(nn.Module):
    """A dense layer applied to every row of a [B, 4, d/4] input (the Gram-matrix case of ghost norms)."""

    @nn.compact
    def __call__(self, x):
        h = nn.elu(nn.Dense(6)(x.reshape(x.shape[0], 4, -1)))
        return nn.Dense(10, use_bias=False)(h.reshape(x.shape[0], -1))


class _SharedDense(nn.Module):
    """The same dense layer called twice: ghost clipping must not apply."""

    @nn.compact
    def __call__(self, x):
        d = nn.Dense(x.shape[-1])
        return nn.Dense(10)(d(jnp.tanh(d(x))))


def _haiku_mlp():
    return from_haiku(hk.transform(lambda x: hk.nets.MLP([10, 10], activation=jax.nn.elu)(x)))


MODELS = {
    "flax_balle": (lambda: from_flax(balle_mnist_mlp()), 784),
    "haiku_mlp": (_haiku_mlp, 784),
    "flax_biswas_nobias": (lambda: from_flax(biswas_mlp()), 256),
    "flax_sequence": (lambda: from_flax(_SequenceMLP()), 784),
}


def _setup(name, n=24):
    make, d = MODELS[name]
    fns = make()
    x = jax.random.uniform(jax.random.key(1), (n, d), jnp.float64)
    y = jnp.arange(n) % 10
    # larger weights so that some gradients exceed the clip norm and some do not
    params = jax.tree_util.tree_map(lambda a: (3.0 * a).astype(jnp.float64), fns.init(jax.random.key(0), x[:1]))
    return fns, params, x, y


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "flax_balle" else n  # 784-wide: ~20 s
                                  for n in sorted(MODELS)])
def test_clipped_sum_matches_per_example_gradients(x64, name):
    fns, params, x, y = _setup(name)
    assert ghost_supported(fns.tap, params, x)
    weights = (jnp.arange(x.shape[0]) % 3 > 0).astype(jnp.float64)
    g = per_example_gradients(fns, params, x, y)  # naive reference: [B, P]
    norms_ref = np.linalg.norm(np.asarray(g), axis=1)
    clip = float(np.median(norms_ref))  # half the examples are clipped
    ref = np.asarray(weights) @ (np.asarray(g) * np.minimum(1.0, clip / norms_ref)[:, None])
    losses, total, norms = ghost_clipped_sum(fns.tap, params, x, y, clip, weights)
    np.testing.assert_allclose(np.asarray(norms), norms_ref, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ravel_pytree(total)[0]), ref, rtol=1e-11, atol=1e-13)
    logits = fns.apply(params, x)
    np.testing.assert_allclose(np.asarray(losses), np.asarray(
        jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, y[:, None], 1)[:, 0]), rtol=1e-12)


@pytest.mark.parametrize("name", ["flax_balle", "haiku_mlp", "flax_sequence"])
@pytest.mark.parametrize("batch_size", [None, 8])
def test_training_ghost_equals_vmap(x64, name, batch_size):
    fns, params, x, y = _setup(name)
    if batch_size is None:
        alg = dp_gd(0.5, noise_multiplier=1.0, epochs=4)
    else:
        alg = dp_sgd(batch_size, 0.5, noise_multiplier=1.0, epochs=2, shuffle="known", init="fixed")
    out = {}
    for mode in ("ghost", "vmap"):
        a = dataclasses.replace(alg, per_example=mode)
        res = jax.jit(lambda k, a=a: train(fns, a, (x, y), (x[0], y[0]), key=k, init_params=params,
                                           shuffle_key=jax.random.key(5)))(jax.random.key(3))
        out[mode] = np.asarray(ravel_pytree(res.params)[0])
    np.testing.assert_allclose(out["ghost"], out["vmap"], rtol=1e-11, atol=1e-12)


def test_engine_uses_ghost_path_and_matches_vmap(x64):
    fns, params, x, y = _setup("flax_balle", n=20)
    alg = dp_gd(1.0, noise_multiplier=0.5, epochs=3)
    targets = (x[:4], y[:4])
    out = {}
    for mode in ("auto", "vmap"):
        s = generate_shadow_models(fns, dataclasses.replace(alg, per_example=mode), (x[4:], y[4:]), targets,
                                   jax.random.key(2), init_params=params, chunk_size=2, progress=False)
        out[mode] = np.asarray(s.arrays["params"])
    np.testing.assert_allclose(out["auto"], out["vmap"], rtol=1e-11, atol=1e-12)


def test_unsupported_models_fall_back_or_refuse():
    cnn = from_flax(balle_cifar_cnn())
    xc = jnp.zeros((2, 32, 32, 3))
    assert not ghost_supported(cnn.tap, jax.eval_shape(cnn.init, jax.random.key(0), xc[:1]), xc)
    shared = from_flax(_SharedDense())
    xs = jnp.zeros((3, 5))
    assert not ghost_supported(shared.tap, shared.init(jax.random.key(0), xs[:1]), xs)
    # a ModelFns built by hand has no tap: vmap path
    mlp = from_flax(balle_mnist_mlp())
    bare = ModelFns(init=mlp.init, apply=mlp.apply, name="bare")
    assert not ghost_supported(bare.tap, mlp.init(jax.random.key(0), jnp.zeros((1, 784))), jnp.zeros((2, 784)))
    # per_example="ghost" on a model without dense-only parameters is refused with a clear error
    x, y = jax.random.uniform(jax.random.key(1), (6, 5)), jnp.arange(6) % 5
    with pytest.raises(ValueError, match="per_example='ghost'"):
        train(shared, dp_gd(1.0, epochs=1, per_example="ghost"), (x, y), key=jax.random.key(0),
              init_params=shared.init(jax.random.key(0), x[:1]))
    # "auto" falls back to vmap(grad) and still trains
    res = train(shared, dp_gd(1.0, noise_multiplier=1.0, epochs=2), (x, y), key=jax.random.key(0),
                init_params=shared.init(jax.random.key(0), x[:1]))
    assert np.all(np.isfinite(np.asarray(res.losses)))


def test_per_example_argument_validation():
    with pytest.raises(ValueError, match="per_example must be one of"):
        dp_gd(1.0, per_example="fast")
    with pytest.raises(ValueError, match="requires clipping='flat'"):
        dp_gd(1.0, per_example="ghost", clipping="per_layer")
    assert dp_gd(1.0).describe()["per_example"] == "auto"  # every field, defaults included
    assert dp_gd(1.0, per_example="vmap").describe()["per_example"] == "vmap"


@pytest.mark.parametrize("per_model_batches", [False, True])
def test_given_input_norms_and_layout_hint_give_the_same_clipped_sum(x64, per_model_batches):
    # The minibatch path passes the squared row norms of x (gathered from the fixed set's) and the layout hint;
    # both must leave the clipped sum equal, to rounding, to the plain ghost computation and to vmap(grad).
    fns = from_flax(biswas_mlp())
    x = jax.random.normal(jax.random.key(0), (9, 256), jnp.float64)
    y = jnp.arange(9) % 10
    params = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), fns.init(jax.random.key(1), x[:1]))
    w = jnp.array([1.0, 0.0, 1.0, 1.0, 0.5, 1.0, 1.0, 0.0, 1.0])
    sq = jnp.sum(x * x, axis=1)
    _, plain, norms = ghost_clipped_sum(fns.tap, params, x, y, 0.3, w)
    _, given, norms_given = jax.jit(lambda s: ghost_clipped_sum(fns.tap, params, x, y, 0.3, w,
                                                                per_model_batches=per_model_batches,
                                                                input_sq_norms=s))(sq)
    g = per_example_gradients(fns, params, x, y)
    ref = w @ (g * jnp.minimum(1.0, 0.3 / jnp.linalg.norm(g, axis=1))[:, None])
    np.testing.assert_allclose(ravel_pytree(given)[0], ref, rtol=1e-10, atol=1e-12)  # float64 rounding
    np.testing.assert_allclose(ravel_pytree(given)[0], ravel_pytree(plain)[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(norms_given, norms, rtol=1e-12)
    # The given norms are really what the first layer uses: larger ones give larger per-example norms.
    _, _, norms_wrong = ghost_clipped_sum(fns.tap, params, x, y, 0.3, w, input_sq_norms=4.0 * sq)
    assert np.all(np.asarray(norms_wrong) > np.asarray(norms) * (1 + 1e-6))
