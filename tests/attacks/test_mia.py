"""Tests for recon_jax.attacks.mia: AUC/threshold helpers vs references; informed MIA known vs random init."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.attacks import mia


def test_roc_auc_matches_sklearn_with_ties():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    scores = np.round(rng.normal(size=200), 1)  # rounding creates many ties
    labels = rng.integers(0, 2, size=200)
    scores = (scores + 0.3 * labels).astype(np.float32)  # same float32 values (and ties) on both sides
    np.testing.assert_allclose(float(mia.roc_auc(scores, labels)), roc_auc_score(labels, scores), rtol=1e-6)
    assert np.isnan(float(mia.roc_auc(scores, np.ones(200))))


def test_best_threshold_matches_exhaustive_search():
    rng = np.random.default_rng(1)
    for trial in range(5):
        scores = np.round(rng.normal(size=40), 1)
        labels = rng.integers(0, 2, size=40).astype(bool)
        tau, acc = mia.best_threshold(scores, labels)
        cands = np.concatenate([[-np.inf], np.unique(scores)])
        ref = max(np.mean((scores > c) == labels) for c in cands)  # every distinct split
        np.testing.assert_allclose(float(acc), ref, rtol=1e-6)
        np.testing.assert_allclose(float(mia.threshold_accuracy(scores, labels, tau)), ref, rtol=1e-6)


def test_roc_auc_counts_do_not_overflow_int32():
    """50,000 members and 50,000 non-members: n_pos * n_neg = 2.5e9 overflows int32 (the old code counted in ints
    and returned 4e9). sklearn's AUC is the reference; float32 rank sums hold it to 1e-5."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(5)
    labels = np.repeat([0, 1], 50_000)
    scores = (rng.normal(size=labels.size) + 1.0 * labels).astype(np.float32)
    np.testing.assert_allclose(float(mia.roc_auc(scores, labels)), roc_auc_score(labels, scores), atol=1e-5)


@pytest.mark.parametrize("base", [1.0000001192092896, 1e7, -3.0e30])  # 1 + 2^-23: the midpoint rounds up
def test_best_threshold_splits_adjacent_floats_as_it_claims(base):
    """Two adjacent float32 scores: their midpoint rounds to the upper one, and "score > tau" would call it a
    non-member (the old code returned that tau with accuracy 1.0; its own accuracy was 0.5). Also the splits below
    all scores and above them at magnitudes where s - 1 == s."""
    lo = np.float32(base)
    hi = np.nextafter(lo, np.float32(np.inf))
    scores, labels = np.array([lo, hi], np.float32), np.array([0, 1])
    tau, acc = mia.best_threshold(scores, labels)
    assert float(acc) == 1.0
    assert float(mia.threshold_accuracy(scores, labels, tau)) == 1.0
    for labels in (np.array([1, 1]), np.array([0, 0])):  # below all / above all
        tau, acc = mia.best_threshold(scores, labels)
        assert float(acc) == 1.0 == float(mia.threshold_accuracy(scores, labels, tau))


def test_non_finite_scores_raise_and_give_nan_under_jit():
    scores, labels = np.array([0.0, 1.0, np.nan, 2.0]), np.array([1, 1, 0, 0])
    for f in (mia.roc_auc, mia.best_threshold, lambda s, l: mia.threshold_accuracy(s, l, 0.5)):
        with pytest.raises(ValueError, match="scores must be finite"):
            f(scores, labels)
        with pytest.raises(ValueError, match="scores must be finite"):
            f(np.array([0.0, np.inf]), np.array([0, 1]))
        out = jax.jit(f)(jnp.asarray(scores), jnp.asarray(labels))
        assert all(np.isnan(float(o)) for o in jax.tree_util.tree_leaves(out))


def _flax_mlp():
    from recon_jax.models import MLP, from_flax

    return from_flax(MLP(features=(5, 3)))


