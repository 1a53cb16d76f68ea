"""Orthonormal coordinates of the input space: the DCT-II (and its inverse) in jnp, and the coordinate maps.

The HCR and Cramer-Rao bounds (:mod:`recon_jax.bounds.hcr`, :mod:`recon_jax.bounds.cramer_rao`) hold in any
orthonormal coordinate system of the input space; :func:`to_coordinates` / :func:`from_coordinates` express a
vector in the one chosen (``"dct"``: the DCT-II over :func:`default_dct_axes`, as Tygert et al. report;
``"pixel"``; or an orthogonal matrix).

The type-II discrete cosine transform with orthonormal scaling, as in ``scipy.fft.dctn(norm="ortho")``:

    X_k = s_k sum_{j=0}^{n-1} x_j cos(pi k (2 j + 1) / (2 n)),  s_0 = sqrt(1/n), s_k = sqrt(2/n) (k > 0).

The matrix ``C`` with these entries is orthogonal, so the inverse (a DCT-III) is ``C^T``. For the image
sizes in the Tygert et al. experiments (28 x 28, 32 x 32) a dense product is both simplest and fastest on
every backend (it is a matmul), and it is exactly linear, which the HCR bounds rely on. Every product here runs
at ``Precision.HIGHEST``: under JAX's default precision a GPU rounds float32 matmul operands to TF32 (about
1e-3 relative error), which turned the float32 HCR bounds into different numbers on a GPU (their LSQR
stopping tests see the transform's rounding), while the CPU computes these products in full float32 anyway.
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import check_integer, float_dtype, is_concrete

_EXACT = jax.lax.Precision.HIGHEST  # full float32 products on every backend (no TF32 on GPUs)


def full_precision(fn):
    """Runs ``fn`` (traced or eager) with JAX's default matmul precision at ``"highest"``, so that every product
    it makes, the feature map's Jacobian products included, is a full float32 (or float64) product on every
    backend. The HCR and Cramer-Rao bounds are numerical linear algebra on these products. With a GPU's default
    TF32 products (~1e-3 relative error) the float32 LSQR solves stop elsewhere: on an H100 the median HCR bound
    of ``benchmarks/hcr.py``'s 64 MNIST examples (mode ``paper_tol``) was 0.104, against 0.285 from SciPy's LSQR
    on the same feature map; with full-precision products both sides give 0.285 and agree as they do on a CPU."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return wrapped


__all__ = ["dct_ii_matrix", "dctn_ortho", "idctn_ortho", "default_dct_axes", "to_coordinates", "from_coordinates"]


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
        x = jnp.moveaxis(jnp.tensordot(c, x, axes=([1], [ax]), precision=_EXACT), 0, ax)
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


# ----------------------------------------------------------------------------------------------------------
# Coordinates of the bounds.


def default_dct_axes(shape: Sequence[int]) -> tuple[int, ...]:
    """The axes :func:`~recon_jax.bounds.hcr_search.hcr_bounds` transforms by default: the two spatial axes of an
    ``[H, W, C]`` image, otherwise every axis.

    >>> default_dct_axes((28, 28, 1)), default_dct_axes((784,))
    ((0, 1), (0,))
    """
    if len(shape) == 3:
        return (0, 1)
    return tuple(range(len(shape)))


def _change_basis(v, coordinates, dct_axes, inverse: bool) -> jax.Array:
    """``v`` in the coordinates ``coordinates`` names (``inverse``: back from them); see :func:`to_coordinates`."""
    v = jnp.asarray(v)
    if isinstance(coordinates, str):
        if coordinates == "dct":
            axes = dct_axes if dct_axes is not None else default_dct_axes(v.shape)
            return idctn_ortho(v, axes) if inverse else dctn_ortho(v, axes)
        if coordinates == "pixel":
            return v
        raise ValueError(f"coordinates must be 'dct', 'pixel' or an orthogonal matrix; got {coordinates!r}")
    q = jnp.asarray(coordinates)
    if q.shape != (v.size, v.size):
        raise ValueError(f"coordinates matrix must have shape {(v.size, v.size)}; got {q.shape}")
    _check_orthogonal(coordinates, float_dtype(q))
    return jnp.matmul(q.T if inverse else q, v.reshape(-1), precision=_EXACT).reshape(v.shape)


def _check_orthogonal(q, dtype) -> None:
    """Raises ``ValueError`` naming ``coordinates`` unless a concrete ``q`` [n, n] satisfies
    ``max |Q Q^T - I| <= 100 sqrt(n) eps`` (``eps`` of the working ``dtype``, ``q``'s as a JAX floating array; judged
    in float64 on the host). ``q`` is the caller's object: inside a trace (Algorithm 1's scan) a NumPy matrix is
    still concrete, ``jnp.asarray`` of it is not.

    The bounds hold only in orthonormal coordinates: ``Q = 2 I`` halved the Cramer-Rao bounds and doubled the HCR
    ones. A float32 orthogonal matrix (rounded, or from a float32 QR) deviates by a few ``eps`` (measured <= 4e-7
    for n = 16 to 2048); the tolerance is 100 sqrt(n) ``eps`` (3.3e-4 at n = 784 in float32, 6e-13 in float64).
    A traced ``q`` (a matrix passed through ``jit``) is not checked. Costs one host ``n x n`` product.
    """
    if not is_concrete(q):
        return
    host = np.asarray(q).astype(np.dtype(dtype)).astype(np.float64)  # the values the product uses, on the host
    n = host.shape[0]
    tol = 100.0 * np.sqrt(n) * float(np.finfo(np.dtype(dtype)).eps)
    with np.errstate(invalid="ignore", over="ignore"):
        dev = np.max(np.abs(host @ host.T - np.eye(n))) if n else 0.0
    if not dev <= tol:  # NaN fails too
        raise ValueError(f"coordinates must be an orthogonal matrix (Q Q^T = I, rows an orthonormal basis): "
                         f"max |Q Q^T - I| = {dev:.3g} > {tol:.3g} (100 sqrt(n) eps of {np.dtype(dtype).name})")


def to_coordinates(v: jax.Array, coordinates="dct", dct_axes=None) -> jax.Array:
    """Expresses an input-space vector in the coordinate system of the bounds.

    Args:
      v: input-shaped array.
      coordinates: ``"dct"`` (orthonormal DCT-II over ``dct_axes``), ``"pixel"`` (identity), or an
        orthogonal matrix ``Q`` of shape ``[v.size, v.size]`` whose rows are the basis vectors
        (coefficients ``Q @ v.ravel()``, reshaped like ``v``); a concrete ``Q`` must satisfy
        ``max |Q Q^T - I| <= 100 sqrt(n) eps`` in its dtype.
      dct_axes: axes for ``"dct"``; default :func:`default_dct_axes`.

    Returns:
      The coefficients, shaped like ``v``.

    Raises:
      ValueError: for an unknown ``coordinates``, or a matrix of the wrong shape or not orthogonal.

    >>> to_coordinates(jnp.ones(4), "pixel").tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    return _change_basis(v, coordinates, dct_axes, inverse=False)


def from_coordinates(c: jax.Array, coordinates="dct", dct_axes=None) -> jax.Array:
    """Inverse of :func:`to_coordinates` (same arguments).

    >>> v = jnp.arange(4.0).reshape(2, 2)
    >>> bool(jnp.allclose(from_coordinates(to_coordinates(v)), v, atol=1e-5))
    True
    """
    return _change_basis(c, coordinates, dct_axes, inverse=True)
