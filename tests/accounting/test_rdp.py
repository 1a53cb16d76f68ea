"""RDP curves (recon_jax.accounting.rdp) against dp_accounting, mpmath and independent naive formulas."""

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rpa

from recon_jax.accounting import (
    compose_rdp,
    interpolate_rdp,
    rdp_gaussian,
    rdp_poisson_subsampled,
    rdp_subsampled_gaussian,
)

INT_ORDERS = np.array([2, 3, 4, 7, 16, 32, 63, 128, 256, 512], np.float64)


def _mp_log_a_int(q, sigma, alpha):
    """log A_alpha at an integer order by the binomial sum in 60-digit arithmetic (independent reference)."""
    with mp.workdps(60):
        q, s = mp.mpf(q), mp.mpf(sigma)
        a = int(alpha)
        tot = mp.fsum(mp.binomial(a, i) * q**i * (1 - q) ** (a - i) * mp.exp((i * i - i) / (2 * s * s))
                      for i in range(a + 1))
        return mp.log(tot)


def _mp_log_a_quad(q, sigma, alpha):
    """log A_alpha = log E_{z~N(0,sigma^2)}[((1-q) + q e^{(2z-1)/(2 sigma^2)})^alpha] by numerical integration."""
    with mp.workdps(25):
        q, s, a = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)
        def f(z):
            return mp.npdf(z, 0, s) * ((1 - q) + q * mp.exp((2 * z - 1) / (2 * s * s))) ** a
        z0 = s * s * mp.log((1 - q) / q) + mp.mpf(1) / 2
        pts = sorted({-mp.inf, -10 * s, mp.mpf(0), z0, a, a + 10 * s, mp.inf})
        return mp.log(mp.quad(f, pts))


def test_rdp_gaussian_formula(x64):
    sig = np.array([0.5, 1.0, 3.0])
    orders = np.array([1.5, 2.0, 10.0])
    np.testing.assert_allclose(rdp_gaussian(sig, orders), orders[None, :] / (2 * sig[:, None] ** 2), rtol=1e-14)
    with pytest.raises(ValueError, match="sigma"):
        rdp_gaussian(0.0, 2.0)
    with pytest.raises(ValueError, match="orders"):
        rdp_gaussian(1.0, [1.0, 2.0])


def test_integer_orders_match_dp_accounting(x64):
    """1e-6 relative over q in [1e-5, 1], sigma in [0.3, 100], orders up to 512.

    An absolute floor of 1e-15 covers values ~1e-12 where dp_accounting's own log-space sum is only accurate to
    rounding (|log A| ~ 1e-12 with absolute error ~1e-17 per added term; see the mpmath test below for ours).
    """
    qs = np.array([1e-5, 1e-3, 0.05, 0.3, 0.9, 1.0])
    sigmas = np.array([0.3, 0.7, 2.0, 10.0, 100.0])
    qq, ss = np.meshgrid(qs, sigmas, indexing="ij")
    ours = np.asarray(rdp_subsampled_gaussian(qq, ss, INT_ORDERS))  # [6, 5, n]
    assert ours.shape == (6, 5, INT_ORDERS.size)
    for i, q in enumerate(qs):
        for j, s in enumerate(sigmas):
            ref = rpa._compute_rdp_poisson_subsampled_gaussian(q, s, INT_ORDERS)  # noqa: SLF001
            np.testing.assert_allclose(ours[i, j], ref, rtol=1e-6, atol=1e-15, err_msg=f"q={q}, sigma={s}")


@pytest.mark.parametrize("q,sigma,alpha", [(1e-5, 100.0, 256), (1e-3, 100.0, 256), (1e-5, 100.0, 2),
                                            (0.3, 0.3, 512), (0.05, 2.0, 63)])
def test_integer_orders_exact_mpmath(x64, q, sigma, alpha):
    # rtol 1e-10: float64 log-space sum of <= 513 positive terms, including values ~1e-12 (A - 1 summed directly).
    ref = float(_mp_log_a_int(q, sigma, alpha)) / (alpha - 1)
    ours = float(rdp_subsampled_gaussian(q, sigma, float(alpha)))
    assert ours == pytest.approx(ref, rel=1e-10, abs=0)  # refs down to ~1e-14: no absolute floor


# (q, sigma): includes q=0.3, sigma=0.6 where dp_accounting's fractional series does not converge.
FRAC_CASES = [(0.3, 0.6), (0.01, 0.6), (1e-3, 2.0), (0.9, 0.3)]
FRAC_ORDERS = np.array([1.01, 1.5, 2.5, 7.7])


