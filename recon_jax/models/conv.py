"""Convolutions as patch extraction + one matrix product, a drop-in for ``lax.conv_general_dilated``.

XLA:CPU runs convolutions slowly inside loops: a gradient step of Balle et al.'s CIFAR-10 CNN (n = 200) took
~35 ms as its own jitted call but ~890 ms per iteration inside ``lax.scan`` / ``lax.fori_loop`` on one core of this
project's CPU, and shadow-model training keeps its epochs in ``lax.scan``. Computed as "gather the k x k patches
with strided slices, then multiply by the reshaped kernel", the same step takes ~50 ms inside the loop (the
slices' gradients are pads and adds, the product a plain matmul); outside loops XLA's convolution is ~2x faster
than the patch form. Per model, CNN training in :func:`recon_jax.training.train` ran ~16x faster with patches
(``python -m benchmarks.conv_shadow``).

:func:`patch_conv_general_dilated` has the signature of :func:`jax.lax.conv_general_dilated` and computes the
same function for 2-D, channel-last (NHWC / HWIO) convolutions without dilation or feature groups; any other call
is passed to ``lax.conv_general_dilated`` unchanged. It plugs into flax through
``nn.Conv(..., conv_general_dilated=...)``, so parameters, initialisation, dtypes and batch handling stay exactly
those of ``nn.Conv``. :func:`conv_general_dilated_for` picks the implementation:

- ``"patches"``: always the patch form;
- ``"lax"``: always ``lax.conv_general_dilated`` (XLA's convolution);
- ``"auto"`` (the models' default): the patch form when JAX's default backend is the CPU (training loops are
  what this library runs most), XLA's convolution on GPU and TPU. The two agree to float rounding (tests:
  1e-11 in float64), not bit for bit, so models trained on different backends can differ in the last bits.
  Pass ``"lax"`` for CPU work that runs convolutions outside loops only.
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["CONV_IMPLS", "ConvTranspose", "conv_transpose", "patch_conv_general_dilated", "conv_general_dilated_for",
           "resolve_conv_impl"]

CONV_IMPLS = ("auto", "patches", "lax")


def resolve_conv_impl(impl: str) -> str:
    """``"patches"`` or ``"lax"`` for ``impl`` in :data:`CONV_IMPLS` (``"auto"``: patches on CPU, else lax).

    >>> resolve_conv_impl("lax")
    'lax'
    """
    if impl not in CONV_IMPLS:
        raise ValueError(f"conv_impl must be one of {CONV_IMPLS}, got {impl!r}")
    if impl == "auto":
        return "patches" if jax.default_backend() == "cpu" else "lax"
    return impl


def conv_general_dilated_for(impl: str) -> Callable:
    """The convolution function for ``impl`` (see the module docstring), to pass to ``nn.Conv``."""
    return patch_conv_general_dilated if resolve_conv_impl(impl) == "patches" else lax.conv_general_dilated


def _pads(padding, in_sizes, kernel_sizes, strides) -> list[tuple[int, int]] | None:
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return [(0, 0)] * len(in_sizes)
        if padding.upper() == "SAME":
            return [tuple(int(p) for p in pair) for pair in lax.padtype_to_pads(in_sizes, kernel_sizes, strides,
                                                                                  "SAME")]
        return None
    pads = [tuple(int(p) for p in pair) for pair in padding]
    return pads if all(len(p) == 2 for p in pads) else None


def _is_nhwc_hwio(dimension_numbers, lhs_ndim: int, rhs_ndim: int) -> bool:
    if lhs_ndim != 4 or rhs_ndim != 4:
        return False
    want = lax.conv_dimension_numbers((1, 1, 1, 1), (1, 1, 1, 1), ("NHWC", "HWIO", "NHWC"))
    if dimension_numbers is None:  # lax's default is NCHW / OIHW
        return False
    got = lax.conv_dimension_numbers((1, 1, 1, 1), (1, 1, 1, 1), dimension_numbers)
    return got == want


def patch_conv_general_dilated(lhs: jax.Array, rhs: jax.Array, window_strides: Sequence[int], padding,
                               lhs_dilation: Sequence[int] | None = None,
                               rhs_dilation: Sequence[int] | None = None, dimension_numbers=None,
                               feature_group_count: int = 1, batch_group_count: int = 1, precision=None,
                               preferred_element_type=None) -> jax.Array:
    """``lax.conv_general_dilated`` computed as strided-slice patches times the reshaped kernel.

    Handles 2-D convolutions with ``dimension_numbers`` ("NHWC", "HWIO", "NHWC"), any strides and padding
    ("VALID", "SAME" or explicit non-negative pairs), input dilation with explicit pads (what transposed
    convolutions use), no kernel dilation, one feature group; everything else is delegated to
    ``lax.conv_general_dilated``.

    >>> import jax.numpy as jnp
    >>> x = jnp.arange(2 * 5 * 5 * 3, dtype=jnp.float32).reshape(2, 5, 5, 3)
    >>> w = jnp.ones((3, 3, 3, 4), jnp.float32)
    >>> y = patch_conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    >>> z = lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    >>> y.shape, bool(jnp.allclose(y, z))
    ((2, 3, 3, 4), True)
    """
    strides = tuple(int(s) for s in window_strides)
    lhs_dil = (1, 1) if lhs_dilation is None else tuple(int(d) for d in lhs_dilation)
    simple = (_is_nhwc_hwio(dimension_numbers, lhs.ndim, rhs.ndim) and feature_group_count == 1
              and batch_group_count == 1 and len(strides) == 2 and len(lhs_dil) == 2
              and all(d in (None, 1) for d in (rhs_dilation or (None,))))
    if simple and lhs_dil != (1, 1):
        # Input dilation (transposed convolutions): insert the zeros explicitly; string paddings are defined on
        # the dilated shape, so only explicit pads are handled here.
        simple = not isinstance(padding, str) and all(d >= 1 for d in lhs_dil)
    pads = _pads(padding, lhs.shape[1:3], rhs.shape[:2], strides) if simple else None
    if not simple or pads is None or any(p < 0 for pair in pads for p in pair):
        return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                        rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
                                        feature_group_count=feature_group_count,
                                        batch_group_count=batch_group_count, precision=precision,
                                        preferred_element_type=preferred_element_type)
    kh, kw, cin, cout = rhs.shape
    if lhs.shape[-1] != cin:
        raise ValueError(f"input has {lhs.shape[-1]} channels but the kernel expects {cin}")
    if lhs_dil != (1, 1) or any(pads[0]) or any(pads[1]):
        zero = jnp.zeros((), lhs.dtype)
        lhs = lax.pad(lhs, zero, ((0, 0, 0), (*pads[0], lhs_dil[0] - 1), (*pads[1], lhs_dil[1] - 1), (0, 0, 0)))
    n, h, w, _ = lhs.shape
    sh, sw = strides
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"kernel {kh}x{kw} is larger than the padded input {h}x{w}")
    if kh == 1 and kw == 1:
        patches = lhs[:, : sh * (ho - 1) + 1: sh, : sw * (wo - 1) + 1: sw, :]
    else:
        # One strided slice per kernel tap; feature order (i, j, c) matches rhs.reshape(kh * kw * cin, cout).
        patches = jnp.concatenate(
            [lax.slice(lhs, (0, i, j, 0), (n, i + sh * (ho - 1) + 1, j + sw * (wo - 1) + 1, cin), (1, sh, sw, 1))
             for i in range(kh) for j in range(kw)], axis=-1)
    out = jnp.matmul(patches, rhs.reshape(kh * kw * cin, cout), precision=precision,
                     preferred_element_type=preferred_element_type)
    return out


def _transpose_pads(k: int, s: int, padding: str) -> tuple[int, int]:
    """Padding of the input-dilated convolution that computes a transposed convolution (``lax.conv_transpose``)."""
    if padding == "SAME":
        total = k + s - 2
        before = k - 1 if s > k - 1 else -(-total // 2)
    else:  # VALID
        total = k + s - 2 + max(k - s, 0)
        before = k - 1
    return before, total - before


def conv_transpose(x: jax.Array, kernel: jax.Array, strides: Sequence[int], padding="SAME",
                   impl: str = "auto") -> jax.Array:
    """``lax.conv_transpose(x, kernel, strides, padding)`` (NHWC, HWIO, no kernel transpose) by ``impl``.

    It is the input-dilated convolution ``lax.conv_transpose`` computes, handed to
    :func:`conv_general_dilated_for` (``impl``). Inside ``lax.scan`` on CPU the patch form was ~15x faster in our
    measurement (forward + gradient of a 5x5 stride-2 layer), outside loops XLA's is faster.

    >>> import jax.numpy as jnp
    >>> x, w = jnp.ones((1, 4, 4, 2)), jnp.ones((5, 5, 2, 3))
    >>> y = conv_transpose(x, w, (2, 2), "SAME", impl="patches")
    >>> y.shape, bool(jnp.allclose(y, lax.conv_transpose(x, w, (2, 2), "SAME")))
    ((1, 8, 8, 3), True)
    """
    kh, kw = kernel.shape[:2]
    if isinstance(padding, str):
        if padding not in ("SAME", "VALID"):
            raise ValueError(f"padding must be 'SAME', 'VALID' or explicit pairs, got {padding!r}")
        pads = [_transpose_pads(kh, strides[0], padding), _transpose_pads(kw, strides[1], padding)]
    else:
        pads = [tuple(int(p) for p in pair) for pair in padding]
    return conv_general_dilated_for(impl)(x, kernel, (1, 1), pads, lhs_dilation=tuple(strides),
                                          dimension_numbers=("NHWC", "HWIO", "NHWC"))


class ConvTranspose(nn.Module):
    """``nn.ConvTranspose`` for 2-D channel-last inputs, with a choice of implementation (:func:`conv_transpose`).

    Parameters (``kernel`` ``(kh, kw, in, features)``, ``bias``), their initialisation and the output are those of
    ``nn.ConvTranspose(features, kernel_size, strides, padding)`` with its defaults (no kernel dilation, no
    kernel transpose).

    Attributes:
      features: output channels.
      kernel_size: ``(kh, kw)``.
      strides: ``(sh, sw)``.
      padding: ``"SAME"``, ``"VALID"`` or explicit ``((lo, hi), (lo, hi))`` (as ``lax.conv_transpose``).
      use_bias: add a bias.
      kernel_init / bias_init: initialisers (flax's defaults: LeCun normal, zeros).
      conv_impl: ``"auto"``, ``"patches"`` or ``"lax"``.
    """

    features: int
    kernel_size: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    padding: str | Sequence[tuple[int, int]] = "SAME"
    use_bias: bool = True
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()
    conv_impl: str = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [*batch, H, W, C] -> [*batch, H', W', features]
        batch_shape = x.shape[:-3]
        x = x.reshape((-1,) + x.shape[-3:])
        kernel = self.param("kernel", self.kernel_init, tuple(self.kernel_size) + (x.shape[-1], self.features),
                            jnp.float32)
        bias = self.param("bias", self.bias_init, (self.features,), jnp.float32) if self.use_bias else None
        x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias)
        y = conv_transpose(x, kernel, tuple(self.strides), self.padding, self.conv_impl)
        if bias is not None:
            y = y + bias
        return y.reshape(batch_shape + y.shape[1:])
