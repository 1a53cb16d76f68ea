r"""Renyi-DP curves: Gaussian, Poisson-subsampled Gaussian, generic Poisson subsampling, composition.

Notation (Mironov 2017; Mironov, Talwar, Zhang 2019 "MTZ"; Zhu and Wang 2019 "ZW"):

| symbol | meaning |
|---|---|
| ``alpha`` (``orders``) | Renyi order, > 1 |
| ``sigma`` | noise multiplier (noise std / l2 sensitivity) |
| ``q`` | Poisson sampling probability, in (0, 1] |
| ``rdp`` / ``tau`` | RDP value eps(alpha) = D_alpha(M(x) \|\| M(x')) |
| ``K(alpha)`` | cumulant ``(alpha - 1) * eps(alpha) = log A_alpha`` (convex in alpha, K(1) = 0) |

All curves return arrays of shape ``batch + orders.shape`` where ``batch`` is the broadcast shape of the
mechanism parameters. The orders are *static* (concrete NumPy values: they fix the static shapes of the
series); the mechanism parameters may be traced, so every function here jits and vmaps over them.

Exactness of :func:`rdp_subsampled_gaussian`:

* integer orders: the exact binomial expansion of ``A_alpha = E_{z~N(0, sigma^2)}[((1-q) + q
  e^{(2z-1)/(2 sigma^2)})^alpha]`` (MTZ Sec. 3.2), summed as ``A_alpha - 1`` so that tiny values keep their
  relative precision;
* fractional orders: MTZ's two-sided series (Sec. 3.3) *with the signs kept* and truncated after a positive
  term of its alternating tail. Pointwise in z each half is an alternating series with decreasing terms, so
  that truncation is an upper bound of the exact A_alpha (sound), and it is never above the all-positive
  series that ``dp_accounting`` sums. The result is also capped by two other sound bounds, the convexity
  chord of K between the neighbouring integer orders (Wang, Balle, Kasiviswanathan 2019, Cor. 10) and
  monotonicity in alpha, so it is always finite. The series is summed as ``log(t_top) + log1p(rest / t_top)`` and
  raised by a bound on its own rounding error (twice a first-order bound, at least 3.5x the error measured), so the
  result stays an upper bound in float32 too, where K = log A_alpha ~ 1e-5 is a few hundred ulp of A ~ 1.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from jax.typing import ArrayLike
from scipy import special as sps

from recon_jax._validation import (HALF_OPEN_UNIT, NONNEGATIVE, POSITIVE, Range, check_shapes, concrete_or_none,
                                   guard, guard_orders, log_one_minus, log_positive, nan_if, pad_batch, static_orders)
from recon_jax.accounting._mtz_series import frac_log_a, int_log_a, unpermute

__all__ = [
    "DEFAULT_ORDERS",
    "rdp_gaussian",
    "rdp_subsampled_gaussian",
    "rdp_poisson_subsampled",
    "interpolate_rdp",
    "compose_rdp",
]

#: Default RDP orders: dp_accounting's usual grid (1.1, ..., 10.9, 11, ..., 63, 128, 256, 512, 1024) extended
#: below 1.1 (helps for very large epsilon) and between 64 and 1024 (helps for small epsilon).
DEFAULT_ORDERS: np.ndarray = np.unique(
    np.concatenate(
        [
            np.round(np.arange(1.01, 1.1, 0.01), 2),
            np.round(np.arange(1.1, 10.95, 0.1), 1),
            np.arange(11, 64),
            np.array([64, 72, 80, 96, 112, 128, 160, 192, 256, 384, 512, 768, 1024]),
        ]
    ).astype(np.float64)
)

# Extra pairs of alternating-tail terms kept by the fractional-order series. Any value gives an upper bound; the
# gap to the exact value shrinks like n^{-alpha-1}: with 8 pairs it is below ~2e-4 relative in the worst cases
# we measured (alpha -> 1, q ~ 0.5, sigma ~ 1) and negligible for alpha >= 3.
_FRAC_EXTRA_PAIRS = 8
# Factor on the first-order rounding-error bound of the fractional-order series (see _mtz_series.frac_log_a): covers the
# second-order terms and the few ulp of each elementary function that the unit weights stand for. Measured: the
# float32 error never exceeded 0.56 of the bound on a grid of q in [1e-6, 0.99], sigma in [0.2, 100], every
# fractional default order.
_ROUNDING_SAFETY = 2.0
_RDP = Range(NONNEGATIVE.predicate, ">= 0 (inf allowed)")  # RDP values along a curve


def q_logs(q, dtype) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(log q, log(1 - q), q >= 1)`` in ``dtype``, from a concrete ``q`` in float64 on the host.

    A valid q that float32 flushes to 0 (``1e-50``; subnormals, below ~1.2e-38, flush too) or rounds to 1
    (``1 - 1e-9``) has both logarithms representable: the series below need only them, so judging and taking them
    before the cast keeps the result exact to rounding instead of a silent NaN (q = 0) or the plain Gaussian (q = 1).
    Where ``q >= 1`` both logs are ``log(1/2)`` (a safe point; the callers take the q = 1 branch there). Traced q:
    the logs of its (already rounded) value. Package-private (:mod:`recon_jax.accounting.dpsgd` passes them into its
    jitted calibration).
    """
    host = concrete_or_none(q)
    if host is not None:  # judged and made safe in float64
        is_one = host >= 1.0
        safe = np.where(is_one, 0.5, host)
    else:
        is_one = jnp.asarray(q, dtype) >= 1.0
        safe = jnp.where(is_one, 0.5, q)
    is_one = jnp.asarray(is_one)
    half = jnp.asarray(np.log(0.5), dtype)
    return jnp.where(is_one, half, log_positive(q, dtype)), jnp.where(is_one, half, log_one_minus(safe, dtype)), is_one