@pytest.mark.parametrize("q,sigma", FRAC_CASES)
def test_fractional_orders_sound_and_tighter_than_dp_accounting(x64, q, sigma):
    ours = np.asarray(rdp_subsampled_gaussian(q, sigma, FRAC_ORDERS))
    assert np.all(np.isfinite(ours))
    theirs = rpa._compute_rdp_poisson_subsampled_gaussian(q, sigma, FRAC_ORDERS)  # noqa: SLF001
    for a, o, t in zip(FRAC_ORDERS, ours, theirs):
        exact = float(_mp_log_a_quad(q, sigma, a))  # K(alpha) = (alpha - 1) * eps(alpha)
        k_ours = o * (a - 1)
        # Sound: never below the exact value (tolerance: float64 rounding of a log-sum near 1, ~1e-15 on K,
        # and the quadrature's own relative accuracy, ~1e-12).
        assert k_ours >= exact * (1 - 1e-12) - 1e-15, (a, k_ours, exact)
        # Tight: within 1e-3 relative of exact (the truncated alternating tail; measured <= 2e-4).
        assert k_ours <= exact * (1 + 1e-3) + 1e-15, (a, k_ours, exact)
        # Never above dp_accounting (whose series sums absolute values; inf when it fails to converge).
        assert o * (a - 1) <= t * (a - 1) * (1 + 1e-12) + 2e-15, (a, o, t)


@pytest.mark.slow
@pytest.mark.parametrize("q", [1e-5, 1e-3, 0.05, 0.3, 0.6, 0.99])
@pytest.mark.parametrize("sigma", [0.3, 1.0, 5.0, 100.0])
def test_fractional_orders_sound_grid(x64, q, sigma):
    orders = np.array([1.1, 3.3, 10.9, 20.5])
    ours = np.asarray(rdp_subsampled_gaussian(q, sigma, orders))
    theirs = rpa._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders)  # noqa: SLF001
    for a, o, t in zip(orders, ours, theirs):
        exact = float(_mp_log_a_quad(q, sigma, a))
        # Tolerances on K = (alpha - 1) eps: log A near 1 is resolved to ~1e-16 absolute per summed term. Above
        # dp_accounting by at most the series' own rounding allowance (twice its first-order error bound, added so
        # that the value is an upper bound in every dtype): 1.0e-9 relative at q = 0.05, sigma = 100, order 10.9,
        # where K ~ 1.3e-5.
        assert o * (a - 1) >= exact * (1 - 1e-10) - 2e-15
        assert o * (a - 1) <= t * (a - 1) * (1 + 1e-8) + 2e-15


EXTREME_ORDERS = np.array([1.01, 1.5, 2.0, 10.9, 63.0, 1024.0])


def test_extreme_inputs_are_finite(x64):
    orders = EXTREME_ORDERS
    qs = np.array([1e-12, 1e-5, 0.5, 1 - 1e-12, 1.0])
    sig = np.array([0.05, 0.3, 100.0, 1e4])
    qq, ss = np.meshgrid(qs, sig, indexing="ij")
    r = np.asarray(rdp_subsampled_gaussian(qq, ss, orders))
    assert np.all(np.isfinite(r)) and np.all(r >= 0)
    # Monotone in the order (RDP is non-decreasing in alpha) wherever values are above rounding level (below
    # ~1e-13 the fractional orders fall back to the sound but looser chord of the integer orders).
    big = r[..., 1:] > 1e-10
    assert np.all((np.diff(r, axis=-1) >= -1e-9 * r[..., 1:]) | ~big)


def test_float32_finite():
    r = np.asarray(rdp_subsampled_gaussian(np.float32(0.01), np.float32(0.8), EXTREME_ORDERS))
    assert r.dtype == np.float32 and np.all(np.isfinite(r))
    # Never below the float64 value at the same (float32) inputs beyond float32 rounding (measured <= 4e-7 below;
    # near order 1, where float32 loses the digits, it errs upward).
    with jax.enable_x64(True):
        r64 = np.asarray(rdp_subsampled_gaussian(float(np.float32(0.01)), float(np.float32(0.8)), EXTREME_ORDERS))
    assert np.all(r >= r64 * (1 - 1e-5)), (r, r64)


