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

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import special as jsp

from recon_jax._validation import (NONNEGATIVE, OPEN_UNIT, UNIT, Range, as_float, check_orders, concrete_or_none,
                                   floor_tiny, guard, log_positive, nan_if)
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


def _log1m(kappa, dtype):
    """``log(1 - kappa)`` in ``dtype``, in float64 on the host for concrete ``kappa`` (1 - 1e-9 is 1 in float32);
    entries outside (0, 1) give ``log(1/2)``: mask them with ``nan_if``."""
    host = concrete_or_none(kappa)
    if host is not None:
        return jnp.asarray(np.log1p(-np.where((host > 0) & (host < 1), host, 0.5)), dtype)
    k = jnp.asarray(kappa, dtype)
    return jnp.log1p(-jnp.where((k > 0) & (k < 1), k, 0.5))


def _kappa_up(kappa, dtype):
    """``kappa`` in ``dtype``, rounded up (to a float >= the given kappa) when concrete: the floor of every bound that
    must be >= kappa. Traced kappa already is a ``dtype`` number (or a narrower one, held exactly)."""
    host = concrete_or_none(kappa)
    if host is None:
        return jnp.asarray(kappa, dtype)
    cast = host.astype(np.dtype(dtype))
    with np.errstate(invalid="ignore"):
        return jnp.asarray(np.where(cast < host, np.nextafter(cast, np.inf), cast), dtype)


# float32 rounding errors of jax.scipy.special.ndtri and ndtr, in units of the unit roundoff u = 2^-24, measured
# against SciPy's float64 functions on 600k float32 probabilities in [1.2e-38, 1) and 2M arguments in [-13, 8]:
# |ndtri error| <= 6.7 u |z|; ndtr's relative error <= 2 x^2 + 8 u (its exp(-x^2 / 2) rounds x^2). Taken with margin.
_NDTRI_ULPS = 8.0
_NDTR_ULPS_PER_X2 = 3.0


def _round_up(out, ulps, floor=None, *, always=False):
    """An upper bound ``out`` raised by its float32 rounding error: ``out (1 + x + x^2)`` with ``x = u (ulps + 8)``
    (u the unit roundoff, ``ulps`` a bound on the absolute error of ``log(out)`` in units of u, 8 more for the final
    exp, this multiplication and margin; ``1 + x + x^2 >= e^x``), capped at 1, and at least ``floor`` (kappa rounded
    up, for bounds that are >= kappa).

    In float32 the logarithms of the inputs (``log kappa`` to 1/2 ulp of up to 745) carry absolute errors of up to
    ~5e-5, which ``exp`` turns into relative errors of the bound: left alone, bounds landed below their exact value
    (rero_from_dp(kappa, 0) up to 3.6e-6 below kappa, rero_gdp(kappa, 0) 1.9e-5). float64 (and wider) results are
    returned unchanged (unless ``always``): there the same errors are ~|log kappa| 2^-53 (below 2e-13 relative), and
    committed numbers come from these functions.
    """
    if jnp.finfo(out.dtype).bits >= 64 and not always:
        return out
    x = (jnp.finfo(out.dtype).eps / 2) * (jax.lax.stop_gradient(ulps) + 8.0)
    up = jnp.minimum(out * (1.0 + x * (1.0 + x)), 1.0)
    up = jnp.where(out >= 1.0, out, up)  # 1 (and NaN) as they are
    return up if floor is None else jnp.maximum(up, floor)


def _dp_gamma(log_kappa, log1m_kappa, eps):
    """1 - f(kappa) for the eps-DP trade-off f(a) = max(0, 1 - e^eps a, e^-eps (1 - a)): both branches, in logs."""
    first = jnp.exp(jnp.minimum(log_kappa + eps, 0.0))  # kappa e^eps, capped at 1
    second = -jnp.expm1(log1m_kappa - eps)  # 1 - e^-eps (1 - kappa)
    return jnp.minimum(first, second)


# ---------------------------------------------------------------------------------------------------------
# Optimal conversion of one RDP guarantee to a trade-off function, evaluated at the prior kappa.
# ---------------------------------------------------------------------------------------------------------

_RDP_BISECT_ITERS = 64


