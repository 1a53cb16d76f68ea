r"""DP-SGD accounting: epsilon, noise calibration, and the PLD trade-off curve for ReRo bounds.

| symbol | meaning |
|---|---|
| ``sigma`` | noise multiplier of DP-SGD (noise std / clipping norm) |
| ``q`` | Poisson sampling probability (batch size / dataset size) |
| ``steps`` | number of DP-SGD steps composed (T) |
| ``delta`` | target delta |
| ``alpha`` (trade-off) | type-I error of a test between neighbours; ``f(alpha)`` the smallest type-II error |

Two accountants: ``"rdp"`` is recon_jax's own jittable path (:func:`rdp_subsampled_gaussian` composed over
``steps``, converted with Canonne et al.'s Prop. 2.11), and ``"pld"`` bridges to ``dp_accounting``'s
privacy-loss-distribution accountant (tightest epsilon; host-side NumPy, not jittable).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from recon_jax._validation import (FINITE_POSITIVE, HALF_OPEN_UNIT, OPEN_UNIT, POSITIVE, Range, at_least, check,
                                   concrete_or_none, guard, log_positive, nan_if, pad_batch, static_orders)
from recon_jax.accounting import _pld_memory, _search
from recon_jax.accounting._tradeoff import EXP_SAFE, profile_at_losses, tradeoff_on_hull, upper_envelope
from recon_jax.accounting.conversions import eps_from_rdp_log_delta
from recon_jax.accounting.rdp import (DEFAULT_ORDERS, floor_sigma, gaussian_rdp_unchecked, q_logs,
                                     rdp_subsampled_gaussian_logs)

__all__ = [
    "dpsgd_epsilon",
    "calibrate_sigma",
    "pld_tradeoff",
    "rero_dpsgd_tradeoff",
]


_DELTA = Range(OPEN_UNIT.predicate, "in (0, 1)")  # a target delta


def _dpsgd_specs(q, steps, delta) -> tuple:
    """The :func:`~recon_jax._validation.guard` specs of the DP-SGD arguments besides sigma (or the target eps)."""
    return ("q", q, _SAMPLING_RATE), ("steps", steps, at_least(1)), ("delta", delta, _DELTA)


# A batch size passed for q (256 for 256 / 60000) is the usual slip: the message says what q is.
_SAMPLING_RATE = Range(HALF_OPEN_UNIT.predicate, f"{HALF_OPEN_UNIT.allowed} (the sampling rate: batch / dataset size)")


def _eps_rdp(sigma, qlogs, steps, log_delta, orders: np.ndarray, plain: bool = False):
    """Epsilon from the RDP of DP-SGD on valid arguments (the callers mask invalid ones), unchecked and traceable.

    ``qlogs`` is :func:`~recon_jax.accounting.rdp.q_logs` of q, ``log_delta`` the log of delta (both taken on the
    host where concrete: a q or delta that float32 cannot hold has representable logs), sigma as
    :func:`~recon_jax.accounting.rdp.floor_sigma`; ``plain``: q = 1 everywhere (the Gaussian's closed form, without
    compiling the series)."""
    dtype = jnp.result_type(float)
    *qlogs, sigma, steps, log_delta = jnp.broadcast_arrays(*qlogs, jnp.asarray(sigma, dtype),
                                                           jnp.asarray(steps, dtype), jnp.asarray(log_delta, dtype))
    if plain:
        rdp = gaussian_rdp_unchecked(sigma, orders)
    else:
        rdp = rdp_subsampled_gaussian_logs(*qlogs, sigma, orders)  # [..., n]
    composed = steps[..., None] * rdp
    composed = jnp.where(jnp.isnan(composed), jnp.inf, composed)  # steps = inf (1e50 in float32) times an RDP of 0
    return eps_from_rdp_log_delta(orders, composed, log_delta)[0]


def _check_gaussian_composition(sigma: float, q: float, steps: int, grid: float, route: str, alternatives: str,
                                cost, parts=None) -> None:
    """The composition part of the PLD memory guard (:func:`recon_jax.accounting._pld_memory.check_composition`) for
    the subsampled Gaussian: the closed-form grid bound first, then, only where that would not fit, the truncated
    support from the one step's connect-the-dots probabilities (from ``parts``, :func:`_gaussian_deltas`, computed
    here if not given). Raises ``PLDTooLarge`` (a ``ValueError`` naming sigma) before dp_accounting builds anything."""
    points, top = _pld_memory.gaussian_grid(sigma, q, grid)

    def directions():
        found = _gaussian_deltas(sigma, q, grid) if parts is None else parts
        return [_pld_memory.summarise(lo, _pld_memory.connect_dots_probs(d, grid)) for lo, _, d in found]

    def refusal(need):
        return (f"sigma = {sigma:g} is too small for {route} at q = {q:g}, steps = {steps} (value_discretization_"
                f"interval={grid:g}): composing the steps needs {_pld_memory.gib(need)}; use {alternatives}")

    bound = _pld_memory.trivial_size(points, top, steps, 1 if q == 1.0 else 2)
    _pld_memory.check_composition(steps, bound, directions, cost, refusal)


def _pld_epsilon(sigma: float, q: float, steps: int, delta: float, value_discretization_interval: float) -> float:
    """dp_accounting's PLD epsilon of DP-SGD (as its ``PLDAccountant`` composes it), within the memory budget.

    Returns 0 without dp_accounting where the total variation distance of the composition, at most
    ``steps * q * erf(1 / (2 sqrt(2) sigma))``, is <= ``delta`` (then delta(eps = 0) <= delta and epsilon is exactly
    0; this covers sigma = inf and the sigma >= 1e155 whose square overflows in dp_accounting). Raises ``PLDTooLarge``
    (:mod:`recon_jax.accounting._pld_memory`, a ``ValueError`` naming sigma) where the privacy-loss distribution would
    not fit, before dp_accounting builds it.
    """
    if steps * q * math.erf(1.0 / (2.0 * math.sqrt(2.0) * sigma)) <= delta:
        return 0.0
    grid = value_discretization_interval
    _pld_memory.check_gaussian_step(sigma, grid, "accountant='pld'",
                                    "accountant='rdp' or a larger value_discretization_interval")
    _check_gaussian_composition(sigma, q, steps, grid, "accountant='pld'",
                                "accountant='rdp', a larger sigma or a larger value_discretization_interval",
                                _pld_memory.fft_bytes)
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    pld = pld_lib.from_gaussian_mechanism(sigma, value_discretization_interval=grid, sampling_prob=q)
    composed = pld_lib.identity(grid).compose(pld.self_compose(steps))  # as the accountant composes it (same rounding)
    return float(composed.get_epsilon_for_delta(delta))


def dpsgd_epsilon(sigma: ArrayLike, q: ArrayLike, steps: ArrayLike, delta: ArrayLike, accountant: str = "rdp",
                  orders: ArrayLike | None = None, *, value_discretization_interval: float = 1e-4) -> jax.Array:
    """Epsilon of DP-SGD (Poisson-subsampled Gaussian, add/remove adjacency) after ``steps`` steps.

    Args:
      sigma: noise multiplier(s) > 0 (``inf`` allowed: epsilon 0 under ``"pld"``).
      q: sampling probability(ies) in (0, 1].
      steps: number of steps >= 1 (composition is over *steps*; Biswas et al.'s Gaussian row of Table IV
        uses steps = epochs / q); finite whole numbers for ``"pld"``.
      delta: target delta in (0, 1). All four broadcast.
      accountant: ``"rdp"`` (ours; jittable over sigma, q, steps, delta) or ``"pld"`` (bridge to
        ``dp_accounting``'s PLD accountant; tightest; host-side loop).
      orders: static RDP orders for ``"rdp"`` (default :data:`DEFAULT_ORDERS`, which contains
        dp_accounting's usual grid).
      value_discretization_interval: PLD discretisation for ``"pld"``.

    Returns:
      epsilon, shape ``broadcast(sigma, q, steps, delta)``.

    Raises:
      ValueError: for out-of-range inputs or an unknown accountant; under ``"pld"`` also for traced inputs,
        non-integer or infinite steps, and a sigma too small for its memory budget (below).

    ``"pld"`` keeps to 2 GiB: where the total variation bound ``steps * q * erf(1 / (2 sqrt(2) sigma))`` is <=
    ``delta`` epsilon is exactly 0 (returned without dp_accounting: sigma = inf, or a sigma so large that its square
    overflows there); a sigma below ``1 / (sqrt(100 + 9.76e6 * value_discretization_interval) - 10)`` (0.044 at the
    default 1e-4, where one step's privacy-loss grid alone would exceed the budget) raises ``ValueError`` naming
    sigma and that limit, and so does a sigma above it whose composition over ``steps`` would exceed the budget (at
    the default interval, measured: q = 1, steps = 1 accepts sigma = 0.045 (peak 1.5 GiB); q = 0.01, steps = 1000
    refuses 0.09 and accepts 0.095 (1.8 GiB); q = 0.1, steps = 100 accepts 0.1 (1.6 GiB); q = 0.001, steps = 1e5
    refuses 0.15 and accepts 0.17 (1.5 GiB)). Use ``"rdp"`` there. Both are decided before dp_accounting builds
    anything, from closed forms and, for the composition, the step's own probabilities
    (:mod:`recon_jax.accounting._pld_memory`, shared with :func:`pld_tradeoff` and the VMF PLD).

    The first ``"rdp"`` call with ``q < 1`` in a process compiles the fractional-order RDP series for all the
    orders (XLA compilation: 3-6 s on a shared 2-core CPU, most of it that one program; later calls take
    milliseconds). JAX's persistent compilation cache keeps it across processes
    (``jax.config.update("jax_compilation_cache_dir", DIR)``: 1.5 s on the same machine).

    >>> import numpy as np
    >>> e = dpsgd_epsilon(1.1, 256 / 60000, 60 * 60000 // 256, 1e-5)  # Abadi et al.'s MNIST setting
    >>> bool(2.0 < float(e) < 3.0)
    True
    """
    bad = guard(("sigma", sigma, POSITIVE), *_dpsgd_specs(q, steps, delta))  # in float64, before any cast
    if accountant == "rdp":
        orders_np = DEFAULT_ORDERS if orders is None else np.atleast_1d(static_orders(orders))
        dt = jnp.result_type(float)
        q_np = concrete_or_none(q)
        plain = q_np is not None and bool(np.all(q_np == 1.0))
        out = _eps_rdp(floor_sigma(sigma, dt), q_logs(q, dt), steps, log_positive(delta, dt), orders_np, plain)
        return nan_if(bad, out)
    if accountant == "pld":
        check("value_discretization_interval", value_discretization_interval, FINITE_POSITIVE)
        vals = [concrete_or_none(v) for v in (sigma, q, steps, delta)]
        if any(v is None for v in vals):
            raise ValueError("accountant='pld' runs on the host: sigma, q, steps and delta must be concrete")
        _pld_memory.check_whole_counts("steps", vals[2], "accountant='pld'")
        b = np.broadcast_arrays(*vals)
        out = np.empty(b[0].shape, np.float64)
        for idx in np.ndindex(out.shape):
            s, qq, t, d = (float(x[idx]) for x in b)
            out[idx] = _pld_epsilon(s, qq, int(round(t)), d, value_discretization_interval)
        return jnp.asarray(out, jnp.result_type(float))
    raise ValueError(f"accountant must be 'rdp' or 'pld'; got {accountant!r}")


@functools.partial(jax.jit, static_argnames=("orders_key", "iters"))
def _calibrate_sigma_jit(eps, log_q, log1mq, is_one, steps, log_delta, orders_key, iters):
    orders = np.asarray(orders_key)

    def eps_at(log_s):
        return _eps_rdp(jnp.exp(log_s), (log_q, log1mq, is_one), steps, log_delta, orders)

    # Fixed bracket sigma in [1e-4, 1e6] (log range 23; 60 halvings resolve it far below float64 rounding).
    lo = jnp.full(eps.shape, jnp.log(1e-4), eps.dtype)
    hi = jnp.full(eps.shape, jnp.log(1e6), eps.dtype)

    def bisect(_, carry):
        lo, hi = carry
        mid = 0.5 * (lo + hi)
        ok = eps_at(mid) <= eps
        return jnp.where(ok, lo, mid), jnp.where(ok, mid, hi)

    lo, hi = jax.lax.fori_loop(0, iters, bisect, (lo, hi))
    # Relative margin in sigma (1e-9 in float64, ~1e-5 in float32) so that the result stays feasible when
    # epsilon is re-evaluated with different rounding.
    hi = hi + max(1e-9, 100.0 * float(jnp.finfo(eps.dtype).eps))
    feasible = eps_at(hi) <= eps
    return jnp.where(feasible, jnp.exp(hi), jnp.inf)


def _calibrate_sigma_pld(eps, q, steps, delta, sigma_rdp, step, rtol):
    """Host search on log(sigma) against dp_accounting's PLD epsilon (:func:`_search.feasible_edge`), starting at the
    RDP sigma.

    A sigma the PLD route refuses (too small for its memory budget, :func:`_pld_epsilon`) counts as infeasible:
    the bracket never evaluates below it, and the result is the smallest sigma it can certify.
    """
    def pld_eps(s):
        try:
            return _pld_epsilon(s, q, steps, delta, step)
        except _pld_memory.PLDTooLarge:
            return None

    if not np.isfinite(sigma_rdp):
        return float("inf")
    found = _search.feasible_edge(pld_eps, eps, float(sigma_rdp), increasing=False, limits=(1e-4, 1e6), rtol=rtol)
    return float("inf") if found.kind == "none" else found.x


def calibrate_sigma(eps: ArrayLike, q: ArrayLike, steps: ArrayLike, delta: ArrayLike, accountant: str = "rdp",
                    orders: ArrayLike | None = None, *, iters: int = 60, value_discretization_interval: float = 1e-4,
                    rtol: float = 1e-4) -> jax.Array:
    """Smallest noise multiplier whose DP-SGD epsilon (``"rdp"`` or ``"pld"`` accountant) is at most ``eps``.

    ``"rdp"``: bisects ``iters`` times in log-sigma over the bracket [1e-4, 1e6] (epsilon decreases with sigma);
    jitted and vectorised over all broadcast targets. The returned sigma satisfies ``dpsgd_epsilon(sigma, ...) <=
    eps`` (the upper end of the final bracket, plus a 1e-9 (float64) or 1e-5 (float32) relative margin against
    rounding); ``inf`` if even sigma = 1e6 does not reach the target.

    ``"pld"``: the same target with ``dp_accounting``'s PLD epsilon (:func:`dpsgd_epsilon` with
    ``accountant="pld"``), host-side: the bracket starts at the RDP sigma (an upper bound in practice; widened if
    not), and shrunk by a safeguarded secant search in log-sigma until its ends are within a factor ``1 + rtol``;
    the upper end is returned, so its PLD epsilon is <= ``eps``. A sigma too small for the PLD route's memory
    budget (see :func:`dpsgd_epsilon`) counts as infeasible: for a target so large that the smallest sigma lies below
    the budget's limit, the result is the smallest sigma the PLD route can certify (still meeting ``eps``), never an
    error.

    Args:
      eps: target epsilon(s) > 0.
      q: sampling probability in (0, 1]; steps: number of steps >= 1 (finite whole numbers for ``"pld"``);
        delta: in (0, 1). All broadcast.
      accountant: ``"rdp"`` or ``"pld"`` (fifth, as in :func:`dpsgd_epsilon`).
      orders: static RDP orders (default :data:`DEFAULT_ORDERS`).
      iters: bisection iterations (``"rdp"``).
      value_discretization_interval: PLD discretisation (``"pld"``).
      rtol: relative width of the final sigma bracket (``"pld"``).

    Returns:
      sigma of shape ``broadcast(eps, q, steps, delta)``.

    Raises:
      ValueError: for out-of-range inputs or an unknown accountant.

    >>> import numpy as np
    >>> orders = [1.5, 2.0, 4.0, 8.0, 16.0, 32.0]
    >>> s = calibrate_sigma(2.0, 0.01, 1000, 1e-5, orders=orders)
    >>> bool(float(dpsgd_epsilon(s, 0.01, 1000, 1e-5, orders=orders)) <= 2.0)
    True
    >>> bool(float(dpsgd_epsilon(calibrate_sigma(2.0, 0.01, 1000, 1e-5, "pld"), 0.01, 1000, 1e-5, "pld")) <= 2.0)
    True
    """
    dt = jnp.result_type(float)
    # Judged in float64: q and delta enter through their logs, taken on the host (q = 1e-50, delta = 1e-300 or
    # 1 - 1e-9 are valid though float32 cannot hold them); an eps that float32 flushes to 0 (1e-50) is calibrated
    # for eps = 0, a stricter target (sigma at least the exact answer); an eps or steps that overflows to inf is
    # calibrated for inf (an eps of inf: the bracket's lower end, 1e-4; steps: inf, as no sigma in the bracket meets
    # the target).
    bad = guard(("eps", eps, POSITIVE), *_dpsgd_specs(q, steps, delta))
    if accountant not in ("rdp", "pld"):
        raise ValueError(f"accountant must be 'rdp' or 'pld'; got {accountant!r}")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be an integer >= 1; got {iters!r}")
    orders_np = DEFAULT_ORDERS if orders is None else np.atleast_1d(static_orders(orders))
    if accountant == "pld":  # refused before the RDP start point is computed: the search would round steps
        check("value_discretization_interval", value_discretization_interval, FINITE_POSITIVE)
        vals = [concrete_or_none(v) for v in (eps, q, steps, delta)]
        if any(v is None for v in vals):
            raise ValueError("accountant='pld' runs on the host: eps, q, steps and delta must be concrete")
        _pld_memory.check_whole_counts("steps", vals[2], "accountant='pld'")
    args = jnp.broadcast_arrays(jnp.asarray(eps, dt), *q_logs(q, dt), jnp.asarray(steps, dt),
                                log_positive(delta, dt))
    flat, n = pad_batch(*args)
    out = _calibrate_sigma_jit(*flat, tuple(float(o) for o in orders_np), iters)
    out = out[:n].reshape(args[0].shape)
    if accountant == "rdp":
        return nan_if(bad, out)
    b = np.broadcast_arrays(*vals, np.asarray(out, np.float64))
    res = np.empty(b[0].shape, np.float64)
    for idx in np.ndindex(res.shape):
        e, qq, t, d, s0 = (float(x[idx]) for x in b)
        res[idx] = _calibrate_sigma_pld(e, qq, int(round(t)), d, s0, value_discretization_interval, rtol)
    return jnp.asarray(res, dt)


def _log_expm1_plus(x: np.ndarray, q: float) -> np.ndarray:
    """``log(e^x - 1 + q)`` (floored at 1e-300 inside the log), also where ``e^x`` overflows (x > 700)."""
    big = x > 700.0
    small = np.log(np.maximum(np.expm1(np.minimum(x, 700.0)) + q, 1e-300))
    return np.where(big, x + np.log1p(-(1.0 - q) * np.exp(-np.maximum(x, 700.0))), small)


def _subsampled_gaussian_delta(sigma: float, q: float, remove: bool, eps: np.ndarray) -> np.ndarray:
    """Hockey-stick divergence delta(eps) of one Poisson-subsampled Gaussian step (sensitivity 1), vectorised.

    Remove adjacency: P = (1 - q) N(0, s^2) + q N(1, s^2) against Q = N(0, s^2); the loss log(1 - q + q e^{(2x-1)/2s^2})
    increases in x, so delta = P(X > x*) - e^eps Q(X > x*) with x* = s^2 log((e^eps - 1 + q) / q) + 1/2 (delta =
    1 - e^eps where eps <= log(1 - q)). Add adjacency: the roles swapped, the loss decreases in x, x* = s^2 log((e^-eps
    - 1 + q) / q) + 1/2 and delta = P(X < x*) - e^eps Q(X < x*) (0 where eps >= -log(1 - q)). Where ``|eps| > 700``
    (loss grids of sigma below ~0.035) ``log(e^|eps| - 1 + q)`` is taken as ``|eps| + log1p(-(1 - q) e^-|eps|)``:
    ``e^|eps|`` itself would overflow (x* = inf gave delta = 0 there instead of ~1).
    """
    from scipy.special import log_ndtr, ndtr

    eps = np.asarray(eps, np.float64)
    s2 = sigma * sigma
    if remove:
        inside = eps > np.log1p(-q) if q < 1 else np.ones(eps.shape, bool)
        e = np.where(inside, eps, 1.0)
        arg = _log_expm1_plus(e, q) - np.log(q)  # log((e^eps - 1 + q) / q)
        x = s2 * arg + 0.5
        # survival functions as ndtr(-z); the e^eps term in log space
        delta = (1 - q) * ndtr(-x / sigma) + q * ndtr(-(x - 1) / sigma) - np.exp(e + log_ndtr(-x / sigma))
        delta = np.where(inside, delta, -np.expm1(np.minimum(eps, 0.0)))  # eps <= log(1 - q) < 0 where it is used
    else:
        inside = eps < -np.log1p(-q) if q < 1 else np.ones(eps.shape, bool)
        e = np.where(inside, eps, 0.0)
        arg = _log_expm1_plus(-e, q) - np.log(q)
        x = s2 * arg + 0.5
        mix = np.logaddexp(np.log1p(-q) + log_ndtr(x / sigma), np.log(q) + log_ndtr((x - 1) / sigma)) if q < 1 else \
            log_ndtr((x - 1) / sigma)
        delta = ndtr(x / sigma) - np.exp(e + mix)
        delta = np.where(inside, delta, 0.0)
    return np.clip(delta, 0.0, 1.0)


def _gaussian_deltas(sigma: float, q: float, grid: float) -> list[tuple[int, int, np.ndarray]]:
    """``(lo, hi, deltas)`` of one subsampled Gaussian step's remove direction, and of its add direction where
    ``q < 1``: the hockey-stick divergences at the grid's epsilons ``lo * grid .. hi * grid``, computed vectorised
    (:func:`_subsampled_gaussian_delta`) instead of one inverse privacy loss per epsilon; the epsilon range is
    dp_accounting's (its ``connect_dots_bounds``)."""
    from dp_accounting.pld import privacy_loss_mechanism as plm

    parts = []
    for adjacency in [plm.AdjacencyType.REMOVE] + ([] if q == 1.0 else [plm.AdjacencyType.ADD]):
        bounds = plm.GaussianPrivacyLoss(sigma, sampling_prob=q, adjacency_type=adjacency).connect_dots_bounds()
        lo = math.floor(bounds.epsilon_lower / grid)
        hi = math.ceil(bounds.epsilon_upper / grid)
        parts.append((lo, hi, _subsampled_gaussian_delta(sigma, q, adjacency == plm.AdjacencyType.REMOVE,
                                                         np.arange(lo, hi + 1) * grid)))
    return parts


def _gaussian_pld(sigma: float, q: float, grid: float, parts=None):
    """dp_accounting's pessimistic connect-the-dots PLD of one subsampled Gaussian step, from the divergences of
    :func:`_gaussian_deltas` (``parts``, computed here if not given); the discretisation is dp_accounting's."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    parts = _gaussian_deltas(sigma, q, grid) if parts is None else parts
    return pld_lib.PrivacyLossDistribution(
        *(pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(grid, lo, hi, d) for lo, hi, d in parts))


def _dense_pmf(pmf) -> tuple[np.ndarray, np.ndarray, float]:
    """(losses, probabilities, infinity mass) of one direction of a ``dp_accounting`` PLD, as dense arrays.

    Reads the dense PMF's fields (``dp_accounting`` has no public accessor for them; riskcal reads the same ones).
    """
    dense = pmf.to_dense_pmf()
    probs = np.maximum(np.asarray(dense._probs, np.float64), 0.0)  # FFT rounding can leave -1e-19
    losses = (dense._lower_loss + np.arange(probs.size)) * dense._discretization
    return losses, probs, float(dense._infinity_mass)


_TRADEOFF_ALTERNATIVES = ("a larger value_discretization_interval, or an RDP bound "
                          "(recon_jax.bounds.rero_from_rdp_curve; rero_gdp for q = 1)")


def pld_tradeoff(sigma: float, q: float, steps: int, alphas, *, value_discretization_interval: float = 1e-3,
                 eps_grid=None) -> np.ndarray:
    r"""Trade-off curve ``f(alpha)`` of subsampled DP-SGD from ``dp_accounting``'s PLD (host-side).

    The PLD (pessimistic "connect the dots" discretisation of Doroshenko et al. 2022, composed over ``steps``)
    gives the privacy profile ``delta(eps)`` (max over add and remove adjacency), an upper bound on the true one
    at every ``eps``. A mechanism that is (eps, delta(eps))-DP for every eps has trade-off function at least
    ``f(alpha) = sup_{eps >= 0} max(0, 1 - delta(eps) - e^eps alpha, e^{-eps} (1 - delta(eps) - alpha))``
    (Dong, Roth and Su 2022, Prop. 2.12 applied to the whole profile). Between two consecutive loss values of
    the discretised PLD ``delta(eps) = A - e^eps B``, so both terms are monotone in eps there: the supremum over
    all eps >= 0 is attained at the loss values themselves. They are all evaluated at once (cumulative sums), and
    the supremum is taken on the upper concave hull of the points ``(e^eps, 1 - delta)`` (and ``(e^-eps, e^-eps (1 -
    delta))``) by a binary search per alpha, over the eps <= 700 where ``e^eps`` is finite (a smaller supremum). The
    hull's vertices are computed (:mod:`recon_jax.accounting._tradeoff`), and ``1 - delta`` there also from sums of
    non-negative terms, accurate where it is tiny, less the rounding of the PLD's probabilities: at large
    ``sqrt(steps) / sigma`` ``1 - delta`` is 0 up to rounding for a long run of eps, which is not concave, and the
    search on the raw points lost the supremum (f ~1e-161 where the exact curve is 0.68). The result is a lower
    bound on the true trade-off (bounds built from it are sound), non-increasing in alpha, and stable at fine
    discretisations. The curve is symmetric: the envelope over eps >= 0 of the larger of the remove and the add
    direction's profiles, as f-DP under add/remove adjacency needs. At small alpha, where a ReRo bound reads it, it
    equals the one direction that bound needs, T(trained without the target, trained with it), up to the
    discretisation (checked against the exact curve of one subsampled step); near alpha = 1/2 and above, for q < 1,
    it is the lower of the two directions.

    A host-side function (dp_accounting composes the PLD): concrete inputs only, not under ``jax.jit``.

    Args:
      sigma: noise multiplier > 0; q: sampling probability in (0, 1]; steps: number of steps, a whole number >= 1
        (``epochs * n / batch`` is rarely one: round it as the training loop does).
      alphas: type-I errors in [0, 1] (any shape).
      value_discretization_interval: PLD discretisation (smaller = tighter, slower).
      eps_grid: if given, the supremum is taken over these epsilons only (>= 0) instead of every loss value
        (looser; for comparisons with a fixed grid).

    Returns:
      NumPy array ``f(alphas)`` in [0, 1 - alpha].

    Raises:
      ValueError: for out-of-range inputs, a fractional ``steps`` (it was truncated), traced inputs, and where the
        PLD would need more than 2 GiB (as for
        :func:`dpsgd_epsilon`'s ``"pld"``: a sigma below ``1 / (sqrt(100 + 9.76e6 * value_discretization_interval)
        - 10)``, 0.0112 at the default 1e-3, or a composition whose FFT, or the profile over its points, would not
        fit), naming sigma; checked before anything large is allocated.

    >>> import numpy as np
    >>> from scipy.stats import norm
    >>> f = pld_tradeoff(1.0, 1.0, 1, [0.1])  # q = 1, one step: 1-GDP, f(a) = Phi(Phi^-1(1 - a) - 1)
    >>> bool(norm.cdf(norm.ppf(0.9) - 1.0) - 1e-3 < f[0] <= norm.cdf(norm.ppf(0.9) - 1.0))
    True
    """
    guard(("sigma", sigma, POSITIVE), *_dpsgd_specs(q, steps, 0.5))  # checks only: a host-side function
    if any(concrete_or_none(v) is None for v in (sigma, q, steps)):
        raise ValueError("pld_tradeoff runs on the host (dp_accounting's PLD): sigma, q and steps must be concrete "
                         "numbers, not values traced under jax.jit / vmap / grad")
    # A fractional count was truncated here (7031.25 steps composed 7031): a bound below the true one.
    _pld_memory.check_whole_counts("steps", steps, "pld_tradeoff")
    check("alphas", alphas, lambda a: (a >= 0) & (a <= 1), "in [0, 1]")
    check("value_discretization_interval", value_discretization_interval, FINITE_POSITIVE)
    if eps_grid is not None:
        check("eps_grid", eps_grid, lambda e: e >= 0, ">= 0")
    alphas = np.asarray(alphas, np.float64)
    sigma, q, steps, grid = float(sigma), float(q), int(steps), float(value_discretization_interval)
    _pld_memory.check_gaussian_step(sigma, grid, "pld_tradeoff", _TRADEOFF_ALTERNATIVES)
    parts = _gaussian_deltas(sigma, q, grid)
    _check_gaussian_composition(sigma, q, steps, grid, "pld_tradeoff", "a larger sigma, " + _TRADEOFF_ALTERNATIVES,
                                lambda size: _pld_memory.tradeoff_bytes(size, None if eps_grid is None
                                                                        else np.size(eps_grid)), parts)
    one_step = _gaussian_pld(sigma, q, grid, parts)
    del parts  # the divergences are in the PMFs now
    pld = one_step.self_compose(steps)
    directions = [_dense_pmf(pld._pmf_remove)]
    if not pld._symmetric:
        directions.append(_dense_pmf(pld._pmf_add))
    if eps_grid is None:
        top = max(float(d[0].max()) for d in directions)
        eps = np.arange(0.0, top + 1.5 * value_discretization_interval, value_discretization_interval)
    else:
        eps = np.unique(np.asarray(eps_grid, np.float64))
    profiles = [profile_at_losses(*d, eps, complement=True) for d in directions]
    deltas = np.max([p[0] for p in profiles], axis=0)
    complement = np.min([p[1] for p in profiles], axis=0)  # 1 - delta, accurate where it is tiny
    del profiles
    flat = alphas.ravel()
    one_minus = 1.0 - deltas
    # The supremum over eps <= 700 only, where e^eps is finite and e^-eps a normal number (a loss range past ~709
    # made e^eps inf and the curve NaN): a supremum over fewer eps is a lower bound on f still, so the result stays
    # sound; above 700 the first term is negative for every alpha > 1e-304 and the second below 1e-304.
    usable = eps <= EXP_SAFE
    eps, one_minus, complement = eps[usable], one_minus[usable], complement[usable]
    if eps.size == 0:  # only a caller's eps_grid can be all above 700: the trivial lower bound f >= 0
        return np.zeros(alphas.shape)
    f1 = upper_envelope(np.exp(eps), one_minus, flat)  # sup 1 - delta - e^eps alpha
    u = np.exp(-eps)[::-1]  # increasing
    f2 = upper_envelope(u, (u * one_minus[::-1]), flat)  # sup e^-eps (1 - delta - alpha)
    # The same suprema on the exact hull of the accurate 1 - delta (the binary search above assumes concave points,
    # which rounding breaks where 1 - delta is ~0 over a long run of eps, at large sqrt(steps) / sigma), less the
    # rounding of dp_accounting's probabilities (differences of divergences ~1 over e^interval - 1: ~1e-16 / interval
    # each; the profile came out up to 1.5e-14 above the exact one at interval 1e-2), so that f stays below the exact
    # curve where it is tiny. Never below the search above, which it keeps where that is larger.
    margin = 4.0 * np.finfo(np.float64).eps / grid
    f_hull = tradeoff_on_hull(eps, np.minimum(one_minus, complement) - margin, flat)
    f = np.clip(np.maximum(np.maximum(f1, f2), f_hull), 0.0, 1.0 - flat)
    # Non-increasing in alpha by construction up to rounding; make it exact (lowering a lower bound stays sound).
    order = np.argsort(flat, kind="stable")
    f[order] = np.minimum.accumulate(f[order])
    return f.reshape(alphas.shape)


def rero_dpsgd_tradeoff(kappa, sigma: float, q: float, steps: int, **kwargs) -> np.ndarray:
    """Hayes, Mahloujifar and Balle 2023 ReRo bound for subsampled DP-SGD: ``ReRo <= 1 - f(kappa)``.

    ``kappa`` is the prior probability of a successful reconstruction without access to the model (the
    baseline, e.g. ``recon_jax.bounds.baseline_kappa_*``); ``f`` is the trade-off curve from
    :func:`pld_tradeoff`. For ``q = 1`` this is ``rero_gdp(kappa, sqrt(steps)/sigma)``. Host-side, as
    :func:`pld_tradeoff` is; for a jittable bound use the closed forms of :mod:`recon_jax.bounds` (``rero_gdp`` for
    q = 1, ``rero_from_rdp_curve`` on an RDP curve).

    Args:
      kappa: baseline success probability(ies) in [0, 1].
      sigma, q, steps: DP-SGD parameters (steps a whole number); ``**kwargs`` go to :func:`pld_tradeoff`.

    Returns:
      NumPy array of upper bounds in [kappa, 1].

    Raises:
      ValueError: for out-of-range inputs, or a PLD over the memory budget (see :func:`pld_tradeoff`).

    >>> import numpy as np
    >>> g = rero_dpsgd_tradeoff([0.01], 2.0, 0.01, 100)
    >>> bool(0.01 <= g[0] < 0.1)
    True
    """
    check("kappa", kappa, lambda k: (k >= 0) & (k <= 1), "in [0, 1]")
    return 1.0 - pld_tradeoff(sigma, q, steps, kappa, **kwargs)
