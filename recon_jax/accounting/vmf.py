r"""Von Mises-Fisher (VMF) mechanism: RDP (Biswas et al. Props 1-2) and the paper's two DP accounting routes.

| symbol | meaning |
|---|---|
| ``kappa`` | VMF concentration (> 0); larger = less noise |
| ``dim`` (p) | dimension of the gradient vector (the sphere is S^{p-1}), >= 2; ``nu = p/2 - 1`` |
| ``q`` (gamma) | Poisson sampling probability |
| ``compositions`` (N) | how many times the subsampled mechanism is composed |
| ``tau_alpha`` | RDP of one (non-subsampled) VMF release at order alpha |

**Which count to pass as ``compositions``.** Biswas et al.'s Tables I and IV compose over N = 3 *epochs*
(``compositions=3``), although each epoch of DP-SGD makes ``1/q`` subsampled releases. A correct DP-SGD
accountant composes over *steps*: pass ``compositions = epochs / q`` (about 1,406 for their setting). Both
are computable; only the second is a valid guarantee for DP-SGD with VMF noise.

Approach 1 (Sec. III-A1): convert the VMF's RDP to (eps, delta(eps)) with Canonne et al.'s Prop. 2.11 (infimum
over a dense order grid), amplify by subsampling (eps_s = log(1 + q(e^eps - 1)), delta_s = q delta), compose
with Kairouz et al.'s theorem, and optimise the base eps: the first KOV branch (N eps_s) is minimised exactly
at the root where the leftover delta reaches zero; the other two branches are minimised over a fine grid of
base eps above that root.

Approach 2 (Sec. III-A2): Zhu-Wang subsampled RDP at integer orders, interpolation (convexity of the
cumulant), multiplication by N, Canonne et al. conversion.

``approach="pld"`` (not in the paper): the privacy loss distribution of the Poisson-subsampled VMF mechanism for
the worst-case (antipodal) pair, discretised pessimistically and composed ``compositions`` times with
``dp_accounting`` (:mod:`recon_jax.accounting.vmf_pld`). An upper bound like the other two, and much tighter over
many steps; host-side.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from recon_jax._validation import (FINITE_POSITIVE, Range, check, concrete_or_none, guard,
                                   guard_orders, nan_if, pad_batch)
from recon_jax.accounting import _pld_memory
from recon_jax.accounting._host import host_float64
from recon_jax.accounting._pld_memory import PLDTooLarge
from recon_jax.accounting._search import feasible_edge
from recon_jax.accounting.conversions import delta_from_rdp, eps_from_rdp, kov_composition
from recon_jax.accounting.rdp import rdp_poisson_subsampled
from recon_jax.accounting.vmf_pld import vmf_pld_epsilon
from recon_jax.special import log_iv

__all__ = ["rdp_vmf", "rdp_vmf_multi", "vmf_epsilon", "calibrate_vmf_kappa"]

# Orders for approach 2: integers 2..256 plus a fractional grid below 11 (filled by interpolation).
_AP2_MAX_ORDER = 256
_AP2_ORDERS = np.unique(np.concatenate([np.round(np.arange(1.01, 1.1, 0.01), 2), np.round(np.arange(1.1, 11.0, 0.1), 1),
                                        np.arange(2, _AP2_MAX_ORDER + 1)]).astype(np.float64))
# Dense order grid for approach 1's infimum over alpha in (1, inf).
_AP1_ORDERS = 1.0 + np.logspace(-4, 4, 1601)
# Relative offsets above the root eps* at which KOV's second and third branches are tried.
_AP1_EPS_OFFSETS = np.concatenate([[0.0], np.logspace(-6, 1.5, 600)])


_DIM = Range(lambda p: (p >= 2) & (p < np.inf), "finite and >= 2")


def _guard_vmf(kappa, dim, names=("kappa", "dim")):
    """Checks 0 < kappa < inf and 2 <= dim < inf (broadcast together; ``names``: the caller's argument names) and
    returns the mask of the invalid entries."""
    return guard((names[0], kappa, FINITE_POSITIVE), (names[1], dim, _DIM))


# log I_nu(c kappa) - log I_nu(kappa) - nu log c (c = 2 alpha - 1) is a small difference of terms ~ nu log c: taken
# from two log_iv values it loses all precision once nu >> kappa (dim = 1e13, kappa = 1e5 gave tau = 0; dim = 1e15,
# kappa = 10 gave 2.0 for 4e-13). Written without the cancellation instead (see _log_bessel_excess).
_EXCESS_TERMS = 30  # series terms; each term ratio is <= 1/m on the series branch, so 1/30! ~ 4e-33 is omitted
_NU_DEBYE_DIFF = 1e4  # from this order on, outside the series range, the Debye expansion's difference is used


def _debye_correction(t, nu):
    """log(1 + U_1(t)/nu + U_2(t)/nu^2 + U_3(t)/nu^3), DLMF 10.41.10; U_4/nu^4 < 1e-16 for nu >= 1e4."""
    u1 = t * (3.0 - 5.0 * t * t) / 24.0
    u2 = t * t * (81.0 - 462.0 * t * t + 385.0 * t**4) / 1152.0
    u3 = t**3 * (30375.0 - 369603.0 * t * t + 765765.0 * t**4 - 425425.0 * t**6) / 414720.0
    return jnp.log1p(u1 / nu + u2 / nu**2 + u3 / nu**3)


def _log_bessel_excess(nu, kappa, a, lv_ratio):
    """``log I_nu(c kappa) - log I_nu(kappa) - nu log c``, ``c = 2a - 1``, free of the cancellation; broadcast.

    ``lv_ratio``: ``log I_nu(c kappa) - log I_nu(kappa)`` from :func:`log_iv`, used where no cancellation occurs.

    - ``c kappa <= 2 sqrt(nu + 1)``: ``log I_nu(x) = nu log(x/2) - lgamma(nu + 1) + log 0F1(; nu + 1; x^2/4)``
      (DLMF 10.25.2), so the excess is ``log1p(sum_m t_m (c^{2m} - 1) / (1 + sum_m t_m))`` with
      ``t_m = (kappa^2/4)^m / (m! (nu + 1)_m)``; ``c^{2m} - 1 = expm1(2m log c)``: nothing cancels.
    - otherwise, ``nu >= 1e4``: the Debye expansion (DLMF 10.41.3) at ``z = c kappa / nu`` minus at ``kappa / nu``,
      where ``nu log c`` cancels exactly: ``nu [h(z_1) - h(z_0)] - (log R_1 - log R_0) / 2 + corrections`` with
      ``R = sqrt(1 + z^2) = 1 + s``, ``h = s - log1p(s / 2)``.
    - otherwise (``nu < 1e4``): ``lv_ratio - nu log c``; its rounding is ~1e-16 nu relative, below 1e-12.
    """
    c = 2.0 * a - 1.0
    log_c = jnp.log1p(2.0 * (a - 1.0))
    series = c * kappa <= 2.0 * jnp.sqrt(nu + 1.0)
    debye = ~series & (nu >= _NU_DEBYE_DIFF)
    # Series branch (safe inputs elsewhere, so that neither branch makes NaN, in values or gradients).
    # In logs: c^{2m} overflows float32 (c = 7, m = 30) where t_m underflows, and 0 * inf is NaN.
    y0 = 0.25 * jnp.square(jnp.where(series, kappa, 1.0))
    m = jnp.arange(1, _EXCESS_TERMS + 1, dtype=y0.dtype)
    log_terms = jnp.cumsum(jnp.log(y0)[..., None] - jnp.log(m) - jnp.log(nu[..., None] + m), axis=-1)
    x = 2.0 * m * log_c[..., None]
    log_grow = x + jnp.log(-jnp.expm1(-x))  # log(expm1(x)), x > 0, for any size of x
    by_series = jnp.log1p(jnp.sum(jnp.exp(log_terms + log_grow), axis=-1)
                          / (1.0 + jnp.sum(jnp.exp(log_terms), axis=-1)))
    # Debye branch.
    nu_d = jnp.where(debye, nu, _NU_DEBYE_DIFF)
    k_d = jnp.where(debye, kappa, 1.0)

    def parts(z):
        r = jnp.hypot(1.0, z)
        s = z * (z / (1.0 + r))  # r - 1 without cancellation (and without overflowing z^2)
        return nu_d * (s - jnp.log1p(0.5 * s)) - 0.5 * jnp.log(r) + _debye_correction(1.0 / r, nu_d)

    by_debye = parts(c * k_d / nu_d) - parts(k_d / nu_d)
    by_log_iv = lv_ratio - nu * log_c
    return jnp.where(series, by_series, jnp.where(debye, by_debye, by_log_iv))


def _rdp_vmf(kappa, dim, orders):
    """Prop. 1 without validation; kappa, dim broadcast; orders [n] -> [..., n]. One log_iv evaluation."""
    dt = jnp.result_type(float)
    kappa = jnp.asarray(kappa, dt)[..., None]
    nu = jnp.asarray(dim, dt)[..., None] / 2.0 - 1.0
    a = jnp.asarray(orders, dt)
    two_am1 = 2.0 * a - 1.0
    xs = two_am1 * kappa * jnp.ones_like(nu)  # [..., n]
    x = jnp.concatenate([jnp.broadcast_to(kappa, xs.shape[:-1] + (1,)), xs], axis=-1)  # [..., 1 + n]
    lv = log_iv(jnp.broadcast_to(nu, x.shape), x)
    shape = xs.shape
    num = _log_bessel_excess(jnp.broadcast_to(nu, shape), jnp.broadcast_to(kappa, shape), jnp.broadcast_to(a, shape),
                             lv[..., 1:] - lv[..., :1])
    return jnp.maximum(num, 0.0) / (a - 1.0)


@jax.jit
def _rdp_vmf_jit(kappa, dim, orders):
    return _rdp_vmf(kappa, dim, orders)


def _vmf_curves(kappa, dim):
    """Everything the two approaches need from log I, in ONE log_iv call (scalar kappa, dim).

    Returns (tau on _AP1_ORDERS, tau on 2..L, KL divergence of antipodal VMFs).
    """
    dt = jnp.result_type(float)
    kappa = jnp.asarray(kappa, dt)
    nu = jnp.asarray(dim, dt) / 2.0 - 1.0
    orders = np.concatenate([_AP1_ORDERS, np.arange(2, _AP2_MAX_ORDER + 1, dtype=np.float64)])
    two_am1 = 2.0 * orders - 1.0
    x = jnp.concatenate([kappa[None], kappa[None], two_am1 * kappa])
    nus = jnp.concatenate([nu[None], (nu + 1.0)[None], jnp.full(orders.shape, nu)])
    lv = log_iv(nus, x)
    excess = _log_bessel_excess(jnp.full(orders.shape, nu), jnp.full(orders.shape, kappa), jnp.asarray(orders, dt),
                                lv[2:] - lv[0])
    tau = jnp.maximum(excess, 0.0) / (orders - 1.0)
    kl = 2.0 * kappa * jnp.exp(lv[1] - lv[0])  # 2 kappa I_{nu+1}(kappa) / I_nu(kappa)
    n1 = _AP1_ORDERS.size
    return tau[:n1], tau[n1:], kl


def rdp_vmf(kappa: ArrayLike, dim: ArrayLike, orders: ArrayLike) -> jax.Array:
    """RDP of the VMF mechanism on S^{dim-1} (Biswas et al. Prop. 1; antipodal centres, the worst case).

    ``tau_alpha = [nu log(1/(2 alpha - 1)) + log(I_nu((2 alpha - 1) kappa) / I_nu(kappa))] / (alpha - 1)``,
    ``nu = dim/2 - 1``. The ``nu log(1/(2 alpha - 1))`` term cancels most of the log-Bessel ratio once ``dim`` is
    large against ``kappa`` (or ``kappa`` small); it is cancelled analytically (power series of ``I_nu`` for
    ``(2 alpha - 1) kappa <= 2 sqrt(nu + 1)``, the difference of Debye expansions for ``nu >= 1e4`` beyond), and
    :func:`recon_jax.special.log_iv` is used directly only where no cancellation occurs. Checked against mpmath
    (~1e-12 relative in float64) for dims 2 to 1e20 and kappas 1e-6 to 1e9.

    Args:
      kappa: concentration(s), finite and > 0; dim: dimension(s), finite and >= 2 (broadcast together).
      orders: Renyi orders > 1 (scalar or 1-D; may be traced).

    Returns:
      Array ``broadcast(kappa, dim).shape + orders.shape``. Where ``log_iv`` is used (``dim < 2e4``, large
      ``kappa``) the result is a difference of log-Bessel values of size ~``dim``: float32 loses ~1e-7 ``dim``
      absolute there, divided by ``alpha - 1``; use float64 (``jax_enable_x64``) for accounting.

    Raises:
      ValueError: for kappa <= 0 or infinite, dim < 2 or infinite, or an order <= 1 (concrete values; traced ones
        give NaN).

    >>> import numpy as np
    >>> r = rdp_vmf(1.0, 3, [2.0])  # p = 3: I_{1/2}(x) ∝ sinh(x)/sqrt(x), so tau_2 = log(sinh(3)/(3 sinh(1)))
    >>> bool(abs(float(r[0]) - np.log(np.sinh(3.0) / (3 * np.sinh(1.0)))) < 1e-5)
    True
    """
    bad = _guard_vmf(kappa, dim)  # traced input: NaN, not RDP 0
    dt = jnp.result_type(float)
    bad_orders = guard_orders(orders, dt)  # its own axis; concrete orders that round to 1 in dt: an error
    orders_arr = jnp.asarray(orders, dt)
    out = _rdp_vmf_jit(kappa, dim, jnp.atleast_1d(orders_arr))
    out = out.reshape(out.shape[:-1] + orders_arr.shape)
    return nan_if(bad[(...,) + (None,) * orders_arr.ndim] | bad_orders, out)


def rdp_vmf_multi(kappas: ArrayLike, dims: ArrayLike, orders: ArrayLike) -> jax.Array:
    """RDP of independent VMF mechanisms on R blocks (Biswas et al. Prop. 2): the sum of the blocks' RDP.

    Args:
      kappas: concentrations, shape [..., R]; dims: block dimensions, shape [..., R] (broadcast).
      orders: Renyi orders > 1 (scalar or 1-D).

    Returns:
      Array ``[..., len(orders)]`` (``[...]`` for a scalar order): the summed RDP; NaN under ``jit`` where any block's
      kappa or dim, or the order, is invalid.

    Raises:
      ValueError: for kappas <= 0 or infinite, dims < 2 or infinite, or an order <= 1.

    >>> import numpy as np
    >>> one = rdp_vmf(5.0, 100, [2.0])
    >>> two = rdp_vmf_multi([5.0, 5.0], [50, 50], [2.0])  # Prop. 3: splitting never helps
    >>> bool(two[0] >= one[0])
    True
    """
    # The mask is kept (it was discarded: under jit kappas = [-5, 5] summed a plausible RDP, that of [5, 5]); one
    # invalid block makes the whole sum NaN.
    bad = jnp.any(jnp.atleast_1d(_guard_vmf(kappas, dims, names=("kappas", "dims"))), axis=-1)  # [...]
    dt = jnp.result_type(float)
    bad_orders = guard_orders(orders, dt)  # its own axis; concrete orders that round to 1 in dt: an error
    orders_arr = jnp.asarray(orders, dt)
    per_block = _rdp_vmf_jit(kappas, dims, jnp.atleast_1d(orders_arr))  # [..., R, n]
    out = jnp.sum(per_block, axis=-2)
    out = out.reshape(out.shape[:-1] + orders_arr.shape)
    return nan_if(bad[(...,) + (None,) * orders_arr.ndim] | bad_orders, out)


def _approach2(tau_int, kl, q, n, delta, interpolation="cumulant"):
    """Biswas Sec. III-A2 from the VMF RDP at orders 2..L (``tau_int``) and its KL divergence ``kl``."""
    if interpolation == "cumulant":
        sub = rdp_poisson_subsampled(tau_int, q, _AP2_ORDERS)
        return eps_from_rdp(_AP2_ORDERS, n * sub, delta)
    # "paper": Biswas et al.'s linear interpolation of tau itself between integer orders, with
    # tau^s_1 = q * KL and KL = 2 kappa I_{nu+1}(kappa) / I_nu(kappa) (their Sec. III-A2).
    int_orders = np.arange(2, _AP2_MAX_ORDER + 1, dtype=np.float64)
    sub_int = rdp_poisson_subsampled(tau_int, q, int_orders)
    curve = jnp.concatenate([(q * kl)[None], sub_int])  # orders 1, 2, ..., L
    fl = np.floor(_AP2_ORDERS).astype(int)
    v = _AP2_ORDERS - fl
    ce = np.minimum(fl + 1, _AP2_MAX_ORDER)
    sub = (1.0 - v) * curve[fl - 1] + v * curve[ce - 1]
    return eps_from_rdp(_AP2_ORDERS, n * sub, delta)


def _approach1(tau, q, n, delta):
    """Biswas Sec. III-A1 from the VMF RDP ``tau`` on the dense grid _AP1_ORDERS."""
    dt = jnp.result_type(float)
    # Per-release delta_s such that 1 - (1 - delta_s)^N = delta (no slack left for KOV).
    delta_s_max = -jnp.expm1(jnp.log1p(-delta) / n)
    target = delta_s_max / q  # largest admissible base delta

    def base_delta(eps):
        return delta_from_rdp(_AP1_ORDERS, tau, eps)

    # Root of base_delta(eps) = target by bisection on log(eps) (base_delta is non-increasing in eps).
    def body(_, c):
        lo, hi = c
        mid = 0.5 * (lo + hi)
        ok = base_delta(jnp.exp(mid)) <= target
        return jnp.where(ok, lo, mid), jnp.where(ok, mid, hi)

    lo, hi = jax.lax.fori_loop(0, 90, body, (jnp.asarray(np.log(1e-12), dt), jnp.asarray(np.log(1e4), dt)))
    eps_star = jnp.where(base_delta(0.0) <= target, 0.0, jnp.exp(hi))
    eps_s = jnp.log1p(q * jnp.expm1(eps_star))
    best = n * eps_s  # KOV branch 1 with delta_tilde = 0
    # Branches 2 and 3: spend part of the delta budget as KOV slack.
    eps_grid = eps_star * (1.0 + _AP1_EPS_OFFSETS) + 1e-12
    d_base = jax.vmap(base_delta)(eps_grid)
    d_s = q * d_base
    slack = -jnp.expm1(jnp.log1p(-delta) - n * jnp.log1p(-d_s))  # 1 - (1 - delta)/(1 - d_s)^N
    ok = slack > 0
    eps_sg = jnp.log1p(q * jnp.expm1(eps_grid))
    e_tot, _ = kov_composition(eps_sg, jnp.minimum(d_s, 0.5), n, jnp.where(ok, slack, 0.5))
    e_tot = jnp.where(ok, e_tot, jnp.inf)
    return jnp.minimum(best, jnp.min(e_tot))


def _eps_one(kappa, dim, q, n, delta, approach, interpolation):
    tau1, tau_int, kl = _vmf_curves(kappa, dim)
    if approach == 1:
        return _approach1(tau1, q, n, delta)
    if approach == 2:
        return _approach2(tau_int, kl, q, n, delta, interpolation)
    return jnp.minimum(_approach1(tau1, q, n, delta), _approach2(tau_int, kl, q, n, delta, interpolation))


@functools.partial(jax.jit, static_argnames=("approach", "interpolation"))
def _vmf_epsilon_flat(kappa, dim, q, n, delta, approach, interpolation="cumulant"):
    def one(k, p, qq, nn, d):
        return _eps_one(k, p, qq, nn, d, approach, interpolation)

    return jax.vmap(one)(kappa, dim, q, n, delta)


def _normalise_approach(approach):
    if approach in ("best", 1, 2, "pld"):
        return approach
    if approach in ("1", "2"):
        return int(approach)
    raise ValueError(f"approach must be 'best', 1, 2 or 'pld'; got {approach!r}")


def _pld_grid(args, value_discretization_interval):
    """vmf_pld_epsilon over broadcast host arrays (kappa, dim, q, compositions, delta)."""
    b = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in args))
    out = np.empty(b[0].shape, np.float64)
    for idx in np.ndindex(out.shape):
        k, p, qq, n, d = (float(x[idx]) for x in b)
        out[idx] = vmf_pld_epsilon(k, p, qq, int(round(n)), d,
                                   value_discretization_interval=value_discretization_interval)
    return out


def vmf_epsilon(kappa: ArrayLike, dim: ArrayLike, q: ArrayLike, compositions: ArrayLike, delta: ArrayLike,
                approach: str | int = "best", *, interpolation: str = "cumulant",
                value_discretization_interval: float = 1e-3) -> jax.Array:
    """Epsilon of DP-SGD with VMF noise: Biswas et al.'s approach 1, approach 2, the better of both, or the PLD.

    See the module docstring for the two approaches and for what ``compositions`` counts (the paper's
    tables use the number of *epochs*, 3; a DP-SGD guarantee needs the number of *steps*).

    Args:
      kappa: concentration(s), finite and > 0.
      dim: dimension(s) p, finite and >= 2.
      q: sampling probability in (0, 1].
      compositions: number of composed subsampled releases N >= 1 (finite whole numbers for ``approach="pld"``).
      delta: target delta in (0, 1). All five broadcast.
      approach: ``"best"`` (min of approaches 1 and 2), ``1``, ``2``, or ``"pld"`` (the pessimistic privacy loss
        distribution composed ``compositions`` times; tight up to the discretisation, host-side, needs concrete
        inputs and an integer ``compositions``).
      interpolation: how approach 2 fills in fractional orders. ``"cumulant"`` (default, sound): the chord of
        the convex cumulant K(alpha) = (alpha - 1) tau_alpha (Wang et al. 2019, Cor. 10). ``"paper"``: Biswas
        et al.'s linear interpolation of tau itself (with tau^s_1 = q KL), which Cor. 10 does not justify; it
        reproduces their Table IV cells at kappa = 150 and 300 and is offered only for that purpose.
      value_discretization_interval: privacy-loss grid spacing for ``approach="pld"`` (smaller = tighter, slower).

    Returns:
      epsilon, shape ``broadcast(kappa, dim, q, compositions, delta)``, always computed and returned in float64
      (the VMF RDP is a small difference of log-Bessel values of order 1e4 at p ~ 1e4; float32 cannot resolve it).
      Host-level function; the jittable building blocks are :func:`rdp_vmf` and the functions it composes.

    Raises:
      ValueError: for out-of-range inputs or an unknown approach.

    >>> import numpy as np
    >>> e = vmf_epsilon([100.0, 200.0], 13700, 128 / 60000, 3, 1 / 60000)  # Biswas et al. Table I
    >>> bool(e[0] < e[1])
    True
    """
    _guard_vmf(kappa, dim)  # checks only: a host-level function
    check("q", q, lambda x: (x > 0) & (x <= 1), "in (0, 1]")
    check("compositions", compositions, lambda c: c >= 1, ">= 1")
    check("delta", delta, lambda d: (d > 0) & (d < 1), "in (0, 1)")
    approach = _normalise_approach(approach)
    if interpolation not in ("cumulant", "paper"):
        raise ValueError(f"interpolation must be 'cumulant' or 'paper'; got {interpolation!r}")
    if approach == "pld":
        vals = [concrete_or_none(v) for v in (kappa, dim, q, compositions, delta)]
        if any(v is None for v in vals):
            raise ValueError("approach='pld' runs on the host: kappa, dim, q, compositions and delta must be concrete")
        _pld_memory.check_whole_counts("compositions", vals[3], "approach='pld'")
        with host_float64():
            return jnp.asarray(_pld_grid(vals, value_discretization_interval), jnp.float64)
    with host_float64():  # tau is a small difference of log-Bessel values ~1e4: float32 is not enough
        args = jnp.broadcast_arrays(*(jnp.asarray(v, jnp.float64) for v in (kappa, dim, q, compositions, delta)))
        shape = args[0].shape
        flat, n = pad_batch(*args)
        out = _vmf_epsilon_flat(*flat, approach, interpolation)
        return out[:n].reshape(shape)


@functools.partial(jax.jit, static_argnames=("approach", "iters"))
def _calibrate_kappa_flat(eps, dim, q, n, delta, approach, iters):
    def one(e, p, qq, nn, d):
        def eps_at(log_k):
            return _eps_one(jnp.exp(log_k), p, qq, nn, d, approach, "cumulant")

        def body(_, c):
            lo, hi = c
            mid = 0.5 * (lo + hi)
            ok = eps_at(mid) <= e
            return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

        lo0 = jnp.log(jnp.asarray(1e-3, e.dtype))
        hi0 = jnp.log(jnp.asarray(1e7, e.dtype))
        lo, hi = jax.lax.fori_loop(0, iters, body, (lo0, hi0))
        lo = lo - 1e-9  # 1e-9 relative margin in kappa against re-evaluation rounding
        return jnp.where(eps_at(lo) <= e, jnp.exp(lo), jnp.nan)

    return jax.vmap(one)(eps, dim, q, n, delta)


def _calibrate_kappa_pld(eps, dim, q, n, delta, step, rtol):
    """Host search on log(kappa) for approach="pld" (:func:`_search.feasible_edge`), from kappa = 1. A kappa the PLD
    refuses as too large for its memory budget counts as infeasible (the result: the largest kappa it can certify);
    nan where no kappa in [1e-6, 1e8] is feasible or every one up to 1e8 is."""
    def pld_eps(k):
        try:
            return vmf_pld_epsilon(k, dim, q, n, delta, value_discretization_interval=step)
        except PLDTooLarge:
            return None

    found = feasible_edge(pld_eps, eps, 1.0, increasing=True, limits=(1e-6, 1e8), rtol=rtol)
    return found.x if found.kind == "edge" else float("nan")


def calibrate_vmf_kappa(eps: ArrayLike, dim: ArrayLike, q: ArrayLike, compositions: ArrayLike, delta: ArrayLike,
                        approach: str | int = "best", *, iters: int = 60,
                        value_discretization_interval: float = 1e-3, rtol: float = 1e-3) -> jax.Array:
    """Largest kappa whose VMF epsilon (:func:`vmf_epsilon`) is at most ``eps``, by bisection on log(kappa).

    Epsilon increases with kappa (Biswas et al. Thm 1 (i)); the search brackets kappa in [1e-3, 1e7] and the
    returned kappa is the lower end of the final bracket, so its epsilon is <= the target. With
    ``approach="pld"`` the bracket is found by doubling (or halving) from kappa = 1 and shrunk on the host by a
    safeguarded secant search in log-kappa until its ends are within a factor ``1 + rtol``.

    Args:
      eps: target epsilon(s) > 0.
      dim, q, compositions, delta, approach: as in :func:`vmf_epsilon` (all broadcast).
      iters: bisection iterations (approaches 1, 2, ``"best"``).
      value_discretization_interval: privacy-loss grid spacing for ``approach="pld"``.
      rtol: relative width of the final kappa bracket for ``approach="pld"``.

    Returns:
      kappa (float64), shape ``broadcast(eps, dim, q, compositions, delta)`` (NaN if even kappa = 1e-3
      exceeds eps).

    Raises:
      ValueError: for out-of-range inputs.

    >>> import numpy as np
    >>> k = calibrate_vmf_kappa(2.5, 13700, 128 / 60000, 3, 1 / 60000, approach=2)
    >>> bool(float(vmf_epsilon(k, 13700, 128 / 60000, 3, 1 / 60000, approach=2)) <= 2.5)
    True
    """
    check("eps", eps, lambda e: e > 0, "> 0")
    check("dim", dim, _DIM)
    check("q", q, lambda x: (x > 0) & (x <= 1), "in (0, 1]")
    check("compositions", compositions, lambda c: c >= 1, ">= 1")
    check("delta", delta, lambda d: (d > 0) & (d < 1), "in (0, 1)")
    approach = _normalise_approach(approach)
    if approach == "pld":
        vals = [concrete_or_none(v) for v in (eps, dim, q, compositions, delta)]
        if any(v is None for v in vals):
            raise ValueError("approach='pld' runs on the host: eps, dim, q, compositions and delta must be concrete")
        _pld_memory.check_whole_counts("compositions", vals[3], "approach='pld'")
        b = np.broadcast_arrays(*vals)
        out = np.empty(b[0].shape, np.float64)
        for idx in np.ndindex(out.shape):
            e, p, qq, n, d = (float(x[idx]) for x in b)
            out[idx] = _calibrate_kappa_pld(e, p, qq, int(round(n)), d, value_discretization_interval, rtol)
        with host_float64():
            return jnp.asarray(out, jnp.float64)
    with host_float64():  # see vmf_epsilon
        args = jnp.broadcast_arrays(*(jnp.asarray(v, jnp.float64) for v in (eps, dim, q, compositions, delta)))
        shape = args[0].shape
        flat, n = pad_batch(*args)
        out = _calibrate_kappa_flat(*flat, approach, iters)
        return out[:n].reshape(shape)
