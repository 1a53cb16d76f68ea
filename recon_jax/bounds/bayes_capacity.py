"""Bayes' capacity of the DP-SGD noise channels, in log space: Biswas et al., "Comparing privacy notions for
protection against reconstruction attacks in machine learning", Sec. V (Thms. 5 and 6, Appendix B-F/B-G).

The Bayes' capacity of a channel f is ``C = int sup_x f(x)(y) dy`` (Def. 7); ``log C`` is Sibson's mutual
information of order infinity and bounds the multiplicative leakage to any adversary (the "Miracle theorem"):
an adversary's success probability grows by at most a factor C through the release. Capacities are astronomically
large in the dimensions of real networks (``p = 13,700`` in the paper), so these functions return ``log C``.

Notation:

===============  ==============================================================
``sigma``        standard deviation of the Gaussian noise per coordinate, > 0
``dim``          dimension p of the released vector
``num_layers``   R: the input lies in the ball of radius R (R layers, each clipped to 1, as in the paper)
``kappa``        von Mises-Fisher concentration, > 0
===============  ==============================================================

Erratum (Thm. 5): the statement prints ``2 Z / (Gamma(p/2) 2^{p/2} sigma^p)`` for the shell term, but the proof in
Appendix B-F (area of the sphere ``2 pi^{p/2} / Gamma(p/2)`` times the radial integral ``Z / 2``) gives
``Z / (Gamma(p/2) 2^{p/2} sigma^p)``. The statement's version gives capacity 2 + ... at p = 1, where the exact value
is ``1 + 2R / (sqrt(2 pi) sigma)``. We implement the proof's value and test it against direct numerical
integration of Def. 7 and the p = 1 closed form.

Precision: ``log C`` is assembled from terms of size about ``p log p``; its absolute rounding error is about
``eps * p log p`` (float64: < 1e-12 for p <= 1e4 in the tests; float32: about 1e-7 p), which matters only when
``log C`` itself is tiny (very noisy or very diffuse channels).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from recon_jax._validation import FINITE_POSITIVE, POSITIVE, as_float, at_least, finite_at_least, guard, nan_if
from recon_jax.special import log_iv

__all__ = ["log_bayes_capacity_gaussian", "log_bayes_capacity_vmf"]

ArrayLike = jax.typing.ArrayLike

# Gauss-Legendre nodes/weights on [-1, 1] for the radial integral (float64 host constants).
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(128)
_HALF_WIDTH = 14.0  # the log-concave radial integrand has curvature in [1, 2]: +-14 covers e^{-98} of the mass


def _log_radial_integral(p: jax.Array, rho: jax.Array) -> jax.Array:
    """log J, ``J = int_0^inf (s + rho)^{p-1} exp(-s^2 / 2) ds`` for p >= 1, rho >= 0.

    The integrand's log, ``(p-1) log(s + rho) - s^2/2``, is concave with its maximum at
    ``s* = (sqrt(rho^2 + 4(p-1)) - rho) / 2`` and curvature between 1 and 2, so Gauss-Legendre quadrature on
    ``[max(0, s* - 14), s* + 14]`` (128 nodes), evaluated relative to the maximum, is accurate to rounding.
    """
    pm1 = p - 1.0
    s_star = 2.0 * pm1 / (jnp.sqrt(rho * rho + 4.0 * pm1) + rho + (pm1 == 0))  # stable form of the root
    s_star = jnp.where(pm1 == 0, 0.0, s_star)
    lo = jnp.maximum(0.0, s_star - _HALF_WIDTH)
    hi = s_star + _HALF_WIDTH
    nodes = jnp.asarray(_GL_NODES, dtype=rho.dtype)
    weights = jnp.asarray(_GL_WEIGHTS, dtype=rho.dtype)
    half = 0.5 * (hi - lo)
    s = lo[..., None] + half[..., None] * (nodes + 1.0)

    def log_f(t):
        base = t + rho[..., None] if jnp.ndim(t) > jnp.ndim(rho) else t + rho
        pm = pm1[..., None] if jnp.ndim(t) > jnp.ndim(pm1) else pm1
        safe = jnp.where(base > 0, base, 1.0)
        return jnp.where(pm == 0, 0.0, pm * jnp.log(safe)) - 0.5 * t * t

    peak = log_f(s_star)
    vals = jnp.exp(log_f(s) - peak[..., None])
    return peak + jnp.log(half * jnp.sum(weights * vals, axis=-1))


def log_bayes_capacity_gaussian(
    sigma: ArrayLike, dim: ArrayLike, num_layers: ArrayLike = 1, *, validate: bool = True
) -> jax.Array:
    """Log Bayes' capacity of the Gaussian channel on the ball of radius R (Biswas et al., Thm. 5, corrected).

    ``C = R^p / (Gamma(p/2 + 1) 2^{p/2} sigma^p) + J (2 / sigma^p)... `` precisely, with ``rho = R / sigma``:
    ``C = rho^p / (2^{p/2} Gamma(p/2 + 1)) + 2^{1 - p/2} J / Gamma(p/2)``, ``J = int_0^inf (s + rho)^{p-1}
    e^{-s^2/2} ds`` (the proof of Appendix B-F; for integer p, ``2 J = Z / sigma^p`` with the paper's finite sum Z).
    The first term is the ball's volume times the peak density, the second the shell outside it.
    Evaluated in log space (``logaddexp``), so dimensions up to 1e9 and sigma from 1e-6 to 1e6 are finite.

    Assumptions: the input of the noise step lies in the ball of radius R = ``num_layers`` (the paper's convention:
    R layers each clipped to norm 1; the true radius of such a vector is ``sqrt(R)``, so passing ``sqrt(R)`` gives
    a tighter, still valid capacity) and the noise is ``N(0, sigma^2 I_p)``.

    Args:
      sigma: noise standard deviation, > 0.
      dim: dimension p, finite and >= 1 (need not be an integer).
      num_layers: ball radius R, > 0.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      ``log C`` (natural log), >= 0.

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> import math
      >>> exact = math.log(1 + 2 / math.sqrt(2 * math.pi))  # p = 1, R = sigma = 1
      >>> abs(float(log_bayes_capacity_gaussian(1.0, 1)) - exact) < 1e-5
      True
    """
    bad = guard(("sigma", sigma, POSITIVE), ("dim", dim, finite_at_least(1)), ("num_layers", num_layers, POSITIVE),
                validate=validate, cast=(sigma, dim, num_layers))
    sigma, p, radius = as_float(sigma, dim, num_layers)
    sigma, p, radius = jnp.broadcast_arrays(sigma, p, radius)
    sigma_s = jnp.where(bad, 1.0, sigma)
    p_s = jnp.where(bad, 1.0, p)
    log_rho = jnp.log(jnp.where(bad, 1.0, radius)) - jnp.log(sigma_s)
    rho = jnp.exp(log_rho)
    log2 = jnp.log(2.0)
    log_ball = p_s * log_rho - 0.5 * p_s * log2 - lax.lgamma(0.5 * p_s + 1.0)
    log_shell = (1.0 - 0.5 * p_s) * log2 + _log_radial_integral(p_s, rho) - lax.lgamma(0.5 * p_s)
    out = jnp.logaddexp(log_ball, log_shell)
    return nan_if(bad, out)


def log_bayes_capacity_vmf(kappa: ArrayLike, dim: ArrayLike, *, validate: bool = True) -> jax.Array:
    """Log Bayes' capacity of the von Mises-Fisher channel on the sphere S^{p-1} (Biswas et al., Thm. 6).

    ``C = 2 kappa^{p/2 - 1} e^kappa / (Gamma(p/2) 2^{p/2} I_{p/2-1}(kappa))`` (peak VMF density times the sphere's
    area), computed in log space with :func:`recon_jax.special.log_iv` (accurate at p = 13,700 and beyond, where
    ``scipy.special.iv`` underflows). Tends to ``log C = 0`` as kappa -> 0 (the uniform channel).

    Args:
      kappa: VMF concentration, finite and > 0.
      dim: dimension p, >= 2 (the order ``p/2 - 1`` of the Bessel function must be >= 0).
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      ``log C``, >= 0.

    Raises:
      ValueError: ``kappa <= 0`` or infinite, or ``dim < 2``.

    Example:
      >>> import math
      >>> exact = math.log(2 * 1.0 / (1 - math.exp(-2.0)))  # p = 3: C = 2 kappa / (1 - e^{-2 kappa})
      >>> abs(float(log_bayes_capacity_vmf(1.0, 3)) - exact) < 1e-5
      True
    """
    bad = guard(("kappa", kappa, FINITE_POSITIVE), ("dim", dim, at_least(2)), validate=validate, cast=(kappa, dim))
    kappa, p = as_float(kappa, dim)
    kappa_s = jnp.where(bad, 1.0, kappa)
    p_s = jnp.where(bad, 2.0, p)
    nu = 0.5 * p_s - 1.0
    log2 = jnp.log(2.0)
    direct = (
        log2
        - lax.lgamma(0.5 * p_s)
        + nu * jnp.log(kappa_s)
        - 0.5 * p_s * log2
        - log_iv(nu, kappa_s, validate=False)
        + kappa_s
    )
    # The terms above are ~(p/2) log(p / kappa) each (1e4 at p = 3000, kappa = 1e-3) while log C may be ~1e-10:
    # float32 returned -1e-3. With I_nu(k) = (k/2)^nu / Gamma(nu + 1) 0F1(; nu + 1; k^2/4) they cancel exactly:
    # log C = kappa - log 0F1(; p/2; kappa^2/4), summed directly while z = kappa^2/4 <= 4 (nu + 1) (terms
    # <= 4^j / j!, 48 of them are far below float64 rounding).
    z = 0.25 * kappa_s * kappa_s
    b = nu + 1.0
    use_series = z <= 4.0 * b
    zs = jnp.where(use_series, z, 0.0)

    def term(carry, j):
        t, total = carry
        t = t * zs / ((j + 1.0) * (b + j))
        return (t, total + t), None

    (_, series), _ = lax.scan(term, (jnp.ones_like(zs), jnp.zeros_like(zs)), jnp.arange(48, dtype=zs.dtype))
    out = jnp.where(use_series, kappa_s - jnp.log1p(series), direct)
    out = jnp.maximum(out, 0.0)  # C >= 1 (the peak density is at least the mean): rounding only can go below
    return nan_if(bad, out)
