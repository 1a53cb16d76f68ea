import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import integrate, stats

from recon_jax import bounds
from recon_jax.attacks import prior_aware
from recon_jax.attacks.canaries import GameTraining
from recon_jax.models import MLP, ModelFns, from_flax

# A linear "model" whose per-example gradient is the record itself: the geometry of the candidate gradients is
# chosen directly (orthogonal, full norm: the worst case of Hayes et al. 2023).
LINEAR = ModelFns(init=lambda k, x: {"w": jnp.zeros((x.shape[-1],))}, apply=lambda p, x: x @ p["w"][:, None],
                  name="linear")


def _identity_loss(logits, y):
    return logits[:, 0]


def _quadrature_success(k, mu):
    """Independent reference: P[N(mu,1) > max of k-1 N(0,1)] = int phi(x - mu) Phi(x)^(k-1) dx (SciPy)."""
    return integrate.quad(lambda x: stats.norm.pdf(x - mu) * stats.norm.cdf(x) ** (k - 1), -15, 15 + mu)[0]


def _orthogonal_game(k, sigmas, steps, n_trials, key, sample_rate=1.0, norm=3.0):
    cands = norm * np.eye(k, dtype=np.float32)  # orthogonal, clipped to full norm C = 1
    cx = jnp.broadcast_to(cands, (n_trials, k, k))
    cy = jnp.zeros((n_trials, k), jnp.int32)
    rng = np.random.default_rng(0)
    fixed = (jnp.asarray(rng.normal(size=(5, k)), jnp.float32), jnp.zeros(5, jnp.int32))
    target = jnp.asarray(rng.integers(0, k, n_trials), jnp.int32)
    return prior_aware.prior_aware_game(
        LINEAR, {"w": jnp.zeros((k,))}, fixed, (cx, cy), target,
        GameTraining(noise_multipliers=sigmas, clip_norm=1.0, steps=steps, optimizer=optax.sgd(0.1),
                     sample_rate=sample_rate, loss_fn=_identity_loss),
        key, chunk_size=4096)


def test_orthogonal_success_matches_quadrature():
    # k = 10, T = 4 steps at sigma = 2: mu = sqrt(T) / sigma = 1.
    n = 4000
    res = _orthogonal_game(10, [2.0], 4, n, jax.random.key(1))
    rate = float(res.success.mean())
    ref = _quadrature_success(10, 1.0)
    # Binomial standard error sqrt(p(1-p)/n) ~ 0.0079; 4 standard errors.
    assert abs(rate - ref) < 4 * np.sqrt(ref * (1 - ref) / n), (rate, ref)
    # The figure: the optimal k-ary guess reaches ~0.88 of the GDP ReRo bound at k = 10, mu = 1.
    ratio = ref / stats.norm.cdf(stats.norm.ppf(0.1) + 1.0)
    assert 0.86 < ratio < 0.90
    assert rate <= float(bounds.rero_gdp(0.1, 1.0)) + 4 * np.sqrt(ref * (1 - ref) / n)


def test_noise_extremes_give_chance_and_certainty():
    n = 2000
    res = _orthogonal_game(10, [1000.0, 0.05], 3, n, jax.random.key(2))
    chance, certain = (float(v) for v in res.success.mean(axis=1))
    assert abs(chance - 0.1) < 4 * np.sqrt(0.1 * 0.9 / n)  # 1/k within 4 binomial standard errors
    assert certain == 1.0


def test_independent_noise_per_level_and_trial():
    res = _orthogonal_game(4, [1.0, 1.0], 2, 8, jax.random.key(3))
    s = np.asarray(res.scores)
    assert not np.allclose(s[0], s[1])  # same sigma, different noise level index: independent draws
    assert len({tuple(np.round(row, 6)) for row in s[0]}) == 8


