"""Tests for recon_jax.bounds.rero (Balle et al. Sec. VII; Hayes/Kaissis GDP bound) against SciPy/NumPy."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sc
import scipy.stats as st
from hypothesis import given
from hypothesis import strategies as hs

from recon_jax.bounds import (
    baseline_kappa_gaussian,
    baseline_kappa_gaussian_tail_bound,
    baseline_kappa_uniform_ball,
    dp_from_rero,
    rero_from_approx_dp,
    rero_from_dp,
    rero_from_rdp,
    rero_from_rdp_curve,
    rero_from_zcdp,
    rero_gdp,
)

KAPPAS = np.array([1e-12, 1e-6, 1e-3, 0.1, 0.5, 0.9])


# ---------------------------------------------------------------- references (NumPy / SciPy / mpmath-free closed forms)


def _ref_rdp(kappa, eps, order):
    with np.errstate(over="ignore"):  # exp overflows to inf for huge orders * rho; min(1, inf) = 1 is intended
        return np.minimum(1.0, np.exp((1 - 1 / order) * (np.log(kappa) + eps)))


def _ref_zcdp_by_grid(kappa, rho):
    # Independent route: minimise Theorem 2 over a dense grid of orders (Cor. 4 is its closed-form minimum).
    orders = 1 + np.logspace(-6, 6, 200001)
    return np.minimum(1.0, np.min(_ref_rdp(kappa, orders * rho, orders)))


def test_rero_from_dp_and_rdp_match_reference(x64):
    eps = np.array([0.0, 0.1, 1.0, 10.0, 30.0])
    k, e = np.meshgrid(KAPPAS, eps)
    # The two branches of the eps-DP trade-off curve; 1 - e^-eps (1 - k) written as k e^-eps - expm1(-eps).
    both = np.minimum(k * np.exp(e), k * np.exp(-e) - np.expm1(-e))
    np.testing.assert_allclose(np.asarray(rero_from_dp(k, e)), both, rtol=1e-14)
    for order in [1.01, 2.0, 32.0, 1e6]:
        np.testing.assert_allclose(np.asarray(rero_from_rdp(k, e, order, method="balle")), _ref_rdp(k, e, order),
                                   rtol=1e-13)
    # alpha -> inf recovers Cor. 3 (balle) and the eps-DP curve (optimal).
    np.testing.assert_allclose(np.asarray(rero_from_rdp(k, e, np.inf, method="balle")), np.minimum(1, k * np.exp(e)),
                               rtol=1e-14)
    np.testing.assert_allclose(np.asarray(rero_from_rdp(k, e, np.inf)), both, rtol=1e-14)


def test_rero_from_rdp_curve_is_min_over_orders(x64):
    orders = np.concatenate([1 + np.logspace(-2, 0, 20), np.arange(3, 64)])
    sigmas = np.array([0.5, 1.0, 4.0, 1e3])
    rdp = orders[None, :] / (2 * sigmas[:, None] ** 2)  # Gaussian mechanism RDP, [4, K]
    ours = np.asarray(rero_from_rdp_curve(KAPPAS[:, None], orders, rdp[None], method="balle"))  # [6, 4]
    ref = np.array([[min(_ref_rdp(k, r, orders).min(), 1.0) for r in rdp] for k in KAPPAS])
    np.testing.assert_allclose(ours, ref, rtol=1e-13)
    # An infinite epsilon at one order just removes that order.
    rdp_inf = rdp[1].copy()
    rdp_inf[0] = np.inf
    assert float(rero_from_rdp_curve(0.1, orders, rdp_inf, method="balle")) == pytest.approx(float(ref[3, 1]),
                                                                                            rel=1e-13)


@pytest.mark.parametrize("kappa,rho", [(1e-12, 0.5), (1e-6, 2.0), (1e-3, 0.5), (0.1, 0.01), (0.5, 1e-4)])
def test_rero_from_zcdp_is_optimum_of_theorem2(x64, kappa, rho):
    # Grid minimum is >= the true minimum; a 2e5-point log grid gets within 1e-6 relative of it.
    np.testing.assert_allclose(float(rero_from_zcdp(kappa, rho, method="balle")), _ref_zcdp_by_grid(kappa, rho),
                               rtol=1e-6)


def test_rero_from_zcdp_trivial_regime():
    assert float(rero_from_zcdp(0.1, 5.0, method="balle")) == 1.0  # rho >= log(1/kappa)
    # 3e-6: float32 bounds are rounded up by a bound on their rounding error (~6 |log kappa| + 8 ulps here)
    assert float(rero_from_zcdp(0.1, 0.0, method="balle")) == pytest.approx(0.1, rel=3e-6)
    assert float(rero_from_zcdp(0.1, 0.0)) == pytest.approx(0.1, rel=3e-6)  # no leakage: the prior's kappa
    assert 0.99 < float(rero_from_zcdp(0.1, 5.0)) < 1.0  # the optimal conversion stays below 1


def test_rero_gdp_matches_scipy(x64):
    mus = np.array([0.0, 1e-6, 0.3, 1.0, 5.0, 40.0])
    k, m = np.meshgrid(KAPPAS, mus)
    ref = st.norm.cdf(st.norm.ppf(k) + m)
    np.testing.assert_allclose(np.asarray(rero_gdp(k, m)), ref, rtol=1e-12, atol=1e-300)
    # Ziller et al.'s equivalent form 1 - Phi(Phi^{-1}(1 - kappa) - mu).
    np.testing.assert_allclose(np.asarray(rero_gdp(k, m)), st.norm.sf(st.norm.isf(k) - m), rtol=1e-9)
    assert float(rero_gdp(0.3, np.inf)) == 1.0


def test_dp_from_rero(x64):
    eps = np.array([0.0, 0.5, 3.0, 800.0])
    gam = np.array([0.0, 0.3, 0.9, 0.999999, 1.0])
    e, g = np.meshgrid(eps, gam)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = np.maximum(0, (np.exp(e) + 1) * g - np.exp(e))
    ref = np.where(g == 1, 1.0, np.where(np.isnan(ref), 0.0, ref))
    np.testing.assert_allclose(np.asarray(dp_from_rero(e, g)), ref, rtol=1e-9, atol=1e-15)


def test_approx_dp_route():
    # 3e-6: float32 bounds are rounded up by a bound on their rounding error (2 |log kappa| + 8 ulps here)
    assert float(rero_from_approx_dp(0.01, 0.0, 0.0)) == pytest.approx(0.01, rel=3e-6)
    # Second branch: 1 - e^-2 (1 - 0.1 - 0.5); the first would give 1.
    assert float(rero_from_approx_dp(0.5, 2.0, 0.1)) == pytest.approx(1 - math.exp(-2) * 0.4, rel=1e-6)


@pytest.mark.parametrize("kappa,eps,delta", [(1e-20, 0.0, 0.0), (1e-20, 1e-20, 0.0), (1e-17, 1e-18, 1e-18),
                                             (1e-12, 1e-14, 0.0), (0.3, 1e-9, 1e-6), (0.4, 2.0, 0.5)])
def test_approx_dp_never_below_the_exact_curve_at_small_kappa(x64, kappa, eps, delta):
    """Regression: the second branch was 1 - e^-eps (1 - delta - kappa) as a difference, which lost kappa + delta below
    ~1e-16 (kappa = 1e-20, eps = delta = 0 gave 2.2e-308, far below the prior kappa). Reference: mpmath, 50 digits."""
    import mpmath as mp

    with mp.workdps(50):
        k, e, d = mp.mpf(kappa), mp.mpf(eps), mp.mpf(delta)
        want = float(min(1, k * mp.exp(e) + d, 1 - mp.exp(-e) * max(1 - d - k, 0)))
    got = float(rero_from_approx_dp(kappa, eps, delta))
    assert got == pytest.approx(want, rel=1e-14, abs=0.0)  # a few roundings of exp/log of the inputs (no abs floor)
    assert float(jax.jit(rero_from_approx_dp)(kappa, eps, delta)) == pytest.approx(want, rel=1e-14, abs=0.0)


def test_baselines_match_scipy(x64):
    etas = np.array([1e-3, 0.1, 0.5, 0.999])
    dims = np.array([1, 2, 10, 1000, 10**9])
    e, d = np.meshgrid(etas, dims)
    # where eta^d underflows, the smallest normal float64 is returned (a conservative kappa in (0, 1])
    tiny = np.finfo(np.float64).tiny
    want = np.maximum(e.astype(float) ** d, tiny)
    np.testing.assert_allclose(np.asarray(baseline_kappa_uniform_ball(e, d)), want, rtol=1e-12)
    assert float(baseline_kappa_uniform_ball(2.0, 5)) == 1.0
    for dim in [1, 3, 100, 10**4, 10**5]:
        for ratio in [0.3, 0.9, 1.0, 1.1, 3.0]:
            eta = ratio * math.sqrt(dim)  # around the bulk of ||Z|| ~ sqrt(d)
            ref = max(sc.gammainc(dim / 2, eta**2 / 2), tiny)  # an underflowing kappa: the smallest normal, as above
            got = float(baseline_kappa_gaussian(eta, 1.0, dim))
            np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-300)
            np.testing.assert_allclose(float(baseline_kappa_gaussian(eta * 1e6, 1e6, dim)), ref, rtol=1e-11)
            np.testing.assert_allclose(float(baseline_kappa_gaussian(eta * 1e-6, 1e-6, dim)), ref, rtol=1e-11)


def _mp_chi2_cdf(dim: float, q: float) -> float:
    """P[chi^2_dim <= q] by mpmath quadrature of the Gamma(dim/2) density (SciPy is inaccurate for dim ~ 1e9)."""
    import mpmath

    with mpmath.workdps(30):
        a, x = mpmath.mpf(dim) / 2, mpmath.mpf(q) / 2
        lg, sd = mpmath.loggamma(a), mpmath.sqrt(a)
        f = lambda t: mpmath.exp((a - 1) * mpmath.log(t) - t - lg)  # noqa: E731
        return float(mpmath.quad(f, [p for p in (x - k * sd for k in (40, 20, 10, 5, 2, 1, 0)) if p > 0]))


def test_baseline_gaussian_huge_dims_vs_mpmath(x64):
    # d = 2e9 (the "dim up to 1e9" and beyond), eta five chi-standard-deviations below the bulk.
    for dim in [10**7, 2 * 10**9]:
        q = dim - 5 * math.sqrt(2 * dim)
        got = float(baseline_kappa_gaussian(math.sqrt(q), 1.0, dim))
        np.testing.assert_allclose(got, _mp_chi2_cdf(dim, q), rtol=1e-9)
        np.testing.assert_allclose(float(baseline_kappa_gaussian(math.sqrt(q) * 1e-6, 1e-6, dim)), got, rtol=1e-9)


def test_tail_bound_is_an_upper_bound(x64):
    for dim in [1, 10, 1000, 10**6]:
        for ratio in [1e-3, 0.2, 0.5, 0.9, 0.999]:
            eta = ratio * math.sqrt(dim)
            exact = float(baseline_kappa_gaussian(eta, 1.0, dim))
            bound = float(baseline_kappa_gaussian_tail_bound(eta, 1.0, dim))
            t = ratio**2
            # an underflowing bound is the smallest normal float64 (0 is no upper bound on a positive kappa)
            want = max(math.exp(dim / 2 * (1 - t + math.log(t))), np.finfo(np.float64).tiny)
            np.testing.assert_allclose(bound, want, rtol=1e-10)
            assert exact <= bound * (1 + 1e-12)
    assert float(baseline_kappa_gaussian_tail_bound(2.0, 1.0, 1)) == 1.0


def test_jit_vmap_grad(x64):
    kappas = jnp.array([1e-6, 0.1, 0.5])
    mus = jnp.array([0.1, 1.0, 3.0])
    # The optimal zCDP conversion is compiled once in test_optimal_rdp_gradient_and_jit; Cor. 4 here (fast).
    for fn in [rero_gdp, rero_from_dp, functools.partial(rero_from_zcdp, method="balle")]:
        eager = fn(kappas, mus)
        np.testing.assert_allclose(np.asarray(jax.jit(fn)(kappas, mus)), np.asarray(eager), rtol=1e-14)
        np.testing.assert_allclose(np.asarray(jax.vmap(fn)(kappas, mus)), np.asarray(eager), rtol=1e-14)
    g = jax.grad(lambda m: rero_gdp(0.1, m))(1.0)
    np.testing.assert_allclose(float(g), st.norm.pdf(st.norm.ppf(0.1) + 1.0), rtol=1e-12)
    g_rdp = jax.grad(lambda e: rero_from_rdp(0.01, e, 2.0, method="balle"))(1.0)
    np.testing.assert_allclose(float(g_rdp), 0.5 * math.sqrt(0.01 * math.e), rtol=1e-12)
    g_k = jax.grad(lambda k: baseline_kappa_gaussian(k, 1.0, 5.0))(2.0)
    np.testing.assert_allclose(float(g_k), st.chi.pdf(2.0, 5), rtol=1e-10)
    orders = jnp.linspace(1.5, 20, 30)
    curve = jax.vmap(lambda s: rero_from_rdp_curve(1e-3, orders, orders / (2 * s * s)))(jnp.array([1.0, 2.0]))
    assert curve.shape == (2,) and bool(jnp.all(jnp.isfinite(curve)))


def test_float32_usable():
    out = rero_gdp(jnp.float32(1e-6), jnp.float32(2.0))
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(float(out), st.norm.cdf(st.norm.ppf(1e-6) + 2.0), rtol=1e-4)
    np.testing.assert_allclose(float(baseline_kappa_gaussian(10.0, 1.0, 100)), sc.gammainc(50, 50), rtol=1e-4)


@pytest.mark.parametrize(
    "call",
    [
        lambda: rero_from_dp(0.0, 1.0),
        lambda: rero_from_dp(1.0, 1.0),
        lambda: rero_from_dp(0.5, -1.0),
        lambda: rero_from_rdp(0.5, 1.0, 1.0),
        lambda: rero_from_rdp_curve(0.5, np.array([2.0, 0.5]), np.array([1.0, 1.0])),
        lambda: rero_from_zcdp(0.5, -0.1),
        lambda: rero_gdp(np.array([0.1, 1.5]), 1.0),
        lambda: rero_gdp(0.1, -1.0),
        lambda: dp_from_rero(-1.0, 0.5),
        lambda: dp_from_rero(1.0, 1.5),
        lambda: baseline_kappa_uniform_ball(0.0, 3),
        lambda: baseline_kappa_uniform_ball(0.5, 0),
        lambda: baseline_kappa_gaussian(1.0, -1.0, 3),
        lambda: baseline_kappa_gaussian(1.0, 1.0, 0.5),
        lambda: rero_gdp(math.nan, 1.0),
    ],
)
def test_invalid_inputs_raise(call):
    with pytest.raises(ValueError):
        call()


def test_rdp_curve_error_names_orders():
    with pytest.raises(ValueError, match="^orders must be > 1"):  # the argument is orders (was "order must")
        rero_from_rdp_curve(0.5, np.array([2.0, 0.5]), np.array([1.0, 1.0]))


def test_invalid_inputs_nan_under_jit():
    assert np.isnan(float(jax.jit(rero_gdp)(1.5, 1.0)))
    assert np.isnan(float(jax.jit(rero_from_zcdp)(0.5, -1.0)))
    assert np.isnan(float(jax.jit(rero_from_rdp)(0.5, 1.0, 0.5)))
    assert np.isnan(float(jax.jit(baseline_kappa_gaussian)(1.0, 0.0, 3.0)))
    assert np.isnan(float(rero_from_dp(2.0, 1.0, validate=False)))


@given(
    kappa=hs.floats(1e-12, 0.99),
    factor=hs.floats(1.0001, 100.0),
    eps=hs.floats(0.0, 20.0),
    mu=hs.floats(0.0, 10.0),
    order=hs.floats(1.01, 100.0),
)
def test_monotone_in_kappa_and_privacy(kappa, factor, eps, mu, order):
    k2 = min(kappa * factor, 0.995)
    for fn, arg in [(rero_from_dp, eps), (rero_from_zcdp, eps), (rero_gdp, mu)]:
        assert float(fn(k2, arg)) >= float(fn(kappa, arg)) - 1e-6
        assert float(fn(kappa, arg * factor + 1e-3)) >= float(fn(kappa, arg)) - 1e-6
    assert float(rero_from_rdp(k2, eps, order)) >= float(rero_from_rdp(kappa, eps, order)) - 1e-6
    assert float(rero_from_rdp(kappa, eps * factor + 1e-3, order)) >= float(rero_from_rdp(kappa, eps, order)) - 1e-6
    # ReRo of the Gaussian mechanism decreases with the noise multiplier (mu = 1 / sigma).
    sigma = 1.0 / (mu + 1e-3)
    assert float(rero_gdp(kappa, 1.0 / (sigma * factor))) <= float(rero_gdp(kappa, 1.0 / sigma)) + 1e-6
    assert 0.0 <= float(rero_gdp(kappa, mu)) <= 1.0


# ---------------------------------------------------------------- optimal conversions (riskcal and an independent root)


def _ref_rdp_optimal(kappa, eps, order):
    """Largest gamma with both binary Renyi divergences <= eps, by SciPy brentq on each constraint (float64).

    Written from the definition D_a(P || Q) = log(sum p^a q^(1-a)) / (a - 1) for P = (kappa, 1 - kappa) and
    Q = (gamma, 1 - gamma), in both directions; each is increasing in gamma on [kappa, 1).
    """
    from scipy import optimize

    def d(p, q):  # Renyi divergence of Bernoulli(p) from Bernoulli(q) at this order, in logs
        t1 = order * math.log(p) + (1 - order) * math.log(q)
        t2 = order * math.log1p(-p) + (1 - order) * math.log1p(-q)
        return float(np.logaddexp(t1, t2)) / (order - 1)

    roots = []
    for f in (lambda g: d(g, kappa) - eps, lambda g: d(kappa, g) - eps):
        hi = 1 - 1e-16
        if f(hi) <= 0:
            roots.append(1.0)
            continue
        roots.append(optimize.brentq(f, kappa, hi, xtol=1e-300, rtol=1e-15, maxiter=500))
    return min(roots)


@pytest.mark.parametrize("kappa", [1e-6, 1e-3, 0.1, 0.5])
def test_rero_from_rdp_optimal_vs_independent_root_and_riskcal(x64, kappa):
    from riskcal.analysis.conversions import get_beta_from_rdp

    for eps, order in [(0.05, 1.5), (0.5, 1.5), (1.0, 2.0), (3.0, 8.0), (0.2, 32.0), (5.0, 1.1)]:
        ours = float(rero_from_rdp(kappa, eps, order))
        ref = _ref_rdp_optimal(kappa, eps, order)
        # Sound (>= the exact root up to brentq's 1e-15 relative) and tight (64 halvings of log gamma).
        assert ref * (1 - 1e-13) <= ours <= ref * (1 + 1e-12) + 1e-15, (eps, order, ours, ref)
        # Never looser than riskcal's optimal conversion (which returns FNR to within tol above the exact one).
        assert ours <= 1 - get_beta_from_rdp(eps, kappa, order, tol=1e-13) + 1e-12
        assert ours <= float(rero_from_rdp(kappa, eps, order, method="balle")) * (1 + 1e-12)


def test_rero_from_rdp_curve_optimal_on_dpsgd_curves(x64):
    """Subsampled-Gaussian DP-SGD curves: at least as tight as riskcal (max of its per-order FNRs) and Thm. 2."""
    from riskcal.analysis.conversions import get_beta_from_rdp

    from recon_jax.accounting import rdp_subsampled_gaussian

    orders = np.concatenate([np.arange(1.25, 11.0, 0.25), np.arange(11.0, 65.0)])
    for sigma, q, steps in [(0.8, 0.01, 1000), (1.5, 0.004, 3000), (4.0, 0.1, 100)]:
        rdp = steps * np.asarray(rdp_subsampled_gaussian(q, sigma, orders))
        for kappa in (1e-4, 0.01, 0.2):
            ours = float(rero_from_rdp_curve(kappa, orders, rdp))
            beta = max(get_beta_from_rdp(float(e), kappa, float(a), tol=1e-13) for e, a in zip(rdp, orders)
                       if (a - 1) * e < 200)  # riskcal returns FNR 0 (vacuous) beyond this
            assert ours <= 1 - beta + 1e-12, (sigma, kappa, ours, 1 - beta)
            assert ours <= float(rero_from_rdp_curve(kappa, orders, rdp, method="balle")) * (1 + 1e-12)


def test_optimal_conversions_never_below_exact_gdp(x64):
    """q = 1: T Gaussian steps with noise multiplier sigma are mu-GDP (mu = sqrt(T)/sigma), whose exact ReRo bound
    is rero_gdp. Any sound conversion of their RDP curve (eps(alpha) = alpha mu^2 / 2) or zCDP (rho = mu^2 / 2)
    must stay above it."""
    orders = np.concatenate([1 + np.logspace(-3, 0, 40), np.arange(2.5, 200.0, 0.5)])
    kappas = np.array([1e-9, 1e-4, 0.01, 0.1, 0.5, 0.9])
    for mu in (0.05, 0.5, 1.0, 3.0):
        exact = np.asarray(rero_gdp(kappas, mu))
        curve = np.asarray(rero_from_rdp_curve(kappas, orders, orders * mu**2 / 2))
        zcdp = np.asarray(rero_from_zcdp(kappas, mu**2 / 2))
        assert np.all(curve >= exact) and np.all(zcdp >= exact), mu
        assert np.all(zcdp <= curve * (1 + 1e-9))  # the zCDP optimum over all orders beats any finite grid


def _mp_rdp_optimal(kappa, eps, order):
    """The optimal (order, eps)-RDP bound by bisection on gamma in 60-digit mpmath (independent of the float code)."""
    import mpmath as mp

    with mp.workdps(60):
        k, a = mp.mpf(kappa), mp.mpf(order)
        bound = (a - 1) * mp.mpf(eps)

        def feasible(g):
            c1 = g**a * k ** (1 - a) + (1 - g) ** a * (1 - k) ** (1 - a)
            c2 = k**a * g ** (1 - a) + (1 - k) ** a * (1 - g) ** (1 - a)
            return max(mp.log(c1), mp.log(c2)) <= bound

        lo, hi = k, mp.mpf(1)
        for _ in range(250):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if feasible(mid) else (lo, mid)
        return float(hi)


@pytest.mark.parametrize("kappa,eps,order", [(0.5, 1e-16, 2.0), (1e-3, 1e-18, 2.0), (0.5, 1e-12, 32.0),
                                             (1e-3, 1e-14, 1.01), (0.1, 1e-20, 8.0)])
def test_optimal_rdp_sound_at_tiny_eps(x64, kappa, eps, order):
    """Regression: the Renyi sums were formed from log(gamma) - log(kappa), whose ~1 ulp of log(kappa) swamped sums of
    1 + O(eps): the bisection declared feasible powers infeasible and returned less than the exact bound (kappa itself
    at eps = 1e-18, where the exact excess over kappa is ~3e-11; 20% of the excess lost at eps = 1e-16). Reference:
    the same optimisation in 60-digit mpmath."""
    want = _mp_rdp_optimal(kappa, eps, order)
    got = float(rero_from_rdp(kappa, eps, order))
    assert got >= want * (1 - 4e-16)  # sound, up to the rounding of the final exp (relative 1 ulp)
    assert got - kappa <= (want - kappa) * (1 + 1e-4) + 1e-18  # and tight: the excess over kappa is resolved


@pytest.mark.parametrize("kappa,eps", [(0.1, 1e-8), (0.5, 1e-8), (1e-3, 1e-10), (0.5, 1e-6)])
def test_optimal_conversions_float32_sound_at_small_eps(kappa, eps):
    """Regression (float32, the default dtype): rero_from_rdp(0.1, 1e-8, 2) was 0.1000002, 3e-5 below the exact 0.10003,
    and rero_from_zcdp(0.1, 1e-8) 2.5e-5 below the exact GDP bound of the same Gaussian mechanism (a sound
    zCDP bound cannot be). References: mpmath and SciPy at the float32 inputs."""
    from scipy.stats import norm

    k32, e32 = float(np.float32(kappa)), float(np.float32(eps))
    assert float(rero_from_rdp(np.float32(kappa), np.float32(eps), np.float32(2.0))) >= _mp_rdp_optimal(k32, e32, 2.0)
    mu = math.sqrt(2 * e32)  # rho-zCDP with rho = mu^2 / 2 holds for mu-GDP
    # float32 rounding of the final exp (relative 1e-7) is the only allowed shortfall
    assert float(rero_from_zcdp(np.float32(kappa), np.float32(eps))) >= norm.cdf(norm.ppf(k32) + mu) * (1 - 2e-7)


def test_rero_from_zcdp_optimal_vs_riskcal(x64):
    from riskcal.analysis.conversions import get_beta_from_zcdp

    kappas = np.array([1e-6, 1e-3, 0.01, 0.1, 0.5])
    rhos = np.array([1e-3, 0.1, 0.5, 3.0])
    ours = np.asarray(rero_from_zcdp(kappas[:, None], rhos[None, :]))
    balle = np.asarray(rero_from_zcdp(kappas[:, None], rhos[None, :], method="balle"))
    assert np.all(ours <= balle * (1 + 1e-12))
    for i, k in enumerate(kappas):
        for j, r in enumerate(rhos):
            theirs = 1 - get_beta_from_zcdp(float(r), float(k), tol=1e-12)
            if theirs < float(rero_gdp(k, math.sqrt(2 * r))):
                continue  # riskcal 1.5.1 returns the prior kappa itself at some small rho: below the exact value
            # 4e-9 absolute: riskcal also evaluates the order-1 (KL) limit, which our grid approaches to 1 + 1e-7.
            assert ours[i, j] <= theirs + 4e-9, (k, r, ours[i, j], theirs)


def test_rero_from_dp_matches_riskcal_tradeoff(x64):
    from riskcal.analysis.conversions import get_beta_from_adp

    for kappa in (1e-6, 0.01, 0.1, 0.5, 0.9):
        for eps in (0.0, 0.1, 1.0, 3.0, 10.0):
            ref = 1 - float(get_beta_from_adp(eps, 0.0, kappa))
            assert float(rero_from_dp(kappa, eps)) == pytest.approx(ref, rel=1e-12, abs=1e-15)
            ref_d = 1 - float(get_beta_from_adp(eps, 1e-3, kappa))
            assert float(rero_from_approx_dp(kappa, eps, 1e-3)) == pytest.approx(min(ref_d, 1.0), rel=1e-12)
    # Issue example: kappa = 0.1, eps = 3: Cor. 3 gives 1, the second branch 1 - 0.9 e^-3.
    assert float(rero_from_dp(0.1, 3.0)) == pytest.approx(1 - 0.9 * math.exp(-3.0), rel=1e-14)


def test_optimal_rdp_gradient_and_jit(x64):
    f = lambda e: rero_from_rdp(0.01, e, 2.0)  # noqa: E731
    g = float(jax.grad(f)(1.0))
    fd = (float(f(1.0 + 1e-6)) - float(f(1.0 - 1e-6))) / 2e-6
    assert g == pytest.approx(fd, rel=1e-5)  # implicit-function derivative vs central difference
    orders = jnp.linspace(1.5, 20, 30)
    eager = rero_from_rdp_curve(jnp.array([1e-3, 0.1]), orders, orders / 2.0)
    jitted = jax.jit(lambda k: rero_from_rdp_curve(k, orders, orders / 2.0))(jnp.array([1e-3, 0.1]))
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-14)
    assert np.isnan(float(jax.jit(lambda k: rero_from_rdp_curve(k, orders, orders / 2.0))(1.5)))
    z = jax.jit(rero_from_zcdp)(jnp.array([1e-3, 0.1]), jnp.array([0.5, 0.5]))
    np.testing.assert_allclose(np.asarray(z), np.asarray(rero_from_zcdp(jnp.array([1e-3, 0.1]), 0.5)), rtol=1e-14)
    with pytest.raises(ValueError, match="method"):
        rero_from_rdp(0.1, 1.0, 2.0, method="tight")


def test_optimal_conversions_float32_match_float64():
    """float32 (the default dtype) agrees with float64 near alpha = 1 and at eps = 0 (regressions found by
    hypothesis: the sums of the Renyi constraints are 1 + O((alpha - 1) KL) and need the log1p form)."""
    cases_z = [(0.25, 1.0), (0.25390625, 1.0), (1e-3, 0.01), (0.5, 3.0)]
    cases_r = [(0.5, 0.0, 1.5), (0.50005, 0.0, 1.5), (0.1, 0.01, 1.01), (1e-4, 2.0, 8.0)]
    f32_z = [float(rero_from_zcdp(k, r)) for k, r in cases_z]
    f32_r = [float(rero_from_rdp(k, e, a)) for k, e, a in cases_r]
    with jax.enable_x64(True):
        f64_z = [float(rero_from_zcdp(k, r)) for k, r in cases_z]
        f64_r = [float(rero_from_rdp(k, e, a)) for k, e, a in cases_r]
    # 2e-5: float32 rounding of kappa itself and of the bisection's last bracket.
    np.testing.assert_allclose(f32_z, f64_z, rtol=2e-5)
    np.testing.assert_allclose(f32_r, f64_r, rtol=2e-5)


def test_optimal_conversions_in_float32_never_below_exact_gdp():
    # Regression: before the log1p form, float32 rero_from_zcdp(0.5, 100 / 512) gave 0.527, below the exact GDP
    # value 0.734 of the same Gaussian mechanism (sigma 16, 100 full-batch steps): an unsound bound that the risk
    # report's "attack below bound" claim caught. zCDP rho and the RDP curve of mu-GDP both dominate mu-GDP.
    from scipy.stats import norm

    for sigma, steps in [(16.0, 100), (4.0, 100), (1.0, 10)]:
        mu, rho = np.sqrt(steps) / sigma, steps / (2 * sigma**2)
        orders = np.geomspace(1.01, 512, 200)
        for kappa in [0.5, 0.3, 0.1, 0.01]:
            exact = norm.cdf(norm.ppf(kappa) + mu)
            assert float(rero_from_zcdp(kappa, rho)) >= exact * (1 - 1e-5), (sigma, kappa)
            assert float(rero_from_rdp_curve(kappa, orders, orders * rho)) >= exact * (1 - 1e-5), (sigma, kappa)


@pytest.mark.parametrize("kappa,rho", [(0.01, 0.01), (0.01, 0.05), (1e-3, 0.5), (0.1, 2.0), (1e-4, 8.0), (0.3, 30.0)])
def test_zcdp_bound_is_differentiable(kappa, rho):
    """The optimal zCDP bound has finite derivatives in kappa and rho, equal to central differences of its values
    (the order search is not differentiated through: its extreme grid orders once sent NaN through the min)."""
    with jax.enable_x64(True):
        grad = jax.grad(rero_from_zcdp, argnums=(0, 1))(kappa, rho)
        for i, g in enumerate(grad):
            h = 1e-7 * (kappa, rho)[i]
            up = rero_from_zcdp(*[(kappa, rho)[j] + (h if j == i else 0.0) for j in range(2)])
            down = rero_from_zcdp(*[(kappa, rho)[j] - (h if j == i else 0.0) for j in range(2)])
            assert np.isfinite(float(g))
            np.testing.assert_allclose(float(g), float(up - down) / (2 * h), rtol=1e-4, atol=1e-9)


# ---------------------------------------------------------------- regressions: zCDP optimal vs Cor. 4, float32 soundness


def _mp_cor4(kappa, rho):
    """Balle et al.'s Cor. 4 in 50-digit mpmath: exp(-(sqrt(log(1/kappa)) - sqrt(rho))^2), 1 once rho >= log(1/kappa)."""
    import mpmath as mp

    with mp.workdps(50):
        gap = mp.sqrt(-mp.log(mp.mpf(kappa))) - mp.sqrt(mp.mpf(rho))
        return mp.mpf(1) if gap <= 0 else mp.exp(-gap**2)


