"""Prior-free bounds on the normalised cross-correlation (NCC) of a reconstruction: Ziller et al., "Bounding
Reconstruction Attack Success of Adversaries Without Data Priors", Prop. 3, Eq. 7-9 and 68, Appendix A.

The threat model, the notation and the conventions (``steps = T`` releases averaged, ``sigma_eff = sigma /
sqrt(T)``, pure ``jnp``, ``validate=``) are those of :mod:`recon_jax.bounds.prior_free`, which holds the MSE / PSNR
bounds, the ReRo probabilities and the worst case. The NCC is the Pearson correlation of the data sample X with
its reconstruction ``X_hat = beta X + xi`` (Eq. 68): its expectation in closed form (Prop. 3), the upper bounds of
Eq. 8-9, the exact expectation from the distribution of the definition, and Monte-Carlo draws and CDF.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from recon_jax._validation import (FINITE, FINITE_NONNEGATIVE, HALF_OPEN_UNIT, NONNEGATIVE, POSITIVE, Range, as_float,
                                   at_least, check, finite_at_least, guard, is_concrete, nan_if)
from recon_jax.bounds._prior_free_common import noise_std

__all__ = [
    "expected_ncc",
    "ncc_upper_bound",
    "ncc_upper_bound_dimension_free",
    "expected_ncc_exact",
    "expected_ncc_at_clip",
    "ncc_samples",
    "ncc_cdf",
]

ArrayLike = jax.typing.ArrayLike
_NOT_NAN = Range(lambda v: v == v, "a number (not NaN)")  # an NCC threshold: any real, +-inf included


def expected_ncc(
    signal_variance: ArrayLike,
    clip_factor: ArrayLike,
    sigma: ArrayLike,
    clip_norm: ArrayLike,
    steps: ArrayLike = 1,
    *,
    validate: bool = True,
) -> jax.Array:
    """Expected NCC of the prior-free reconstruction: ``beta sqrt(V) / sqrt(beta^2 V + C^2 sigma^2 / T)`` (Prop. 3, Eq. 7).

    Args:
      signal_variance: the empirical variance V of the sample X, >= 0.
      clip_factor: beta in (0, 1].
      sigma: noise multiplier, > 0.
      clip_norm: clipping norm C, > 0.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      The expected NCC, in [0, 1] (below 1 in exact arithmetic; it rounds to 1 when the noise is negligible
      at the dtype's precision, e.g. sigma C = 1e-3 in float32).

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> round(float(expected_ncc(1.0, 1.0, 1.0, 1.0)), 6)  # 1 / sqrt(2)
      0.707107
    """
    args = (signal_variance, clip_factor, sigma, clip_norm, steps)
    bad = guard(("signal_variance", signal_variance, NONNEGATIVE), ("clip_factor", clip_factor, HALF_OPEN_UNIT),
                ("sigma", sigma, POSITIVE), ("clip_norm", clip_norm, POSITIVE), ("steps", steps, at_least(1)),
                validate=validate, cast=args)
    var, beta, sigma, clip_norm, steps = as_float(*args)
    amplitude = beta * jnp.sqrt(jnp.maximum(var, 0.0))  # sqrt of the signal beta^2 V
    noise = noise_std(sigma, clip_norm, jnp.where(bad, 1.0, steps))
    # sqrt(s / (s + n)) = 1 / sqrt(1 + (sqrt(n) / sqrt(s))^2): no square is formed before the ratio, so it stays finite
    # wherever the ratio is (C sigma = 1e20, T = 1e10, V = 1e30: 1 / sqrt(2), was 0.0 from n = inf in float32).
    ratio = noise / jnp.where(amplitude > 0, amplitude, 1.0)
    out = jnp.where(amplitude > 0, lax.rsqrt(1.0 + jnp.square(ratio)), 0.0)
    return nan_if(bad, out)


def ncc_upper_bound(sigma: ArrayLike, dim: ArrayLike, steps: ArrayLike = 1, *, validate: bool = True) -> jax.Array:
    """Dimension-aware upper bound on the expected NCC: ``sqrt(1 / (1 + N sigma^2 / T))`` (Prop. 3, Eq. 8).

    Uses ``||beta X|| <= C``; equality when ``||X|| > C`` and the data are centred. Independent of C.

    Caveat (erratum): as for :func:`psnr_upper_bound`, the paper's Jensen step does not bound the expectation of the
    NCC (a ratio) from above; for small N the exact expectation, from the distribution of the definition, is larger
    (N = 10, sigma = 0.3: 0.749 vs 0.726; see :func:`expected_ncc_at_clip` / :func:`expected_ncc_exact`).
    For large N the two agree (the expression is the leading term of the exact one with N - 1 in place of N).

    Args:
      sigma: noise multiplier, > 0.
      dim: data dimension N, >= 1.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      The bound, in (0, 1).

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> round(float(ncc_upper_bound(1.0, 1000)), 4)  # Table 1 first row: 3.2%
      0.0316
    """
    bad = guard(("sigma", sigma, POSITIVE), ("dim", dim, at_least(1)), ("steps", steps, at_least(1)),
                validate=validate, cast=(sigma, dim, steps))
    sigma, dim, steps = as_float(sigma, dim, steps)
    ratio = dim * jnp.square(sigma) / jnp.where(bad, 1.0, steps)
    return nan_if(bad, lax.rsqrt(1.0 + ratio))


def ncc_upper_bound_dimension_free(sigma: ArrayLike, steps: ArrayLike = 1, *, validate: bool = True) -> jax.Array:
    """Data-independent upper bound on the expected NCC: ``sqrt(1 / (1 + sigma^2 / T))`` (Prop. 3, Eq. 9).

    Caveat: derived with the same Jensen step as :func:`ncc_upper_bound` (see there).

    Example:
      >>> round(float(ncc_upper_bound_dimension_free(1.0)), 6)
      0.707107
    """
    return ncc_upper_bound(sigma, 1.0, steps, validate=validate)


# Gauss-Legendre rule on [0, 1] for the NCC integral (128 nodes: the integrand is a smooth bump of width ~1/8 of
# the interval, integrated to ~1e-14 relative).
_GL_X, _GL_W = np.polynomial.legendre.leggauss(128)


_GL_X, _GL_W = 0.5 * (_GL_X + 1.0), 0.5 * _GL_W


def _expected_ncc_snr(snr, dim):
    """E[NCC] for signal-to-noise ``r = ||beta (X - mean X)|| / s`` in dimension N (no validation).

    From the definition: with ``m = N - 1`` (centring removes one direction), ``NCC = (r + Z) / ||r u + g||`` with
    ``g ~ N(0, I_m)`` and ``Z = <u, g>``. Since ``E[V / ||V||] = grad_mu E||V||`` for ``V ~ N(mu, I_m)`` and
    ``E||V||`` is the mean of a non-central chi distribution,
    ``E[NCC] = (sqrt(2) r / m) Gamma((m+1)/2) / Gamma(m/2) 1F1(1/2; m/2 + 1; -r^2/2)``. Euler's integral for 1F1
    with ``t = sin^2(theta)`` turns this into
    ``E[NCC] = r sqrt(2/pi) int_0^{pi/2} exp(-r^2 sin^2(theta) / 2) cos^m(theta) dtheta``,
    whose integrand is smooth, positive and at most ``exp(-c sin^2 theta)`` with ``c = (r^2 + m) / 2``; it is
    integrated by Gauss-Legendre over ``sin(theta) <= sqrt(60 / c)`` (the rest is below ``e^-60``).
    """
    m = dim - 1.0
    c = 0.5 * (jnp.square(snr) + m)
    upper = jnp.arcsin(jnp.minimum(1.0, jnp.sqrt(60.0 / c)))
    theta = upper[..., None] * jnp.asarray(_GL_X, snr.dtype)
    # m log(cos theta) as (m / 2) log1p(-sin^2 theta): for large m the nodes have sin theta ~ sqrt(120 / m), whose
    # cosine float32 rounds to 1 (N = 1e8: log(cos) = 0 at every node, E[NCC] came out 0.0195 for 0.0100).
    sin_sq = jnp.square(jnp.sin(theta))
    log_f = -0.5 * jnp.square(snr)[..., None] * sin_sq + 0.5 * m[..., None] * jnp.log1p(-sin_sq)
    integral = upper * jnp.sum(jnp.asarray(_GL_W, snr.dtype) * jnp.exp(log_f), axis=-1)
    return jnp.minimum(snr * jnp.sqrt(2.0 / jnp.pi) * integral, 1.0)  # rounding can exceed 1 by ~1e-14


def expected_ncc_exact(
    signal_variance: ArrayLike,
    clip_factor: ArrayLike,
    sigma: ArrayLike,
    clip_norm: ArrayLike,
    dim: ArrayLike,
    steps: ArrayLike = 1,
    *,
    validate: bool = True,
) -> jax.Array:
    """Exact ``E[NCC(X, beta X + xi)]`` from the distribution of the definition (corrects Ziller et al., Prop. 3).

    The NCC (Pearson correlation, Eq. 68) depends on the sample only through the signal-to-noise ratio
    ``r = beta sqrt(N V) / s`` (``V`` the empirical variance of X, ``s^2 = C^2 sigma^2 / T``) and N. The expectation
    is evaluated by a 128-node quadrature of a one-dimensional integral (see the source); accurate to ~1e-12
    relative in float64 for every ``r >= 0`` and ``N >= 2`` (float32: ~3e-7, checked up to N = 1e8). For large N it approaches
    ``1 / sqrt(1 + (N - 1) s^2 / (beta^2 N V))``, which is :func:`expected_ncc` with N - 1 for N; for small N the
    exact value is larger than the paper's expression (see :func:`expected_ncc_at_clip`).

    Args:
      signal_variance: the empirical variance V of the sample X, finite and >= 0.
      clip_factor: beta in (0, 1].
      sigma: noise multiplier, > 0.
      clip_norm: clipping norm C, > 0.
      dim: data dimension N, finite and >= 2.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      E[NCC], in [0, 1).

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> round(float(expected_ncc_exact(0.5, 1.0, 1.0, 1.0, 2)), 4)  # N = 2, r = 1: NCC = +-1, E = 2 Phi(1) - 1
      0.6827
    """
    args = (signal_variance, clip_factor, sigma, clip_norm, dim, steps)
    bad = guard(("signal_variance", signal_variance, FINITE_NONNEGATIVE), ("clip_factor", clip_factor, HALF_OPEN_UNIT),
                ("sigma", sigma, POSITIVE), ("clip_norm", clip_norm, POSITIVE), ("dim", dim, finite_at_least(2)),
                ("steps", steps, at_least(1)), validate=validate, cast=args)
    var, beta, sigma, clip_norm, dim, steps = as_float(*args)
    s_dim = jnp.where(bad, 2.0, dim)
    std = noise_std(jnp.where(bad, 1.0, sigma), jnp.where(bad, 1.0, clip_norm), jnp.where(bad, 1.0, steps))
    snr = jnp.where(bad, 0.0, beta * jnp.sqrt(s_dim) * jnp.sqrt(jnp.maximum(var, 0.0))) / std
    return nan_if(bad, _expected_ncc_snr(snr, s_dim))


def expected_ncc_at_clip(sigma: ArrayLike, dim: ArrayLike, steps: ArrayLike = 1, *, validate: bool = True) -> jax.Array:
    """Exact E[NCC] in the setting where :func:`ncc_upper_bound` (Eq. 8) is attained: centred X with ``||X|| >= C``.

    Then ``||beta X|| = C`` and the signal-to-noise ratio is ``r = sqrt(T) / sigma``, independent of C and X
    (see :func:`expected_ncc_exact`). This is the value Eq. 8 should give; Eq. 8 is below it for small N.

    Args:
      sigma: noise multiplier, > 0.
      dim: data dimension N, finite and >= 2.
      steps: number of steps T, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      E[NCC], in (0, 1).

    Raises:
      ValueError: an argument is outside its range.

    Example:
      >>> round(float(expected_ncc_at_clip(0.3, 10)), 3), round(float(ncc_upper_bound(0.3, 10)), 3)
      (0.749, 0.725)
    """
    bad = guard(("sigma", sigma, POSITIVE), ("dim", dim, finite_at_least(2)), ("steps", steps, at_least(1)),
                validate=validate, cast=(sigma, dim, steps))
    sigma, dim, steps = as_float(sigma, dim, steps)
    snr = jnp.sqrt(jnp.where(bad, 1.0, steps)) / jnp.where(bad, 1.0, sigma)
    return nan_if(bad, _expected_ncc_snr(snr, jnp.where(bad, 2.0, dim)))


def _ncc_rows(x: jax.Array, x_hat: jax.Array) -> jax.Array:
    """Pearson correlation (Ziller et al., Eq. 68) of ``x`` [N] with each row of ``x_hat`` [S, N]."""
    xc = x - jnp.mean(x)
    hc = x_hat - jnp.mean(x_hat, axis=-1, keepdims=True)
    num = jnp.matmul(hc, xc, precision=jax.lax.Precision.HIGHEST)  # full float32 on every backend (no TF32)
    den = jnp.sqrt(jnp.sum(jnp.square(hc), axis=-1) * jnp.sum(jnp.square(xc)))
    return num / den


def ncc_samples(
    x: ArrayLike,
    sigma: ArrayLike,
    clip_norm: ArrayLike,
    key: jax.Array,
    num_samples: int,
    steps: ArrayLike = 1,
    *,
    chunk_size: int = 1024,
    validate: bool = True,
) -> jax.Array:
    """Monte-Carlo draws of ``NCC(X, beta X + xi)``, ``xi ~ N(0, C^2 sigma^2 / T I)`` (Ziller et al., Eq. 3 and 68).

    Sample ``i`` uses ``fold_in(key, i // chunk_size)``; draws are generated ``chunk_size`` at a time inside a
    ``lax.scan`` (memory ``O(chunk_size N)``), so results do not depend on anything but ``key`` and the sizes.

    Args:
      x: one data sample X, shape ``[N]`` (flattened), finite and not constant (non-zero variance: the NCC of a
        constant sample is 0 / 0).
      sigma: noise multiplier, > 0 (scalar).
      clip_norm: clipping norm C, > 0 (scalar).
      key: a typed PRNG key.
      num_samples: number of draws (static).
      steps: number of steps T, >= 1.
      chunk_size: draws per scan step (static).
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      ``[num_samples]`` NCC values; all NaN where an argument is invalid (under ``jit``, or ``validate=False``).

    Raises:
      ValueError: an argument is outside its range, ``x`` is not finite, or ``x`` is constant (in its dtype).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> s = ncc_samples(jnp.linspace(0.0, 1.0, 50), 1e-6, 1.0, jax.random.key(0), 8)
      >>> bool(jnp.all(s > 0.999))
      True
    """
    bad = guard(("sigma", sigma, POSITIVE), ("clip_norm", clip_norm, POSITIVE), ("steps", steps, at_least(1)),
                validate=validate, cast=(x, sigma, clip_norm, steps))  # in x's precision, as cast below
    check("x", x, FINITE, validate=validate)
    if int(num_samples) < 1:
        raise ValueError(f"num_samples must be >= 1; got {num_samples}")
    x = jnp.asarray(x)
    x, sigma, clip_norm, steps = as_float(x, sigma, clip_norm, steps)
    x = x.reshape(-1)
    # A constant x (judged in the working dtype, where 1 + 1e-10 is 1) has no correlation: NaN, never a number.
    constant = jnp.all(x == x[0])
    if validate and is_concrete(constant) and bool(constant):
        raise ValueError(f"x must not be constant (the NCC needs non-zero variance); got {x.size} entries all equal "
                         f"to {float(x[0])!r} in {x.dtype}")
    bad = bad | constant | ~jnp.all(jnp.isfinite(x))
    beta = jnp.minimum(1.0, clip_norm / jnp.maximum(jnp.linalg.norm(x), jnp.finfo(x.dtype).tiny))
    std = noise_std(sigma, clip_norm, jnp.where(bad, 1.0, steps))
    chunk = int(min(int(chunk_size), int(num_samples)))
    num_chunks = -(-int(num_samples) // chunk)

    def body(carry, i):
        noise = jax.random.normal(jax.random.fold_in(key, i), (chunk, x.shape[0]), x.dtype)
        return carry, _ncc_rows(x, beta * x + std * noise)

    _, out = lax.scan(body, None, jnp.arange(num_chunks))
    out = out.reshape(-1)[: int(num_samples)]
    return nan_if(bad, out)


def ncc_cdf(
    eta: ArrayLike,
    x: ArrayLike,
    sigma: ArrayLike,
    clip_norm: ArrayLike,
    key: jax.Array,
    num_samples: int,
    steps: ArrayLike = 1,
    *,
    chunk_size: int = 1024,
    validate: bool = True,
) -> jax.Array:
    """Monte-Carlo estimate of ``P[NCC(X, X_hat) <= eta]`` from the definition (replaces Ziller et al., Prop. A.1).

    The closed form of Prop. A.1 has typos in its variances (see ``papers/README.md``); this samples the
    reconstruction ``X_hat = beta X + xi`` directly. The ReRo success probability for threshold eta is
    ``1 - ncc_cdf(eta, ...)``. The estimate of a probability p has standard error ``sqrt(p (1 - p) / num_samples)``
    (uniformly within ``sqrt(log(2 / a) / (2 num_samples))`` with probability 1 - a, by the DKW inequality).

    Args:
      eta: NCC thresholds, any shape.
      x: the data sample X, shape ``[N]``.
      sigma: noise multiplier, > 0.
      clip_norm: clipping norm C, > 0.
      key: a typed PRNG key.
      num_samples: number of Monte-Carlo draws (static).
      steps: number of steps T, >= 1.
      chunk_size: draws per scan step (static).
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      The empirical CDF at ``eta`` (shape of ``eta``); NaN where ``eta`` is NaN, and everywhere when an argument
      is invalid (under ``jit``, or ``validate=False``): the samples are then NaN, and a NaN sample is never
      counted as below ``eta``, which made the CDF a plausible 0.0.

    Raises:
      ValueError: an argument is outside its range (``eta`` NaN; ``x`` not finite or constant: see
        :func:`ncc_samples`).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> cdf = ncc_cdf(jnp.array([-1.0, 1.0]), jnp.linspace(0.0, 1.0, 50), 1.0, 1.0, jax.random.key(0), 256)
      >>> [float(c) for c in cdf]
      [0.0, 1.0]
    """
    bad_eta = guard(("eta", eta, _NOT_NAN), validate=validate)
    samples = ncc_samples(x, sigma, clip_norm, key, num_samples, steps, chunk_size=chunk_size, validate=validate)
    eta = jnp.asarray(eta, samples.dtype)
    cdf = jnp.mean(samples <= eta[..., None], axis=-1, dtype=samples.dtype)
    return nan_if(bad_eta | jnp.any(jnp.isnan(samples)), cdf)
