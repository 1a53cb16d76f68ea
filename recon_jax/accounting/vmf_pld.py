r"""Privacy loss distribution (PLD) of the von Mises-Fisher mechanism, Poisson-subsampled (tight accounting).

The VMF mechanism releases ``y ~ VMF(mu, kappa)`` on the sphere S^{p-1}, density proportional to
``exp(kappa mu^T y)``. For two mean directions ``mu1`` (with the target example) and ``mu0`` (without), the
privacy loss ``log VMF(y; mu1) / VMF(y; mu0) = kappa (mu1 - mu0)^T y`` is largest for antipodal directions
(the worst case Biswas et al.'s Prop. 1 uses too), where it is ``2 kappa cos(theta)`` with ``theta`` the angle
between ``y`` and ``mu1``. Under ``VMF(mu1)`` the angle has density

``g_+(theta) = exp(kappa cos theta) sin^{p-2}(theta) / Z``, ``theta in [0, pi]``, and ``g_-(theta) = g_+(pi - theta)``
under ``VMF(mu0)``, with ``Z = sqrt(pi) Gamma(nu + 1/2) (2 / kappa)^nu I_nu(kappa)``, ``nu = p/2 - 1``
(in ``t = cos theta`` this is the density ``e^{kappa t} (1 - t^2)^{(p-3)/2}`` on [-1, 1]). ``log Z`` is computed with
:func:`recon_jax.special.log_iv`, accurate at p = 13,700 and beyond.

Poisson subsampling with probability q (add/remove adjacency, as in ``dp_accounting``):

- remove: upper ``(1 - q) g_- + q g_+``, lower ``g_-``, loss ``L(theta) = log(1 - q + q e^{2 kappa cos theta})``;
- add: upper ``g_-``, lower ``(1 - q) g_- + q g_+``, loss ``-L(theta)``.

Both losses are monotone in ``theta``. The discretisation is pessimistic (an upper bound on every hockey-stick
divergence): the angle axis is cut at the preimages of the loss grid ``k * value_discretization_interval`` and on a
uniform grid, and the cell masses are integrated by 8-point Gauss-Legendre in ``theta`` (the integrand is smooth).
By default (``connect_dots=True``) the hockey-stick divergences at the grid points are summed from these masses,
plus all mass the cells do not cover (tails more than ``width`` curvature-widths from the modes, quadrature
deficit), and turned into a PMF by the pessimistic connect-the-dots construction of Doroshenko et al. (2022);
with ``connect_dots=False`` each cell's mass goes to the grid point at or above the largest loss in the cell
("privacy buckets") and the uncovered mass to an infinite loss, which is looser by up to one grid step per step.
Composition over steps and conversion to epsilon are ``dp_accounting``'s (``PrivacyLossDistribution.self_compose``,
pessimistic tail truncation). Host-side NumPy; not jittable.

Memory: a large ``kappa`` (the loss spans ``4 kappa``) or a fine grid makes the step's cells and loss grid, and the
FFT that composes the steps, huge. Both are sized first (the cells and grid points in closed form; the FFT from the
step's probabilities, as ``dp_accounting`` sizes it) and refused above 2 GiB with a ``ValueError`` naming kappa
and about the largest kappa that fits (:mod:`recon_jax.accounting._pld_memory`, shared with the Gaussian PLD
routes). Every finite kappa > 0 is either computed or refused: the mode window is in a form that neither divides
by ``1 - cos^2`` (0 in float64 once kappa >~ 1e8 p) nor squares kappa, and where the loss range passes float64's
exp range (2 kappa > 600) the remove direction's ``e^eps P_-[L > eps]`` is taken in logs.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from recon_jax._validation import FINITE_POSITIVE, HALF_OPEN_UNIT, check
from recon_jax.accounting import _pld_memory
from recon_jax.accounting._host import host_float64

__all__ = ["vmf_pld", "vmf_pld_epsilon"]

_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)
# Above this 2 kappa the remove direction's hockey-stick divergences take e^eps times g_-'s mass in logs: g_-'s mass
# near theta = 0 (~e^{-2 kappa}) underflows past 2 kappa ~ 745 and e^eps overflows past 709 (a NaN, or masses
# summing to 2.5 at p = 2, before). Below it the product as such (unchanged bit for bit).
_LOG_LOSS_RANGE = 600.0
_WIDTH, _CELLS = 20.0, 2048  # vmf_pld's defaults (vmf_pld_epsilon uses them too)
# Peak resident memory of one step, measured on a 2-core CPU: <= 350 bytes per cell while the cell masses are
# integrated (8 quadrature nodes each), then <= 238 bytes per point of the loss grid (both directions: divergences,
# dp_accounting's PMFs) beside the cells' masses and edges (48 bytes each).
_CELL_BYTES, _GRID_BYTES, _KEPT_CELL_BYTES = 360, 250, 48


def _log_normaliser(kappa: float, dim: float) -> float:
    """log of int_0^pi exp(kappa cos theta) sin^{p-2}(theta) dtheta, through log I_nu (float64)."""
    from recon_jax.special import log_iv

    nu = dim / 2.0 - 1.0
    with host_float64():
        liv = float(log_iv(np.float64(nu), np.float64(kappa)))
    return 0.5 * math.log(math.pi) + math.lgamma(nu + 0.5) + nu * math.log(2.0 / kappa) + liv


def _remove_loss(theta: np.ndarray, kappa: float, q: float) -> np.ndarray:
    """L(theta) = log(1 - q + q exp(2 kappa cos theta)), overflow-free."""
    x = 2.0 * kappa * np.cos(theta)
    if q == 1.0:
        return x
    return np.logaddexp(math.log1p(-q), math.log(q) + x)


def _remove_loss_preimage(values: np.ndarray, kappa: float, q: float) -> np.ndarray:
    """theta with L(theta) = value (values strictly inside the loss range)."""
    v = np.asarray(values, np.float64)
    # log(e^v - (1 - q)): v + log1p(-(1 - q) e^{-v}) for v > 0, log(expm1(v) + q) otherwise.
    pos = v + np.log1p(-(1.0 - q) * np.exp(-np.maximum(v, 0.0)))
    neg = np.log(np.maximum(np.expm1(np.minimum(v, 0.0)) + q, np.finfo(np.float64).tiny))
    cos = (np.where(v > 0, pos, neg) - math.log(q)) / (2.0 * kappa)
    return np.arccos(np.clip(cos, -1.0, 1.0))


def _mode_window(kappa: float, dim: float, width: float) -> tuple[float, float]:
    """[lo, hi] in theta around the mode of g_+, +- width / sqrt(curvature of -log g_+ at the mode).

    The mode's cosine ``c`` is the root in (0, 1] of ``kappa c^2 + m c - kappa`` (``m = p - 2``): with
    ``r = m / (2 kappa)``, ``c = 1 / (r + sqrt(1 + r^2))`` and ``sin^2 = 1 - c^2 = 2 r c``, and the curvature
    ``kappa c + m / sin^2 = kappa (c + 1 / c)`` (``kappa`` if ``m = 0``). These forms hold for every finite kappa > 0:
    ``1 - c^2`` computed as such is 0 once ``c`` rounds to 1 (kappa >~ 1e8 m; a ZeroDivisionError before), and
    ``kappa^2`` overflows past 1e154."""
    m = dim - 2.0
    if m == 0:
        theta, sd = 0.0, 1.0 / math.sqrt(kappa)
    else:
        r = 0.5 * (m / kappa)  # m / (2 kappa) would overflow 2 kappa past 9e307
        big = r + math.hypot(1.0, r)  # 1 / c
        if math.isfinite(big):
            c = 1.0 / big
            theta = math.atan2(math.sqrt(2.0 * r * c), c)
            sd = 1.0 / (math.sqrt(kappa) * math.sqrt(c + big))
        else:  # kappa -> 0: the mode at pi / 2, curvature m
            theta, sd = 0.5 * math.pi, 1.0 / math.sqrt(m)
    return max(0.0, theta - width * sd), min(math.pi, theta + width * sd)


def _windows(kappa: float, dim: float, width: float) -> list[tuple[float, float]]:
    """The integration windows in theta: around the mode of g_+ and its mirror (one window where they overlap)."""
    lo, hi = _mode_window(kappa, dim, width)
    windows = [(lo, hi), (math.pi - hi, math.pi - lo)]  # g_+ and its mirror g_-
    return [(lo, math.pi - lo)] if windows[1][0] <= windows[0][1] else windows


def _one_step_sizes(kappa: float, dim: float, q: float, step: float, width: float, cells: int) -> tuple[int, int]:
    """Upper bounds on the loss-grid points (one direction) and on the cells of one step, in closed form (as
    :func:`_vmf_pld_cached` lays them out; one point of slack at each end of the grid). ``inf`` for both where the
    loss range is not a finite float (kappa > ~9e307, where ``2 kappa`` overflows)."""
    windows = _windows(kappa, dim, width)

    def loss(theta):
        return float(_remove_loss(np.array(theta), kappa, q)) / step

    ends = [(loss(a), loss(b)) for a, b in windows]
    if not all(math.isfinite(v) for pair in ends for v in pair):
        return math.inf, math.inf
    n_cells = sum(cells + max(0, math.floor(la) - math.ceil(lb) + 1) for la, lb in ends)
    k_lo, k_hi = math.floor(ends[-1][1]), math.ceil(ends[0][0])
    return k_hi - k_lo + 3, n_cells


def _step_bytes(kappa: float, dim: float, q: float, step: float, width: float, cells: int) -> float:
    """Peak bytes of one step, from :func:`_one_step_sizes`."""
    points, n_cells = _one_step_sizes(kappa, dim, q, step, width, cells)
    return max(_CELL_BYTES * n_cells, _GRID_BYTES * points + _KEPT_CELL_BYTES * n_cells)


def _max_kappa(dim: float, q: float, step: float, width: float, cells: int, upper: float) -> float:
    """About the largest kappa below ``upper`` whose step fits the budget (bisection on log kappa; 0 if none from
    1e-300 up does). The step's size grows with kappa (the loss spans up to ``4 kappa``)."""
    def fits(log_kappa):
        return _step_bytes(math.exp(log_kappa), dim, q, step, width, cells) <= _pld_memory.BUDGET_BYTES

    lo, hi = math.log(1e-300), math.log(upper)
    if not fits(lo):
        return 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return math.exp(lo)


