"""The von Mises-Fisher (VMF) mechanism and Wood's (1994) rejection sampler, in jnp.

Biswas et al., "Comparing privacy notions for protection against reconstruction attacks in ML", Alg. 2: the
averaged clipped gradient is scaled to the unit sphere S^{p-1} and released as a VMF(mu, kappa) sample with
density ``f(y) = exp(kappa mu^T y) / C_{p,kappa}`` (their eq. 4).

Notation
--------
=========  ==========================================================================
``d``      dimension of the ambient space (the sphere is S^{d-1}); ``p`` in Biswas et al.
``kappa``  concentration (kappa = 0 is the uniform distribution on the sphere)
``nu``     ``d - 1``, the degrees of freedom of the Beta/Student-t proposal
``b``      Wood's envelope parameter ``(d-1) / (2 kappa + sqrt(4 kappa^2 + (d-1)^2))``
``W``      the cosine ``mu^T x``; its density is ``∝ exp(kappa w) (1 - w^2)^((d-3)/2)``
=========  ==========================================================================

Wood's algorithm (Wood 1994, "Simulation of the von Mises Fisher distribution") draws ``Z ~ Beta(nu/2, nu/2)``,
proposes ``W = (1 - (1+b) Z) / (1 - (1-b) Z)`` and accepts when
``kappa W + nu log(1 - x0 W) - c >= log U`` with ``x0 = (1-b)/(1+b)``, ``c = kappa x0 + nu log(1 - x0^2)``.
Written like this the test subtracts numbers of size ``kappa`` and ``nu`` (up to 10^6) to get something of order
one, which float32 cannot do. This module uses an exactly equivalent, cancellation-free form:

* the symmetric Beta is drawn through a Student t: if ``T ~ t_nu`` and ``R = sqrt(nu + T^2)`` then
  ``Z = (R - T) / (2R) ~ Beta(nu/2, nu/2)``, and ``(R + T)(R - T) = nu`` gives both ``R ± T`` without
  cancellation;
* with ``D = (R + T) + b (R - T)`` one gets ``W = ((R+T) - b(R-T)) / D``, ``sqrt(1 - W^2) = 2 sqrt(b nu) / D``;
* because ``b`` solves ``nu b^2 + 4 kappa b - nu = 0`` (so ``2 kappa b / (1 + b) = nu (1 - b) / 2``), the log
  acceptance ratio collapses to ``nu (y + log1p(-y))`` with ``y = (1 - b) T / D`` — always <= 0, computed with a
  series for small ``|y|``.

The envelope parameter uses the cancellation-free form ``b = nu / (2 kappa + sqrt(4 kappa^2 + nu^2))`` and
``1 - b = (2 kappa + 4 kappa^2 / (S + nu)) / (2 kappa + S)`` with ``S = hypot(2 kappa, nu)``, all finite for
kappa up to the float32 maximum (see ``_wood_constants``). Tested in float32 for ``d`` up to 10^6 and ``kappa`` in
[1e-3, 1e6], and at d = 2, 3, 10^5 for kappa up to 3e38. A draw that is not accepted within ``_MAX_REJECTIONS``
proposals is NaN.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

from recon_jax._validation import (FINITE, FINITE_NONNEGATIVE, FINITE_POSITIVE, POSITIVE, Range, check, check_integer,
                                   guard, nan_if)

__all__ = ["sample_vmf", "sample_vmf_cosine", "VMFMechanism"]

_MAX_REJECTIONS = 1000  # Wood's acceptance rate is > 1/2 for all (d, kappa); 1000 rejections never happen.
# From here on _wood_constants forms (2 kappa)^2 / (S + nu) and sqrt(b nu) in a form that cannot overflow or
# underflow (2^60 ~ 1.2e18; (2 kappa)^2 overflows float32 at kappa ~ 9.2e18).
_LARGE_KAPPA = 2.0**60


def _y_plus_log1p_minus_y(y: jax.Array) -> jax.Array:
    """``y + log1p(-y)`` for y < 1 without cancellation (series for |y| < 1/4)."""
    small = jnp.abs(y) < 0.25
    ys = jnp.where(small, y, 0.0)
    # -(y^2/2 + y^3/3 + ... + y^13/13): truncation error < 0.25^14 / 14 relative to y^2/2, below float32 eps.
    series = jnp.zeros_like(ys)
    for n in range(13, 1, -1):
        series = series * ys + 1.0 / n
    series = -(ys * ys) * series
    yl = jnp.where(small, 0.0, y)
    direct = yl + jnp.log1p(-yl)
    return jnp.where(small, series, direct)


def _wood_constants(kappa: jax.Array, nu: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Returns (b, 1 - b, sqrt(b nu)) for Wood's envelope, without cancellation, overflow or underflow.

    Finite for kappa up to the float32 maximum. Every quantity is carried at a quarter of its size (``kappa / 2``
    for ``2 kappa``, ``S / 4``, ``nu / 4``): scaling by a power of two is exact, so below ``_LARGE_KAPPA`` the
    values are bitwise those of the unscaled formulas, while ``2 kappa + S`` no longer overflows. Above it,
    ``(2 kappa)^2`` (which overflowed past kappa ~ 9e18 and made every proposal fail the test, so the loop
    returned a rejected proposal) is formed as ``2 kappa * (2 kappa / (S + nu))``, and ``sqrt(b nu)`` as
    ``nu / sqrt(2 kappa + S)`` because ``b`` itself underflows near the float32 maximum (b ~ nu / (4 kappa)).
    """
    half_k = 0.5 * kappa  # (2 kappa) / 4
    q_nu = 0.25 * nu
    q_s = jnp.hypot(half_k, q_nu)  # S / 4
    q_den = half_k + q_s  # (2 kappa + S) / 4, finite up to the float32 maximum
    b = q_nu / q_den
    large = kappa >= _LARGE_KAPPA
    hk_small = jnp.where(large, 1.0, half_k)  # keeps the unused branch finite
    q_sq = jnp.where(large, half_k * (half_k / (q_s + q_nu)), hk_small * hk_small / (q_s + q_nu))  # (2k)^2/(S+nu)/4
    one_minus_b = (half_k + q_sq) / q_den
    sqrt_b_nu = jnp.where(large, (0.5 * nu) / jnp.sqrt(q_den), jnp.sqrt(b * nu))
    return b, one_minus_b, sqrt_b_nu