@pytest.mark.parametrize("target", [0, 1])
def test_duplicate_candidates_win_half_the_time_wherever_the_target_sits(target):
    """Two identical candidates: every score ties, and the Bayes-optimal guess is right half the time. The old
    argmax took index 0 every time, so a target placed first (as the risk report's records game places it) won
    every game (success 1.0) and one placed second none."""
    n = 2000
    cands = (jnp.broadcast_to(jnp.array([[1.0, 0.0], [1.0, 0.0]]), (n, 2, 2)), jnp.zeros((n, 2), jnp.int32))
    run = GameTraining(noise_multipliers=[1.0], clip_norm=1.0, steps=4, optimizer=optax.sgd(0.1),
                       loss_fn=_identity_loss)
    res = prior_aware.prior_aware_game(LINEAR, {"w": jnp.zeros((2,))}, (jnp.zeros((3, 2)), jnp.zeros(3, jnp.int32)),
                                       cands, jnp.full(n, target, jnp.int32), run, jax.random.key(0))
    assert np.all(np.asarray(res.scores)[..., 0] == np.asarray(res.scores)[..., 1])  # the ties are exact
    assert abs(float(res.success.mean()) - 0.5) < 4 * np.sqrt(0.25 / n)


def test_guess_breaking_ties_is_uniform_among_the_maxima_and_refuses_nan_rows():
    rng = np.random.default_rng(0)
    scores = np.array([[1.0, 5.0, 5.0, 2.0, 5.0]] * 6000)
    guess = np.asarray(prior_aware.guess_breaking_ties(scores, rng.random(scores.shape)))
    counts = np.bincount(guess, minlength=5)
    assert counts[0] == counts[3] == 0
    assert stats.chisquare(counts[[1, 2, 4]]).pvalue > 1e-3  # uniform over the three tied maxima
    assert np.all(np.asarray(prior_aware.guess_breaking_ties(np.array([[0.0, np.nan]]), np.ones((1, 2)))) == -1)
    with pytest.raises(ValueError, match="same shape"):
        prior_aware.guess_breaking_ties(np.zeros((2, 3)), np.zeros((2, 2)))


def test_orthogonal_success_probability_against_monte_carlo():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200_000, 10))
    x[:, 0] += 1.0
    mc = np.mean(np.argmax(x, axis=1) == 0)
    # Monte-Carlo standard error sqrt(p (1 - p) / n) = 0.00106 at p = 0.341: 0.005 is 4.7 SE.
    assert abs(prior_aware.orthogonal_success_probability(10, 1.0) - mc) < 0.005
    assert prior_aware.orthogonal_success_probability(10, 0.0) == pytest.approx(0.1, abs=1e-9)


@pytest.mark.parametrize("mu", [0.5, 2.0, 5.0, 40.0, 1e6, np.inf])
def test_orthogonal_success_probability_up_to_mu_inf(mu):
    # k = 2: P[X_0 > X_1] with X_0 - X_1 ~ N(mu, 2), closed form Phi(mu / sqrt(2)) (SciPy); mu = inf, the
    # noiseless limit, is 1 (the old window mu +- 12 was empty there and gave 0). Quadrature error ~1e-12.
    ref = float(stats.norm.cdf(mu / np.sqrt(2.0)))
    assert prior_aware.orthogonal_success_probability(2, mu) == pytest.approx(ref, abs=1e-9)
    assert prior_aware.crafted_success_probability("simplex", 2, mu) == pytest.approx(
        float(stats.norm.cdf(mu)), abs=1e-9)
    assert prior_aware.crafted_success_probability("orthogonal", 1000, np.inf) == 1.0


def test_predicted_success_rejects_nan_separation():
    d = np.full((1, 1, 3), np.nan)
    d[0, 0, 0] = 0.0
    with pytest.raises(ValueError, match="separation"):
        prior_aware.predicted_success(d, [0])
    d[0, 0, 1:] = np.inf  # infinitely separated candidates: certain success
    assert float(prior_aware.predicted_success(d, [0])[0]) == pytest.approx(1.0, abs=1e-12)


def _naive_mixture_scores(residuals, cands, std, q):
    """Naive reference: log of the mixture density of each step, minus the "no target" density (SciPy)."""
    out = np.zeros(cands.shape[1])
    for t in range(residuals.shape[0]):
        base = stats.multivariate_normal(np.zeros(residuals.shape[1]), std**2).logpdf(residuals[t])
        for j in range(cands.shape[1]):
            with_t = stats.multivariate_normal(cands[t, j], std**2).logpdf(residuals[t])
            out[j] += np.logaddexp((np.log1p(-q) if q < 1 else -np.inf) + base, np.log(q) + with_t) - base
    return out


