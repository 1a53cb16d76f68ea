r"""Empirical privacy: Clopper-Pearson intervals and a high-confidence lower bound on epsilon from a distinguishing
game (privacy auditing, Jagielski et al. 2020; Nasr et al. 2021 and 2023).

The game: the mechanism is run ``n_1`` times *with* a canary record and ``n_0`` times *without* it; an adversary
outputs a score per run (here the white-box log-likelihood ratio of every released update,
:func:`recon_jax.attacks.prior_aware.prior_aware_game` with ``include_target`` 0/1). Any threshold test on the
score has a false-positive rate FPR (says "with" on a run without) and a false-negative rate FNR. An
(eps, delta)-DP mechanism (add/remove adjacency, so both directions) forces

    FPR + e^eps FNR >= 1 - delta   and   FNR + e^eps FPR >= 1 - delta,

so ``eps >= max(log((1 - delta - FPR) / FNR), log((1 - delta - FNR) / FPR))``. :func:`empirical_epsilon` chooses
the threshold on a calibration part of the runs (:func:`select_threshold`), bounds FPR and FNR on the remaining
runs from above with
one-sided Clopper-Pearson bounds at level ``1 - (1 - confidence) / 2`` each (a union bound makes both hold
together with probability ``confidence``), and plugs the upper bounds into the inequality. The result is a
lower bound on the mechanism's true epsilon at ``delta`` that holds with probability at least ``confidence``
over the runs; it can never certify more than about ``log(n / 3)`` with n evaluation runs per world.

Assumptions: the runs are independent; the canary and the threshold are fixed before the evaluation runs are
looked at (the calibration split guarantees the latter).

The Gaussian-DP reading of the same game, not capped by the run count (Nasr et al. 2023), is
:mod:`recon_jax.attacks.audit_gdp`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from recon_jax._validation import OPEN_UNIT, Range, check, check_integer

__all__ = [
    "calibration_split",
    "clopper_pearson",
    "clopper_pearson_upper",
    "EpsilonAudit",
    "empirical_epsilon",
    "empirical_epsilon_ceiling",
    "SELECTION_CONFIDENCE",
    "select_threshold",
]


def _check_counts(successes, trials):
    k, n = np.asarray(successes), np.asarray(trials)
    if not (np.all(np.isfinite(k)) and np.all(np.isfinite(n))) or np.any(n < 1) or np.any(k < 0) or np.any(k > n) or np.any(k != np.round(k)) or np.any(n != np.round(n)):
        raise ValueError(f"successes must be integers in [0, trials] and trials integers >= 1, got {successes}, "
                         f"{trials}")
    return k.astype(np.float64), n.astype(np.float64)


def _check_confidence(confidence):
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def clopper_pearson(successes, trials, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Clopper-Pearson (exact binomial) interval for a success probability.

    ``[B(a/2; k, n - k + 1), B(1 - a/2; k + 1, n - k)]`` with ``a = 1 - confidence`` and ``B`` the beta quantile
    (0 when ``k = 0``, 1 when ``k = n``). Host-side (SciPy); broadcasts.

    Args:
      successes: number of successes k (integers in [0, trials]).
      trials: number of trials n >= 1.
      confidence: coverage in (0, 1).

    Returns:
      ``(low, high)`` NumPy arrays.

    Raises:
      ValueError: for out-of-range counts or confidence.

    >>> lo, hi = clopper_pearson(0, 10)
    >>> float(lo), round(float(hi), 4)
    (0.0, 0.3085)
    """
    from scipy import stats

    _check_confidence(confidence)
    k, n = _check_counts(successes, trials)
    a = 1.0 - confidence
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, stats.beta.ppf(a / 2, k, n - k + 1), 0.0)
        hi = np.where(k < n, stats.beta.ppf(1 - a / 2, k + 1, n - k), 1.0)
    return lo, hi


