"""Reconstruction networks for the dimensionality-reduction attack (Lumbut & Ponnoprat), in flax.linen.

The attack network maps a released 2-D embedding ``theta`` of a dataset of ``n`` points, flattened to a
vector of length ``2 n`` (row-major: point 0's two coordinates first), to an image of the target point.

- :class:`SplitEncoder` (paper Table 1): the target's two coordinates go through a dense layer of 16 units,
  the other ``2 n - 2`` coordinates through a dense layer of 64 units; the two outputs are concatenated
  (80 features). As in the public reference implementation there is no non-linearity between the dense
  layers and the decoder (the first transposed convolution is followed by BatchNorm + ReLU).
- :class:`MnistDecoder` (paper Table 3): transposed convolutions 512 (4x4, stride 1, pad 0) -> 256 -> 128 -> 64
  (4x4, stride 2, pad 1), each + BatchNorm + ReLU, then 1 filter 1x1 with PyTorch padding 2 (a crop of two
  pixels on each side: 32x32 -> 28x28) and a ReLU output.
- :class:`Chest64Decoder` (paper Table 5, 64x64 images): 512 (4x4, s1, p0) -> 1024 (+ dropout) -> 512 -> 256
  (4x4, s2, p1) each + BatchNorm + ReLU, then 1 filter 4x4 (s2, p1) and ReLU -> 64x64. The public code's
  ``Net2`` differs from the printed table; this module follows the table.
- :class:`BalleMLP`: the Balle et al. (2022) reconstructor baseline used in the paper's Table 4: dense
  layers of 1000 ReLU units (two by default, ``hidden=(1000, 1000)``) and a ReLU output of the image size.
  (The public reference code has a single hidden layer; pass ``hidden=(1000,)`` for that variant.)

``width`` scales every decoder channel count (``width=64`` is the paper's ``ngf``; the decoders have
``8 * width, 4 * width, 2 * width, width`` channels), so the same architecture can be run smaller on a CPU.

PyTorch ``ConvTranspose2d(k, stride s, padding p)`` gives output ``(i - 1) s - 2 p + k``; the flax equivalent
is ``nn.ConvTranspose(kernel (k, k), strides (s, s), padding ((k - 1 - p, k - 1 - p),) * 2)``.

All modules take ``theta`` of shape ``[batch, 2 n]`` and ``train: bool`` (BatchNorm batch statistics and
dropout when true) and return images ``[batch, H, W, 1]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from recon_jax.models.conv import conv_general_dilated_for, conv_transpose

__all__ = [
    "TorchConvTranspose",
    "SplitEncoder",
    "MnistDecoder",
    "Chest64Decoder",
    "SplitReconstructor",
    "BalleMLP",
    "make_reconstructor",
]


# Sub-pixel form of a stride-2, 4x4 transposed convolution with PyTorch padding 1 (lax padding 2): output
# pixel (2a + r) only sees input pixels a - 1 + r .. a + r, i.e. taps T[r] of a 3-tap window on the input padded
# by one (None: no tap). See TorchConvTranspose.
_PHASE_TAPS = ((0, 2, None), (None, 1, 3))


class TorchConvTranspose(nn.Module):
    """PyTorch ``ConvTranspose2d(k, stride s, padding p, bias=False)`` geometry, fast on every backend.

    Same parameter (``kernel`` of shape ``(k, k, in, features)``, LeCun-normal init) and the same output as
    ``nn.ConvTranspose(features, (k, k), (s, s), padding=((k-1-p, k-1-p),) * 2, use_bias=False)``, but the two
    shapes the paper's decoders use avoid the input-dilated convolution, which XLA runs slowly on CPU:

    - ``s = 1, p = 0`` on a 1x1 input (the first decoder layer) is a dense product with the flipped kernel, and
      ``k = 1, s = 1`` a pointwise product;
    - ``s = 2, k = 4, p = 1`` is a 3x3 stride-1 convolution producing the four output phases as channels,
      then interleaved (the sub-pixel / pixel-shuffle form; no multiplications by inserted zeros).

    Anything else is ``lax.conv_transpose``'s input-dilated convolution (:func:`recon_jax.models.conv.conv_transpose`).
    ``conv_impl`` (:mod:`recon_jax.models.conv`) defaults to ``"lax"``: the DR attack trains with one jitted step
    per minibatch, outside loops (``step_loop="host"`` of the shared reconstructor trainer), where XLA's
    convolution is ~15% faster than the patch form for these decoders;
    use ``"auto"`` when training inside ``lax.scan`` on CPU. ``tests/models/test_dimred_models.py`` checks all
    three paths against ``nn.ConvTranspose``.
    """

    features: int
    k: int
    s: int
    p: int
    conv_impl: str = "lax"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [B, H, W, C] -> [B, H', W', features]
        k, s, p = self.k, self.s, self.p
        if k - 1 - p < 0:  # pragma: no cover - not used by the paper's tables
            raise ValueError(f"padding p={p} larger than k-1={k - 1} is not supported here")
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (k, k, x.shape[-1], self.features),
                            jnp.float32)
        x, kernel = nn.dtypes.promote_dtype(x, kernel)
        b, h, w, _ = x.shape
        if s == 1 and p == 0 and h == 1 and w == 1:
            return jnp.einsum("bc,mnco->bmno", x[:, 0, 0, :], kernel[::-1, ::-1])
        if k == 1 and s == 1:  # p == 0: a pointwise product
            return jnp.einsum("bhwc,co->bhwo", x, kernel[0, 0])
        if s == 2 and k == 4 and p == 1:
            idx = jnp.asarray([[t if t is not None else 0 for t in row] for row in _PHASE_TAPS])  # [2 r, 3 s]
            mask = jnp.asarray([[t is not None for t in row] for row in _PHASE_TAPS], kernel.dtype)
            # q[sy, sx, c, ry, rx, o] = kernel[T[ry][sy], T[rx][sx], c, o] (0 where there is no tap)
            q = kernel[idx.T[:, None, :, None], idx.T[None, :, None, :]]  # [3, 3, 2, 2, C, O]
            q = q * (mask.T[:, None, :, None] * mask.T[None, :, None, :])[..., None, None]
            q = jnp.transpose(q, (0, 1, 4, 2, 3, 5)).reshape(3, 3, x.shape[-1], 4 * self.features)
            xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
            y = conv_general_dilated_for(self.conv_impl)(xp, q, (1, 1), "VALID",
                                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
            y = y.reshape(b, h, w, 2, 2, self.features).transpose(0, 1, 3, 2, 4, 5)
            return y.reshape(b, 2 * h, 2 * w, self.features)
        pad = (k - 1 - p, k - 1 - p)
        return conv_transpose(x, kernel, (s, s), (pad, pad), impl=self.conv_impl)


def _torch_convt(features: int, k: int, s: int, p: int, name: str) -> nn.Module:
    """A transposed convolution with PyTorch ``ConvTranspose2d(k, s, p, bias=False)`` geometry."""
    return TorchConvTranspose(features, k, s, p, name=name)


def _bn(name: str, train: bool) -> nn.BatchNorm:
    # PyTorch BatchNorm2d defaults: momentum 0.1 (flax 0.9), eps 1e-5.
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, name=name)


class SplitEncoder(nn.Module):
    """Paper Table 1: split the 2n inputs into the target's 2 and the other 2n - 2, dense 16 + dense 64.

    Attributes:
      target_row: which row of the embedding is the target (the attack places it in a fixed row; 0 here
        and in the reference implementation).
      target_features: units of the target branch (16 in the paper).
      context_features: units of the branch for the other points (64 in the paper).
    """

    target_row: int = 0
    target_features: int = 16
    context_features: int = 64

    @nn.compact
    def __call__(self, theta: jax.Array) -> jax.Array:  # [batch, 2n] -> [batch, 80]
        if theta.ndim != 2 or theta.shape[1] < 4 or theta.shape[1] % 2:
            raise ValueError(f"theta must be [batch, 2n] with n >= 2, got shape {theta.shape}")
        n = theta.shape[1] // 2
        if not 0 <= self.target_row < n:
            raise ValueError(f"target_row must be in [0, {n - 1}], got {self.target_row}")
        r = 2 * self.target_row
        target = theta[:, r : r + 2]
        context = jnp.concatenate([theta[:, :r], theta[:, r + 2 :]], axis=1)
        h_t = nn.Dense(self.target_features, name="target_dense")(target)
        h_c = nn.Dense(self.context_features, name="context_dense")(context)
        return jnp.concatenate([h_t, h_c], axis=1)


# The output layer's activation (``output`` of the decoders and the MLP). "relu" is the paper's: on MNIST's zero
# background a unit that goes dead is harmless, elsewhere its pixel stays at 0; "sigmoid" suits images in [0, 1]
# without a zero background, "linear" anything.
_OUTPUTS = {"relu": nn.relu, "sigmoid": nn.sigmoid, "linear": lambda h: h}


class MnistDecoder(nn.Module):
    """Paper Table 3 decoder: code [batch, c] -> image [batch, 28, 28, 1] (``output``: the output activation,
    ``"relu"``, ``"sigmoid"`` or ``"linear"``)."""

    width: int = 64
    output: str = "relu"

    @nn.compact
    def __call__(self, code: jax.Array, train: bool = False) -> jax.Array:
        w = self.width
        h = code[:, None, None, :]  # [batch, 1, 1, c]
        for i, (feat, k, s, p) in enumerate(
            [(8 * w, 4, 1, 0), (4 * w, 4, 2, 1), (2 * w, 4, 2, 1), (w, 4, 2, 1)]
        ):
            h = _torch_convt(feat, k, s, p, name=f"convt{i}")(h)  # 4, 8, 16, 32
            h = _bn(f"bn{i}", train)(h)
            h = nn.relu(h)
        # 1 filter 1x1, stride 1, PyTorch padding 2: a 1x1 transposed conv, then crop 2 on each side.
        h = TorchConvTranspose(1, 1, 1, 0, name="convt_out")(h)
        h = h[:, 2:-2, 2:-2, :]
        return _OUTPUTS[self.output](h)


class Chest64Decoder(nn.Module):
    """Paper Table 5 decoder (NIH Chest X-ray, 64x64): code [batch, c] -> image [batch, 64, 64, 1] (``output``: as
    in :class:`MnistDecoder`)."""

    width: int = 64
    dropout_rate: float = 0.2
    output: str = "relu"

    @nn.compact
    def __call__(self, code: jax.Array, train: bool = False) -> jax.Array:
        w = self.width
        h = code[:, None, None, :]
        layers = [(8 * w, 4, 1, 0), (16 * w, 4, 2, 1), (8 * w, 4, 2, 1), (4 * w, 4, 2, 1)]
        for i, (feat, k, s, p) in enumerate(layers):
            h = _torch_convt(feat, k, s, p, name=f"convt{i}")(h)  # 4, 8, 16, 32
            h = _bn(f"bn{i}", train)(h)
            h = nn.relu(h)
            if i == 1:
                h = nn.Dropout(self.dropout_rate, deterministic=not train)(h)
        h = _torch_convt(1, 4, 2, 1, name="convt_out")(h)  # 64
        return _OUTPUTS[self.output](h)


class SplitReconstructor(nn.Module):
    """The paper's attack network: :class:`SplitEncoder` followed by a transposed-conv decoder.

    Attributes:
      decoder: ``"mnist"`` (Table 3, 28x28) or ``"chest64"`` (Table 5, 64x64).
      width: decoder channel scale (64 = the paper).
      target_row: the target's row in the embedding.
      output: the output activation, ``"relu"``, ``"sigmoid"`` or ``"linear"`` (``"relu"``: the paper's).
    """

    decoder: str = "mnist"
    width: int = 64
    target_row: int = 0
    output: str = "relu"

    @nn.compact
    def __call__(self, theta: jax.Array, train: bool = False) -> jax.Array:
        code = SplitEncoder(target_row=self.target_row, name="encoder")(theta)
        if self.decoder == "mnist":
            return MnistDecoder(width=self.width, output=self.output, name="decoder")(code, train)
        if self.decoder == "chest64":
            return Chest64Decoder(width=self.width, output=self.output, name="decoder")(code, train)
        raise ValueError(f"decoder must be 'mnist' or 'chest64', got {self.decoder!r}")


class BalleMLP(nn.Module):
    """Balle et al. (2022) reconstructor baseline: dense ReLU layers, an output layer reshaped to an image.

    Attributes:
      image_shape: output shape ``(H, W, C)``.
      hidden: hidden layer widths ((1000, 1000) as described in the paper).
      output: the output activation, ``"relu"``, ``"sigmoid"`` or ``"linear"`` (``"relu"``: the paper's).
    """

    image_shape: Sequence[int] = (28, 28, 1)
    hidden: Sequence[int] = (1000, 1000)
    output: str = "relu"

    @nn.compact
    def __call__(self, theta: jax.Array, train: bool = False) -> jax.Array:
        del train  # no BatchNorm / dropout
        h = theta
        for i, units in enumerate(self.hidden):
            h = nn.relu(nn.Dense(units, name=f"dense{i}")(h))
        size = 1
        for s in self.image_shape:
            size *= int(s)
        h = _OUTPUTS[self.output](nn.Dense(size, name="out")(h))
        return h.reshape((theta.shape[0], *tuple(int(s) for s in self.image_shape)))


def make_reconstructor(
    kind: str, *, image_shape: Sequence[int] = (28, 28, 1), width: int = 64, target_row: int = 0,
    output: str = "relu",
) -> nn.Module:
    """Builds the attack network by name.

    Args:
      kind: ``"split"`` (the paper's network; decoder picked from ``image_shape``: 28x28 -> Table 3,
        64x64 -> Table 5) or ``"mlp"`` (Balle et al. baseline, 2 x 1000).
      image_shape: ``(H, W, 1)`` of the reconstructed images.
      width: decoder channel scale for ``"split"`` (64 = paper).
      target_row: the target's row in the embedding.
      output: the output activation: ``"relu"`` (the paper's), ``"sigmoid"`` or ``"linear"``.

    Returns:
      A flax module mapping ``[batch, 2n]`` to ``[batch, H, W, 1]``.

    Raises:
      ValueError: for an unknown ``kind`` or ``output``, an unsupported ``image_shape`` or ``width < 1``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> net = make_reconstructor("split", width=4)
      >>> theta = jnp.zeros((3, 20))  # n = 10 points
      >>> variables = jax.jit(net.init)(jax.random.key(0), theta)
      >>> jax.jit(net.apply)(variables, theta).shape
      (3, 28, 28, 1)
    """
    image_shape = tuple(int(s) for s in image_shape)
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    if output not in _OUTPUTS:
        raise ValueError(f"output must be one of {tuple(_OUTPUTS)}, got {output!r}")
    if kind == "mlp":
        return BalleMLP(image_shape=image_shape, output=output)
    if kind != "split":
        raise ValueError(f"kind must be 'split' or 'mlp', got {kind!r}")
    if image_shape == (28, 28, 1):
        return SplitReconstructor(decoder="mnist", width=width, target_row=target_row, output=output)
    if image_shape == (64, 64, 1):
        return SplitReconstructor(decoder="chest64", width=width, target_row=target_row, output=output)
    raise ValueError(f"image_shape must be (28, 28, 1) or (64, 64, 1) for 'split', got {image_shape}")