def _logaddexp_ulps(a, b, c, err_a, err_b):
    """Rounding bound, in ulps, of ``c = logaddexp(a, b)`` (``b`` may be -inf) whose exponents carry ``err_a`` and
    ``err_b`` ulps: each exponent's error weighted by its share of the sum, plus the final rounding."""
    return (jnp.exp(a - c) * err_a + jnp.where(jnp.isfinite(b), jnp.exp(b - c) * err_b, 0.0)
            + jnp.abs(jnp.maximum(a, b)) + 2.0 * jnp.exp(-jnp.abs(a - b)))


def _rdp_constraints(dd, lk, l1k, a):
    """log of the two Renyi-divergence sums of the binary pair (kappa, 1 - kappa) vs (gamma, 1 - gamma), order a,
    at ``dd = log(gamma / kappa) >= 0``, and a bound on the rounding error of each.

    c1 = gamma^a kappa^(1-a) + (1-gamma)^a (1-kappa)^(1-a)   (exp((a-1) D_a(test|Q || test|P)))
    c2 = kappa^a gamma^(1-a) + (1-kappa)^a (1-gamma)^(1-a)   (exp((a-1) D_a(test|P || test|Q)))
    Both increase in gamma on [kappa, 1]. Returns (log c1, log c2, d log c1 / d dd, d log c2 / d dd, err1, err2).

    The sums depend on gamma through ``dd`` and ``de = log((1 - gamma) / (1 - kappa))``, both computed to relative
    accuracy (``de`` from ``dd`` by log1p); differences of logarithms of gamma and kappa had an absolute error of
    ~1 ulp of ``log kappa``, which swamped sums of 1 + O(eps) and let the bisection declare feasible powers infeasible
    (a bound below the exact one at small eps: 2e-5 too low in float32, 1e-9 in float64).
    """
    u = jnp.finfo(jnp.result_type(dd)).eps
    lg = lk + dd
    big = 3.0 * jnp.maximum(jnp.abs(lk), jnp.abs(l1k)) + 8.0  # relative error of de (and of lg) in ulps, generous
    arg = -jnp.exp(lg - l1k) * -jnp.expm1(-dd)  # (1 - gamma) / (1 - kappa) - 1 = -(gamma - kappa) / (1 - kappa)
    de = jnp.where(arg > -0.5, jnp.log1p(jnp.maximum(arg, -0.5)), jnp.log(-jnp.expm1(jnp.minimum(lg, 0.0))) - l1k)
    am1 = a - 1.0
    a1, b1 = lk + a * dd, l1k + a * de  # a lg + (1-a) lk, a l1g + (1-a) l1k
    a2, b2 = lk - am1 * dd, l1k - am1 * de  # a lk + (1-a) lg, a l1k + (1-a) l1g
    c1, c2 = jnp.logaddexp(a1, b1), jnp.logaddexp(a2, b2)
    # Rounding of the logaddexp form: that of each exponent (log kappa taken as exact; de carries its relative error),
    # weighted by its share of the sum, plus the final rounding.
    # log(1 - kappa) is log1p(-kappa) of the caller's kappa: within 1 ulp, plus kappa |log kappa| ulp from exp(lk).
    fde, e_l1k = jnp.where(jnp.isfinite(de), jnp.abs(de), 0.0), 2.0 * jnp.abs(l1k) - jnp.exp(lk) * lk
    # In ulps: half of one for each of the two roundings of a1 = lk + a dd (and of a - 1 in a2); log1p(exp(-|a1 - b1|))
    # is within one ulp of the larger exponent plus two of itself.
    e_a1, e_b1 = 0.5 * (jnp.abs(a1) + a * dd), jnp.abs(b1) + a * big * fde + e_l1k
    e_a2, e_b2 = 0.5 * (jnp.abs(a2) + 2.0 * am1 * dd), jnp.abs(b2) + am1 * big * fde + e_l1k
    far1, far2 = _logaddexp_ulps(a1, b1, c1, e_a1, e_b1), _logaddexp_ulps(a2, b2, c2, e_a2, e_b2)
    # Near alpha = 1 (or gamma ~ kappa) both sums are 1 + O((alpha - 1) KL): write them as log1p(p expm1((a-1) x)
    # + (1 - p) expm1((a-1) y)) (p + (1 - p) = 1 exactly), which keeps their relative accuracy where the logaddexp
    # form only has absolute.
    x1, y1 = am1 * dd, am1 * de
    small1 = jnp.maximum(jnp.abs(x1), jnp.abs(y1)) < 1.0
    g, g1 = jnp.exp(lg), -jnp.expm1(lg)
    k, k1 = jnp.exp(lk), jnp.exp(l1k)
    t1, t2 = g * jnp.expm1(jnp.where(small1, x1, 0.0)), g1 * jnp.expm1(jnp.where(small1, y1, 0.0))
    t3, t4 = k * jnp.expm1(jnp.where(small1, -x1, 0.0)), k1 * jnp.expm1(jnp.where(small1, -y1, 0.0))
    near1, near2 = jnp.log1p(t1 + t2), jnp.log1p(t3 + t4)
    c1, c2 = jnp.where(small1, near1, c1), jnp.where(small1, near2, c2)
    err1 = u * jnp.where(small1, big * (jnp.abs(t1) + jnp.abs(t2)) + jnp.abs(c1), far1)
    err2 = u * jnp.where(small1, big * (jnp.abs(t3) + jnp.abs(t4)) + jnp.abs(c2), far2)
    odds = jnp.exp(lg - jnp.log(g1))  # d(-log(1 - gamma)) / d log gamma
    d1 = a * (jnp.exp(a1 - c1) - jnp.exp(b1 - c1) * odds)
    d2 = (1.0 - a) * (jnp.exp(a2 - c2) - jnp.exp(b2 - c2) * odds)
    return c1, c2, d1, d2, err1, err2


