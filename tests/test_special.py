"""Tests for recon_jax.special.log_iv against mpmath and SciPy references."""

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given
from hypothesis import strategies as st

from recon_jax.special import log_iv


def _ref_log_iv(nu: float, x: float, dps: int = 40) -> float:
    """Independent reference: mpmath.besseli, or mpmath's Hankel expansion (DLMF 10.40.1) for x >> nu^2."""
    with mpmath.workdps(dps):
        nu_m, x_m = mpmath.mpf(nu), mpmath.mpf(x)
        if x >= 2e4:
            assert x > 1e3 * (nu * nu + 1), "reference only valid for x >> nu^2"
            mu = 4 * nu_m * nu_m
            s = term = mpmath.mpf(1)
            for k in range(1, 80):
                term = -term * (mu - (2 * k - 1) ** 2) / (k * 8 * x_m)
                s += term
                if abs(term) < mpmath.mpf(10) ** (-dps):
                    break
            return float(x_m - mpmath.log(2 * mpmath.pi * x_m) / 2 + mpmath.log(s))
        return float(mpmath.log(mpmath.besseli(nu_m, x_m, maxterms=10**6)))


# Orders on both sides of every method switch (nu = 50, x = 20) and the large orders VMF accounting needs.
_NUS = [0.0, 1e-3, 0.5, 1.0, 7.5, 30.0, 49.9, 50.0, 50.5, 200.0, 6849.0, 1e6]
_XS = [1e-300, 1e-20, 1e-3, 0.3, 2.0, 9.0, 19.9, 20.1, 45.0, 300.0, 3000.0, 1.5e4]
_HUGE_X = [(0.0, 1e5), (2.0, 1e8), (30.0, 1e12), (0.5, 1e300), (49.0, 1e100)]


@pytest.fixture(scope="module")
def reference_grid():
    pts = [(n, x) for n in _NUS for x in _XS] + _HUGE_X
    ref = np.array([_ref_log_iv(n, x) for n, x in pts])
    nus = np.array([p[0] for p in pts])
    xs = np.array([p[1] for p in pts])
    return nus, xs, ref


def _errors(ours, ref):
    big = np.abs(ref) >= 1
    rel = np.where(big, np.abs(ours - ref) / np.where(big, np.abs(ref), 1), 0.0)
    absolute = np.where(big, 0.0, np.abs(ours - ref))
    return rel.max(), absolute.max()


def test_matches_mpmath_float64(x64, reference_grid):
    nus, xs, ref = reference_grid
    ours = np.asarray(log_iv(nus, xs))
    rel, absolute = _errors(ours, ref)
    # Docstring states 1.8e-14 relative (|log I| >= 1) and 5.1e-15 absolute; small margin for other platforms.
    assert rel < 3e-14, rel
    assert absolute < 1e-14, absolute


def test_float32_usable(reference_grid):
    nus, xs, ref = reference_grid
    keep = (xs > 1e-37) & (xs < 1e38)  # representable in float32
    raw = log_iv(nus[keep].astype(np.float32), xs[keep].astype(np.float32))
    assert raw.dtype == np.float32  # computed in float32, not promoted
    ours = np.asarray(raw, np.float64)
    assert np.all(np.isfinite(ours))
    rel, absolute = _errors(ours, ref[keep])
    # float32 epsilon 6e-8 times the conditioning of the grid points; docstring states 7e-6 / 3.4e-6.
    assert rel < 2e-5, rel
    assert absolute < 1e-5, absolute


def test_matches_scipy_ive_where_it_does_not_underflow(x64):
    rng = np.random.default_rng(0)
    nu = rng.uniform(0, 400, 300)
    x = 10 ** rng.uniform(-2, 4, 300)
    ive = sc.ive(nu, x)
    ok = (ive > 1e-290) & np.isfinite(ive)
    ref = np.log(ive[ok]) + x[ok]
    ours = np.asarray(jax.jit(log_iv)(nu[ok], x[ok]))
    # SciPy (AMOS) itself is accurate to ~1e-14 relative in I; compare on the absolute log scale.
    np.testing.assert_allclose(ours, ref, rtol=1e-13, atol=1e-12)


def test_where_scipy_underflows(x64):
    # Orders of the VMF accounting of Biswas et al. (p = 13,700): ive underflows to exactly zero here.
    nu, x = 6849.0, 5.0
    assert sc.ive(nu, x) == 0.0
    np.testing.assert_allclose(float(log_iv(nu, x)), _ref_log_iv(nu, x), rtol=1e-14)


