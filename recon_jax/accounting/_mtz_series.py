"""Mironov, Talwar and Zhang's (2019) series for ``log A_alpha`` of the Poisson-subsampled Gaussian, the engine of
:func:`recon_jax.accounting.rdp.rdp_subsampled_gaussian`: the exact binomial sum at integer orders and the signed
series at fractional orders with a bound on its own rounding error. Package-private; the orders' bookkeeping, the
caps and the documentation of what is exact are in :mod:`recon_jax.accounting.rdp`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, logsumexp
from scipy import special as sps

from recon_jax.special import log_expm1


def _buckets(width: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """Groups indices by the next power of two of ``width``; each group is padded to its own max width."""
    p2 = np.ceil(np.log2(np.maximum(width, 1))).astype(np.int64)
    return [(np.nonzero(p2 == p)[0], int(width[p2 == p].max())) for p in np.unique(p2)]


def unpermute(parts, order):
    """Concatenates per-bucket results and restores the original order (a static permutation)."""
    perm = np.argsort(np.concatenate(order))
    cat = jnp.concatenate(parts, axis=-1)
    return cat if np.array_equal(perm, np.arange(perm.size)) else cat[..., perm]


def int_log_a(int_orders: np.ndarray, log_q, log1mq, inv2s2):
    """log A_alpha at integer orders >= 2 (exact binomial sum, via A - 1). Returns [len(int_orders)]."""
    parts, order = [], []
    n_all = int(int_orders.max()) + 1
    i_all = np.arange(n_all, dtype=np.float64)
    g = log_expm1((i_all * i_all - i_all) * inv2s2, validate=False)  # [n_all], shared by all orders; -inf at i < 2
    for idx, pad in _buckets(int_orders + 1):
        a = int_orders[idx][:, None]  # [m, 1]
        i = np.arange(pad)[None, :]  # [1, pad]
        mask = (i <= a) & (i >= 2)
        logc = np.where(mask, sps.gammaln(a + 1) - sps.gammaln(i + 1) - sps.gammaln(np.maximum(a - i, 0) + 1), 0.0)
        a_minus_i = np.where(mask, a - i, 0.0)
        t = logc + i * log_q + a_minus_i * log1mq + g[:pad]
        t = jnp.where(mask, t, -jnp.inf)
        parts.append(jnp.logaddexp(0.0, logsumexp(t, axis=-1)))
        order.append(idx)
    return unpermute(parts, order)


def _log_ndtr_and_weight(x, x_scale):
    """``log Phi(x)`` and a bound on its absolute rounding error in units of the working epsilon.

    ``x_scale`` bounds the absolute error of the computed argument ``x`` in the same units; the error it passes on is
    that times ``d log Phi / dx = phi(x) / Phi(x)`` (the inverse Mills ratio), to first order.
    """
    lphi = log_ndtr(x)
    mills = jnp.exp(-0.5 * x * x - 0.5 * np.log(2.0 * np.pi) - lphi)
    return lphi, 1.0 + jnp.abs(lphi) + mills * x_scale


def frac_log_a(frac_orders: np.ndarray, log_q, log1mq, inv2s2, sigma, extra_pairs: int):
    """Upper bound on log A_alpha at fractional orders: MTZ's signed series truncated on a positive term.

    Returns ``(k, err)``, both [len(frac_orders)]: the computed log of the series (``inf`` where it is not positive)
    and a first-order bound on that value's rounding error (>= 0), so that ``k + err`` bounds the exact truncated
    series from above. The error matters where K is within a few hundred ulp of 0: float32 at q = 0.01, sigma = 0.7,
    order 1.1 gave K 0.9% below the exact value (rounding of a sum A ~ 1 to ~3 ulp, with K = log A ~ 3.3e-5).
    """
    dtype = jnp.result_type(log_q)
    eps = jnp.finfo(dtype).eps
    parts, errs, order = [], [], []
    fl = np.floor(frac_orders)
    last = fl + 1 + 2 * extra_pairs  # index of the last kept term; its coefficient is positive
    z0 = (log1mq - log_q) / (2.0 * inv2s2) + 0.5  # sigma^2 log((1-q)/q) + 1/2
    # Rounding error bounds, in units of eps: each log-term is a sum of parts, each computed to a few ulp of its own
    # magnitude, so the term's error is bounded by the sum of the parts' magnitudes (+1 per operation is absorbed by
    # the leading 1 of each weight). z0's parts bound its error; an argument (w - z0) / sigma adds |w| / sigma.
    abs_lq, abs_l1 = jnp.abs(log_q), jnp.abs(log1mq)
    z0_scale = (abs_l1 + abs_lq) / (2.0 * inv2s2) + 0.5
    n_all = int(last.max()) + 1
    j_all = np.arange(n_all, dtype=np.float64)
    x1 = (z0 - j_all) / sigma
    logphi1, w_phi1 = _log_ndtr_and_weight(x1, (z0_scale + j_all) / sigma + jnp.abs(x1))  # region z <= z0, shared
    # Region z > z0 depends on u = alpha - j only through V(u) = u log q + (u^2 - u)/(2 sigma^2)
    # + log Phi((u - z0)/sigma), and u = f + m for the order's fractional part f and an integer m. The values
    # u = f + m (m = m_lo..max floor alpha) of every f are laid end to end, V is evaluated once on them, and each
    # order's terms are a static (reversed) window of that vector: one gather per bucket.
    fpart = np.round(frac_orders - fl, 10)
    f_unique = np.unique(fpart)
    m_lo = -n_all
    start_of, u_parts, pos = {}, [], 0
    for f in f_unique:
        m = np.arange(m_lo, int(fl[fpart == f].max()) + 1, dtype=np.float64)
        start_of[f] = pos
        u_parts.append(f + m)
        pos += m.size
    u_np = np.concatenate(u_parts)
    u_all = jnp.asarray(u_np, dtype)
    x2 = (u_all - z0) / sigma
    logphi2, w_phi2 = _log_ndtr_and_weight(x2, (z0_scale + np.abs(u_np)) / sigma + jnp.abs(x2))
    # u^2 - u on the host in float64: in float32 the rounding of u itself (~1e-8 relative at u = 1.05) would
    # make an error of ~(u^2 + u) ulp on a value u^2 - u of ~0.05.
    uu_np = u_np * u_np - u_np
    v_all = u_all * log_q + jnp.asarray(uu_np, dtype) * inv2s2 + logphi2
    w_v = np.abs(u_np) * abs_lq + np.abs(uu_np) * inv2s2 + w_phi2
    for idx, pad in _buckets(last + 1):
        a = frac_orders[idx][:, None]  # [m, 1]
        j = np.arange(pad)[None, :]  # [1, pad]
        mask = j <= last[idx][:, None]
        logc = np.where(mask, sps.gammaln(a + 1) - sps.gammaln(j + 1) - sps.gammaln(a - j + 1), 0.0)  # log|C|
        tail = j - fl[idx][:, None] - 1
        sign = np.where(tail <= 0, 1.0, np.where(tail % 2 == 0, 1.0, -1.0))
        u = a - j
        t1 = logc + j * log_q + u * log1mq + (j * j - j) * inv2s2 + logphi1[:pad]
        w1 = np.abs(logc) + j * abs_lq + np.abs(u) * abs_l1 + (j * j - j) * inv2s2 + w_phi1[:pad]
        # u = f + k - j for j = 0..pad-1  <->  m = k, k-1, ..., k-pad+1 (k = floor alpha)
        window = np.array([start_of[fpart[i]] + int(fl[i]) - m_lo for i in idx])[:, None] - j  # [m, pad]
        t2 = logc + j * log1mq + v_all[window]
        w2 = np.abs(logc) + j * abs_l1 + w_v[window]
        both = np.concatenate([mask, mask], axis=-1)
        terms = jnp.where(both, jnp.concatenate([t1, t2], axis=-1), -jnp.inf)  # [m, 2 pad]
        weights = jnp.where(both, jnp.concatenate([w1, w2], axis=-1), 0.0)
        signs = np.concatenate([sign, sign], axis=-1)
        # K = t_top + log1p(sum of the other terms relative to the largest one, t_top). Summing A itself (~1)
        # would round it to an ulp of 1, a large part of K where K ~ 1e-5 in float32; the rest is summed to ulps
        # of its own, smaller size. The largest term is positive in exact arithmetic (each negative term of the
        # alternating tail is at most the positive term before it); where rounding says otherwise the series is
        # not used (inf: the caller keeps the chord).
        top = jnp.argmax(terms, axis=-1)
        is_top = jnp.arange(terms.shape[-1]) == top[:, None]
        t_top = jnp.max(terms, axis=-1)
        w_top = jnp.take_along_axis(weights, top[:, None], axis=-1)[:, 0]
        e = jnp.where(is_top, 0.0, signs * jnp.exp(terms - t_top[:, None]))
        rest = jnp.sum(e, axis=-1)
        ok = (jnp.take_along_axis(jnp.asarray(signs), top[:, None], axis=-1)[:, 0] > 0) & (rest > -1.0)
        k = jnp.where(ok, t_top + jnp.log1p(jnp.where(ok, rest, 0.0)), jnp.inf)
        # Error of K, first order: t_top's; each other term's relative error (its weight, the top's, the rounding of
        # the shift t - t_top, and the summation: at most n additions of ulps of partial sums bounded by the sum
        # of |e|), carried through log1p (derivative 1 / (1 + rest)); the final rounding of log1p and of the sum.
        n = float(2 * int(last[idx].max() + 1))
        shift = jnp.where(both, jnp.abs(terms - t_top[:, None]), 0.0)  # masked terms: 0, not 0 * inf
        spread = jnp.sum(jnp.abs(e) * (weights + w_top[:, None] + shift + n), axis=-1)
        err = eps * (w_top + jnp.abs(t_top) + jnp.abs(k) + spread / jnp.where(ok, 1.0 + rest, 1.0))
        parts.append(k)
        errs.append(jnp.where(ok, err, 0.0))
        order.append(idx)
    return unpermute(parts, order), unpermute(errs, order)