def floor_sigma(sigma, dtype) -> jax.Array:
    """``sigma`` in ``dtype``, at least its smallest normal float: a valid sigma that float32 flushes to 0 (``1e-50``)
    would give 0 / 0. Every RDP value of such a sigma is already ``inf`` at the floor (``1 / (2 sigma^2)`` overflows),
    which is also the correctly rounded value below it, so the floor changes no finite result."""
    return jnp.maximum(jnp.asarray(sigma, dtype), jnp.finfo(dtype).tiny)


def floor_rdp(rdp: jax.Array, sigma: jax.Array) -> jax.Array:
    """An RDP value of a Gaussian mechanism with ``sigma < inf`` is positive: where it underflowed to 0 (float32: q =
    1e-30 with sigma = 0.2, or sigma > ~1e19; float64 likewise further out) it is raised to the smallest normal
    float, an upper bound. Otherwise the KL bound of the conversion (eps = 0 where delta^2 > 1 - e^-rdp) took the
    0 at its word: float32 gave eps = 0 at q = 1e-30, sigma = 0.2, delta = 1e-30, where the exact RDP (~1e-49, above
    delta^2) gives eps ~ 68, and calibrate_sigma a sigma 5x too small. ``sigma = inf`` keeps its exact 0."""
    return jnp.where(sigma == jnp.inf, rdp, jnp.maximum(rdp, jnp.finfo(rdp.dtype).tiny))


