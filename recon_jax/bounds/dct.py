"""Orthonormal DCT-II (and its inverse) in jnp, as dense matrix products along the chosen axes.

The type-II discrete cosine transform with orthonormal scaling, as in ``scipy.fft.dctn(norm="ortho")``:

    X_k = s_k sum_{j=0}^{n-1} x_j cos(pi k (2 j + 1) / (2 n)),  s_0 = sqrt(1/n), s_k = sqrt(2/n) (k > 0).

The matrix ``C`` with these entries is orthogonal, so the inverse (a DCT-III) is ``C^T``. For the image
sizes in the Tygert et al. experiments (28 x 28, 32 x 32) a dense product is both simplest and fastest on
every backend (it is a matmul), and it is exactly linear, which the HCR bounds rely on.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import check_integer

__all__ = ["dct_ii_matrix", "dctn_ortho", "idctn_ortho"]


def dct_ii_matrix(n: int, dtype=None) -> jax.Array:
    """The n x n orthonormal DCT-II matrix ``C`` (``C @ x`` is ``scipy.fft.dct(x, norm="ortho")``).

    Args:
        n: transform length, a Python int ``>= 1``.
        dtype: the floating dtype (default: JAX's default float).

    Returns:
        ``C`` with ``C @ C.T = I``.

    Raises:
        ValueError: if ``n < 1``.

    >>> c = dct_ii_matrix(4)
    >>> bool(jnp.allclose(c @ c.T, jnp.eye(4), atol=1e-6))
    True
    """
    n = check_integer("n", n, 1)
    k = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    mat = np.cos(np.pi * k * (2 * j + 1) / (2 * n)) * np.sqrt(2.0 / n)
    mat[0, :] = np.sqrt(1.0 / n)
    return jnp.asarray(mat, dtype=dtype if dtype is not None else jnp.result_type(float))


def _normalise_axes(axes, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axes must lie in [-{ndim}, {ndim}); got {axes!r}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"axes must be distinct; got {axes!r}")
    return tuple(out)


def _apply_along(x: jax.Array, axes: tuple[int, ...], transpose: bool) -> jax.Array:
    dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(float)
    x = x.astype(dtype)
    for ax in axes:
        c = dct_ii_matrix(x.shape[ax], dtype)
        if transpose:
            c = c.T
        # Contract c[k, j] with x[..., j, ...] along `ax`, then move the new axis back in place.
        x = jnp.moveaxis(jnp.tensordot(c, x, axes=([1], [ax])), 0, ax)
    return x


def dctn_ortho(x: jax.Array, axes: int | Sequence[int] | None = None) -> jax.Array:
    """Orthonormal n-dimensional DCT-II over ``axes`` (default all), like ``scipy.fft.dctn(norm="ortho")``.

    Args:
        x: real array.
        axes: the axes to transform (ints, negative allowed); ``None`` for all axes.

    Returns:
        The coefficients, shaped like ``x``.

    Raises:
        ValueError: if an axis is out of range or repeated.

    >>> x = jnp.arange(6.0).reshape(2, 3)
    >>> bool(jnp.allclose(idctn_ortho(dctn_ortho(x)), x, atol=1e-5))
    True
    >>> round(float(dctn_ortho(jnp.ones(4))[0]), 4)  # the DC coefficient of a constant is sqrt(n)
    2.0
    """
    x = jnp.asarray(x)
    return _apply_along(x, _normalise_axes(axes, x.ndim), transpose=False)


def idctn_ortho(x: jax.Array, axes: int | Sequence[int] | None = None) -> jax.Array:
    """Inverse of :func:`dctn_ortho` (an orthonormal DCT-III), like ``scipy.fft.idctn(norm="ortho")``.

    Args:
        x: real array of DCT-II coefficients.
        axes: the axes to transform; ``None`` for all axes.

    Returns:
        The signal, shaped like ``x``.

    Raises:
        ValueError: if an axis is out of range or repeated.

    >>> c = dctn_ortho(jnp.array([1.0, 2.0, 3.0]))
    >>> [round(float(t), 4) for t in idctn_ortho(c)]
    [1.0, 2.0, 3.0]
    """
    x = jnp.asarray(x)
    return _apply_along(x, _normalise_axes(axes, x.ndim), transpose=True)
