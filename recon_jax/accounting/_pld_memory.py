r"""Memory budget of the PLD routes, shared by :mod:`~recon_jax.accounting.dpsgd` and
:mod:`~recon_jax.accounting.vmf_pld`: a privacy-loss distribution is sized before it is built, and refused (a
:class:`PLDTooLarge`, which is a ``ValueError``) where it would need more than :data:`BUDGET_BYTES`.

| symbol | meaning |
|---|---|
| ``n`` | points of one step's privacy-loss grid, one adjacency direction (multiples of the discretisation interval) |
| ``steps`` | number of steps composed (T) |
| ``[lo, hi]`` | support of the ``steps``-fold convolution that ``dp_accounting`` keeps, in grid indices |

The routes build ``dp_accounting`` PLDs: one step's grid, then ``self_compose(steps)``, one FFT per direction of
length ``next_fast_len(max(hi - lo + 1, n))``, where ``[lo, hi]`` is the trivial ``[0, (n - 1) steps]`` narrowed by a
Chernoff bound on tails of mass 1e-15 at the orders ``+-1..20 / n`` (``dp_accounting.pld.common.
compute_self_convolve_bounds``). A tiny noise (or a large VMF concentration) makes both huge: sigma = 1e-3 tried to
allocate 38 GiB, 1e-4 3.65 TiB. Each route checks, before anything large is allocated:

1. one step, in closed form (Gaussian: :func:`check_gaussian_step`; VMF: its cell and grid counts);
2. the composition (:func:`check_composition`): the trivial support from a closed-form bound on ``n`` first (no array);
   only where that would not fit, the Chernoff-narrowed support from the one step's probabilities, which the routes
   compute themselves from their hockey-stick divergences (:func:`connect_dots_probs`) and summarise by their log
   moment generating functions at the Chernoff orders (:func:`summarise`; the bound is dp_accounting's).

Nothing here reads a ``dp_accounting`` object: its PMFs have no public accessor for their probabilities.

Peak resident memory per point, measured on a 2-core CPU (dp_accounting 0.4, rechecked with 0.6): one Gaussian
step, <= 220 bytes per point of ``(1/sigma^2 + 20/sigma) / interval`` (the q = 1 grid; one direction of q < 1 has at
most half as many points and peaks at 233 bytes each); the FFT, 64-74 bytes per point of the longest FFT above the
memory held after the step (``benchmarks/pld_memory.py``, dp_accounting 0.6, NumPy 2.4, SciPy 1.17: a slope of 72 with
two directions, 64 with one, and at most 74.4 with the fixed cost, at 3.7M points; 54-69 in an earlier, unrecorded
measurement); ``pld_tradeoff`` after composing, 53-60 bytes per point kept (both directions) plus per point of its
epsilon grid.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import numpy as np

#: The memory a PLD route may use, in bytes (2 GiB).
BUDGET_BYTES = 2 * 2**30
#: Bytes per point of the Gaussian's one-step grid while dp_accounting builds it (a Python dict entry per point).
STEP_POINT_BYTES = 220
#: Bytes per point of the FFT that composes the steps (dp_accounting's ``common.self_convolve``): measured <= 74.4
#: (``benchmarks/pld_memory.py``), so 80 leaves 7.5% for other library versions and allocators.
FFT_POINT_BYTES = 80
#: Bytes per composed point kept and per point of the epsilon grid in ``pld_tradeoff``'s profile (measured <= 60).
TRADEOFF_POINT_BYTES = 64
#: Tail mass that ``self_compose`` truncates (dp_accounting's default; the routes never pass another).
TAIL_MASS_TRUNCATION = 1e-15
#: dp_accounting's Chernoff orders, in units of 1 / n.
_ORDERS = np.concatenate((np.arange(-20, 0), np.arange(1, 21)))


def check_whole_counts(name: str, value, route: str) -> None:
    """Raises ``ValueError`` naming ``name`` unless every entry of the concrete ``value`` is a finite whole number.

    A PLD route composes an integer number of steps (``self_compose``): a count such as 1.4 was rounded to 1 there,
    composing fewer steps than asked (a smaller epsilon, or a calibrated noise too small), and ``inf`` failed in
    ``int(round(inf))`` with an ``OverflowError``. The lower bound (>= 1) is each caller's own check.

    >>> check_whole_counts("steps", [2.0, 1.4], "accountant='pld'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: steps must be finite whole numbers for accountant='pld' (...); got [1.4]
    """
    arr = np.asarray(value, np.float64)
    ok = np.isfinite(arr) & (arr == np.round(arr))
    if not np.all(ok):
        raise ValueError(f"{name} must be finite whole numbers for {route} (the PLD accountant composes an integer "
                         f"number of steps); got {np.ravel(arr[~ok])[:3].tolist()}")


class PLDTooLarge(ValueError):
    """A PLD route refuses: its privacy-loss distribution would need more memory than :data:`BUDGET_BYTES`."""


def gib(nbytes: float) -> str:
    """``"about X GiB (limit 2 GiB)"`` for a refusal message."""
    return f"about {nbytes / 2**30:.1f} GiB (limit {BUDGET_BYTES / 2**30:g} GiB)"


def gaussian_min_sigma(value_discretization_interval: float) -> float:
    """Smallest sigma whose one-step privacy-loss grid fits the budget (a closed form).

    The grid spans at most ``1/sigma^2 + 20/sigma`` in privacy loss (the Gaussian's loss ``(2x - 1) / (2 sigma^2)``
    over ``x`` within ~9.75 sigma of its means, the tail dp_accounting keeps; subsampling only narrows it), so it has
    at most ``(1/sigma^2 + 20/sigma) / value_discretization_interval`` points; solved for sigma at the budget.
    """
    n = BUDGET_BYTES / STEP_POINT_BYTES * value_discretization_interval
    return 1.0 / (math.sqrt(100.0 + n) - 10.0)


def check_gaussian_step(sigma: float, value_discretization_interval: float, route: str, alternatives: str) -> None:
    """Raises :class:`PLDTooLarge` naming sigma and :func:`gaussian_min_sigma` where one step would not fit."""
    smin = gaussian_min_sigma(value_discretization_interval)
    if sigma < smin:
        raise PLDTooLarge(
            f"sigma must be >= {smin:.3g} for {route} with value_discretization_interval="
            f"{value_discretization_interval:g} (below it one step's privacy-loss distribution needs more than "
            f"{BUDGET_BYTES / 2**30:g} GiB); got {sigma!r}: use {alternatives}")


def gaussian_grid(sigma: float, q: float, value_discretization_interval: float) -> tuple[int, int]:
    """Upper bounds on the points of one direction's one-step grid and on its largest loss index (closed form).

    dp_accounting truncates the noise at ``z = -Phi^{-1}(e^{-50} / 2) = 9.75`` standard deviations, so the
    unsubsampled loss ``(2x - 1) / (2 sigma^2)`` stays within ``+-a``, ``a = z / sigma + 1 / (2 sigma^2)``; the remove
    loss ``log(1 - q + q e^{loss})`` then spans ``[log(1 - q + q e^{-a}), log(1 - q + q e^a)]`` and the add loss its
    negation. Each end is rounded outward to the grid, with one more point of slack against rounding.
    """
    from scipy import special

    z = -float(special.ndtri(0.5 * math.exp(-50.0)))
    a = z / sigma + 0.5 / (sigma * sigma)
    if q == 1.0:
        top, bottom = a, -a
    else:
        top = float(np.logaddexp(math.log1p(-q), math.log(q) + a))
        bottom = float(np.logaddexp(math.log1p(-q), math.log(q) - a))
    k_hi = math.ceil(top / value_discretization_interval) + 1
    k_lo = math.floor(bottom / value_discretization_interval) - 1
    return k_hi - k_lo + 1, k_hi


def connect_dots_probs(deltas: np.ndarray, value_discretization_interval: float) -> np.ndarray:
    """Probabilities of the pessimistic connect-the-dots PMF (Doroshenko et al. 2022, Algorithm 1) on consecutive
    grid points from the hockey-stick divergences there: the same arithmetic as dp_accounting's
    ``pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap``, so that the PMF need not be built to be sized."""
    d = np.minimum.accumulate(np.asarray(deltas, np.float64))
    if d.size == 1:
        return 1.0 - d
    diffs = np.diff(d)
    step = value_discretization_interval
    probs = np.zeros_like(d)
    probs[0] = 1 - d[0] + diffs[0] / math.expm1(step)
    probs[1:-1] = (diffs[1:] - diffs[:-1] * math.exp(step)) / math.expm1(step)
    probs[-1] = diffs[-1] / math.expm1(-step)
    return np.maximum(0.0, probs)


class Direction(NamedTuple):
    """One adjacency direction of one step's PLD, as much as the composition's size needs."""

    lower: int  # loss index of its first grid point
    points: int  # n
    log_mgfs: tuple[float, ...]  # log sum_i p_i e^{t i} at dp_accounting's Chernoff orders t = _ORDERS / n


def summarise(lower: int, probs: np.ndarray) -> Direction:
    """The :class:`Direction` of the probabilities ``probs`` on grid indices ``lower, lower + 1, ...``.

    The moment generating functions are dp_accounting's (``logsumexp(arange(n) * t, b=probs)``), taken by repeated
    multiplication with ``e^{+-i/n}`` instead of 40 exponentials per point (the terms stay in [e^-20, e^20]; the logs
    agree to 1e-14, and this is ~30 times faster).
    """
    probs = np.asarray(probs, np.float64)
    n = probs.size
    sums = {}
    for sign in (1, -1):
        base = np.exp(sign * np.arange(n) / n)
        term = probs.copy()
        for j in range(1, 21):
            term *= base
            sums[sign * j] = float(term.sum())
    return Direction(int(lower), n, tuple(math.log(sums[int(o)]) if sums[int(o)] > 0 else -math.inf for o in _ORDERS))


def composed_support(direction: Direction, steps: int) -> tuple[int, int]:
    """dp_accounting's ``[lo, hi]`` for ``steps`` compositions (``common.compute_self_convolve_bounds``'s Chernoff
    bound, from the summary)."""
    lower, upper = 0, (direction.points - 1) * steps
    for order, log_mgf in zip(_ORDERS / direction.points, direction.log_mgfs):
        bound = (steps * log_mgf + math.log(2 / TAIL_MASS_TRUNCATION)) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        else:
            lower = max(lower, math.floor(bound))
    return lower, upper


class Composed(NamedTuple):
    """Size of a composed PLD (all directions)."""

    fft_points: int  # the longest FFT
    kept_points: int  # composed grid points kept, summed over the directions
    top: int  # largest composed loss index


def _fast_len(n: int) -> int:
    from scipy import fft

    return fft.next_fast_len(n) if n < 2**50 else n  # beyond, far over any budget (and scipy's limit)


def composed_size(directions: Sequence[Direction], steps: int) -> Composed:
    """The composition's size from the one step's :class:`Direction` summaries (dp_accounting's truncation)."""
    sizes = []
    for d in directions:
        lo, hi = composed_support(d, steps)
        sizes.append((_fast_len(max(hi - lo + 1, d.points)), hi - lo + 1, steps * d.lower + hi))
    return Composed(max(s[0] for s in sizes), sum(s[1] for s in sizes), max(s[2] for s in sizes))


def trivial_size(points: int, top: int, steps: int, directions: int) -> Composed:
    """An upper bound on :func:`composed_size` without truncation, from upper bounds on one direction's points and
    on its largest loss index (closed form: the support grows at most ``steps`` times)."""
    length = (points - 1) * steps + 1
    return Composed(_fast_len(max(length, points)), directions * length, steps * top)


def fft_bytes(size: Composed) -> float:
    """Peak memory of composing the steps (the FFT)."""
    return FFT_POINT_BYTES * size.fft_points


def tradeoff_bytes(size: Composed, grid_points: int | None = None) -> float:
    """Peak memory of ``pld_tradeoff``: the FFT, or its profile over the kept points and an epsilon grid
    (``grid_points`` epsilons; by default one per grid step from 0 to the largest loss)."""
    grid = max(size.top, 0) + 2 if grid_points is None else grid_points
    return max(fft_bytes(size), TRADEOFF_POINT_BYTES * (size.kept_points + grid))


def check_composition(steps: int, bound: Composed, directions: Callable[[], Sequence[Direction]],
                      cost: Callable[[Composed], float], refusal: Callable[[float], str]) -> None:
    """Raises :class:`PLDTooLarge` with ``refusal(bytes)`` where composing ``steps`` steps would exceed the budget.

    ``bound`` (from :func:`trivial_size`) decides alone where ``cost(bound)`` fits; otherwise the Chernoff-narrowed
    size of ``directions()`` (computed only then) does.
    """
    if steps <= 1 or cost(bound) <= BUDGET_BYTES:
        return
    need = cost(composed_size(directions(), steps))
    if need > BUDGET_BYTES:
        raise PLDTooLarge(refusal(need))
