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
| ``classifier_kl`` | KL divergence of a classifier's predicted class distributions for ``x`` and for ``y`` |
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp

from recon_jax._validation import POSITIVE, guard, nan_if

__all__ = ["mse", "mae", "psnr", "ncc", "ssim", "classifier_kl", "aggregate", "psnr_of_mean_mse"]


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

    Args:
      x: references ``[batch, ...]`` (any real dtype).
      y: reconstructions, the same shape as ``x``.

    Returns:
      ``[batch]``: the mean of ``(x - y)^2`` over each example's entries, in the common floating dtype of ``x`` and
      ``y`` (at least float32). An empty batch gives ``[0]``; examples with no entries give NaN.

    Raises:
      ValueError: if ``x`` and ``y`` differ in shape or have no batch axis (``ndim < 2``); the shapes are static,
        so this is raised under ``jit`` too.

    >>> import jax.numpy as jnp
    >>> mse(jnp.zeros((2, 4)), jnp.array([[0., 0., 0., 2.], [1., 1., 1., 1.]]))
    Array([1., 1.], dtype=float32)
    """
    x, y = _check(x, y)
    return _per_example_mean((x - y) ** 2)


@jax.jit
def mae(x: jax.Array, y: jax.Array) -> jax.Array:
    """Per-example mean absolute error, ``[batch]``.

    Args:
      x: references ``[batch, ...]`` (any real dtype).
      y: reconstructions, the same shape as ``x``.

    Returns:
      ``[batch]``: the mean of ``|x - y|`` over each example's entries, in the common floating dtype of ``x`` and
      ``y`` (at least float32). An empty batch gives ``[0]``; examples with no entries give NaN.

    Raises:
      ValueError: if ``x`` and ``y`` differ in shape or have no batch axis (``ndim < 2``); the shapes are static,
        so this is raised under ``jit`` too.

    >>> import jax.numpy as jnp
    >>> mae(jnp.zeros((1, 4)), jnp.array([[0., 0., 0., 2.]]))
    Array([0.5], dtype=float32)
    """
    x, y = _check(x, y)
    return _per_example_mean(jnp.abs(x - y))


def psnr(x: jax.Array, y: jax.Array, data_range: float = 1.0) -> jax.Array:
    """Per-example peak signal-to-noise ratio in dB, ``10 log10(data_range^2 / mse)``; ``inf`` when equal.

    Args:
      x: references ``[batch, ...]`` (any real dtype).
      y: reconstructions, the same shape as ``x``.
      data_range: the range of the pixel values (``1.0`` for ``[0, 1]`` images, ``255.0`` for 8-bit), > 0.

    Returns:
      ``[batch]`` PSNR values in dB, in the dtype of :func:`mse`; ``inf`` for an example reconstructed exactly.
      Under ``jit`` an invalid ``data_range`` (``<= 0`` or NaN) gives NaN.

    Raises:
      ValueError: if ``x`` and ``y`` differ in shape or have no batch axis (also under ``jit``), or if a concrete
        ``data_range`` is not > 0.

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

    Args:
      x: references ``[batch, ...]`` (any real dtype).
      y: reconstructions, the same shape as ``x``.

    Returns:
      ``[batch]`` correlations in ``[-1, 1]`` (clipped against rounding), in the common floating dtype of ``x``
      and ``y`` (at least float32); NaN where either example is constant.

    Raises:
      ValueError: if ``x`` and ``y`` differ in shape or have no batch axis (``ndim < 2``); the shapes are static,
        so this is raised under ``jit`` too.

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

    Args:
      x: reference images ``[batch, H, W, C]`` or ``[batch, H, W]``, values in ``[0, data_range]``.
      y: reconstructions, the same shape as ``x``.
      data_range: the range of the pixel values (``max_val`` of ``dm_pix.ssim``), > 0.

    Returns:
      ``[batch]`` SSIM values (1 for identical images), the mean over pixels and channels (float32 for float32
      inputs; with ``jax_enable_x64``, ``dm_pix`` returns float64). An empty batch gives ``[0]``. Under ``jit`` an
      invalid ``data_range`` (``<= 0`` or NaN) gives NaN.

    Raises:
      ValueError: if ``x`` and ``y`` differ in shape or are not ``[batch, H, W]`` / ``[batch, H, W, C]`` with H and
        W >= 11 (also under ``jit``), or if a concrete ``data_range`` is not > 0.

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
    if min(x.shape[1:3]) < 11:  # the window would overhang every pixel: dm_pix returns a number skimage refuses
        raise ValueError(f"ssim needs images of at least 11 x 11 pixels (its Gaussian window), got shape {x.shape}")
    if x.shape[0] == 0:
        return jnp.zeros((0,), x.dtype)
    return nan_if(bad, _ssim(x, y, data_range))