def test_jit_and_vmap_match_eager(x64):
    orders = np.array([1.5, 2.0, 7.0])
    qs = jnp.array([1e-3, 0.7])
    sg = jnp.array([0.8, 4.0])
    eager = rdp_subsampled_gaussian(qs, sg, orders)
    jitted = jax.jit(lambda a, b: rdp_subsampled_gaussian(a, b, orders))(qs, sg)
    vmapped = jax.vmap(lambda a, b: rdp_subsampled_gaussian(a, b, orders))(qs, sg)
    loop = np.stack([np.asarray(rdp_subsampled_gaussian(a, b, orders)) for a, b in zip(qs, sg)])
    np.testing.assert_allclose(jitted, eager, rtol=1e-12)
    np.testing.assert_allclose(vmapped, eager, rtol=1e-12)
    np.testing.assert_allclose(loop, eager, rtol=1e-12)
    g = jax.grad(lambda s: rdp_subsampled_gaussian(0.01, s, orders).sum())(1.0)
    assert np.isfinite(g) and g < 0  # more noise, less privacy loss


def test_no_subsampling_is_the_plain_gaussian(x64):
    # q = 1 given concretely takes a shortcut; traced, it runs the series: both must be alpha / (2 sigma^2)
    orders = np.array([1.25, 1.5, 2.0, 3.5, 7.0, 64.0])
    sg = np.array([0.7, 2.0, 9.0])
    exact = orders[None, :] / (2.0 * sg[:, None] ** 2)
    np.testing.assert_allclose(rdp_subsampled_gaussian(1.0, sg, orders), exact, rtol=1e-12)
    traced = jax.jit(lambda q: rdp_subsampled_gaussian(q, sg, orders))(jnp.ones(3))
    np.testing.assert_allclose(traced, exact, rtol=1e-9)


def test_validation():
    with pytest.raises(ValueError, match="q"):
        rdp_subsampled_gaussian(0.0, 1.0, 2.0)
    with pytest.raises(ValueError, match="q"):
        rdp_subsampled_gaussian(1.5, 1.0, 2.0)
    with pytest.raises(ValueError, match="sigma"):
        rdp_subsampled_gaussian(0.1, -1.0, 2.0)
    with pytest.raises(ValueError, match="orders"):
        rdp_subsampled_gaussian(0.1, 1.0, [0.5, 2.0])
    with pytest.raises(ValueError, match="concrete"):
        jax.jit(lambda o: rdp_subsampled_gaussian(0.1, 1.0, o))(jnp.array([2.0]))


def _naive_zhu_wang(tau, q, alpha):
    """Zhu-Wang Thm 5 with prefactor 1/(alpha-1), summed in mpmath from its statement (tau[l] = RDP at order l)."""
    with mp.workdps(40):
        q = mp.mpf(q)
        s = (1 - q) ** (alpha - 1) * (alpha * q - q + 1)
        s += mp.binomial(alpha, 2) * q**2 * (1 - q) ** (alpha - 2) * mp.e ** tau[2]
        s += 3 * mp.fsum(mp.binomial(alpha, l) * (1 - q) ** (alpha - l) * q**l * mp.e ** ((l - 1) * tau[l])
                         for l in range(3, alpha + 1))
        return float(mp.log(s) / (alpha - 1))


def test_zhu_wang_matches_statement_and_bounds_exact_gaussian(x64):
    sigma, q, big_l = 1.5, 0.02, 40
    ints = np.arange(2, big_l + 1, dtype=np.float64)
    tau = np.asarray(rdp_gaussian(sigma, ints))
    zw = np.asarray(rdp_poisson_subsampled(tau, q, ints))
    tau_map = {int(a): float(t) for a, t in zip(ints, tau)}
    for a in (2, 3, 10, 40):
        ref = min(_naive_zhu_wang(tau_map, q, a), tau_map[a])
        assert zw[a - 2] == pytest.approx(ref, rel=1e-10)
    exact = np.asarray(rdp_subsampled_gaussian(q, sigma, ints))
    assert np.all(zw >= exact * (1 - 1e-12))  # Thm 5 is an upper bound of the exact subsampled Gaussian RDP
    np.testing.assert_allclose(zw[0], exact[0], rtol=1e-10)  # and tight at alpha = 2
    np.testing.assert_allclose(rdp_poisson_subsampled(tau, 1.0, ints), tau, rtol=1e-12)  # q = 1: unchanged


