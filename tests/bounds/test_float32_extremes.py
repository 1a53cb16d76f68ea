"""Valid inputs at float32's extremes give finite values in the documented range (reliability issue, item 4:
they were validated in float64, then cast to float32, where they under/overflowed to NaN or 0).

References: SciPy/NumPy in float64. Where float32 cannot hold the true value, the bound must stay a valid
upper bound (>= the float64 value) in the stated range."""

import jax
import numpy as np
import pytest
from scipy import special as sps

from recon_jax import bounds

TINY32 = np.finfo(np.float32).tiny


def _f32(x):
    x = np.asarray(x)
    assert x.dtype == np.float32  # these tests are about float32 (no x64 fixture)
    return float(x)


def test_rero_gdp_tiny_kappa_is_a_finite_upper_bound():
    got = _f32(bounds.rero_gdp(1e-40, 1.0))
    true = sps.ndtr(sps.ndtri(1e-40) + 1.0)  # 4e-35
    assert np.isfinite(got) and true <= got <= 1e-31  # kappa raised to float32's smallest normal: conservative


def test_rero_from_dp_kappa_near_one():
    assert _f32(bounds.rero_from_dp(1 - 1e-9, 0.0)) == 1.0  # 1 - 1e-9 rounds to 1 in float32


@pytest.mark.parametrize("kappa,eps", [(1e-40, 20.0), (1e-300, 660.0)])
def test_rero_from_dp_tiny_kappa_in_log_space(kappa, eps):
    true = np.exp(np.log(kappa) + eps)
    np.testing.assert_allclose(_f32(bounds.rero_from_dp(kappa, eps)), true, rtol=1e-4)  # float32: |log kappa| ~ 690 carries ~4e-5 abs. error


def test_rero_from_rdp_order_near_one():
    got = _f32(bounds.rero_from_rdp(0.01, 1.0, 1 + 1e-12))
    true = np.exp((1 - 1 / (1 + 1e-12)) * (np.log(0.01) + 1.0))  # 1 - 3.6e-12
    assert got == np.float32(true) == 1.0


def test_rero_from_rdp_tiny_kappa():
    # Balle et al. Thm 2 in closed form: (kappa e^eps)^(1 - 1/alpha).
    # 3e-5: float32 bounds are rounded up by a bound on their rounding error (~330 ulps here: |log kappa| = 92)
    np.testing.assert_allclose(_f32(bounds.rero_from_rdp(1e-40, 1.0, 2.0, method="balle")), np.sqrt(1e-40 * np.e),
                               rtol=3e-5)
    # The optimal conversion (the default; its accuracy is tested against riskcal in test_rero.py) is tighter, and
    # float32 gives the float64 value: float32 rounding of the logs only.
    with jax.enable_x64(True):
        exact = float(bounds.rero_from_rdp(1e-40, 1.0, 2.0))
    assert exact < np.sqrt(1e-40 * np.e)
    # 3e-5: and rounded up by a bound on their rounding error (~2 |log kappa| + 12 = 196 ulps here)
    assert exact <= _f32(bounds.rero_from_rdp(1e-40, 1.0, 2.0)) <= exact * (1 + 3e-5)


def test_psnr_upper_bound_tiny_sigma_is_finite():
    np.testing.assert_allclose(_f32(bounds.psnr_upper_bound(1e-300, 1.0)), -20 * np.log10(1e-300), rtol=1e-6)


def test_baseline_kappa_uniform_ball_underflow_stays_positive_and_feeds_rero():
    kappa = bounds.baseline_kappa_uniform_ball(0.5, 200)
    assert _f32(kappa) == TINY32 >= 0.5**200  # the smallest normal float32: an upper bound on 0.5^200
    gamma = _f32(bounds.rero_gdp(kappa, 1.0))  # was refused: kappa = 0 is outside (0, 1)
    assert sps.ndtr(sps.ndtri(0.5**200) + 1.0) <= gamma < 1e-30


def test_baseline_kappa_uniform_ball_float64_exact(x64):
    np.testing.assert_allclose(float(bounds.baseline_kappa_uniform_ball(0.5, 200)), 0.5**200, rtol=1e-12)


@pytest.mark.parametrize("kappa,dim", [(1e-3, 3162.2776), (1e-3, 2.0), (3.0, 13700.0), (1.0, 3.0)])
def test_log_bayes_capacity_vmf_small_kappa_float32(kappa, dim):
    """Found by tests/test_fuzz.py: float32 gave log C = -9.5e-4 (< 0, impossible) at kappa 1e-3, p 3162."""
    import mpmath as mp

    mp.mp.dps = 40
    k, p = mp.mpf(kappa), mp.mpf(float(np.float32(dim)))
    nu = p / 2 - 1
    want = float(mp.log(2) + nu * mp.log(k) + k - mp.loggamma(p / 2) - p / 2 * mp.log(2) - mp.log(mp.besseli(nu, k)))
    got = _f32(bounds.log_bayes_capacity_vmf(kappa, dim))
    np.testing.assert_allclose(got, want, rtol=1e-5)  # float32: a few ulps after the exact cancellation


