"""recon_jax.accounting.privacy_bounds: the typed summary of every route for one DP-SGD configuration."""

import json
import math

import numpy as np
import pytest
from scipy import optimize, stats

from recon_jax.accounting import PrivacyBounds, ReroBounds, privacy_bounds, tightest_rero


def test_full_batch_gdp_route_is_the_closed_form():
    b = privacy_bounds(4.0, 1.0, 100, 1e-5, 1.0, 784, kappas=[0.01, 0.1, 0.5])
    assert isinstance(b, PrivacyBounds) and all(isinstance(r, ReroBounds) for r in b.rero)
    for k in (0.01, 0.1, 0.5):
        want = stats.norm.cdf(stats.norm.ppf(k) + math.sqrt(100) / 4.0)
        np.testing.assert_allclose(b.at(k).rero_gdp, want, rtol=1e-5)
        # every route is an upper bound on the same quantity, and the GDP one is exact for the Gaussian
        assert b.at(k).rero_gdp <= min(b.at(k).rero_rdp, b.at(k).rero_zcdp, b.at(k).rero_dp) + 1e-6
        assert tightest_rero(b.at(k)) == (pytest.approx(b.at(k).rero_gdp), "rero_gdp")
        assert b.at(k).rero_pld is None  # full batch: the closed form, not a PLD curve
    assert b.eps_pld <= b.eps_rdp  # the PLD accountant is tighter than RDP
    with pytest.raises(KeyError, match="kappa=0.2"):
        b.at(0.2)


def test_every_route_bounds_the_exact_gaussian_curve_at_small_kappa():
    """One full-batch step at sigma = 1 is exactly 1-GDP: no valid ReRo bound lies below Phi(Phi^-1(kappa) + 1)
    (SciPy). ``rero_dp`` once took the RDP accountant's eps at delta = 1e-5 as pure eps-DP (delta dropped): at
    kappa = 1e-8 it gave 1.13e-6 against the exact 1.99e-6."""
    b = privacy_bounds(1.0, 1.0, 1, 1e-5, 1.0, 784, kappas=[1e-12, 1e-8, 1e-4, 0.01])
    for k in (1e-12, 1e-8, 1e-4, 0.01):
        exact = stats.norm.cdf(stats.norm.ppf(k) + 1.0)
        r = b.at(k)
        for route in ("rero_dp", "rero_rdp", "rero_zcdp", "rero_gdp"):
            assert getattr(r, route) >= exact * (1 - 1e-4), (k, route, getattr(r, route), exact)


def test_full_batch_every_field_is_its_closed_form(x64):
    """Every number of the summary, not only the GDP route: each field from its formula (SciPy / NumPy), so that a
    field computed with the wrong argument (steps dropped, eps_pld for eps_rdp, sigma * sqrt(T) for sigma / sqrt(T),
    C left out) is caught. sigma = 16, T = 100, C = 2, N = 784; num_params = 1 for the p = 1 capacity closed form."""
    sigma, steps, delta, c, n, eta = 16.0, 100, 1e-5, 2.0, 784, 10.0
    b = privacy_bounds(sigma, 1.0, steps, delta, c, n, kappas=[0.01, 0.1, 0.5], eta_mse=eta, kappa_at_eta=0.003,
                       num_params=1)
    mu = math.sqrt(steps) / sigma
    # Ziller et al.: E[MSE] >= C^2 sigma^2 / T, PSNR <= 10 log10(T / (C^2 sigma^2)) at data range 1, NCC <=
    # (1 + N sigma^2 / T)^(-1/2), P[MSE <= eta] = P[chi2_N <= N eta T / (C^2 sigma^2)]. Closed forms in float64.
    np.testing.assert_allclose(b.ziller_mse_lower_bound, c**2 * sigma**2 / steps, rtol=1e-12)
    np.testing.assert_allclose(b.ziller_psnr_upper_bound, 10 * math.log10(steps / (c**2 * sigma**2)), rtol=1e-12)
    np.testing.assert_allclose(b.ziller_ncc_upper_bound, (1 + n * sigma**2 / steps) ** -0.5, rtol=1e-12)
    np.testing.assert_allclose(b.ziller_p_mse_below_eta, stats.chi2.cdf(n * eta * steps / (c**2 * sigma**2), n),
                               rtol=1e-10)
    # Bayes' capacity of T releases = one release at sigma / sqrt(T); p = 1: log(1 + 2 / (sqrt(2 pi) s)).
    s_eff = sigma / math.sqrt(steps)
    np.testing.assert_allclose(b.log_bayes_capacity, math.log1p(2 / (math.sqrt(2 * math.pi) * s_eff)), rtol=1e-12)
    # eps of mu-GDP at delta (SciPy brentq on Dong et al.'s Cor. 2.13): the PLD accountant's pessimistic estimate
    # sits at most 1e-4 above it (observed 2.4e-7); the RDP accountant above both.
    exact = optimize.brentq(lambda e: stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2)
                            - delta, 0.0, 100.0, xtol=1e-14)
    assert exact * (1 - 1e-9) <= b.eps_pld <= exact * (1 + 1e-4) < b.eps_rdp
    for k in (0.01, 0.1, 0.5, 0.003):
        r = b.at(k)
        np.testing.assert_allclose(r.rero_gdp, stats.norm.cdf(stats.norm.ppf(k) + mu), rtol=1e-10)
        # Thm 2 for (eps_rdp, delta)-DP: 1 - f(kappa) on the two branches of the (eps, delta)-DP trade-off curve.
        e = b.eps_rdp
        np.testing.assert_allclose(r.rero_dp, min(1.0, k * math.exp(e) + delta, 1 - math.exp(-e) * (1 - delta - k)),
                                   rtol=1e-10)
        # zCDP (rho = T / (2 sigma^2), all orders) is tighter than the RDP curve on its finite grid, and both are
        # looser than the exact GDP curve: a rho or a curve without the T steps would break the order.
        assert r.rero_gdp < r.rero_zcdp <= r.rero_rdp * (1 + 1e-9) < r.rero_dp


