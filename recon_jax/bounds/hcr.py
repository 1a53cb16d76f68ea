"""Hammersley-Chapman-Robbins (HCR) confidentiality bounds for dithered features (Tygert et al.).

Setting (Tygert et al., "Guarantees of confidentiality via Hammersley-Chapman-Robbins bounds", Sec. 2 and
App. A, with the equations restored in ``shared/papers/README.md``): a released model computes features
``a(x)`` of an input ``x`` and publishes the *dithered* features ``y = a(x) + n`` with
``n ~ N(0, sigma^2 I)``. For every perturbation ``Delta`` of the input, with
``delta = a(x + Delta) - a(x)``, every **unbiased** estimator ``x_hat(y)`` of ``x`` satisfies, for each
coordinate ``i`` (eq. 5 with eq. 12),

    Var(x_hat_i) >= Delta_i^2 / (exp(||delta||^2 / sigma^2) - 1).

The bound holds for *any* ``Delta`` (no linearisation, no smoothness of ``a``), exactly, whenever
``delta`` is computed by an exact forward pass; it holds in any orthonormal coordinate system of the input
space (``Delta_i`` is then the i-th coordinate of ``Delta``), in particular in the orthonormal DCT-II
basis the paper reports. Assumptions: Gaussian, isotropic noise of known ``sigma``, independent of ``x``;
the estimator is unbiased (no prior information). As ``||Delta|| -> 0`` with ``a`` differentiable, the
best such bound tends to the Cramer-Rao bound ``Var(x_hat_i) >= sigma^2 [(J^T J)^{-1}]_ii`` (eq. 18),
``J`` the Jacobian of ``a`` at ``x``, when the Fisher information ``J^T J / sigma^2`` is invertible.

Algorithm 1 (:func:`~recon_jax.bounds.hcr_search.hcr_bounds`, and
:func:`~recon_jax.bounds.hcr_search.hcr_bounds_reference` as the reference code runs it) searches for a good
``Delta``: a perturbation that moves the input far while moving the features little, i.e. approximately the least
singular direction of ``J``. It starts from ``z`` proportional to a noise draw, solves ``min_eps ||J eps - z||`` by
LSQR (matrix-free: ``J`` by jvp, ``J^T`` by vjp), sets ``z <- a(x + eps) - a(x)`` exactly, rescales, repeats, over
several random restarts, and keeps the best bound per coordinate.

Notation:

=================== =====================================================================
``x``               one input (any shape, e.g. [28, 28, 1]); coordinates in a chosen basis
``a``               the feature map (``feature_fn``)
``sigma``           standard deviation of the Gaussian dither (``noise_sigma``)
``Delta``           input perturbation (``input_shift``)
``delta``           feature perturbation ``a(x + Delta) - a(x)``; ``||delta||^2`` is
                    ``feature_shift_sq_norm``
``J``               Jacobian of ``a`` at ``x``
=================== =====================================================================

Invalid arguments raise ``ValueError`` when they are concrete (with ``validate=True``, the default); under
``jax.jit`` the values cannot be inspected and the closed forms return NaN for invalid entries instead.

Layout: this module holds the closed form; Algorithm 1, the search for a good ``Delta`` at which to evaluate it,
is :mod:`recon_jax.bounds.hcr_search` (:func:`~recon_jax.bounds.hcr_search.hcr_bounds`,
:func:`~recon_jax.bounds.hcr_search.hcr_bounds_reference`). Around them: the Cramer-Rao limit and
:func:`~recon_jax.bounds.cramer_rao.jacobian_rank` (:mod:`recon_jax.bounds.cramer_rao`), the coordinate maps and DCT
helpers (:mod:`recon_jax.bounds.dct`), the matrix-free :func:`~recon_jax.bounds.lsqr.lsqr`, the dithering mechanism
(:mod:`recon_jax.mechanisms.dithering`) and the evaluation helpers (:mod:`recon_jax.bounds.hcr_eval`). Every public
name of these modules is importable from :mod:`recon_jax.bounds`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from recon_jax._validation import FINITE, FINITE_POSITIVE, NONNEGATIVE, float_dtype, guard, nan_if
from recon_jax.special import log_expm1

__all__ = ["hcr_variance_bound", "log_hcr_variance_bound"]


# ----------------------------------------------------------------------------------------------------------
# Closed form (eq. 5 with eq. 12).


@jax.jit
def _log_hcr_core(d, s, sigma):
    """Log-space HCR bound on same-dtype arrays (jitted: also fast when called eagerly); invalid entries: masked by
    the caller."""
    abs_d = jnp.abs(d)
    s_pos = s > 0
    s_safe = jnp.where(s_pos, s, jnp.ones_like(s))
    sigma_safe = jnp.where(sigma > 0, sigma, jnp.ones_like(sigma))
    log_t = jnp.log(s_safe) - 2.0 * jnp.log(sigma_safe)
    log_den = log_expm1(log_t, log_input=True, validate=False)
    d_pos = abs_d > 0
    log_num = 2.0 * jnp.log(jnp.where(d_pos, abs_d, jnp.ones_like(abs_d)))
    out = jnp.where(s_pos, log_num - log_den, jnp.inf)
    out = jnp.where(jnp.isinf(s) & s_pos, -jnp.inf, out)
    out = jnp.where(d_pos, out, -jnp.inf)
    return out


def log_hcr_variance_bound(
    input_shift: jax.Array,
    feature_shift_sq_norm: jax.Array,
    noise_sigma: jax.Array,
    *,
    validate: bool = True,
) -> jax.Array:
    """Log of the HCR variance bound ``Delta^2 / expm1(||delta||^2 / sigma^2)`` (Tygert et al. eqs. 5, 12).

    Computed entirely in log space: ``2 log|Delta| - log(expm1(exp(log s - 2 log sigma)))``, so neither
    ``s / sigma^2`` nor ``Delta^2`` is ever formed; valid for ``s / sigma^2`` from 0 (result ``+inf``, the
    shift is undetectable) through tiny to astronomically large (result very negative). (Subnormal
    *inputs* may be flushed to zero by XLA on CPU.) ``Delta = 0``
    gives ``-inf`` (a vacuous bound), including when ``s = 0``.

    Args:
      input_shift: ``Delta_i``, the perturbation of the input coordinate(s) bounded (any real).
      feature_shift_sq_norm: ``||a(x + Delta) - a(x)||^2 >= 0``.
      noise_sigma: the dither's standard deviation ``sigma > 0``.
      validate: raise ``ValueError`` on invalid concrete input (default). Under ``jit`` (or with
        ``validate=False``) invalid entries give NaN.

    Returns:
      ``log Var`` lower bound, broadcast over the arguments.

    Raises:
      ValueError: if ``input_shift`` is not finite, ``feature_shift_sq_norm`` is negative or NaN, or
        ``noise_sigma`` is not in ``(0, inf)`` (concrete values only).

    >>> round(float(log_hcr_variance_bound(1.0, 1e-30, 1.0)), 3)  # = log(1e30)
    69.078
    """
    args = (input_shift, feature_shift_sq_norm, noise_sigma)
    try:  # the dtype of the cast below, in which the mask judges the values
        dtype = float_dtype(*args)
    except TypeError:
        if not validate:
            raise
        dtype = None  # not numbers: guard's checks refuse them; lists: float_dtype after the checks, as before
    bad = guard(("input_shift", input_shift, FINITE), ("feature_shift_sq_norm", feature_shift_sq_norm, NONNEGATIVE),
                ("noise_sigma", noise_sigma, FINITE_POSITIVE), validate=validate, cast=dtype)  # +inf s: the bound is 0
    dtype = float_dtype(*args)
    out = _log_hcr_core(
        jnp.asarray(input_shift, dtype), jnp.asarray(feature_shift_sq_norm, dtype), jnp.asarray(noise_sigma, dtype)
    )
    return nan_if(bad, out)


def hcr_variance_bound(
    input_shift: jax.Array,
    feature_shift_sq_norm: jax.Array,
    noise_sigma: jax.Array,
    *,
    validate: bool = True,
) -> jax.Array:
    """HCR lower bound on the variance of any unbiased estimator of one input coordinate.

    Tygert et al., eq. (5) with the Gaussian denominator of eq. (12) (Appendix A): for features dithered
    by ``N(0, sigma^2 I)`` and an input perturbation with coordinate ``Delta_i`` (``input_shift``) that
    moves the features by ``delta`` with ``||delta||^2 = feature_shift_sq_norm``,

        Var(x_hat_i) >= Delta_i^2 / (exp(||delta||^2 / sigma^2) - 1)

    for every unbiased estimator ``x_hat``. Evaluated as ``exp`` of :func:`log_hcr_variance_bound`, so it
    neither overflows nor loses precision when ``||delta||^2 / sigma^2`` is tiny (``~ sigma^2 Delta^2 /
    ||delta||^2``, the Cramer-Rao regime) or huge (``~ Delta^2 exp(-||delta||^2/sigma^2)``); it returns
    ``inf`` only when the true value exceeds the float range or when ``||delta|| = 0 < |Delta|`` (an
    undetectable shift: no unbiased estimator exists), and ``0`` when ``Delta = 0``. Jittable,
    vmappable, differentiable in all arguments where finite.

    Args:
      input_shift: ``Delta_i`` (any real, broadcastable).
      feature_shift_sq_norm: ``||delta||^2 >= 0``.
      noise_sigma: ``sigma > 0``.
      validate: raise ``ValueError`` on invalid concrete input (default); under ``jit`` invalid entries
        give NaN.

    Returns:
      The variance lower bound, broadcast over the arguments.

    Raises:
      ValueError: if ``input_shift`` is not finite, ``feature_shift_sq_norm`` is negative or NaN, or
        ``noise_sigma`` is not in ``(0, inf)`` (concrete values only).

    >>> round(float(hcr_variance_bound(2.0, 1.0, 1.0)), 5)  # 4 / (e - 1)
    2.32791
    >>> # 1e40 / expm1(100): both overflow float32, the ratio does not.
    >>> round(float(hcr_variance_bound(1e20, 100.0, 1.0)) * 1e4, 3)  # 3.72008: float32 logs near 100 keep ~5 digits
    3.72
    """
    return jnp.exp(
        log_hcr_variance_bound(input_shift, feature_shift_sq_norm, noise_sigma, validate=validate)
    )
