"""Tests for recon_jax.bounds.bayes_capacity (Biswas et al., Thms. 5 and 6) against mpmath references."""

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

from recon_jax.bounds import log_bayes_capacity_gaussian, log_bayes_capacity_vmf


def _mp_gaussian_sum(sigma, p, radius):
    """Theorem 5 with the proof's constant (Z / ..., see the module erratum), exact finite sum in mpmath."""
    with mpmath.workdps(50):
        s, r, pm = mpmath.mpf(sigma), mpmath.mpf(radius), mpmath.mpf(p)
        z = mpmath.fsum(
            mpmath.gamma(mpmath.mpf(p - i) / 2) * (mpmath.sqrt(2) * s) ** (p - i) * mpmath.binomial(p - 1, i) * r**i
            for i in range(p)
        )
        denom = 2 ** (pm / 2) * s**p
        return float(mpmath.log(z / (mpmath.gamma(pm / 2) * denom) + r**p / (mpmath.gamma(pm / 2 + 1) * denom)))


def _mp_gaussian_definition(sigma, p, radius):
    """Def. 7 directly: int_{R^p} sup_{||x||<=R} phi_sigma(y - x) dy in polar coordinates, by mpmath quadrature."""
    with mpmath.workdps(30):
        s, r, pm = mpmath.mpf(sigma), mpmath.mpf(radius), mpmath.mpf(p)
        area = 2 * mpmath.pi ** (pm / 2) / mpmath.gamma(pm / 2)
        norm = (2 * mpmath.pi * s * s) ** (-pm / 2)

        def integrand(t):  # t = ||y||; the sup is attained at the nearest point of the ball
            dist = max(t - r, 0)
            return area * t ** (p - 1) * norm * mpmath.exp(-dist * dist / (2 * s * s))

        return float(mpmath.log(mpmath.quad(integrand, [0, r, r + 10 * s, r + 40 * s, mpmath.inf])))


