"""Tests for the von Mises-Fisher sampler (Wood 1994) and the VMF mechanism (Biswas et al. Alg. 2).

References are independent of the code under test: ``scipy.stats.vonmises_fisher`` samples, SciPy Beta/uniform
distributions, and float64 quadrature of the cosine density ``∝ exp(kappa w) (1 - w^2)^((d-3)/2)``.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.special
import scipy.stats

from recon_jax.mechanisms import Mechanism, VMFMechanism, sample_vmf, sample_vmf_cosine


def _cosine_moments(kappa: float, dim: int) -> tuple[float, float]:
    """(E[1 - W], Var[W]) of the VMF cosine, by float64 quadrature in u = 1 - w (independent reference)."""
    m = (dim - 3) / 2.0

    def logf(u):
        return -kappa * u + (m * (np.log(u) + np.log(2.0 - u)) if m else 0.0)

    # Mode of the cosine density and a width scale, to focus the quadrature on the mass.
    w_star = 2.0 * kappa / ((dim - 3) + np.sqrt((dim - 3) ** 2 + 4.0 * kappa**2)) if dim > 3 else 1.0
    u_star = min(max(1.0 - w_star, 1e-300), 2.0)
    if dim > 3:
        curv = m * (1.0 / u_star**2 + 1.0 / (2.0 - u_star) ** 2)
        scale = 1.0 / np.sqrt(curv)
    else:
        scale = 1.0 / kappa
    lo, hi = max(0.0, u_star - 60 * scale), min(2.0, u_star + 60 * scale)
    c = logf(min(max(u_star, lo + 1e-300), hi)) if dim > 3 else logf(lo if lo > 0 else 1e-300)
    pts = [p for p in (u_star,) if lo < p < hi]

    def integral(g):
        val, _ = scipy.integrate.quad(lambda u: g(u) * np.exp(logf(u) - c), lo, hi, points=pts or None, limit=400,
                                      epsabs=0.0, epsrel=1e-12)
        return val

    z = integral(lambda u: 1.0)
    e_u = integral(lambda u: u) / z
    e_u2 = integral(lambda u: u * u) / z
    return e_u, e_u2 - e_u**2


def test_quadrature_reference_matches_bessel_ratio(x64):
    # The reference itself against SciPy's Bessel ratio where SciPy is accurate: E[W] = I_{d/2}(k) / I_{d/2-1}(k).
    for dim, kappa in [(3, 0.5), (10, 20.0), (50, 300.0)]:
        e_u, _ = _cosine_moments(kappa, dim)
        ratio = scipy.special.ive(dim / 2, kappa) / scipy.special.ive(dim / 2 - 1, kappa)
        np.testing.assert_allclose(1.0 - e_u, ratio, rtol=1e-9)  # float64 quadrature vs float64 Bessel


@functools.lru_cache(maxsize=None)
def _cosines_fn(dim: int, n: int):
    return jax.jit(jax.vmap(lambda key, kappa: sample_vmf_cosine(key, kappa, dim, (n,))))


KAPPAS = (1e-3, 1.0, 100.0, 1e4, 1e6)


@pytest.mark.parametrize("dim", [3, 10, 1000, 10**6])
def test_cosine_mean_matches_analytic_float32(dim):
    """E[mu^T x] = A_d(kappa) in float32 for d up to 1e6 and kappa in [1e-3, 1e6] (5 standard errors)."""
    n = 4000
    keys = jax.random.split(jax.random.key(dim), len(KAPPAS))
    w, sin_w = _cosines_fn(dim, n)(keys, jnp.asarray(KAPPAS, jnp.float32))
    assert w.dtype == jnp.float32
    w = np.asarray(w, np.float64)
    sin_w = np.asarray(sin_w, np.float64)
    assert np.all(np.isfinite(w)) and np.all(np.abs(w) <= 1.0)
    # sin_w is sqrt(1 - w^2) to float32 relative precision (checked where w is not close to +-1).
    mid = np.abs(w) < 0.9
    np.testing.assert_allclose(sin_w[mid], np.sqrt(1 - w[mid] ** 2), rtol=1e-5)
    one_minus_w = sin_w**2 / (1.0 + w)  # accurate even when w is within float32 eps of 1
    for i, kappa in enumerate(KAPPAS):
        e_u, var_w = _cosine_moments(kappa, dim)
        se = np.sqrt(var_w / n)
        err = abs(one_minus_w[i].mean() - e_u)
        # 5 standard errors plus float32 rounding of the samples (relative 1e-6 of E[1 - W]).
        assert err <= 5 * se + 1e-6 * e_u, (dim, kappa, one_minus_w[i].mean(), e_u, se)
        # Spread also matches: the sample variance within 5 of its standard errors, sqrt((m4 - var^2) / n) from the
        # sample's fourth central moment. A fixed rtol cannot serve every shape: the relative SE is ~1.4% for the
        # near-uniform cosine (small kappa) but ~5% where 1 - W is near-exponential (d = 3, large kappa), so the
        # old rtol 0.15 was 10 SE at one end and under 3 SE at the other.
        s = one_minus_w[i]
        m4 = np.mean((s - s.mean()) ** 4)
        se_var = np.sqrt((m4 - s.var() ** 2) / n)
        assert abs(s.var() - var_w) <= 5 * se_var, (dim, kappa, s.var(), var_w, se_var)


@pytest.mark.parametrize("dim,kappa", [(3, 2.0), (5, 10.0), (40, 30.0)])
def test_ks_against_scipy_vonmises_fisher(dim, kappa):
    n = 3000
    mu = np.zeros(dim)
    mu[0] = 0.6
    mu[1] = -0.8
    ours = np.asarray(jax.jit(sample_vmf, static_argnums=3)(jax.random.key(7), jnp.asarray(mu, jnp.float32), kappa,
                                                              (n,)), np.float64)
    ref = scipy.stats.vonmises_fisher(mu, kappa).rvs(n, random_state=np.random.default_rng(3))
    assert ours.shape == (n, dim)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)  # float32 unit vectors
    res = scipy.stats.ks_2samp(ours @ mu, ref @ mu)
    assert res.pvalue > 1e-3, res
    # Mean resultant length: both estimate A_d(kappa); the difference of two n-sample means is within 5 SE.
    a_ref = scipy.special.ive(dim / 2, kappa) / scipy.special.ive(dim / 2 - 1, kappa)
    var = np.var(ref @ mu)
    for sample in (ours, ref):
        assert abs(np.linalg.norm(sample.mean(0)) - a_ref) < 5 * np.sqrt(var / n) + 5 * np.sqrt(1.0 / n / dim)
    # The tangent part is isotropic: the mean of the component orthogonal to mu vanishes.
    perp = ours - np.outer(ours @ mu, mu)
    assert np.linalg.norm(perp.mean(0)) < 5 * np.sqrt(1.0 / n)


def test_small_kappa_is_uniform():
    n = 4000
    for dim in (3, 12):
        mu = jnp.zeros(dim).at[2].set(1.0)
        x = np.asarray(sample_vmf(jax.random.key(dim), mu, 1e-3, (n,)), np.float64)
        # Under the uniform law on S^{d-1}, (1 + mu^T x) / 2 ~ Beta((d-1)/2, (d-1)/2) (d = 3: uniform on [0, 1]).
        t = (1.0 + x[:, 2]) / 2.0
        a = (dim - 1) / 2.0
        assert scipy.stats.kstest(t, scipy.stats.beta(a, a).cdf).pvalue > 1e-3
        # No preferred direction at all: the mean vector is within noise of 0.
        assert np.linalg.norm(x.mean(0)) < 5 * np.sqrt(1.0 / n)


def test_large_kappa_concentrates_at_mu():
    dim = 100
    mu = jax.random.normal(jax.random.key(1), (dim,))
    mu = mu / jnp.linalg.norm(mu)
    n = 20_000
    x = sample_vmf(jax.random.key(2), mu, 1e6, (n,))
    dist = np.asarray(jnp.linalg.norm(x - mu, axis=1), np.float64)
    # ||x - mu||^2 = 2 (1 - W) with E[1 - W] ~ (d - 1) / (2 kappa): distances ~ 1e-2.
    assert dist.max() < 0.05 and dist.mean() > 1e-3
    # E||x - mu||^2 = 2 (1 - A_d(kappa)), A_d the Bessel ratio (SciPy). 1 - W is ~Gamma((d - 1) / 2, 1 / kappa):
    # relative SE sqrt(2 / (d - 1) / n) = 0.1% at n = 20,000; the test allows 5 SE from the sample's own spread
    # (0.5%). The old rtol 0.1 at n = 500 was 15 SE and let a sampler run in the wrong dimension (+1%) pass.
    exact = 2.0 * (1.0 - scipy.special.ive(dim / 2, 1e6) / scipy.special.ive(dim / 2 - 1, 1e6))
    se = np.std(dist**2, ddof=1) / np.sqrt(n)
    assert abs(np.mean(dist**2) - exact) < 5 * se, (np.mean(dist**2), exact, se)


def test_extreme_dimension_and_kappa_float32():
    dim = 10**6
    mu = jnp.ones(dim, jnp.float32)
    for kappa in (1e-3, 1e6):
        x = jax.jit(sample_vmf, static_argnums=3)(jax.random.key(3), mu, kappa, (2,))
        assert x.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(x)))
        np.testing.assert_allclose(np.asarray(jnp.linalg.norm(x, axis=1)), 1.0, atol=1e-4)  # float32 sum of 1e6


def test_vmap_equals_loop_and_jit_equals_eager():
    keys = jax.random.split(jax.random.key(4), 3)
    mus = jax.random.normal(jax.random.key(5), (3, 6))
    kappas = jnp.array([0.5, 5.0, 500.0])
    batched = jax.jit(jax.vmap(lambda k, m, c: sample_vmf(k, m, c, (4,))))(keys, mus, kappas)
    for i in range(3):
        np.testing.assert_allclose(batched[i], sample_vmf(keys[i], mus[i], kappas[i], (4,)), rtol=1e-5, atol=1e-6)


def test_sampler_input_validation():
    with pytest.raises(ValueError, match="kappa"):
        sample_vmf(jax.random.key(0), jnp.ones(3), -1.0)
    with pytest.raises(ValueError, match="kappa"):
        sample_vmf(jax.random.key(0), jnp.ones(3), float("nan"))
    with pytest.raises(ValueError, match="mu"):
        sample_vmf(jax.random.key(0), jnp.ones(1), 1.0)
    with pytest.raises(ValueError, match="mu"):
        sample_vmf(jax.random.key(0), jnp.ones((2, 3)), 1.0)
    with pytest.raises(ValueError, match="dim"):
        sample_vmf_cosine(jax.random.key(0), 1.0, 1)


def test_sampler_rejects_zero_or_nonfinite_mu():
    # mu = 0 has no direction: it used to give all-NaN samples without an error.
    with pytest.raises(ValueError, match="mu must be a non-zero vector"):
        sample_vmf(jax.random.key(0), jnp.zeros(3), 1.0)
    with pytest.raises(ValueError, match="mu must be finite"):
        sample_vmf(jax.random.key(0), jnp.array([1.0, jnp.inf]), 1.0)


@pytest.mark.parametrize("kappa", [jnp.array([1e-3, 1e4]), np.ones((1,)), [2.0, 3.0]])
def test_samplers_refuse_a_non_scalar_kappa(kappa):
    # a vector kappa used to fail inside the rejection loop with a while_loop TypeError
    with pytest.raises(ValueError, match="kappa must be a scalar"):
        sample_vmf_cosine(jax.random.key(0), kappa, 3, shape=(2,))
    with pytest.raises(ValueError, match="kappa must be a scalar"):
        sample_vmf(jax.random.key(0), jnp.ones(3), kappa, shape=(2,))
    # several concentrations: vmap over kappa (each traced kappa is a scalar)
    w, _ = jax.vmap(lambda k: sample_vmf_cosine(jax.random.key(0), k, 3, shape=(2,)))(jnp.array([1e-3, 1e4]))
    assert w.shape == (2, 2) and bool(jnp.isfinite(w).all())


@pytest.mark.parametrize("kappa", [-1.0, float("inf"), float("nan")])
def test_traced_invalid_kappa_gives_nan(kappa):
    key = jax.random.key(0)
    x = jax.jit(lambda k: sample_vmf(key, jnp.array([0.0, 0.0, 1.0]), k, shape=(2,)))(kappa)
    w, sin_w = jax.jit(lambda k: sample_vmf_cosine(key, k, 3, shape=(2,)))(kappa)
    assert np.isnan(np.asarray(x)).all() and np.isnan(np.asarray(w)).all() and np.isnan(np.asarray(sin_w)).all()
    # vmapped: only the invalid entry is NaN
    xs = np.asarray(jax.vmap(lambda k: sample_vmf(key, jnp.array([0.0, 1.0]), k))(jnp.array([2.0, kappa])))
    assert np.isfinite(xs[0]).all() and np.isnan(xs[1]).all()


def test_traced_zero_mu_gives_nan():
    x = jax.jit(lambda m: sample_vmf(jax.random.key(0), m, 5.0))(jnp.zeros(3))
    assert np.isnan(np.asarray(x)).all()


def test_mechanism_validation():
    with pytest.raises(ValueError, match="kappa"):
        VMFMechanism(kappa=-0.5)
    with pytest.raises(ValueError, match="output_norm"):
        VMFMechanism(kappa=1.0, output_norm=0.0)
    m = VMFMechanism(kappa=1.0)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="clip_norm"):
        m.privatize(key, jnp.ones(4), clip_norm=0.0, batch_size=1)
    with pytest.raises(ValueError, match="batch_size"):
        m.privatize(key, jnp.ones(4), clip_norm=1.0, batch_size=0)
    with pytest.raises(ValueError, match="clipped_sum"):
        m.privatize(key, jnp.ones(1), clip_norm=1.0, batch_size=1)


def test_mechanism_refuses_a_sum_without_direction_and_keeps_extreme_scales():
    """A NaN or inf sum was centred at e1 like a zero one (a plausible release from a diverged step); sums whose
    squares underflow or overflow float32 lost their direction (e1 again, or a ValueError naming mu)."""
    m = VMFMechanism(kappa=1e6)
    key = jax.random.key(0)
    for bad in (jnp.array([jnp.nan, 1.0, 2.0]), jnp.array([jnp.inf, 1.0, 2.0])):
        with pytest.raises(ValueError, match="clipped_sum must be finite"):
            m.privatize(key, bad, clip_norm=1.0, batch_size=1)
        assert bool(jnp.all(jnp.isnan(jax.jit(lambda g: m.privatize(key, g, 1.0, 1))(bad))))
    assert bool(jnp.all(jnp.isnan(jax.jit(lambda b: m.privatize(key, jnp.ones(3), 1.0, b))(-1.0))))  # not flipped
    for direction, scale in (([1.0, 1.0], 1e-20), ([1.0, 1.0, 0.0], 3e38), ([3.0, -4.0], 1e-30)):
        d = np.asarray(direction) / np.linalg.norm(direction)
        for f in (m.privatize, jax.jit(m.privatize)):
            out = np.asarray(f(key, jnp.asarray(d * scale, jnp.float32), 1.0, 1))
            assert float(out @ d) > 0.99, (direction, scale, out)  # E[1 - cos] ~ (p - 1) / (2 kappa)


def test_mechanism_releases_noisy_unit_direction():
    m = VMFMechanism(kappa=1e5, output_norm=2.0)
    assert isinstance(m, Mechanism)
    g = jax.random.normal(jax.random.key(1), (5, 8))  # any shape: treated as one flattened vector
    out = jax.jit(m.privatize)(jax.random.key(2), g, 1.0, jnp.asarray(4))  # traced batch size
    assert out.shape == g.shape
    np.testing.assert_allclose(float(jnp.linalg.norm(out)), 2.0, rtol=1e-5)
    cos = float(jnp.vdot(out, g) / (jnp.linalg.norm(out) * jnp.linalg.norm(g)))
    assert cos > 0.99  # E[1 - cos] ~ (p - 1) / (2 kappa) = 2e-4
    # Weak concentration: the release is almost independent of the input direction.
    weak = VMFMechanism(kappa=1e-3)
    outs = jnp.stack([weak.privatize(k, g, 1.0, 4) for k in jax.random.split(jax.random.key(3), 300)])
    cosines = np.asarray(outs.reshape(300, -1) @ (g.reshape(-1) / jnp.linalg.norm(g)))
    assert abs(cosines.mean()) < 5 * np.sqrt(1.0 / 40 / 300)  # uniform on S^39: Var(cos) = 1/40
    # A zero gradient has no direction: the release is still a valid unit vector.
    z = m.privatize(jax.random.key(4), jnp.zeros(6), 1.0, 1)
    assert bool(jnp.all(jnp.isfinite(z)))


@pytest.mark.parametrize("kappa", [1e19, 1e30, 3e38])
def test_huge_kappa_float32(kappa):
    """kappa up to the float32 maximum: (2 kappa)^2 overflowed past ~9e18 and no proposal was ever accepted, so the
    loop silently returned its last rejected proposal (d = 3, kappa = 1e19: kappa E[1 - W] ~ 9.6 instead of 1);
    at 3e38, 1 - b was NaN and W exactly 1. Now the cosines and the vectors follow the VMF law."""
    n = 4000
    for dim in (2, 3, 10**5):
        w, sin_w = sample_vmf_cosine(jax.random.key(dim), kappa, dim, shape=(n,))
        w, sin_w = np.asarray(w, np.float64), np.asarray(sin_w, np.float64)
        assert np.all(np.isfinite(w)) and np.all(np.isfinite(sin_w)) and np.all(np.abs(w) <= 1.0)
        # For kappa >> d, kappa (1 - W) ~ Gamma((d - 1) / 2, 1) up to relative O(d / kappa) (d = 3: Exp(1)
        # truncated at 2 kappa). Reference moments from SciPy; 5 standard errors.
        ref = scipy.stats.gamma((dim - 1) / 2.0)
        scaled = kappa * (sin_w**2 / (1.0 + w))  # 1 - W, accurate when W rounds to 1 in float32
        assert abs(scaled.mean() - ref.mean()) <= 5 * ref.std() / np.sqrt(n), (dim, scaled.mean(), ref.mean())
    mu = jnp.array([0.6, 0.0, -0.8])
    x = np.asarray(jax.jit(sample_vmf, static_argnums=3)(jax.random.key(5), mu, kappa, (n,)), np.float64)
    assert np.all(np.isfinite(x))
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-6)  # float32 unit vectors
    # At the vector level 1 - W ~ 1 / kappa is far below float32 rounding: the samples are mu to float32 precision
    # (the law of W is checked on the cosines above).
    np.testing.assert_allclose(x, np.broadcast_to(np.asarray(mu, np.float64), x.shape), atol=1e-6)


def test_loop_without_acceptance_gives_nan(monkeypatch):
    """A draw with no accepted proposal is NaN, not the last rejected proposal (which was returned silently)."""
    from recon_jax.mechanisms import vmf

    keys = jax.random.split(jax.random.key(9), 2000)
    nu = jnp.float32(2.0)  # d = 3

    def draw():  # traced afresh, so it reads the patched limit
        return jax.jit(jax.vmap(lambda k: vmf._sample_cosine_one(k, jnp.float32(1.0), nu, jnp.float32)))(keys)

    w_full, s_full = (np.asarray(a) for a in draw())
    assert np.all(np.isfinite(w_full)) and np.all(np.isfinite(s_full))
    monkeypatch.setattr(vmf, "_MAX_REJECTIONS", 0)  # no proposal at all
    w0, s0 = (np.asarray(a) for a in draw())
    assert np.all(np.isnan(w0)) and np.all(np.isnan(s0))
    monkeypatch.setattr(vmf, "_MAX_REJECTIONS", 1)  # one proposal: NaN exactly where it is rejected
    w1, s1 = (np.asarray(a) for a in draw())
    ok = np.isfinite(w1)
    assert np.array_equal(ok, np.isfinite(s1))
    # Wood's acceptance rate at d = 3, kappa = 1 is well inside (1/2, 1): some, not all, first proposals fail.
    assert 0.0 < 1.0 - ok.mean() < 0.5, ok.mean()
    # An accepted first proposal is what the unlimited loop returns for the same key.
    np.testing.assert_array_equal(w1[ok], w_full[ok])
    np.testing.assert_array_equal(s1[ok], s_full[ok])
