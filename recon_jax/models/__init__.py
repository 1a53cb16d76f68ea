"""Model zoo (flax.linen), ``ModelFns`` adapters for flax and Haiku, and flattening with a recorded layout.

- :mod:`recon_jax.models.zoo`: Balle et al.'s MNIST MLP and CIFAR-10 CNN, Biswas et al.'s MLP, a LeNet.
- :mod:`recon_jax.models.adapters`: :class:`ModelFns` (``init``, ``apply``), :func:`from_flax`, :func:`from_haiku`.
- :mod:`recon_jax.models.taps`: a model's dense-layer calls seen from outside (ghost clipping, the Gram path).
- :mod:`recon_jax.models.losses`: :func:`softmax_cross_entropy` (integer labels or soft targets).
- :mod:`recon_jax.models.flatten`: :func:`ravel` / :func:`unravel` with a :class:`Layout`, layer selection.
- :mod:`recon_jax.models.tygert`, :mod:`recon_jax.models.dimred`: Tygert feature networks, DR networks.
- :mod:`recon_jax.models.conv`: convolutions as patches + matmul (fast inside loops on XLA:CPU), ``ConvTranspose``.
"""

from recon_jax.models import adapters, conv, dimred, flatten, losses, taps, tygert, zoo
from recon_jax.models.adapters import ModelFns, from_flax, from_haiku, model_identity
from recon_jax.models.losses import softmax_cross_entropy
from recon_jax.models.taps import DenseCall, flax_tap, haiku_tap
from recon_jax.models.flatten import Layout, LayoutEntry, layout_of, ravel, select, select_indices, unravel
from recon_jax.models.zoo import (
    ACTIVATIONS,
    MLP,
    ConvNet,
    LeNet,
    balle_cifar_cnn,
    balle_mnist_mlp,
    biswas_mlp,
    count_params,
    lenet,
)

__all__ = [
    "adapters",
    "conv",
    "dimred",
    "flatten",
    "losses",
    "taps",
    "tygert",
    "zoo",
    "ModelFns",
    "from_flax",
    "from_haiku",
    "model_identity",
    "softmax_cross_entropy",
    "DenseCall",
    "flax_tap",
    "haiku_tap",
    "Layout",
    "LayoutEntry",
    "layout_of",
    "ravel",
    "unravel",
    "select",
    "select_indices",
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
