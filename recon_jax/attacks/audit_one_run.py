r"""Privacy audits in one training run: m canaries, each included independently with probability 1/2.

The game (Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run", NeurIPS): the auditor
draws ``S_i`` in {in, out} uniformly and independently for m canaries, trains once on the data plus the included
canaries, scores every canary from the released model (or trajectory), and guesses "in" for the ``k+`` highest
scores, "out" for the ``k-`` lowest and abstains on the rest. With ``r = k+ + k-`` guesses of which ``v`` are
correct, a mechanism that is eps-DP with respect to adding or removing one canary makes the number of correct
guesses stochastically dominated by ``Binomial(r, e^eps / (1 + e^eps))`` (their Thm. 3.1), so

    p(eps) = P[Binomial(r, q) >= v],    q = e^eps / (1 + e^eps),

is a p-value for the hypothesis "the mechanism is eps-DP". For (eps, delta)-DP their Thm. 5.2 (the form their
Algorithm 2 evaluates) adds a term:

    p(eps, delta) = min(1, beta + 2 m delta max_{1 <= i <= v} (P[Binomial(r, q) >= v - i] - beta) / i),

with ``beta = p(eps)``. :func:`one_run_epsilon_lower_bound` returns the smallest eps that this test does not
reject at level ``1 - confidence``: the true eps is at least that with probability ``confidence``.

f-DP reading (Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in One Run", ICML 2025): for
mu-Gaussian DP their Algorithm 3 ("audit with cap", membership case of alphabet size 2) bounds the probability
of ``c`` or more correct guesses out of ``c'`` through the trade-off curve instead of through (eps, delta).
With ``R_i = E[C 1{C >= i}] / m`` and ``H_i = E[(c' - C) 1{C >= i}] / m`` (C the number of correct guesses), the
f-DP inequality applied to "guess on canary j, and at least i correct guesses among the others" gives
``H_i >= B^{-1}(R_{i+1})`` with ``B^{-1}(x) = Phi(Phi^{-1}(x) - mu)`` (the inverse of the blow-up function
``1 - f``), and ``R_i - R_{i+1} = i / (c' - i) (H_i - H_{i+1})`` since both differences count the runs with
exactly i correct guesses. Starting from ``R_c = tau c / m`` and ``H_c = tau (c' - c) / m`` (probability tau at
exactly c correct guesses) and taking the smallest values the constraints allow down to i = 0, the hypothesis
"P[C >= c] >= tau under mu-GDP" is impossible when ``R_0 + H_0 > c' / m`` (every run makes exactly c' guesses),
and mu-GDP is rejected at level tau. (This derivation is our sketch of why the algorithm holds; the tests check
that the recursion returns exactly the minimum of the convex program these constraints define, and that it
matches jax_privacy's implementation of the algorithm.) Rejection only gets easier as mu falls, so
:func:`one_run_mu_lower_bound` is the boundary mu; ``gdp_epsilon(mu, delta)`` reads it as epsilon under the
Gaussian trade-off shape. Only the membership case (alphabet size 2) is implemented.

Choosing ``(k+, k-)`` after looking at the scores is a search: :func:`one_run_audit` tries a list of guess counts
fixed in advance and corrects for it with a union (Bonferroni) bound, each count tested at level
``(1 - confidence) / N`` for N counts tried; the reported bound is the largest over the counts and holds with
probability ``confidence``. The (eps, delta) and the f-DP readings are two separate statements, each at
``confidence``.

Assumptions: canaries included independently with probability exactly 1/2 (drawn by the auditor, not chosen);
the guesses depend on the canaries' inclusion only through the mechanism's output (scores computed from the
released model, ties broken by canary index); DP with respect to adding or removing one canary (the rest of
the data fixed). Neither reading assumes anything about the score distributions; the f-DP reading's epsilon
(``eps_fdp``) assumes that the mechanism's trade-off curve is Gaussian.

Notation:

==============  ==================================================================
``m``           number of canaries (``num_canaries``)
``r``, ``c'``   number of guesses (``num_guesses`` = ``k+ + k-``)
``v``, ``c``    number of correct guesses (``num_correct``)
``q``           ``e^eps / (1 + e^eps)``, accuracy of eps-DP randomised response
``mu``          Gaussian-DP parameter
==============  ==================================================================
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import NamedTuple, Sequence

import numpy as np

from recon_jax.attacks.audit_gdp import gdp_epsilon

__all__ = [
    "one_run_p_value",
    "one_run_epsilon_lower_bound",
    "one_run_gdp_rejects",
    "one_run_mu_lower_bound",
    "default_guess_counts",
    "OneRunAudit",
    "one_run_audit",
]

_MU_MAX = 40.0  # the mu search's upper end: Phi(Phi^{-1}(x) - 40) is below 1e-300 unless x is 1 - 1e-300
_GRID = 65  # points of the coarse grid that brackets the first crossing of Steinke et al.'s p-value
_NORMAL = NormalDist()
_SQRT2 = math.sqrt(2.0)


def _check_counts(num_canaries, num_guesses, num_correct):
    vals = []
    for name, x in (("num_canaries", num_canaries), ("num_guesses", num_guesses), ("num_correct", num_correct)):
        if not (np.isscalar(x) or np.ndim(x) == 0) or not np.isfinite(float(x)) or float(x) != int(x):
            raise ValueError(f"{name} must be an integer, got {x}")
        vals.append(int(x))
    m, r, v = vals
    if not (m >= 1 and 0 <= v <= r <= m):
        raise ValueError(f"need 0 <= num_correct <= num_guesses <= num_canaries and num_canaries >= 1, got "
                         f"num_correct={v}, num_guesses={r}, num_canaries={m}")
    return m, r, v


def _check_confidence(confidence):
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _alpha(r, v, q):
    """``max_{1 <= i <= v} P[v - i <= Binomial(r, q) <= v - 1] / i`` for every q of a 1-D array, exactly.

    The partial sums ``S_i`` are accumulated from the pmf for i <= L only; for i > L,
    ``S_i / i <= (S_L + P[Binomial(r, q) <= v - L - 1]) / (L + 1)``, so once that is below the maximum found
    the maximum is final; otherwise L doubles (up to v).
    """
    from scipy import stats

    ell = min(v, 256)
    while True:
        below = np.arange(v - 1, v - ell - 1, -1)  # v - 1, ..., v - L
        ii = np.arange(1, ell + 1)
        s = np.cumsum(stats.binom.pmf(below[None, :], r, q[:, None]), axis=1)  # [len(q), L]: S_1, ..., S_L
        best = np.max(s / ii, axis=1)
        if ell == v:
            return best
        rest = (s[:, -1] + stats.binom.cdf(v - ell - 1, r, q)) / (ell + 1)
        if np.all(rest <= best):
            return best
        ell = min(2 * ell, v)


def _p_values(m, r, v, eps, delta):
    """Steinke et al.'s p-value at every eps of the 1-D array ``eps``."""
    from scipy import special, stats

    eps = np.asarray(eps, np.float64)
    if v == 0:
        return np.ones_like(eps)
    q = special.expit(eps)
    beta = stats.binom.sf(v - 1, r, q)
    if delta == 0:
        return beta
    return np.minimum(beta + 2.0 * m * delta * _alpha(r, v, q), 1.0)


