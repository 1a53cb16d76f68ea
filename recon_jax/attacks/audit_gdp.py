r"""Gaussian-DP reading of the multi-run audit (Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini & Terzis
2023, "Tight Auditing of Differentially Private Machine Learning"). The rigorous (eps, delta) bound of :mod:`recon_jax.attacks.audit` reads one
point of the trade-off curve and is capped by its Clopper-Pearson intervals: with n evaluation runs per world it
cannot exceed :func:`~recon_jax.attacks.audit.empirical_epsilon_ceiling`, whatever the mechanism. Nasr et al. instead read the whole curve as mu-Gaussian
DP (mu-GDP: no test has ``FNR < Phi(Phi^{-1}(1 - FPR) - mu)``; Dong, Roth & Su 2022), bound mu from below and
convert with the exact GDP formula. :func:`gaussian_dp_audit` does this; its ``eps_lower`` is a lower bound on
epsilon only if the mechanism's trade-off curve has the Gaussian shape (true for the full-batch Gaussian mechanism
and DP-GD with a white-box gradient canary; for Poisson-subsampled DP-SGD the curve is not Gaussian and the
reading is an approximation), which is why the result carries the rigorous bound and its ceiling beside it.

Notation:

==============  ==================================================================
``mu``          Gaussian-DP parameter (the separation of N(0, 1) and N(mu, 1))
``eps, delta``  approximate-DP parameters
``n_1, n_0``    runs with and without the canary
``Phi``         standard normal CDF
==============  ==================================================================
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from recon_jax._validation import OPEN_UNIT, check
from recon_jax.attacks.audit import (calibration_split, clopper_pearson_upper, empirical_epsilon,
                                      empirical_epsilon_ceiling, error_counts, select_threshold)

__all__ = ["gdp_delta", "gdp_epsilon", "gdp_mu_lower_bound", "GaussianDPAudit", "gaussian_dp_audit"]


def _check_mu(mu):
    mu = np.asarray(mu, np.float64)
    if not np.all((mu >= 0) & np.isfinite(mu)):
        raise ValueError(f"mu must be finite and >= 0, got {mu}")
    return mu


def _log_gdp_delta(mu, eps):
    # log delta(eps) for mu > 0: delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = Phi(a) (1 - exp(lb - la)),
    # in log space so that neither term overflows (e^eps) nor cancels (both close to 1 for small eps), and so that
    # a delta below the smallest double (eps large) keeps its log.
    from scipy import special

    with np.errstate(divide="ignore", invalid="ignore"):
        la = special.log_ndtr(-eps / mu + mu / 2)
        lb = eps + special.log_ndtr(-eps / mu - mu / 2)
        return la + np.log(-np.expm1(np.minimum(lb - la, 0.0)))


def _gdp_delta(mu, eps):
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.exp(_log_gdp_delta(mu, eps))
    return np.where(mu > 0, np.clip(d, 0.0, 1.0), 0.0)


def gdp_delta(mu, eps) -> np.ndarray:
    r"""The exact delta(eps) of mu-Gaussian DP (Dong, Roth & Su 2022, Cor. 2.13); broadcasts.

    ``delta(eps) = Phi(-eps / mu + mu / 2) - e^eps Phi(-eps / mu - mu / 2)``, evaluated in log space. mu-GDP is
    (eps, delta(eps))-DP for every eps >= 0, and no smaller delta holds for the Gaussian mechanism.

    Args:
      mu: GDP parameter, finite and >= 0 (``mu = 0`` gives delta = 0).
      eps: epsilon, finite and >= 0.

    Returns:
      NumPy array of delta in [0, 1].

    Raises:
      ValueError: if mu or eps is negative or not finite.

    >>> round(float(gdp_delta(1.0, 0.0)), 6)    # 2 Phi(1/2) - 1
    0.382925
    """
    mu = _check_mu(mu)
    eps = np.asarray(eps, np.float64)
    if not np.all((eps >= 0) & np.isfinite(eps)):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    mu, eps = np.broadcast_arrays(mu, eps)
    return _gdp_delta(mu, eps)


def gdp_epsilon(mu, delta) -> np.ndarray:
    r"""The exact epsilon of mu-Gaussian DP at ``delta``: the root of :func:`gdp_delta` ``(mu, eps) = delta``.

    delta(eps) decreases from ``2 Phi(mu / 2) - 1`` at eps = 0 to 0; the root is bracketed by
    ``[0, mu (mu / 2 - Phi^{-1}(delta))]`` (there delta(eps) <= Phi(-eps / mu + mu / 2) = delta) and found by
    Brent's method on ``log delta(eps) - log delta`` to about 1e-12 relative. Epsilon is 0 when ``delta`` is at
    least ``delta(0)``. Host-side (SciPy); broadcasts.

    Args:
      mu: GDP parameter, finite and >= 0.
      delta: in (0, 1).

    Returns:
      NumPy array of epsilon >= 0.

    Raises:
      ValueError: if mu is negative or not finite, or delta is outside (0, 1).

    >>> round(float(gdp_epsilon(1.0, 1e-5)), 4)
    4.3772
    """
    from scipy import optimize, special

    mu = _check_mu(mu)
    delta = np.asarray(delta, np.float64)
    if not np.all((delta > 0) & (delta < 1)):
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    mu, delta = np.broadcast_arrays(mu, delta)
    out = np.zeros(mu.shape)
    for idx in np.ndindex(mu.shape):
        m, d = float(mu[idx]), float(delta[idx])
        if m == 0.0 or _gdp_delta(m, 0.0) <= d:
            continue
        hi = m * (m / 2 - special.ndtri(d))
        log_d = np.log(d)
        f = lambda e: float(_log_gdp_delta(m, e)) - log_d  # noqa: E731
        out[idx] = optimize.brentq(f, 0.0, hi, xtol=1e-13, rtol=4 * np.finfo(float).eps, maxiter=200)
    return out


def _check_scores(scores_with, scores_without, min_runs=2):
    s1 = np.asarray(scores_with, np.float64).reshape(-1)
    s0 = np.asarray(scores_without, np.float64).reshape(-1)
    if not (np.all(np.isfinite(s1)) and np.all(np.isfinite(s0))):
        raise ValueError("scores_with and scores_without must be finite")
    if min(s1.size, s0.size) < min_runs:
        raise ValueError(f"scores_with and scores_without need at least {min_runs} runs each, got {s1.size} and "
                         f"{s0.size}")
    return s1, s0


def _mu_from_rates(fpr, fnr):
    # The mu of the Gaussian trade-off curve through (FPR, FNR): Phi^{-1}(1 - FPR) - Phi^{-1}(FNR).
    from scipy import special

    with np.errstate(invalid="ignore"):
        return special.ndtri(1.0 - np.asarray(fpr, np.float64)) - special.ndtri(np.asarray(fnr, np.float64))


def _mu_lower_gaussian(s1, s0, confidence):
    """Exact one-sided lower confidence bound on the standardised mean difference (noncentral t)."""
    from scipy import optimize, special, stats

    n1, n0 = s1.size, s0.size
    df = n1 + n0 - 2
    pooled = np.sqrt(((n1 - 1) * s1.var(ddof=1) + (n0 - 1) * s0.var(ddof=1)) / df)
    if not pooled > 0:
        raise ValueError("scores_with and scores_without have zero variance; the Gaussian model does not apply "
                         "(use method='threshold')")
    scale = np.sqrt(1.0 / n1 + 1.0 / n0)
    diff = float(s1.mean() - s0.mean())
    t = diff / (pooled * scale)
    # T = (mean difference) / (pooled sd * scale) ~ noncentral t(df, lam) with lam = mu / scale; P_lam[T <= t] falls
    # as lam grows, so the lower bound is the lam with P_lam[T >= t] = 1 - confidence.
    g = lambda lam: stats.nct.cdf(t, df, lam) - confidence  # noqa: E731
    width = np.sqrt(1.0 + t * t / (2.0 * df))  # standard deviation of T around lam (normal approximation)
    centre = t - special.ndtri(confidence) * width
    lo, hi, step = centre - 2.0 * width, centre + 2.0 * width, 2.0 * width
    for _ in range(60):
        if g(lo) > 0:
            break
        lo -= step
        step *= 2.0
    step = 2.0 * width
    for _ in range(60):
        if g(hi) < 0:
            break
        hi += step
        step *= 2.0
    if not (g(lo) > 0 > g(hi)):
        raise ValueError(f"the noncentral t bound could not be bracketed (t = {t}, df = {df})")
    lam = optimize.brentq(g, lo, hi, xtol=1e-10, rtol=1e-12, maxiter=200)
    return max(float(lam * scale), 0.0), float(diff / pooled)


def _mu_lower_threshold(s1, s0, confidence, calibration_fraction):
    """Clopper-Pearson reading of one threshold's (FPR, FNR) as mu, threshold chosen on a calibration split."""
    c1, c0 = calibration_split(s1.size, s0.size, calibration_fraction)
    level = 1.0 - (1.0 - confidence) / 2.0

    t = np.asarray([select_threshold(s1[:c1], s0[:c0], _mu_from_rates)])
    ev_w, ev_wo = s1[c1:], s0[c0:]
    fp, fn = error_counts(np.sort(ev_w), np.sort(ev_wo), t)
    mu_lo = _mu_from_rates(clopper_pearson_upper(fp, ev_wo.size, level), clopper_pearson_upper(fn, ev_w.size, level))
    # Point estimate: the evaluation rates, kept inside [1 / (2 n), 1 - 1 / (2 n)] so that it stays finite.
    fpr = np.clip(fp[0] / ev_wo.size, 0.5 / ev_wo.size, 1 - 0.5 / ev_wo.size)
    fnr = np.clip(fn[0] / ev_w.size, 0.5 / ev_w.size, 1 - 0.5 / ev_w.size)
    mu_lo = float(np.nan_to_num(mu_lo[0], nan=0.0))
    return max(mu_lo, 0.0), float(_mu_from_rates(fpr, fnr))


