import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import integrate, stats

from recon_jax.attacks import canaries, prior_aware
from recon_jax.models import MLP, ModelFns, from_flax

# A linear "model" whose per-example gradient is the record itself (as in test_prior_aware).
LINEAR = ModelFns(init=lambda k, x: {"w": jnp.zeros((x.shape[-1],))}, apply=lambda p, x: x @ p["w"][:, None],
                  name="linear")


def _identity_loss(logits, y):
    return logits[:, 0]


def _linear_fixed(d, n=5, seed=0):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.normal(size=(n, d)), jnp.float32), jnp.zeros(n, jnp.int32))


@pytest.mark.parametrize("k", [2, 3, 10])
def test_crafted_geometry(k):
    c = 2.5
    coords = np.arange(7, 7 + k)
    orth = canaries.dense_canaries(canaries.crafted_canaries("orthogonal", k, coords, c), 20)
    simp = canaries.dense_canaries(canaries.crafted_canaries("simplex", k, coords, c), 20)
    # Definitions: Dirac vectors C e_p; the centred regular simplex has norm C, pairwise inner product -C^2/(k-1) and
    # sums to zero; both live on the chosen coordinates only. Float32 values: 1e-6 relative.
    np.testing.assert_allclose(orth, c * np.eye(20)[coords], atol=1e-6)
    np.testing.assert_allclose(simp @ simp.T, c * c * (np.eye(k) * (1 + 1 / (k - 1)) - 1 / (k - 1)), atol=1e-5)
    np.testing.assert_allclose(simp.sum(axis=0), 0.0, atol=1e-5)
    assert np.all(simp[:, np.setdiff1d(np.arange(20), coords)] == 0)
    if k == 2:
        np.testing.assert_allclose(simp[0], -simp[1], atol=1e-7)  # antipodal


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="cube", k=3, coordinates=[0, 1, 2]), "kind"),
    (dict(kind="simplex", k=1, coordinates=[0]), "k must be"),
    (dict(kind="orthogonal", k=3, coordinates=[0, 1, 1]), "coordinates"),
    (dict(kind="orthogonal", k=2, coordinates=[0, -1]), "coordinates"),
    (dict(kind="orthogonal", k=2, coordinates=[0, 1], clip_norm=0.0), "clip_norm"),
])
def test_crafted_canaries_invalid(kwargs, match):
    kwargs.setdefault("clip_norm", 1.0)
    with pytest.raises(ValueError, match=match):
        canaries.crafted_canaries(**kwargs)


def test_canary_coordinates_are_untouched_by_the_fixed_set():
    fns = from_flax(MLP(features=(4, 3)))
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(6, 16)).astype(np.float32)
    x[:, [2, 5, 11]] = 0.0  # three input features zero in every D- record
    params = fns.init(jax.random.key(0), x[:1])
    coords, free = canaries.canary_coordinates(fns, params, x, 20)
    assert free == 12 and len(set(coords.tolist())) == 20  # 3 features x 4 hidden units, then other parameters
    # Independent check at parameters far from those the function looked at: D-'s gradients vanish there.
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    other = unravel(flat + jax.random.normal(jax.random.key(7), flat.shape))
    y = jnp.asarray(rng.integers(0, 3, 6))

    def grad_of(xi, yi):
        g = jax.grad(lambda p: -jax.nn.log_softmax(fns.apply(p, xi[None]))[0, yi])(other)
        return jax.flatten_util.ravel_pytree(g)[0]

    g = np.asarray(jax.jit(jax.vmap(grad_of))(jnp.asarray(x), y))
    assert np.all(g[:, coords[:free]] == 0) and np.any(g[:, coords[free:]] != 0)
    with pytest.raises(ValueError, match="count"):
        canaries.canary_coordinates(fns, params, x, 10**6)


