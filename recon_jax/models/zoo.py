"""The flax.linen model zoo: released models of Balle et al. and Biswas et al., and a small LeNet classifier.

Every model maps a batch of inputs (images ``[N, H, W, C]`` or flat ``[N, D]``) to logits ``[N, classes]``.
Kernels use LeCun-normal initialisation (Haiku's default, which Balle et al. used) and zero biases.

| model | paper | architecture | parameters |
|---|---|---|---|
| :func:`balle_mnist_mlp` | Balle et al., Table V | 784-10-10, ELU | 7,960 |
| :func:`balle_cifar_cnn` | Balle et al., Table VI | conv16 4x4/2, conv32 4x4/1, dense 10, ELU (VALID) | 55,098 |
| :func:`biswas_mlp` | Biswas et al., Sec. VI | 256-50-15-10, sigmoid, no biases | 13,700 |
| :class:`LeNet` | (KL metric classifier) | conv6 5x5, pool, conv16 5x5, pool, 120-84-10, ReLU | 44,426 (28x28x1) |

The Tygert feature networks live in :mod:`recon_jax.models.tygert`, the DR reconstruction networks in
:mod:`recon_jax.models.dimred`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from recon_jax._validation import check_integer
from recon_jax.models.conv import conv_general_dilated_for, resolve_conv_impl

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "ConvNet",
    "LeNet",
    "balle_mnist_mlp",
    "balle_cifar_cnn",
    "biswas_mlp",
    "lenet",
    "count_params",
]

#: The activation names the zoo's models take, and their flax functions.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "elu": nn.elu,
    "relu": nn.relu,
    "sigmoid": nn.sigmoid,
    "tanh": jnp.tanh,
    "gelu": nn.gelu,
    "softplus": nn.softplus,
    "leaky_relu": nn.leaky_relu,
    "identity": lambda x: x,
}


def _activation(name: str) -> Callable[[jax.Array], jax.Array]:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


class MLP(nn.Module):
    """A multi-layer perceptron on flattened inputs: ``Dense(f_1), act, ..., Dense(f_L)`` (no final activation).

    Attributes:
      features: output widths of the dense layers; the last is the number of classes.
      activation: name of the hidden activation (a key of :data:`ACTIVATIONS`).
      use_bias: whether the dense layers have biases.
    """

    features: Sequence[int]
    activation: str = "elu"
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [N, ...] -> [N, features[-1]]
        act = _activation(self.activation)
        x = x.reshape((x.shape[0], -1))
        for i, width in enumerate(self.features):
            x = nn.Dense(width, use_bias=self.use_bias, kernel_init=nn.initializers.lecun_normal())(x)
            if i + 1 < len(self.features):
                x = act(x)
        return x


class ConvNet(nn.Module):
    """Convolutions (VALID padding) followed by dense layers, as in Balle et al. Table VI.

    Attributes:
      conv_features: filters of each convolution.
      kernel_sizes: square kernel size of each convolution.
      strides: stride of each convolution.
      dense_features: widths of the dense layers after flattening; the last is the number of classes.
      activation: name of the activation after every layer but the last.
      conv_impl: how convolutions are computed (:mod:`recon_jax.models.conv`): ``"auto"`` (patches + matmul on
        CPU, XLA's convolution on GPU/TPU), ``"patches"`` or ``"lax"``. Parameters are those of ``nn.Conv``
        either way.
    """

    conv_features: Sequence[int] = (16, 32)
    kernel_sizes: Sequence[int] = (4, 4)
    strides: Sequence[int] = (2, 1)
    dense_features: Sequence[int] = (10,)
    activation: str = "elu"
    conv_impl: str = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [N, H, W, C] -> [N, classes]
        act = _activation(self.activation)
        conv = conv_general_dilated_for(self.conv_impl)
        for f, k, s in zip(self.conv_features, self.kernel_sizes, self.strides):
            x = act(nn.Conv(f, (k, k), strides=(s, s), padding="VALID", kernel_init=nn.initializers.lecun_normal(),
                            conv_general_dilated=conv)(x))
        x = x.reshape((x.shape[0], -1))
        for i, width in enumerate(self.dense_features):
            x = nn.Dense(width, kernel_init=nn.initializers.lecun_normal())(x)
            if i + 1 < len(self.dense_features):
                x = act(x)
        return x


class LeNet(nn.Module):
    """A small LeNet-5-style classifier (used as the fixed classifier of the KL reconstruction metric).

    Attributes:
      num_classes: number of output logits.
      activation: hidden activation name.
      conv_impl: ``"auto"``, ``"patches"`` or ``"lax"`` (see :class:`ConvNet`).
    """

    num_classes: int = 10
    activation: str = "relu"
    conv_impl: str = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [N, H, W, C] -> [N, classes]
        act = _activation(self.activation)
        conv = conv_general_dilated_for(self.conv_impl)
        x = act(nn.Conv(6, (5, 5), padding="SAME", conv_general_dilated=conv)(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = act(nn.Conv(16, (5, 5), padding="VALID", conv_general_dilated=conv)(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        x = act(nn.Dense(120)(x))
        x = act(nn.Dense(84)(x))
        return nn.Dense(self.num_classes)(x)


def balle_mnist_mlp(hidden: int = 10, activation: str = "elu", num_classes: int = 10) -> MLP:
    """The released MNIST model of Balle et al. (Table V): MLP 784-``hidden``-10, ELU; 7,960 parameters.

    Args:
      hidden: hidden width (Balle et al. Table IV also use 1 and 100).
      activation: hidden activation (Table II also uses ``"relu"``).
      num_classes: number of logits.

    Returns:
      A flax module mapping ``[N, 28, 28, 1]`` (or ``[N, 784]``) images to ``[N, num_classes]`` logits.

    >>> import jax, jax.numpy as jnp
    >>> params = balle_mnist_mlp().init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))["params"]
    >>> count_params(params)
    7960
    """
    check_integer("hidden", hidden, 1)
    check_integer("num_classes", num_classes, 1)
    _activation(activation)
    return MLP(features=(hidden, num_classes), activation=activation)


def balle_cifar_cnn(activation: str = "elu", dense_width: int | None = None, num_classes: int = 10,
                    conv_impl: str = "auto") -> ConvNet:
    """The released CIFAR-10 model of Balle et al. (Table VI): conv 16@4x4/2, conv 32@4x4/1, dense 10.

    Padding is VALID, which gives the ~55K parameters the paper reports for 32x32x3 inputs.

    Args:
      activation: activation after each convolution (ELU by default, as for MNIST).
      dense_width: if given, an extra hidden dense layer of this width before the output (the paper's
        "larger model" experiment widens the first linear layer).
      num_classes: number of logits.
      conv_impl: ``"auto"`` (patches + matmul on CPU, ~16x faster to train there; XLA's convolution on
        GPU/TPU), ``"patches"`` or ``"lax"``; same parameters either way (:mod:`recon_jax.models.conv`).

    Returns:
      A flax module mapping ``[N, 32, 32, 3]`` images to logits.

    >>> import jax, jax.numpy as jnp
    >>> params = balle_cifar_cnn().init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)))["params"]
    >>> count_params(params)
    55098
    """
    check_integer("num_classes", num_classes, 1)
    _activation(activation)
    resolve_conv_impl(conv_impl)  # ValueError for an unknown implementation, before any tracing
    dense = (num_classes,) if dense_width is None else (dense_width, num_classes)
    if dense_width is not None:
        check_integer("dense_width", dense_width, 1)
    return ConvNet(dense_features=dense, activation=activation, conv_impl=conv_impl)


def biswas_mlp(activation: str = "sigmoid") -> MLP:
    """The MLP of Biswas et al. (Sec. VI): 256-50-15-10, sigmoid, no biases; 13,700 parameters.

    Inputs are 16x16 grayscale images (``[N, 16, 16, 1]`` or ``[N, 256]``).

    >>> import jax, jax.numpy as jnp
    >>> params = biswas_mlp().init(jax.random.key(0), jnp.zeros((1, 256)))["params"]
    >>> count_params(params)
    13700
    """
    _activation(activation)
    return MLP(features=(50, 15, 10), activation=activation, use_bias=False)


def lenet(num_classes: int = 10) -> LeNet:
    """A LeNet-style classifier (for the classifier-KL reconstruction metric).

    >>> import jax, jax.numpy as jnp
    >>> m = lenet()
    >>> variables = jax.eval_shape(m.init, jax.random.key(0), jnp.zeros((1, 28, 28, 1)))  # shapes only
    >>> jax.eval_shape(m.apply, variables, jnp.zeros((2, 28, 28, 1))).shape
    (2, 10)
    """
    check_integer("num_classes", num_classes, 1)
    return LeNet(num_classes=num_classes)


def count_params(params) -> int:
    """Number of scalar parameters in a pytree.

    >>> count_params({"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)})
    8
    """
    return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))