def _cell_edges(lo: float, hi: float, kappa: float, q: float, step: float, cells: int) -> np.ndarray:
    uniform = np.linspace(lo, hi, cells + 1)
    l_hi, l_lo = float(_remove_loss(np.array(lo), kappa, q)), float(_remove_loss(np.array(hi), kappa, q))
    k0, k1 = math.ceil(l_lo / step), math.floor(l_hi / step)  # sized beforehand by _one_step_sizes
    pre = _remove_loss_preimage(np.arange(k0, k1 + 1, dtype=np.float64) * step, kappa, q) if k1 >= k0 else np.empty(0)
    pre = pre[(pre > lo) & (pre < hi)]
    return np.unique(np.concatenate([uniform, pre]))


def _cell_masses(edges: np.ndarray, kappa: float, dim: float, log_z: float, logs: bool = False) -> tuple:
    """Masses of g_+ and g_- on the cells [edges[j], edges[j+1]] (8-point Gauss-Legendre per cell); with ``logs``,
    also the log of g_-'s masses, finite where they underflow (``e^{-2 kappa}`` near theta = 0)."""
    half = 0.5 * np.diff(edges)
    mid = 0.5 * (edges[1:] + edges[:-1])
    th = mid[:, None] + half[:, None] * _GL_X[None, :]
    base = (dim - 2.0) * np.log(np.sin(th)) - log_z if dim != 2 else np.full(th.shape, -log_z)
    kc = kappa * np.cos(th)
    plus = half * (np.exp(base + kc) @ _GL_W)
    if not logs:
        return plus, half * (np.exp(base - kc) @ _GL_W)
    a = base - kc
    top = a.max(axis=1)
    log_minus = np.log(half) + top + np.log(np.exp(a - top[:, None]) @ _GL_W)
    return plus, np.exp(log_minus), log_minus


