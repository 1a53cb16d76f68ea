"""Tests for recon_jax.bounds.prior_free (Ziller et al.) against SciPy / NumPy and the paper's Table 1."""

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
    clip_factor,
    expected_mse,
    expected_ncc,
    expected_ncc_at_clip,
    expected_ncc_exact,
    expected_psnr_exact,
    mse_lower_bound,
    ncc_cdf,
    ncc_samples,
    ncc_upper_bound,
    ncc_upper_bound_dimension_free,
    psnr_upper_bound,
    rero_mse,
    rero_psnr,
    worst_case_success,
)

# (sigma, C, N, T, kappa, worst-case %, MSE, PSNR, NCC %) exactly as printed in Ziller et al., Table 1.
TABLE1 = [
    (1.0, 1.0, 1000, 1, 0.1, "38.9", "1.0e+00", "0.0", "3.2"),
    (1e-4, 1.0, 1000, 1, 0.1, "100.0", "1.0e-08", "80.0", "100.0"),
    (1e-2, 1.0, 1000, 1, 0.1, "100.0", "1.0e-04", "40.0", "95.3"),
    (1e2, 1.0, 1000, 1, 0.1, "10.2", "1.0e+04", "-40.0", "0.0"),
    (1e4, 1.0, 1000, 1, 0.1, "10.0", "1.0e+08", "-80.0", "0.0"),
    (1.0, 1e-2, 1000, 1, 0.1, "38.9", "1.0e-04", "40.0", "3.2"),
    (1.0, 10.0, 1000, 1, 0.1, "38.9", "1.0e+02", "-20.0", "3.2"),
    (1.0, 1e4, 1000, 1, 0.1, "38.9", "1.0e+08", "-80.0", "3.2"),
    (1.0, 1.0, 10, 1, 0.1, "38.9", "1.0e+00", "0.0", "30.2"),
    (1.0, 1.0, 10**5, 1, 0.1, "38.9", "1.0e+00", "0.0", "0.3"),
    (1.0, 1.0, 10**9, 1, 0.1, "38.9", "1.0e+00", "0.0", "0.0"),
    (1.0, 1.0, 1000, 10, 0.1, "97.0", "1.0e-01", "10.0", "10.0"),
    (1.0, 1.0, 1000, 10**5, 0.1, "100.0", "1.0e-05", "50.0", "99.5"),
    (1.0, 1.0, 1000, 10**9, 0.1, "100.0", "1.0e-09", "90.0", "100.0"),
    (1.0, 1.0, 1000, 1, 1e-5, "0.1", "1.0e+00", "0.0", "3.2"),
    (1.0, 1.0, 1000, 1, 1e-9, "0.0", "1.0e+00", "0.0", "3.2"),
]


def _fmt_pct(x):
    return f"{100 * float(x) + 0.0:.1f}"


@pytest.mark.parametrize("row", TABLE1)
def test_table1_reproduced_to_printed_precision(x64, row):
    sigma, c, n, t, kappa, wc, mse, psnr, ncc = row
    assert _fmt_pct(worst_case_success(kappa, sigma, t)) == wc
    assert f"{float(mse_lower_bound(sigma, c, t)):.1e}" == mse
    assert f"{float(psnr_upper_bound(sigma, c, 1.0, t)) + 0.0:.1f}" == psnr
    assert _fmt_pct(ncc_upper_bound(sigma, n, t)) == ncc


