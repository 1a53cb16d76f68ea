"""Patch + matmul convolutions equal XLA's convolution (values and gradients) and keep nn.Conv's parameters."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from recon_jax import models
from recon_jax.models import conv as rconv
from recon_jax.models.reconstructors import PatchGANDiscriminator

DN = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize(
    "hw,k,strides,padding,cin,cout",
    [
        ((32, 32), (4, 4), (2, 2), "VALID", 3, 16),  # Balle CIFAR-10 CNN, first layer
        ((15, 15), (4, 4), (1, 1), "VALID", 16, 8),
        ((28, 28), (5, 5), (1, 1), "SAME", 1, 6),  # LeNet first layer
        ((9, 7), (3, 2), (2, 3), "SAME", 2, 3),  # odd sizes, non-square kernel and strides
        ((8, 8), (4, 4), (2, 2), "SAME", 4, 5),  # PatchGAN
        ((6, 6), (1, 1), (2, 2), "VALID", 3, 2),  # pointwise, strided
        ((7, 6), (3, 3), (1, 2), ((1, 2), (0, 1)), 2, 2),  # explicit asymmetric padding
    ],
)
def test_values_and_gradients_equal_lax(x64, hw, k, strides, padding, cin, cout):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, *hw, cin)))
    w = jnp.asarray(rng.normal(size=(*k, cin, cout)))

    def f(conv, x, w):
        return jnp.sum(jnp.sin(conv(x, w, strides, padding, dimension_numbers=DN)))

    got = rconv.patch_conv_general_dilated(x, w, strides, padding, dimension_numbers=DN)
    want = lax.conv_general_dilated(x, w, strides, padding, dimension_numbers=DN)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    g_got = jax.grad(lambda a, b: f(rconv.patch_conv_general_dilated, a, b), argnums=(0, 1))(x, w)
    g_want = jax.grad(lambda a, b: f(lax.conv_general_dilated, a, b), argnums=(0, 1))(x, w)
    for a, b in zip(g_got, g_want):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)


def test_unsupported_calls_are_delegated_to_lax(x64):
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(2, 3, 9, 9)))  # NCHW: not the patch layout
    w = jnp.asarray(rng.normal(size=(4, 3, 3, 3)))
    np.testing.assert_allclose(rconv.patch_conv_general_dilated(x, w, (1, 1), "SAME"),
                               lax.conv_general_dilated(x, w, (1, 1), "SAME"), rtol=1e-12)
    xh = jnp.asarray(rng.normal(size=(2, 9, 9, 3)))
    wh = jnp.asarray(rng.normal(size=(3, 3, 3, 4)))
    kw = dict(dimension_numbers=DN, rhs_dilation=(2, 2))
    np.testing.assert_allclose(rconv.patch_conv_general_dilated(xh, wh, (1, 1), "VALID", **kw),
                               lax.conv_general_dilated(xh, wh, (1, 1), "VALID", **kw), rtol=1e-12)


def test_impl_resolution_and_errors():
    assert rconv.resolve_conv_impl("patches") == "patches"
    assert rconv.resolve_conv_impl("auto") == ("patches" if jax.default_backend() == "cpu" else "lax")
    assert rconv.conv_general_dilated_for("lax") is lax.conv_general_dilated
    with pytest.raises(ValueError, match="conv_impl"):
        rconv.resolve_conv_impl("fft")
    with pytest.raises(ValueError, match="conv_impl"):
        models.balle_cifar_cnn(conv_impl="winograd")


def test_nn_conv_with_patches_keeps_parameters_and_outputs(x64):
    x = jax.random.normal(jax.random.key(0), (2, 3, 10, 10, 3), jnp.float64)  # two leading batch dims
    ref = nn.Conv(7, (3, 3), strides=(2, 2), padding="SAME")
    pat = nn.Conv(7, (3, 3), strides=(2, 2), padding="SAME", conv_general_dilated=rconv.patch_conv_general_dilated)
    v_ref, v_pat = ref.init(jax.random.key(1), x), pat.init(jax.random.key(1), x)
    jax.tree_util.tree_map(np.testing.assert_array_equal, v_ref, v_pat)  # same names, shapes and initial values
    np.testing.assert_allclose(pat.apply(v_ref, x), ref.apply(v_ref, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make,shape", [
    # the CNN and PatchGAN cases take ~45 s together (run with --runslow); LeNet keeps the check in the default run
    pytest.param(lambda impl: models.balle_cifar_cnn(conv_impl=impl), (2, 32, 32, 3), marks=pytest.mark.slow),
    (lambda impl: models.LeNet(conv_impl=impl), (2, 28, 28, 1)),
    pytest.param(lambda impl: PatchGANDiscriminator(features=(8, 16, 1), strides=(2, 2, 1), conv_impl=impl),
                 (2, 16, 16, 3), marks=pytest.mark.slow),
])
def test_models_same_params_and_function_either_way(x64, make, shape):
    x = jax.random.uniform(jax.random.key(2), shape, jnp.float64)
    y = jnp.arange(shape[0]) % 2
    m_lax, m_pat = make("lax"), make("patches")
    p = jax.jit(m_lax.init)(jax.random.key(3), x)["params"]
    p_pat = jax.jit(m_pat.init)(jax.random.key(3), x)["params"]
    jax.tree_util.tree_map(np.testing.assert_array_equal, p, p_pat)

    def loss(m, p):
        out = m.apply({"params": p}, x)
        return jnp.mean(out.reshape(shape[0], -1)[jnp.arange(shape[0]), y] ** 2) + jnp.mean(jnp.tanh(out))

    np.testing.assert_allclose(jax.jit(m_pat.apply)({"params": p}, x), jax.jit(m_lax.apply)({"params": p}, x),
                               rtol=1e-11, atol=1e-12)
    g_lax = jax.jit(jax.grad(lambda q: loss(m_lax, q)))(p)
    g_pat = jax.jit(jax.grad(lambda q: loss(m_pat, q)))(p)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12), g_pat, g_lax)


def test_balle_cnn_param_names_unchanged():
    p = jax.eval_shape(models.balle_cifar_cnn().init, jax.random.key(0), jnp.zeros((1, 32, 32, 3)))["params"]
    assert sorted(p) == ["Conv_0", "Conv_1", "Dense_0"] and models.count_params(p) == 55098


def test_vmapped_cnn_training_equal_either_way(x64):
    """The engine's use: vmap over models of training on a shared fixed set (weights batched, data not)."""
    from recon_jax import training

    rng = np.random.default_rng(3)
    fx = jnp.asarray(rng.uniform(size=(4, 32, 32, 3)))
    fy = jnp.asarray(rng.integers(0, 10, 4))
    tx = jnp.asarray(rng.uniform(size=(3, 32, 32, 3)))
    ty = jnp.asarray(rng.integers(0, 10, 3))
    alg = training.full_batch_gd(learning_rate=0.1, momentum=0.9, epochs=2)
    out = {}
    for impl in ("lax", "patches"):
        fns = models.from_flax(models.balle_cifar_cnn(conv_impl=impl))
        p0 = training.initial_params(fns, jax.random.key(0), fx)
        out[impl] = jax.jit(jax.vmap(lambda a, b, i: jax.flatten_util.ravel_pytree(training.train(
            fns, alg, (fx, fy), (a, b), key=jax.random.fold_in(jax.random.key(1), i), init_params=p0).params)[0]
        ))(tx, ty, jnp.arange(3))
    np.testing.assert_allclose(out["patches"], out["lax"], rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize(
    "hw,k,strides,padding,cin,cout",
    [
        ((8, 8), (5, 5), (2, 2), "SAME", 6, 4),  # Table VII decoder layers
        ((8, 8), (5, 5), (2, 2), "VALID", 3, 2),
        ((5, 7), (4, 3), (2, 3), "SAME", 2, 3),
        ((4, 4), (4, 4), (2, 2), ((2, 2), (2, 2)), 3, 2),  # PyTorch-style geometry (k - 1 - p each side)
        ((6, 6), (3, 3), (1, 1), "SAME", 2, 2),
    ],
)
def test_conv_transpose_equals_lax(x64, hw, k, strides, padding, cin, cout):
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.normal(size=(2, *hw, cin)))
    w = jnp.asarray(rng.normal(size=(*k, cin, cout)))
    want = lax.conv_transpose(x, w, strides, padding, dimension_numbers=DN)
    for impl in ("patches", "lax"):
        got = rconv.conv_transpose(x, w, strides, padding, impl=impl)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    def f(fn, x, w):
        return jnp.sum(jnp.cos(fn(x, w)))

    g_got = jax.grad(lambda a, b: f(lambda u, v: rconv.conv_transpose(u, v, strides, padding, "patches"), a, b),
                     argnums=(0, 1))(x, w)
    g_want = jax.grad(lambda a, b: f(lambda u, v: lax.conv_transpose(u, v, strides, padding, dimension_numbers=DN),
                                     a, b), argnums=(0, 1))(x, w)
    for a, b in zip(g_got, g_want):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("impl", ["patches", "lax"])
