"""Tygert et al. models (recon_jax.models.tygert) and the experiments.tygert_hcr smoke run."""


import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.models import tygert


def test_mnist_net_architecture_and_init():
    model = tygert.MNISTFeatureNet()
    params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
    shapes = jax.tree.map(lambda v: v.shape, params["params"])
    # Paper Sec. 3.1: Affine784x784 - ReLU - Affine784x784 - ReLU features, Affine784x10 classifier.
    assert shapes["hidden"]["Dense_0"] == {"kernel": (784, 784), "bias": (784,)}
    assert shapes["feature_layer"]["Dense_0"] == {"kernel": (784, 784), "bias": (784,)}
    assert shapes["classifier"]["Dense_0"] == {"kernel": (784, 10), "bias": (10,)}
    # PyTorch default init: U(-1/sqrt(784), 1/sqrt(784)) for weights and biases.
    w = np.asarray(params["params"]["hidden"]["Dense_0"]["kernel"])
    assert np.abs(w).max() <= 1 / 28 and np.abs(w).max() > 0.99 / 28
    # Std of U(-b, b) is b / sqrt(3). Over 784^2 draws the sample std has SE sqrt((m4 - var^2) / n) / (2 std), ~0.06%
    # relative: 5 SE (the old rtol 0.02 was 35 SE).
    wc = w.astype(np.float64) - w.mean()
    se = np.sqrt((np.mean(wc**4) - np.mean(wc**2) ** 2) / w.size) / (2 * w.std())
    assert abs(w.std() - (1 / 28) / np.sqrt(3)) < 5 * se, (w.std(), se)
    f, c = tygert.feature_and_classifier_fns(model, params)
    x = jax.random.normal(jax.random.key(1), (3, 28, 28, 1))
    # One example vs a batch of three: equal at full-precision products. At a GPU's default precision the batch's
    # products round their operands to TF32 and the lone example's matrix-vector products do not (an H100 gave
    # 4.5% relative differences on small features; --emulate-matmul-precision=tensorfloat32 reproduces it).
    with jax.default_matmul_precision("highest"):
        feats = f(x)
        single = f(x[0])
        logits, via_features = model.apply(params, x), c(feats)
    assert feats.shape == (3, 784) and bool(jnp.all(feats >= 0))  # ReLU features
    np.testing.assert_allclose(np.asarray(single), np.asarray(feats[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(via_features), rtol=1e-5, atol=1e-5)


def test_cifar_net_shapes():
    model = tygert.CIFAR10FeatureNet()
    x = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)
    p = params["params"]
    assert p["conv0"]["Conv_0"]["kernel"].shape == (3, 3, 3, 32)
    assert p["conv1"]["Conv_0"]["kernel"].shape == (5, 5, 32, 1024)
    assert p["conv2"]["Conv_0"]["kernel"].shape == (3, 3, 1024, 3072)
    assert p["dense"]["Dense_0"]["kernel"].shape == (3072, 3072)
    assert p["classifier"]["Dense_0"]["kernel"].shape == (3072, 10)
    feats = jax.eval_shape(lambda q, v: model.apply(q, v, method=tygert.CIFAR10FeatureNet.features), params, x)
    assert feats.shape == (2, 3072)  # "3,072 entries ... in the corresponding features"
    single = jax.eval_shape(lambda q, v: model.apply(q, v, method=tygert.CIFAR10FeatureNet.features), params,
                            jax.ShapeDtypeStruct((32, 32, 3), jnp.float32))
    assert single.shape == (3072,)


def test_normalisations_roundtrip():
    x = jnp.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(np.asarray(tygert.denormalize_mnist(tygert.normalize_mnist(x))), np.asarray(x), atol=1e-6)
    # MNIST's usual pixel mean and standard deviation (torchvision's Normalize((0.1307,), (0.3081,)))
    np.testing.assert_allclose(np.asarray(tygert.normalize_mnist(x)), (np.asarray(x) - 0.1307) / 0.3081, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tygert.normalize_cifar10(x)), np.linspace(-1, 1, 5), atol=1e-6)