def test_jit_vmap_eager_agree(x64):
    nus = jnp.array([0.0, 3.0, 60.0, 1e4])
    xs = jnp.array([0.5, 30.0, 2.0, 1e3])
    eager = log_iv(nus, xs)
    # jit may fuse differently from eager dispatch: allow a few ulps.
    np.testing.assert_allclose(np.asarray(jax.jit(log_iv)(nus, xs)), np.asarray(eager), rtol=1e-15)
    np.testing.assert_allclose(np.asarray(jax.vmap(log_iv)(nus, xs)), np.asarray(eager), rtol=1e-15)
    grid = jax.vmap(log_iv, (None, 0))(nus, xs)  # a parameter grid: rows over x, columns over nu
    assert grid.shape == (4, 4)
    np.testing.assert_allclose(np.asarray(grid), np.asarray(log_iv(nus[None, :], xs[:, None])), rtol=1e-15)


@pytest.mark.parametrize("nu,x", [(0.0, 1e-3), (3.0, 25.0), (60.0, 3.0), (6849.0, 100.0), (1e6, 1e3)])
def test_grad_matches_mpmath(x64, nu, x):
    with mpmath.workdps(30):
        ref = float(mpmath.diff(lambda t: mpmath.log(mpmath.besseli(nu, t)), x))
    np.testing.assert_allclose(float(jax.grad(log_iv, argnums=1)(nu, x)), ref, rtol=1e-12)


def test_grad_closed_form_half_order(x64):
    # I_{1/2}(x) = sqrt(2 / (pi x)) sinh(x)  =>  d/dx log I_{1/2} = coth(x) - 1 / (2x); covers large x too.
    x = jnp.array([1e-4, 0.7, 15.0, 21.0, 1e3, 1e5])
    g = jax.vmap(jax.grad(log_iv, argnums=1), (None, 0))(0.5, x)
    np.testing.assert_allclose(np.asarray(g), 1 / np.tanh(np.asarray(x)) - 0.5 / np.asarray(x), rtol=1e-13)
    second = jax.grad(jax.grad(log_iv, argnums=1), argnums=1)(0.5, 2.0)
    assert np.isclose(float(second), -1 / np.sinh(2.0) ** 2 + 0.5 / 4.0, rtol=1e-12)


def test_order_derivative_is_nan_not_wrong():
    assert np.isnan(float(jax.grad(lambda n: log_iv(n, 2.0))(1.0)))


def test_boundary_values(x64):
    assert float(log_iv(0.0, 0.0)) == 0.0
    assert float(log_iv(2.0, 0.0)) == -math.inf
    assert float(log_iv(2.0, math.inf)) == math.inf


def test_invalid_inputs():
    with pytest.raises(ValueError, match="nu"):
        log_iv(-0.5, 1.0)
    with pytest.raises(ValueError, match="x"):
        log_iv(1.0, np.array([1.0, -2.0]))
    with pytest.raises(ValueError, match="nu"):
        log_iv(math.nan, 1.0)
    out = jax.jit(log_iv)(jnp.array([-1.0, 1.0, 1.0]), jnp.array([1.0, -1.0, 1.0]))
    assert np.isnan(out[0]) and np.isnan(out[1]) and np.isfinite(out[2])
    assert np.isnan(float(log_iv(-1.0, 1.0, validate=False)))


@given(
    nu=st.floats(0.0, 2e4),
    x=st.floats(1e-6, 1e5),
    dnu=st.floats(0.01, 100.0),
    fx=st.floats(1.001, 10.0),
)
def test_monotone_in_order_and_argument(nu, x, dnu, fx):
    with jax.enable_x64(True):
        base = float(log_iv(nu, x))
        # I_nu(x) decreases in nu >= 0 and increases in x > 0 (DLMF 10.37).
        assert float(log_iv(nu + dnu, x)) <= base + 1e-12 * max(1.0, abs(base))
        assert float(log_iv(nu, x * fx)) >= base - 1e-12 * max(1.0, abs(base))


# ------------------------------------------------------------------------------------ gammainc (large shape)

from recon_jax.special import gammainc, gammaincc  # noqa: E402