def _mp_gdp(kappa, mu):
    """Phi(Phi^{-1}(kappa) + mu) in 50-digit mpmath (the exact ReRo bound of mu-GDP)."""
    import mpmath as mp

    with mp.workdps(50):
        z = -mp.sqrt(2) * mp.erfinv(1 - 2 * mp.mpf(kappa)) if kappa < 0.5 else mp.sqrt(2) * mp.erfinv(2 * mp.mpf(kappa) - 1)
        return mp.ncdf(z + mp.mpf(mu))


ZCDP_GRID = [(k, r) for k in (1e-30, 1e-6, 0.05, 0.5) for r in (1e-10, 1e-8, 1e-7, 1e-6, 1e-5, 1e-3, 0.5)]


@pytest.mark.parametrize("use_x64", [False, True])
def test_zcdp_optimal_never_looser_than_cor4_at_small_rho(use_x64):
    """Regression: the optimal order search stops at alpha - 1 = e^8, below Cor. 4's order sqrt(log(1/kappa) / rho) at
    small rho, and at orders ~1e5 the bisection's rounding margins cost more than the optimal conversion gains:
    "optimal" was looser than "balle" (kappa = 0.05, rho = 1e-8: 0.0500231 vs 0.0500173; kappa = 1e-30, rho = 1e-8:
    1.0177e-30 vs 1.0017e-30). References: Cor. 4 and the exact Gaussian (mu = sqrt(2 rho)) bound in 50-digit mpmath;
    the Gaussian mechanism is rho-zCDP, so its exact bound is a floor for any valid zCDP bound."""
    kappas, rhos = (np.array(v) for v in zip(*ZCDP_GRID))
    with jax.enable_x64(use_x64):
        opt = np.asarray(rero_from_zcdp(kappas, rhos), np.float64)
        balle = np.asarray(rero_from_zcdp(kappas, rhos, method="balle"), np.float64)
    # Output rounding: Cor. 4 is rounded up by a bound on its rounding error, (6 |log kappa| + 10) unit roundoffs
    # (2^-53: 5e-14 relative at kappa = 1e-30; 2^-24: 2.5e-5). "optimal" takes it so in every dtype (where the search
    # is looser), "balle" in float32 only (float64 keeps its values), so float32 gives optimal <= balle exactly.
    unit = 2.0**-53 if use_x64 else 2.0**-24
    slack = (6 * np.abs(np.log(kappas)) + 10) * unit
    assert np.all(opt <= balle * (1 + (slack if use_x64 else 0.0))), np.c_[kappas, rhos, opt, balle]
    for k, r, o, b, tol in zip(kappas, rhos, opt, balle, slack):
        cor4, floor = float(_mp_cor4(k, r)), float(_mp_gdp(k, math.sqrt(2 * r)))
        assert o <= cor4 * (1 + 2 * tol), (k, r, o, cor4)  # the rounding bound, and the rounding it bounds
        assert o >= floor and b >= floor, (k, r, o, b, floor)
        assert b >= cor4 * (1 - (tol if use_x64 else 0.0)), (k, r, b, cor4)  # float32: never below Cor. 4


