import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import optimize, stats

from recon_jax import accounting
from recon_jax.attacks import audit, prior_aware
from recon_jax.models import ModelFns


def _gdp_eps(mu, delta):
    """Independent reference: the exact eps(delta) of mu-GDP (Dong et al. 2022, Cor. 2.13), by root-finding."""
    f = lambda e: stats.norm.cdf(-e / mu + mu / 2) - np.exp(e) * stats.norm.cdf(-e / mu - mu / 2) - delta  # noqa
    return optimize.brentq(f, 0.0, 500.0)


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (57, 400)])
def test_clopper_pearson_matches_scipy_binomtest(k, n):
    ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    lo, hi = audit.clopper_pearson(k, n, 0.95)
    # Both are beta quantiles; differences are root-finding rounding.
    assert float(lo) == pytest.approx(ref.low, abs=1e-10) and float(hi) == pytest.approx(ref.high, abs=1e-10)


def test_clopper_pearson_upper_one_sided():
    # k = 0: P[Bin(n, p) = 0] = (1 - p)^n = 1 - confidence gives p = 1 - (1 - confidence)^(1/n).
    assert float(audit.clopper_pearson_upper(0, 50, 0.9)) == pytest.approx(1 - 0.1 ** (1 / 50), rel=1e-10)
    assert float(audit.clopper_pearson_upper(50, 50, 0.9)) == 1.0


def test_gaussian_mechanism_lower_bound_never_exceeds_true_eps():
    delta = 1e-5
    for mu in (0.5, 1.0, 2.0, 4.0):
        true_eps = _gdp_eps(mu, delta)
        for seed in range(5):
            rng = np.random.default_rng(seed)
            a = audit.empirical_epsilon(rng.normal(mu, 1.0, 4000), rng.normal(0.0, 1.0, 4000), delta)
            assert 0.0 <= a.eps_lower <= true_eps, (mu, seed, a)


def test_gaussian_mechanism_lower_bound_approaches_true_eps_with_many_runs():
    delta, mu = 1e-5, 1.0
    true_eps = _gdp_eps(mu, delta)  # 4.38
    rng = np.random.default_rng(0)
    small = audit.empirical_epsilon(rng.normal(mu, 1, 2000), rng.normal(0, 1, 2000), delta).eps_lower
    large = audit.empirical_epsilon(rng.normal(mu, 1, 400_000), rng.normal(0, 1, 400_000), delta).eps_lower
    assert small < large <= true_eps
    assert large > 0.6 * true_eps


def test_no_signal_gives_small_bound():
    rng = np.random.default_rng(1)
    a = audit.empirical_epsilon(rng.normal(0, 1, 3000), rng.normal(0, 1, 3000), 1e-5)
    assert a.eps_lower < 0.2


def test_white_box_game_never_above_accountant():
    """The canary game on full-batch DP-GD (gradient = record, full norm) against the PLD accountant's eps."""
    fns = ModelFns(init=lambda k, x: {"w": jnp.zeros((x.shape[-1],))}, apply=lambda p, x: x @ p["w"][:, None])
    n, steps, delta = 1000, 4, 1e-5
    canary = jnp.broadcast_to(jnp.array([[2.0, 0.0, 0.0]]), (n, 1, 3))
    include = jnp.asarray(np.arange(n) % 2, jnp.float32)
    res = prior_aware.prior_aware_game(
        fns, {"w": jnp.zeros(3)}, (jnp.ones((4, 3)), jnp.zeros(4, jnp.int32)), (canary, jnp.zeros((n, 1), jnp.int32)),
        jnp.zeros(n, jnp.int32), noise_multipliers=[1.0, 2.0, 4.0], clip_norm=1.0, steps=steps,
        optimizer=optax.sgd(0.1), key=jax.random.key(0), include_target=include, loss_fn=lambda lg, y: lg[:, 0],
        chunk_size=1000)
    scores = np.asarray(res.scores[..., 0])
    for i, sigma in enumerate((1.0, 2.0, 4.0)):
        a = audit.empirical_epsilon(scores[i][include == 1], scores[i][include == 0], delta)
        eps = float(accounting.dpsgd_epsilon(sigma, 1.0, steps, delta, accountant="pld"))
        assert a.eps_lower <= eps, (sigma, a.eps_lower, eps)
        if sigma == 1.0:  # mu = 2: clearly distinguishable
            assert a.eps_lower > 1.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(delta=1.0), "delta"), (dict(confidence=1.0), "confidence"), (dict(calibration_fraction=0.0),
                                                                        "calibration_fraction")])
def test_invalid_arguments(kwargs, match):
    args = dict(delta=1e-5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        audit.empirical_epsilon(np.zeros(10), np.zeros(10), **args)
    with pytest.raises(ValueError, match="finite"):
        audit.empirical_epsilon(np.array([np.nan, 0.0]), np.zeros(2), 1e-5)
    with pytest.raises(ValueError, match="successes"):
        audit.clopper_pearson(5, 4)
