r"""Noise calibration to a reconstruction-risk target: the smallest noise multiplier whose ReRo bound is small enough.

| symbol | meaning |
|---|---|
| ``rero`` | target: largest acceptable probability of a successful reconstruction, in (0, 1) |
| ``kappa`` | prior (baseline) success probability, in (0, 1); ``1 / k`` for a uniform prior over k candidates |
| ``q`` | Poisson sampling rate in (0, 1] (1 = full-batch DP-GD) |
| ``steps`` | number of noisy steps T |
| ``sigma`` | noise multiplier (noise std / clip norm) |

Routes (Hayes, Mahloujifar & Balle 2023: ``ReRo <= 1 - f(kappa)`` for a mechanism with trade-off function f):

- ``"gdp"`` (``q = 1``): T full-batch Gaussian steps are mu-GDP with ``mu = sqrt(T) / sigma``, so the bound is
  ``Phi(Phi^{-1}(kappa) + mu)`` and the answer is closed-form,
  ``sigma = sqrt(T) / (Phi^{-1}(rero) - Phi^{-1}(kappa))`` (``inf`` when ``rero <= kappa``: no noise level
  pushes the bound below the prior). Pure ``jnp`` for traced inputs: jittable, broadcasting, differentiable; concrete
  inputs are computed on the host in float64 and rounded up to the working dtype (see
  :func:`calibrate_sigma_for_rero` on float32).
- ``"tradeoff"`` (any q): a safeguarded secant search in log-sigma on
  :func:`recon_jax.accounting.rero_dpsgd_tradeoff` (the PLD trade-off curve of Poisson-subsampled DP-SGD;
  host-side, each evaluation composes a PLD). A sigma that the PLD refuses as too small for its memory budget counts
  as infeasible: for a target so loose that the answer lies below that limit, the result is the smallest sigma the
  PLD can certify (still meeting the target), never an error.
- ``"auto"``: ``"gdp"`` when ``q = 1``, otherwise ``"tradeoff"``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import special as jsp
from jax.typing import ArrayLike
from scipy import special as sps

from recon_jax._validation import HALF_OPEN_UNIT, OPEN_UNIT, Range, concrete_or_none, guard, nan_if
from recon_jax.accounting._pld_memory import PLDTooLarge
from recon_jax.accounting._search import feasible_edge
from recon_jax.accounting.dpsgd import rero_dpsgd_tradeoff

__all__ = ["calibrate_sigma_for_rero"]

ROUTES = ("auto", "gdp", "tradeoff")
_PROBABILITY = Range(OPEN_UNIT.predicate, "in (0, 1)")  # rero and kappa
_STEPS = Range(lambda v: (v >= 1) & (v < np.inf), "finite and >= 1")


def _guard(rero, kappa, steps, q=1.0, validate=True):
    """The argument checks (q: the full batch of the GDP route when not given) and the mask of the invalid entries,
    a concrete value judged in float64 (rero = 1 - 1e-9 or kappa = 1e-40 are valid though float32 cannot hold them:
    the GDP route takes their Phi^-1 on the host)."""
    return guard(("rero", rero, _PROBABILITY), ("kappa", kappa, _PROBABILITY), ("q", q, HALF_OPEN_UNIT),
                 ("steps", steps, _STEPS), validate=validate)


def _sigma_gdp_host(rero, kappa, steps) -> np.ndarray:
    """The GDP route in float64 NumPy on (broadcast) concrete values; NaN where invalid."""
    r, k, t = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (rero, kappa, steps)))
    with np.errstate(invalid="ignore"):
        ok = (r > 0) & (r < 1) & (k > 0) & (k < 1) & (t >= 1) & (t < np.inf)
        mu = sps.ndtri(np.where(ok, r, 0.5)) - sps.ndtri(np.where(ok, k, 0.5))
        sigma = np.where(mu > 0, np.sqrt(np.where(ok, t, 1.0)) / np.where(mu > 0, mu, 1.0), np.inf)
    return np.where(ok, sigma, np.nan)


def _round_up(sigma: np.ndarray, dtype) -> jax.Array:
    """Float64 sigmas in ``dtype``, rounded up (never below the float64 value less 4 ulp of it: conservative), as a
    JAX array. Raises ``ValueError`` where a finite sigma overflows ``dtype`` (float32 holds sigma < 3.4e38): the
    request needs more noise than the working dtype can state, and ``inf`` means "no sigma meets the target" here."""
    sigma = np.asarray(sigma, np.float64)
    dtype = np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        want = sigma * (1.0 + 4.0 * np.finfo(np.float64).eps)
        out = want.astype(dtype)
        out = np.where(out < want, np.nextafter(out, np.asarray(np.inf, dtype)), out)
    over = np.isfinite(sigma) & ~np.isfinite(out)
    if np.any(over):
        raise ValueError(f"the calibrated sigma ({float(sigma[over].ravel()[0]):.3g}) overflows {dtype.name} "
                         f"(largest {float(np.finfo(dtype).max):.3g}): steps, rero and kappa ask for more noise than "
                         f"{dtype.name} can state; enable float64 (jax_enable_x64) or ask for fewer steps")
    return jnp.asarray(out, dtype)


def _ndtri(p, bad, dtype):
    """Phi^-1(p) in ``dtype``, from the host in float64 when ``p`` is concrete (1 - 1e-9 rounds to 1 in float32 and
    1e-40 flushes to 0, whose Phi^-1 are infinite; their own are 6.0 and -13.2); safe (0) where ``bad``."""
    host = concrete_or_none(p)
    if host is not None:
        with np.errstate(invalid="ignore"):
            return jnp.asarray(sps.ndtri(np.where((host > 0) & (host < 1), host, 0.5)), dtype)
    return jsp.ndtri(jnp.where(bad, 0.5, jnp.asarray(p, dtype)))


def _sigma_gdp(rero, kappa, steps):
    dt = jnp.result_type(float)
    bad = _guard(rero, kappa, steps, validate=False)
    host = [concrete_or_none(v) for v in (rero, kappa, steps)]
    if all(h is not None for h in host):  # all on the host in float64, rounded up (and refused where it overflows)
        return nan_if(bad, _round_up(_sigma_gdp_host(*host), dt))
    mu_max = _ndtri(rero, bad, dt) - _ndtri(kappa, bad, dt)
    safe_mu = jnp.where(mu_max > 0, mu_max, 1.0)
    if host[2] is not None:  # steps = 1e300 overflows float32, its square root does not
        with np.errstate(invalid="ignore"):
            root = jnp.asarray(np.sqrt(np.where(host[2] >= 1, host[2], 1.0)), dt)
    else:
        root = jnp.sqrt(jnp.where(bad, 1.0, jnp.asarray(steps, dt)))
    sigma = jnp.where(mu_max > 0, root / safe_mu, jnp.inf)
    return nan_if(bad, sigma)


def _sigma_tradeoff(rero: float, kappa: float, q: float, steps: int, rtol: float, tradeoff_kwargs: dict) -> float:
    if rero <= kappa:
        return math.inf

    def bound(sigma):
        try:
            return float(rero_dpsgd_tradeoff([kappa], sigma, q, steps, **tradeoff_kwargs)[0])
        except PLDTooLarge:  # a sigma too small for the PLD's memory budget certifies nothing: infeasible
            return None

    # The search starts from the full-batch GDP answer (subsampling only lowers the bound).
    start = float(_sigma_gdp_host(rero, kappa, steps))  # in float64 whatever the working dtype
    found = feasible_edge(bound, rero, start, increasing=False, limits=(1e-6, 1e6), rtol=rtol)
    return math.inf if found.kind == "none" else found.x


def calibrate_sigma_for_rero(rero: ArrayLike, kappa: ArrayLike, q: ArrayLike, steps: ArrayLike, *, route: str = "auto",
                             rtol: float = 1e-3, **tradeoff_kwargs) -> jax.Array:
    """Smallest noise multiplier whose ReRo bound at prior ``kappa`` is at most ``rero`` (see the module docstring).

    Args:
      rero: target success probability(ies) in (0, 1).
      kappa: prior success probability(ies) in (0, 1).
      q: sampling rate(s) in (0, 1].
      steps: number(s) of noisy steps, finite and >= 1. All four broadcast. The ``"gdp"`` route takes real
        steps (``mu = sqrt(steps) / sigma``); the ``"tradeoff"`` route composes an integer number of steps and refuses
        a non-integer one.
      route: ``"auto"``, ``"gdp"`` (requires ``q = 1``; jittable) or ``"tradeoff"`` (host-side PLD).
      rtol: relative width of the final search bracket for ``"tradeoff"``; the returned sigma is its upper
        end, so the bound at it is <= ``rero``.
      **tradeoff_kwargs: passed to :func:`recon_jax.accounting.rero_dpsgd_tradeoff` (e.g.
        ``value_discretization_interval``).

    Returns:
      sigma with the broadcast shape (``inf`` where ``rero <= kappa``; NaN for invalid traced inputs).

    Raises:
      ValueError: for out-of-range concrete inputs (infinite steps included), an unknown route, ``route="gdp"`` with
        ``q < 1``, non-integer steps on the ``"tradeoff"`` route, or, for concrete inputs, a finite sigma that
        overflows the working dtype (float32: sigma > 3.4e38, e.g. ``steps = 1e80``; ``inf`` would read as "no sigma
        meets the target").

    Float32 (the default dtype): the arguments are judged in float64 and, when concrete, the whole computation runs
    in float64 on the host (the GDP closed form; the tradeoff route always does), so valid targets that float32 cannot
    hold (``rero = 1 - 1e-9``, which rounds to 1; ``kappa = 1e-40``, which flushes to 0; ``steps = 1e50``, which
    overflows) are calibrated exactly; the float64 sigma is then rounded *up* to float32 (never below the calibrated
    value). Traced arguments are rounded to float32 before the computation, so such values are invalid there (NaN),
    except those passed concrete beside traced ones, whose Phi^-1 or square root is taken on the host.

    >>> s = calibrate_sigma_for_rero(0.05, 0.01, 1.0, 100)   # 5% success at a 1% prior, 100 full-batch steps
    >>> round(float(s), 3)
    14.674
    >>> from recon_jax.bounds import rero_gdp
    >>> round(float(rero_gdp(0.01, 100 ** 0.5 / s)), 4)
    0.05
    """
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
    _guard(rero, kappa, steps, q)  # checks; the GDP route masks in _sigma_gdp
    if not rtol > 0:
        raise ValueError(f"rtol must be > 0, got {rtol}")
    q_concrete = concrete_or_none(q)
    full_batch = q_concrete is not None and bool(np.all(q_concrete == 1.0))
    if route == "auto":
        route = "gdp" if full_batch else "tradeoff"
    if route == "gdp":
        if not full_batch:
            raise ValueError("route='gdp' requires q = 1 (full batch); use route='tradeoff' for q < 1")
        out = _sigma_gdp(rero, kappa, steps)
        return out * jnp.ones(jnp.shape(q), out.dtype)
    vals = [concrete_or_none(v) for v in (rero, kappa, q, steps)]
    if any(v is None for v in vals):
        raise ValueError("route='tradeoff' runs on the host: rero, kappa, q and steps must be concrete")
    if not np.all(vals[3] == np.round(vals[3])):
        raise ValueError(f"steps must be whole numbers for route='tradeoff' (it composes an integer number of steps; "
                         f"route='gdp' takes real steps for q = 1); got {vals[3]}")
    b = np.broadcast_arrays(*vals)
    out = np.empty(b[0].shape, np.float64)
    for idx in np.ndindex(out.shape):
        r, k, qq, t = (float(x[idx]) for x in b)
        out[idx] = _sigma_tradeoff(r, k, qq, int(round(t)), rtol, tradeoff_kwargs)
    return _round_up(out, jnp.result_type(float))
