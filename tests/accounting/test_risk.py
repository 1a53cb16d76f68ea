"""recon_jax.accounting.privacy_bounds: the typed summary of every route for one DP-SGD configuration."""

import json
import math

import numpy as np
import pytest
from scipy import stats

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