def test_closed_forms_match_numpy(x64):
    rng = np.random.default_rng(0)
    sigma = 10 ** rng.uniform(-6, 6, 50)
    c = 10 ** rng.uniform(-3, 3, 50)
    t = np.floor(10 ** rng.uniform(0, 9, 50))
    n = np.floor(10 ** rng.uniform(0, 9, 50))
    np.testing.assert_allclose(np.asarray(mse_lower_bound(sigma, c, t)), c**2 * sigma**2 / t, rtol=1e-14)
    np.testing.assert_allclose(
        np.asarray(psnr_upper_bound(sigma, c, 2.0, t)), 10 * np.log10(4.0 * t / (c**2 * sigma**2)), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(np.asarray(ncc_upper_bound(sigma, n, t)), np.sqrt(1 / (1 + n * sigma**2 / t)), rtol=1e-14)
    np.testing.assert_allclose(
        np.asarray(ncc_upper_bound_dimension_free(sigma, t)), np.sqrt(1 / (1 + sigma**2 / t)), rtol=1e-14
    )
    beta = rng.uniform(0.01, 1, 50)
    var = rng.uniform(0, 3, 50)
    np.testing.assert_allclose(
        np.asarray(expected_mse(sigma, c, var, beta, t)), (1 - beta) ** 2 * var + c**2 * sigma**2 / t, rtol=1e-14
    )
    np.testing.assert_allclose(
        np.asarray(expected_ncc(var, beta, sigma, c, t)),
        beta * np.sqrt(var) / np.sqrt(beta**2 * var + c**2 * sigma**2 / t),
        rtol=1e-13,
    )
    np.testing.assert_allclose(np.asarray(clip_factor(np.array([0.0, 0.5, 2.0]), 1.0)), [1.0, 1.0, 0.5])


def test_rero_mse_matches_scipy_chi2(x64):
    for n in [1, 2, 50, 1000, 10**5]:
        for sigma, c, t in [(1.0, 1.0, 1), (1e-6, 1.0, 1), (1e6, 1e-2, 1), (1.0, 1.0, 10**9), (3.0, 2.0, 7)]:
            scale = c**2 * sigma**2 / t  # MSE = scale * chi2_N / N
            for q in [0.2, 0.9, 1.0, 1.1, 2.0]:
                eta = q * scale
                ref = st.chi2.cdf(n * eta / scale, n)
                np.testing.assert_allclose(float(rero_mse(eta, sigma, c, n, t)), ref, rtol=1e-10, atol=1e-300)
                # PSNR >= p  <=>  MSE <= range^2 10^(-p/10)
                p = 10 * math.log10(4.0 / eta)
                np.testing.assert_allclose(float(rero_psnr(p, sigma, c, n, 2.0, t)), ref, rtol=1e-9, atol=1e-300)


def test_rero_bounds_finite_at_extremes(x64):
    # N/2 >= 5000 with a tiny argument: the incomplete gamma underflows to exactly 0 (it used to give NaN).
    from recon_jax.bounds import baseline_kappa_gaussian

    # a prior's kappa is floored at the smallest normal number instead (an upper bound; 0 understated the prior)
    assert float(baseline_kappa_gaussian(1e-3, 1e8, 1e4)) == np.finfo(np.float64).tiny
    assert float(rero_mse(1e-25, 1.0, 1.0, 1e4)) == 0.0
    assert float(rero_psnr(250.0, 1.0, 1.0, 1e4)) == 0.0
    f = jax.jit(lambda e, d: rero_mse(e, 1.0, 1.0, d))
    out = np.asarray(f(jnp.array([1e-25, 1.0, 1e25]), jnp.array([1e4, 1e4, 1e4])))
    np.testing.assert_allclose(out, [0.0, sc.gammainc(5e3, 5e3), 1.0], rtol=1e-12)


def test_rero_mse_is_a_bound_monte_carlo(x64):
    # Empirical P[MSE <= eta] of the actual reconstruction beta X + xi never exceeds the bound (Prop. 5/6).
    rng = np.random.default_rng(1)
    n, sigma, c = 20, 0.5, 1.0
    x = rng.normal(size=n) * 0.5
    beta = min(1.0, c / np.linalg.norm(x))
    recon = beta * x + c * sigma * rng.normal(size=(20000, n))
    mse = np.mean((recon - x) ** 2, axis=1)
    for eta in [0.1, 0.2, 0.3]:
        empirical = np.mean(mse <= eta)
        assert empirical <= float(rero_mse(eta, sigma, c, n)) + 4 * math.sqrt(0.25 / 20000)


def _numpy_ncc_cdf(eta, x, sigma, c, steps, num, seed):
    """Independent NumPy implementation of the NCC distribution from its definition (Ziller et al., Eq. 3, 68)."""
    rng = np.random.default_rng(seed)
    beta = min(1.0, c / np.linalg.norm(x))
    recon = beta * x + c * sigma / math.sqrt(steps) * rng.normal(size=(num, x.size))
    vals = np.array([np.corrcoef(x, r)[0, 1] for r in recon])
    return np.mean(vals[None, :] <= np.asarray(eta)[:, None], axis=1)


def test_ncc_cdf_matches_independent_numpy(x64, key):
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, 64)
    eta = np.array([0.0, 0.05, 0.1, 0.2, 0.4])
    num = 4000
    ours = np.asarray(ncc_cdf(eta, x, 0.3, 1.0, key, num, steps=2, chunk_size=512))
    ref = _numpy_ncc_cdf(eta, x, 0.3, 1.0, 2, num, 3)
    # Two independent empirical CDFs at 5 fixed points: F1 - F2 has standard error sqrt(2 F (1 - F) / n) at each,
    # F estimated by the pooled value (floored at 1 / n). 5 SE at each point (false-failure rate < 3e-6 for the
    # five). The uniform DKW band used before, 2 sqrt(log(2e6) / (2n)) = 0.085, was 8.6 to 34 SE at these points.
    pooled = np.clip((ours + ref) / 2, 1.0 / num, 1.0 - 1.0 / num)
    se = np.sqrt(2 * pooled * (1 - pooled) / num)
    assert np.all(np.abs(ours - ref) <= 5 * se), (ours, ref, se)
    # Monotone in eta, in [0, 1].
    assert np.all(np.diff(ours) >= 0) and ours[0] >= 0 and ours[-1] <= 1