def _kappa_grid():
    return np.geomspace(1e-35, 0.9, 60)


def test_float32_bounds_never_below_kappa_at_no_leakage():
    """Regression (float32): log(kappa) was rounded to float32 before exp, so rero_from_dp(kappa, 0),
    rero_from_approx_dp(kappa, 0, 0) and rero_gdp(kappa, 0) came out below kappa, their exact value, by up to
    3.6e-6, 3.6e-6 and 1.9e-5 relative (an upper bound must never be below it). Reference: kappa itself (float64)."""
    ks = _kappa_grid()
    for name, out in [("dp", rero_from_dp(ks, 0.0)), ("approx_dp", rero_from_approx_dp(ks, 0.0, 0.0)),
                      ("gdp", rero_gdp(ks, 0.0)), ("zcdp", rero_from_zcdp(ks, 0.0)),
                      ("zcdp balle", rero_from_zcdp(ks, 0.0, method="balle")), ("rdp", rero_from_rdp(ks, 0.0, 2.0))]:
        assert out.dtype == jnp.float32
        got = np.asarray(out, np.float64)
        assert np.all(got >= ks), (name, ks[got < ks], got[got < ks])
        # and tight: the rounding bounds are a few |log kappa| ulps (rero_gdp's grow like Phi^{-1}(kappa)^2: 1.2e-4;
        # rero_from_rdp's float32 bisection margins were already 3.4% at kappa = 1e-35 before the rounding bound)
        if name != "rdp":
            assert np.all(got <= ks * (1 + (3e-4 if name == "gdp" else 1e-4))), name