def test_blocks_on_disjoint_coordinates_do_not_see_each_other():
    """A game's scores are the same whether or not other games' canaries train in the same run (the premise of
    carrying one game per prior size, and the audit canary, in one run)."""
    fns = from_flax(MLP(features=(4, 3)))
    rng = np.random.default_rng(1)
    fx = jnp.asarray(rng.uniform(size=(6, 16)), jnp.float32)
    fy = jnp.asarray(rng.integers(0, 3, 6), jnp.int32)
    p0 = fns.init(jax.random.key(0), fx[:1])
    a = canaries.crafted_canaries("simplex", 3, [0, 1, 2], 1.0)
    b = canaries.crafted_canaries("orthogonal", 4, [40, 41, 42, 43], 1.0)
    inc_a = np.eye(3, dtype=np.float32)[[0, 2, 1, 1]]
    inc_b = np.eye(4, dtype=np.float32)[[3, 0, 1, 2]]
    run = canaries.GameTraining(noise_multipliers=[0.7], clip_norm=1.0, steps=3, optimizer=optax.sgd(0.3, momentum=0.9))
    alone = canaries.canary_game(fns, p0, (fx, fy), a, inc_a, run, jax.random.key(2)).log_likelihood
    both = canaries.canary_game(fns, p0, (fx, fy), canaries.concat_canaries(a, b),
                                np.concatenate([inc_a, inc_b], axis=1), run, jax.random.key(2)).log_likelihood
    # float32: (D- sum + canaries + noise) - D- sum at different parameters; scores are O(10).
    np.testing.assert_allclose(np.asarray(both[..., :3]), np.asarray(alone), rtol=1e-4, atol=1e-4)


def test_gradient_canaries_score_like_records_with_those_gradients():
    """With the linear model a record's gradient is the record, so records C e_p are Dirac canaries: the two paths
    of prior_aware_game give the same scores (same keys, full batch)."""
    k, d = 4, 12
    coords = np.array([1, 4, 6, 9])
    cx = np.zeros((3, k, d), np.float32)
    cx[:, np.arange(k), coords] = 1.0
    target = np.array([0, 3, 2])
    run = canaries.GameTraining(noise_multipliers=[1.5], clip_norm=1.0, steps=3, optimizer=optax.sgd(0.1),
                                loss_fn=_identity_loss)
    fixed = _linear_fixed(d)
    rec = prior_aware.prior_aware_game(LINEAR, {"w": jnp.zeros((d,))}, fixed, (cx, np.zeros((3, k), np.int32)),
                                       target, run, jax.random.key(4))
    can = prior_aware.prior_aware_game(LINEAR, {"w": jnp.zeros((d,))}, fixed,
                                       canaries.crafted_canaries("orthogonal", k, coords, 1.0), target, run,
                                       jax.random.key(4))
    np.testing.assert_allclose(np.asarray(can.scores), np.asarray(rec.scores), rtol=1e-5, atol=1e-5)  # float32
    np.testing.assert_allclose(np.asarray(can.separation), np.asarray(rec.separation), rtol=1e-5, atol=1e-5)