def test_ncc_samples_reproducible_and_chunk_independent(key):
    x = jnp.linspace(-1.0, 1.0, 30)
    a = ncc_samples(x, 1.0, 1.0, key, 100, chunk_size=100)
    b = ncc_samples(x, 1.0, 1.0, key, 100, chunk_size=100)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    c = jax.jit(lambda k: ncc_samples(x, 1.0, 1.0, k, 100, chunk_size=100))(key)
    np.testing.assert_allclose(np.asarray(c), np.asarray(a), rtol=1e-5)
    assert a.shape == (100,)


def test_ncc_samples_do_not_depend_on_the_matmul_precision(own_precision_emulation, key):
    """The NCC numerator is a product at full precision: float32 draws are bitwise the same where a backend
    rounds products (TF32 / bfloat16, emulated); the empirical NCC of experiments/ziller_empirical rests on it."""
    from recon_jax import testing

    x = jnp.linspace(-1.0, 1.0, 30) ** 3
    exact = np.asarray(ncc_samples(x, 0.3, 1.0, key, 64))
    for fmt in testing.FORMATS:
        with testing.emulate_matmul_precision(fmt):
            np.testing.assert_array_equal(np.asarray(ncc_samples(x, 0.3, 1.0, key, 64)), exact)


def test_worst_case_success_is_gdp_bound(x64):
    for kappa in [1e-12, 1e-5, 0.1, 0.5]:
        for sigma, t in [(1e-6, 1), (1.0, 1), (1.0, 10**9), (1e6, 10)]:
            mu = math.sqrt(t) / sigma
            ref = st.norm.sf(st.norm.isf(kappa) - mu)
            np.testing.assert_allclose(float(worst_case_success(kappa, sigma, t)), ref, rtol=1e-9)


def test_jit_vmap_grad(x64):
    sig = jnp.array([0.5, 1.0, 2.0])
    eager = rero_mse(0.5, sig, 1.0, 100.0)
    np.testing.assert_allclose(np.asarray(jax.jit(rero_mse)(0.5, sig, 1.0, 100.0)), np.asarray(eager), rtol=1e-14)
    np.testing.assert_allclose(
        np.asarray(jax.vmap(rero_mse, (None, 0, None, None))(0.5, sig, 1.0, 100.0)), np.asarray(eager), rtol=1e-14
    )
    # d/deta P(N/2, N eta / (2 s)) = chi2 pdf(N eta / s; N) * N / s
    g = float(jax.grad(rero_mse)(0.5, 1.0, 1.0, 100.0))
    np.testing.assert_allclose(g, st.chi2.pdf(50.0, 100) * 100, rtol=1e-9)
    g_sigma = jax.grad(psnr_upper_bound)(2.0, 1.0)
    np.testing.assert_allclose(float(g_sigma), -20 / (2.0 * math.log(10)), rtol=1e-12)
    g_ncc = float(jax.grad(ncc_upper_bound)(1.0, 1000.0))  # against a central difference (float64, h = 1e-5)
    fd = (float(ncc_upper_bound(1.0 + 1e-5, 1000.0)) - float(ncc_upper_bound(1.0 - 1e-5, 1000.0))) / 2e-5
    assert np.isfinite(g_ncc) and g_ncc == pytest.approx(fd, rel=1e-6)


