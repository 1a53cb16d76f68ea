"""Ghost clipping == materialised per-example gradients (vmap(grad)) + clip + sum, in float64."""

import dataclasses

import flax.linen as nn
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from recon_jax.models import MLP, ModelFns, balle_cifar_cnn, balle_mnist_mlp, biswas_mlp, from_flax, from_haiku, lenet
from recon_jax.models.losses import softmax_cross_entropy
from recon_jax.shadow import generate_shadow_models
from recon_jax.training import (clipped_gradient_sum, dp_gd, dp_sgd, per_example_gradients, train,
                                use_ghost_clipping)
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


class _DropoutMLP(nn.Module):
    """Dropout behind a ``train`` flag, switched off through ``from_flax(call_kwargs=...)``: the tap gets the flag."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        h = nn.Dropout(0.5, deterministic=not train)(nn.elu(nn.Dense(6)(x)))
        return nn.Dense(10)(h)


def _haiku_mlp():
    return from_haiku(hk.transform(lambda x: hk.nets.MLP([10, 10], activation=jax.nn.elu)(x)))


MODELS = {
    "flax_balle": (lambda: from_flax(balle_mnist_mlp()), 784),
    "haiku_mlp": (_haiku_mlp, 784),
    "flax_biswas_nobias": (lambda: from_flax(biswas_mlp()), 256),
    "flax_sequence": (lambda: from_flax(_SequenceMLP()), 784),
    "flax_dropout_off": (lambda: from_flax(_DropoutMLP(), call_kwargs={"train": False}), 32),
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


@pytest.mark.parametrize("name", ["flax_balle", "haiku_mlp", "flax_sequence", "flax_dropout_off"])
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


class _TimeMajor(nn.Module):
    """A dense layer on a time-major ``[T, B, d]`` view (T = 4): axis 0 of its input is time, not the example."""

    @nn.compact
    def __call__(self, x):  # [B, 12]
        b = x.shape[0]
        h = jnp.tanh(nn.Dense(5)(x.reshape(b, 4, 3).transpose(1, 0, 2)))  # [T, B, 5]
        return nn.Dense(3)(h.transpose(1, 0, 2).reshape(b, -1))


class _BatchCentred(nn.Module):
    """Subtracts the batch mean before an MLP: every row depends on every example (shape-wise a plain MLP)."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(jnp.tanh(nn.Dense(5)(x - jnp.mean(x, axis=0, keepdims=True))))


