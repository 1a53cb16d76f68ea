r"""The trade-off curve of a discretised privacy profile (for :func:`recon_jax.accounting.dpsgd.pld_tradeoff`).

| symbol | meaning |
|---|---|
| ``l_i``, ``p_i`` | the losses of one direction of a discretised PLD (sorted) and their probabilities |
| ``inf_mass`` | the PLD's mass at an infinite loss |
| ``delta(eps)`` | the privacy profile, ``inf_mass + sum_{l_i > eps} p_i (1 - e^{eps - l_i})`` |
| ``alpha``, ``f(alpha)`` | a type-I error and the trade-off curve's lower bound there |

``f(alpha) = sup_eps max(1 - delta(eps) - e^eps alpha, e^-eps (1 - delta(eps) - alpha))`` (Dong, Roth and Su 2022,
Prop. 2.12). Each term is a supremum of lines ``y_k - alpha x_k`` over the points ``(x_k, y_k) = (e^eps, 1 - delta)``
(and ``(e^-eps, e^-eps (1 - delta))``), attained on their upper concave hull. Two things broke a binary search on the
raw points' chord slopes where ``mu = sqrt(steps) / sigma`` is large (sigma = 0.03, q = 1; sigma = 1, q = 1, 1000
steps): ``1 - delta`` from ``delta`` is 0 up to the rounding of the cumulative sums (~1e-12 over 1e6 losses) for
every eps up to ~300, a flat run before the curve rises, which is not concave; and where ``1 - delta`` is ~1e-9 that
rounding put it above the exact curve. Here ``1 - delta`` is also computed as sums of non-negative terms
(:func:`profile_at_losses` with ``complement``), accurate relative to its own size, and the supremum is taken over
the exact hull of those points (:func:`upper_hull`).
"""

from __future__ import annotations

import math

import numpy as np

_CHUNK = 1 << 16
EXP_SAFE = 700.0  # e^x is finite and e^-x a normal float64 for |x| <= 700 (overflow past ~709.78)


def _below(losses, probs, eps, first_above) -> np.ndarray:
    """sum_{l_i > eps} p_i e^{eps - l_i} at sorted ``eps``, by reverse cumulative sums (in logs past a range of 700)."""
    shift = losses.max()
    if shift - losses.min() <= EXP_SAFE:  # e^{shift - l} <= e^{l_max - l_min} is finite
        tail_q = np.concatenate([np.cumsum((probs * np.exp(shift - losses))[::-1])[::-1], [0.0]])
        return np.exp(eps - shift) * tail_q[first_above]
    # a loss range past ~709 (tiny sigma, many steps): the same sums in logs, sum_{l_i > eps} p_i e^{eps - l_i}
    with np.errstate(divide="ignore"):  # log 0 = -inf for empty bins, as intended
        log_w = np.log(probs) - losses
    log_tail_q = np.concatenate([np.logaddexp.accumulate(log_w[::-1])[::-1], [-np.inf]])
    return np.exp(np.minimum(eps + log_tail_q[first_above], 0.0))  # <= sum p_i <= 1 (l_i > eps)


def profile_at_losses(losses, probs, inf_mass, eps, complement: bool = False):
    """delta(eps) = inf_mass + sum_{l_i > eps} p_i (1 - e^{eps - l_i}) at sorted ``eps``, by reverse cumulative sums.

    With ``complement``, also ``1 - delta(eps) = sum_{l_i <= eps} p_i + sum_{l_i > eps} p_i e^{eps - l_i} -
    (sum_i p_i + inf_mass - 1)``: the two sums have non-negative terms, accurate relative to their own size where
    ``1 - delta`` is tiny, where ``1 - delta`` from ``delta`` is the rounding of sums of size 1; the last term (the
    PLD's mass above 1, ~1e-9 to 1e-7 after a pessimistic composition) is summed by ``math.fsum`` per chunk of
    65,536 losses (to ~1e-16 per chunk).
    """
    tail_p = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
    first_above = np.searchsorted(losses, eps, side="right")
    below = _below(losses, probs, eps, first_above)
    delta = np.clip(inf_mass + tail_p[first_above] - below, inf_mass, 1.0)
    if not complement:
        return delta
    head = np.concatenate([[0.0], np.cumsum(probs)])[first_above]
    chunks = range(0, probs.size, _CHUNK)  # fsum per chunk: a Python float per loss for a chunk only
    excess = math.fsum([math.fsum(probs[i:i + _CHUNK].tolist()) for i in chunks] + [inf_mass, -1.0])
    return delta, np.clip(head + below - excess, 0.0, 1.0 - inf_mass)