def _dense_pmf(index: np.ndarray, mass: np.ndarray, step: float):
    from dp_accounting.pld import pld_pmf

    lower = int(index.min())
    probs = np.bincount(index - lower, weights=mass)
    infinity = max(0.0, 1.0 - float(math.fsum(mass)))
    pmf = pld_pmf.DensePLDPmf(step, lower, probs, infinity, pessimistic_estimate=True)
    return pmf, _pld_memory.summarise(lower, probs)


def _connect_dots(k_lo: int, k_hi: int, deltas: np.ndarray, step: float):
    """Pessimistic connect-the-dots PMF (Doroshenko et al. 2022) from delta(k * step), k = k_lo..k_hi, and the
    summary the composition's memory guard needs (from the same probabilities, computed here)."""
    from dp_accounting.pld import pld_pmf

    deltas = np.clip(deltas, 0.0, 1.0)
    pmf = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(step, k_lo, k_hi, deltas)
    return pmf, _pld_memory.summarise(k_lo, _pld_memory.connect_dots_probs(deltas, step))


@functools.lru_cache(maxsize=64)
def _vmf_pld_cached(kappa: float, dim: float, q: float, step: float, width: float, cells: int, connect_dots: bool):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    log_z = _log_normaliser(kappa, dim)
    windows = _windows(kappa, dim, width)
    edges = [_cell_edges(a, b, kappa, q, step, cells) for a, b in windows]
    # Buckets need no logs: masses lost to underflow (< 2^-1022 per node; no e^eps factor) go to the infinite loss.
    logs = connect_dots and 2.0 * kappa > _LOG_LOSS_RANGE
    masses = [_cell_masses(e, kappa, dim, log_z, logs) for e in edges]
    plus, minus = np.concatenate([m[0] for m in masses]), np.concatenate([m[1] for m in masses])
    left, right = np.concatenate([e[:-1] for e in edges]), np.concatenate([e[1:] for e in edges])
    mix = (1.0 - q) * minus + q * plus
    if not connect_dots:  # privacy buckets: each cell's mass at the grid point at or above its largest loss
        # Remove: the loss decreases in theta, so a cell's largest loss is at its left edge; add: -L, right edge.
        idx_remove = np.ceil(_remove_loss(left, kappa, q) / step).astype(np.int64)
        idx_add = np.ceil(-_remove_loss(right, kappa, q) / step).astype(np.int64)
        remove = _dense_pmf(idx_remove, mix, step)
        add = None if q == 1.0 else _dense_pmf(idx_add, minus, step)
    else:
        # Hockey-stick divergences at the loss grid eps_k = k * step, from cumulative cell masses. Uncovered mass
        # (tails, quadrature deficit) is added to each delta, which keeps them upper bounds.
        k_lo = math.floor(float(_remove_loss(np.array(windows[-1][1]), kappa, q)) / step)
        k_hi = math.ceil(float(_remove_loss(np.array(windows[0][0]), kappa, q)) / step)
        ks = np.arange(k_lo, k_hi + 1, dtype=np.float64)
        theta = _remove_loss_preimage(ks * step, kappa, q)  # decreasing in k; edges of the cells inside windows
        eps = ks * step
        zero = np.zeros(1)
        # remove: loss > eps_k  <=>  theta < theta_k (cells whose right edge is <= theta_k)
        j = np.searchsorted(right, theta, side="right")
        up, low = np.concatenate([zero, np.cumsum(mix)]), np.concatenate([zero, np.cumsum(minus)])
        if logs:  # e^eps low: e^eps overflows past 709 and low underflows (cells near theta = 0), both far earlier
            log_low = np.logaddexp.accumulate(np.concatenate([[-np.inf], *(m[2] for m in masses)]))
            with np.errstate(over="ignore"):  # inf where e^eps low > 1e308: delta < 0, clipped to 0
                d_remove = up[j] + max(0.0, 1.0 - up[-1]) - np.exp(eps + log_low[j])
        else:
            d_remove = up[j] + max(0.0, 1.0 - up[-1]) - np.exp(eps) * low[j]
        remove = _connect_dots(k_lo, k_hi, d_remove, step)
        add = None
        if q < 1.0:
            # add: loss -L > eps  <=>  theta > preimage(-eps) (cells whose left edge is >= it); eps = -k * step
            j = np.searchsorted(left, theta, side="left")
            up_t = np.concatenate([np.cumsum(minus[::-1])[::-1], zero])
            low_t = np.concatenate([np.cumsum(mix[::-1])[::-1], zero])
            d_add = up_t[j] + max(0.0, 1.0 - up_t[0]) - np.exp(-eps) * low_t[j]
            add = _connect_dots(-k_hi, -k_lo, d_add[::-1], step)
    if add is None:  # q = 1: add and remove PLDs coincide (theta -> pi - theta)
        return pld_lib.PrivacyLossDistribution(remove[0]), (remove[1],)
    return pld_lib.PrivacyLossDistribution(remove[0], add[0]), (remove[1], add[1])