@pytest.mark.parametrize(
    "sigma,p,radius",
    [(1.0, 1, 1.0), (0.5, 2, 1.0), (1.0, 10, 3.0), (0.1, 100, 1.0), (2.0, 1000, 1.0), (1e-3, 50, 1.0), (1e3, 500, 2.0)],
)
def test_gaussian_matches_corrected_theorem5_sum(x64, sigma, p, radius):
    ref = _mp_gaussian_sum(sigma, p, radius)
    # log C up to ~6e3 here; quadrature + lgamma rounding: 1e-12 relative or 1e-12 absolute.
    np.testing.assert_allclose(float(log_bayes_capacity_gaussian(sigma, p, radius)), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sigma,p,radius", [(1.0, 1, 1.0), (0.7, 3, 1.0), (2.0, 7, 2.0)])
def test_gaussian_matches_definition_quadrature(x64, sigma, p, radius):
    # Independent of the paper's algebra: integrates Def. 7; confirms the erratum (the printed 2 Z is wrong).
    ref = _mp_gaussian_definition(sigma, p, radius)
    np.testing.assert_allclose(float(log_bayes_capacity_gaussian(sigma, p, radius)), ref, rtol=1e-10, atol=1e-12)


def test_gaussian_p1_closed_form(x64):
    for sigma in [1e-6, 0.3, 1.0, 1e6]:
        exact = math.log1p(2.0 / (math.sqrt(2 * math.pi) * sigma))
        # log C is a difference of O(1) terms: absolute accuracy 1e-13 is what float64 can promise.
        np.testing.assert_allclose(float(log_bayes_capacity_gaussian(sigma, 1)), exact, rtol=1e-12, atol=1e-13)


def _mp_gaussian_shell_integral(sigma, p, radius=1.0):
    """log C from the theorem's two terms, the shell integral J = int_0^inf (s + rho)^(p-1) e^(-s^2/2) ds by mpmath
    quadrature around its peak s* (s* (s* + rho) = p - 1), normalised there: for dimensions where the finite sum and
    the definition's quadrature are out of reach."""
    with mpmath.workdps(40):
        rho, pm = mpmath.mpf(radius) / mpmath.mpf(sigma), mpmath.mpf(p)
        peak = (-rho + mpmath.sqrt(rho**2 + 4 * (pm - 1))) / 2
        log_f = lambda s: (pm - 1) * mpmath.log(s + rho) - s * s / 2  # noqa: E731
        top = log_f(peak)
        pts = sorted({mpmath.mpf(0), max(mpmath.mpf(0), peak - 80), peak, peak + 80}) + [mpmath.inf]
        log_j = mpmath.log(mpmath.quad(lambda s: mpmath.exp(log_f(s) - top), pts)) + top
        shell = log_j + (1 - pm / 2) * mpmath.log(2) - mpmath.loggamma(pm / 2)
        ball = pm * mpmath.log(rho) - pm / 2 * mpmath.log(2) - mpmath.loggamma(pm / 2 + 1)
        return float(max(ball, shell) + mpmath.log1p(mpmath.exp(-abs(ball - shell))))


def test_gaussian_extreme_dims_finite(x64):
    for sigma in [1e-6, 1.0, 1e6]:
        for p in [1e6, 1e9]:
            val = float(log_bayes_capacity_gaussian(sigma, p))
            assert math.isfinite(val) and val >= -1e-6
            # log-space terms of size up to ~1e10 cancel: float64 leaves ~1e-6 absolute (measured <= 1.1e-6)
            assert abs(val - _mp_gaussian_shell_integral(sigma, p)) <= 1e-5 * max(1.0, abs(val)), (sigma, p, val)


def _mp_vmf(kappa, p):
    with mpmath.workdps(40):
        k, pm = mpmath.mpf(kappa), mpmath.mpf(p)
        nu = pm / 2 - 1
        c = 2 * k**nu * mpmath.exp(k) / (mpmath.gamma(pm / 2) * 2 ** (pm / 2) * mpmath.besseli(nu, k))
        return float(mpmath.log(c))


@pytest.mark.parametrize("kappa,p", [(1.0, 3), (0.01, 2), (50.0, 10), (500.0, 13700), (1e4, 13700), (3.0, 1000)])
def test_vmf_matches_mpmath(x64, kappa, p):
    np.testing.assert_allclose(float(log_bayes_capacity_vmf(kappa, p)), _mp_vmf(kappa, p), rtol=1e-12, atol=1e-12)


def test_vmf_limits(x64):
    # kappa -> 0: uniform channel, capacity 1. p = 3: C = 2 kappa / (1 - e^{-2 kappa}).
    assert abs(float(log_bayes_capacity_vmf(1e-10, 13700))) < 1e-9
    for kappa in [1e-3, 1.0, 100.0]:
        exact = math.log(2 * kappa / -math.expm1(-2 * kappa))
        np.testing.assert_allclose(float(log_bayes_capacity_vmf(kappa, 3)), exact, rtol=1e-12)


def test_jit_vmap_grad_float32(x64):
    sig = jnp.array([0.1, 1.0, 10.0])
    eager = log_bayes_capacity_gaussian(sig, 100.0)
    np.testing.assert_allclose(np.asarray(jax.jit(log_bayes_capacity_gaussian)(sig, 100.0)), np.asarray(eager), rtol=1e-13)
    np.testing.assert_allclose(
        np.asarray(jax.vmap(log_bayes_capacity_gaussian, (0, None))(sig, 100.0)), np.asarray(eager), rtol=1e-13
    )
    g = float(jax.grad(log_bayes_capacity_vmf)(10.0, 50.0))
    # central difference of the mpmath reference
    h = 1e-4
    fd = (_mp_vmf(10.0 + h, 50) - _mp_vmf(10.0 - h, 50)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-7)
    assert math.isfinite(float(jax.grad(log_bayes_capacity_gaussian)(1.0, 20.0)))
    with jax.enable_x64(False):
        v32 = log_bayes_capacity_vmf(jnp.float32(500.0), jnp.float32(13700.0))
        assert v32.dtype == jnp.float32
        np.testing.assert_allclose(float(v32), _mp_vmf(500.0, 13700), rtol=1e-4)


def test_invalid():
    with pytest.raises(ValueError, match="sigma"):
        log_bayes_capacity_gaussian(0.0, 10)
    with pytest.raises(ValueError, match="dim"):
        log_bayes_capacity_gaussian(1.0, 0.5)
    with pytest.raises(ValueError, match="dim"):
        log_bayes_capacity_vmf(1.0, 1)
    with pytest.raises(ValueError, match="kappa"):
        log_bayes_capacity_vmf(-1.0, 10)
    assert np.isnan(float(jax.jit(log_bayes_capacity_vmf)(-1.0, 10.0)))
    assert np.isnan(float(jax.jit(log_bayes_capacity_gaussian)(1.0, 0.0)))


@given(sigma=hs.floats(1e-3, 1e3), factor=hs.floats(1.01, 10.0), p=hs.integers(1, 10**5))
def test_capacity_monotone(sigma, factor, p):
    # More noise leaks less; a larger VMF concentration leaks more. float64: in float32 log C carries an absolute
    # rounding error of ~1e-7 * p (it is a difference of terms of size p log p), too coarse for small steps.
    with jax.enable_x64(True):
        _check_monotone(sigma, factor, p)


def _check_monotone(sigma, factor, p):
    assert float(log_bayes_capacity_gaussian(sigma * factor, p)) <= float(log_bayes_capacity_gaussian(sigma, p)) + 1e-4
    q = max(p, 2)
    assert float(log_bayes_capacity_vmf(sigma * factor, q)) >= float(log_bayes_capacity_vmf(sigma, q)) - 1e-4


@pytest.mark.parametrize("name,fn,args", [
    ("dim", log_bayes_capacity_gaussian, (1.0, float("inf"))),
    ("kappa", log_bayes_capacity_vmf, (float("inf"), 3.0)),
])
def test_infinite_argument_is_refused(name, fn, args):
    """dim = inf (Gaussian) and kappa = inf (VMF) passed the >= 1 / > 0 checks and came back as NaN eagerly."""
    with pytest.raises(ValueError, match=f"{name} must be finite"):
        fn(*args)
    assert np.isnan(float(jax.jit(fn)(*args)))