@jax.jit
def _rdp_gamma(log_kappa, log1m_kappa, order, eps):
    """Largest success probability gamma an (order, eps)-RDP mechanism allows at prior kappa (an upper bound).

    The optimal conversion of one RDP guarantee to a trade-off curve (Zhu, Dong and Wang 2022, App. F.1;
    Balle et al. 2020): a test with type-I error kappa and power gamma pushes the two output distributions to
    (kappa, 1 - kappa) and (gamma, 1 - gamma), whose Renyi divergences of order a, in both directions, are at
    most eps. gamma* is the largest gamma meeting both; found by bisection on log(gamma / kappa) in [0, -log kappa]
    and returned as the upper end of the final bracket (never below gamma*: a point counts as infeasible only when
    its computed excess is above the bound on its rounding error). ``order = inf``: the eps-DP curve.
    Gradients in kappa and eps come from the implicit function theorem at the root.
    """
    inf_order = jnp.isinf(order)
    a = jnp.where(inf_order, 2.0, order)
    bound = (a - 1.0) * eps
    lk, l1k, a, bound = jnp.broadcast_arrays(log_kappa, log1m_kappa, a, bound)

    def excess(dd):
        c1, c2, _, _, e1, e2 = _rdp_constraints(dd, jax.lax.stop_gradient(lk), jax.lax.stop_gradient(l1k), a)
        return jnp.maximum(c1 - e1, c2 - e2) - jax.lax.stop_gradient(bound)

    def body(_, carry):
        lo, hi = carry
        mid = 0.5 * (lo + hi)
        feasible = excess(mid) <= 0.0
        return jnp.where(feasible, mid, lo), jnp.where(feasible, hi, mid)

    lo, hi = jax.lax.fori_loop(0, _RDP_BISECT_ITERS, body, (jnp.zeros_like(lk), -jax.lax.stop_gradient(lk)))
    # Value: exp(lk + hi) >= gamma*. Derivative: one Newton step on the binding constraint (implicit function theorem).
    # At gamma = 1 (hi = -log kappa) the bound is flat: no step, and the constraints are taken at a safe point (their
    # log(1 - gamma) = -inf sent NaN through the gradient).
    top = lk + hi >= 0.0
    c1, c2, d1, d2, _, _ = _rdp_constraints(jnp.where(top, 0.0, hi), lk, l1k, a)
    first = c1 >= c2
    g, dg = jnp.where(first, c1, c2) - bound, jnp.where(first, d1, d2)
    step = jnp.where(jnp.abs(dg) > 1e-300, g / jnp.where(dg == 0, 1.0, dg), 0.0)
    step = jnp.where(jnp.isfinite(step) & ~top, step, 0.0)
    lg = jnp.where(top, 0.0, lk + hi - (step - jax.lax.stop_gradient(step)))
    out = jnp.exp(jnp.minimum(lg, 0.0))
    return jnp.where(inf_order, _dp_gamma(log_kappa, log1m_kappa, eps), out)