def _ideal_gaussian_game(vectors, mu, n, seed):
    """Independent naive reference: the Gaussian game itself. Candidates are unit vectors (rows); the release is
    mu * v_z + N(0, I); the Bayes-optimal guess maximises the Gaussian likelihood exp(-||y - mu v_j||^2 / 2)."""
    rng = np.random.default_rng(seed)
    k, dim = vectors.shape
    wins = 0
    for _ in range(n // 10_000):
        z = rng.integers(0, k, 10_000)
        y = mu * vectors[z] + rng.normal(size=(10_000, dim))
        dist = ((y[:, None, :] - mu * vectors[None, :, :]) ** 2).sum(-1)
        wins += int(np.sum(np.argmin(dist, axis=1) == z))
    return wins / n


@pytest.mark.parametrize("kind,k,mu", [("simplex", 2, 0.625), ("simplex", 10, 1.0), ("simplex", 10, 2.5),
                                       ("orthogonal", 10, 1.0), ("simplex", 30, 0.8)])
def test_exact_optimum_against_monte_carlo_of_the_ideal_game(kind, k, mu):
    if kind == "simplex":  # an explicit regular simplex, built here from its definition: centred standard basis
        v = np.eye(k) - 1.0 / k
        v /= np.linalg.norm(v, axis=1, keepdims=True)
    else:
        v = np.eye(k)
    n = 100_000
    mc = _ideal_gaussian_game(v, mu, n, seed=k)
    exact = prior_aware.crafted_success_probability(kind, k, mu)
    se = np.sqrt(exact * (1 - exact) / n)
    assert abs(mc - exact) < 4 * se, (mc, exact, se)  # 4 binomial standard errors


def test_antipodal_canaries_attain_the_gdp_bound():
    from recon_jax import bounds

    for mu in (0.1, 0.625, 2.5):
        exact = prior_aware.crafted_success_probability("simplex", 2, mu)
        # scipy's normal CDF; the quadrature's tolerance (epsabs 1e-12) bounds the difference.
        assert exact == pytest.approx(stats.norm.cdf(mu), abs=1e-9)
        # The float32 bound, raised by its rounding-error allowance (never below the exact value; ~1e-6 above).
        assert exact <= float(bounds.rero_gdp(0.5, mu)) <= exact * (1 + 3e-6)
    # At k = 10 the simplex beats orthogonal canaries and stays below the bound (issue 35: 0.944 vs 0.911 of it),
    # each against the Gaussian orthant probability of its geometry (SciPy, not the code's reduction to a 1-D
    # integral): the exact optimum.
    b = stats.norm.cdf(stats.norm.ppf(0.1) + 2.5)
    simplex = prior_aware.crafted_success_probability("simplex", 10, 2.5)
    orthogonal = prior_aware.crafted_success_probability("orthogonal", 10, 2.5)
    # Genz's quasi-Monte Carlo at abseps 1e-6 (observed error 4e-7); the quadrature is accurate to ~1e-12.
    assert simplex == pytest.approx(_orthant_success(10, 2.5, -1.0 / 9.0), abs=1e-5)
    assert orthogonal == pytest.approx(_orthant_success(10, 2.5, 0.0), abs=1e-5)
    assert orthogonal < simplex < b


def _orthant_success(k, mu, cosine):
    """Independent reference for the optimal guess among k unit-norm canaries with pairwise cosine ``cosine`` at
    noise scale 1 / mu, from the definition: with y = mu v_z + N(0, I), the guess is right iff
    D_j = <y, v_z - v_j> > 0 for every j != z. D ~ N(mu (1 - c) 1, (1 - c)(I + 1 1^T)) in k - 1 dimensions, so
    the success is a Gaussian orthant probability (SciPy's multivariate normal CDF, Genz's algorithm)."""
    c = cosine
    cov = (1.0 - c) * (np.eye(k - 1) + np.ones((k - 1, k - 1)))
    dist = stats.multivariate_normal(mean=np.full(k - 1, -mu * (1.0 - c)), cov=cov, abseps=1e-6, releps=0.0,
                                     maxpts=10**7)
    return float(dist.cdf(np.zeros(k - 1), rng=np.random.default_rng(0)))  # P[-D < 0] = P[D > 0]


def test_simplex_game_pipeline_reaches_the_exact_optimum():
    """The whole game (training, noise, residuals, scores) on simplex gradient canaries vs the closed form."""
    k, d, n = 10, 16, 3000
    rng = np.random.default_rng(5)
    target = rng.integers(0, k, n)
    res = prior_aware.prior_aware_game(
        LINEAR, {"w": jnp.zeros((d,))}, _linear_fixed(d), canaries.crafted_canaries("simplex", k, np.arange(3, 13), 1.0),
        target, canaries.GameTraining(noise_multipliers=[2.0], clip_norm=1.0, steps=4, optimizer=optax.sgd(0.1),
                                      loss_fn=_identity_loss),
        jax.random.key(6), chunk_size=3000)
    exact = prior_aware.crafted_success_probability("simplex", k, 1.0)  # mu = sqrt(4) / 2
    rate = float(res.success.mean())
    assert abs(rate - exact) < 4 * np.sqrt(exact * (1 - exact) / n), (rate, exact)
    # Constant separations 2 T k / ((k - 1) sigma^2): k / (k - 1) of orthogonal canaries'.
    retained = prior_aware.separation_retained(res, [2.0], 4, target)
    np.testing.assert_allclose(retained, k / (k - 1), rtol=1e-5)


def test_audit_canary_scores_have_the_accounted_distribution():
    """Included Dirac canaries score N(mu^2/2, mu^2), excluded ones N(-mu^2/2, mu^2), mu = sqrt(T)/sigma: the noise
    scale the audits read (T = 4, sigma = 2: mu = 1)."""
    m, d = 2000, 2000
    inc = (np.arange(m) % 2).astype(np.float32)
    res = canaries.canary_game(LINEAR, {"w": jnp.zeros((d,))}, _linear_fixed(d, n=3),
                               canaries.crafted_canaries("orthogonal", m, np.arange(m), 1.0), inc[None],
                               canaries.GameTraining(noise_multipliers=[2.0], clip_norm=1.0, steps=4,
                                                     optimizer=optax.sgd(0.1), loss_fn=_identity_loss),
                               jax.random.key(8))
    s = np.asarray(res.log_likelihood[0, 0], np.float64)
    for world, mean in ((s[inc == 1], 0.5), (s[inc == 0], -0.5)):
        # 1,000 draws: the mean within 4 standard errors (0.032), the variance within 4 of its (0.045).
        assert abs(world.mean() - mean) < 4 / np.sqrt(world.size)
        assert abs(world.var(ddof=1) - 1.0) < 4 * np.sqrt(2 / (world.size - 1))


def test_canary_game_invalid_arguments():
    c = canaries.crafted_canaries("orthogonal", 2, [0, 1], 1.0)
    kw = dict(training=canaries.GameTraining(noise_multipliers=[1.0], clip_norm=1.0, steps=2, optimizer=optax.sgd(0.1),
                                             loss_fn=_identity_loss), key=jax.random.key(0))
    fixed, p = _linear_fixed(4), {"w": jnp.zeros((4,))}
    with pytest.raises(ValueError, match="included"):
        canaries.canary_game(LINEAR, p, fixed, c, [[1, 0, 0]], **kw)
    with pytest.raises(ValueError, match="included"):
        canaries.canary_game(LINEAR, p, fixed, c, [[0.5, 0]], **kw)
    with pytest.raises(ValueError, match="coordinates"):
        canaries.canary_game(LINEAR, p, fixed, canaries.crafted_canaries("orthogonal", 2, [0, 9], 1.0), [[1, 0]],
                             **kw)
    with pytest.raises(ValueError, match="target_index"):
        prior_aware.prior_aware_game(LINEAR, p, fixed, c, [2], **kw)


def _per_pair_monte_carlo(shifts, n, seed):
    """Independent naive reference for the per-pair model: the target's noise u ~ N(0, 1) is shared, each other
    candidate j wins against it iff its own N(0, 1) noise exceeds u + shift_j."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(n, 1))
    return float(np.mean(np.all(rng.normal(size=(n, len(shifts))) < u + shifts, axis=1)))


def test_predicted_success_against_monte_carlo_and_quadrature():
    d = np.array([0.0, 0.3, 1.2, 2.0, 4.5, 8.0])  # target first; unequal separations
    pred = float(prior_aware.predicted_success(d[None, None, :], [0])[0])
    mc = _per_pair_monte_carlo(np.sqrt(d[1:] / 2), 400_000, seed=3)
    assert abs(pred - mc) < 4 * np.sqrt(mc * (1 - mc) / 400_000), (pred, mc)
    ref = integrate.quad(lambda u: stats.norm.pdf(u) * np.prod(stats.norm.cdf(u + np.sqrt(d[1:] / 2))), -12, 12,
                         epsabs=1e-12)[0]
    assert pred == pytest.approx(ref, abs=1e-8)  # trapezoid at step 0.01 on [-12, 12] vs adaptive quadrature
    # Exact for crafted geometries: simplex separations give the simplex optimum; trials average; prior_size slices.
    k, mu = 10, 2.5
    sep = np.full((2, 3, k + 2), 2 * mu**2 * k / (k - 1))
    sep[:, np.arange(3), [0, 4, 9]] = 0.0
    got = prior_aware.predicted_success(sep, [0, 4, 9], prior_size=k)
    np.testing.assert_allclose(got, prior_aware.crafted_success_probability("simplex", k, mu), atol=1e-8)
    with pytest.raises(ValueError, match="prior_size"):
        prior_aware.predicted_success(sep, [0, 4, 9], prior_size=1)
    with pytest.raises(ValueError, match="target_index"):
        prior_aware.predicted_success(sep, [0, 4, 10], prior_size=k)