def test_conv_transpose_module_matches_flax(x64, impl):
    x = jax.random.normal(jax.random.key(5), (2, 3, 6, 6, 4), jnp.float64)  # two leading batch dims
    ref = nn.ConvTranspose(3, (5, 5), strides=(2, 2), padding="SAME")
    ours = rconv.ConvTranspose(3, (5, 5), strides=(2, 2), padding="SAME", conv_impl=impl)
    v_ref, v_ours = ref.init(jax.random.key(6), x), ours.init(jax.random.key(6), x)
    jax.tree_util.tree_map(np.testing.assert_array_equal, v_ref, v_ours)
    np.testing.assert_allclose(ours.apply(v_ref, x), ref.apply(v_ref, x), rtol=1e-12, atol=1e-12)
    single = x[0, 0]  # unbatched [H, W, C]
    np.testing.assert_allclose(ours.apply(v_ref, single), ref.apply(v_ref, single), rtol=1e-12, atol=1e-12)


def test_table_vii_decoder_params_and_function_either_way(x64):
    from recon_jax.models.reconstructors import TransposedConvDecoder

    feats = jax.random.normal(jax.random.key(7), (2, 12), jnp.float64)
    m_lax = TransposedConvDecoder(base=2, base_channels=4, hidden_channels=3, conv_impl="lax")
    m_pat = TransposedConvDecoder(base=2, base_channels=4, hidden_channels=3, conv_impl="patches")
    p = m_lax.init(jax.random.key(8), feats)["params"]
    assert sorted(p) == ["ConvTranspose_0", "ConvTranspose_1", "Dense_0"]
    jax.tree_util.tree_map(np.testing.assert_array_equal, p, m_pat.init(jax.random.key(8), feats)["params"])
    np.testing.assert_allclose(m_pat.apply({"params": p}, feats), m_lax.apply({"params": p}, feats), rtol=1e-12)