def _log_a_subsampled_gaussian(log_q, log1mq, q_is_one, sigma, orders: np.ndarray, extra_pairs: int):
    """Sound upper bound on K(alpha) = log A_alpha for scalar q (as :func:`q_logs`), sigma. Returns [n]."""
    dtype = jnp.result_type(log_q, sigma, float)
    sigma = jnp.asarray(sigma, dtype)
    inv2s2 = 0.5 / (sigma * sigma)
    is_int = orders == np.round(orders)
    frac = orders[~is_int]
    # Integer orders needed: the requested ones and the neighbours of the fractional ones (>= 2).
    nb = np.concatenate([np.floor(frac), np.ceil(frac)])
    ints = np.unique(np.concatenate([orders[is_int], nb[nb >= 2]])).astype(np.float64)
    parts, order = [], []
    if ints.size:
        k_int = int_log_a(ints, log_q, log1mq, inv2s2)
        parts.append(k_int[np.searchsorted(ints, orders[is_int])])
        order.append(np.nonzero(is_int)[0])
    if frac.size:
        series, series_err = frac_log_a(frac, log_q, log1mq, inv2s2, sigma, extra_pairs)
        fl, ce = np.floor(frac), np.ceil(frac)
        k_ce = k_int[np.searchsorted(ints, ce)]
        k_fl = jnp.where(fl >= 2, k_int[np.searchsorted(ints, np.maximum(fl, 2))], 0.0)  # K(1) = 0
        v = frac - fl
        chord = (1.0 - v) * k_fl + v * k_ce  # convexity of K (WBK19 Cor. 10)
        mono = (frac - 1.0) * k_ce / (ce - 1.0)  # eps(alpha) <= eps(ceil alpha)
        safe = jnp.minimum(chord, mono)
        # The series plus its rounding-error bound (_ROUNDING_SAFETY times the first-order bound) is an upper bound
        # of K in the working dtype too; without it float32 fell ~1% below the exact RDP at q = 0.01, sigma = 0.7,
        # order 1.1 (K ~ 3.3e-5, a few ulp of A ~ 1). Below ~256 ulp the signed series is mostly rounding; the
        # chord (from exact integer orders) is kept.
        tiny = 256.0 * jnp.finfo(dtype).eps
        series = series + _ROUNDING_SAFETY * series_err
        parts.append(jnp.where(series > tiny, jnp.minimum(series, safe), safe))
        order.append(np.nonzero(~is_int)[0])
    k = unpermute(parts, order)
    exact_q1 = (orders * (orders - 1.0)) * inv2s2  # q = 1: plain Gaussian
    return jnp.where(q_is_one, exact_q1, k)


def rdp_gaussian(sigma: ArrayLike, orders: ArrayLike) -> jax.Array:
    """RDP of the Gaussian mechanism with noise multiplier ``sigma``: ``alpha / (2 sigma^2)`` (Mironov 2017).

    Args:
      sigma: noise multiplier(s), > 0, any shape.
      orders: RDP order(s) > 1 (scalar or 1-D).

    Returns:
      Array of shape ``sigma.shape + orders.shape``.

    Raises:
      ValueError: if ``sigma <= 0`` or an order is <= 1.

    >>> import numpy as np
    >>> np.round(np.asarray(rdp_gaussian(2.0, [2.0, 4.0])), 6).tolist()
    [0.25, 0.5]
    """
    dt = jnp.result_type(float)  # one guard each: the output is their outer product
    bad_sigma = guard(("sigma", sigma, POSITIVE))  # judged in float64: 1e-50 is 0 in float32 (floored below)
    bad_orders = guard_orders(orders, dt)  # concrete orders that round to 1 in dt: an error, not NaN
    sigma = floor_sigma(sigma, dt)
    orders = jnp.asarray(orders, sigma.dtype)
    expand = (...,) + (None,) * orders.ndim
    return nan_if(bad_sigma[expand] | bad_orders, gaussian_rdp_unchecked(sigma, orders))


def gaussian_rdp_unchecked(sigma: jax.Array, orders) -> jax.Array:
    """:func:`rdp_gaussian` on valid arguments (``sigma`` as :func:`floor_sigma` gives it), unchecked and traceable:
    ``alpha / (2 sigma^2)`` of shape ``sigma.shape + orders.shape``, floored by :func:`floor_rdp`."""
    expand = (...,) + (None,) * jnp.ndim(orders)
    return floor_rdp(orders / (2.0 * sigma[expand] ** 2), sigma[expand])