def _haiku_mlp():
    """Haiku's module names contain "/" ("mlp/~/linear_0"): the losses need params unravelled with that key."""
    import haiku as hk

    from recon_jax.models import from_haiku

    return from_haiku(hk.transform(lambda x: hk.nets.MLP([5, 3])(x)))


@pytest.mark.parametrize("make", [_flax_mlp, _haiku_mlp])
def test_candidate_losses_match_direct_apply(make):
    from recon_jax.models import ravel
    from recon_jax.training import softmax_cross_entropy

    fns = make()
    ps = [fns.init(jax.random.key(i), jnp.zeros((1, 4))) for i in range(3)]
    flat = jnp.stack([ravel(p)[0] for p in ps])
    layout = ravel(ps[0])[1]
    x = jnp.arange(4.0) / 4
    got = mia.candidate_losses(fns, flat, layout, x, 2)
    ref = [float(softmax_cross_entropy(fns.apply(p, x[None]), jnp.array([2]))[0]) for p in ps]
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def _tiny_problem():
    rng = np.random.default_rng(0)
    d = 12
    protos = rng.uniform(size=(3, d))
    y = rng.integers(0, 3, size=65).astype(np.int32)
    x = np.clip(protos[y] + 0.2 * rng.normal(size=(65, d)), 0, 1).astype(np.float32)
    return (x[:64], y[:64]), (x[64], y[64])


@pytest.mark.slow  # ~27 s; the two-candidate test and the doctest cover informed_mia quickly
def test_informed_mia_known_init_separates_random_init_does_not():
    from recon_jax.models import MLP, from_flax
    from recon_jax.training import full_batch_gd, initial_params

    fns = from_flax(MLP(features=(8, 3)))
    fixed, cand = _tiny_problem()
    p0 = initial_params(fns, jax.random.key(0), fixed[0])
    known = mia.informed_mia(fns, full_batch_gd(epochs=30, learning_rate=0.1), fixed, cand, jax.random.key(1),
                             num_shadow=64, num_eval=64, init_params=p0)
    rand = mia.informed_mia(fns, full_batch_gd(epochs=30, learning_rate=0.1, init="random"), fixed, cand,
                            jax.random.key(1), num_shadow=64, num_eval=64)
    assert known.auc > 0.95 and known.accuracy > 0.95
    assert rand.auc < known.auc - 0.2 and rand.accuracy < known.accuracy - 0.2, (rand.auc, rand.accuracy)
    # Known init + deterministic full-batch GD: every "in" model is the same model (Fig. 11's point masses).
    s_in = known.shadow_scores[known.shadow_labels]
    assert np.ptp(s_in) < 1e-5


def test_informed_mia_two_candidates():
    from recon_jax.models import MLP, from_flax
    from recon_jax.training import full_batch_gd, initial_params

    fns = from_flax(MLP(features=(8, 3)))
    fixed, cand = _tiny_problem()
    alt = (fixed[0][0] * 0 + 0.5, (cand[1] + 1) % 3)
    p0 = initial_params(fns, jax.random.key(0), fixed[0])
    r = mia.informed_mia(fns, full_batch_gd(epochs=30, learning_rate=0.1), fixed, cand, jax.random.key(3),
                         alternative=alt, num_shadow=16, num_eval=32, init_params=p0)
    assert r.auc > 0.95 and r.accuracy > 0.95


def test_informed_mia_validation():
    from recon_jax.models import MLP, from_flax
    from recon_jax.training import full_batch_gd

    fns = from_flax(MLP(features=(3,)))
    fixed, cand = _tiny_problem()
    with pytest.raises(ValueError, match="num_shadow"):
        mia.informed_mia(fns, full_batch_gd(epochs=1), fixed, cand, jax.random.key(0), num_shadow=1)
    with pytest.raises(ValueError, match="example shape"):
        mia.informed_mia(fns, full_batch_gd(epochs=1, init="random"), fixed, (np.zeros(3), 0), jax.random.key(0))