def one_run_p_value(num_canaries: int, num_guesses: int, num_correct: int, eps, delta: float = 0.0) -> np.ndarray:
    r"""Steinke et al.'s p-value for "the mechanism is (eps, delta)-DP" after v correct guesses out of r.

    ``P[Binomial(r, q) >= v]`` with ``q = e^eps / (1 + e^eps)`` (Thm. 3.1) when ``delta = 0``; the Thm. 5.2 form
    ``beta + 2 m delta max_i (P[Binomial(r, q) >= v - i] - beta) / i`` otherwise (see the module docstring).
    Binomial tails from ``scipy.stats.binom`` (regularised incomplete beta: accurate far into the tail).

    Args:
      num_canaries: m >= 1 canaries in the run.
      num_guesses: r guesses made (0 <= r <= m).
      num_correct: v correct guesses (0 <= v <= r).
      eps: epsilon(s) >= 0, any shape.
      delta: in [0, 1].

    Returns:
      NumPy array of p-values in [0, 1], the shape of ``eps``.

    Raises:
      ValueError: for counts that are not integers with ``0 <= v <= r <= m``, negative or non-finite eps, or
        delta outside [0, 1].

    >>> round(float(one_run_p_value(100, 10, 10, 0.0)), 6)     # ten right coin flips: 2^-10
    0.000977
    """
    m, r, v = _check_counts(num_canaries, num_guesses, num_correct)
    eps = np.asarray(eps, np.float64)
    if not np.all((eps >= 0) & np.isfinite(eps)):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    if not 0 <= delta <= 1:
        raise ValueError(f"delta must be in [0, 1], got {delta}")
    return _p_values(m, r, v, eps.reshape(-1), float(delta)).reshape(eps.shape)


