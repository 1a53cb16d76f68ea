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
math is. Inputs are validated when concrete (``ValueError``); under ``jit`` invalid values give NaN (see
:mod:`recon_jax.bounds._validate`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy import special as jsp

from recon_jax.bounds import _validate as v
from recon_jax.special import gammainc as _gammainc

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


def baseline_kappa_uniform_ball(eta: ArrayLike, dim: ArrayLike, *, validate: bool = True) -> jax.Array:
    """Baseline kappa for the uniform prior on the unit ball of R^d with l2 error (Balle et al., Prop. 6).

    ``kappa = sup_z0 Vol(B_1 cap B_eta(z0)) / Vol(B_1) = min(eta, 1)^d`` (a ball of radius eta < 1 fits inside the
    unit ball; for eta >= 1 the ball around the origin covers it). Computed as ``exp(d log min(eta, 1))``.

    Args:
      eta: error threshold, > 0.
      dim: dimension d, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      kappa in (0, 1] (at least the dtype's smallest normal number: where ``eta^d`` underflows, that
      conservative upper bound is returned instead of 0).

    Raises:
      ValueError: ``eta <= 0`` or ``dim < 1``.

    Example:
      >>> round(float(baseline_kappa_uniform_ball(0.5, 3)), 6)
      0.125
    """
    v.check_positive("eta", eta, validate)
    v.check_at_least("dim", dim, 1, validate)
    ok = v.valid(eta, v.POSITIVE) & v.valid(dim, v.at_least(1))
    log_eta = v.log_positive(eta, v.as_float(eta).dtype)
    eta, dim = v.as_float(eta, dim)
    out = v.floor_tiny(jnp.exp(dim * jnp.minimum(log_eta, 0.0)))  # 0.5^200 underflows float32: smallest normal
    return v.nan_if(~ok, out)


def baseline_kappa_gaussian(eta: ArrayLike, sigma: ArrayLike, dim: ArrayLike, *, validate: bool = True) -> jax.Array:
    """Baseline kappa for the Gaussian prior N(w, sigma^2 I_d) with l2 error (Balle et al., proof of Prop. 7).

    Exact: the supremum is attained at z0 = w, so ``kappa = P[||Z|| <= eta / sigma] = P[chi^2_d <= eta^2/sigma^2]
    = P(d/2, eta^2 / (2 sigma^2))`` with P the regularised lower incomplete gamma function
    (:func:`recon_jax.special.gammainc`, accurate also for d up to 2e9, where both ``jax.scipy.special.gammainc``
    and ``scipy.special.gammainc`` lose accuracy in the lower tail).

    Args:
      eta: error threshold, > 0.
      sigma: prior standard deviation, > 0.
      dim: dimension d, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      kappa in [0, 1].

    Raises:
      ValueError: ``eta <= 0``, ``sigma <= 0`` or ``dim < 1``.

    Example:
      >>> round(float(baseline_kappa_gaussian(1.0, 1.0, 1)), 5)  # P[|N(0,1)| <= 1] = erf(1/sqrt(2))
      0.68269
    """
    v.check_positive("eta", eta, validate)
    v.check_positive("sigma", sigma, validate)
    v.check_at_least("dim", dim, 1, validate)
    eta, sigma, dim = v.as_float(eta, sigma, dim)
    ok = (eta > 0) & (sigma > 0) & (dim >= 1)
    ratio = jnp.where(ok, eta / sigma, 1.0)
    out = _gammainc(jnp.where(ok, dim, 1.0) / 2.0, 0.5 * ratio * ratio)
    return v.nan_if(~ok, out)


def baseline_kappa_gaussian_tail_bound(
    eta: ArrayLike, sigma: ArrayLike, dim: ArrayLike, *, validate: bool = True
) -> jax.Array:
    """The closed-form upper bound on the Gaussian-prior kappa used in Balle et al.'s proof of Prop. 7.

    ``kappa <= exp(d/2 (1 - t + log t))`` with ``t = eta^2 / (sigma^2 d)`` (chi-square lower-tail bound,
    Dasgupta & Gupta Lemma 2.2), valid for ``t <= 1``; for ``t > 1`` the bound exceeds 1 and 1 is returned.

    Args:
      eta: error threshold, > 0.
      sigma: prior standard deviation, > 0.
      dim: dimension d, >= 1.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      An upper bound on :func:`baseline_kappa_gaussian`, in (0, 1].

    Raises:
      ValueError: ``eta <= 0``, ``sigma <= 0`` or ``dim < 1``.

    Example:
      >>> float(baseline_kappa_gaussian_tail_bound(1.0, 1.0, 100)) < 1e-60
      True
    """
    v.check_positive("eta", eta, validate)
    v.check_positive("sigma", sigma, validate)
    v.check_at_least("dim", dim, 1, validate)
    eta, sigma, dim = v.as_float(eta, sigma, dim)
    ok = (eta > 0) & (sigma > 0) & (dim >= 1)
    # log t = 2 log(eta / sigma) - log d, kept in log space so that t never under/overflows.
    log_t = 2.0 * (jnp.log(jnp.where(ok, eta, 1.0)) - jnp.log(jnp.where(ok, sigma, 1.0))) - jnp.log(
        jnp.where(ok, dim, 1.0)
    )
    t = jnp.exp(jnp.minimum(log_t, 0.0))
    # 1 - t + log t = -(t - 1 - log t) <= 0; log1p form is accurate near t = 1.
    exponent = 0.5 * dim * (log_t - jnp.expm1(log_t))
    out = jnp.where(log_t >= 0, 1.0, jnp.exp(jnp.minimum(exponent, 0.0)))
    del t
    return v.nan_if(~ok, out)


def rero_from_dp(kappa: ArrayLike, eps: ArrayLike, *, validate: bool = True) -> jax.Array:
    """ReRo bound for an eps-DP mechanism: ``gamma = min(1, kappa e^eps)`` (Balle et al., Cor. 3).

    Args:
      kappa: baseline success probability, in (0, 1).
      eps: pure-DP epsilon, >= 0.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in (0, 1].

    Raises:
      ValueError: kappa outside (0, 1) or ``eps < 0``.

    Example:
      >>> round(float(rero_from_dp(0.01, 1.0)), 6)
      0.027183
    """
    v.check_open_unit("kappa", kappa, validate)
    v.check_nonnegative("eps", eps, validate)
    ok = v.valid(kappa, v.OPEN_UNIT) & v.valid(eps, v.NONNEGATIVE)  # judged before the float32 cast
    log_kappa = v.log_positive(kappa, v.as_float(kappa, eps)[0].dtype)  # float64 log: kappa = 1e-40 is 0 in float32
    kappa, eps = v.as_float(kappa, eps)
    out = v.floor_tiny(jnp.exp(jnp.minimum(jnp.where(ok, log_kappa, 0.0) + eps, 0.0)))
    return v.nan_if(~ok, out)


def rero_from_approx_dp(kappa: ArrayLike, eps: ArrayLike, delta: ArrayLike, *, validate: bool = True) -> jax.Array:
    """ReRo bound for an (eps, delta)-DP mechanism: ``gamma = min(1, kappa e^eps + delta)``.

    Not in Balle et al. (whose Cor. 3 is for pure DP) but follows the same two lines: for any attack R,
    ``P[l(Z, R(theta)) <= eta] <= e^eps E_{theta ~ M(D_z0)} P_Z[l(Z, R(theta)) <= eta] + delta <= e^eps kappa + delta``.
    Minimising over a mechanism's privacy profile (eps, delta(eps)) gives the tightest such bound.

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
    v.check_open_unit("kappa", kappa, validate)
    v.check_nonnegative("eps", eps, validate)
    v.check("delta", delta, lambda d: (d >= 0) & (d <= 1), "in [0, 1]", validate)
    ok = v.valid(kappa, v.OPEN_UNIT) & v.valid(eps, v.NONNEGATIVE) & v.valid(delta, v.UNIT)
    log_kappa = v.log_positive(kappa, v.as_float(kappa, eps, delta)[0].dtype)
    kappa, eps, delta = v.as_float(kappa, eps, delta)
    log_first = jnp.minimum(jnp.where(ok, log_kappa, 0.0) + eps, 0.0)
    out = v.floor_tiny(jnp.minimum(jnp.exp(log_first) + delta, 1.0))
    return v.nan_if(~ok, out)


def _check_order(order, validate):
    v.check("order", order, lambda a: a > 1, "> 1 (inf allowed)", validate)


def rero_from_rdp(kappa: ArrayLike, eps: ArrayLike, order: ArrayLike, *, validate: bool = True) -> jax.Array:
    """ReRo bound for an (alpha, eps)-RDP mechanism: ``gamma = (kappa e^eps)^((alpha-1)/alpha)`` (Balle et al., Thm. 2).

    Capped at 1 (the bound is trivial when ``kappa e^eps >= 1``). ``order = inf`` recovers :func:`rero_from_dp`.

    Args:
      kappa: baseline success probability, in (0, 1).
      eps: RDP epsilon at this order, >= 0.
      order: Renyi order alpha, > 1 (``inf`` allowed).
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in (0, 1].

    Raises:
      ValueError: kappa outside (0, 1), ``eps < 0`` or ``order <= 1``.

    Example:
      >>> round(float(rero_from_rdp(0.01, 1.0, 2.0)), 6)  # sqrt(0.01 e)
      0.164872
    """
    v.check_open_unit("kappa", kappa, validate)
    v.check_nonnegative("eps", eps, validate)
    _check_order(order, validate)
    ok = v.valid(kappa, v.OPEN_UNIT) & v.valid(eps, v.NONNEGATIVE) & v.valid(order, v.greater_than(1))
    log_kappa = v.log_positive(kappa, v.as_float(kappa, eps, order)[0].dtype)
    kappa, eps, order = v.as_float(kappa, eps, order)
    safe_order = jnp.where(ok & (order > 1), order, 2.0)  # order 1 + 1e-12 rounds to 1 in float32: exponent 0
    log_gamma = jnp.where(order > 1, 1.0 - 1.0 / safe_order, 0.0) * (jnp.where(ok, log_kappa, 0.0) + eps)
    out = v.floor_tiny(jnp.exp(jnp.minimum(log_gamma, 0.0)))
    return v.nan_if(~ok, out)


def rero_from_rdp_curve(kappa: ArrayLike, orders: ArrayLike, rdp: ArrayLike, *, validate: bool = True) -> jax.Array:
    """Theorem 2 of Balle et al. minimised over the orders of an RDP curve.

    ``gamma = min_i (kappa e^{rdp_i})^((alpha_i - 1)/alpha_i)``, the minimum over the last axis of ``orders``/``rdp``
    (which broadcast against each other; ``kappa`` broadcasts against the remaining leading axes).

    Args:
      kappa: baseline success probability, in (0, 1); shape ``[...]``.
      orders: Renyi orders, each > 1; shape ``[..., K]``.
      rdp: RDP epsilons at those orders, each >= 0 (``inf`` allowed: that order is then ignored); ``[..., K]``.
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in (0, 1], shape ``[...]``.

    Raises:
      ValueError: kappa outside (0, 1), an order <= 1 or a negative rdp value.

    Example:
      >>> import numpy as np
      >>> orders = np.array([1.5, 2.0, 4.0, 8.0])
      >>> round(float(rero_from_rdp_curve(1e-3, orders, orders / 2.0)), 5)  # Gaussian, sigma = 1; best order 4
      0.0252
    """
    v.check_open_unit("kappa", kappa, validate)
    _check_order(orders, validate)
    v.check_nonnegative("rdp", rdp, validate)
    kappa, orders, rdp = v.as_float(kappa, orders, rdp)
    orders, rdp = jnp.broadcast_arrays(orders, rdp)
    kappa_b = kappa[..., None]
    ok_k = (kappa > 0) & (kappa < 1)
    ok_curve = jnp.all((orders > 1) & (rdp >= 0), axis=-1)
    safe_orders = jnp.where(orders > 1, orders, 2.0)
    log_gamma = (1.0 - 1.0 / safe_orders) * (jnp.log(jnp.where(kappa_b > 0, kappa_b, 0.5)) + rdp)
    out = jnp.exp(jnp.minimum(jnp.min(log_gamma, axis=-1), 0.0))
    return v.nan_if(~(ok_k & ok_curve), out)


def rero_from_zcdp(kappa: ArrayLike, rho: ArrayLike, *, validate: bool = True) -> jax.Array:
    """ReRo bound for a rho-zCDP mechanism (Balle et al., Cor. 4).

    ``gamma = exp(-(sqrt(log(1/kappa)) - sqrt(rho))^2)`` if ``rho < log(1/kappa)``, else 1 (Theorem 2 with the best
    order ``alpha = sqrt(log(1/kappa) / rho)`` exists only when that order exceeds 1).

    Args:
      kappa: baseline success probability, in (0, 1).
      rho: zCDP parameter, >= 0 (a Gaussian mechanism with noise multiplier sigma over T steps has
        ``rho = T / (2 sigma^2)``).
      validate: raise ``ValueError`` on invalid concrete inputs (NaN under ``jit``).

    Returns:
      gamma in (0, 1].

    Raises:
      ValueError: kappa outside (0, 1) or ``rho < 0``.

    Example:
      >>> round(float(rero_from_zcdp(1e-3, 0.5)), 4)  # exp(-(sqrt(log 1000) - sqrt(0.5))^2)
      0.025
    """
    v.check_open_unit("kappa", kappa, validate)
    v.check_nonnegative("rho", rho, validate)
    kappa, rho = v.as_float(kappa, rho)
    ok = (kappa > 0) & (kappa < 1) & (rho >= 0)
    log_inv_kappa = -jnp.log(jnp.where(ok, kappa, 0.5))
    gap = jnp.sqrt(log_inv_kappa) - jnp.sqrt(jnp.where(ok, rho, 0.0))
    out = jnp.where(gap > 0, jnp.exp(-jnp.square(jnp.maximum(gap, 0.0))), 1.0)
    return v.nan_if(~ok, out)


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
    v.check_nonnegative("eps", eps, validate)
    v.check("gamma", gamma, lambda g: (g >= 0) & (g <= 1), "in [0, 1]", validate)
    eps, gamma = v.as_float(eps, gamma)
    ok = (eps >= 0) & (gamma >= 0) & (gamma <= 1)
    one_minus = 1.0 - gamma
    # (1 - gamma) e^eps in log space; gamma = 1 gives exactly 1.
    log_second = jnp.log(jnp.where(one_minus > 0, one_minus, 1.0)) + eps
    second = jnp.where(one_minus > 0, jnp.exp(jnp.minimum(log_second, 700.0)), 0.0)
    out = jnp.maximum(gamma - second, 0.0)
    return v.nan_if(~ok, out)


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
    v.check_open_unit("kappa", kappa, validate)
    v.check_nonnegative("mu", mu, validate)
    ok = v.valid(kappa, v.OPEN_UNIT) & v.valid(mu, v.NONNEGATIVE)  # judged before the float32 cast
    kappa, mu = v.as_float(kappa, mu)
    kappa = jnp.maximum(kappa, jnp.finfo(kappa.dtype).tiny)  # raising kappa (1e-40 flushes to 0) is conservative
    out = jsp.ndtr(jsp.ndtri(jnp.where(ok, kappa, 0.5)) + jnp.where(ok, mu, 0.0))
    out = v.floor_tiny(jnp.where(mu == jnp.inf, 1.0, out))
    return v.nan_if(~ok, out)
