"""Convolutions as patch extraction + one matrix product, a drop-in for ``lax.conv_general_dilated``.

XLA:CPU runs the small-channel convolutions of the paper's models slowly, and their gradients (the backward
passes of shadow-model training) much more slowly. Measured on this project's 2-core CPU, Balle et al.'s
CIFAR-10 CNN trained ~16x faster per model, and ~20x faster vmapped over 4 models, when each convolution is
computed as "gather the k x k patches with strided slices, then multiply by the reshaped kernel"
(``python -m benchmarks.conv_shadow``). The slices' gradients are pads and adds, and the product is a plain
matmul that XLA runs near the machine's peak, on every backend.

:func:`patch_conv_general_dilated` has the signature of :func:`jax.lax.conv_general_dilated` and computes the
same function for 2-D, channel-last (NHWC / HWIO) convolutions without dilation or feature groups; any other call
is passed to ``lax.conv_general_dilated`` unchanged. It plugs into flax through
``nn.Conv(..., conv_general_dilated=...)``, so parameters, initialisation, dtypes and batch handling stay exactly
those of ``nn.Conv``. :func:`conv_general_dilated_for` picks the implementation:

- ``"patches"``: always the patch form;
- ``"lax"``: always ``lax.conv_general_dilated`` (XLA's convolution);
- ``"auto"`` (the models' default): the patch form when JAX's default backend is the CPU, XLA's convolution on
  GPU and TPU, whose convolution kernels are fast. The two agree to float rounding (tests: 1e-12 in float64),
  not bit for bit, so models trained on different backends can differ in the last bits.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["CONV_IMPLS", "patch_conv_general_dilated", "conv_general_dilated_for", "resolve_conv_impl"]

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
    ("VALID", "SAME" or explicit non-negative pairs), no dilation, one feature group; everything else is
    delegated to ``lax.conv_general_dilated``.

    >>> import jax.numpy as jnp
    >>> x = jnp.arange(2 * 5 * 5 * 3, dtype=jnp.float32).reshape(2, 5, 5, 3)
    >>> w = jnp.ones((3, 3, 3, 4), jnp.float32)
    >>> y = patch_conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    >>> z = lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    >>> y.shape, bool(jnp.allclose(y, z))
    ((2, 3, 3, 4), True)
    """
    strides = tuple(int(s) for s in window_strides)
    simple = (_is_nhwc_hwio(dimension_numbers, lhs.ndim, rhs.ndim) and feature_group_count == 1
              and batch_group_count == 1 and len(strides) == 2
              and all(d in (None, 1) for d in (lhs_dilation or (None,)))
              and all(d in (None, 1) for d in (rhs_dilation or (None,))))
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
    if any(pads[0]) or any(pads[1]):
        lhs = jnp.pad(lhs, ((0, 0), pads[0], pads[1], (0, 0)))
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
