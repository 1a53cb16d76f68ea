"""Reconstructor networks and the PatchGAN discriminator of Balle et al. (2022), in flax.linen.

A reconstructor ``phi`` maps a (standardised) feature vector of a released model -- its flattened parameters or
its logits on a probe set -- to a guess of the target image (Balle et al. Sec. IV-B, Fig. 2).

| module | paper | architecture |
|---|---|---|
| :class:`ReconstructorMLP` | Table V (MNIST ``phi``) | Dense 1000, ReLU, Dense 1000, ReLU, Dense prod(shape), sigmoid |
| :class:`TransposedConvDecoder` | Table VII (CIFAR-10 ``phi``) | Dense 4096, reshape 8x8x64, ConvT 32@5x5/2, ReLU, ConvT 3@5x5/2, sigmoid |
| :class:`PatchGANDiscriminator` | Table VIII | Conv 64@4x4/2, 128@4x4/2, 256@4x4/2, 512@4x4/1, 1@4x4/1 (leaky ReLU 0.2) |

Notes on Table VII: the converted text reads "Reshape 64 x 64", which cannot produce 32x32x3 images after two
stride-2 transposed convolutions. We reshape the 4096 units to ``8 x 8 x 64`` (same 4096 numbers), so two stride-2
transposed convolutions give ``32 x 32``; the parameter count of the first layer (``F x 4096``, 226M for the 55K
CIFAR-10 CNN) matches the paper's figure. The activation between the transposed convolutions is not stated; we
use ReLU. The PatchGAN uses SAME padding and leaky ReLU 0.2 between layers (Isola et al.), and outputs a map of
per-patch real/fake scores (trained with the least-squares GAN loss, as the paper says).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.models.conv import ConvTranspose, conv_general_dilated_for

__all__ = ["ReconstructorMLP", "TransposedConvDecoder", "PatchGANDiscriminator", "reconstructor_mlp",
           "transposed_conv_decoder", "patchgan_discriminator"]


class ReconstructorMLP(nn.Module):
    """The MNIST reconstructor of Balle et al. (Table V): 2 hidden ReLU layers of width 1000, sigmoid output.

    Attributes:
      output_shape: shape of one reconstructed example (e.g. ``(28, 28, 1)``).
      hidden: widths of the hidden layers.
    """

    output_shape: Sequence[int] = (28, 28, 1)
    hidden: Sequence[int] = (1000, 1000)

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:  # [B, F] -> [B, *output_shape]
        x = features.reshape((features.shape[0], -1))
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        x = nn.Dense(int(np.prod(self.output_shape)))(x)
        return nn.sigmoid(x).reshape((features.shape[0], *self.output_shape))


class TransposedConvDecoder(nn.Module):
    """The CIFAR-10 reconstructor of Balle et al. (Table VII), see the module notes for the reshape.

    Attributes:
      base: spatial size after the reshape (8 for 32x32 outputs).
      base_channels: channels after the reshape (64, so ``base * base * base_channels = 4096``).
      hidden_channels: filters of the first transposed convolution (32).
      out_channels: channels of the output image (3).
      kernel_size: transposed-convolution kernel size (5).
      conv_impl: ``"auto"`` (patch form on CPU, where XLA's transposed convolutions are slow inside the training
        scan; XLA's on GPU/TPU), ``"patches"`` or ``"lax"``; parameters are ``nn.ConvTranspose``'s either way.
    """

    base: int = 8
    base_channels: int = 64
    hidden_channels: int = 32
    out_channels: int = 3
    kernel_size: int = 5
    conv_impl: str = "auto"

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:  # [B, F] -> [B, 4 base, 4 base, out_channels]
        b = features.shape[0]
        x = nn.Dense(self.base * self.base * self.base_channels)(features.reshape((b, -1)))
        x = x.reshape((b, self.base, self.base, self.base_channels))
        k = (self.kernel_size, self.kernel_size)
        x = nn.relu(ConvTranspose(self.hidden_channels, k, strides=(2, 2), padding="SAME", conv_impl=self.conv_impl,
                                  name="ConvTranspose_0")(x))
        x = ConvTranspose(self.out_channels, k, strides=(2, 2), padding="SAME", conv_impl=self.conv_impl,
                          name="ConvTranspose_1")(x)
        return nn.sigmoid(x)


class PatchGANDiscriminator(nn.Module):
    """The PatchGAN discriminator of Balle et al. (Table VIII): a map of per-patch real/fake scores.

    Attributes:
      features: filters of the convolutions (the last one is the 1-channel score map).
      strides: stride of each convolution.
      kernel_size: square kernel size (4).
      conv_impl: ``"auto"``, ``"patches"`` or ``"lax"`` (:mod:`recon_jax.models.conv`).
    """

    features: Sequence[int] = (64, 128, 256, 512, 1)
    strides: Sequence[int] = (2, 2, 2, 1, 1)
    kernel_size: int = 4
    conv_impl: str = "auto"

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:  # [B, H, W, C] -> [B, h, w, 1]
        if len(self.features) != len(self.strides):
            raise ValueError(f"features and strides must have the same length, got {self.features}, {self.strides}")
        x = images
        conv = conv_general_dilated_for(self.conv_impl)
        for i, (f, s) in enumerate(zip(self.features, self.strides)):
            x = nn.Conv(f, (self.kernel_size, self.kernel_size), strides=(s, s), padding="SAME",
                        conv_general_dilated=conv)(x)
            if i + 1 < len(self.features):
                x = nn.leaky_relu(x, 0.2)
        return x


def _check_shape(output_shape) -> tuple[int, ...]:
    shape = tuple(int(d) for d in output_shape)
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"output_shape must be a non-empty tuple of positive ints, got {output_shape!r}")
    return shape


def reconstructor_mlp(output_shape: Sequence[int] = (28, 28, 1), hidden: Sequence[int] = (1000, 1000)
                      ) -> ReconstructorMLP:
    """The MNIST reconstructor MLP (Balle et al. Table V); about 9.7M parameters on 7,960 input features.

    Args:
      output_shape: shape of one reconstructed example.
      hidden: hidden widths (each >= 1).

    Returns:
      A flax module mapping features ``[B, F]`` to images ``[B, *output_shape]`` in (0, 1).

    >>> import jax, jax.numpy as jnp
    >>> m = reconstructor_mlp()
    >>> params = m.init(jax.random.key(0), jnp.zeros((1, 7960)))
    >>> sum(x.size for x in jax.tree_util.tree_leaves(params))   # Table V: 9.7M
    9746784
    """
    shape = _check_shape(output_shape)
    hidden = tuple(int(h) for h in hidden)
    if any(h < 1 for h in hidden):
        raise ValueError(f"hidden widths must be >= 1, got {hidden}")
    return ReconstructorMLP(output_shape=shape, hidden=hidden)


def transposed_conv_decoder(image_size: int = 32, channels: int = 3) -> TransposedConvDecoder:
    """The CIFAR-10 transposed-convolution reconstructor (Balle et al. Table VII).

    Args:
      image_size: output height and width, a multiple of 4 (32 for CIFAR-10: reshape to 8x8x64).
      channels: output channels.

    >>> import jax, jax.numpy as jnp
    >>> m = transposed_conv_decoder()
    >>> variables = jax.jit(m.init)(jax.random.key(0), jnp.zeros((1, 50)))
    >>> jax.jit(m.apply)(variables, jnp.zeros((2, 50))).shape
    (2, 32, 32, 3)
    """
    if not (isinstance(image_size, int) and image_size >= 4 and image_size % 4 == 0):
        raise ValueError(f"image_size must be a positive multiple of 4, got {image_size!r}")
    if not (isinstance(channels, int) and channels >= 1):
        raise ValueError(f"channels must be an integer >= 1, got {channels!r}")
    base = image_size // 4
    return TransposedConvDecoder(base=base, base_channels=4096 // (base * base) if 4096 % (base * base) == 0 else 64,
                                 out_channels=channels)


def patchgan_discriminator() -> PatchGANDiscriminator:
    """The PatchGAN discriminator of Balle et al. (Table VIII).

    >>> import jax, jax.numpy as jnp
    >>> d = patchgan_discriminator()
    >>> variables = jax.jit(d.init)(jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
    >>> jax.eval_shape(d.apply, variables, jnp.zeros((2, 32, 32, 3))).shape
    (2, 4, 4, 1)
    """
    return PatchGANDiscriminator()