def _mp_gammainc(a: float, x: float) -> float:
    """mpmath quadrature of the regularised integrand, split at multiples of the standard deviation sqrt(a)."""
    with mpmath.workdps(30):
        a_m, x_m = mpmath.mpf(a), mpmath.mpf(x)
        lg, sd = mpmath.loggamma(a_m), mpmath.sqrt(a_m)

        def f(t):
            return mpmath.exp((a_m - 1) * mpmath.log(t) - t - lg)

        if x < a - 1:
            pts = [x_m - k * sd for k in (40, 20, 10, 5, 2, 1, 0.5, 0)]
            return float(mpmath.quad(f, [p for p in pts if p > 0]))
        return float(1 - mpmath.quad(f, [x_m + k * sd for k in (0, 0.5, 1, 2, 5, 10, 20, 40)]))


def test_gammainc_matches_scipy_moderate_shape(x64):
    # SciPy is reliable here (checked against mpmath); includes the far lower tail down to 1e-280.
    for a in [0.5, 30.0, 4999.0, 5000.0, 2e4]:
        x = a * np.array([1e-3, 0.3, 0.6, 0.9, 0.99, 1.0, 1.01, 1.1, 1.5, 3.0])
        ours = np.asarray(gammainc(a, x))
        ref = sc.gammainc(a, x)
        np.testing.assert_allclose(ours, ref, rtol=5e-11, atol=1e-280)


def test_gammainc_and_complement_every_method_vs_scipy(x64):
    # Shapes on both sides of the Temme threshold (a = 20), arguments across the series / Temme / continued
    # fraction switches (x = a + 1, x = 2, eta = +-1 at x ~ 0.30 a and 2.35 a) and both far tails, mixed in one
    # array (the general program). Relative error of the tail that is computed directly: 2e-12 (SciPy's own
    # accuracy here, checked against mpmath, is ~1e-13; the rest is the conditioning of P in x at a ~ 1e3).
    a = np.array([0.5, 1.0, 3.7, 12.0, 19.9, 20.0, 35.0, 200.0, 1000.0])[:, None]
    x = a * np.geomspace(1e-3, 30.0, 61)[None, :]
    x = np.concatenate([x, a + 1.0, np.broadcast_to(2.0, a.shape), 0.2975 * a, 2.353 * a], axis=1)
    a = np.broadcast_to(a, x.shape)
    p, q = np.asarray(gammainc(a, x)), np.asarray(gammaincc(a, x))
    rp, rq = sc.gammainc(a, x), sc.gammaincc(a, x)
    lower = rp <= 0.5
    np.testing.assert_allclose(p[lower], rp[lower], rtol=2e-12, atol=1e-300)
    np.testing.assert_allclose(q[~lower], rq[~lower], rtol=2e-12, atol=1e-300)
    np.testing.assert_allclose(p + q, 1.0, rtol=0, atol=4e-15)  # each from the same evaluation


def test_gammainc_large_shape_program_matches_general_program(x64):
    # All a >= 20 runs the cheaper program (fewer series terms, shallower fraction); adding one small a to the
    # array forces the general one. Both must give the same values (to rounding).
    a = np.array([20.0, 64.0, 777.0, 5e4])[:, None]
    x = a * np.geomspace(0.05, 8.0, 41)[None, :]
    a = np.broadcast_to(a, x.shape)
    fast = np.asarray(gammainc(a, x))
    general = np.asarray(gammainc(np.append(a.ravel(), 1.5), np.append(x.ravel(), 1.0)))[:-1].reshape(x.shape)
    np.testing.assert_allclose(fast, general, rtol=1e-13, atol=1e-300)


def test_gammainc_extremes_are_zero_or_one_not_nan(x64):
    a = np.array([0.5, 20.0, 5000.0, 1e8, 2e9])
    for x, want in [(1e-300, 0.0), (1e-20, 0.0), (0.0, 0.0), (np.inf, 1.0)]:
        p = np.asarray(gammainc(a, x))
        assert not np.isnan(p).any()
        if want == 0.0:
            assert np.all(p[1:] == 0.0)
            np.testing.assert_allclose(p[0], sc.gammainc(0.5, x), rtol=1e-13)  # = erf(sqrt(x)), not negligible
        else:
            assert np.all(p == 1.0)
    assert float(gammaincc(5000.0, 1e-20)) == 1.0
    assert float(gammaincc(5000.0, 1e6)) == 0.0
    bad_a, bad_x = np.array([-1.0, 0.0, np.inf, np.nan, 2.0, 2.0]), np.array([1.0, 1.0, 1.0, 1.0, -1.0, np.nan])
    for f in (gammainc, gammaincc):  # invalid traced input: NaN (eager input raises, below)
        assert np.isnan(np.asarray(jax.jit(f)(bad_a, bad_x))).all()
        assert np.isnan(np.asarray(f(bad_a, bad_x, validate=False))).all()


