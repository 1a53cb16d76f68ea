"""pld_tradeoff where mu = sqrt(steps) / sigma is large, and the hull and profile helpers behind it.

References: for q = 1 the exact trade-off curve is mu-GDP's, f(a) = Phi(Phi^-1(1 - a) - mu) (SciPy, checked against
mpmath at 60 digits), and its privacy profile 1 - delta(eps) = Phi(eps / mu - mu / 2) + e^eps Phi(-eps / mu - mu / 2);
the helpers against brute force over the same points and the profile's definition summed exactly (math.fsum).
"""

import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from recon_jax.accounting import pld_tradeoff
from recon_jax.accounting._tradeoff import profile_at_losses, tradeoff_on_hull, upper_envelope, upper_hull

_ALPHAS = np.logspace(-300, -12, 97)


def _gdp(alphas, mu):
    return stats.norm.cdf(stats.norm.isf(alphas) - mu)


def test_scipy_reference_matches_mpmath():
    """The SciPy reference at alphas down to 1e-300 against mpmath at 60 digits (relative 1e-11: ndtri's tail)."""
    mu = 1 / 0.03
    with mpmath.workdps(60):
        for a in (1e-300, 1e-250, 5e-153, 1e-12):
            z = mpmath.findroot(lambda t: mpmath.ncdf(-t) - mpmath.mpf(a), float(stats.norm.isf(a)))
            ref = float(mpmath.ncdf(z - mpmath.mpf(1) / mpmath.mpf("0.03")))
            assert _gdp(np.array([a]), mu)[0] == pytest.approx(ref, rel=1e-11, abs=1e-300)


@pytest.mark.parametrize("sigma,steps,atol", [(0.03, 1, 2e-9), (1.0, 1000, 2e-6)])
def test_extreme_alphas_against_the_exact_gdp_curve(sigma, steps, atol):
    """q = 1, alphas 1e-300..1e-12. 1 - delta(eps) from the PLD is 0 (up to the rounding of its cumulative sums) for
    eps up to ~300, where the exact one is 1e-62..1e-14: a flat run that broke the concavity the binary search on
    chord slopes assumes, so f came out ~1e-161 where the exact curve is 0.68 (alpha 1e-250), 0.41 (1e-216), ...
    Now never above the exact curve (its SciPy value plus 1e-12 of it: the reference's own rounding), and below it
    by at most ``atol``: the PLD's mass above 1 (1.7e-9 after one step at sigma = 0.03; 1.4e-7 after composing 1000
    steps, where the pessimistic discretisation leaves f up to 1.1e-6 low)."""
    f = pld_tradeoff(sigma, 1.0, steps, _ALPHAS)
    exact = _gdp(_ALPHAS, math.sqrt(steps) / sigma)
    assert np.all(f <= exact * (1 + 1e-12)), np.max(f - exact)
    np.testing.assert_allclose(f, exact, rtol=0, atol=atol)
    assert np.all(np.diff(f) <= 0)  # non-increasing in alpha


def test_extreme_alphas_never_above_at_a_coarse_grid():
    """Interval 1e-2 (sigma = 0.03): dp_accounting's profile is up to 1.5e-14 above the exact one (its probabilities
    are differences of divergences ~1 over e^0.01 - 1); the hull's points are lowered by that rounding, so f stays
    below the exact curve where it is 1e-11..1e-6 (it was above it there, by ~1e-14, before that margin)."""
    f = pld_tradeoff(0.03, 1.0, 1, _ALPHAS, value_discretization_interval=1e-2)
    exact = _gdp(_ALPHAS, 1 / 0.03)
    assert np.all(f <= exact * (1 + 1e-12)), np.max(f - exact)
    np.testing.assert_allclose(f, exact, rtol=0, atol=2e-7)  # the coarser grid's pessimism


def test_hull_envelope_equals_brute_force():
    """A concave curve after a flat run of zeros with rounding noise (the shape at large mu), and random points: the
    supremum over the hull equals the brute-force maximum over all points where that is positive (only there is it
    used: f >= 0 anyway; rtol 1e-14: the same products, maybe at a neighbour within rounding)."""
    rng = np.random.default_rng(0)
    eps = np.linspace(0.0, 60.0, 3001)
    x = np.exp(eps)
    y = np.clip(1.0 - np.exp(-(x / 1e15)), 0.0, None) + rng.normal(scale=1e-17, size=eps.size)
    y[:1500] = np.abs(rng.normal(scale=1e-16, size=1500)) * (rng.uniform(size=1500) < 0.2)
    alphas = np.concatenate([np.logspace(-30, 0, 61), [0.0]])
    for xs, ys in ((x, y), (np.sort(rng.uniform(size=400)), rng.uniform(size=400))):
        brute = np.max(ys[None, :] - alphas[:, None] * xs[None, :], axis=1)
        hulls = [upper_hull(xs, ys, passes=p) for p in (0, 1, 64)]  # 0, 1: the monotone chain finishes
        for h in hulls:
            got = upper_envelope(xs[h], ys[h], alphas)
            np.testing.assert_allclose(np.maximum(got, 0.0), np.maximum(brute, 0.0), rtol=1e-14, atol=0)  # f >= 0
        np.testing.assert_array_equal(hulls[0], hulls[2])
    y = np.clip(y, 0, 1)
    full = tradeoff_on_hull(eps, y, alphas)
    brute1 = np.max(y[None, :] - alphas[:, None] * x[None, :], axis=1)
    brute2 = np.max(np.exp(-eps)[None, :] * (y[None, :] - alphas[:, None]), axis=1)
    np.testing.assert_allclose(full, np.maximum(np.maximum(brute1, brute2), 0.0), rtol=1e-14, atol=0)


def test_profile_complement_is_accurate_where_tiny():
    """1 - delta(eps) from the sums of non-negative terms against its definition summed exactly (math.fsum), on a
    mu-GDP-shaped PLD (losses ~ N(mu^2 / 2, mu^2), mu = 28.3): to 1e-12 relative where it is 1e-46..0.5; 1 - delta
    from delta is only accurate to ~1e-16 absolute there (every value below ~1e-16 is 0 or noise)."""
    mu2 = 800.0
    losses = np.linspace(-200.0, 1000.0, 12001)
    probs = stats.norm.pdf(losses, loc=mu2 / 2, scale=math.sqrt(mu2))
    probs *= (1 - 1e-12) / math.fsum(probs.tolist())
    inf_mass = 1.0 - math.fsum(probs.tolist())  # exact (Sterbenz): the total is 1, the excess term 0
    eps = np.array([0.0, 100.0, 200.0, 300.0, 400.0])
    delta, comp = profile_at_losses(losses, probs, inf_mass, eps, complement=True)
    for e, c in zip(eps, comp):
        naive = math.fsum([p for l, p in zip(losses, probs) if l <= e]
                          + [p * math.exp(e - l) for l, p in zip(losses, probs) if l > e])
        assert c == pytest.approx(naive, rel=1e-12, abs=0)
    assert comp[0] < 1e-40 and comp[-1] > 0.4
    np.testing.assert_allclose(comp, 1.0 - delta, rtol=0, atol=1e-14)  # the same, up to cumsum rounding in delta