class _ReverseCumsum(nn.Module):
    """Row i of the first dense input sums examples i..B-1: example 0 only moves row 0, the last example all rows."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(jnp.tanh(nn.Dense(5)(jnp.cumsum(x[::-1], axis=0)[::-1])))


def _naive_clipped_sum(fns, params, x, y, clip, weights):
    """Independent reference: a Python loop of per-example jax.grad, each clipped, weighted and summed."""
    total = 0.0
    for i in range(x.shape[0]):
        g = ravel_pytree(jax.grad(lambda p: jnp.sum(softmax_cross_entropy(fns.apply(p, x[i:i + 1]), y[i:i + 1])))(
            params))[0]
        total = total + float(weights[i]) * np.asarray(g) * min(1.0, clip / float(jnp.linalg.norm(g)))
    return total


def test_time_major_model_with_as_many_steps_as_examples_is_not_ghost(x64):
    # Shapes alone passed this model when T == B, and ghost clipping then clipped and weighted time steps: the
    # clipped sum differed from the per-example one and a weight-0 example still moved it.
    fns = from_flax(_TimeMajor())
    x = 2.0 * jax.random.normal(jax.random.key(1), (4, 12), jnp.float64)  # B == T == 4
    y = jnp.arange(4) % 3
    params = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), fns.init(jax.random.key(0), x[:1]))
    clip = 0.01  # every example's gradient is clipped
    w = jnp.array([0.0, 1.0, 1.0, 1.0])  # example 0 does not count
    _, auto = clipped_gradient_sum(fns, params, x, y, clip_norm=clip, weights=w, per_example="auto")
    ref = _naive_clipped_sum(fns, params, x, y, clip, w)
    np.testing.assert_allclose(np.asarray(auto), ref, rtol=1e-10, atol=1e-14)  # float64 rounding
    # a weight-0 example cannot change the release, whatever it is
    x2, y2 = x.at[0].set(-5.0 * x[0]), y.at[0].set(2)
    _, auto2 = clipped_gradient_sum(fns, params, x2, y2, clip_norm=clip, weights=w, per_example="auto")
    np.testing.assert_array_equal(np.asarray(auto2), np.asarray(auto))
    assert not ghost_supported(fns.tap, params, x)
    assert not use_ghost_clipping(fns, params, x, "auto")
    # also inside jit (abstract parameters and inputs; a fresh tap, so that the cached verdict is not what answers)
    fresh = from_flax(_TimeMajor())
    assert not jax.jit(lambda p, xx: jnp.asarray(ghost_supported(fresh.tap, p, xx)))(params, x)
    with pytest.raises(ValueError, match="per_example='ghost'"):
        clipped_gradient_sum(fns, params, x, y, clip_norm=clip, per_example="ghost")


@pytest.mark.parametrize("model", [_BatchCentred, _ReverseCumsum])
def test_models_that_mix_examples_are_not_ghost(model):
    fns = from_flax(model())
    x = jax.random.normal(jax.random.key(1), (5, 6))
    params = fns.init(jax.random.key(0), x[:1])
    assert not ghost_supported(fns.tap, params, x)


def test_per_example_models_stay_on_the_ghost_path():
    # Every model the shape test accepted and that is per-example keeps ghost clipping, for concrete, abstract and
    # traced parameters, any batch size (B = 4 included: _SequenceMLP has 4 rows per example).
    cases = {**{name: make for name, (make, _) in MODELS.items()}, "zoo_mlp": lambda: from_flax(MLP(features=(7, 5, 3)))}
    dims = {**{name: d for name, (_, d) in MODELS.items()}, "zoo_mlp": 12}
    for name, make in cases.items():
        for b in (1, 2, 4, 7):
            x = jax.random.uniform(jax.random.key(b), (b, dims[name]))
            params = make().init(jax.random.key(0), x[:1])
            # a fresh model (tap) for each, so that each is judged afresh, not answered from the verdict cache
            assert ghost_supported(make().tap, params, x), (name, b)
            fns = make()
            assert ghost_supported(fns.tap, jax.eval_shape(fns.init, jax.random.key(0), x[:1]), x), (name, b)
            fns = make()
            assert jax.jit(lambda p, xx: jnp.asarray(ghost_supported(fns.tap, p, xx)))(params, x), (name, b)
            assert use_ghost_clipping(make(), params, x, "auto"), (name, b)
    for cnn in (balle_cifar_cnn(), lenet()):  # convolutions: vmap, as before
        fns = from_flax(cnn)
        xc = jnp.zeros((4, 32, 32, 3))
        assert not ghost_supported(fns.tap, jax.eval_shape(fns.init, jax.random.key(0), xc[:1]), xc)


def test_ghost_verdict_is_cached_per_tap_and_shapes():
    """The games ask on every call; the probe's forward passes run once per tap, tree, shapes and dtypes."""
    fns = from_flax(MLP(features=(7, 3)))
    runs = []

    def tap(*args):
        runs.append(1)
        return fns.tap(*args)

    x = jax.random.uniform(jax.random.key(1), (4, 12))
    params = fns.init(jax.random.key(0), x[:1])
    assert ghost_supported(tap, params, x)
    first = len(runs)
    assert first >= 3  # the shape trace and the probe's forward passes
    assert ghost_supported(tap, params, 2.0 * x)  # other values, same shapes: answered from the cache
    assert ghost_supported(tap, jax.eval_shape(fns.init, jax.random.key(0), x[:1]), x)
    assert len(runs) == first
    assert ghost_supported(tap, params, x[:3])  # another batch size is judged afresh
    assert len(runs) > first
    # another input width (the tap cannot run these parameters on it) gets its own verdict, not the cached True
    assert not ghost_supported(tap, params, jnp.zeros((4, 13)))
    assert ghost_supported(tap, params, x)


class _UnhashableTap:
    """A tap object with value equality and therefore no hash: judged afresh on every call."""

    __hash__ = None

    def __init__(self, tap):
        self.tap, self.runs = tap, 0

    def __eq__(self, other):
        return isinstance(other, _UnhashableTap) and other.tap is self.tap

    def __call__(self, *args):
        self.runs += 1
        return self.tap(*args)


def test_ghost_verdict_of_an_unhashable_tap_is_not_cached():
    fns = from_flax(MLP(features=(7, 3)))
    x = jnp.ones((4, 12))
    params = fns.init(jax.random.key(0), x[:1])
    tap = _UnhashableTap(fns.tap)
    assert ghost_supported(tap, params, x)
    first = tap.runs
    assert ghost_supported(tap, params, x)
    assert tap.runs == 2 * first