@pytest.mark.parametrize("f", [gammainc, gammaincc])
@pytest.mark.parametrize("a,x,name", [(-1.0, 1.0, "a"), (0.0, 1.0, "a"), (np.inf, 1.0, "a"), (np.nan, 1.0, "a"),
                                      (2.0, -1.0, "x"), (2.0, np.nan, "x"), (2.0, np.array([1.0, -3.0]), "x")])
def test_gammainc_invalid_concrete_input_raises(f, a, x, name):
    """a <= 0, a = inf, x < 0 or NaN gave NaN eagerly, although a > 0, x >= 0 are documented: ValueError naming the
    argument, as log_iv (NaN under jit, above)."""
    with pytest.raises(ValueError, match=f"{name} must be"):
        f(a, x)


def test_gammainc_jit_vmap_grad(x64):
    a = jnp.array([0.7, 25.0, 4e3])
    x = jnp.array([0.4, 30.0, 3.9e3])
    eager = gammainc(a, x)
    np.testing.assert_allclose(jax.jit(gammainc)(a, x), eager, rtol=1e-14)
    np.testing.assert_allclose(jax.vmap(gammainc)(a, x), eager, rtol=1e-14)
    grad_a = jax.jit(jax.grad(gammainc, argnums=0))
    grad_x = jax.jit(jax.grad(gammaincc, argnums=1))
    for ai, xi in zip([0.7, 25.0, 4e3, 1e6], [0.4, 30.0, 3.9e3, 1e6 - 700.0]):
        with mpmath.workdps(40):
            # d/da P(a, x): central difference of mpmath's regularised incomplete gamma at 40 digits (step error
            # ~h^2 = 1e-24 relative); d/dx Q = -x^{a-1} e^{-x} / Gamma(a), evaluated in mpmath.
            h = mpmath.mpf(ai) * mpmath.mpf("1e-12")
            p_mp = lambda t: mpmath.gammainc(t, 0, xi, regularized=True)  # noqa: E731
            ref_a = float((p_mp(ai + h) - p_mp(ai - h)) / (2 * h))
            ref_x = -float(mpmath.exp((ai - 1) * mpmath.log(xi) - xi - mpmath.loggamma(ai)))
        # The order derivative differentiates the expansion: agreement to 1e-9 relative.
        np.testing.assert_allclose(float(grad_a(ai, xi)), ref_a, rtol=1e-9)
        np.testing.assert_allclose(float(grad_x(ai, xi)), ref_x, rtol=1e-11)


@pytest.mark.parametrize("a", [1e6, 2e9])
def test_gammainc_large_shape_vs_mpmath(x64, a):
    # SciPy and jax.scipy both lose accuracy here (e.g. SciPy is 60% off at a=5e8, 10 sd below the mean).
    for z in [-8.0, -2.0, 0.0, 2.0, 8.0]:
        x = a + z * math.sqrt(a)
        np.testing.assert_allclose(float(gammainc(a, x)), _mp_gammainc(a, x), rtol=1e-10, atol=1e-14)


def test_gammainc_float32_and_grad():
    # P(a, a) at a = 2.5e7 by mpmath (about 1/2 + 1 / (3 sqrt(2 pi a)))
    np.testing.assert_allclose(float(gammainc(jnp.float32(2.5e7), jnp.float32(2.5e7))), _mp_gammainc(2.5e7, 2.5e7),
                               atol=5e-6)
    with jax.enable_x64(True):
        # d/dx P(a, x) = x^{a-1} e^{-x} / Gamma(a)
        for a, x in [(3.0, 2.0), (1e6, 1e6 + 500.0)]:
            g = float(jax.grad(gammainc, argnums=1)(a, x))
            ref = math.exp((a - 1) * math.log(x) - x - math.lgamma(a))
            np.testing.assert_allclose(g, ref, rtol=1e-8)


# ---------------------------------------------------------------------------------------------------------
# log_expm1: log(exp(t) - 1), also from log t.
# ---------------------------------------------------------------------------------------------------------

from recon_jax.special import log_expm1  # noqa: E402

_T = [1e-300, 1e-200, 1e-30, 2.0**-40, 1e-12, 1e-8, 1e-3, 0.5, 1.0, 29.0, 30.0, 31.0, 100.0, 700.0, 1e4, 1e300]