def test_interpolation_is_the_cumulant_chord(x64):
    ints = np.arange(2, 6, dtype=np.float64)
    tau = np.array([0.3, 0.5, 0.8, 1.0])
    got = np.asarray(interpolate_rdp(ints, tau, [1.5, 2.25, 4.0, 4.5]))
    k = lambda a: (a - 1) * tau[int(a) - 2]  # noqa: E731
    want = [0.5 * k(2) / 0.5, (0.75 * k(2) + 0.25 * k(3)) / 1.25, tau[2], (0.5 * k(4) + 0.5 * k(5)) / 3.5]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # Sound for the exact subsampled Gaussian (convex cumulant): chord >= exact value at fractional orders.
    ex_int = np.asarray(rdp_subsampled_gaussian(0.05, 1.0, np.arange(2, 12, dtype=np.float64)))
    fr = np.array([1.3, 2.5, 6.7])
    chord = np.asarray(interpolate_rdp(np.arange(2, 12), ex_int, fr))
    for a, c in zip(fr, chord):
        assert c * (a - 1) >= float(_mp_log_a_quad(0.05, 1.0, a)) * (1 - 1e-10)
    with pytest.raises(ValueError, match="orders"):
        interpolate_rdp(ints, tau, [6.0])


@pytest.mark.parametrize("jit", [False, True])
def test_interpolation_refuses_mismatched_shapes(jit):
    """A wrong-length curve gave JAX's TypeError (eagerly and under jit), empty int_orders an IndexError: shapes
    are static, so both raise ValueError naming the argument, traced or not."""
    ints = np.arange(2, 6, dtype=np.float64)
    f = jax.jit(lambda r: interpolate_rdp(ints, r, [2.5])) if jit else (lambda r: interpolate_rdp(ints, r, [2.5]))
    for wrong in (np.ones(3), np.ones((2, 5)), np.float64(1.0)):
        with pytest.raises(ValueError, match=r"rdp_at_int_orders must have shape \[\.\.\., 4\]"):
            f(wrong)
    with pytest.raises(ValueError, match="int_orders must be the consecutive integers"):
        interpolate_rdp([], np.ones(0), [1.5])


def test_subsampled_gaussian_empty_orders_is_empty():
    """Empty orders: an empty curve like rdp_gaussian's (it raised 'need at least one array to concatenate')."""
    assert np.shape(rdp_gaussian(1.0, [])) == (0,)
    assert np.shape(rdp_subsampled_gaussian(0.01, 1.0, [])) == (0,)
    assert np.shape(rdp_subsampled_gaussian(np.full(3, 0.01), 1.0, [])) == (3, 0)
    with pytest.raises(ValueError, match="q must be"):  # the arguments are still checked
        rdp_subsampled_gaussian(2.0, 1.0, [])


def test_compose():
    np.testing.assert_allclose(compose_rdp(np.array([[0.1, 0.2]]), np.array([3.0])), [[0.3, 0.6]], rtol=1e-6)
    with pytest.raises(ValueError, match="count"):
        compose_rdp([0.1], -1)


TINY32 = float(np.finfo(np.float32).tiny)
TINY_Q_ORDERS = np.array([2.0, 3.5, 8.0, 64.0])


@pytest.mark.parametrize("q", [1e-50, 1e-40, 1e-300])
@pytest.mark.parametrize("sigma", [0.05, 1.0])
def test_subsampled_gaussian_float32_q_below_float32(q, sigma):
    """Regression: in float32 (the default dtype) a valid q below ~1.2e-38 (flushed to 0) gave a silent NaN; log q is
    representable, and the series needs only it. Reference: the exact binomial sum in mpmath at the integer orders
    (sigma = 0.05: rdp ~ 170 .. 12700; sigma = 1: rdp ~ q^2, which float32 rounds to 0)."""
    got = np.asarray(rdp_subsampled_gaussian(q, sigma, TINY_Q_ORDERS))
    assert got.dtype == np.float32 and np.all(np.isfinite(got))
    for k, alpha in enumerate(TINY_Q_ORDERS):
        if alpha != round(alpha):
            continue
        ref = float(_mp_log_a_int(q, sigma, alpha)) / (alpha - 1)
        # rel 1e-5: float32 sums of terms i log q ~ -4.4e4 (64 x log 1e-300); abs: float32's smallest normal (a
        # true value below it is 0 in float32).
        assert float(got[k]) == pytest.approx(ref, rel=1e-5, abs=TINY32), f"alpha={alpha}"
    # The fractional order between its integer neighbours (RDP is non-decreasing in the order).
    assert got[0] * (1 - 1e-6) <= got[1] <= got[2] * (1 + 1e-6)