def rdp_subsampled_gaussian(q: ArrayLike, sigma: ArrayLike, orders: ArrayLike, *,
                            extra_pairs: int = _FRAC_EXTRA_PAIRS) -> jax.Array:
    """RDP of ONE step of the Poisson-subsampled Gaussian mechanism (add/remove adjacency), any order > 1.

    Implements Mironov, Talwar and Zhang 2019 ("Renyi DP of the sampled Gaussian mechanism") in log space:
    exact at integer orders; at fractional orders a sound upper bound that is at least as tight as the
    series summed by ``dp_accounting`` and converges where it does not (see the module docstring). Compose
    over T steps with :func:`compose_rdp` (multiply by T).

    Args:
      q: sampling probability(ies) in (0, 1] (traceable).
      sigma: noise multiplier(s) > 0 (traceable); broadcast with ``q``.
      orders: static RDP orders > 1 (scalar or 1-D, concrete).
      extra_pairs: pairs of alternating-tail terms kept at fractional orders (larger = tighter, slower).

    Returns:
      Array of shape ``broadcast(q, sigma).shape + orders.shape`` (empty for empty ``orders``, as
      :func:`rdp_gaussian`); finite for valid input except where the value overflows the working dtype (``inf``, its
      correctly rounded value: float32 at sigma below about 1e-19, where ``alpha / (2 sigma^2)`` exceeds 3.4e38).

    Raises:
      ValueError: if q is outside (0, 1], sigma <= 0, or an order is <= 1 or not concrete.

    >>> import numpy as np
    >>> r = rdp_subsampled_gaussian(1.0, 2.0, [2.0, 3.5])  # q = 1 is the plain Gaussian
    >>> np.round(np.asarray(r), 6).tolist()
    [0.25, 0.4375]
    >>> bool(rdp_subsampled_gaussian(0.01, 1.0, 2.0) < 0.25)  # subsampling amplifies privacy
    True
    """
    dtype = jnp.result_type(float)
    # Judged in float64 (a concrete q or sigma): q = 1e-50 and sigma = 1e-50 are valid, though 0 in float32. The
    # series takes log q and log(1 - q) from the host (q_logs), and sigma at least the smallest normal float
    # (floor_sigma: the RDP is inf there already).
    bad = guard(("q", q, HALF_OPEN_UNIT), ("sigma", sigma, POSITIVE))
    orders_np = static_orders(orders)
    flat_orders = np.atleast_1d(orders_np)
    q_np = concrete_or_none(q)
    log_q, log1mq, is_one = q_logs(q, dtype)
    log_q, log1mq, is_one, sigma = jnp.broadcast_arrays(log_q, log1mq, is_one, floor_sigma(sigma, dtype))
    batch = log_q.shape
    if q_np is not None and np.all(q_np == 1.0):  # no subsampling: the plain Gaussian (skips the series' compile)
        out = rdp_gaussian(sigma, orders_np)
    elif orders_np.size == 0:  # no orders: an empty curve, as rdp_gaussian gives
        return jnp.zeros(batch + orders_np.shape, dtype)
    else:
        out = rdp_subsampled_gaussian_logs(log_q, log1mq, is_one, sigma, flat_orders, extra_pairs)
    out = out.reshape(batch + orders_np.shape)
    return nan_if(bad[(...,) + (None,) * orders_np.ndim], out)


def rdp_subsampled_gaussian_logs(log_q, log1mq, is_one, sigma, orders: np.ndarray,
                                 extra_pairs: int = _FRAC_EXTRA_PAIRS) -> jax.Array:
    """:func:`rdp_subsampled_gaussian` on valid, equally shaped ``q_logs`` and sigma (as :func:`floor_sigma`) at 1-D
    static ``orders``, unchecked: shape ``log_q.shape + orders.shape``. Package-private (callable inside a jit)."""
    batch = jnp.shape(log_q)
    flat, n = pad_batch(log_q, log1mq, is_one, sigma)
    out = _rdp_subsampled_gaussian_flat(*flat, tuple(np.asarray(orders, np.float64).tolist()), extra_pairs)[:n]
    return out.reshape(batch + np.shape(orders))


@functools.partial(jax.jit, static_argnums=(4, 5))
def _rdp_subsampled_gaussian_flat(log_q, log1mq, is_one, sigma, orders_key: tuple, extra_pairs: int):
    orders = np.asarray(orders_key, np.float64)

    def one(lq, l1mq, one_, ss):
        k = _log_a_subsampled_gaussian(lq, l1mq, one_, ss, orders, extra_pairs)
        return floor_rdp(jnp.maximum(k, 0.0) / (orders - 1.0), ss)

    return jax.vmap(one)(log_q, log1mq, is_one, sigma)  # [B, n]