@pytest.mark.parametrize("call,want", [
    (lambda: bounds.baseline_kappa_gaussian(1e-3, 1e8, 1e4), TINY32),  # a kappa: floored, an upper bound (not 0)
    (lambda: bounds.rero_mse(1e-25, 1.0, 1.0, 1e4), 0.0),
    (lambda: bounds.rero_psnr(250.0, 1.0, 1.0, 1e4), 0.0),
])
def test_gammainc_lower_tail_at_large_a_is_zero_not_nan(call, want):
    """P(a, x) for a >= 5000 and x < 1e-19 was NaN; the true values here are below 1e-300 (underflow to 0; the prior's
    kappa is returned as the smallest normal number instead, as baseline_kappa_uniform_ball does)."""
    got = _f32(call())
    assert got == want


def test_shape_mismatch_is_a_value_error_naming_the_shapes():
    with pytest.raises(ValueError, match=r"shapes \[\(2,\), \(3,\)\] do not broadcast"):  # was JAX's TypeError
        bounds.rero_gdp(np.full(2, 0.1), np.ones(3))
    with pytest.raises(ValueError, match="do not broadcast"):
        bounds.psnr_upper_bound(np.ones(2), np.ones(3))


@pytest.mark.parametrize("name,args", [
    ("gammainc", (2.0, 1.0)),  # a < 20: the small-a prefactor
    ("gammaincc", (30.0, 25.0)),
    ("rero_mse", (0.1, 1.0, 1.0, 10)),
    ("baseline_kappa_gaussian", (1.0, 1.0, 1)),
    ("rero_from_zcdp", (0.01, 0.5)),  # the golden-section search's carry
])
def test_float32_input_under_x64_stays_float32(name, args):
    """With x64 on, float32 arguments give a float32 result (no float64 constant promotes one branch of a cond or a
    loop carry, which JAX refuses), equal to SciPy's float64 value to float32 rounding."""
    from recon_jax import special

    fn = getattr(special, name, None) or getattr(bounds, name)
    ref = {"gammainc": lambda a, x: sps.gammainc(a, x), "gammaincc": lambda a, x: sps.gammaincc(a, x),
           "rero_mse": lambda eta, s, c, d: sps.gammainc(d / 2, d * eta / (2 * c * c * s * s)),
           "baseline_kappa_gaussian": lambda eta, s, d: sps.gammainc(d / 2, 0.5 * (eta / s) ** 2)}
    with jax.enable_x64(True):
        got = fn(*[np.float32(a) for a in args])
        exact = float(fn(*[np.float64(a) for a in args]))
    assert got.dtype == np.float32
    want = ref[name](*args) if name in ref else exact  # rero_from_zcdp: its float64 value (checked in test_rero)
    np.testing.assert_allclose(float(got), want, rtol=2e-6)
    np.testing.assert_allclose(exact, want, rtol=1e-12)


# sigma = 1e20, C = 1, T = 1e10: C^2 sigma^2 / T = 1e30 is a float32 number, (C sigma)^2 = 1e40 is not.
_S, _C, _T = 1e20, 1.0, 1e10


def test_noise_variance_no_intermediate_overflow_mse():
    """(C sigma)^2 / T overflowed float32 to inf although the quotient is representable (audit t6)."""
    np.testing.assert_allclose(_f32(bounds.mse_lower_bound(_S, _C, _T)), 1e30, rtol=1e-6)  # float32 rounding
    np.testing.assert_allclose(_f32(bounds.expected_mse(_S, _C, 0.0, 1.0, _T)), 1e30, rtol=1e-6)


def test_noise_variance_no_intermediate_overflow_rero_mse():
    """An upper bound on a probability returned 0.0 (x = N eta T / (2 C^2 sigma^2) became 1e30 / inf = 0)."""
    eta, dim = 1e30, 2
    want = sps.gammainc(dim / 2, dim * eta * _T / (2 * (_C * _S) ** 2))  # P(1, 1) = 1 - 1/e
    np.testing.assert_allclose(_f32(bounds.rero_mse(eta, _S, _C, dim, _T)), want, rtol=1e-5)


def test_noise_variance_no_intermediate_overflow_expected_ncc():
    """expected_ncc gave 0.0 for 1 / sqrt(2) (noise variance inf); expected_ncc_exact and ncc_samples likewise."""
    np.testing.assert_allclose(_f32(bounds.expected_ncc(1e30, 1.0, _S, _C, _T)), 1 / np.sqrt(2), rtol=1e-6)
    # expected_ncc_exact: r = beta sqrt(N V) / s = sqrt(10); reference: the non-central chi closed form in SciPy.
    dim, r = 10, np.sqrt(10.0)
    m = dim - 1
    want = np.sqrt(2) * r / m * np.exp(sps.gammaln((m + 1) / 2) - sps.gammaln(m / 2)) * sps.hyp1f1(0.5, m / 2 + 1,
                                                                                                 -r * r / 2)
    np.testing.assert_allclose(_f32(bounds.expected_ncc_exact(1e30, 1.0, _S, _C, dim, _T)), want, rtol=1e-5)
    # ncc_samples: C sigma = 1e40 overflowed before the division by sqrt(T) = 1e15 (all samples NaN).
    s = np.asarray(bounds.ncc_samples(np.linspace(0.0, 1.0, 8), 1e20, 1e20, jax.random.key(0), 4, steps=1e30))
    assert s.dtype == np.float32 and np.isfinite(s).all()