def _check(kappa, dim, q, step):
    check("kappa", kappa, FINITE_POSITIVE)
    check("dim", dim, lambda p: (p >= 2) & (p < np.inf), "finite and >= 2")
    check("q", q, HALF_OPEN_UNIT)
    check("value_discretization_interval", step, FINITE_POSITIVE)


_OTHER_ALTERNATIVES = "a larger value_discretization_interval or vmf_epsilon's RDP approaches ('best', 1, 2)"
_ALTERNATIVES = "a smaller kappa, " + _OTHER_ALTERNATIVES


def _checked_pld(kappa, dim, q, value_discretization_interval, width, cells, connect_dots):
    """:func:`_vmf_pld_cached` after the argument checks and the one-step memory guard: raises ``PLDTooLarge`` (a
    ``ValueError`` naming kappa, :mod:`recon_jax.accounting._pld_memory`) before any array of the step is built."""
    kappa, dim, q, step = float(kappa), float(dim), float(q), float(value_discretization_interval)
    _check(kappa, dim, q, step)
    width, cells, connect_dots = float(width), int(cells), bool(connect_dots)
    need = _step_bytes(kappa, dim, q, step, width, cells)
    if need > _pld_memory.BUDGET_BYTES:
        size = _pld_memory.gib(need) if math.isfinite(need) else "more than the 2 GiB limit (4 kappa overflows)"
        raise _pld_memory.PLDTooLarge(
            f"kappa = {kappa:g} is too large for the VMF PLD at dim = {dim:g}, q = {q:g} (value_discretization_"
            f"interval={step:g}): one step's privacy-loss distribution needs {size}; use a smaller kappa (here kappa "
            f"must be <= about {_max_kappa(dim, q, step, width, cells, kappa):.3g}), {_OTHER_ALTERNATIVES}")
    return _vmf_pld_cached(kappa, dim, q, step, width, cells, connect_dots)


