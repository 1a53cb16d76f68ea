"""Gram-matrix training (recon_jax.training.gram) against direct training, and when it applies."""

import flax.linen as nn
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import models, shadow, testing, training
from recon_jax.training.gram import fixed_set_gram, gram_saves_work, gram_supported, train_gram


def _data(n=24, d=10, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + 1, d)).astype(dtype)
    y = (np.arange(n + 1) % 3).astype(np.int32)
    return (x[1:], y[1:]), (x[0], y[0])


def _max_diff(a, b):
    return max(float(jnp.max(jnp.abs(u - v))) for u, v in zip(jax.tree_util.tree_leaves(a),
                                                                jax.tree_util.tree_leaves(b)))


@pytest.mark.parametrize("momentum,target_weight", [(0.9, 1.0), (0.0, 0.0)])
def test_equals_direct_training_in_float64(x64, momentum, target_weight):
    fns = models.from_flax(models.MLP(features=(7, 5, 3), activation="elu"))
    fixed, target = _data(dtype=np.float64)
    p0 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64),
                                training.initial_params(fns, jax.random.key(0), fixed[0]))
    alg = training.full_batch_gd(learning_rate=0.3, momentum=momentum, epochs=15)
    kw = dict(key=jax.random.key(3), init_params=p0, target_weight=target_weight)
    a = train_gram(fns, alg, fixed, target, **kw)
    b = training.train(fns, alg, fixed, target, **kw)
    assert all(a.dtype == jnp.float64 for a in jax.tree_util.tree_leaves(a.params))
    # the same pre-activations summed in another order: float64 rounding only
    assert _max_diff(a.params, b.params) < 1e-12
    np.testing.assert_allclose(a.losses, b.losses, rtol=1e-12)
    assert float(b.losses[-1]) < float(b.losses[0])  # it trained
    if target_weight == 0.0:  # the "out" model never sees the target: same as training on the fixed set alone
        c = train_gram(fns, alg, fixed, None, key=jax.random.key(3), init_params=p0)
        assert _max_diff(a.params, c.params) < 1e-12


def test_equals_direct_training_random_init_images_haiku_no_bias():
    # images [N, 4, 4, 1] flattened by the model; random init from the key; a bias-free first layer (Haiku)
    def net(x):
        x = x.reshape(x.shape[0], -1)
        x = jax.nn.sigmoid(hk.Linear(6, with_bias=False)(x))
        return hk.Linear(3)(x)

    fns = models.from_haiku(hk.transform(net))
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(13, 4, 4, 1)).astype(np.float32)
    y = (np.arange(13) % 3).astype(np.int32)
    alg = training.full_batch_gd(learning_rate=0.5, momentum=0.9, epochs=30, init="random")
    p = fns.init(jax.random.key(0), x[:1])
    assert gram_supported(fns, alg, p, x)
    a = jax.jit(lambda: train_gram(fns, alg, (x[1:], y[1:]), (x[0], y[0]), key=jax.random.key(5)))()
    b = jax.jit(lambda: training.train(fns, alg, (x[1:], y[1:]), (x[0], y[0]), key=jax.random.key(5)))()
    # float32: the same pre-activations summed in another order. Where products round (GPU TF32, TPU bfloat16, or
    # emulated: eps = 2^-11, 2^-8), the Gram path rounds K and A_t where direct training rounds X and W_t, and 30
    # momentum steps carry the difference: up to 3.2 eps max|W| under emulation (TF32 and bf16), so 16 eps max|W|.
    eps = testing.default_matmul_eps()
    scale = max(float(jnp.max(jnp.abs(v))) for v in jax.tree_util.tree_leaves(b.params))
    assert _max_diff(a.params, b.params) < (1e-5 if eps <= 2.0**-24 else 16 * eps * scale)


def test_gram_matrix_and_work_rule():
    fixed, _ = _data()
    k = np.asarray(fixed_set_gram(fixed[0]))
    np.testing.assert_allclose(k, fixed[0].astype(np.float64) @ fixed[0].T.astype(np.float64), rtol=1e-5, atol=1e-5)
    # Balle MNIST MLP: n^2 d once + 100 n^2 h per model vs 200 n d h per model
    assert gram_saves_work(1000, 784, 10, 100, 2)
    assert not gram_saves_work(1000, 784, 10, 100, 1)  # one model does not amortise the Gram matrix
    assert not gram_saves_work(2000, 784, 10, 100, 10_000)  # n > 1.5 d: the n x n product is the larger one


@pytest.mark.parametrize("platform,expected", [("cpu", ("Dense_0", "kernel")), ("gpu", None), ("tpu", None)])
def test_auto_takes_the_gram_path_on_cpu_only(platform, expected):
    fns = models.from_flax(models.balle_mnist_mlp())
    p = jax.eval_shape(fns.init, jax.random.key(0), jnp.zeros((1, 784)))
    fx = jnp.zeros((1000, 784))
    got = training.choose_first_layer("auto", fns, training.full_batch_gd(), p, fx, models=1024, platform=platform)
    assert got == expected
    # "gram" is a request, honoured on every platform; "direct" never takes the Gram path
    assert training.choose_first_layer("gram", fns, training.full_batch_gd(), p, fx, 1024, platform=platform)
    assert training.choose_first_layer("direct", fns, training.full_batch_gd(), p, fx, 1024, platform="cpu") is None


@pytest.mark.parametrize("backend,expected", [("cpu", ("Dense_0", "kernel")), ("gpu", None)])
def test_auto_without_a_platform_follows_the_default_backend(monkeypatch, backend, expected):
    # Left out, the platform is where jax runs (it was "cpu" whatever the backend: the Gram path on a GPU).
    fns = models.from_flax(models.balle_mnist_mlp())
    p = jax.eval_shape(fns.init, jax.random.key(0), jnp.zeros((1, 784)))
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    assert training.choose_first_layer("auto", fns, training.full_batch_gd(), p, jnp.zeros((1000, 784)), 1024) == expected