def _rdp_bound(lk, l1k, order, eps, method, floor):
    """The per-order bound of :func:`rero_from_rdp` from ``lk = log kappa``, ``l1k = log(1 - kappa)`` (safe points in
    place of invalid entries), rounded up in float32 (:func:`_round_up`) and at least ``floor``.

    float32 rounding, in units of u, of the log of the bound: ``log kappa`` to ``|lk|`` (the bound's relative error
    too, as d log gamma / d log kappa <= 1: gamma is concave in kappa with gamma(0) = 0); eps to ``eps`` (and about as
    much again through ``(alpha - 1) eps``, where the bisection compares). Thm. 2's exponent
    ``e = c (log kappa + eps)``, ``c = 1 - 1/alpha``: the errors of the sum (``|lk| + eps + |lk + eps|``) times c; c's
    own (alpha's rounding, 1/alpha's and the difference's: relative ``u (alpha + 1) / (alpha - 1) + u``, i.e.
    ``2 u |lk + eps|`` in e) and the product's (``|e|``). The optimal route's ``log gamma`` lies in ``[lk, 0]`` (its
    final exp adds ``|lk|``); its bisection accounts for the rounding of its own sums.
    """
    if method == "balle":
        c = 1.0 - 1.0 / order
        out = jnp.exp(jnp.minimum(c * (lk + eps), 0.0))
        ulps = c * (jnp.abs(lk) + eps + 2.0 * jnp.abs(lk + eps)) + 2.0 * jnp.abs(lk + eps)
    else:
        out = jnp.maximum(_rdp_gamma(lk, l1k, order, eps), jnp.exp(lk))  # gamma >= kappa
        ulps = 2.0 * jnp.abs(lk) + 2.0 * (eps + 1.0)
    return _round_up(out, ulps, floor)


def _check_method(method):
    if method not in ("optimal", "balle"):
        raise ValueError(f"method must be 'optimal' or 'balle'; got {method!r}")


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
    log1m_kappa = _log1m(kappa, log_kappa.dtype)  # likewise: 1 - 1e-9 is 1 in float32
    kappa_up = _kappa_up(kappa, log_kappa.dtype)
    kappa, eps = as_float(kappa, eps)
    half = jnp.log(jnp.asarray(0.5, log_kappa.dtype))
    lk, e = jnp.where(bad, half, log_kappa), jnp.where(bad, 0.0, eps)
    out = _dp_gamma(lk, jnp.where(bad, half, log1m_kappa), e)
    # float32: log kappa, eps and their sum each round by up to u times their size (d log gamma / d log kappa <= 1:
    # gamma is concave in kappa with gamma(0) = 0); the second branch's error is a few u (its exponent is <= 0).
    out = floor_tiny(_round_up(out, jnp.abs(lk) + e + jnp.abs(lk + e), kappa_up))
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
    kappa_up = _kappa_up(kappa, log_kappa.dtype)
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
    out = floor_tiny(_round_up(out, jnp.abs(lk) + e + jnp.abs(lk + e), kappa_up))
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
    _check_method(method)
    bad = guard(("kappa", kappa, OPEN_UNIT), ("eps", eps, NONNEGATIVE), ("order", order, _ORDER), validate=validate)
    log_kappa = log_positive(kappa, as_float(kappa, eps, order)[0].dtype)
    log1m_kappa = _log1m(kappa, log_kappa.dtype)
    kappa_up = _kappa_up(kappa, log_kappa.dtype)
    kappa, eps, order = as_float(kappa, eps, order)
    safe_order = jnp.where(~bad & (order > 1), order, 2.0)  # order 1 + 1e-12 rounds to 1 in float32: trivial bound
    safe_eps = jnp.where(bad, 0.0, eps)
    half = jnp.log(jnp.asarray(0.5, log_kappa.dtype))
    lk, l1k = jnp.where(bad, half, log_kappa), jnp.where(bad, half, log1m_kappa)
    out = _rdp_bound(lk, l1k, safe_order, safe_eps, method, kappa_up)
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
    _check_method(method)
    # kappa: the leading axes; orders and rdp: the curve. Both judged as cast below (safe points replace them there).
    # kappa is judged as given (float64 on the host when concrete: 1e-40 and 1 - 1e-9 are valid, and their logs are
    # taken there, as rero_from_rdp does); orders and rdp as cast (safe points replace them there).
    bad_kappa = guard(("kappa", kappa, OPEN_UNIT), validate=validate)
    bad_point = guard(("orders", orders, _ORDER), ("rdp", rdp, NONNEGATIVE), validate=validate,
                      cast=(kappa, orders, rdp))
    if validate:
        check_orders(orders)  # a concrete order that rounds to 1 in the working dtype: an error, not NaN
    dtype = as_float(kappa, orders, rdp, broadcast=False)[0].dtype
    log_kappa, log1m_kappa = log_positive(kappa, dtype), _log1m(kappa, dtype)  # NaN-free at invalid entries
    kappa_up = _kappa_up(kappa, dtype)
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
            out = jnp.min(_rdp_bound(lk, l1k, safe_orders, safe_rdp, method, kappa_up[..., None]), axis=-1)
    else:
        out = jnp.min(_rdp_bound(lk, l1k, safe_orders, safe_rdp, method, kappa_up[..., None]), axis=-1)
    return nan_if(bad_kappa | jnp.any(bad_point, axis=-1), floor_tiny(out))