@pytest.mark.parametrize("q", [1e-50, 1e-300])
def test_rdp_poisson_subsampled_float32_q_below_float32(q):
    """Regression: the Zhu-Wang bound gave a silent NaN for a valid q that float32 flushes to 0. Reference: the bound
    of Zhu and Wang 2019, Thm 5 (as the docstring states it), summed in mpmath, for the Gaussian with sigma = 0.05
    (tau_l = l / (2 sigma^2) = 200 l)."""
    base = 200.0 * np.arange(2, 9)

    def ref(alpha):
        with mp.workdps(50):
            qq, a = mp.mpf(q), alpha
            tot = (1 - qq) ** (a - 1) * (a * qq - qq + 1) + mp.binomial(a, 2) * qq**2 * (1 - qq) ** (a - 2) * mp.exp(
                base[0])
            tot += 3 * mp.fsum(mp.binomial(a, l) * (1 - qq) ** (a - l) * qq**l * mp.exp((l - 1) * base[l - 2])
                               for l in range(3, a + 1))
            return min(float(mp.log(tot) / (a - 1)), float(base[a - 2]))

    got = np.asarray(rdp_poisson_subsampled(base, q, [2.0, 8.0]))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [ref(2), ref(8)], rtol=1e-5, atol=TINY32)


@pytest.mark.parametrize("fn", [lambda s, o: rdp_gaussian(s, o), lambda s, o: rdp_subsampled_gaussian(0.01, s, o)])
def test_float32_sigma_below_float32_is_inf(fn):
    """Regression: a valid sigma that float32 flushes to 0 (1e-50) gave a silent NaN (0 / 0); its RDP overflows
    float32 (alpha / (2 sigma^2) ~ 1e100, and the subsampled one ~ 1e100 too), so inf is the correctly rounded value.
    """
    got = np.asarray(fn(1e-50, np.array([2.0, 3.5])))
    assert got.dtype == np.float32 and np.all(got == np.inf)


# float32 sigma values as float32 holds them (0.7 is 0.699999988...): the reference is taken at the sigma the
# float32 computation sees, so that only the series' own rounding is tested.
F32_FRAC_CASES = [(0.01, 0.7), (0.01, 1.0), (256 / 60000, 1.1), (0.3, 100.0), (0.05, 0.5), (1e-3, 0.6)]
F32_FRAC_ORDERS = np.array([1.05, 1.1, 1.3, 2.3, 3.4, 7.7])


@pytest.mark.parametrize("q,sigma", F32_FRAC_CASES)
def test_float32_fractional_orders_never_below_exact(q, sigma):
    """Regression: in float32 the fractional-order series was trusted once above 256 ulp, where its rounding (a few ulp
    of A ~ 1) is a large part of K = log A: q = 0.01, sigma = 0.7, order 1.1 gave 3.28152e-4 against the exact
    3.284379e-4 (mpmath), and calibrate_sigma inherited it. Reference: mpmath quadrature of A_alpha. Tolerance: the
    float32 rounding of the returned value only (2^-22 relative); the quadrature is accurate to ~1e-12."""
    got = np.asarray(rdp_subsampled_gaussian(q, sigma, F32_FRAC_ORDERS))
    assert got.dtype == np.float32
    s32 = float(np.float32(sigma))
    for a, g in zip(F32_FRAC_ORDERS, got.astype(np.float64)):
        exact = float(_mp_log_a_quad(q, s32, a)) / (a - 1)
        assert g >= exact * (1 - 2.0**-22), (q, sigma, a, g, exact)


def test_float32_calibrate_sigma_meets_target_in_float64():
    """Regression: float32 calibrate_sigma(47.35, 1e-3, 1e4, 1e-5) returned sigma = 0.29999596, whose float64 epsilon is
    47.3535 > 47.35 (the float32 RDP at orders near 1.1 was below the exact value). Reference: float64 evaluation
    (its RDP checked against mpmath above and in test_fractional_orders_sound_and_tighter_than_dp_accounting)."""
    from recon_jax.accounting import calibrate_sigma, dpsgd_epsilon

    sigma32 = calibrate_sigma(47.35, 1e-3, 10_000, 1e-5)
    assert np.asarray(sigma32).dtype == np.float32
    with jax.enable_x64(True):
        eps64 = float(dpsgd_epsilon(float(sigma32), 1e-3, 10_000, 1e-5))
    assert eps64 <= 47.35, (float(sigma32), eps64)