def _sample_cosine_one(key: jax.Array, kappa: jax.Array, nu: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
    """One draw of (W, sqrt(1 - W^2)) by Wood's rejection loop (lax.while_loop; continues until accepted).

    NaN (both) if no proposal is accepted within ``_MAX_REJECTIONS`` tries, never the last rejected proposal.
    """
    b, one_minus_b, sqrt_b_nu = _wood_constants(kappa, nu)

    def propose(i):
        k = jax.random.fold_in(key, i)
        k_t, k_u = jax.random.split(k)
        t = jax.random.t(k_t, nu, (), dtype)
        log_u = jnp.log(jax.random.uniform(k_u, (), dtype, minval=jnp.finfo(dtype).tiny, maxval=1.0))
        r = jnp.hypot(jnp.sqrt(nu), t)
        big = r + jnp.abs(t)  # = R + |T|, no cancellation
        small = nu / big  # = R - |T| since (R + |T|)(R - |T|) = nu
        r_plus_t = jnp.where(t >= 0, big, small)
        r_minus_t = jnp.where(t >= 0, small, big)
        den = r_plus_t + b * r_minus_t
        # |w| <= 1 exactly in real arithmetic; in float32 at d = 3 and large kappa b * r_minus_t often vanishes
        # against r_plus_t (476 of 4,000 draws at kappa 1e6 on CPU), so w is x / x, which is 1 only where division
        # is correctly rounded (not XLA's GPU division): clip to keep W a cosine on every backend.
        w = jnp.clip((r_plus_t - b * r_minus_t) / den, -1.0, 1.0)
        sin_w = 2.0 * sqrt_b_nu / den
        y = one_minus_b * t / den
        log_ratio = nu * _y_plus_log1p_minus_y(y)
        accept = log_u <= log_ratio
        return w, sin_w, accept

    def cond(state):
        i, _, _, accepted = state
        return jnp.logical_and(jnp.logical_not(accepted), i < _MAX_REJECTIONS)

    def body(state):
        i, w, sin_w, _ = state
        w_new, sin_new, accept = propose(i)
        return i + 1, w_new, sin_new, accept

    zero = jnp.zeros((), dtype)
    _, w, sin_w, accepted = jax.lax.while_loop(cond, body,
                                               (jnp.asarray(0, jnp.int32), zero, zero, jnp.asarray(False)))
    return nan_if(~accepted, w), nan_if(~accepted, sin_w)


def sample_vmf_cosine(key: jax.Array, kappa, dim: int, shape: tuple[int, ...] = (), dtype=jnp.float32):
    """Samples the cosine ``W = mu^T x`` of ``x ~ VMF(mu, kappa)`` on S^{dim-1} (Wood 1994, cancellation-free).

    Args:
      key: a typed PRNG key.
      kappa: concentration >= 0 (scalar; kappa = 0 gives the uniform distribution).
      dim: ambient dimension d >= 2 (static).
      shape: batch shape of the output.
      dtype: float dtype of the output.

    Returns:
      ``(w, sin_w)``, each of shape ``shape``: ``w = mu^T x`` and ``sqrt(1 - w^2)`` (accurate even when w ~ 1).

    Raises:
      ValueError: if ``dim < 2``, ``kappa`` is not a scalar, or ``kappa < 0`` / not finite (concrete kappa; a
        traced one out of range gives NaN ``w`` and ``sin_w``).

    >>> import jax
    >>> w, s = sample_vmf_cosine(jax.random.key(0), 50.0, 3, shape=(4,))
    >>> w.shape, bool(((w > 0.8) & (w <= 1.0)).all())
    ((4,), True)
    """
    check_integer("dim", dim, 2)  # the sphere S^(dim-1)
    if jnp.ndim(kappa) != 0:  # one rejection loop for all samples: vmap over kappa for several concentrations
        raise ValueError(f"kappa must be a scalar; got shape {jnp.shape(kappa)} (vmap over kappa for several)")
    bad = guard(("kappa", kappa, FINITE_NONNEGATIVE))
    kappa = jnp.where(bad, 0.0, jnp.asarray(kappa, dtype))  # a safe point for the sampler; NaN afterwards
    w, sin_w = _sample_cosine(key, kappa, dim, tuple(shape), jnp.dtype(dtype))
    return nan_if(bad, w), nan_if(bad, sin_w)


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _sample_cosine(key, kappa, dim, shape, dtype):
    nu = jnp.asarray(dim - 1, dtype)
    n = int(math.prod(shape))
    keys = jax.random.split(key, max(n, 1))
    w, sin_w = jax.vmap(lambda k: _sample_cosine_one(k, kappa, nu, dtype))(keys)
    return w[:n].reshape(shape), sin_w[:n].reshape(shape)


def sample_vmf(key: jax.Array, mu: jax.Array, kappa, shape: tuple[int, ...] = ()) -> jax.Array:
    """Samples ``x ~ VMF(mu, kappa)`` on the unit sphere S^{d-1} (Wood 1994).

    Jittable and vmappable (over ``key``, ``mu`` and ``kappa``). The cosine ``mu^T x`` comes from Wood's rejection
    sampler (a ``lax.while_loop`` that runs until the proposal is accepted); the tangent part is a uniform
    direction orthogonal to ``mu``.

    Args:
      key: a typed PRNG key.
      mu: mean direction, shape ``[d]`` with d >= 2, finite; it is normalised to unit length here (it must be
        non-zero).
      kappa: concentration >= 0 (scalar; 0 is uniform on the sphere, large kappa concentrates at mu).
      shape: number/shape of samples; the output has shape ``shape + (d,)``.

    Returns:
      Unit vectors of shape ``shape + (d,)`` in the dtype of ``mu`` (float32 unless x64 is on and mu is float64).

    Raises:
      ValueError: if ``mu`` is not a vector of length >= 2, ``kappa`` is not a scalar, or (concrete values) ``mu``
        is zero or not finite or ``kappa`` is negative / not finite. Traced out-of-range values give NaN samples.

    >>> import jax, jax.numpy as jnp
    >>> x = sample_vmf(jax.random.key(0), jnp.array([0.0, 0.0, 1.0]), 1e4, shape=(2,))
    >>> x.shape, bool(jnp.allclose(jnp.linalg.norm(x, axis=-1), 1.0, atol=1e-5)), bool((x[:, 2] > 0.99).all())
    ((2, 3), True, True)
    """
    mu = jnp.asarray(mu)
    if not jnp.issubdtype(mu.dtype, jnp.floating):
        mu = mu.astype(jnp.float32)
    if mu.ndim != 1 or mu.shape[0] < 2:
        raise ValueError(f"mu must be a vector of length d >= 2, got shape {mu.shape}")
    bad_mu = jnp.any(guard(("mu", mu, FINITE)))
    bad_mu = bad_mu | guard(("mu", jnp.linalg.norm(mu), Range(POSITIVE.predicate, "a non-zero vector (norm > 0)")))
    if jnp.ndim(kappa) != 0:
        raise ValueError(f"kappa must be a scalar; got shape {jnp.shape(kappa)} (vmap over kappa for several)")
    bad = guard(("kappa", kappa, FINITE_NONNEGATIVE)) | bad_mu
    kappa = jnp.where(bad, 0.0, jnp.asarray(kappa, mu.dtype))
    return nan_if(bad, _sample_vmf(key, mu, kappa, tuple(shape)))


@functools.partial(jax.jit, static_argnums=3)
def _sample_vmf(key, mu, kappa, shape):
    dim = mu.shape[0]
    dtype = mu.dtype
    mu = mu / jnp.linalg.norm(mu)
    k_w, k_v = jax.random.split(key)
    w, sin_w = _sample_cosine(k_w, kappa, dim, shape, jnp.dtype(dtype))
    z = jax.random.normal(k_v, tuple(shape) + (dim,), dtype)
    v = z - jnp.matmul(z, mu, precision=jax.lax.Precision.HIGHEST)[..., None] * mu  # exact float32 projection
    v = v / jnp.linalg.norm(v, axis=-1, keepdims=True)
    return w[..., None] * mu + sin_w[..., None] * v


@dataclasses.dataclass(frozen=True, kw_only=True)
class VMFMechanism:
    """The von Mises-Fisher mechanism of DP-SGD (Biswas et al. Alg. 2, lines 9-11).

    ``privatize`` averages the clipped sum, scales it to the unit sphere S^{p-1} (p = number of parameters, one
    VMF variable for the whole flattened gradient, the optimal split of their Prop. 3), and releases a VMF sample
    with concentration ``kappa`` centred at that direction, multiplied by ``output_norm`` (1 in the paper; any
    fixed value is post-processing). A zero average (no direction) is centred at the first basis vector; a sum with
    NaN or inf entries, or a clip norm or batch size that is not > 0, raises ``ValueError`` (traced: a NaN release
    for the sum and the batch size; the clip norm does not enter the release).

    Args:
      kappa: concentration >= 0 (kappa = 0: uniform direction, no information).
      output_norm: norm of the released vector (> 0). Default 1.0, as in Alg. 2.

    >>> import jax, jax.numpy as jnp
    >>> m = VMFMechanism(kappa=1e6)
    >>> g = m.privatize(jax.random.key(0), jnp.array([3.0, 4.0]), clip_norm=5.0, batch_size=1)
    >>> bool(jnp.allclose(g, jnp.array([0.6, 0.8]), atol=1e-2))
    True
    """

    kappa: float
    output_norm: float = 1.0

    def __post_init__(self):
        check("kappa", self.kappa, FINITE_NONNEGATIVE)
        check("output_norm", self.output_norm, FINITE_POSITIVE)

    def privatize(self, key, clipped_sum, clip_norm, batch_size):  # noqa: D102
        clipped_sum = jnp.asarray(clipped_sum)
        if clipped_sum.size < 2:
            raise ValueError(f"clipped_sum must have at least 2 entries (the sphere S^(p-1)), got {clipped_sum.shape}")
        flat = clipped_sum.reshape(-1)
        if not jnp.issubdtype(flat.dtype, jnp.floating):
            flat = flat.astype(jnp.float32)
        # A NaN or inf sum has no direction: refused, or NaN when traced (a zero sum is centred at e1), as is a batch
        # size <= 0 (the clip norm does not enter the release: only its concrete value is checked).
        check("clipped_sum", flat, FINITE)
        check("clip_norm", clip_norm, POSITIVE)
        mean = flat / nan_if(guard(("batch_size", batch_size, POSITIVE)), batch_size)  # a scalar NaN, no select
        norm = jnp.linalg.norm(mean)
        e1 = jnp.zeros_like(mean).at[0].set(1.0)
        direction = jnp.where(norm <= 0, e1, mean / jnp.where(norm > 0, norm, 1.0))  # NaN norm: NaN direction
        # Where the squares underflow (every entry below ~1e-19 in float32) or overflow, the direction of the mean
        # rescaled to a largest entry in [0.5, 1); the norm above is left alone otherwise (so are its roundings).
        scale = jnp.max(jnp.abs(mean))
        finfo = jnp.finfo(mean.dtype)
        extreme = (scale > 0) & ((scale < jnp.sqrt(finfo.tiny)) | (scale > jnp.sqrt(finfo.max / mean.size)))
        # by a power of two (exact): a division by scale may run as a product with 1 / scale, which is subnormal (0
        # on the CPU) for scale above ~1e38
        rescaled = jnp.ldexp(mean, -jnp.frexp(jnp.where(extreme, scale, 1.0))[1])
        direction = jnp.where(extreme & jnp.isfinite(scale), rescaled / jnp.linalg.norm(rescaled), direction)
        sample = sample_vmf(key, direction, self.kappa)  # NaN for a NaN direction
        return (self.output_norm * sample).reshape(clipped_sum.shape).astype(flat.dtype)