def vmf_pld(kappa: float, dim: float, q: float, *, value_discretization_interval: float = 1e-3,
            width: float = _WIDTH, cells: int = _CELLS, connect_dots: bool = True):
    """One step of the Poisson-subsampled VMF mechanism as a ``dp_accounting`` ``PrivacyLossDistribution``.

    Pessimistic (its hockey-stick divergences, also after ``self_compose``, are upper bounds); see the module
    docstring for the construction.

    Args:
      kappa: VMF concentration > 0.
      dim: dimension p >= 2 of the sphere's ambient space (the gradient size).
      q: Poisson sampling probability in (0, 1].
      value_discretization_interval: spacing of the privacy-loss grid (smaller = tighter, slower).
      width: half-width of the integration windows around each mode, in curvature standard deviations (mass
        outside goes to an infinite loss).
      cells: uniform cells per window, added to the loss-grid preimages.
      connect_dots: ``True`` (default): pessimistic connect-the-dots discretisation (Doroshenko et al. 2022) from
        the hockey-stick divergences at the grid points; ``False``: privacy buckets (each cell's mass at the grid
        point at or above its largest loss), looser by up to one grid step per release.

    Returns:
      ``dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution`` of one step (add and remove).

    Raises:
      ValueError: for out-of-range inputs, or where building the step would need more than 2 GiB (its cells and
        loss grid, counted in closed form first; a large ``kappa`` or a small ``value_discretization_interval``).

    >>> pld = vmf_pld(2.0, 3, 1.0, value_discretization_interval=1e-3)
    >>> bool(pld.get_epsilon_for_delta(0.0) <= 4.0 + 1e-3)  # the loss 2 kappa cos(theta) never exceeds 2 kappa
    True
    """
    return _checked_pld(kappa, dim, q, value_discretization_interval, width, cells, connect_dots)[0]