@pytest.mark.parametrize("q", [1.0, 0.3])
def test_scores_equal_naive_likelihood(x64, q):
    rng = np.random.default_rng(1)
    r, c = rng.normal(size=(3, 5)), rng.normal(size=(3, 4, 5))
    got = prior_aware.log_likelihood_scores(jnp.asarray(r), jnp.asarray(c), 0.7, q)
    # float64 arithmetic on both sides; differences are rounding only.
    np.testing.assert_allclose(np.asarray(got), _naive_mixture_scores(r, c, 0.7, q), rtol=1e-9, atol=1e-9)


def test_poisson_game_beats_chance_and_respects_tradeoff_bound():
    from recon_jax.accounting import rero_dpsgd_tradeoff

    n, k, q, steps, sigma = 1500, 2, 0.5, 8, 1.0
    res = _orthogonal_game(k, [sigma], steps, n, jax.random.key(4), sample_rate=q)
    rate = float(res.success.mean())
    bound = float(rero_dpsgd_tradeoff([1.0 / k], sigma, q, steps)[0])
    se = np.sqrt(0.25 / n)
    assert rate > 0.5 + 4 * se  # the mixture likelihood extracts signal
    assert rate <= bound + 4 * se


def test_ghost_and_per_example_paths_agree():
    fns = from_flax(MLP(features=(4, 3)))
    rng = np.random.default_rng(0)
    fx = jnp.asarray(rng.uniform(size=(6, 16)), jnp.float32)
    fy = jnp.asarray(rng.integers(0, 3, 6), jnp.int32)
    cx = jnp.asarray(rng.uniform(size=(3, 4, 16)), jnp.float32)
    cy = jnp.asarray(rng.integers(0, 3, (3, 4)), jnp.int32)
    p0 = fns.init(jax.random.key(0), fx[:1])
    kw = dict(training=GameTraining(noise_multipliers=[0.5, 2.0], clip_norm=1.0, steps=3,
                                    optimizer=optax.sgd(0.2, momentum=0.9)), key=jax.random.key(5))
    a = prior_aware.prior_aware_game(fns, p0, (fx, fy), (cx, cy), jnp.zeros(3, jnp.int32), **kw)
    b = prior_aware.prior_aware_game(dataclasses.replace(fns, tap=None), p0, (fx, fy), (cx, cy),
                                     jnp.zeros(3, jnp.int32), **kw)
    # float32: ghost sums and vmap(grad) sums differ by rounding (measured <= 2e-6 on scores of O(1e1)).
    np.testing.assert_allclose(np.asarray(a.scores), np.asarray(b.scores), rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(a.separation), np.asarray(b.separation), rtol=1e-5, atol=2e-5)
    assert float(np.min(np.asarray(a.separation)[:, :, 1:])) > 0  # distinct candidates are apart


def test_separation_is_the_worst_case_for_orthogonal_full_norm_candidates():
    steps, sigmas = 5, [0.5, 2.0]
    res = _orthogonal_game(6, sigmas, steps, 16, jax.random.key(6))
    target = np.asarray(jnp.argmax(res.separation[0] == 0, axis=-1))  # the target's own entry is 0
    r = prior_aware.separation_retained(res, sigmas, steps, target)
    assert r.shape == (2, 16, 5)
    np.testing.assert_allclose(r, 1.0, rtol=1e-5)  # 2 T / sigma^2 for every pair, at every noise level