def test_float32_usable():
    out = rero_mse(jnp.float32(1.0), jnp.float32(1.0), jnp.float32(1.0), jnp.float32(1000.0))
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(float(out), sc.gammainc(500, 500), rtol=1e-4)
    assert math.isfinite(float(psnr_upper_bound(jnp.float32(1e-30), jnp.float32(1.0))))


@pytest.mark.parametrize(
    "call",
    [
        lambda: mse_lower_bound(-1.0, 1.0),
        lambda: mse_lower_bound(1.0, 0.0),
        lambda: mse_lower_bound(1.0, 1.0, steps=0),
        lambda: psnr_upper_bound(1.0, 1.0, data_range=0.0),
        lambda: ncc_upper_bound(1.0, 0.5),
        lambda: rero_mse(0.0, 1.0, 1.0, 10),
        lambda: rero_mse(1.0, 1.0, 1.0, 0),
        lambda: rero_psnr(math.inf, 1.0, 1.0, 10),
        lambda: expected_mse(1.0, 1.0, -1.0),
        lambda: expected_ncc(1.0, 1.5, 1.0, 1.0),
        lambda: worst_case_success(1.0, 1.0),
        lambda: worst_case_success(0.1, -1.0),
        lambda: clip_factor(-1.0, 1.0),
        lambda: expected_psnr_exact(1.0, 1.0, 0.5),
        lambda: expected_ncc_exact(1.0, 1.0, 1.0, 1.0, 1),
        lambda: expected_ncc_exact(-1.0, 1.0, 1.0, 1.0, 10),
        lambda: expected_ncc_at_clip(0.0, 10),
        lambda: expected_ncc_at_clip(1.0, 10, steps=0.5),
    ],
)
def test_invalid_inputs_raise(call):
    with pytest.raises(ValueError):
        call()


def test_invalid_inputs_nan_under_jit():
    assert np.isnan(float(jax.jit(rero_mse)(1.0, -1.0, 1.0, 10.0)))
    assert np.isnan(float(jax.jit(worst_case_success)(0.1, 0.0)))
    assert np.isnan(float(jax.jit(ncc_upper_bound)(1.0, 0.0)))
    assert np.isnan(float(mse_lower_bound(1.0, -1.0, validate=False)))
    assert np.isnan(float(jax.jit(expected_psnr_exact)(1.0, 1.0, 0.0)))
    assert np.isnan(float(jax.jit(expected_ncc_at_clip)(1.0, 1.0)))
    assert np.isnan(float(jax.jit(expected_ncc_exact)(1.0, 1.0, -1.0, 1.0, 10.0)))


@given(
    eta=hs.floats(1e-4, 10.0),
    sigma=hs.floats(1e-3, 1e3),
    factor=hs.floats(1.001, 50.0),
    dim=hs.integers(1, 10**6),
)
def test_monotonicity(eta, sigma, factor, dim):
    # MSE bounds increase with sigma; ReRo bounds decrease with sigma and increase with the threshold.
    assert float(mse_lower_bound(sigma * factor, 1.0)) > float(mse_lower_bound(sigma, 1.0))
    base = float(rero_mse(eta, sigma, 1.0, dim))
    assert float(rero_mse(eta, sigma * factor, 1.0, dim)) <= base + 1e-6
    assert float(rero_mse(eta * factor, sigma, 1.0, dim)) >= base - 1e-6
    assert float(ncc_upper_bound(sigma * factor, dim)) <= float(ncc_upper_bound(sigma, dim)) + 1e-7
    assert float(worst_case_success(0.1, sigma * factor)) <= float(worst_case_success(0.1, sigma)) + 1e-6