@jax.jit
def _ssim(x, y, data_range):
    import dm_pix

    return dm_pix.ssim(x, y, max_val=data_range)


def psnr_of_mean_mse(x: jax.Array, y: jax.Array, data_range: float = 1.0) -> jax.Array:
    """Aggregate PSNR computed from the mean MSE over the batch (the usual 'dataset PSNR').

    ``10 log10(data_range^2 / mean_i mse_i)``; not the mean of the per-example :func:`psnr` values.

    Args:
      x: references ``[batch, ...]`` (any real dtype).
      y: reconstructions, the same shape as ``x``.
      data_range: the range of the pixel values, > 0.

    Returns:
      A scalar (0-d array) in dB, in the dtype of :func:`mse`; ``inf`` when every example is reconstructed exactly.
      Under ``jit`` an invalid ``data_range`` (``<= 0`` or NaN) gives NaN.

    Raises:
      ValueError: for an empty batch, or ``x`` and ``y`` that differ in shape or have no batch axis (all static, so
        also under ``jit``), or a concrete ``data_range`` that is not > 0.

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

    Args:
      values: per-example values of any shape (e.g. ``[batch]`` from :func:`psnr`); every entry counts. An array or
        anything ``jnp.asarray`` accepts (a list of floats).

    Returns:
      A dict with keys ``"mean"``, ``"std"`` (population standard deviation, ``ddof=0``), ``"median"``, ``"min"``
      and ``"max"``, each a 0-d array over the non-NaN entries; all NaN when every entry is NaN. An ``inf`` entry
      (a perfect :func:`psnr`) is not ignored.

    Raises:
      ValueError: if ``values`` is empty (its size is static, so also under ``jit``).

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


def classifier_kl(apply_fn: Callable[[jax.Array], jax.Array], targets: jax.Array, reconstructions: jax.Array,
                  ) -> jax.Array:
    """KL divergence ``KL(p(. | target) || p(. | reconstruction))`` of a classifier's predictions, ``[T]``.

    Balle et al. Sec. V-B (c): a separately trained, accurate classifier (LeNet on MNIST) is applied to the
    target and to its reconstruction; the KL divergence between the predicted class distributions measures how
    much of the label-relevant content survives. ``apply_fn`` maps images to logits (e.g.
    ``functools.partial(model.apply, variables)``).

    Args:
      apply_fn: the classifier, images ``[T, ...]`` to logits ``[T, K]``.
      targets: ``[T, ...]`` original images.
      reconstructions: ``[T, ...]`` their reconstructions (same shape).

    Returns:
      ``[T]`` KL divergences in nats (>= 0; 0 where the predictions agree).

    Raises:
      ValueError: if ``targets`` and ``reconstructions`` differ in shape.

    >>> import jax.numpy as jnp
    >>> f = lambda x: jnp.stack([x.sum((1, 2)), jnp.zeros(x.shape[0])], axis=-1)
    >>> classifier_kl(f, jnp.ones((1, 2, 2)), jnp.ones((1, 2, 2))).tolist()
    [0.0]
    """
    targets, reconstructions = jnp.asarray(targets), jnp.asarray(reconstructions)
    if targets.shape != reconstructions.shape:
        raise ValueError(f"targets and reconstructions must have the same shape, got {targets.shape}, "
                         f"{reconstructions.shape}")
    lp = jax.nn.log_softmax(apply_fn(targets), axis=-1)
    lq = jax.nn.log_softmax(apply_fn(reconstructions), axis=-1)
    return jnp.sum(jnp.exp(lp) * (lp - lq), axis=-1)