def vmf_pld_epsilon(kappa: float, dim: float, q: float, steps: int, delta: float, *,
                    value_discretization_interval: float = 1e-3) -> float:
    """Epsilon of ``steps`` Poisson-subsampled VMF releases from the composed pessimistic PLD (an upper bound).

    Args:
      kappa: concentration > 0; dim: dimension p >= 2; q: sampling probability in (0, 1].
      steps: number of composed releases >= 1 (DP-SGD steps).
      delta: target delta in (0, 1).
      value_discretization_interval: privacy-loss grid spacing.

    Returns:
      epsilon (float; ``inf`` when the infinite-loss mass alone exceeds ``delta``).

    Raises:
      ValueError: for out-of-range inputs, or where one step (see :func:`vmf_pld`) or composing the steps (the FFT
        of ``dp_accounting``'s ``self_compose``, sized from the step's probabilities) would need more than 2 GiB.

    >>> e1 = vmf_pld_epsilon(50.0, 100, 0.1, 10, 1e-5, value_discretization_interval=1e-3)
    >>> e2 = vmf_pld_epsilon(50.0, 100, 0.1, 20, 1e-5, value_discretization_interval=1e-3)
    >>> bool(0.0 < e1 < e2)
    True
    """
    if not (steps >= 1 and float(steps) == int(steps)):
        raise ValueError(f"steps must be an integer >= 1; got {steps}")
    if not (0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1); got {delta}")
    steps = int(steps)
    pld, directions = _checked_pld(kappa, dim, q, value_discretization_interval, _WIDTH, _CELLS, True)

    def refusal(need):
        return (f"kappa = {float(kappa):g} is too large for the VMF PLD at dim = {float(dim):g}, q = {float(q):g}, "
                f"steps = {steps} (value_discretization_interval={float(value_discretization_interval):g}): composing "
                f"the steps needs {_pld_memory.gib(need)}; use fewer steps, {_ALTERNATIVES}")

    exact = _pld_memory.composed_size(directions, steps)  # from the one step's own probabilities: no bound needed
    _pld_memory.check_composition(steps, exact, lambda: directions, _pld_memory.fft_bytes, refusal)
    if steps > 1:
        pld = pld.self_compose(steps)
    return float(pld.get_epsilon_for_delta(float(delta)))