def test_ziller_table1_experiment_smoke(tmp_path, claim_problems):
    from experiments.configs.ziller_table1 import get_config
    from experiments.ziller_table1 import run

    metrics = run(get_config("smoke"), str(tmp_path))
    assert metrics["table1_all_match"], metrics["table1_matches"]
    # Claims carry verdicts that tests/test_results.py re-derives from their numbers; both hold on this grid.
    assert not claim_problems(metrics["claims"]) and [c["verdict"] for c in metrics["claims"]] == ["holds"] * 3
    for name in ("report.md", "metrics.json", "config.json", "bounds_vs_sigma.png"):
        assert (tmp_path / name).exists()
    assert sorted(metrics["figures"]) == sorted(p.name for p in tmp_path.glob("*.png"))  # what publish() copies
    # GDP (an exact trade-off bound) is never looser than the RDP/zCDP routes.
    for r in metrics["routes"]:
        assert r["GDP"] <= min(r["RDP curve"], r["zCDP"]) + 1e-12
    # The (eps, delta)-DP route is the minimum over the whole privacy profile (the grid alone left it 32% above at
    # sigma 4, kappa 0.1): against SciPy's bounded minimiser of kappa e^eps + delta(eps) and of
    # 1 - e^-eps (1 - delta(eps) - kappa), delta from scipy.stats.norm.
    from scipy import optimize
    from scipy.stats import norm

    for r in metrics["routes"]:
        mu, kappa = 1.0 / r["sigma"], r["kappa"]  # smoke: one step

        def delta(e):
            return norm.cdf(-e / mu + mu / 2) - np.exp(e) * norm.cdf(-e / mu - mu / 2)

        first = optimize.minimize_scalar(lambda e: kappa * np.exp(e) + delta(e), bounds=(0, 50), method="bounded",
                                         options={"xatol": 1e-12})
        second = optimize.minimize_scalar(lambda e: 1 - np.exp(-e) * (1 - delta(e) - kappa), bounds=(0, 50),
                                          method="bounded", options={"xatol": 1e-12})
        assert r["(eps,delta)-DP"] == pytest.approx(min(first.fun, second.fun, 1.0), rel=1e-6), r


# ---------------------------------------------------------------------------------------------------------------
# Exact expectations (erratum to Props 2 and 3: the "bounds" are not upper bounds for small N)
# ---------------------------------------------------------------------------------------------------------------

# Monte-Carlo draws for the expectation tests. Each test tolerates 5 standard errors of its own sample (two-sided
# false-failure rate 6e-7 for a correct formula) and requires the paper's expression to lie more than 10 standard
# errors away on the wrong side, so the test can tell the exact value from the paper's.
_MC = 400_000
_Z_TOL = 5.0


@pytest.mark.parametrize("dim", [1, 2, 3, 10, 784, 10**6])
def test_expected_psnr_exact_matches_mpmath_digamma(x64, dim):
    import mpmath as mp

    sigma, c, rng, t = 0.07, 1.3, 0.9, 3
    ref = 10 * mp.log10(rng**2 * t / (c * sigma) ** 2) + 10 / mp.log(10) * (mp.log(mp.mpf(dim) / 2) - mp.digamma(mp.mpf(dim) / 2))
    # closed form of digamma / log: float64 rounding only.
    assert float(expected_psnr_exact(sigma, c, dim, rng, t)) == pytest.approx(float(ref), abs=1e-10)