_ZCDP_LOG_ORDER_GRID = np.linspace(-16.0, 8.0, 97)  # log(alpha - 1): alpha in 1 + [1.1e-7, 2981]
_ZCDP_GOLDEN_ITERS = 24


@jax.jit
def _zcdp_gamma(log_kappa, log1m_kappa, rho):
    """min over alpha > 1 of the optimal per-order bound at eps = rho alpha: grid, Cor. 4's order, golden section.
    Returns the bound and the order that gives it.

    The order is searched on stopped gradients and the bound evaluated once more at the order found, so the
    derivative in kappa and rho is the envelope theorem's (the bound's partial derivatives at the optimal order):
    differentiating through the search itself sent NaN from extreme grid orders through the minimum.
    """
    live = (log_kappa, log1m_kappa, rho)
    log_kappa, log1m_kappa, rho = (jax.lax.stop_gradient(v) for v in live)

    def at(u, lk=log_kappa, l1k=log1m_kappa, r=rho):  # u = log(alpha - 1)
        a = 1.0 + jnp.exp(u)
        return _rdp_gamma(lk[..., None], l1k[..., None], a, r[..., None] * a)

    grid = jnp.asarray(_ZCDP_LOG_ORDER_GRID, rho.dtype)
    # Cor. 4's order sqrt(log(1/kappa)/rho) when it exceeds 1 (Theorem 2's optimum), clipped into the grid.
    a_cor4 = jnp.sqrt(-log_kappa / jnp.maximum(rho, jnp.finfo(rho.dtype).tiny))
    u_cor4 = jnp.clip(jnp.log(jnp.maximum(a_cor4 - 1.0, jnp.exp(grid[0]))), grid[0], grid[-1])
    us = jnp.concatenate([jnp.broadcast_to(grid, rho.shape + grid.shape), u_cor4[..., None]], axis=-1)
    vals = at(us)
    best = jnp.argmin(vals, axis=-1)
    u_best = jnp.take_along_axis(us, best[..., None], axis=-1)
    step = grid[1] - grid[0]
    invphi = (math.sqrt(5.0) - 1.0) / 2.0  # a Python float: weakly typed, keeps float32 input float32 under x64

    def body(_, carry):
        lo, hi, fbest, ubest = carry
        x1 = hi - invphi * (hi - lo)
        x2 = lo + invphi * (hi - lo)
        f1, f2 = at(x1), at(x2)
        left = f1 <= f2
        f_new, u_new = jnp.where(left, f1, f2), jnp.where(left, x1, x2)
        better = f_new < fbest
        return (jnp.where(left, lo, x1), jnp.where(left, x2, hi), jnp.where(better, f_new, fbest),
                jnp.where(better, u_new, ubest))

    _, _, _, u_star = jax.lax.fori_loop(0, _ZCDP_GOLDEN_ITERS, body,
                                        (u_best - step, u_best + step, jnp.min(vals, axis=-1, keepdims=True),
                                         u_best))
    u_star = jax.lax.stop_gradient(u_star)
    return at(u_star, *live)[..., 0], 1.0 + jnp.exp(u_star[..., 0])