def clopper_pearson_upper(successes, trials, confidence: float = 0.95) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound: ``B(confidence; k + 1, n - k)`` (1 when ``k = n``).

    >>> round(float(clopper_pearson_upper(0, 100, 0.95)), 5)   # 1 - 0.05^(1/100)
    0.02951
    """
    from scipy import stats

    _check_confidence(confidence)
    k, n = _check_counts(successes, trials)
    with np.errstate(invalid="ignore"):
        return np.where(k < n, stats.beta.ppf(confidence, k + 1, n - k), 1.0)


class EpsilonAudit(NamedTuple):
    """Output of :func:`empirical_epsilon`.

    Attributes:
      eps_lower: the lower bound on epsilon (>= 0) holding with probability ``confidence``.
      threshold: the score threshold (say "with canary" when ``score >= threshold``), chosen on the
        calibration runs.
      fpr, fnr: the evaluation runs' false-positive and false-negative rates at the threshold.
      fpr_upper, fnr_upper: their one-sided Clopper-Pearson upper bounds.
      num_eval_with, num_eval_without: evaluation runs per world.
    """

    eps_lower: float
    threshold: float
    fpr: float
    fnr: float
    fpr_upper: float
    fnr_upper: float
    num_eval_with: int
    num_eval_without: int


def _eps_from_rates(fpr, fnr, delta):
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1.0 - delta - fpr, 0.0)) - np.log(fnr)
        b = np.log(np.maximum(1.0 - delta - fnr, 0.0)) - np.log(fpr)
    return np.maximum(np.maximum(np.nan_to_num(a, nan=-np.inf), np.nan_to_num(b, nan=-np.inf)), 0.0)


def error_counts(with_sorted, without_sorted, thresholds):
    """(false positives, false negatives) of the tests "score >= threshold means with the canary", per threshold
    (scores sorted ascending). Shared with :mod:`recon_jax.attacks.audit_gdp`."""
    fnr_counts = np.searchsorted(with_sorted, thresholds, side="left")  # with-canary runs scored below threshold
    fpr_counts = without_sorted.size - np.searchsorted(without_sorted, thresholds, side="left")
    return fpr_counts, fnr_counts


SELECTION_CONFIDENCE = 0.99
"""Joint confidence of the Clopper-Pearson bounds with which :func:`select_threshold` scores thresholds on the
calibration runs, whatever confidence the audit reports. The choice does not affect validity (the evaluation runs
are untouched by it); it sets power. Fixed, so that an audit's threshold does not depend on the confidence asked
and its bound falls as the confidence rises. Stricter than 0.95, so that a threshold in a tail, where a few lucky
calibration runs make the 0.95 bound look large, loses to a central one. On Gaussian scores with mu = 0.3 and 1,504
evaluation runs per world (``tests/attacks/test_audit.py``, 40 seeds), choosing at 0.95 certified nothing in 11
audits, choosing at 0.99 in 6, and the mean bound rose from 0.152 to 0.183."""


def select_threshold(cal_with, cal_without, rates_to_bound) -> float:
    """The score threshold that maximises a Clopper-Pearson bound on the calibration runs.

    Every distinct calibration score (and ``+inf``, the test that never says "with") is a candidate. For each, the
    false-positive and false-negative counts of the calibration runs get one-sided Clopper-Pearson upper bounds at
    level ``1 - (1 - SELECTION_CONFIDENCE) / 2`` each, and ``rates_to_bound(fpr_upper, fnr_upper)`` scores them
    (NaN counts as -inf); the first best wins. Shared by :func:`empirical_epsilon` and the threshold reading of
    :func:`recon_jax.attacks.audit_gdp.gdp_mu_lower_bound`.

    Args:
      cal_with, cal_without: 1-D calibration scores of runs with and without the canary (each non-empty).
      rates_to_bound: vectorised ``(fpr_upper, fnr_upper) -> bound`` (higher is better).

    Returns:
      The threshold (say "with canary" when ``score >= threshold``).

    Raises:
      ValueError: naming the argument, if either set of scores is empty or not finite.

    >>> import numpy as np
    >>> select_threshold(np.array([2.0, 3.0]), np.array([0.0, 1.0]), lambda fp, fn: -(fp + fn))
    2.0
    """
    w, wo = (np.sort(np.asarray(a, np.float64).reshape(-1)) for a in (cal_with, cal_without))
    for name, a in (("cal_with", w), ("cal_without", wo)):
        if a.size == 0 or not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be a non-empty array of finite scores; got {a.size} scores")
    thresholds = np.unique(np.concatenate([w, wo, [np.inf]]))
    level = 1.0 - (1.0 - SELECTION_CONFIDENCE) / 2.0
    fp, fn = error_counts(w, wo, thresholds)
    score = rates_to_bound(clopper_pearson_upper(fp, wo.size, level), clopper_pearson_upper(fn, w.size, level))
    return float(thresholds[int(np.argmax(np.nan_to_num(score, nan=-np.inf)))])


_OPEN_UNIT = Range(OPEN_UNIT.predicate, "in (0, 1)")  # calibration_fraction


def calibration_split(runs_with: int, runs_without: int, calibration_fraction: float) -> tuple[int, int]:
    """How many runs of each world choose the threshold (the rest evaluate it): ``int(fraction * runs)`` each.

    Args:
      runs_with, runs_without: numbers of runs of each world (integers >= 0).
      calibration_fraction: in (0, 1), the share of each world's runs that calibrates.

    Raises:
      ValueError: naming the argument if a run count is not an integer >= 0 or ``calibration_fraction`` is not in
        (0, 1) (NaN included); if a world would have no calibration run or no evaluation run.

    >>> calibration_split(200, 200, 0.5)
    (100, 100)
    """
    runs_with = check_integer("runs_with", runs_with, 0)
    runs_without = check_integer("runs_without", runs_without, 0)
    if np.ndim(calibration_fraction) != 0:
        raise ValueError(f"calibration_fraction must be a number in (0, 1); got {calibration_fraction!r}")
    calibration_fraction = float(check("calibration_fraction", calibration_fraction, _OPEN_UNIT))
    c1, c0 = int(calibration_fraction * runs_with), int(calibration_fraction * runs_without)
    if min(c1, c0, runs_with - c1, runs_without - c0) < 1:
        raise ValueError(f"need at least one calibration and one evaluation run per world, got {runs_with} with and "
                         f"{runs_without} without the canary")
    return c1, c0


def empirical_epsilon(scores_with, scores_without, delta: float, *, confidence: float = 0.95,
                      calibration_fraction: float = 0.5) -> EpsilonAudit:
    """Lower bound on epsilon at ``delta`` from a distinguishing game (see the module docstring for the method).

    The first ``calibration_fraction`` of each world's runs (in the given order) choose the threshold: the one
    that maximises the same bound on those runs, with Clopper-Pearson bounds at the fixed
    :data:`SELECTION_CONFIDENCE` (:func:`select_threshold`). The remaining runs evaluate it at ``confidence``, so
    the bound falls as ``confidence`` rises.

    Args:
      scores_with: ``[n_1]`` adversary scores of runs with the canary (higher = "canary present").
      scores_without: ``[n_0]`` scores of runs without it.
      delta: in [0, 1).
      confidence: probability in (0, 1) with which the bound holds.
      calibration_fraction: in (0, 1), share of the runs used to pick the threshold.

    Returns:
      An :class:`EpsilonAudit`.

    Raises:
      ValueError: for out-of-range arguments, too few runs, or non-finite scores.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> audit = empirical_epsilon(rng.normal(2.0, 1.0, 4000), rng.normal(0.0, 1.0, 4000), 1e-5)
    >>> round(audit.eps_lower, 2)     # 2-GDP has eps = 10.0 at delta = 1e-5; 2,000 evaluation runs per world cap it
    4.11
    """
    s1 = np.asarray(scores_with, np.float64).reshape(-1)
    s0 = np.asarray(scores_without, np.float64).reshape(-1)
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    _check_confidence(confidence)
    if not 0 < calibration_fraction < 1:
        raise ValueError(f"calibration_fraction must be in (0, 1), got {calibration_fraction}")
    if not (np.all(np.isfinite(s1)) and np.all(np.isfinite(s0))):
        raise ValueError("scores_with and scores_without must be finite")
    c1, c0 = calibration_split(s1.size, s0.size, calibration_fraction)
    level = 1.0 - (1.0 - confidence) / 2.0

    t = select_threshold(s1[:c1], s0[:c0], lambda fpr_hi, fnr_hi: _eps_from_rates(fpr_hi, fnr_hi, delta))
    ev_w, ev_wo = s1[c1:], s0[c0:]
    fp, fn = error_counts(np.sort(ev_w), np.sort(ev_wo), np.asarray([t]))
    fpr_hi = clopper_pearson_upper(fp, ev_wo.size, level)
    fnr_hi = clopper_pearson_upper(fn, ev_w.size, level)
    eps = _eps_from_rates(fpr_hi, fnr_hi, delta)
    return EpsilonAudit(float(eps[0]), t, float(fp[0] / ev_wo.size), float(fn[0] / ev_w.size), float(fpr_hi[0]),
                        float(fnr_hi[0]), int(ev_w.size), int(ev_wo.size))


def empirical_epsilon_ceiling(num_with: int, num_without: int, delta: float, *, confidence: float = 0.95,
                              calibration_fraction: float = 0.5) -> float:
    """The largest ``eps_lower`` :func:`empirical_epsilon` can return with these run counts, whatever the mechanism.

    A perfect separation of the evaluation runs (no false positive, no false negative) gives the smallest
    one-sided Clopper-Pearson upper bounds, ``1 - (1 - level)^(1 / n)`` with ``level = 1 - (1 - confidence) / 2``
    and n the evaluation runs of that world, and the bound decreases in both rates; so this is the statistical
    ceiling of the (eps, delta) audit for the run count (about ``log(n / 3)`` at ``confidence = 0.95``).

    Args:
      num_with: runs with the canary (calibration and evaluation together), an integer >= 2.
      num_without: runs without it, an integer >= 2.
      delta: in [0, 1).
      confidence: in (0, 1), as in :func:`empirical_epsilon`.
      calibration_fraction: in (0, 1), as in :func:`empirical_epsilon`.

    Returns:
      The ceiling on epsilon (a float >= 0).

    Raises:
      ValueError: for out-of-range arguments or run counts that leave a world without calibration or evaluation
        runs.

    >>> round(empirical_epsilon_ceiling(1000, 1000, 1e-5), 3)   # 500 evaluation runs per world
    4.906
    """
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    _check_confidence(confidence)
    if not 0 < calibration_fraction < 1:
        raise ValueError(f"calibration_fraction must be in (0, 1), got {calibration_fraction}")
    counts = []
    for name, n in (("num_with", num_with), ("num_without", num_without)):
        if not (float(n) == int(n) and int(n) >= 2):
            raise ValueError(f"{name} must be an integer >= 2, got {n}")
        c = int(calibration_fraction * int(n))
        if min(c, int(n) - c) < 1:
            raise ValueError(f"{name}={n} leaves no calibration or no evaluation run at calibration_fraction="
                             f"{calibration_fraction}")
        counts.append(int(n) - c)
    level = 1.0 - (1.0 - confidence) / 2.0
    fnr_hi = clopper_pearson_upper(0, counts[0], level)
    fpr_hi = clopper_pearson_upper(0, counts[1], level)
    return float(_eps_from_rates(fpr_hi, fnr_hi, delta))
