"""Tests for recon_jax.attacks.oracle: NN oracle and order statistics vs a NumPy brute force, KL, kappa."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import metrics
from recon_jax.attacks import oracle


def _brute_force(targets, pool):
    t = np.asarray(targets, np.float64).reshape(len(targets), -1)
    p = np.asarray(pool, np.float64).reshape(len(pool), -1)
    return np.array([[np.mean((ti - pj) ** 2) for pj in p] for ti in t])  # naive double loop


def test_nn_oracle_matches_numpy_brute_force(x64):
    rng = np.random.default_rng(0)
    targets = rng.uniform(size=(13, 6, 6, 1))
    pool = rng.uniform(size=(57, 6, 6, 1))
    d = _brute_force(targets, pool)
    # chunk_size 4 does not divide 13: exercises the padded last block.
    r = oracle.nn_oracle(targets, pool, (1.0, 10.0, 50.0), bins=20, max_mse=0.5, chunk_size=4)
    # float64 on both sides; the expansion ||t||^2 + ||p||^2 - 2<t,p> loses a few ulps of ~10: atol 1e-12.
    np.testing.assert_allclose(r.nn_mse, d.min(axis=1), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(r.nn_index, d.argmin(axis=1))
    np.testing.assert_allclose(r.percentile_mse, np.percentile(d, [1, 10, 50], axis=1).T, rtol=0, atol=1e-12)
    edges = np.linspace(0, 0.5, 21)
    ref_hist = np.mean([np.histogram(row, bins=edges)[0] for row in d], axis=0)
    np.testing.assert_allclose(r.histogram, ref_hist, rtol=0, atol=1e-12)
    np.testing.assert_allclose(oracle.pairwise_mse(targets, pool, chunk_size=5), d, rtol=0, atol=1e-12)


def test_nn_oracle_float32_close_to_reference():
    rng = np.random.default_rng(1)
    targets = rng.uniform(size=(20, 28, 28, 1)).astype(np.float32)
    pool = rng.uniform(size=(100, 28, 28, 1)).astype(np.float32)
    d = _brute_force(targets, pool)
    r = oracle.nn_oracle(targets, pool)
    # float32 expansion with ||x||^2 ~ 260: absolute error ~ 1e-7 * 260 / 784 per entry; allow 1e-5.
    np.testing.assert_allclose(r.nn_mse, d.min(axis=1), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(r.nn_index, d.argmin(axis=1))


def test_oracle_finds_planted_neighbour():
    rng = np.random.default_rng(2)
    pool = rng.uniform(size=(50, 16)).astype(np.float32)
    targets = pool[[3, 17]] + 0.01
    r = oracle.nn_oracle(targets, pool)
    assert r.nn_index.tolist() == [3, 17]
    np.testing.assert_allclose(r.nn_mse, 1e-4, rtol=1e-2)


def test_oracle_validation():
    with pytest.raises(ValueError, match="percentiles"):
        oracle.nn_oracle(np.zeros((2, 3)), np.zeros((4, 3)), (150.0,))
    with pytest.raises(ValueError, match="same example size"):
        oracle.nn_oracle(np.zeros((2, 3)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="chunk_size"):
        oracle.pairwise_mse(np.zeros((2, 3)), np.zeros((4, 3)), chunk_size=0)
    with pytest.raises(ValueError, match="same shape"):
        oracle.success(jnp.zeros(3), jnp.zeros(2))
    # one NaN pixel in the pool made every target's oracle MSE NaN (and every target a failure), silently
    pool = np.zeros((4, 3))
    pool[0, 0] = np.nan
    with pytest.raises(ValueError, match="pool must be finite"):
        oracle.nn_oracle(np.zeros((2, 3)), pool)
    with pytest.raises(ValueError, match="targets must be finite"):
        oracle.nn_oracle(pool, np.zeros((2, 3)))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 100.5])
def test_oracle_refuses_percentiles_that_are_nan_or_outside_0_100(bad):
    """A NaN percentile failed neither ``q < 0`` nor ``q > 100`` and came back as NaN order statistics."""
    with pytest.raises(ValueError, match=r"percentiles must be in \[0, 100\]"):
        oracle.nn_oracle(np.zeros((2, 3)), np.ones((4, 3)), (50.0, bad))
    with pytest.raises(ValueError, match="percentiles"):
        oracle.nn_oracle(np.zeros((2, 3)), np.ones((4, 3)), ())
    # The ends of the range are allowed: the smallest and largest MSE to the pool (here both 1).
    r = oracle.nn_oracle(np.zeros((2, 3)), np.ones((4, 3)), (0.0, 100.0))
    assert np.asarray(r.percentile_mse).tolist() == [[1.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 0.0, -1.0])
def test_oracle_refuses_a_histogram_edge_that_is_not_finite_and_positive(bad):
    """max_mse = inf was accepted and made every histogram edge inf or NaN."""
    with pytest.raises(ValueError, match="max_mse must be finite and > 0"):
        oracle.nn_oracle(np.zeros((2, 3)), np.ones((4, 3)), (50.0,), bins=4, max_mse=bad)


def test_success_is_strict():
    assert oracle.success(jnp.array([0.1, 0.2, 0.3]), jnp.array([0.2, 0.2, 0.2])).tolist() == [True, False, False]


def test_classifier_kl_matches_scipy():
    from scipy.special import softmax
    from scipy.stats import entropy

    w = np.random.default_rng(3).normal(size=(16, 5)).astype(np.float32)
    # The classifier's product at full precision, so that it gives the logits the NumPy reference computes on every
    # backend (at default precision a GPU rounds its operands to TF32: KL off by ~1e-3 relative).
    apply_fn = lambda x: jnp.matmul(jnp.reshape(x, (x.shape[0], -1)), w, precision=jax.lax.Precision.HIGHEST)
    a = np.random.default_rng(4).uniform(size=(6, 4, 4)).astype(np.float32)
    b = np.random.default_rng(5).uniform(size=(6, 4, 4)).astype(np.float32)
    kl = metrics.classifier_kl(apply_fn, a, b)  # recon_jax.metrics (DESIGN.md: metrics.py holds classifier KL)
    logits = lambda v: v.reshape(v.shape[0], -1).astype(np.float64) @ w  # NumPy, float64
    ref = [entropy(softmax(logits(a)[i]), softmax(logits(b)[i])) for i in range(6)]
    np.testing.assert_allclose(kl, ref, rtol=1e-4, atol=1e-6)  # float32 log-softmax vs float64 SciPy


def test_reconstruction_metrics_keys_and_values():
    rng = np.random.default_rng(6)
    t = rng.uniform(size=(4, 12, 12, 1)).astype(np.float32)
    r = np.clip(t + 0.05, 0, 1)
    oracle_mse = jnp.array([1.0, 1e-6, 1.0, 1e-6])  # the reconstructions' MSEs are ~2e-3: two beat their oracle
    m = oracle.reconstruction_metrics(t, r, oracle_mse=oracle_mse, classifier_apply=lambda x: x.reshape(4, -1)[:, :3])
    assert set(m) == {"mse", "psnr", "ncc", "ssim", "oracle_mse", "success", "kl"}
    mse = ((t.astype(np.float64) - r) ** 2).reshape(4, -1).mean(1)
    np.testing.assert_allclose(m["mse"], mse, rtol=1e-5)
    np.testing.assert_allclose(m["psnr"], 10 * np.log10(1.0 / mse), rtol=1e-5)
    ncc = [np.corrcoef(a.ravel(), b.ravel())[0, 1] for a, b in zip(t.astype(np.float64), r)]
    np.testing.assert_allclose(m["ncc"], ncc, rtol=1e-5)
    assert np.asarray(m["success"]).tolist() == [True, False, True, False]
    np.testing.assert_array_equal(m["oracle_mse"], oracle_mse)


def test_empirical_kappa_matches_brute_force():
    rng = np.random.default_rng(7)
    pool = rng.uniform(size=(40, 5)).astype(np.float32)
    d = _brute_force(pool, pool)
    for eta in (0.0, 0.05, 0.1, 0.2):
        ref = max(np.mean(d[i] <= eta) for i in range(40))
        got = float(oracle.empirical_kappa(pool, eta, chunk_size=7))
        assert abs(got - ref) < 1e-6, (eta, got, ref)
    np.testing.assert_allclose(oracle.empirical_kappa(pool, jnp.array([0.05, 0.1])),
                               [max(np.mean(d[i] <= e) for i in range(40)) for e in (0.05, 0.1)])
    # NaN eta used to give kappa 0 (only eta < 0 was checked), an empty pool a ZeroDivisionError.
    with pytest.raises(ValueError, match="eta must be >= 0"):
        oracle.empirical_kappa(pool, float("nan"))
    with pytest.raises(ValueError, match="at least one point"):
        oracle.empirical_kappa(np.zeros((0, 5), np.float32), 0.1)


def test_estimate_kappa_matches_brute_force_over_records_and_means():
    rng = np.random.default_rng(3)
    pool = rng.uniform(size=(40, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 40)
    guesses = np.concatenate([pool[:30], pool[:30].mean(0, keepdims=True)]
                             + [pool[:30][labels[:30] == c].mean(0, keepdims=True) for c in np.unique(labels[:30])])
    for eta in (0.02, 0.08, 0.15):
        # Brute force in NumPy: the best guess's share of the first 30 records within MSE eta.
        d = ((guesses[:, None, :] - pool[None, :30, :]) ** 2).mean(-1)
        ref = (d <= eta).mean(1).max()
        got = float(oracle.estimate_kappa(pool, eta, labels, max_pool=30))
        assert got == pytest.approx(ref, abs=1e-6)
    with pytest.raises(ValueError, match="max_pool"):
        oracle.estimate_kappa(pool, 0.1, max_pool=0)
    with pytest.raises(ValueError, match="labels"):
        oracle.estimate_kappa(pool, 0.1, labels[:5])


def test_empirical_kappa_keeps_a_float64_eta(x64):
    """With x64 on, eta at exactly the float64 MSE of two records counts them as within eta (MSE <= eta); the
    old float32 cast rounded eta below that MSE and halved kappa."""
    pool = jnp.asarray([[0.0], [0.1]], jnp.float64)
    d = float(np.mean((np.float64(0.0) - np.float64(0.1)) ** 2))  # 0.010000000000000002
    assert float(np.float32(d)) < d  # float32 rounds eta below the MSE
    assert float(oracle.empirical_kappa(pool, d)) == 1.0
    assert float(oracle.empirical_kappa(pool, np.nextafter(d, 0.0))) == 0.5