def _mp_log_expm1(t):
    with mpmath.workdps(60):
        return float(mpmath.log(mpmath.expm1(mpmath.mpf(t))))


def test_log_expm1_matches_mpmath_float64(x64):
    ref = np.array([_mp_log_expm1(t) for t in _T])
    # Each branch is exact up to a few roundings of a float64 result (values from -690 to 1e300; none near 0).
    np.testing.assert_allclose(np.asarray(log_expm1(np.array(_T))), ref, rtol=1e-15)
    # From log t, t = exp(log t) carries |log t| (up to 690) times the rounding of log t.
    log_t = np.log(np.array(_T))
    np.testing.assert_allclose(np.asarray(log_expm1(log_t, log_input=True)), ref, rtol=1e-15 * np.abs(log_t).max())


def test_log_expm1_below_the_float_range_from_log_input(x64):
    # t = exp(-1e4) underflows; log(expm1(t)) = log t + t/2 + ... = -1e4 to every digit.
    assert float(log_expm1(-1e4, log_input=True)) == -1e4
    assert float(log_expm1(-np.inf, log_input=True)) == -np.inf
    assert float(log_expm1(np.inf, log_input=True)) == np.inf


def test_log_expm1_edges_jit_vmap_grad(x64):
    x = jnp.array([0.0, 1e-20, 0.3, 40.0, 1e3])
    eager = log_expm1(x)
    assert float(eager[0]) == -np.inf and float(log_expm1(np.inf)) == np.inf
    np.testing.assert_allclose(np.asarray(jax.jit(log_expm1)(x)), np.asarray(eager), rtol=1e-15)
    np.testing.assert_allclose(np.asarray(jax.vmap(log_expm1)(x)), np.asarray(eager), rtol=1e-15)
    g = np.asarray(jax.vmap(jax.grad(log_expm1))(x))
    assert g[0] == 0.0  # t = 0: the value is -inf, the gradient finite (no NaN leaks into callers' gradients)
    ref = -1.0 / np.expm1(-np.asarray(x[1:]))  # d/dt log(expm1 t) = e^t / expm1(t) = 1 / (1 - e^-t)
    np.testing.assert_allclose(g[1:], ref, rtol=1e-12)


def test_log_expm1_float32():
    out = np.asarray(log_expm1(np.array([1e-30, 0.5, 100.0], np.float32)))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [_mp_log_expm1(t) for t in (1e-30, 0.5, 100.0)], rtol=1e-6)


def test_log_expm1_invalid_inputs():
    with pytest.raises(ValueError, match="x"):
        log_expm1(-1.0)
    with pytest.raises(ValueError, match="x"):
        log_expm1(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="x"):
        log_expm1(np.nan, log_input=True)
    out = jax.jit(log_expm1)(jnp.array([-1.0, jnp.nan, 2.0]))
    assert np.isnan(out[0]) and np.isnan(out[1]) and np.isfinite(out[2])
    assert np.isnan(float(log_expm1(-1.0, validate=False)))


def test_float32_does_not_depend_on_the_matmul_precision(own_precision_emulation):
    """The Debye branch (nu >= 50) sums its polynomial with a product; it runs at full precision, so float32 values
    are bitwise the same where a backend rounds products (TF32 / bfloat16, emulated), and the emulation would
    have moved an unpinned product of the same operands (the check can fail)."""
    from recon_jax import testing

    nu = jnp.asarray([50.0, 60.5, 200.0, 6849.0, 1e6], jnp.float32)
    x = jnp.asarray([0.3, 45.0, 300.0, 3000.0, 1.5e4], jnp.float32)
    f = jax.jit(log_iv)
    exact = np.asarray(f(nu, x))
    powers = (1.0 / nu)[:, None] ** jnp.arange(1, 4, dtype=jnp.float32)
    coeffs = jnp.asarray([[0.125, -0.2083333], [0.0703125, -0.4010417], [0.0732422, -0.8912109]], jnp.float32)
    unpinned = np.asarray(jax.jit(jnp.matmul)(powers, coeffs))
    for fmt in testing.FORMATS:
        with testing.emulate_matmul_precision(fmt):
            np.testing.assert_array_equal(np.asarray(f(nu, x)), exact)
            assert not np.array_equal(np.asarray(jax.jit(jnp.matmul)(powers, coeffs)), unpinned)