def test_float32_bounds_never_below_mpmath():
    """Regression (float32): rero_from_rdp (documented "never below the exact value") fell below the exact optimal
    conversion by up to 3.5e-6 relative at 30 of 270 points (kappa = 1e-30, eps = 0.01, order 64), and rero_from_dp,
    rero_gdp below their closed forms. References in 50/60-digit mpmath at the float64 inputs."""
    import mpmath as mp

    kappas = [1e-30, 3e-27, 1e-12, 1e-3, 0.6, 0.97]
    for k in kappas:
        for eps in (1e-7, 1e-4, 0.01, 0.3, 2.0):
            with mp.workdps(50):
                kk, ee = mp.mpf(k), mp.mpf(eps)
                want_dp = min(kk * mp.exp(ee), 1 - mp.exp(-ee) * (1 - kk))
                want_adp = min(1, kk * mp.exp(ee) + mp.mpf(1e-9), 1 - mp.exp(-ee) * (1 - mp.mpf(1e-9) - kk))
            assert float(rero_from_dp(k, eps)) >= want_dp, (k, eps)
            assert float(rero_from_approx_dp(k, eps, 1e-9)) >= want_adp, (k, eps)
            assert float(rero_gdp(k, eps)) >= _mp_gdp(k, eps), (k, eps)
            assert float(rero_from_zcdp(k, eps, method="balle")) >= _mp_cor4(k, eps), (k, eps)
            wants = {order: _mp_rdp_optimal(k, eps, order) for order in (1.5, 8.0, 64.0)}
            # the curve: the smaller of its two orders' bounds
            curve = float(rero_from_rdp_curve(k, np.array([1.5, 64.0]), np.array([eps, eps])))
            assert curve >= min(wants[1.5], wants[64.0]), (k, eps)
            for order, want in wants.items():
                assert float(rero_from_rdp(k, eps, order)) >= want, (k, eps, order)
                with mp.workdps(50):
                    want_b = min(1, (mp.mpf(k) * mp.exp(mp.mpf(eps))) ** (1 - 1 / mp.mpf(order)))
                assert float(rero_from_rdp(k, eps, order, method="balle")) >= want_b, (k, eps, order)