def interpolate_rdp(int_orders: ArrayLike, rdp_at_int_orders: ArrayLike, orders: ArrayLike) -> jax.Array:
    """Upper-bounds RDP at any orders from its values at integer orders, by convexity of K(alpha).

    Wang, Balle and Kasiviswanathan 2019, Cor. 10: K(alpha) = (alpha - 1) eps(alpha) is convex with K(1) = 0,
    so K at a fractional order is at most the chord between the neighbouring integer orders (for alpha in
    (1, 2) the chord from K(1) = 0). Note: Biswas et al. write the interpolation on eps itself; the chord on
    K used here is the one that follows from convexity.

    Args:
      int_orders: static consecutive integer orders ``2, 3, ..., L`` (1-D).
      rdp_at_int_orders: RDP at those orders, shape ``[..., L - 1]``.
      orders: static requested orders in (1, L].

    Returns:
      Array ``[..., len(orders)]``.

    Raises:
      ValueError: if the integer orders are not 2..L (or empty), the last axis of ``rdp_at_int_orders`` is not
        ``L - 1`` long (under ``jit`` too: shapes are static), an RDP value is negative (NaN under ``jit``), or a
        requested order is outside (1, L].

    >>> import numpy as np
    >>> r = interpolate_rdp([2, 3], np.array([1.0, 2.0]), [1.5, 2.5, 3.0])
    >>> [round(float(x), 4) for x in r]  # K(2) = 1, K(3) = 4: K(2.5) <= 2.5, eps(2.5) <= 2.5 / 1.5
    [1.0, 1.6667, 2.0]
    """
    int_orders = np.asarray(static_orders(int_orders, "int_orders"))
    if (int_orders.ndim != 1 or int_orders.size == 0
            or not np.array_equal(int_orders, np.arange(2, 2 + int_orders.size))):
        raise ValueError("int_orders must be the consecutive integers 2, 3, ..., L (L >= 2); "
                         f"got {int_orders.tolist()}")
    shape = np.shape(rdp_at_int_orders)  # static, traced or not
    if shape[-1:] != (int_orders.size,):
        raise ValueError(f"rdp_at_int_orders must have shape [..., {int_orders.size}] (one value per order of "
                         f"int_orders); got shape {shape}")
    orders_np = np.atleast_1d(static_orders(orders))
    top = int_orders[-1]
    if np.any(orders_np > top):
        raise ValueError(f"orders must be in (1, {top}] (the largest integer order given)")
    bad = jnp.any(guard(("rdp_at_int_orders", rdp_at_int_orders, _RDP)), axis=-1)[..., None]  # the whole curve
    rdp = jnp.asarray(rdp_at_int_orders, jnp.result_type(rdp_at_int_orders, float))
    k_int = rdp * (int_orders - 1.0)
    fl, ce = np.floor(orders_np), np.ceil(orders_np)
    v = orders_np - fl
    k_fl = jnp.where(fl >= 2, k_int[..., np.maximum(fl, 2).astype(int) - 2], 0.0)
    k_ce = k_int[..., np.maximum(ce, 2).astype(int) - 2]
    k = jnp.where(v == 0, k_ce, (1.0 - v) * k_fl + v * k_ce)
    return nan_if(bad, k / (orders_np - 1.0))