@pytest.mark.parametrize(("dim", "issue_value"), [(2, 22.49), (10, 20.45)])
def test_expected_psnr_exact_matches_monte_carlo(x64, dim, issue_value):
    # Unclipped (C above every ||X||): X_hat - X = xi ~ N(0, C^2 sigma^2 I_N); PSNR = 10 log10(range^2 / MSE).
    sigma, c = 0.1, 1.0
    gen = np.random.default_rng(1)
    noise = gen.normal(0.0, c * sigma, size=(_MC, dim))
    psnr = 10 * np.log10(1.0 / np.mean(noise**2, axis=1))
    se = psnr.std(ddof=1) / math.sqrt(_MC)
    exact = float(expected_psnr_exact(sigma, c, dim))
    assert abs(psnr.mean() - exact) < _Z_TOL * se, (psnr.mean(), exact, se)
    paper = float(psnr_upper_bound(sigma, c))
    assert psnr.mean() - paper > 10 * se  # Prop. 2 is exceeded: not an upper bound at this N
    assert abs(psnr.mean() - issue_value) < 0.05  # the Monte-Carlo values quoted in the issue (2 decimals)


def _pearson_rows(x, x_hat):
    xc = x - x.mean()
    hc = x_hat - x_hat.mean(axis=1, keepdims=True)
    return hc @ xc / np.sqrt((hc**2).sum(axis=1) * (xc**2).sum())


def test_expected_ncc_at_clip_matches_monte_carlo(x64):
    # Eq. 8's setting: centred X with ||X|| > C (here 3 C), N = 10, sigma = 0.3. Issue: MC 0.749 vs Eq. 8's 0.726.
    dim, sigma, c = 10, 0.3, 1.0
    gen = np.random.default_rng(2)
    x = gen.normal(size=dim)
    x = 3.0 * c * (x - x.mean()) / np.linalg.norm(x - x.mean())
    beta = c / np.linalg.norm(x)
    ncc = _pearson_rows(x, beta * x + gen.normal(0.0, c * sigma, size=(_MC, dim)))
    se = ncc.std(ddof=1) / math.sqrt(_MC)
    exact = float(expected_ncc_at_clip(sigma, dim))
    assert abs(ncc.mean() - exact) < _Z_TOL * se, (ncc.mean(), exact, se)
    assert ncc.mean() - float(ncc_upper_bound(sigma, dim)) > 10 * se  # Eq. 8 is exceeded at N = 10
    assert round(exact, 3) == 0.749
    # The library's own sampler of the definition agrees as well.
    lib = np.asarray(ncc_samples(jnp.asarray(x), sigma, c, jax.random.key(3), 40_000))
    assert abs(lib.mean() - exact) < _Z_TOL * lib.std(ddof=1) / math.sqrt(lib.size)


@pytest.mark.parametrize(("dim", "sigma", "offset"), [(5, 1.0, 2.0), (40, 0.5, -1.0), (3, 3.0, 0.0)])
def test_expected_ncc_exact_non_centred_unclipped_monte_carlo(x64, dim, sigma, offset):
    # Non-centred X with C above ||X|| (beta = 1): only the centred part carries signal.
    gen = np.random.default_rng(dim)
    x = gen.uniform(size=dim) + offset
    c = 2.0 * np.linalg.norm(x)
    ncc = _pearson_rows(x, x + gen.normal(0.0, c * sigma, size=(_MC, dim)))
    se = ncc.std(ddof=1) / math.sqrt(_MC)
    exact = float(expected_ncc_exact(np.var(x), 1.0, sigma, c, dim))
    assert abs(ncc.mean() - exact) < _Z_TOL * se, (ncc.mean(), exact, se)


@pytest.mark.parametrize(
    ("snr", "dim"), [(0.0, 5), (1e-3, 784), (0.5, 2), (10 / 3, 10), (3.0, 2), (30.0, 784), (1e3, 10**5), (0.1, 10**6), (300.0, 4)]
)
def test_expected_ncc_exact_matches_hypergeometric_closed_form(x64, snr, dim):
    # Independent route: E[NCC] = d/dr E||V|| for V ~ N(r e_1, I_m), m = N - 1 (mean of the non-central chi), i.e.
    # (sqrt 2 r / m) Gamma((m+1)/2) / Gamma(m/2) 1F1(1/2; m/2 + 1; -r^2/2), evaluated by mpmath at 30 digits.
    import mpmath as mp

    mp.mp.dps = 30
    r, m = mp.mpf(snr), mp.mpf(dim - 1)
    ref = mp.sqrt(2) * r / m * mp.exp(mp.loggamma((m + 1) / 2) - mp.loggamma(m / 2)) * mp.hyp1f1(0.5, m / 2 + 1, -r * r / 2)
    # r = signal / noise with V = r^2 s^2 / N; quadrature error budget 1e-11 relative (documented ~1e-12).
    got = float(expected_ncc_exact(snr**2 / dim, 1.0, 1.0, 1.0, dim))
    assert got == pytest.approx(float(ref), rel=1e-11, abs=1e-300)