def gdp_mu_lower_bound(scores_with, scores_without, *, confidence: float = 0.95, method: str = "gaussian",
                       calibration_fraction: float = 0.5) -> tuple[float, float]:
    r"""Lower confidence bound on the Gaussian-DP parameter mu from the scores of a distinguishing game.

    Higher scores must mean "canary present". Two methods:

    - ``"gaussian"`` (Nasr et al. 2023's reading, parametric): assumes the scores of the two worlds are normal with
      a common variance, ``N(m_0, s^2)`` without and ``N(m_1, s^2)`` with the canary, so that the trade-off curve
      of every threshold test is exactly mu-GDP with ``mu = (m_1 - m_0) / s``. The statistic
      ``t = (mean_1 - mean_0) / (s_pooled sqrt(1 / n_1 + 1 / n_0))`` is then noncentral-t distributed with
      ``n_1 + n_0 - 2`` degrees of freedom and noncentrality ``mu / sqrt(1 / n_1 + 1 / n_0)``, and inverting its
      CDF gives an exact one-sided lower bound (exact coverage under the model; no bootstrap, no asymptotics).
      The point estimate is Cohen's d, ``(mean_1 - mean_0) / s_pooled``. Compare the two sample standard
      deviations (:class:`GaussianDPAudit` reports them): unequal variances break the equal-variance model.
    - ``"threshold"`` (non-parametric in the scores): one threshold, chosen on the first ``calibration_fraction``
      of each world's runs (:func:`~recon_jax.attacks.audit.select_threshold`), is evaluated on the rest;
      one-sided Clopper-Pearson upper bounds on its FPR and FNR at level ``1 - (1 - confidence) / 2`` each give
      ``mu_lower = Phi^{-1}(1 - FPR_up) - Phi^{-1}(FNR_up)``. A
      mu-GDP mechanism has ``FNR >= Phi(Phi^{-1}(1 - FPR) - mu)`` for every test, so this bounds the smallest mu
      for which the mechanism is mu-GDP whatever the score distributions, but like :func:`empirical_epsilon` it
      is capped by the run count. The point estimate reads the evaluation rates (kept inside
      ``[1 / (2 n), 1 - 1 / (2 n)]``).

    Both assume independent runs and a canary fixed before the runs. The bound holds with probability
    ``confidence`` over the runs.

    Args:
      scores_with: ``[n_1]`` scores of runs with the canary.
      scores_without: ``[n_0]`` scores of runs without it.
      confidence: in (0, 1).
      method: ``"gaussian"`` or ``"threshold"``.
      calibration_fraction: in (0, 1); used by ``"threshold"`` only.

    Returns:
      ``(mu_lower, mu_hat)``: the lower bound (clipped at 0, since mu >= 0) and the point estimate (floats).

    Raises:
      ValueError: for an unknown method, out-of-range confidence or calibration_fraction, fewer than 2 runs per
        world, non-finite scores, or (``"gaussian"``) scores with zero variance.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> lo, hat = gdp_mu_lower_bound(rng.normal(1.0, 1.0, 1000), rng.normal(0.0, 1.0, 1000))
    >>> round(lo, 3), round(hat, 3)
    (0.882, 0.96)
    """
    if method not in ("gaussian", "threshold"):
        raise ValueError(f"method must be 'gaussian' or 'threshold', got {method!r}")
    check("confidence", confidence, OPEN_UNIT)
    if not 0 < calibration_fraction < 1:
        raise ValueError(f"calibration_fraction must be in (0, 1), got {calibration_fraction}")
    s1, s0 = _check_scores(scores_with, scores_without)
    if method == "gaussian":
        return _mu_lower_gaussian(s1, s0, confidence)
    return _mu_lower_threshold(s1, s0, confidence, calibration_fraction)