def test_separation_equals_naive_distance_of_clipped_records():
    # LINEAR's per-example gradient is the record itself, the same at every step: the separation of candidate j is
    # T ||clip(x_z) - clip(x_j)||^2 / (sigma C)^2 (independent NumPy reference).
    rng = np.random.default_rng(2)
    k, d, steps, clip, sigma = 5, 7, 3, 1.5, 0.8
    cx = rng.normal(size=(4, k, d)) * rng.uniform(0.2, 1.0, size=(4, k, 1))  # some inside, some beyond the clip
    fixed = (jnp.asarray(rng.normal(size=(3, d)), jnp.float32), jnp.zeros(3, jnp.int32))
    target = np.array([0, 2, 4, 1])
    res = prior_aware.prior_aware_game(
        LINEAR, {"w": jnp.zeros((d,))}, fixed, (jnp.asarray(cx, jnp.float32), jnp.zeros((4, k), jnp.int32)),
        target, GameTraining(noise_multipliers=[sigma], clip_norm=clip, steps=steps, optimizer=optax.sgd(0.1),
                             loss_fn=_identity_loss),
        jax.random.key(7))
    norms = np.linalg.norm(cx, axis=-1, keepdims=True)
    clipped = cx * np.minimum(1.0, clip / norms)
    ref = steps * np.sum((clipped[np.arange(4), target][:, None] - clipped) ** 2, -1) / (sigma * clip) ** 2
    np.testing.assert_allclose(np.asarray(res.separation[0]), ref, rtol=1e-4, atol=1e-4)
    r = prior_aware.separation_retained(res, [sigma], steps, target)
    keep = np.ones((4, k), bool)
    keep[np.arange(4), target] = False
    np.testing.assert_allclose(r[0], (ref / (2 * steps / sigma**2))[keep].reshape(4, k - 1), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="prior_size"):
        prior_aware.separation_retained(res, [sigma], steps, target, prior_size=1)
    with pytest.raises(ValueError, match="target_index"):
        prior_aware.separation_retained(res, [sigma], steps, target, prior_size=3)  # target 4 not in the prior


@pytest.mark.parametrize("kwargs,match", [
    (dict(noise_multipliers=[0.0]), "noise_multipliers"),
    (dict(clip_norm=0.0), "clip_norm"),
    (dict(steps=0), "steps"),
    (dict(sample_rate=1.5), "sample_rate"),
])
def test_invalid_arguments(kwargs, match):
    args = dict(noise_multipliers=[1.0], clip_norm=1.0, steps=1, optimizer=optax.sgd(0.1), loss_fn=_identity_loss)
    args.update(kwargs)
    cx, cy = jnp.zeros((2, 3, 4)), jnp.zeros((2, 3), jnp.int32)
    with pytest.raises(ValueError, match=match):
        prior_aware.prior_aware_game(LINEAR, {"w": jnp.zeros(4)}, (jnp.zeros((2, 4)), jnp.zeros(2, jnp.int32)),
                                     (cx, cy), jnp.zeros(2, jnp.int32), GameTraining(**args), jax.random.key(0))
    with pytest.raises(ValueError, match="target_index"):
        prior_aware.prior_aware_game(LINEAR, {"w": jnp.zeros(4)}, (jnp.zeros((2, 4)), jnp.zeros(2, jnp.int32)),
                                     (cx, cy), jnp.full(2, 3, jnp.int32),
                                     GameTraining(noise_multipliers=[1.0], clip_norm=1.0, steps=1,
                                                  optimizer=optax.sgd(0.1)), jax.random.key(0))


def test_float32_params_under_global_x64(x64):
    """With float64 enabled globally, a float32 model still runs (noise levels are cast to the params' dtype)."""
    cx = jnp.broadcast_to(jnp.eye(3, dtype=jnp.float32), (4, 3, 3))
    res = prior_aware.prior_aware_game(
        LINEAR, {"w": jnp.zeros((3,), jnp.float32)}, (jnp.ones((2, 3), jnp.float32), jnp.zeros(2, jnp.int32)),
        (cx, jnp.zeros((4, 3), jnp.int32)), jnp.zeros(4, jnp.int32),
        GameTraining(noise_multipliers=[0.01, 1.0], clip_norm=1.0, steps=2, optimizer=optax.sgd(0.1, momentum=0.9),
                     loss_fn=_identity_loss),
        jax.random.key(0))
    assert res.scores.dtype == jnp.float32 and bool(jnp.all(res.success[0]))