def test_expected_ncc_exact_large_dim_approaches_paper_with_n_minus_1(x64):
    # For N -> infinity the exact value is 1 / sqrt(1 + (N - 1) sigma^2) to relative O(1/N).
    for dim in (10**4, 10**6):
        sigma = 3.0 / math.sqrt(dim)
        exact = float(expected_ncc_at_clip(sigma, dim))
        assert exact == pytest.approx(float(ncc_upper_bound(sigma, dim - 1)), rel=10.0 / dim)


def test_exact_expectations_float32_jit_vmap():
    f = jax.jit(jax.vmap(expected_ncc_at_clip, in_axes=(0, None)))
    out = np.asarray(f(jnp.array([0.1, 0.3, 1.0], jnp.float32), 10.0))
    assert out.dtype == np.float32
    # float32 quadrature: ~1e-6 relative; references: mpmath's non-central chi closed form (r = 1 / sigma).
    np.testing.assert_allclose(out, [_ncc_hyp1f1(1.0 / s, 10.0) for s in (0.1, 0.3, 1.0)], rtol=1e-5)
    psnr = jax.jit(expected_psnr_exact)(jnp.float32(0.1), 1.0, 2.0)
    import mpmath as mp  # the digamma closed form, as in test_expected_psnr_exact_matches_mpmath_digamma

    ref = 10 * mp.log10(1 / mp.mpf(0.1) ** 2) + 10 / mp.log(10) * (mp.log(1) - mp.digamma(1))
    assert psnr.dtype == jnp.float32 and abs(float(psnr) - float(ref)) < 1e-4


_INF = float("inf")


@pytest.mark.parametrize("name,fn,args,index", [
    ("dim", "baseline_kappa_gaussian", (1.0, 1.0, 10.0), 2),
    ("dim", "rero_mse", (1.0, 1.0, 1.0, 10.0), 3),
    ("dim", "rero_psnr", (0.0, 1.0, 1.0, 10.0), 3),
    ("dim", "expected_psnr_exact", (1.0, 1.0, 10.0), 2),
    ("dim", "expected_ncc_at_clip", (1.0, 10.0), 1),
    ("dim", "expected_ncc_exact", (1.0, 0.5, 1.0, 1.0, 10.0), 4),
    ("signal_variance", "expected_ncc_exact", (1.0, 0.5, 1.0, 1.0, 10.0), 0),
    ("mean_square", "expected_mse", (1.0, 1.0, 4.0), 2),
])
def test_infinite_argument_is_refused(name, fn, args, index):
    """inf passed the >= 1 / >= 0 checks and came back as NaN eagerly: a ValueError naming the argument, NaN under
    jit (the valid arguments stay finite)."""
    import recon_jax.bounds as bounds

    f = getattr(bounds, fn)
    assert np.isfinite(float(f(*args)))
    bad = list(args)
    bad[index] = _INF
    with pytest.raises(ValueError, match=f"{name} must be finite"):
        f(*bad)
    assert np.isnan(float(jax.jit(f)(*bad)))


def _ncc_hyp1f1(snr, dim):
    """E[NCC] by mpmath at 30 digits from the non-central chi closed form (as in
    test_expected_ncc_exact_matches_hypergeometric_closed_form): an independent route to the quadrature's value."""
    import mpmath as mp

    mp.mp.dps = 30
    r, m = mp.mpf(snr), mp.mpf(dim) - 1
    return float(mp.sqrt(2) * r / m * mp.exp(mp.loggamma((m + 1) / 2) - mp.loggamma(m / 2))
                 * mp.hyp1f1(0.5, m / 2 + 1, -r * r / 2))