class GaussianDPAudit(NamedTuple):
    """Output of :func:`gaussian_dp_audit`.

    Attributes:
      mu_lower: lower confidence bound on mu (>= 0), see :func:`gdp_mu_lower_bound`.
      mu_hat: the point estimate of mu.
      eps_lower: ``gdp_epsilon(mu_lower, delta)``; a lower bound on epsilon ONLY IF the mechanism's trade-off
        curve is Gaussian (mu-GDP exactly).
      eps_hat: ``gdp_epsilon(max(mu_hat, 0), delta)``, the same reading of the point estimate.
      eps_rigorous: :func:`empirical_epsilon`'s (eps, delta) lower bound on the same scores (no shape assumption).
      eps_rigorous_ceiling: :func:`empirical_epsilon_ceiling` for these run counts: what a perfect separation
        would give ``eps_rigorous``.
      std_with, std_without: sample standard deviations of the two worlds' scores (the ``"gaussian"`` method
        assumes they are equal).
      num_with, num_without: runs per world.
      method: the mu method used.
      confidence: the level of each of ``mu_lower`` and ``eps_rigorous`` (separately; together at least
        ``2 confidence - 1``).
    """

    mu_lower: float
    mu_hat: float
    eps_lower: float
    eps_hat: float
    eps_rigorous: float
    eps_rigorous_ceiling: float
    std_with: float
    std_without: float
    num_with: int
    num_without: int
    method: str
    confidence: float


