"""The machinery of :mod:`recon_jax.bounds.rero`: the binary-Renyi (optimal) conversion of an RDP or zCDP guarantee
to a ReRo bound at the prior kappa, Balle et al.'s closed forms it is compared with, and the float32 rounding
allowances that keep every bound at or above its exact value. Package-private; the public functions, their
validation and their documentation are in :mod:`recon_jax.bounds.rero`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import concrete_or_none


def log1m(kappa, dtype):
    """``log(1 - kappa)`` in ``dtype``, in float64 on the host for concrete ``kappa`` (1 - 1e-9 is 1 in float32);
    entries outside (0, 1) give ``log(1/2)``: mask them with ``nan_if``."""
    host = concrete_or_none(kappa)
    if host is not None:
        return jnp.asarray(np.log1p(-np.where((host > 0) & (host < 1), host, 0.5)), dtype)
    k = jnp.asarray(kappa, dtype)
    return jnp.log1p(-jnp.where((k > 0) & (k < 1), k, 0.5))


def kappa_rounded_up(kappa, dtype):
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
NDTRI_ULPS = 8.0
NDTR_ULPS_PER_X2 = 3.0


def round_up(out, ulps, floor=None, *, always=False):
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


def dp_gamma(log_kappa, log1m_kappa, eps):
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
    return jnp.where(inf_order, dp_gamma(log_kappa, log1m_kappa, eps), out)


def rdp_bound(lk, l1k, order, eps, method, floor):
    """The per-order bound of :func:`rero_from_rdp` from ``lk = log kappa``, ``l1k = log(1 - kappa)`` (safe points in
    place of invalid entries), rounded up in float32 (:func:`round_up`) and at least ``floor``.

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
    return round_up(out, ulps, floor)


def check_method(method):
    if method not in ("optimal", "balle"):
        raise ValueError(f"method must be 'optimal' or 'balle'; got {method!r}")


_ZCDP_LOG_ORDER_GRID = np.linspace(-16.0, 8.0, 97)  # log(alpha - 1): alpha in 1 + [1.1e-7, 2981]
_ZCDP_GOLDEN_ITERS = 24


@jax.jit
def zcdp_gamma(log_kappa, log1m_kappa, rho):
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


def cor4_bound(log_kappa, rho):
    """Balle et al.'s Cor. 4, ``exp(-(sqrt(log(1/kappa)) - sqrt(rho))^2)`` (1 once rho >= log(1/kappa)), and a bound on
    the rounding error of its log in units of u (for :func:`round_up`). With ``g = sqrt(-log kappa) - sqrt(rho)``:
    each root is within 1.5 u of itself (the rounding of log kappa or of rho, halved by the root, and the root's own),
    the difference adds ``u g``, so g is within ``u (1.5 (sqrt(-log kappa) + sqrt(rho)) + g)`` and the exponent
    ``g^2`` (squared and rounded) within ``u (3 g (sqrt(-log kappa) + sqrt(rho)) + 3 g^2 + 1)``."""
    root_l, root_r = jnp.sqrt(-log_kappa), jnp.sqrt(rho)
    gap = root_l - root_r
    out = jnp.where(gap > 0, jnp.exp(-jnp.square(jnp.maximum(gap, 0.0))), 1.0)
    g = jnp.maximum(gap, 0.0)
    return out, 3.0 * g * (root_l + root_r + g) + 1.0
