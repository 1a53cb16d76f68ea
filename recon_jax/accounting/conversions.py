r"""Conversions RDP -> (eps, delta)-DP, subsampling amplification and composition in the (eps, delta) domain.

| symbol | meaning |
|---|---|
| ``orders`` (alpha) | Renyi orders > 1, shape [n] |
| ``rdp`` | RDP curve at those orders, shape [..., n] |
| ``eps``, ``delta`` | (eps, delta)-DP parameters |
| ``q`` | Poisson sampling probability (gamma in Biswas et al.) |
| ``n`` | number of composed mechanisms (N in Biswas et al. Thm 2) |

The RDP -> DP conversion is Canonne, Kamath and Steinke 2020, Prop. 2.11 (Biswas et al. Prop. 4):
``delta = exp((alpha - 1)(rdp - eps)) / (alpha - 1) * (1 - 1/alpha)^alpha`` (equivalently
``eps = rdp + log(1 - 1/alpha) - (log delta + log alpha) / (alpha - 1)``), optimised over the orders given,
together with the KL bound ``delta >= sqrt(1 - exp(-rdp))`` => eps = 0 (valid since D_alpha >= KL).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from recon_jax._validation import (HALF_OPEN_UNIT, NONNEGATIVE, OPEN_UNIT, UNIT, UNIT_HALF_OPEN, Range, at_least,
                                   check_shapes, concrete_or_none, guard, guard_orders, log_one_minus, log_positive,
                                   nan_if)

__all__ = ["eps_from_rdp", "delta_from_rdp", "amplify_dp_poisson", "kov_composition"]

_DELTA = Range(OPEN_UNIT.predicate, "in (0, 1)")  # a target delta


def _prep(orders, rdp):
    rdp = jnp.asarray(rdp, jnp.result_type(float))
    orders = jnp.asarray(orders, rdp.dtype)
    if orders.ndim != 1 or rdp.ndim < 1 or rdp.shape[-1] != orders.shape[0]:
        raise ValueError(f"orders must be 1-D and rdp's last axis must match it; got {orders.shape} and {rdp.shape}")
    return orders, rdp


def eps_from_rdp(orders: ArrayLike, rdp: ArrayLike, delta: ArrayLike, *, return_order: bool = False):
    """Smallest epsilon such that an RDP curve implies (eps, delta)-DP (Canonne et al. 2020, Prop. 2.11).

    Args:
      orders: Renyi orders > 1, shape [n] (may be traced).
      rdp: RDP values at the orders, shape [..., n], >= 0 (``inf`` allowed: that order is skipped).
      delta: target delta in (0, 1), broadcast with ``rdp.shape[:-1]``.
      return_order: also return the optimal order.

    Returns:
      eps of shape ``broadcast(rdp.shape[:-1], delta.shape)`` (and the optimal order if requested).

    Raises:
      ValueError: for orders <= 1, negative rdp, delta outside (0, 1) or mismatched shapes.

    >>> import numpy as np
    >>> a, r, d = 4.0, 1.0, 1e-5  # the better of the two orders; Prop. 2.11 by hand:
    >>> want = r + np.log1p(-1 / a) - (np.log(d) + np.log(a)) / (a - 1)
    >>> bool(np.isclose(eps_from_rdp([2.0, 4.0], [0.5, 1.0], d), want, rtol=1e-6))
    True
    """
    dt = jnp.result_type(float)  # one guard each: orders, the curve and the targets lie on different axes
    # concrete orders that round to 1 in dt: an error, not NaN
    bad_orders, bad_rdp = guard_orders(orders, dt), guard(("rdp", rdp, NONNEGATIVE), cast=dt)
    bad_delta = guard(("delta", delta, _DELTA))  # judged in float64: 1e-300 is 0 in float32, its log is not
    orders, rdp = _prep(orders, rdp)
    out, best = eps_from_rdp_log_delta(orders, rdp, log_positive(delta, rdp.dtype))
    out = nan_if(jnp.any(bad_orders | bad_rdp, axis=-1) | bad_delta, out)
    if return_order:
        return out, orders[best]
    return out


def eps_from_rdp_log_delta(orders: jax.Array, rdp: jax.Array, log_delta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """:func:`eps_from_rdp` from ``log(delta)`` (as :func:`~recon_jax._validation.log_positive` takes it on the
    host), unchecked: ``(eps, index of the best order)``. Package-private: jitted callers pass ``log(delta)`` in,
    since a delta that float32 cannot hold (``1e-300``, ``1 - 1e-9``) cannot be passed as itself."""
    log_delta = jnp.asarray(log_delta, rdp.dtype)[..., None]
    eps = rdp + jnp.log1p(-1.0 / orders) - (log_delta + jnp.log(orders)) / (orders - 1.0)
    # KL bound delta^2 > 1 - e^-rdp, in logs (delta^2 underflowed below 1e-154, and delta near 1 rounds to 1 in float32)
    log_tv2 = jnp.where(rdp < 0.5, jnp.log(-jnp.expm1(-rdp)), jnp.log1p(-jnp.exp(-rdp)))
    eps = jnp.where(2.0 * log_delta > log_tv2, 0.0, eps)
    eps = jnp.where(jnp.isnan(eps), jnp.inf, eps)
    return jnp.maximum(jnp.min(eps, axis=-1), 0.0), jnp.argmin(eps, axis=-1)


def delta_from_rdp(orders: ArrayLike, rdp: ArrayLike, eps: ArrayLike, *, return_order: bool = False):
    """Smallest delta such that an RDP curve implies (eps, delta)-DP (Canonne et al. 2020, Prop. 2.11).

    Args:
      orders: Renyi orders > 1, shape [n].
      rdp: RDP values, shape [..., n], >= 0.
      eps: target epsilon >= 0, broadcast with ``rdp.shape[:-1]``.
      return_order: also return the optimal order.

    Returns:
      delta in [0, 1] of shape ``broadcast(rdp.shape[:-1], eps.shape)``.

    Raises:
      ValueError: for orders <= 1, negative rdp or eps, or mismatched shapes.

    >>> import numpy as np
    >>> e = eps_from_rdp([2.0, 4.0], [0.5, 1.0], 1e-5)
    >>> bool(np.isclose(delta_from_rdp([2.0, 4.0], [0.5, 1.0], e), 1e-5, rtol=1e-4))  # inverse of eps_from_rdp
    True
    """
    dt = jnp.result_type(float)  # one guard each, as in eps_from_rdp
    bad_orders, bad_rdp = guard_orders(orders, dt), guard(("rdp", rdp, NONNEGATIVE), cast=dt)
    bad_eps = guard(("eps", eps, NONNEGATIVE), cast=dt)
    orders, rdp = _prep(orders, rdp)
    eps = jnp.asarray(eps, rdp.dtype)[..., None]
    log_delta = (orders - 1.0) * (rdp - eps + jnp.log1p(-1.0 / orders)) - jnp.log(orders)
    log_kl = 0.5 * jnp.log(-jnp.expm1(-rdp))  # delta <= sqrt(1 - e^{-KL}), KL <= rdp
    log_delta = jnp.minimum(log_delta, log_kl)
    log_delta = jnp.where(jnp.isnan(log_delta), jnp.inf, log_delta)
    best = jnp.argmin(log_delta, axis=-1)
    out = jnp.minimum(jnp.exp(jnp.min(log_delta, axis=-1)), 1.0)
    out = nan_if(jnp.any(bad_orders | bad_rdp, axis=-1) | bad_eps, out)
    if return_order:
        return out, orders[best]
    return out


def amplify_dp_poisson(eps, delta, q):
    """Privacy amplification of (eps, delta)-DP by Poisson subsampling with probability q (add/remove).

    Balle, Barthe and Gaboardi 2018, Thm 8 (Biswas et al. eq. 9): ``eps_s = log(1 + q (e^eps - 1))``,
    ``delta_s = q delta``.

    Args:
      eps: epsilon >= 0; delta: delta in [0, 1]; q: sampling probability in (0, 1]. All broadcast.

    Returns:
      ``(eps_s, delta_s)``.

    Raises:
      ValueError: for values outside those ranges.

    >>> import numpy as np
    >>> e, d = amplify_dp_poisson(1.0, 1e-3, 0.01)
    >>> bool(np.isclose(e, np.log(1 + 0.01 * (np.e - 1)))), bool(np.isclose(d, 1e-5))
    (True, True)
    """
    dt = jnp.result_type(float)
    bad_eps = guard(("eps", eps, NONNEGATIVE), cast=dt)  # one guard each: check_shapes names a shape mismatch
    bad_delta = guard(("delta", delta, UNIT), cast=dt)
    bad_q = guard(("q", q, HALF_OPEN_UNIT))  # judged in float64: 1e-50 is 0 in float32, its log is not
    check_shapes(eps=np.shape(eps), delta=np.shape(delta), q=np.shape(q))
    bad = bad_eps | bad_delta | bad_q
    log_q, log1mq = log_positive(q, dt), log_one_minus(q, dt)  # on the host when concrete
    eps, delta, q = (jnp.asarray(v, dt) for v in (eps, delta, q))
    # log(1 - q + q e^eps): in logs above eps = 1 (e^eps overflowed to inf from eps ~ 89 in float32, 710 in float64)
    far = jnp.logaddexp(log1mq, log_q + eps)
    eps_s = jnp.where(eps > 1.0, far, jnp.log1p(q * jnp.expm1(jnp.minimum(eps, 1.0))))
    return nan_if(bad, eps_s), nan_if(bad, q * delta)


def kov_composition(eps, delta, n, delta_tilde):
    """Kairouz, Oh and Viswanath 2017 composition bound (Thm 10; Biswas et al. Thm 2, corrected).

    ``n``-fold composition of (eps, delta)-DP mechanisms is ``(eps_tot, 1 - (1 - delta)^n (1 - delta_tilde))``
    -DP with ``eps_tot = min{ n eps, n eps (e^eps - 1)/(e^eps + 1) + eps sqrt(2 n log(e + sqrt(n eps^2) /
    delta_tilde)), n eps (e^eps - 1)/(e^eps + 1) + eps sqrt(2 n log(1/delta_tilde)) }``. The leading term of
    the last two expressions is ``n eps (e^eps - 1)/(e^eps + 1)`` (the paper prints it without the factor
    ``n eps``). With ``delta_tilde = 0`` only the first expression applies.

    Args:
      eps: per-mechanism epsilon >= 0; delta: per-mechanism delta in [0, 1); n: number of compositions >= 1;
      delta_tilde: slack in [0, 1). All broadcast.

    Returns:
      ``(eps_tot, delta_tot)``.

    Raises:
      ValueError: for values outside those ranges.

    >>> import numpy as np
    >>> e, d = kov_composition(0.1, 0.0, 100, 1e-5)  # far below the naive 100 * 0.1 = 10
    >>> want = 100 * 0.1 * np.tanh(0.05) + 0.1 * np.sqrt(200 * np.log(1e5))
    >>> bool(np.isclose(e, want, rtol=1e-5)), bool(np.isclose(d, 1e-5))
    (True, True)
    """
    dt = jnp.result_type(float)
    # Judged in float64: delta and delta_tilde enter through logs taken on the host (1 - 1e-9 is 1 in float32, its
    # log(1 - x) is not; 1e-50 is 0, its log is not), and n = 1e50 is inf in float32 (eps_tot overflows to inf then,
    # its correctly rounded value, while 0 * inf made delta_tot NaN).
    bad = guard(("eps", eps, NONNEGATIVE), ("delta", delta, UNIT_HALF_OPEN), ("n", n, at_least(1)),
                ("delta_tilde", delta_tilde, UNIT_HALF_OPEN))
    host_dtl = concrete_or_none(delta_tilde)
    pos = jnp.asarray(host_dtl > 0) if host_dtl is not None else jnp.asarray(delta_tilde, dt) > 0
    log_dtl = log_positive(delta_tilde, dt)  # 0 where delta_tilde = 0 (pos False there)
    log1m_delta, log1m_dtl = log_one_minus(delta, dt), log_one_minus(delta_tilde, dt)
    eps, n = (jnp.asarray(v, dt) for v in (eps, n))
    lead = n * eps * jnp.tanh(eps / 2.0)  # n eps (e^eps - 1)/(e^eps + 1)
    x = jnp.sqrt(n) * eps  # log(e + x / delta_tilde) in logs: x / delta_tilde overflowed where delta_tilde is tiny
    log_e_plus = jnp.where(x > 0, jnp.logaddexp(1.0, jnp.log(jnp.where(x > 0, x, 1.0)) - log_dtl), 1.0)
    t2 = lead + eps * jnp.sqrt(2.0 * n * log_e_plus)
    t3 = lead + eps * jnp.sqrt(2.0 * n * -log_dtl)
    eps_tot = jnp.where(pos, jnp.minimum(n * eps, jnp.minimum(t2, t3)), n * eps)
    eps_tot = jnp.where(eps == 0, 0.0, eps_tot)  # n = inf: 0 * inf
    delta_tot = 0.0 - jnp.expm1(jnp.where(log1m_delta == 0, 0.0, n * log1m_delta) + log1m_dtl)  # +0, not -0
    return nan_if(bad, eps_tot), nan_if(bad, delta_tot)