def gaussian_dp_audit(scores_with, scores_without, delta: float, *, confidence: float = 0.95,
                      method: str = "gaussian", calibration_fraction: float = 0.5) -> GaussianDPAudit:
    r"""Multi-run white-box audit read as Gaussian DP (Nasr et al. 2023), beside the rigorous (eps, delta) audit.

    From the scores of runs with and without the canary: a lower confidence bound on mu
    (:func:`gdp_mu_lower_bound`), its epsilon at ``delta`` through the exact GDP conversion (:func:`gdp_epsilon`),
    and, for comparison, the (eps, delta) bound of :func:`empirical_epsilon` and its ceiling for the run count
    (:func:`empirical_epsilon_ceiling`).

    Assumptions: independent runs; a canary (and, for the threshold parts, the calibration split) fixed before
    the evaluation runs are looked at; ``eps_lower`` and ``eps_hat`` additionally assume that the mechanism's
    trade-off curve is exactly Gaussian (mu-GDP). That holds for the Gaussian mechanism and for full-batch DP-GD
    with a white-box score on a full-norm gradient canary; for Poisson-subsampled DP-SGD the curve is not
    Gaussian, and ``eps_lower`` is then a reading, not a bound. ``method="gaussian"`` further assumes normal scores
    with equal variances in the two worlds (compare ``std_with`` and ``std_without``).

    Args:
      scores_with: ``[n_1]`` scores of runs with the canary (higher = "canary present").
      scores_without: ``[n_0]`` scores of runs without it.
      delta: in (0, 1).
      confidence: in (0, 1); each of ``mu_lower`` and ``eps_rigorous`` holds with this probability.
      method: ``"gaussian"`` (default) or ``"threshold"``, see :func:`gdp_mu_lower_bound`.
      calibration_fraction: in (0, 1), the calibration share of the threshold-based parts.

    Returns:
      A :class:`GaussianDPAudit`.

    Raises:
      ValueError: for out-of-range arguments, too few runs, non-finite scores or zero-variance scores.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> a = gaussian_dp_audit(rng.normal(1.0, 1.0, 1000), rng.normal(0.0, 1.0, 1000), 1e-5)
    >>> round(a.mu_lower, 3), round(a.eps_lower, 2), round(a.eps_rigorous, 2), round(a.eps_rigorous_ceiling, 2)
    (0.882, 3.79, 1.23, 4.91)
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    mu_lower, mu_hat = gdp_mu_lower_bound(scores_with, scores_without, confidence=confidence, method=method,
                                          calibration_fraction=calibration_fraction)
    s1, s0 = _check_scores(scores_with, scores_without)
    rigorous = empirical_epsilon(s1, s0, delta, confidence=confidence, calibration_fraction=calibration_fraction)
    ceiling = empirical_epsilon_ceiling(s1.size, s0.size, delta, confidence=confidence,
                                        calibration_fraction=calibration_fraction)
    return GaussianDPAudit(
        mu_lower=float(mu_lower), mu_hat=float(mu_hat), eps_lower=float(gdp_epsilon(mu_lower, delta)),
        eps_hat=float(gdp_epsilon(max(mu_hat, 0.0), delta)), eps_rigorous=rigorous.eps_lower,
        eps_rigorous_ceiling=ceiling, std_with=float(s1.std(ddof=1)), std_without=float(s0.std(ddof=1)),
        num_with=int(s1.size), num_without=int(s0.size), method=method, confidence=float(confidence))