def test_concrete_extreme_kappa_in_rdp_curve_and_zcdp():
    """Regression (float32): rero_from_rdp_curve and rero_from_zcdp took jnp.log after the float32 cast, so the valid
    kappa = 1e-40 (0 in float32) and 1 - 1e-9 (1 there) gave NaN silently. Reference: the same bounds in float64 (their
    float64 logs are exact to rounding; kappa = 1e-40 and 1 - 1e-9 are float64 numbers)."""
    orders, rdp = np.array([2.0, 4.0]), np.array([1.0, 2.0])
    with jax.enable_x64(True):
        want = {k: (float(rero_from_rdp_curve(k, orders, rdp)), float(rero_from_zcdp(k, 0.5))) for k in (1e-40, 1 - 1e-9)}
    for k, (want_curve, want_zcdp) in want.items():
        got_curve, got_zcdp = float(rero_from_rdp_curve(k, orders, rdp)), float(rero_from_zcdp(k, 0.5))
        # float32: the bound rounded up by its rounding bound (|log kappa| ~ 92 ulps) or 1
        assert want_curve <= got_curve <= min(want_curve * (1 + 1e-4), 1.0), (k, got_curve, want_curve)
        assert want_zcdp <= got_zcdp <= min(want_zcdp * (1 + 1e-4), 1.0), (k, got_zcdp, want_zcdp)
        assert float(rero_from_rdp_curve(k, orders, rdp, method="balle")) >= want_curve


