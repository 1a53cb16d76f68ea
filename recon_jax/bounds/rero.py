"""Reconstruction robustness (ReRo) from differential privacy: Balle, Cherubin & Hayes (S&P 2022), Sec. VII,
and the hypothesis-testing bound of Hayes et al. (2023) / Kaissis et al. (2023) for mu-GDP mechanisms.

A mechanism is (eta, gamma)-ReRo for a prior pi and error function l if no attack reconstructs the target with
error <= eta with probability larger than gamma. Every ``rero_*`` function returns such an upper bound gamma in
[0, 1], given the *baseline* kappa = sup_z0 P_{Z~pi}[l(Z, z0) <= eta] (the success of the best attack that ignores
the release).

Notation:

=========  ==========================================================
``kappa``  baseline success probability of the prior, in (0, 1)
``eps``    (R)DP epsilon, >= 0
``order``  Renyi order alpha > 1 (``inf`` allowed: pure DP)
``rho``    zCDP parameter, >= 0
``mu``     Gaussian-DP parameter, >= 0 (``sqrt(T) / sigma`` for T full-batch Gaussian steps)
``eta``    reconstruction error threshold (l2 distance), > 0
``sigma``  standard deviation of the Gaussian prior, > 0
``dim``    dimension d of the data, >= 1
``gamma``  ReRo success bound, in [0, 1]
=========  ==========================================================

All functions are pure ``jnp``: jittable, vmappable over parameter grids, broadcasting, differentiable where the
math is. The baselines kappa of two priors (:mod:`recon_jax.bounds.baselines`) are re-exported here. Inputs are
validated when concrete (``ValueError``); under ``jit`` invalid values give NaN (see
:mod:`recon_jax._validation`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy import special as jsp

from recon_jax._validation import (NONNEGATIVE, OPEN_UNIT, UNIT, Range, as_float, check_orders, floor_tiny, guard,
                                   log_positive, nan_if)
from recon_jax.bounds._rero_core import (NDTR_ULPS_PER_X2, NDTRI_ULPS, check_method, cor4_bound, dp_gamma,
                                         kappa_rounded_up, log1m, rdp_bound, round_up, zcdp_gamma)
from recon_jax.bounds.baselines import (
    baseline_kappa_gaussian,
    baseline_kappa_gaussian_tail_bound,
    baseline_kappa_uniform_ball,
)

__all__ = [
    "baseline_kappa_uniform_ball",
    "baseline_kappa_gaussian",
    "baseline_kappa_gaussian_tail_bound",
    "rero_from_dp",
    "rero_from_approx_dp",
    "rero_from_rdp",
    "rero_from_rdp_curve",
    "rero_from_zcdp",
    "dp_from_rero",
    "rero_gdp",
]

ArrayLike = jax.typing.ArrayLike


def rero_from_dp(kappa: ArrayLike, eps: ArrayLike, *, validate: bool = True) -> jax.Array:
    """ReRo bound for an eps-DP mechanism: ``gamma = min(kappa e^eps, 1 - e^{-eps} (1 - kappa))``.

    ``1 - f(kappa)`` for the trade-off function of eps-DP, ``f(a) = max(0, 1 - e^eps a, e^{-eps} (1 - a))``
    (Wasserman and Zhou 2010; Dong, Roth and Su 2022), the exact hypothesis-testing bound (Hayes et al. 2023).
    The first branch is Balle et al.'s Cor. 3; the second is smaller once ``kappa > 1 / (1 + e^eps)``.

    Args:
      kappa: baseline success probability, in (0, 1).
      eps: pure-DP epsilon, >= 0.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in [kappa, 1).

    Raises:
      ValueError: kappa outside (0, 1) or ``eps < 0``.

    Example:
      >>> round(float(rero_from_dp(0.01, 1.0)), 6)  # first branch: 0.01 e
      0.027183
      >>> round(float(rero_from_dp(0.1, 3.0)), 6)  # second branch: 1 - 0.9 e^-3 (Cor. 3 would give 1)
      0.955192
    """
    bad = guard(("kappa", kappa, OPEN_UNIT), ("eps", eps, NONNEGATIVE), validate=validate)  # before the float32 cast
    log_kappa = log_positive(kappa, as_float(kappa, eps)[0].dtype)  # float64 log: kappa = 1e-40 is 0 in float32
    log1m_kappa = log1m(kappa, log_kappa.dtype)  # likewise: 1 - 1e-9 is 1 in float32
    kappa_up = kappa_rounded_up(kappa, log_kappa.dtype)
    kappa, eps = as_float(kappa, eps)
    half = jnp.log(jnp.asarray(0.5, log_kappa.dtype))
    lk, e = jnp.where(bad, half, log_kappa), jnp.where(bad, 0.0, eps)
    out = dp_gamma(lk, jnp.where(bad, half, log1m_kappa), e)
    # float32: log kappa, eps and their sum each round by up to u times their size (d log gamma / d log kappa <= 1:
    # gamma is concave in kappa with gamma(0) = 0); the second branch's error is a few u (its exponent is <= 0).
    out = floor_tiny(round_up(out, jnp.abs(lk) + e + jnp.abs(lk + e), kappa_up))
    return nan_if(bad, out)


def rero_from_approx_dp(kappa: ArrayLike, eps: ArrayLike, delta: ArrayLike, *, validate: bool = True) -> jax.Array:
    """ReRo bound for (eps, delta)-DP: ``gamma = min(1, kappa e^eps + delta, 1 - e^{-eps} (1 - delta - kappa))``.

    ``1 - f(kappa)`` for the (eps, delta)-DP trade-off curve ``f(a) = max(0, 1 - delta - e^eps a,
    e^{-eps} (1 - delta - a))`` (Dong, Roth and Su 2022, Eq. 5). The first branch is Balle et al.'s argument for
    approximate DP: for any attack R, ``P[l(Z, R(theta)) <= eta] <= e^eps E_{theta ~ M(D_z0)} P_Z[l(Z, R(theta)) <=
    eta] + delta <= e^eps kappa + delta``. Minimising over a mechanism's privacy profile (eps, delta(eps)) gives the
    tightest such bound.

    Args:
      kappa: baseline success probability, in (0, 1).
      eps: epsilon, >= 0.
      delta: delta, in [0, 1].
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in (0, 1].

    Raises:
      ValueError: kappa outside (0, 1), ``eps < 0`` or delta outside [0, 1].

    Example:
      >>> round(float(rero_from_approx_dp(0.01, 1.0, 1e-3)), 6)
      0.028183
    """
    bad = guard(("kappa", kappa, OPEN_UNIT), ("eps", eps, NONNEGATIVE), ("delta", delta, UNIT), validate=validate)
    log_kappa = log_positive(kappa, as_float(kappa, eps, delta)[0].dtype)
    kappa_up = kappa_rounded_up(kappa, log_kappa.dtype)
    kappa, eps, delta = as_float(kappa, eps, delta)
    lk = jnp.where(bad, 0.0, log_kappa)
    log_first = jnp.minimum(lk + eps, 0.0)
    k = jnp.where(bad, 0.5, kappa)
    # 1 - e^-eps (1 - delta - kappa) as a sum of non-negative terms (the difference lost kappa + delta below ~1e-16:
    # kappa = 1e-20, eps = 0 gave 0); 1 where delta + kappa >= 1.
    second = jnp.where(delta + k < 1.0, -jnp.expm1(-eps) + jnp.exp(-eps) * (delta + k), 1.0)
    out = jnp.minimum(jnp.minimum(jnp.exp(log_first) + delta, 1.0), second)
    # float32: as in rero_from_dp (adding delta, or the second branch's sum of non-negative terms, adds a few u).
    e = jnp.where(bad, 0.0, eps)
    out = floor_tiny(round_up(out, jnp.abs(lk) + e + jnp.abs(lk + e), kappa_up))
    return nan_if(bad, out)


_ORDER = Range(lambda a: a > 1, "> 1 (inf allowed)")  # a Renyi order


def rero_from_rdp(kappa: ArrayLike, eps: ArrayLike, order: ArrayLike, method: str = "optimal", *,
                  validate: bool = True) -> jax.Array:
    """ReRo bound for an (alpha, eps)-RDP mechanism.

    ``method="optimal"`` (default): the largest gamma such that the binary distributions (kappa, 1 - kappa) and
    (gamma, 1 - gamma) have Renyi divergences of order alpha at most eps in both directions, i.e. ``1 - f(kappa)``
    for the optimal trade-off function implied by one RDP guarantee (Zhu, Dong and Wang 2022, App. F.1); it needs
    the RDP bound for both orderings of neighbouring datasets, as RDP over a symmetric neighbour relation gives.
    Computed by bisection (jittable; the result is the upper end of the bracket, so never below the exact value).

    ``method="balle"``: Balle et al.'s Thm. 2, ``gamma = (kappa e^eps)^((alpha-1)/alpha)`` capped at 1, which
    drops one term of the first divergence and is never tighter.

    ``order = inf`` gives :func:`rero_from_dp` (optimal) or Cor. 3 (balle).

    Args:
      kappa: baseline success probability, in (0, 1).
      eps: RDP epsilon at this order, >= 0.
      order: Renyi order alpha, > 1 (``inf`` allowed).
      method: ``"optimal"`` or ``"balle"`` (static).
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in [kappa, 1].

    Raises:
      ValueError: kappa outside (0, 1), ``eps < 0``, ``order <= 1`` or an unknown method.

    Example:
      >>> round(float(rero_from_rdp(0.01, 1.0, 2.0, method="balle")), 6)  # sqrt(0.01 e)
      0.164872
      >>> round(float(rero_from_rdp(0.01, 1.0, 2.0)), 4)  # the optimal conversion is tighter
      0.1404
    """
    check_method(method)
    bad = guard(("kappa", kappa, OPEN_UNIT), ("eps", eps, NONNEGATIVE), ("order", order, _ORDER), validate=validate)
    log_kappa = log_positive(kappa, as_float(kappa, eps, order)[0].dtype)
    log1m_kappa = log1m(kappa, log_kappa.dtype)
    kappa_up = kappa_rounded_up(kappa, log_kappa.dtype)
    kappa, eps, order = as_float(kappa, eps, order)
    safe_order = jnp.where(~bad & (order > 1), order, 2.0)  # order 1 + 1e-12 rounds to 1 in float32: trivial bound
    safe_eps = jnp.where(bad, 0.0, eps)
    half = jnp.log(jnp.asarray(0.5, log_kappa.dtype))
    lk, l1k = jnp.where(bad, half, log_kappa), jnp.where(bad, half, log1m_kappa)
    out = rdp_bound(lk, l1k, safe_order, safe_eps, method, kappa_up)
    out = floor_tiny(jnp.where(order > 1, out, 1.0))
    return nan_if(bad, out)


def rero_from_rdp_curve(kappa: ArrayLike, orders: ArrayLike, rdp: ArrayLike, method: str = "optimal", *,
                        validate: bool = True) -> jax.Array:
    """ReRo bound from an RDP curve: the per-order bound of :func:`rero_from_rdp` minimised over the orders given.

    ``gamma = min_i rero_from_rdp(kappa, rdp_i, alpha_i)`` over the last axis of ``orders``/``rdp`` (which broadcast
    against each other; ``kappa`` broadcasts against the remaining leading axes). With ``method="optimal"`` this
    is ``1 - f(kappa)`` for the pointwise maximum of the optimal per-order trade-off curves, which is the optimal
    conversion of the whole (finite) curve: the feasible powers of each order form an interval, so their
    intersection is bounded by the smallest upper end. ``method="balle"``: Balle et al.'s Thm. 2 per order.

    Args:
      kappa: baseline success probability, in (0, 1); shape ``[...]``.
      orders: Renyi orders, each > 1; shape ``[..., K]``.
      rdp: RDP epsilons at those orders, each >= 0 (``inf`` allowed: that order is then ignored); ``[..., K]``.
      method: ``"optimal"`` (default) or ``"balle"`` (static).
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in [kappa, 1], shape ``[...]``.

    Raises:
      ValueError: kappa outside (0, 1), an order <= 1, a negative rdp value or an unknown method.

    Example:
      >>> import numpy as np
      >>> orders = np.array([1.5, 2.0, 4.0, 8.0])
      >>> round(float(rero_from_rdp_curve(1e-3, orders, orders / 2.0, method="balle")), 5)  # sigma = 1; order 4
      0.0252
      >>> bool(rero_from_rdp_curve(1e-3, orders, orders / 2.0) < 0.0252)
      True
    """
    check_method(method)
    # kappa: the leading axes; orders and rdp: the curve. Both judged as cast below (safe points replace them there).
    # kappa is judged as given (float64 on the host when concrete: 1e-40 and 1 - 1e-9 are valid, and their logs are
    # taken there, as rero_from_rdp does); orders and rdp as cast (safe points replace them there).
    bad_kappa = guard(("kappa", kappa, OPEN_UNIT), validate=validate)
    bad_point = guard(("orders", orders, _ORDER), ("rdp", rdp, NONNEGATIVE), validate=validate,
                      cast=(kappa, orders, rdp))
    if validate:
        check_orders(orders)  # a concrete order that rounds to 1 in the working dtype: an error, not NaN
    dtype = as_float(kappa, orders, rdp, broadcast=False)[0].dtype
    log_kappa, log1m_kappa = log_positive(kappa, dtype), log1m(kappa, dtype)  # NaN-free at invalid entries
    kappa_up = kappa_rounded_up(kappa, dtype)
    kappa, orders, rdp = as_float(kappa, orders, rdp, broadcast=False)  # kappa: leading axes only
    orders, rdp = jnp.broadcast_arrays(orders, rdp)
    safe_orders = jnp.where(bad_point, 2.0, orders)
    safe_rdp = jnp.where(bad_point, 0.0, rdp)
    half = jnp.log(jnp.asarray(0.5, dtype))
    lk = jnp.where(bad_kappa, half, log_kappa)[..., None]
    l1k = jnp.where(bad_kappa, half, log1m_kappa)[..., None]
    if method == "balle":
        # as before this change in float64: the minimum over orders of the exponents, then one exp
        log_gamma = (1.0 - 1.0 / safe_orders) * (lk + safe_rdp)
        out = jnp.exp(jnp.minimum(jnp.min(log_gamma, axis=-1), 0.0))
        if jnp.finfo(dtype).bits < 64:
            out = jnp.min(rdp_bound(lk, l1k, safe_orders, safe_rdp, method, kappa_up[..., None]), axis=-1)
    else:
        out = jnp.min(rdp_bound(lk, l1k, safe_orders, safe_rdp, method, kappa_up[..., None]), axis=-1)
    return nan_if(bad_kappa | jnp.any(bad_point, axis=-1), floor_tiny(out))


def rero_from_zcdp(kappa: ArrayLike, rho: ArrayLike, method: str = "optimal", *, validate: bool = True) -> jax.Array:
    """ReRo bound for a rho-zCDP mechanism (RDP ``eps(alpha) = rho alpha`` at every order).

    ``method="optimal"`` (default): the optimal per-order conversion (:func:`rero_from_rdp`) minimised over
    alpha > 1: a 97-point grid of ``log(alpha - 1)`` in [-16, 8] plus Cor. 4's order, refined by a golden-section
    search around the best grid point, and then the smaller of that and Cor. 4 (so never looser than
    ``"balle"``: at small rho Cor. 4's order, sqrt(log(1/kappa) / rho), lies beyond the grid, and at orders ~1e5 the
    bisection's rounding margins cost more than the optimal conversion gains). Every evaluated order gives a valid
    bound, and so does Cor. 4, so the minimum is one.

    ``method="balle"``: Balle et al.'s Cor. 4, ``gamma = exp(-(sqrt(log(1/kappa)) - sqrt(rho))^2)`` if
    ``rho < log(1/kappa)``, else 1 (Theorem 2 at its best order ``alpha = sqrt(log(1/kappa) / rho)``).

    Args:
      kappa: baseline success probability, in (0, 1).
      rho: zCDP parameter, >= 0 (a Gaussian mechanism with noise multiplier sigma over T steps has
        ``rho = T / (2 sigma^2)``).
      method: ``"optimal"`` (default) or ``"balle"`` (static).
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in [kappa, 1].

    Raises:
      ValueError: kappa outside (0, 1), ``rho < 0`` or an unknown method.

    Example:
      >>> round(float(rero_from_zcdp(1e-3, 0.5, method="balle")), 4)  # exp(-(sqrt(log 1000) - sqrt(0.5))^2)
      0.025
      >>> bool(rero_from_zcdp(1e-3, 0.5) < 0.025)
      True
    """
    check_method(method)
    # kappa judged as given, before the float32 cast, and its logs taken on the host when concrete (1e-40 is 0 and
    # 1 - 1e-9 is 1 in float32; both gave NaN), as rero_from_rdp does.
    bad = guard(("kappa", kappa, OPEN_UNIT), ("rho", rho, NONNEGATIVE), validate=validate)
    dtype = as_float(kappa, rho)[0].dtype
    log_kappa, log1m_kappa, kappa_up = log_positive(kappa, dtype), log1m(kappa, dtype), kappa_rounded_up(kappa, dtype)
    kappa, rho = as_float(kappa, rho)
    half = jnp.log(jnp.asarray(0.5, dtype))
    log_k, _ = jnp.broadcast_arrays(jnp.where(bad, half, log_kappa), rho)
    safe_rho = jnp.where(bad, 0.0, rho)
    cor4, cor4_ulps = cor4_bound(log_k, safe_rho)
    if method == "balle":
        out = round_up(cor4, cor4_ulps, kappa_up)  # float64: as computed
    else:
        search, order = zcdp_gamma(log_k, jnp.where(bad, half, log1m_kappa), safe_rho)
        # float32: as rero_from_rdp's optimal route at eps = rho alpha (rho's rounding and the product: 2 u eps).
        search = round_up(search, 2.0 * jnp.abs(log_k) + 3.0 * (safe_rho * order + 1.0))
        # Cor. 4 rounded up in every dtype: where it and the search agree to rounding (tiny kappa), the search's value
        # stays; where the search is looser (small rho), Cor. 4 is taken, never below its exact value.
        out = jnp.maximum(jnp.minimum(search, round_up(cor4, cor4_ulps, always=True)), kappa_up)  # gamma >= kappa
    return nan_if(bad, floor_tiny(out))


def dp_from_rero(eps: ArrayLike, gamma: ArrayLike, *, validate: bool = True) -> jax.Array:
    """The delta of Balle et al., Thm. 5: ReRo against all two-point priors implies (eps, delta)-DP.

    ``delta = max(0, (e^eps + 1) gamma - e^eps) = max(0, gamma - (1 - gamma) e^eps)``, computed without overflow.

    Args:
      eps: epsilon, >= 0.
      gamma: ReRo success bound against the two-point priors with ``p = 1 / (e^eps + 1)``, in [0, 1].
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      delta in [0, 1].

    Raises:
      ValueError: ``eps < 0`` or gamma outside [0, 1].

    Example:
      >>> round(float(dp_from_rero(0.0, 0.75)), 6)
      0.5
    """
    bad = guard(("eps", eps, NONNEGATIVE), ("gamma", gamma, UNIT), validate=validate, cast=(eps, gamma))
    eps, gamma = as_float(eps, gamma)
    one_minus = 1.0 - gamma
    # (1 - gamma) e^eps in log space; gamma = 1 gives exactly 1.
    log_second = jnp.log(jnp.where(one_minus > 0, one_minus, 1.0)) + eps
    second = jnp.where(one_minus > 0, jnp.exp(jnp.minimum(log_second, 700.0)), 0.0)
    out = jnp.maximum(gamma - second, 0.0)
    return nan_if(bad, out)


def rero_gdp(kappa: ArrayLike, mu: ArrayLike, *, validate: bool = True) -> jax.Array:
    """Hypothesis-testing ReRo bound for mu-GDP mechanisms: ``gamma = Phi(Phi^{-1}(kappa) + mu)``.

    Hayes et al. (2023), Kaissis et al. (2023): a mu-GDP mechanism's trade-off function is that of
    N(0, 1) vs N(mu, 1), so an adversary whose prior success is kappa succeeds with probability at most
    ``1 - Phi(Phi^{-1}(1 - kappa) - mu)``, the same number. For the Gaussian mechanism with noise multiplier sigma
    over T full-batch steps, ``mu = sqrt(T) / sigma`` (this is Ziller et al.'s Table 1 worst-case column).

    Args:
      kappa: prior success probability, in (0, 1).
      mu: GDP parameter, >= 0 (``inf`` gives 1).
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in (0, 1].

    Raises:
      ValueError: kappa outside (0, 1) or ``mu < 0``.

    Example:
      >>> round(float(rero_gdp(0.1, 1.0)), 4)  # Ziller et al. Table 1, first row: 38.9%
      0.3891
    """
    bad = guard(("kappa", kappa, OPEN_UNIT), ("mu", mu, NONNEGATIVE), validate=validate)  # before the float32 cast
    kappa_up = kappa_rounded_up(kappa, as_float(kappa, mu)[0].dtype)
    kappa, mu = as_float(kappa, mu)
    kappa = jnp.maximum(kappa, jnp.finfo(kappa.dtype).tiny)  # raising kappa (1e-40 flushes to 0) is conservative
    m = jnp.where(bad, 0.0, mu)
    z = jsp.ndtri(jnp.where(bad, 0.5, kappa))
    x = z + m
    out = jsp.ndtr(x)
    # float32 rounding of log gamma, in units of u: x is within ndtri's error, mu's and the sum's roundings, and
    # d log Phi / dx = phi(x) / Phi(x) <= max(-x, 0) + 1 (Mills ratio); ndtr's own error; kappa's rounding (relative u:
    # d log gamma / d log kappa <= 1, gamma being concave in kappa with gamma(0) = 0).
    slope = jnp.maximum(-x, 0.0) + 1.0
    ulps = slope * (NDTRI_ULPS * jnp.abs(z) + m + jnp.abs(x)) + NDTR_ULPS_PER_X2 * x * x + 9.0
    out = floor_tiny(jnp.where(mu == jnp.inf, 1.0, round_up(out, jnp.where(mu == jnp.inf, 0.0, ulps), kappa_up)))
    return nan_if(bad, out)
