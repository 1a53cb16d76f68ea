"""Baseline success probabilities kappa of a prior (Balle, Cherubin & Hayes, S&P 2022, Sec. VII and Prop. 6).

``kappa = sup_z0 P_{Z~pi}[||Z - z0|| <= eta]`` is the success of the best reconstruction that ignores the release;
the ReRo bounds of :mod:`recon_jax.bounds.rero` (which re-exports these functions) turn it into the bound gamma.
Notation and conventions (pure ``jnp``, ``validate=``) as in :mod:`recon_jax.bounds.rero`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy import special as jsp

from recon_jax._validation import (POSITIVE, as_float, at_least, finite_at_least, floor_tiny, guard, log_positive,
                                   nan_if)
from recon_jax.special import gammainc as _gammainc

__all__ = ["baseline_kappa_uniform_ball", "baseline_kappa_gaussian", "baseline_kappa_gaussian_tail_bound"]

ArrayLike = jax.typing.ArrayLike


def baseline_kappa_uniform_ball(eta: ArrayLike, dim: ArrayLike, *, validate: bool = True) -> jax.Array:
    """Baseline kappa for the uniform prior on the unit ball of R^d with l2 error (Balle et al., Prop. 6).

    ``kappa = sup_z0 Vol(B_1 cap B_eta(z0)) / Vol(B_1) = min(eta, 1)^d`` (a ball of radius eta < 1 fits inside the
    unit ball; for eta >= 1 the ball around the origin covers it). Computed as ``exp(d log min(eta, 1))``.

    Args:
      eta: error threshold, > 0.
      dim: dimension d, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      kappa in (0, 1] (at least the dtype's smallest normal number: where ``eta^d`` underflows, that
      conservative upper bound is returned instead of 0).

    Raises:
      ValueError: ``eta <= 0`` or ``dim < 1``.

    Example:
      >>> round(float(baseline_kappa_uniform_ball(0.5, 3)), 6)
      0.125
    """
    bad = guard(("eta", eta, POSITIVE), ("dim", dim, at_least(1)), validate=validate)
    log_eta = log_positive(eta, as_float(eta).dtype)
    eta, dim = as_float(eta, dim)
    # 1 for eta >= 1 at any dim (dim = inf gave inf * 0 = NaN there)
    exponent = jnp.where(log_eta < 0.0, dim * jnp.minimum(log_eta, 0.0), 0.0)
    out = floor_tiny(jnp.exp(exponent))  # 0.5^200 underflows float32: smallest normal
    return nan_if(bad, out)


def baseline_kappa_gaussian(eta: ArrayLike, sigma: ArrayLike, dim: ArrayLike, *, validate: bool = True) -> jax.Array:
    """Baseline kappa for the Gaussian prior N(w, sigma^2 I_d) with l2 error (Balle et al., proof of Prop. 7).

    Exact: the supremum is attained at z0 = w, so ``kappa = P[||Z|| <= eta / sigma] = P[chi^2_d <= eta^2/sigma^2]
    = P(d/2, eta^2 / (2 sigma^2))`` with P the regularised lower incomplete gamma function
    (:func:`recon_jax.special.gammainc`, accurate also for d up to 2e9, where both ``jax.scipy.special.gammainc``
    and ``scipy.special.gammainc`` lose accuracy in the lower tail).

    Args:
      eta: error threshold, > 0.
      sigma: prior standard deviation, > 0.
      dim: dimension d, finite and >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Where ``x = eta^2 / (2 sigma^2)`` underflows (float32: ``eta / sigma < ~1e-19``, exact values down to ~1e-38) the
    leading term of the series, ``P(a, x) = x^a / Gamma(a + 1)`` to rounding there, is taken in log space from the
    logarithms of eta and sigma (host-side for concrete values); a kappa that itself underflows is returned as the
    smallest normal number, a conservative upper bound (0 would understate the prior and is refused by the
    ``rero_*`` functions).

    Returns:
      kappa in (0, 1] (at least the dtype's smallest normal number).

    Raises:
      ValueError: ``eta <= 0``, ``sigma <= 0``, ``dim < 1`` or ``dim`` infinite.

    Example:
      >>> round(float(baseline_kappa_gaussian(1.0, 1.0, 1)), 5)  # P[|N(0,1)| <= 1] = erf(1/sqrt(2))
      0.68269
    """
    # eta and sigma judged as given (1e-40 is valid, and 0 in float32), dim as cast (1e39 is inf in float32)
    bad = guard(("eta", eta, POSITIVE), ("sigma", sigma, POSITIVE), validate=validate) | guard(
        ("dim", dim, finite_at_least(1)), validate=validate, cast=(eta, sigma, dim))
    dtype = as_float(eta, sigma, dim)[0].dtype
    log_ratio = log_positive(eta, dtype) - log_positive(sigma, dtype)
    eta, sigma, dim = as_float(eta, sigma, dim)
    a = jnp.where(bad, 1.0, dim) / 2.0
    log_x = jnp.where(bad, 0.0, 2.0 * log_ratio - math.log(2.0))
    tiny = jnp.finfo(dtype).tiny
    small = log_x < math.log(tiny)  # x = eta^2 / (2 sigma^2) underflows
    # eta / sigma from the logs where the cast flushed or overflowed either (eta = 1e-40 in float32)
    held = (eta >= tiny) & (sigma >= tiny) & jnp.isfinite(eta) & jnp.isfinite(sigma)
    ratio = jnp.where(bad | small, 1.0, jnp.where(held, eta, 1.0) / jnp.where(held, sigma, 1.0))
    ratio = jnp.where(held | bad | small, ratio, jnp.exp(jnp.where(held | bad | small, 0.0, log_ratio)))
    series = jnp.exp(a * log_x - jsp.gammaln(a + 1.0))  # P(a, x) = x^a e^-x / Gamma(a + 1) (1 + x / (a + 1) + ...)
    out = jnp.where(small, series, _gammainc(a, 0.5 * ratio * ratio, validate=False))
    return nan_if(bad, floor_tiny(out))


def baseline_kappa_gaussian_tail_bound(
    eta: ArrayLike, sigma: ArrayLike, dim: ArrayLike, *, validate: bool = True
) -> jax.Array:
    """The closed-form upper bound on the Gaussian-prior kappa used in Balle et al.'s proof of Prop. 7.

    ``kappa <= exp(d/2 (1 - t + log t))`` with ``t = eta^2 / (sigma^2 d)`` (chi-square lower-tail bound,
    Dasgupta & Gupta Lemma 2.2), valid for ``t <= 1``; for ``t > 1`` the bound exceeds 1 and 1 is returned.

    Args:
      eta: error threshold, > 0.
      sigma: prior standard deviation, > 0.
      dim: dimension d, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      An upper bound on :func:`baseline_kappa_gaussian`, in (0, 1].

    Raises:
      ValueError: ``eta <= 0``, ``sigma <= 0`` or ``dim < 1``.

    Example:
      >>> round(float(baseline_kappa_gaussian_tail_bound(1.0, 1.0, 10)), 6)  # exp(5 (0.9 + log 0.1)); exact 1.7e-4
      0.0009
    """
    # judged as given, logs on the host when concrete (eta = 1e-40 is 0 in float32, its log is not)
    bad = guard(("eta", eta, POSITIVE), ("sigma", sigma, POSITIVE), ("dim", dim, at_least(1)), validate=validate)
    dtype = as_float(eta, sigma, dim)[0].dtype
    # log t = 2 log(eta / sigma) - log d, kept in log space so that t never under/overflows.
    log_t = 2.0 * (log_positive(eta, dtype) - log_positive(sigma, dtype)) - log_positive(dim, dtype)
    log_t = jnp.where(bad, 0.0, log_t)
    eta, sigma, dim = as_float(eta, sigma, dim)
    # 1 - t + log t = -(t - 1 - log t) <= 0; log1p form is accurate near t = 1.
    exponent = 0.5 * dim * (log_t - jnp.expm1(jnp.minimum(log_t, 0.0)))
    # the smallest normal number where the bound underflows (0 is no upper bound on a positive kappa)
    out = floor_tiny(jnp.where(log_t >= 0, 1.0, jnp.exp(jnp.minimum(exponent, 0.0))))
    return nan_if(bad, out)