def test_subsampled_has_no_zcdp_route_and_adds_the_threshold_row():
    b = privacy_bounds(1.0, 0.01, 1000, 1e-5, 1.0, 784, kappas=[0.1], eta_mse=0.01, kappa_at_eta=0.003)
    assert [r.kappa for r in b.rero] == [0.1, 0.003]
    assert all(r.rero_zcdp is None for r in b.rero)
    # q < 1 is not GDP: the hypothesis-testing route is the PLD trade-off curve, labelled as such (issue 36)
    assert all(r.rero_gdp is None and r.rero_pld is not None for r in b.rero)
    value, route = tightest_rero(b.at(0.003))
    assert route in ("rero_pld", "rero_rdp") and value == min(b.at(0.003).rero_pld, b.at(0.003).rero_rdp)
    d = b.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["rero"][1]["kappa"] == 0.003 and d["eta_mse"] == 0.01 and 0 <= d["ziller_p_mse_below_eta"] <= 1
    assert "eta_mse" not in privacy_bounds(1.0, 0.01, 10, 1e-5, 1.0, 784, kappas=[0.1]).to_dict()


def test_tightest_rero_reads_dicts_and_skips_missing_routes():
    assert tightest_rero({"kappa": 0.1, "rero_gdp": 0.4, "rero_rdp": 0.3, "rero_zcdp": None}) == (0.3, "rero_rdp")


@pytest.mark.parametrize("args, name", [((0.0, 1.0, 10), "noise_multiplier"), ((1.0, 0.0, 10), "sample_rate"),
                                        ((1.0, 1.5, 10), "sample_rate"), ((1.0, 1.0, 0), "steps")])
def test_bad_configuration_names_the_argument(args, name):
    with pytest.raises(ValueError, match=name):
        privacy_bounds(*args, 1e-5, 1.0, 784, kappas=[0.1])


def test_from_dict_inverts_to_dict_through_json():
    """The JSON form (what the risk report stores and a rerun reads) gives back the same bounds, field for field:
    full batch and subsampled, with and without the eta fields."""
    for b in (privacy_bounds(4.0, 1.0, 100, 1e-5, 1.0, 784, kappas=[0.01, 0.1], eta_mse=0.02, kappa_at_eta=0.003,
                             num_params=7960),
              privacy_bounds(1.0, 0.01, 100, 1e-5, 1.0, 784, kappas=[0.1])):
        back = PrivacyBounds.from_dict(json.loads(json.dumps(b.to_dict())))
        assert back == b and back.to_dict() == b.to_dict()
        assert all(isinstance(r, ReroBounds) for r in back.rero) and isinstance(back.rero, tuple)