def rdp_poisson_subsampled(rdp_at_integer_orders: ArrayLike, q: ArrayLike, orders: ArrayLike) -> jax.Array:
    """RDP of a Poisson-subsampled mechanism from the base mechanism's RDP (Zhu and Wang 2019, Thm 5).

    For integer ``alpha >= 2``, with base RDP ``tau_l`` at orders ``l = 2..alpha``::

        tau^s_alpha <= 1/(alpha-1) log{ (1-q)^(alpha-1) (alpha q - q + 1) + C(alpha,2) q^2 (1-q)^(alpha-2) e^tau_2
                                        + 3 sum_{l=3}^alpha C(alpha,l) (1-q)^(alpha-l) q^l e^((l-1) tau_l) }

    (prefactor ``1/(alpha-1)``, the erratum to Biswas et al. Thm 3), capped by ``tau_alpha`` itself (Poisson
    subsampling never hurts for a mechanism whose RDP bound holds in both directions). Fractional orders are
    filled in by :func:`interpolate_rdp`.

    Args:
      rdp_at_integer_orders: base RDP at orders 2, 3, ..., L, shape ``[..., L - 1]`` (traceable).
      q: sampling probability in (0, 1], broadcastable with the batch shape ``...``.
      orders: static requested orders in (1, L].

    Returns:
      Array ``[..., len(orders)]`` (``...`` broadcast with ``q``'s shape).

    Raises:
      ValueError: if q is outside (0, 1], a base RDP value is negative, L < 2, or an order is outside (1, L].

    >>> import numpy as np
    >>> base = np.arange(2, 9) / 2.0  # Gaussian with sigma = 1 at orders 2..8
    >>> r = rdp_poisson_subsampled(base, 1.0, [2.0, 8.0])  # q = 1: nothing changes
    >>> np.round(np.asarray(r), 6).tolist()
    [1.0, 4.0]
    """
    dt = jnp.result_type(float)  # one guard each: q broadcasts with the batch, the curve has its orders too
    bad_q = guard(("q", q, HALF_OPEN_UNIT))  # judged in float64: its logs come from the host (q_logs)
    bad_tau = guard(("rdp_at_integer_orders", rdp_at_integer_orders, _RDP), cast=dt)
    tau = jnp.asarray(rdp_at_integer_orders, dt)
    if tau.ndim < 1 or tau.shape[-1] < 1:
        raise ValueError("rdp_at_integer_orders must have a last axis for orders 2..L (L >= 2)")
    big_l = tau.shape[-1] + 1
    int_orders = np.arange(2, big_l + 1, dtype=np.float64)
    log_q, log1mq, is_one = (v[..., None, None] for v in q_logs(q, tau.dtype))
    qc = jnp.exp(log_q)  # 1/2 where q = 1; a q that float32 flushes to 0 enters only through log q
    a = int_orders[:, None]  # [L-1, 1]  (alpha)
    ell = int_orders[None, :]  # [1, L-1]  (l = 2..L)
    mask = ell <= a
    logc = np.where(mask, sps.gammaln(a + 1) - sps.gammaln(ell + 1) - sps.gammaln(np.maximum(a - ell, 0) + 1), 0.0)
    a_l = np.where(mask, a - ell, 0.0)
    t = (
        logc
        + np.where(ell >= 3, np.log(3.0), 0.0)
        + jnp.where(a_l == 0, 0.0, a_l * log1mq)
        + ell * log_q
        + (ell - 1.0) * tau[..., None, :]
    )
    t = jnp.where(mask, t, -jnp.inf)
    t0 = (a[:, 0] - 1.0) * log1mq[..., 0] + jnp.log1p((a[:, 0] - 1.0) * qc[..., 0])  # [..., L-1]
    k = jnp.logaddexp(t0, logsumexp(t, axis=-1))
    sub = jnp.maximum(k, 0.0) / (int_orders - 1.0)
    sub = jnp.where(is_one[..., 0], tau, jnp.minimum(sub, tau))
    sub = jnp.maximum(sub, jnp.minimum(tau, jnp.finfo(sub.dtype).tiny))  # an underflow to 0 of a positive bound
    out = interpolate_rdp(int_orders, sub, orders)
    return nan_if((bad_q | jnp.any(bad_tau, axis=-1))[..., None], out)


def compose_rdp(rdp, count) -> jax.Array:
    """RDP of the ``count``-fold adaptive composition: RDP values add up (Mironov 2017, Prop. 1).

    Args:
      rdp: per-step RDP curve ``[..., n]``.
      count: number of compositions (steps, or epochs in Biswas et al.'s tables), >= 0; broadcast with
        ``rdp``'s batch shape.

    Returns:
      ``count * rdp``.

    Raises:
      ValueError: if ``count`` or an RDP value is negative (NaN under ``jit``).

    >>> import numpy as np
    >>> np.asarray(compose_rdp(np.array([0.5, 1.0]), 3)).tolist()
    [1.5, 3.0]
    """
    dt = jnp.result_type(float)  # one guard each: count broadcasts with the batch of the curve
    bad_count, bad_rdp = guard(("count", count, NONNEGATIVE), cast=dt), guard(("rdp", rdp, _RDP), cast=dt)
    rdp = jnp.asarray(rdp, dt)
    count = jnp.asarray(count, rdp.dtype)
    check_shapes(count=count.shape, **{"rdp batch": rdp.shape[:-1]})
    out = jnp.where(count[..., None] == 0, 0.0, count[..., None] * rdp)  # 0 compositions: 0, even for inf
    bad = bad_count | jnp.any(bad_rdp, axis=-1)  # the whole curve
    return nan_if(bad[..., None], out)
