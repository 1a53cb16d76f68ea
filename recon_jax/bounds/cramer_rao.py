"""Cramer-Rao lower bounds for dithered features: the small-perturbation limit of the HCR bound (Tygert et al.).

Setting as in :mod:`recon_jax.bounds.hcr`: a released model publishes ``y = a(x) + n`` with
``n ~ N(0, sigma^2 I)``. The Fisher information of ``x`` is ``J^T J / sigma^2``, ``J`` the Jacobian of ``a``
at ``x``, and every unbiased estimator ``x_hat`` satisfies (Tygert et al. eq. 18)

    Var(x_hat_i) >= sigma^2 [(J^T J)^{-1}]_ii,

the limit of the best HCR bound as ``||Delta|| -> 0`` when ``a`` is differentiable at ``x``. When ``J^T J`` is
singular, coordinates outside the row space of ``J`` are unidentifiable (infinite bound); :func:`jacobian_rank`
reports the numerical rank. Assumptions: Gaussian, isotropic dither of known ``sigma``; unbiased estimation.
These functions form the full Jacobian (``dim a x dim x`` memory): small inputs only.

Notation:

=================== =====================================================================
``x``               one input; coordinates in a chosen orthonormal basis (:mod:`recon_jax.bounds.dct`)
``a``               the feature map (``feature_fn``)
``sigma``           standard deviation of the Gaussian dither (``noise_sigma``)
``J``               Jacobian of ``a`` at ``x`` (``[m, n]``: features x input coordinates)
=================== =====================================================================

Invalid arguments raise ``ValueError`` when they are concrete (with ``validate=True``, the default); under
``jax.jit`` an invalid ``noise_sigma`` gives NaN.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import FINITE, FINITE_POSITIVE, UNIT_HALF_OPEN, check, float_dtype, guard, is_concrete, nan_if
from recon_jax.bounds.dct import full_precision, to_coordinates

__all__ = ["cramer_rao_variance_bound", "cramer_rao_bounds", "jacobian_rank"]


def cramer_rao_variance_bound(
    jacobian: jax.Array,
    noise_sigma: float | jax.Array,
    *,
    rcond: float | None = None,
    validate: bool = True,
) -> jax.Array:
    """Cramer-Rao lower bounds ``sigma^2 [(J^T J)^{-1}]_ii`` on the variance of unbiased estimators.

    Tygert et al. eq. (18): the limit of the HCR bound as the perturbation shrinks, for features
    ``a(x) + N(0, sigma^2 I)`` with Jacobian ``J = da/dx`` (Fisher information ``J^T J / sigma^2``).
    Computed from the SVD ``J = U S V^T`` as ``sigma^2 sum_k V_ik^2 / s_k^2`` over the numerically
    nonzero singular values. If the Fisher information is singular, coordinate ``i`` is unidentifiable
    unless ``e_i`` lies in the row space of ``J``; unidentifiable coordinates get ``+inf`` (no unbiased
    estimator exists), identifiable ones the pseudo-inverse value.

    Args:
      jacobian: ``[m, n]`` Jacobian (features x input coordinates, in the coordinates wanted).
      noise_sigma: ``sigma > 0``.
      rcond: singular values ``<= rcond * s_max`` count as zero (default ``max(m, n) * machine eps``); a scalar
        in ``[0, 1)`` (at 1 or NaN every singular value counted as zero: every bound ``inf``).
      validate: raise ``ValueError`` on invalid concrete input (default); under ``jit`` invalid
        ``noise_sigma`` or ``rcond`` gives NaN.

    Returns:
      ``[n]`` variance lower bounds.

    Raises:
      ValueError: if ``jacobian`` is not 2-D or not finite, ``noise_sigma`` is not in ``(0, inf)``, or ``rcond``
        is not a scalar in ``[0, 1)``.

    >>> j = jnp.array([[2.0, 0.0], [0.0, 0.5], [0.0, 0.0]])
    >>> [round(float(t), 4) for t in cramer_rao_variance_bound(j, 1.0)]
    [0.25, 4.0]
    """
    j = jnp.asarray(jacobian)
    if j.ndim != 2:
        raise ValueError(f"jacobian must be 2-D [features, inputs]; got shape {j.shape}")
    check("jacobian", j, FINITE, validate=validate)
    try:  # the dtype of the cast below, in which the mask judges sigma
        dtype = float_dtype(j, noise_sigma)
    except TypeError:
        if not validate:
            raise
        dtype = None  # not a number: guard's check refuses it; a list: float_dtype after the check, as before
    m, n = j.shape
    if rcond is None:
        rcond = max(m, n) * float(np.finfo(np.dtype(dtype if dtype is not None else float_dtype(j))).eps)
    _check_rcond_scalar(rcond)
    bad = guard(("noise_sigma", noise_sigma, FINITE_POSITIVE), ("rcond", rcond, UNIT_HALF_OPEN), validate=validate,
                cast=dtype)
    dtype = float_dtype(j, noise_sigma)
    j = j.astype(dtype)
    sigma = jnp.asarray(noise_sigma, dtype)
    _, svals, vt = jnp.linalg.svd(j, full_matrices=False)  # vt: [k, n]
    keep = svals > rcond * jnp.max(svals)
    inv_sq = jnp.where(keep, 1.0 / jnp.where(keep, svals, 1.0) ** 2, 0.0)
    vt_sq = vt * vt
    var = jnp.sum(vt_sq * inv_sq[:, None], axis=0)
    in_rowspace = jnp.sum(vt_sq * keep[:, None], axis=0)
    identifiable = in_rowspace > 1.0 - 1e3 * float(np.finfo(np.dtype(dtype)).eps) * max(m, n)
    out = jnp.where(identifiable, sigma**2 * var, jnp.inf)
    return nan_if(bad, out)


def _check_rcond_scalar(rcond) -> None:
    if is_concrete(rcond) and np.size(rcond) != 1:
        raise ValueError(f"rcond must be a scalar in [0, 1); got shape {np.shape(rcond)}")


@full_precision
def cramer_rao_bounds(
    feature_fn: Callable[[jax.Array], jax.Array],
    x: jax.Array,
    noise_sigma: float | jax.Array,
    *,
    coordinates="dct",
    dct_axes: Sequence[int] | None = None,
    rcond: float | None = None,
) -> jax.Array:
    """Cramer-Rao standard-deviation bounds in the coordinates of the HCR bounds (small inputs only).

    Forms the full Jacobian of ``feature_fn`` at ``x`` (``jax.jacfwd``; ``dim a x dim x`` memory),
    rotates it into the chosen coordinates and returns ``sqrt`` of :func:`cramer_rao_variance_bound`.
    This is the ``perturbation_size -> 0`` limit of the best per-coordinate HCR bound (Tygert et al.
    eq. 18), which requires ``feature_fn`` to be differentiable at ``x``.

    Args:
      feature_fn: ``x -> a(x)`` for one example.
      x: one input, any shape.
      noise_sigma: ``sigma > 0``.
      coordinates: ``"dct"``, ``"pixel"`` or an orthogonal matrix (see
        :func:`~recon_jax.bounds.dct.to_coordinates`).
      dct_axes: DCT axes (default :func:`~recon_jax.bounds.dct.default_dct_axes`).
      rcond: see :func:`cramer_rao_variance_bound`.

    Returns:
      Standard-deviation lower bounds shaped like ``x`` (``inf`` for unidentifiable coordinates).

    Raises:
      ValueError: if ``noise_sigma`` or ``rcond`` is invalid (concrete values), or ``coordinates`` is a matrix that
        is not orthogonal (:func:`~recon_jax.bounds.dct.to_coordinates`).

    >>> [round(float(t), 4) for t in cramer_rao_bounds(lambda v: 2.0 * v, jnp.zeros(2), 1.0,
    ...                                                 coordinates="pixel")]
    [0.5, 0.5]
    """
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    jac = jax.jacfwd(lambda v: feature_fn(v).reshape(-1))(x)  # [m, *x.shape]
    m = jac.shape[0]
    # Jacobian w.r.t. coordinates c (x = Q^T c): rows are Q applied to the rows of J.
    jac_c = jax.vmap(lambda row: to_coordinates(row, coordinates, dct_axes))(jac).reshape(m, -1)
    var = cramer_rao_variance_bound(jac_c, noise_sigma, rcond=rcond)
    return jnp.sqrt(var).reshape(x.shape)


@full_precision
def jacobian_rank(
    feature_fn: Callable[[jax.Array], jax.Array], x: jax.Array, *, rcond: float | None = None
) -> jax.Array:
    """Numerical rank of the Jacobian of ``feature_fn`` at ``x`` (singular values above ``rcond * s_max``).

    Uses the same threshold as :func:`cramer_rao_variance_bound` (default ``max(m, n) * machine eps``). A rank
    below ``x.size`` means the Fisher information is singular: some coordinates have an infinite Cramer-Rao
    bound, and HCR values for them come from LSQR's minimum-norm solutions. Forms the full Jacobian
    (small inputs only).

    Args:
      feature_fn: ``x -> a(x)`` for one example.
      x: one input.
      rcond: relative threshold, a scalar in ``[0, 1)``.

    Returns:
      The rank (int32 scalar).

    Raises:
      ValueError: if ``rcond`` is not a scalar in ``[0, 1)`` (concrete values).

    >>> int(jacobian_rank(lambda v: jnp.array([v[0] + v[1], 2.0 * (v[0] + v[1])]), jnp.zeros(2)))
    1
    """
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    if rcond is not None:
        check("rcond", rcond, UNIT_HALF_OPEN)
        _check_rcond_scalar(rcond)
    jac = jax.jacfwd(lambda v: feature_fn(v).reshape(-1))(x).reshape(-1, x.size)
    m, n = jac.shape
    if rcond is None:
        rcond = max(m, n) * float(np.finfo(np.dtype(jac.dtype)).eps)
    svals = jnp.linalg.svd(jac, compute_uv=False)
    return jnp.sum(svals > rcond * jnp.max(svals)).astype(jnp.int32)