def upper_envelope(xs: np.ndarray, ys: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """max_k (ys[k] - alpha xs[k]) for points sorted by increasing xs with ys concave in xs (vertices of the hull).

    The maximiser moves monotonically with alpha, so it is found by a binary search on the chord slopes; the two
    neighbours are also tried, so rounding that breaks concavity by 1 ulp cannot lose the maximum.
    """
    slopes = np.diff(ys) / np.diff(xs)  # decreasing along k for a concave sequence
    k = np.searchsorted(-slopes, -alphas, side="left")  # first chord with slope <= alpha
    best = np.full(alphas.shape, -np.inf)
    for off in (-1, 0, 1):
        kk = np.clip(k + off, 0, xs.size - 1)
        best = np.maximum(best, ys[kk] - alphas * xs[kk])
    return best


def _below_chord(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """For each interior point, whether it lies on or below the chord of its two neighbours (x increasing)."""
    return (y[1:-1] - y[:-2]) * (x[2:] - x[:-2]) <= (y[2:] - y[:-2]) * (x[1:-1] - x[:-2])


def upper_hull(xs: np.ndarray, ys: np.ndarray, passes: int = 64) -> np.ndarray:
    """Indices of the vertices of the upper concave hull's rising part, for points with strictly increasing ``xs``.

    Only points whose ``ys`` exceed every ``ys`` to their left and are positive can maximise ``y - alpha x`` above 0
    for an ``alpha >= 0``; of those, a point on or below the chord of two others is no vertex, so all points on or
    below their neighbours' chord are dropped at once, vectorised, until none is (concave: the hull), which takes one
    pass where the points are concave already. Past ``passes`` passes, Andrew's monotone chain finishes on the points
    left. The cross products are float64: a point within rounding of a chord may be kept or dropped, which moves the
    supremum by rounding only.
    """
    record = ys > np.concatenate([[0.0], np.maximum.accumulate(ys)[:-1]])
    idx = np.flatnonzero(record)
    for _ in range(passes):
        if idx.size < 3:
            return idx
        drop = _below_chord(xs[idx], ys[idx])
        if not drop.any():
            return idx
        idx = idx[np.concatenate([[True], ~drop, [True]])]
    x, y, hull = xs[idx].tolist(), ys[idx].tolist(), []
    for i in range(len(x)):  # monotone chain (upper): pop the last vertex while it is on or below the chord
        while len(hull) >= 2 and ((y[hull[-1]] - y[hull[-2]]) * (x[i] - x[hull[-2]])
                                  <= (y[i] - y[hull[-2]]) * (x[hull[-1]] - x[hull[-2]])):
            hull.pop()
        hull.append(i)
    return idx[hull]


def tradeoff_on_hull(eps: np.ndarray, one_minus: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """sup over the points of both terms of Prop. 2.12, on the upper hulls of ``(e^eps, 1 - delta)`` and
    ``(e^-eps, e^-eps (1 - delta))`` (``eps`` increasing, ``<= 700``)."""
    best = np.zeros(alphas.shape)  # f >= 0: points whose line is below 0 everywhere are not needed
    x = np.exp(eps)
    u = np.exp(-eps)[::-1]  # increasing
    for xs, ys in ((x, one_minus), (u, u * one_minus[::-1])):  # sup 1 - delta - e^eps alpha; e^-eps (1 - delta - alpha)
        h = upper_hull(xs, ys)
        if h.size:
            best = np.maximum(best, upper_envelope(xs[h], ys[h], alphas))
    return best