class _Scaled(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.elu(nn.Dense(4)(2.0 * x.reshape(x.shape[0], -1))))


class _Shared(nn.Module):
    @nn.compact
    def __call__(self, x):
        layer = nn.Dense(x.shape[-1])
        return nn.Dense(3)(layer(nn.elu(layer(x))))


class _TinyCNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.elu(nn.Conv(2, (3, 3))(x))
        return nn.Dense(3)(x.reshape(x.shape[0], -1))


def test_supported_only_where_the_identity_holds():
    fixed, _ = _data()
    x = fixed[0]
    mlp = models.from_flax(models.MLP(features=(4, 3)))
    p = mlp.init(jax.random.key(0), x[:1])
    assert gram_supported(mlp, training.full_batch_gd(), p, x)
    assert not gram_supported(mlp, training.minibatch_sgd(4), p, x)
    assert not gram_supported(mlp, training.dp_gd(1.0, noise_multiplier=1.0), p, x)
    assert not gram_supported(mlp, training.dp_gd(1.0), p, x)  # clipping alone changes the gradients
    import optax
    custom = training.full_batch_gd(optimizer=optax.adam(1e-2), optimizer_id="adam")
    assert not gram_supported(mlp, custom, p, x)
    for module in (_Scaled(), _Shared()):  # input transformed before the layer; a kernel used twice
        fns = models.from_flax(module)
        assert not gram_supported(fns, training.full_batch_gd(), fns.init(jax.random.key(0), x[:1]), x)
    cnn = models.from_flax(_TinyCNN())  # a convolution first: no dense kernel sees the flattened input
    xi = np.zeros((3, 6, 6, 1), np.float32)
    assert not gram_supported(cnn, training.full_batch_gd(), cnn.init(jax.random.key(0), xi[:1]), xi)
    with pytest.raises(ValueError, match="default optimizer"):
        train_gram(mlp, training.minibatch_sgd(4), fixed, key=jax.random.key(0), init_params=p)
    fns = models.from_flax(_Scaled())
    with pytest.raises(ValueError, match="flattened input"):
        train_gram(fns, training.full_batch_gd(), fixed, key=jax.random.key(0),
                   init_params=fns.init(jax.random.key(0), x[:1]))
    with pytest.raises(ValueError, match="gram must have shape"):
        train_gram(mlp, training.full_batch_gd(), fixed, key=jax.random.key(0), init_params=p, gram=np.eye(3))


def _engine(first_layer, fixed, targets, fns, **kw):
    p0 = training.initial_params(fns, jax.random.key(0), fixed[0])
    return shadow.generate_shadow_models(fns, training.full_batch_gd(learning_rate=0.3, epochs=20), fixed, targets,
                                         jax.random.key(1), init_params=p0, progress=False, chunk_size=4,
                                         first_layer=first_layer, outputs=("params", "target_loss"), **kw)


def test_engine_first_layer_modes(tmp_path):
    # The two formulations agree to float32 rounding at full-precision products; at a GPU's default (TF32) each
    # rounds its own operands, ~1e-3 apart after training (seen on an H100; reproduced on CPU with
    # --emulate-matmul-precision=tensorfloat32).
    with jax.default_matmul_precision("highest"):
        _first_layer_modes(tmp_path)


def _first_layer_modes(tmp_path):
    # n = 12 <= 1.5 d = 15: on CPU devices "auto" takes the Gram path, bit-identical to first_layer="gram";
    # elsewhere it trains directly
    rng = np.random.default_rng(2)
    x = rng.normal(size=(19, 10)).astype(np.float32)
    y = (np.arange(19) % 3).astype(np.int32)
    fixed, targets = (x[:12], y[:12]), (x[12:], y[12:])
    fns = models.from_flax(models.MLP(features=(5, 3)))
    gram = _engine("gram", fixed, targets, fns)
    auto = _engine("auto", fixed, targets, fns)
    direct = _engine("direct", fixed, targets, fns)
    on_cpu = jax.devices()[0].platform == "cpu"
    np.testing.assert_array_equal(auto["params"], (gram if on_cpu else direct)["params"])
    np.testing.assert_allclose(gram["params"], direct["params"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(gram["target_loss"], direct["target_loss"], rtol=1e-5, atol=1e-6)
    # a store records the Gram path in its configuration: a direct run on it is refused, a Gram run resumes
    _engine("gram", fixed, targets, fns, store=str(tmp_path / "s"))
    with pytest.raises(shadow.ShadowStoreMismatchError):
        _engine("direct", fixed, targets, fns, store=str(tmp_path / "s"))
    if on_cpu:
        np.testing.assert_array_equal(_engine("auto", fixed, targets, fns, store=str(tmp_path / "s"))["params"],
                                      gram["params"])
    else:  # "auto" trains directly there: the Gram store is refused
        with pytest.raises(shadow.ShadowStoreMismatchError):
            _engine("auto", fixed, targets, fns, store=str(tmp_path / "s"))
    with pytest.raises(ValueError, match="first_layer must be one of"):
        _engine("dual", fixed, targets, fns)
    with pytest.raises(ValueError, match="first_layer='gram' needs"):
        shadow.generate_shadow_models(fns, training.minibatch_sgd(4, epochs=2), fixed, targets, jax.random.key(1),
                                      init_params=training.initial_params(fns, jax.random.key(0), x),
                                      shuffle_key=jax.random.key(2), progress=False, first_layer="gram")