def test_baseline_kappa_gaussian_no_underflow_to_zero():
    """Regression (float32): 0.5 (eta / sigma)^2 underflowed, so baseline_kappa_gaussian(1e-20, 1, 1) was 0 (exact
    7.98e-21), an optimistic kappa that rero_from_dp refuses. Reference: P(d/2, eta^2 / (2 sigma^2)) in mpmath."""
    import mpmath as mp

    for eta, sigma, d in [(1e-20, 1.0, 1), (1e-19, 1.0, 1), (3e-30, 1.0, 1), (1.0, 1e21, 1), (1e-40, 1e-30, 3)]:
        with mp.workdps(50):
            want = float(mp.gammainc(mp.mpf(d) / 2, 0, mp.mpf(eta) ** 2 / (2 * mp.mpf(sigma) ** 2), regularized=True))
        got = float(baseline_kappa_gaussian(eta, sigma, d))
        np.testing.assert_allclose(got, want, rtol=2e-5)  # float32: exp of a log of ~50, a few ulps of it
        assert float(rero_from_dp(got, 1.0)) >= got  # feeds the ReRo bounds
    # Exact kappa below float32's range (2.7e-50): the smallest normal number, an upper bound (not 0)
    assert float(baseline_kappa_gaussian(0.01, 1.0, 20)) == np.finfo(np.float32).tiny
    assert float(baseline_kappa_gaussian_tail_bound(0.01, 1.0, 20)) == np.finfo(np.float32).tiny
    assert float(baseline_kappa_gaussian_tail_bound(1e-40, 1.0, 1)) >= float(baseline_kappa_gaussian(1e-40, 1.0, 1)) > 0


def test_baseline_kappa_uniform_ball_infinite_dim():
    """Regression: eta >= 1 with dim = inf gave exp(inf * 0) = NaN; the exact kappa is 1 (the ball covers the prior)."""
    assert float(baseline_kappa_uniform_ball(1.0, np.inf)) == 1.0
    assert float(baseline_kappa_uniform_ball(2.0, np.inf)) == 1.0
    assert float(baseline_kappa_uniform_ball(0.5, np.inf)) == np.finfo(np.float32).tiny  # 0.5^inf = 0: the floor
