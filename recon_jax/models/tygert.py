"""The feature networks and classifiers of Tygert et al. (HCR bounds), in flax.linen.

Section 3 of "Guarantees of confidentiality via Hammersley-Chapman-Robbins bounds":

- MNIST: ``Flatten - Affine784x784 - ReLU - Affine784x784 - ReLU`` gives 784 features; the classifier is
  ``Affine784x10`` (softmax/argmax). Inputs normalised as ``(x - 0.1307) / 0.3081`` (the paper prints
  0.1037 for the mean, a typo: its code and the standard MNIST mean use 0.1307).
- CIFAR-10 (after Shahrestani 2021): ``Conv3x3(3->32) - ReLU - MaxPool2 - Conv5x5(32->1024) - ReLU -
  MaxPool3 - Conv3x3(1024->3072) - ReLU - Flatten - Affine3072x3072 - ReLU`` gives 3,072 features (all
  convolutions VALID, pooling with stride = window); classifier ``Affine3072x10``. Inputs ``2 x - 1``.

Each model exposes ``features(x)`` (one or many NHWC images) and ``classify(features)``; ``__call__`` is
their composition. Parameters use PyTorch's default ``nn.Linear`` / ``nn.Conv2d`` initialisation
(uniform in ``+-1/sqrt(fan_in)`` for weights and biases), as in the paper's code, so training with the
paper's optimiser settings behaves the same.

>>> import jax, jax.numpy as jnp
>>> model = MNISTFeatureNet()
>>> x = jax.ShapeDtypeStruct((2, 28, 28, 1), jnp.float32)
>>> params = jax.eval_shape(model.init, jax.random.key(0), x)
>>> jax.eval_shape(lambda p, v: model.apply(p, v, method=MNISTFeatureNet.features), params, x).shape
(2, 784)
"""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from recon_jax.models.conv import conv_general_dilated_for

__all__ = [
    "MNIST_MEAN",
    "MNIST_STD",
    "MNISTFeatureNet",
    "CIFAR10FeatureNet",
    "normalize_mnist",
    "denormalize_mnist",
    "normalize_cifar10",
    "denormalize_cifar10",
    "torch_uniform_init",
    "feature_and_classifier_fns",
]

MNIST_MEAN = 0.1307
MNIST_STD = 0.3081


def torch_uniform_init(fan_in_axes: tuple[int, ...] = (0,)) -> Callable:
    """Initialiser drawing from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's default for Linear/Conv).

    Args:
      fan_in_axes: the axes of the kernel whose product is fan-in (``(0,)`` for Dense kernels,
        ``(0, 1, 2)`` for HWIO convolution kernels).

    Returns:
      A flax initialiser ``(key, shape, dtype) -> array``.

    >>> w = torch_uniform_init()(jax.random.key(0), (4, 3))
    >>> bool(jnp.all(jnp.abs(w) <= 0.5))
    True
    """

    def init(key, shape, dtype=jnp.float32):
        fan_in = 1
        for a in fan_in_axes:
            fan_in *= shape[a]
        bound = 1.0 / jnp.sqrt(fan_in)
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def _torch_bias_init(fan_in: int) -> Callable:
    def init(key, shape, dtype=jnp.float32):
        bound = 1.0 / jnp.sqrt(fan_in)
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def normalize_mnist(images: jax.Array) -> jax.Array:
    """[0, 1] MNIST pixels to the paper's normalisation ``(x - 0.1307) / 0.3081``.

    >>> round(float(normalize_mnist(jnp.asarray(0.1307))), 6)
    0.0
    """
    return (jnp.asarray(images) - MNIST_MEAN) / MNIST_STD


def denormalize_mnist(images: jax.Array) -> jax.Array:
    """Inverse of :func:`normalize_mnist`.

    >>> round(float(denormalize_mnist(normalize_mnist(jnp.asarray(0.5)))), 6)
    0.5
    """
    return jnp.asarray(images) * MNIST_STD + MNIST_MEAN


def normalize_cifar10(images: jax.Array) -> jax.Array:
    """[0, 1] CIFAR-10 pixels to ``[-1, 1]`` (the paper's ``2 x - 1``).

    >>> float(normalize_cifar10(jnp.asarray(1.0)))
    1.0
    """
    return 2.0 * jnp.asarray(images) - 1.0


def denormalize_cifar10(images: jax.Array) -> jax.Array:
    """Inverse of :func:`normalize_cifar10`.

    >>> float(denormalize_cifar10(jnp.asarray(-1.0)))
    0.0
    """
    return (jnp.asarray(images) + 1.0) / 2.0