def _cor4(log_kappa, rho):
    """Balle et al.'s Cor. 4, ``exp(-(sqrt(log(1/kappa)) - sqrt(rho))^2)`` (1 once rho >= log(1/kappa)), and a bound on
    the rounding error of its log in units of u (for :func:`_round_up`). With ``g = sqrt(-log kappa) - sqrt(rho)``:
    each root is within 1.5 u of itself (the rounding of log kappa or of rho, halved by the root, and the root's own),
    the difference adds ``u g``, so g is within ``u (1.5 (sqrt(-log kappa) + sqrt(rho)) + g)`` and the exponent
    ``g^2`` (squared and rounded) within ``u (3 g (sqrt(-log kappa) + sqrt(rho)) + 3 g^2 + 1)``."""
    root_l, root_r = jnp.sqrt(-log_kappa), jnp.sqrt(rho)
    gap = root_l - root_r
    out = jnp.where(gap > 0, jnp.exp(-jnp.square(jnp.maximum(gap, 0.0))), 1.0)
    g = jnp.maximum(gap, 0.0)
    return out, 3.0 * g * (root_l + root_r + g) + 1.0


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
    _check_method(method)
    # kappa judged as given, before the float32 cast, and its logs taken on the host when concrete (1e-40 is 0 and
    # 1 - 1e-9 is 1 in float32; both gave NaN), as rero_from_rdp does.
    bad = guard(("kappa", kappa, OPEN_UNIT), ("rho", rho, NONNEGATIVE), validate=validate)
    dtype = as_float(kappa, rho)[0].dtype
    log_kappa, log1m_kappa, kappa_up = log_positive(kappa, dtype), _log1m(kappa, dtype), _kappa_up(kappa, dtype)
    kappa, rho = as_float(kappa, rho)
    half = jnp.log(jnp.asarray(0.5, dtype))
    log_k, _ = jnp.broadcast_arrays(jnp.where(bad, half, log_kappa), rho)
    safe_rho = jnp.where(bad, 0.0, rho)
    cor4, cor4_ulps = _cor4(log_k, safe_rho)
    if method == "balle":
        out = _round_up(cor4, cor4_ulps, kappa_up)  # float64: as computed
    else:
        search, order = _zcdp_gamma(log_k, jnp.where(bad, half, log1m_kappa), safe_rho)
        # float32: as rero_from_rdp's optimal route at eps = rho alpha (rho's rounding and the product: 2 u eps).
        search = _round_up(search, 2.0 * jnp.abs(log_k) + 3.0 * (safe_rho * order + 1.0))
        # Cor. 4 rounded up in every dtype: where it and the search agree to rounding (tiny kappa), the search's value
        # stays; where the search is looser (small rho), Cor. 4 is taken, never below its exact value.
        out = jnp.maximum(jnp.minimum(search, _round_up(cor4, cor4_ulps, always=True)), kappa_up)  # gamma >= kappa
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
    kappa_up = _kappa_up(kappa, as_float(kappa, mu)[0].dtype)
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
    ulps = slope * (_NDTRI_ULPS * jnp.abs(z) + m + jnp.abs(x)) + _NDTR_ULPS_PER_X2 * x * x + 9.0
    out = floor_tiny(jnp.where(mu == jnp.inf, 1.0, _round_up(out, jnp.where(mu == jnp.inf, 0.0, ulps), kappa_up)))
    return nan_if(bad, out)
