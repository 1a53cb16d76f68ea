"""Reconstruction metrics, batched and jittable.

Every metric compares a batch of references ``x`` with a batch of reconstructions ``y`` of the same shape
``[batch, ...]`` and returns one value per example (``[batch]``); ``aggregate`` reduces them. Images are assumed
in ``[0, data_range]``.

| metric | definition |
|---|---|
| ``mse`` | mean over the non-batch axes of ``(x - y)^2`` |
| ``mae`` | mean of ``|x - y|`` |
| ``psnr`` | ``10 log10(data_range^2 / mse)`` (infinite for a perfect reconstruction) |
| ``ncc`` | normalised cross-correlation (Ziller et al. Def. 3): the Pearson correlation of the two flattened examples |
| ``ssim`` | structural similarity (Wang et al. 2004) via ``dm_pix.ssim``, Gaussian window 11, sigma 1.5 |
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from recon_jax._validation import POSITIVE, guard, nan_if

__all__ = ["mse", "mae", "psnr", "ncc", "ssim", "aggregate", "psnr_of_mean_mse"]


def _check(x, y):
    x, y = jnp.asarray(x), jnp.asarray(y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {x.shape} and {y.shape}")
    if x.ndim < 2:
        raise ValueError(f"x must be batched, i.e. have a leading batch axis and >= 1 more axis; got shape {x.shape}")
    dtype = jnp.result_type(x, y, jnp.float32)
    return x.astype(dtype), y.astype(dtype)


def _per_example_mean(v):
    return jnp.mean(v.reshape(v.shape[0], math.prod(v.shape[1:])), axis=1)  # an empty batch gives [0]


@jax.jit
def mse(x: jax.Array, y: jax.Array) -> jax.Array:
    """Per-example mean squared error, ``[batch]``.

    >>> import jax.numpy as jnp
    >>> mse(jnp.zeros((2, 4)), jnp.array([[0., 0., 0., 2.], [1., 1., 1., 1.]]))
    Array([1., 1.], dtype=float32)
    """
    x, y = _check(x, y)
    return _per_example_mean((x - y) ** 2)


@jax.jit
def mae(x: jax.Array, y: jax.Array) -> jax.Array:
    """Per-example mean absolute error, ``[batch]``.

    >>> import jax.numpy as jnp
    >>> mae(jnp.zeros((1, 4)), jnp.array([[0., 0., 0., 2.]]))
    Array([0.5], dtype=float32)
    """
    x, y = _check(x, y)
    return _per_example_mean(jnp.abs(x - y))


def psnr(x: jax.Array, y: jax.Array, data_range: float = 1.0) -> jax.Array:
    """Per-example peak signal-to-noise ratio in dB, ``10 log10(data_range^2 / mse)``; ``inf`` when equal.

    >>> import jax.numpy as jnp
    >>> psnr(jnp.zeros((1, 4)), jnp.full((1, 4), 0.1))
    Array([20.], dtype=float32)
    """
    bad = guard(("data_range", data_range, POSITIVE), cast=(data_range,))  # as jit casts it in _psnr
    return nan_if(bad, _psnr(x, y, data_range))


@jax.jit
def _psnr(x, y, data_range):
    m = mse(x, y)
    return 10.0 * (2.0 * jnp.log10(jnp.asarray(data_range, m.dtype)) - jnp.log10(m))


@jax.jit
def ncc(x: jax.Array, y: jax.Array) -> jax.Array:
    """Per-example normalised cross-correlation (Ziller et al., Def. 3), in [-1, 1].

    ``NCC(x, y) = (1/N) sum_i (x_i - mean(x)) (y_i - mean(y)) / (std(x) std(y))`` over the N entries of one
    example (population standard deviations), i.e. the Pearson correlation. Constant examples give NaN.

    >>> import jax.numpy as jnp
    >>> ncc(jnp.array([[0., 1., 2.]]), jnp.array([[1., 3., 5.]]))
    Array([1.], dtype=float32)
    """
    x, y = _check(x, y)
    x = x.reshape(x.shape[0], math.prod(x.shape[1:]))
    y = y.reshape(y.shape[0], math.prod(y.shape[1:]))
    xc = x - x.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    r = jnp.mean(xc * yc, axis=1) / (jnp.std(x, axis=1) * jnp.std(y, axis=1))
    return jnp.clip(r, -1.0, 1.0)  # rounding gave 1.0000001 for identical examples in float32


def ssim(x: jax.Array, y: jax.Array, data_range: float = 1.0) -> jax.Array:
    """Per-example SSIM for images ``[batch, H, W, C]`` (``[batch, H, W]`` is treated as one channel).

    Uses ``dm_pix.ssim`` (Gaussian window of size 11, sigma 1.5, K1 = 0.01, K2 = 0.03), matching
    ``skimage.metrics.structural_similarity(..., gaussian_weights=True, sigma=1.5, use_sample_covariance=False)``.

    >>> import jax.numpy as jnp
    >>> ssim(jnp.ones((1, 16, 16, 1)) * 0.5, jnp.ones((1, 16, 16, 1)) * 0.5)
    Array([1.], dtype=float32)
    """
    bad = guard(("data_range", data_range, POSITIVE))
    x, y = _check(x, y)
    if x.ndim == 3:
        x, y = x[..., None], y[..., None]
    if x.ndim != 4:
        raise ValueError(f"ssim needs images [batch, H, W(, C)], got shape {x.shape}")
    if x.shape[0] == 0:
        return jnp.zeros((0,), x.dtype)
    return nan_if(bad, _ssim(x, y, data_range))


@jax.jit
def _ssim(x, y, data_range):
    import dm_pix

    return dm_pix.ssim(x, y, max_val=data_range)


def psnr_of_mean_mse(x: jax.Array, y: jax.Array, data_range: float = 1.0) -> jax.Array:
    """Aggregate PSNR computed from the mean MSE over the batch (the usual 'dataset PSNR').

    Raises:
      ValueError: for an empty batch or ``data_range <= 0`` (NaN under ``jit``).

    >>> import jax.numpy as jnp
    >>> psnr_of_mean_mse(jnp.zeros((2, 4)), jnp.full((2, 4), 0.1))
    Array(20., dtype=float32)
    """
    bad = guard(("data_range", data_range, POSITIVE))
    if jnp.shape(x)[:1] == (0,):
        raise ValueError("x must hold at least one example for psnr_of_mean_mse; got an empty batch")
    m = jnp.mean(mse(x, y))
    out = 10.0 * (2.0 * jnp.log10(jnp.asarray(data_range, m.dtype)) - jnp.log10(m))
    return nan_if(bad, out)


def aggregate(values: jax.Array) -> dict[str, jax.Array]:
    """Summary statistics of per-example values: mean, std, median, min, max (NaN-aware: ignores NaN).

    Raises:
      ValueError: if ``values`` is empty.

    >>> {k: float(v) for k, v in aggregate([1.0, 3.0, float("nan")]).items()}
    {'mean': 2.0, 'std': 1.0, 'median': 2.0, 'min': 1.0, 'max': 3.0}
    """
    v = jnp.asarray(values)
    if v.size == 0:
        raise ValueError("values must hold at least one value to aggregate; got an empty array")
    return {
        "mean": jnp.nanmean(v),
        "std": jnp.nanstd(v),
        "median": jnp.nanmedian(v),
        "min": jnp.nanmin(v),
        "max": jnp.nanmax(v),
    }