class _Dense(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        fan_in = x.shape[-1]
        return nn.Dense(
            self.features, kernel_init=torch_uniform_init((0,)), bias_init=_torch_bias_init(fan_in)
        )(x)


class _Conv(nn.Module):
    features: int
    kernel: int
    conv_impl: str = "auto"

    @nn.compact
    def __call__(self, x):
        fan_in = self.kernel * self.kernel * x.shape[-1]
        return nn.Conv(
            self.features,
            (self.kernel, self.kernel),
            padding="VALID",
            conv_general_dilated=conv_general_dilated_for(self.conv_impl),
            kernel_init=torch_uniform_init((0, 1, 2)),
            bias_init=_torch_bias_init(fan_in),
        )(x)


class MNISTFeatureNet(nn.Module):
    """Tygert et al. Sec. 3.1: 784 ReLU features from two Affine784x784 layers, classifier Affine784x10.

    Attributes:
      width: hidden/feature width (784 in the paper).
      num_classes: classifier outputs.

    Inputs are normalised images ``[N, 28, 28, 1]`` (or a single ``[28, 28, 1]``).
    """

    width: int = 784
    num_classes: int = 10

    def setup(self):
        self.hidden = _Dense(self.width)
        self.feature_layer = _Dense(self.width)
        self.classifier = _Dense(self.num_classes)

    def features(self, x):
        """``[..., 28, 28, 1] -> [..., width]`` ReLU features."""
        batch_shape = x.shape[:-3]
        h = x.reshape(batch_shape + (-1,))
        h = nn.relu(self.hidden(h))
        return nn.relu(self.feature_layer(h))

    def classify(self, features):
        """``[..., width] -> [..., num_classes]`` logits."""
        return self.classifier(features)

    def __call__(self, x):
        return self.classify(self.features(x))


class CIFAR10FeatureNet(nn.Module):
    """Tygert et al. Sec. 3.2: 3,072 features from a 3-conv + Affine3072x3072 net, classifier Affine3072x10.

    Attributes:
      widths: channels of the three convolutions (32, 1024, 3072 in the paper); the dense feature
        layer has ``widths[2]`` units.
      num_classes: classifier outputs.
      conv_impl: ``"auto"``, ``"patches"`` or ``"lax"`` (:mod:`recon_jax.models.conv`; same parameters either way).

    Inputs are normalised images ``[N, 32, 32, 3]`` (or a single ``[32, 32, 3]``).

    >>> model = CIFAR10FeatureNet()
    >>> x = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    >>> params = jax.eval_shape(model.init, jax.random.key(0), x)
    >>> jax.eval_shape(lambda p, v: model.apply(p, v, method=CIFAR10FeatureNet.features), params, x).shape
    (2, 3072)
    """

    widths: tuple[int, int, int] = (32, 1024, 3072)
    num_classes: int = 10
    conv_impl: str = "auto"

    def setup(self):
        self.conv0 = _Conv(self.widths[0], 3, self.conv_impl)
        self.conv1 = _Conv(self.widths[1], 5, self.conv_impl)
        self.conv2 = _Conv(self.widths[2], 3, self.conv_impl)
        self.dense = _Dense(self.widths[2])
        self.classifier = _Dense(self.num_classes)

    def features(self, x):
        """``[..., 32, 32, 3] -> [..., widths[2]]`` ReLU features."""
        single = x.ndim == 3
        if single:
            x = x[None]
        h = nn.relu(self.conv0(x))  # 30 x 30
        h = nn.max_pool(h, (2, 2), strides=(2, 2))  # 15 x 15
        h = nn.relu(self.conv1(h))  # 11 x 11
        h = nn.max_pool(h, (3, 3), strides=(3, 3))  # 3 x 3
        h = nn.relu(self.conv2(h))  # 1 x 1
        h = h.reshape(h.shape[0], -1)
        h = nn.relu(self.dense(h))
        return h[0] if single else h

    def classify(self, features):
        """``[..., widths[2]] -> [..., num_classes]`` logits."""
        return self.classifier(features)

    def __call__(self, x):
        return self.classify(self.features(x))


def feature_and_classifier_fns(model: nn.Module, params) -> tuple[Callable, Callable]:
    """Closes ``model.features`` and ``model.classify`` over ``params``.

    Returns:
      ``(feature_fn, classifier_fn)``; ``feature_fn`` maps one image (or a batch) to features, as
      :func:`recon_jax.bounds.hcr_bounds` expects.

    >>> model = MNISTFeatureNet(width=8)
    >>> params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
    >>> f, c = feature_and_classifier_fns(model, params)
    >>> f(jnp.zeros((28, 28, 1))).shape, c(jnp.zeros((3, 8))).shape
    ((8,), (3, 10))
    """

    def feature_fn(x):
        return model.apply(params, x, method=type(model).features)

    def classifier_fn(features):
        return model.apply(params, features, method=type(model).classify)

    return feature_fn, classifier_fn