def _eps_bound_pure(r, v, level):
    """delta = 0: P[Binomial(r, q) >= v] = I_q(v, r - v + 1) increases in q; invert it exactly (betaincinv)."""
    from scipy import special

    r, v = np.asarray(r, np.float64), np.asarray(v, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = special.betaincinv(np.maximum(v, 1.0), r - v + 1.0, level)
        eps = np.log(q) - np.log1p(-q)
    return np.where((v > 0) & (q > 0.5), eps, 0.0)


def _eps_bound(m, r, v, delta, level):
    """Smallest eps the test does not reject at ``level`` (every smaller eps rejected)."""
    from scipy import optimize

    upper = float(_eps_bound_pure(r, v, level))  # p(eps, delta) >= p(eps, 0): the delta = 0 bound caps this one
    if delta == 0 or upper == 0.0:
        return upper
    grid = np.linspace(0.0, upper, _GRID)
    above = np.nonzero(_p_values(m, r, v, grid, delta) > level)[0]
    if above.size == 0:  # p(upper, delta) = p(upper, 0) = level: the delta term vanishes
        return upper
    j = int(above[0])
    if j == 0:
        return 0.0
    # The first crossing lies in (grid[j - 1], grid[j]]; p is continuous in eps.
    f = lambda e: float(_p_values(m, r, v, np.array([e]), delta)[0]) - level  # noqa: E731
    root = optimize.brentq(f, float(grid[j - 1]), float(grid[j]), xtol=1e-12, rtol=1e-12)
    lo = float(grid[j - 1])
    for k in range(60):  # step to a rejected point at or below the root (brentq's root may sit just above it)
        e = max(root - 1e-12 * 2.0 ** k, lo)
        if e == lo or f(e) <= 0:
            return e
    return lo


def one_run_epsilon_lower_bound(num_canaries: int, num_guesses: int, num_correct: int, delta: float = 0.0, *,
                                confidence: float = 0.95) -> float:
    r"""Steinke et al.'s epsilon lower bound from v correct guesses out of r, for ONE guess count fixed in advance.

    The smallest eps that :func:`one_run_p_value` does not reject at level ``1 - confidence``: every smaller eps
    is rejected, so the mechanism's true epsilon at ``delta`` is at least this with probability ``confidence``.
    With ``delta = 0`` the p-value is the regularised incomplete beta ``I_q(v, r - v + 1)``, increasing in q, and
    the bound is ``logit(q)`` for the q that solves ``I_q(v, r - v + 1) = 1 - confidence`` (``betaincinv``;
    0 when that q is at most 1/2). With ``delta > 0`` the p-value is at least the ``delta = 0`` one, so the bound
    lies below that; a 65-point grid on ``[0, bound(delta = 0)]`` brackets the first eps the test does not reject
    and Brent's method finds it to about 1e-12; the returned eps is one that is rejected (the conservative side).
    The p-value increased with eps in every case we sampled (300 random (m, r, v, delta)); if it ever did not,
    the first crossing is the valid, smaller, answer, found as long as no excursion above the level is narrower
    than the grid spacing.

    Args:
      num_canaries: m >= 1 canaries in the run.
      num_guesses: r guesses made (0 <= r <= m).
      num_correct: v correct guesses (0 <= v <= r).
      delta: in [0, 1).
      confidence: in (0, 1).

    Returns:
      The lower bound on epsilon (a float >= 0).

    Raises:
      ValueError: for counts that are not integers with ``0 <= v <= r <= m``, delta outside [0, 1) or
        confidence outside (0, 1).

    >>> round(one_run_epsilon_lower_bound(1000, 100, 90, 1e-5), 3)
    1.626
    """
    m, r, v = _check_counts(num_canaries, num_guesses, num_correct)
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    _check_confidence(confidence)
    return _eps_bound(m, r, v, float(delta), 1.0 - confidence)


def _fdp_margin(m, guesses, correct, mu, tau, stop_when_rejected=False):
    """``R_0 + H_0 - c' / m`` of Mahloujifar et al.'s Algorithm 3 (k = 2); > 0 means mu-GDP is rejected at tau.

    Scalar Python on purpose: the recursion is sequential in i, and per step a float loop (``NormalDist.inv_cdf``,
    Wichura's AS241 to about 1e-16, and ``math.erfc``) is ten times faster than NumPy calls on small arrays.
    """
    c, cp = int(correct), int(guesses)
    r, h, total = tau * c / m, tau * (cp - c) / m, cp / m
    for i in range(c - 1, -1, -1):
        # H_i >= max(H_{i+1}, B^{-1}(R_{i+1})) with B^{-1}(x) = Phi(Phi^{-1}(x) - mu).
        b = 1.0 if r >= 1.0 else 0.5 * math.erfc((mu - _NORMAL.inv_cdf(r)) / _SQRT2)
        if b <= h:
            break  # h (and so r) stays the same for every smaller i
        r = min(r + i / (cp - i) * (b - h), 1.0)  # R_i - R_{i+1} = i / (c' - i) (H_i - H_{i+1}); c' - i >= 1
        h = b
        if stop_when_rejected and r + h > total:
            break  # R_i + H_i only grows as i falls
    return r + h - total


def _mu_bound(m, guesses, correct, tau, floor=0.0):
    """Boundary mu of Algorithm 3 for one (c', c); ``floor`` if mu = floor is not rejected."""
    from scipy import optimize

    if correct == 0 or _fdp_margin(m, guesses, correct, floor, tau, True) <= 0:
        return floor
    if _fdp_margin(m, guesses, correct, _MU_MAX, tau, True) > 0:
        return _MU_MAX
    f = lambda mu: _fdp_margin(m, guesses, correct, mu, tau)  # noqa: E731  (decreasing in mu)
    root = optimize.brentq(f, floor, _MU_MAX, xtol=1e-10, rtol=1e-12)
    for k in range(60):  # step to a rejected mu at or below the root
        mu = max(root - 1e-10 * 2.0 ** k, floor)
        if mu == floor or f(mu) > 0:
            return mu
    return floor


def one_run_gdp_rejects(num_canaries: int, num_guesses: int, num_correct: int, mu, *,
                        confidence: float = 0.95) -> np.ndarray:
    r"""Whether Mahloujifar et al.'s Algorithm 3 rejects mu-GDP at level ``1 - confidence`` (ONE guess count).

    True when, under mu-GDP, ``num_correct`` or more correct guesses out of ``num_guesses`` would have
    probability below ``1 - confidence`` (see the module docstring for the recursion).

    Args:
      num_canaries: m >= 1 canaries in the run.
      num_guesses: c' guesses made (0 <= c' <= m).
      num_correct: c correct guesses (0 <= c <= c').
      mu: GDP parameter(s), finite and >= 0, any shape.
      confidence: in (0, 1).

    Returns:
      Boolean NumPy array of the shape of ``mu``.

    Raises:
      ValueError: for invalid counts, mu or confidence.

    >>> one_run_gdp_rejects(1000, 100, 95, [0.5, 0.75, 1.0]).tolist()   # the boundary is at mu = 0.787
    [True, True, False]
    """
    m, r, v = _check_counts(num_canaries, num_guesses, num_correct)
    _check_confidence(confidence)
    mu = np.asarray(mu, np.float64)
    if not np.all((mu >= 0) & np.isfinite(mu)):
        raise ValueError(f"mu must be finite and >= 0, got {mu}")
    tau = 1.0 - confidence
    return np.array([_fdp_margin(m, r, v, float(x), tau, True) > 0 for x in mu.reshape(-1)],
                    bool).reshape(mu.shape)


def one_run_mu_lower_bound(num_canaries: int, num_guesses: int, num_correct: int, *,
                           confidence: float = 0.95) -> float:
    r"""Mahloujifar et al.'s lower bound on mu (Gaussian DP) from c correct guesses out of c' (ONE guess count).

    The boundary of :func:`one_run_gdp_rejects`: every smaller mu is rejected at level ``1 - confidence``, so the
    smallest mu for which the mechanism is mu-GDP is at least this with probability ``confidence``. The margin
    ``R_0 + H_0 - c' / m`` is the least total probability of a convex program whose constraints
    ``H_i >= Phi(Phi^{-1}(R_{i+1}) - mu)`` tighten as mu falls, so it decreases in mu and Brent's method on
    [0, 40] finds the boundary to about 1e-10; the returned mu is one that is rejected (0 if none is).

    Args:
      num_canaries: m >= 1 canaries in the run.
      num_guesses: c' guesses made (0 <= c' <= m).
      num_correct: c correct guesses (0 <= c <= c').
      confidence: in (0, 1).

    Returns:
      The lower bound on mu (a float in [0, 40]).

    Raises:
      ValueError: for invalid counts or confidence.

    >>> round(one_run_mu_lower_bound(1000, 100, 90), 3)
    0.603
    """
    m, r, v = _check_counts(num_canaries, num_guesses, num_correct)
    _check_confidence(confidence)
    return float(_mu_bound(m, r, v, 1.0 - confidence))


def default_guess_counts(num_canaries: int) -> list[tuple[int, int]]:
    """Symmetric guess counts ``(k+, k-) = (ceil(r / 2), floor(r / 2))`` for r on a grid fixed before the run.

    r runs over ``round(m 2^(-j / 2))`` for j = 0, 1, ... down to 10 guesses (or m when m < 10): about
    ``2 log2(m / 10)`` counts, from guessing on every canary to guessing on the ten most extreme.

    Args:
      num_canaries: m >= 1.

    Returns:
      A list of ``(k_plus, k_minus)`` pairs, largest r first.

    Raises:
      ValueError: if num_canaries is not an integer >= 1.

    >>> default_guess_counts(40)
    [(20, 20), (14, 14), (10, 10), (7, 7), (5, 5)]
    """
    if float(num_canaries) != int(num_canaries) or int(num_canaries) < 1:
        raise ValueError(f"num_canaries must be an integer >= 1, got {num_canaries}")
    m = int(num_canaries)
    rs, j = [], 0
    while True:
        r = int(round(m * 2.0 ** (-j / 2)))
        if r < min(10, m):
            break
        if not rs or r != rs[-1]:
            rs.append(r)
        j += 1
    return [((r + 1) // 2, r // 2) for r in rs]


class OneRunAudit(NamedTuple):
    """Output of :func:`one_run_audit`.

    Attributes:
      eps_lower: Steinke et al.'s (eps, delta) lower bound, the largest over the guess counts tried (holds with
        probability ``confidence``, the union bound included). No assumption on the trade-off shape.
      eps_guesses: the ``(k_plus, k_minus)`` that gave it.
      eps_correct: its number of correct guesses.
      eps_ceiling: the largest ``eps_lower`` the counts tried could give (every guess correct), at this delta.
      mu_lower: Mahloujifar et al.'s lower bound on mu, the largest over the guess counts (same union bound).
      eps_fdp: ``gdp_epsilon(mu_lower, delta)``: a lower bound on epsilon only if the mechanism's trade-off curve
        is Gaussian.
      fdp_guesses: the ``(k_plus, k_minus)`` that gave ``mu_lower``.
      fdp_correct: its number of correct guesses.
      mu_ceiling: the largest ``mu_lower`` the counts tried could give (every guess correct).
      num_canaries: m.
      num_included: canaries included in the run.
      num_hypotheses: number of guess counts tried (the union bound's N).
      delta: the delta of ``eps_lower`` and ``eps_fdp``.
      confidence: the level of each of the two readings.
    """

    eps_lower: float
    eps_guesses: tuple[int, int]
    eps_correct: int
    eps_ceiling: float
    mu_lower: float
    eps_fdp: float
    fdp_guesses: tuple[int, int]
    fdp_correct: int
    mu_ceiling: float
    num_canaries: int
    num_included: int
    num_hypotheses: int
    delta: float
    confidence: float


def one_run_audit(scores, included, delta: float, *, confidence: float = 0.95,
                  guess_counts: Sequence[tuple[int, int]] | None = None) -> OneRunAudit:
    r"""One-run audit (Steinke et al. 2023) and its f-DP reading (Mahloujifar et al. 2024) from canary scores.

    For each ``(k+, k-)`` in ``guess_counts``: guess "in" for the k+ highest scores and "out" for the k- lowest
    (ties broken by canary index), count the correct guesses, and compute the (eps, delta) bound
    (:func:`one_run_epsilon_lower_bound`) and the mu bound (:func:`one_run_mu_lower_bound`) at level
    ``(1 - confidence) / N`` for the N counts tried (union bound); report the largest of each. See the module
    docstring for the method and its assumptions; in particular ``included`` must come from independent fair
    coins drawn before training, and ``guess_counts`` must be fixed before the scores are seen.

    Args:
      scores: ``[m]`` one score per canary from the single run (higher = "included").
      included: ``[m]`` booleans (or 0/1): whether each canary was in the training data.
      delta: in (0, 1).
      confidence: in (0, 1).
      guess_counts: ``(k_plus, k_minus)`` pairs of non-negative integers with ``1 <= k_plus + k_minus <= m``;
        default :func:`default_guess_counts`.

    Returns:
      A :class:`OneRunAudit`.

    Raises:
      ValueError: for mismatched or non-finite inputs, ``included`` not boolean, invalid guess counts, delta
        outside (0, 1) or confidence outside (0, 1).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> inc = rng.random(1000) < 0.5
    >>> a = one_run_audit(rng.normal(2.0 * inc, 1.0), inc, 1e-5)  # 2-GDP: eps = 10.0 at delta = 1e-5
    >>> round(a.eps_lower, 2), a.eps_guesses, round(a.mu_lower, 2), round(a.eps_fdp, 2)
    (3.29, (89, 88), 1.13, 5.02)
    """
    s = np.asarray(scores, np.float64).reshape(-1)
    inc = np.asarray(included).reshape(-1)
    if s.size < 1 or inc.shape != s.shape:
        raise ValueError(f"scores and included must be non-empty and of the same length, got {s.size} and "
                         f"{inc.size}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    if not (inc.dtype == bool or np.all((inc == 0) | (inc == 1))):
        raise ValueError("included must be boolean (or 0/1)")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    _check_confidence(confidence)
    m = s.size
    inc = inc.astype(bool)
    counts = default_guess_counts(m) if guess_counts is None else list(guess_counts)
    if not counts:
        raise ValueError("guess_counts must not be empty")
    kp = np.asarray([k[0] for k in counts])
    km = np.asarray([k[1] for k in counts])
    if (np.any(kp != np.round(kp)) or np.any(km != np.round(km)) or np.any(kp < 0) or np.any(km < 0)
            or np.any(kp + km < 1) or np.any(kp + km > m)):
        raise ValueError(f"guess_counts must be pairs of integers k_plus, k_minus >= 0 with 1 <= k_plus + k_minus <= "
                         f"{m} (the number of canaries), got {counts}")
    kp, km = kp.astype(np.int64), km.astype(np.int64)
    order = np.argsort(-s, kind="stable")  # highest first; ties by canary index
    hits_in = np.concatenate([[0], np.cumsum(inc[order])])  # correct "in" guesses among the k highest
    hits_out = np.concatenate([[0], np.cumsum(~inc[order][::-1])])  # correct "out" guesses among the k lowest
    guesses, correct = kp + km, hits_in[kp] + hits_out[km]
    level = (1.0 - confidence) / len(counts)
    ie, eps_lower = _best_eps(m, guesses, correct, float(delta), level)
    im, mu_lower = _best_mu(m, guesses, correct, level)
    eps_ceiling = _best_eps(m, guesses, guesses, float(delta), level)[1]
    mu_ceiling = _best_mu(m, guesses, guesses, level)[1]
    return OneRunAudit(
        eps_lower=eps_lower, eps_guesses=(int(kp[ie]), int(km[ie])), eps_correct=int(correct[ie]),
        eps_ceiling=eps_ceiling, mu_lower=mu_lower, eps_fdp=float(gdp_epsilon(mu_lower, delta)),
        fdp_guesses=(int(kp[im]), int(km[im])), fdp_correct=int(correct[im]), mu_ceiling=mu_ceiling,
        num_canaries=m, num_included=int(inc.sum()), num_hypotheses=len(counts), delta=float(delta),
        confidence=float(confidence))


def _best_eps(m, guesses, correct, delta, level):
    """Largest Steinke bound over the counts; the delta = 0 bound (closed form) caps each and prunes the search."""
    caps = _eps_bound_pure(guesses, correct, level)
    best_i, best = 0, 0.0
    for i in np.argsort(-caps, kind="stable"):
        if caps[i] <= best:
            break
        e = _eps_bound(m, int(guesses[i]), int(correct[i]), delta, level)
        if e > best:
            best_i, best = int(i), e
    return best_i, float(best)


def _best_mu(m, guesses, correct, level):
    """Largest Algorithm 3 bound over the counts: a count is refined only if it rejects the best mu so far."""
    order = np.argsort(-_eps_bound_pure(guesses, correct, level), kind="stable")  # likely winners first
    best_i, best = int(order[0]), 0.0
    for i in order:
        mu = _mu_bound(m, int(guesses[i]), int(correct[i]), level, floor=best)
        if mu > best:
            best_i, best = int(i), mu
    return best_i, float(best)
