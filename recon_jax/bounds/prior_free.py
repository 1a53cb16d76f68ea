"""Prior-free reconstruction bounds for DP-SGD: Ziller et al., "Bounding Reconstruction Attack Success of
Adversaries Without Data Priors", Sec. 2 and Appendix A.

Threat model: an adversary without any data prior replaces the model by a linear layer, so the released (clipped,
noised) gradient *is* the reconstruction: ``X_hat = beta X + xi`` with ``beta = 1 / max(1, ||X|| / C)`` and
``xi ~ N(0, C^2 sigma^2 I_N)`` (Eq. 3). Averaging T such releases (Prop. 4) leaves the same form with the effective
noise multiplier ``sigma_eff = sigma / sqrt(T)``; every function here takes ``steps = T`` and uses ``sigma_eff``
(this is how Table 1 is computed). All results assume a sampling rate of 100% (no subsampling amplification).

Notation:

==============  =================================================================
``sigma``       DP-SGD noise multiplier, > 0
``clip_norm``   maximum gradient norm C, > 0
``steps``       number of released steps T, >= 1 (``sigma_eff = sigma / sqrt(T)``)
``dim``         data dimension N, >= 1
``eta``         threshold of the reconstruction metric
``kappa``       prior probability of a successful match (worst-case bound only)
==============  =================================================================

The NCC bounds (Prop. 3, Eq. 7-9, and the exact and Monte-Carlo NCC) live in :mod:`recon_jax.bounds.prior_free_ncc`
and are re-exported here. All functions are pure ``jnp``: jittable, vmappable, broadcasting, differentiable where
the math is. Concrete invalid inputs raise ``ValueError`` (``validate=True``); under ``jit`` invalid values give NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import digamma

from recon_jax._validation import (FINITE, FINITE_NONNEGATIVE, HALF_OPEN_UNIT, NONNEGATIVE, OPEN_UNIT, POSITIVE, Range,
                                   as_float, at_least, finite_at_least, guard, log_positive, nan_if)
from recon_jax.bounds._prior_free_common import noise_std, noise_variance
from recon_jax.bounds.prior_free_ncc import (
    expected_ncc,
    expected_ncc_at_clip,
    expected_ncc_exact,
    ncc_cdf,
    ncc_samples,
    ncc_upper_bound,
    ncc_upper_bound_dimension_free,
)
from recon_jax.bounds.rero import rero_gdp
from recon_jax.special import gammainc as _gammainc

__all__ = [
    "clip_factor",
    "effective_sigma",
    "mse_lower_bound",
    "expected_mse",
    "psnr_upper_bound",
    "expected_ncc",
    "ncc_upper_bound",
    "ncc_upper_bound_dimension_free",
    "expected_psnr_exact",
    "expected_ncc_exact",
    "expected_ncc_at_clip",
    "rero_mse",
    "rero_psnr",
    "ncc_samples",
    "ncc_cdf",
    "worst_case_success",
]

ArrayLike = jax.typing.ArrayLike
_LOG10 = 2.302585092994046
# "finite" in JAX's dtype (jnp.isfinite casts a float64 host value to float32 without x64): eta = 1e300 is refused
_FINITE_IN_DTYPE = Range(lambda e: jnp.isfinite(e), FINITE.allowed)


def clip_factor(x_norm: ArrayLike, clip_norm: ArrayLike, *, validate: bool = True) -> jax.Array:
    """The DP-SGD clip factor ``beta = 1 / max(1, ||X|| / C)`` of Ziller et al., Eq. (3).

    Args:
      x_norm: the l2 norm ``||X||`` of the (per-example) gradient, >= 0.
      clip_norm: the clipping norm C, > 0.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      beta in (0, 1].

    Raises:
      ValueError: ``x_norm < 0`` or ``clip_norm <= 0``.

    Example:
      >>> float(clip_factor(4.0, 2.0)), float(clip_factor(1.0, 2.0))
      (0.5, 1.0)
    """
    bad = guard(("x_norm", x_norm, NONNEGATIVE), ("clip_norm", clip_norm, POSITIVE), validate=validate,
                cast=(x_norm, clip_norm))
    x_norm, clip_norm = as_float(x_norm, clip_norm)
    out = jnp.minimum(1.0, clip_norm / jnp.where(~bad & (x_norm > 0), x_norm, 1.0))
    out = jnp.where(x_norm == 0, 1.0, out)
    return nan_if(bad, out)


def effective_sigma(sigma: ArrayLike, steps: ArrayLike = 1, *, validate: bool = True) -> jax.Array:
    """``sigma_eff = sigma / sqrt(T)`` (Ziller et al., Prop. 4 and Remark 1).

    Example:
      >>> round(float(effective_sigma(1.0, 100)), 6)
      0.1
    """
    bad = guard(("sigma", sigma, POSITIVE), ("steps", steps, at_least(1)), validate=validate, cast=(sigma, steps))
    sigma, steps = as_float(sigma, steps)
    return nan_if(bad, sigma / jnp.sqrt(jnp.where(bad, 1.0, steps)))


def mse_lower_bound(
    sigma: ArrayLike, clip_norm: ArrayLike, steps: ArrayLike = 1, *, validate: bool = True
) -> jax.Array:
    """Lower bound on the expected MSE of any prior-free reconstruction: ``C^2 sigma^2 / T`` (Prop. 1, Eq. 5).

    Args:
      sigma: noise multiplier, > 0.
      clip_norm: clipping norm C, > 0.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      The bound, > 0.

    Raises:
      ValueError: ``sigma <= 0``, ``clip_norm <= 0`` or ``steps < 1``.

    Example:
      >>> round(float(mse_lower_bound(1.0, 1.0, steps=10)), 6)  # Table 1, T = 10 row
      0.1
    """
    bad = guard(("sigma", sigma, POSITIVE), ("clip_norm", clip_norm, POSITIVE), ("steps", steps, at_least(1)),
                validate=validate, cast=(sigma, clip_norm, steps))
    sigma, clip_norm, steps = as_float(sigma, clip_norm, steps)
    return nan_if(bad, noise_variance(sigma, clip_norm, jnp.where(bad, 1.0, steps)))


def expected_mse(
    sigma: ArrayLike,
    clip_norm: ArrayLike,
    mean_square: ArrayLike,
    clip_factor: ArrayLike = 1.0,
    steps: ArrayLike = 1,
    *,
    validate: bool = True,
) -> jax.Array:
    """Expected MSE of the prior-free reconstruction: ``(1 - beta)^2 mean_square + C^2 sigma^2 / T`` (Prop. 1, Eq. 4).

    Args:
      sigma: noise multiplier, > 0.
      clip_norm: clipping norm C, > 0.
      mean_square: ``(1/N) sum_i E[x_i^2]``, finite and >= 0.
      clip_factor: beta in (0, 1] (see :func:`clip_factor`).
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      The expected MSE.

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> float(expected_mse(1.0, 1.0, mean_square=4.0, clip_factor=0.5))
      2.0
    """
    args = (sigma, clip_norm, mean_square, clip_factor, steps)
    bad = guard(("sigma", sigma, POSITIVE), ("clip_norm", clip_norm, POSITIVE),
                ("mean_square", mean_square, FINITE_NONNEGATIVE), ("clip_factor", clip_factor, HALF_OPEN_UNIT),
                ("steps", steps, at_least(1)), validate=validate, cast=args)
    sigma, clip_norm, mean_square, beta, steps = as_float(*args)
    out = jnp.square(1.0 - beta) * mean_square + noise_variance(sigma, clip_norm, jnp.where(bad, 1.0, steps))
    return nan_if(bad, out)


def psnr_upper_bound(
    sigma: ArrayLike,
    clip_norm: ArrayLike,
    data_range: ArrayLike = 1.0,
    steps: ArrayLike = 1,
    *,
    validate: bool = True,
) -> jax.Array:
    """Ziller et al.'s "upper bound" on the expected PSNR (dB): ``10 log10(range^2 T / (C^2 sigma^2))`` (Prop. 2, Eq. 6).

    Computed as a sum of logarithms, so it is finite for every positive input (e.g. sigma = 1e-300).

    Caveat (erratum): this is ``10 log10(range^2 / E[MSE])``, and Jensen's inequality gives
    ``E[PSNR] = E[-10 log10 MSE] >= -10 log10 E[MSE]``, the other way round from the paper's proof. Without clipping
    the expected PSNR exceeds this value by exactly ``(10 / ln 10) (ln(N/2) - psi(N/2))`` dB (2.49 dB at N = 2,
    0.45 at N = 10, 0.0055 at N = 784; see :func:`expected_psnr_exact`), so it is not an upper bound for small N.
    Kept under the paper's name because Table 1 is computed with it.

    Args:
      sigma: noise multiplier, > 0.
      clip_norm: clipping norm C, > 0.
      data_range: ``max(X) - min(X)`` (assumed known, e.g. 1.0 for normalised images), > 0.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      The bound in dB.

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> round(float(psnr_upper_bound(1e-2, 1.0)), 4)  # Table 1: 40.0
      40.0
    """
    bad = guard(("sigma", sigma, POSITIVE), ("clip_norm", clip_norm, POSITIVE), ("steps", steps, at_least(1)),
                ("data_range", data_range, POSITIVE), validate=validate)  # judged in float64, as the logs below
    dtype = as_float(sigma, clip_norm, data_range, steps)[0].dtype

    def log10(a):  # logs taken in float64 for concrete input: sigma = 1e-300 is 0 in float32, its log is not
        return jnp.where(bad, 0.0, log_positive(a, dtype)) / _LOG10

    out = 20.0 * log10(data_range) + 10.0 * log10(steps) - 20.0 * log10(clip_norm) - 20.0 * log10(sigma)
    return nan_if(bad, out)


def expected_psnr_exact(
    sigma: ArrayLike,
    clip_norm: ArrayLike,
    dim: ArrayLike,
    data_range: ArrayLike = 1.0,
    steps: ArrayLike = 1,
    *,
    validate: bool = True,
) -> jax.Array:
    """Exact expected PSNR (dB) of the unclipped prior-free reconstruction (corrects Ziller et al., Prop. 2).

    Without clipping (``C >= ||X||``, so ``beta = 1``) the reconstruction error is ``xi ~ N(0, s^2 I_N)`` with
    ``s^2 = C^2 sigma^2 / T``, so ``MSE = (s^2 / N) Y`` with ``Y ~ chi^2_N`` and ``E[ln Y] = ln 2 + psi(N/2)``:

        ``E[PSNR] = psnr_upper_bound + (10 / ln 10) (ln(N/2) - psi(N/2))``.

    The correction is positive for every N (``ln x > psi(x)``) and behaves like ``(10 / ln 10) / N`` for large N,
    so :func:`psnr_upper_bound` is below the true expectation; it matters for small N (2.49 dB at N = 2). With
    clipping (``beta < 1``) the bias ``(1 - beta) X`` lowers the PSNR below this value.

    Args:
      sigma: noise multiplier, > 0.
      clip_norm: clipping norm C, > 0.
      dim: data dimension N, finite and >= 1.
      data_range: ``max(X) - min(X)``, > 0.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      E[PSNR] in dB.

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> round(float(expected_psnr_exact(0.1, 1.0, 2)), 3)  # the paper's expression gives 20.0
      22.507
    """
    # dim is judged cast with the other arguments, in the dtype of ``bound`` (which as_float casts it to below)
    bad = guard(("dim", dim, finite_at_least(1)), validate=validate, cast=(dim, sigma, clip_norm, data_range, steps))
    bound = psnr_upper_bound(sigma, clip_norm, data_range, steps, validate=validate)
    dim, _ = as_float(dim, bound)
    half = 0.5 * jnp.where(bad, 2.0, dim)
    return nan_if(bad, bound + (10.0 / _LOG10) * (jnp.log(half) - digamma(half)))


def _gammainc_half(dim, x):
    """P(dim / 2, x): regularised lower incomplete gamma (chi-square CDF at 2x with dim degrees of freedom)."""
    return _gammainc(dim / 2.0, x, validate=False)  # the callers validate and mask


def rero_mse(
    eta: ArrayLike,
    sigma: ArrayLike,
    clip_norm: ArrayLike,
    dim: ArrayLike,
    steps: ArrayLike = 1,
    *,
    validate: bool = True,
) -> jax.Array:
    """ReRo bound for the MSE: ``P[MSE <= eta] <= P(N/2, N eta T / (2 C^2 sigma^2))`` (Ziller et al., Prop. 6).

    ``MSE = (C^2 sigma_eff^2 / N) Y`` with Y non-central chi-square (Prop. 5), which is stochastically larger than
    the central ``chi^2_N``; P is the regularised lower incomplete gamma function, evaluated with
    :func:`recon_jax.special.gammainc` (accurate for N up to 2e9, unlike ``jax.scipy``'s and SciPy's, which lose
    accuracy in the lower tail for N above ~1e7).

    Args:
      eta: MSE threshold, > 0.
      sigma: noise multiplier, > 0.
      clip_norm: clipping norm C, > 0.
      dim: data dimension N, finite and >= 1.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in [0, 1], increasing in eta and T, decreasing in sigma and C.

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> round(float(rero_mse(1.0, 1.0, 1.0, 2)), 5)  # N = 2: 1 - exp(-eta N / 2)
      0.63212
    """
    args = (eta, sigma, clip_norm, dim, steps)
    bad = guard(("eta", eta, POSITIVE), ("sigma", sigma, POSITIVE), ("clip_norm", clip_norm, POSITIVE),
                ("dim", dim, finite_at_least(1)), ("steps", steps, at_least(1)), validate=validate, cast=args)
    eta, sigma, clip_norm, dim, steps = as_float(*args)
    # x = N eta / (2 s^2) with s = C sigma / sqrt(T), as (N / 2) (eta / s) / s: s^2 and N eta no longer overflow
    # float32 where x is representable (sigma = 1e20, T = 1e10, eta = 1e30, N = 2: x = 1, was 0 and P = 0.0).
    std = jnp.where(bad, 1.0, noise_std(sigma, clip_norm, jnp.where(bad, 1.0, steps)))
    x = (0.5 * dim) * (jnp.where(bad, 1.0, eta) / std) / std
    out = _gammainc_half(jnp.where(dim >= 1, dim, 1.0), x)  # dim keeps its own shape (a scalar stays one)
    return nan_if(bad, out)


def rero_psnr(
    eta: ArrayLike,
    sigma: ArrayLike,
    clip_norm: ArrayLike,
    dim: ArrayLike,
    data_range: ArrayLike = 1.0,
    steps: ArrayLike = 1,
    *,
    validate: bool = True,
) -> jax.Array:
    """ReRo bound for the PSNR: ``P[PSNR >= eta] <= P(N/2, N eta_hat T / (2 C^2 sigma^2))`` (Ziller et al., Prop. 7).

    ``PSNR >= eta`` iff ``MSE <= eta_hat = range^2 10^(-eta / 10)`` (Eq. 14/63), then Prop. 6. (Prop. 7 states the
    complementary probability ``P[PSNR <= eta] = 1 - ...``.)

    Args:
      eta: PSNR threshold in dB (any real number).
      sigma: noise multiplier, > 0.
      clip_norm: clipping norm C, > 0.
      dim: data dimension N, finite and >= 1.
      data_range: ``max(X) - min(X)``, > 0.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in [0, 1], decreasing in eta.

    Raises:
      ValueError: an argument is outside its range (``eta`` must be finite).

    Example:
      >>> round(float(rero_psnr(0.0, 1.0, 1.0, 2)), 5)  # eta_hat = 1: same as rero_mse(1, ...)
      0.63212
    """
    args = (eta, sigma, clip_norm, dim, data_range, steps)
    bad = guard(("eta", eta, _FINITE_IN_DTYPE), ("sigma", sigma, POSITIVE), ("clip_norm", clip_norm, POSITIVE),
                ("dim", dim, finite_at_least(1)), ("data_range", data_range, POSITIVE), ("steps", steps, at_least(1)),
                validate=validate, cast=args)
    eta, sigma, clip_norm, dim, data_range, steps = as_float(*args)
    s_range = jnp.where(bad, 1.0, data_range)
    s_steps = jnp.where(bad, 1.0, steps)
    # log of x = N eta_hat T / (2 C^2 sigma^2), assembled in log space (eta can be +-1000 dB).
    log_x = (
        jnp.log(0.5 * jnp.where(bad, 1.0, dim))
        + 2.0 * jnp.log(s_range)
        - jnp.where(bad, 0.0, eta) * (_LOG10 / 10.0)
        + jnp.log(s_steps)
        - 2.0 * jnp.log(jnp.where(bad, 1.0, clip_norm))
        - 2.0 * jnp.log(jnp.where(bad, 1.0, sigma))
    )
    out = _gammainc_half(jnp.where(dim >= 1, dim, 1.0), jnp.exp(log_x))
    return nan_if(bad, out)


def worst_case_success(kappa: ArrayLike, sigma: ArrayLike, steps: ArrayLike = 1, *, validate: bool = True) -> jax.Array:
    """Table 1's worst-case column: ``1 - Phi(Phi^{-1}(1 - kappa) - mu)`` with ``mu = sqrt(T) / sigma``.

    The Hayes et al. (2023) / Kaissis et al. (2023) bound for the Gaussian mechanism (see
    :func:`recon_jax.bounds.rero_gdp`), as used by Ziller et al., Sec. 3.2.

    Args:
      kappa: prior probability of a successful match, in (0, 1).
      sigma: noise multiplier, > 0.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      The success bound, in (0, 1].

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> round(float(worst_case_success(0.1, 1.0, steps=10)), 3)  # Table 1: 97.0%
      0.97
    """
    args = (kappa, sigma, steps)
    bad = guard(("kappa", kappa, OPEN_UNIT), ("sigma", sigma, POSITIVE), ("steps", steps, at_least(1)),
                validate=validate, cast=args)  # an invalid kappa: NaN from rero_gdp as well
    kappa, sigma, steps = as_float(*args)
    mu = jnp.sqrt(jnp.where(bad, 1.0, steps)) / jnp.where(bad, 1.0, sigma)
    return nan_if(bad, rero_gdp(kappa, mu, validate=False))