@pytest.mark.parametrize("dim", [784, 3 * 1024 * 1024, 10**8])
@pytest.mark.parametrize("sigma", [0.01, 1.0])
def test_expected_ncc_float32_large_dim_matches_mpmath(dim, sigma):
    """In float32 (the default) the quadrature took m log(cos theta) where cos theta rounds to 1: at N = 1e8 it gave
    0.0195 for 0.0100 (+95%), at N = 3.1e6 +0.5%. Now (m / 2) log1p(-sin^2 theta): measured <= 3e-7 relative."""
    got = expected_ncc_at_clip(sigma, dim)
    assert got.dtype == jnp.float32
    ref = _ncc_hyp1f1(1.0 / sigma, dim)
    np.testing.assert_allclose(float(got), ref, rtol=2e-6)  # float32: ~1e-7 per node, 128 nodes summed
    # expected_ncc_exact through its own arguments: V = 1 / N, beta = 1, C = 1 gives r = 1 / sigma as above.
    np.testing.assert_allclose(float(expected_ncc_exact(1.0 / dim, 1.0, sigma, 1.0, dim)), ref, rtol=2e-6)


def test_expected_ncc_float64_large_dim_matches_mpmath(x64):
    # float64 was off by up to 9e-10 relative at N = 1e8 (log(cos theta) with cos theta ~ 1 - 6e-7); now ~2e-14.
    for dim in (3 * 1024 * 1024, 10**8):
        got = float(expected_ncc_at_clip(0.01, dim))
        assert got == pytest.approx(_ncc_hyp1f1(100.0, dim), rel=1e-12)  # the documented ~1e-12 accuracy


_X50 = np.linspace(0.0, 1.0, 50)


@pytest.mark.parametrize("sigma,clip_norm,steps", [(-1.0, 1.0, 1.0), (1.0, 0.0, 1.0), (1.0, 1.0, 0.5),
                                                   (math.nan, 1.0, 1.0)])
def test_ncc_cdf_invalid_parameters_nan_under_jit(key, sigma, clip_norm, steps):
    """The samples were NaN but the CDF counted NaN <= eta as False: a plausible 0.0 (for every eta)."""
    f = jax.jit(lambda eta, s, c, t: ncc_cdf(eta, _X50, s, c, key, 64, t))
    assert np.isfinite(np.asarray(f(jnp.array([0.0, 0.5]), 1.0, 1.0, 1.0))).all()
    assert np.isnan(np.asarray(f(jnp.array([0.0, 0.5]), sigma, clip_norm, steps))).all()


@pytest.mark.parametrize("name,eta,x", [
    ("eta", math.nan, _X50),
    ("x", 0.5, np.where(np.arange(50) == 0, np.nan, _X50)),
    ("x", 0.5, np.ones(50)),  # the documented non-zero variance, never checked: the NCC is 0 / 0
    ("x", 0.5, np.full(50, 0.1)),  # constant in float32 too, where mean(x) need not equal 0.1 exactly
])
def test_ncc_cdf_invalid_data_raises_and_is_nan_traced(key, name, eta, x):
    with pytest.raises(ValueError, match=f"^{name} must"):
        ncc_cdf(eta, x, 1.0, 1.0, key, 64)
    assert np.isnan(float(ncc_cdf(eta, x, 1.0, 1.0, key, 64, validate=False)))
    assert np.isnan(float(jax.jit(lambda e, v: ncc_cdf(e, v, 1.0, 1.0, key, 64))(eta, x)))
    if name == "x":
        with pytest.raises(ValueError, match="^x must"):
            ncc_samples(x, 1.0, 1.0, key, 4)


def test_ncc_cdf_nan_eta_entry_only_that_entry(key):
    out = np.asarray(jax.jit(lambda e: ncc_cdf(e, _X50, 1.0, 1.0, key, 64))(jnp.array([-1.0, math.nan, jnp.inf])))
    assert out[0] == 0.0 and np.isnan(out[1]) and out[2] == 1.0  # NCC in [-1, 1]: exact values at -1 and +inf
