"""The one DP gradient (privatized_loss_and_gradient / clipped_gradient_sum) against naive per-example loops, in
float64: weights, the separate target term, microbatching, ghost vs vmap, the normaliser, argument checks."""

import flax.linen as nn
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import models, training
from recon_jax.mechanisms import GaussianMechanism, NoNoise

FNS = models.from_flax(models.MLP(features=(8, 4), activation="elu"))


def _setup(n=7, d=6):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(n, d)))
    y = jnp.asarray(np.arange(n) % 4)
    # larger weights so that some gradients exceed the clip norm and some do not
    params = jax.tree_util.tree_map(lambda a: 3.0 * a.astype(jnp.float64), FNS.init(jax.random.key(0), x[:1]))
    return params, x, y


def _naive_clip(g, clip_norm, clipping):
    """One example's gradient pytree clipped by hand (not by training.clip_gradients, which the code under test
    calls): flat, the whole vector to norm C; per layer, each top-level layer's subtree to C / sqrt(L)."""
    def scaled(tree, bound):
        norm = np.sqrt(sum(np.sum(np.asarray(a) ** 2) for a in jax.tree_util.tree_leaves(tree)))
        return jax.tree_util.tree_map(lambda a: np.asarray(a) * min(1.0, bound / norm), tree)

    if clipping == "flat":
        return models.ravel(scaled(g, clip_norm))[0]
    return models.ravel({name: scaled(sub, clip_norm / np.sqrt(len(g))) for name, sub in g.items()})[0]


def _naive(params, x, y, w, clip_norm, clipping="flat"):
    """sum_i w_i clip(g_i) and sum_i w_i loss_i, one example at a time."""
    total, loss = 0.0, 0.0
    for i in range(x.shape[0]):
        f = lambda p: training.softmax_cross_entropy(FNS.apply(p, x[i:i + 1]), y[i:i + 1])[0]
        v, g = jax.value_and_grad(f)(params)
        total, loss = total + w[i] * _naive_clip(g, clip_norm, clipping), loss + w[i] * v
    return loss, total


@pytest.mark.parametrize("per_example,clipping,microbatch", [("vmap", "flat", None), ("vmap", "per_layer", None),
                                                              ("vmap", "flat", 3), ("ghost", "flat", None)])
def test_loss_and_gradient_with_target_match_naive_loop(x64, per_example, clipping, microbatch):
    params, x, y = _setup()
    w = jnp.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    t_w = 0.5
    alg = training.dp_gd(0.3, clipping=clipping, per_example=per_example, microbatch_size=microbatch)
    batch = training.Batch(x[:6], y[:6], weights=w, target_x=x[6], target_y=y[6], target_weight=t_w)
    loss, g = training.privatized_loss_and_gradient(FNS, params, batch, jax.random.key(1), alg)
    ref_loss, ref_sum = _naive(params, x, y, jnp.concatenate([w, jnp.array([t_w])]), 0.3, clipping)
    count = float(jnp.sum(w)) + 1.0  # the target slot counts 1 in the private normaliser, whatever its weight
    # float64: the only differences are summation orders
    np.testing.assert_allclose(g, ref_sum / count, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(loss, ref_loss / count, rtol=1e-10)
    s_loss, s_sum = training.clipped_gradient_sum(FNS, params, x[:6], y[:6], clip_norm=0.3, clipping=clipping,
                                                  weights=w, per_example=per_example, microbatch_size=microbatch)
    ref_loss6, ref_sum6 = _naive(params, x[:6], y[:6], w, 0.3, clipping)
    np.testing.assert_allclose(s_sum, ref_sum6, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(s_loss, ref_loss6, rtol=1e-10)


def test_normaliser_noise_and_privatized_gradient_wrapper(x64):
    params, x, y = _setup()
    mech = GaussianMechanism(noise_multiplier=2.0)
    k = jax.random.key(3)
    _, total = training.clipped_gradient_sum(FNS, params, x, y, clip_norm=0.3)
    # Poisson-sampled DP-SGD divides by the expected batch size, whatever the batch holds
    poisson = training.dp_sgd(10, 0.3, mechanism=mech, sampling="poisson", per_example="vmap")
    _, g = training.privatized_loss_and_gradient(FNS, params, training.Batch(x, y), k, poisson)
    np.testing.assert_allclose(g, mech.privatize(k, total, 0.3, 10.0), rtol=1e-12)
    # privatized_gradient is the same function without the loss; its normaliser is the batch size
    a = training.privatized_gradient(FNS, params, x, y, k, clip_norm=0.3, mechanism=mech)
    np.testing.assert_allclose(a, mech.privatize(k, total, 0.3, x.shape[0]), rtol=1e-12)
    full = training.dp_gd(0.3, mechanism=mech, per_example="vmap")
    b = training.privatized_loss_and_gradient(FNS, params, training.Batch(x[:6], y[:6], target_x=x[6], target_y=y[6]),
                                              k, full)[1]
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_arguments_checked(x64):
    params, x, y = _setup()
    kw = dict(clip_norm=1.0, mechanism=NoNoise())
    with pytest.raises(ValueError, match="clip_norm"):
        training.privatized_gradient(FNS, params, x, y, jax.random.key(0), clip_norm=0.0, mechanism=NoNoise())
    with pytest.raises(ValueError, match="per_example must be one of"):
        training.privatized_gradient(FNS, params, x, y, jax.random.key(0), per_example="fast", **kw)
    with pytest.raises(ValueError, match="algorithm must clip"):
        training.privatized_loss_and_gradient(FNS, params, training.Batch(x, y), jax.random.key(0),
                                              training.full_batch_gd())
    with pytest.raises(ValueError, match="microbatch_size"):
        training.clipped_gradient_sum(FNS, params, x, y, clip_norm=1.0, microbatch_size=0)
    with pytest.raises(ValueError, match="per_example='ghost'"):
        training.use_ghost_clipping(FNS, params, x, "ghost", "per_layer")
    assert training.use_ghost_clipping(FNS, params, x, "auto") and not training.use_ghost_clipping(FNS, params, x,
                                                                                                    "auto", "per_layer")


@pytest.mark.parametrize("per_example", ["vmap", "ghost"])
@pytest.mark.parametrize("sigma", [0.0, 2.0])
def test_out_and_in_releases_differ_by_the_targets_clipped_gradient(x64, per_example, sigma):
    # Add/remove adjacency: the MIA "out" model (target weight 0) and the "in" model (weight 1) must release
    # (S_- + Z) / (n + 1) and (S_- + clip(g_target) + Z) / (n + 1), one clipped gradient (norm <= C) apart in sum
    # units. With the realised normaliser n + t they differed by clip(g_target) - S_- / n, up to 2C.
    params, x, y = _setup()
    n, clip = 6, 0.3
    alg = training.dp_gd(clip, noise_multiplier=sigma, per_example=per_example)
    released = {}
    for t_w in (0.0, 1.0):
        batch = training.Batch(x[:n], y[:n], weights=jnp.ones(n), target_x=x[n], target_y=y[n],
                               target_weight=t_w)
        released[t_w] = training.privatized_loss_and_gradient(FNS, params, batch, jax.random.key(4), alg)[1]
    _, g_target = _naive(params, x[n:], y[n:], [1.0], clip)  # the target's clipped gradient, by hand
    _, s_minus = _naive(params, x[:n], y[:n], np.ones(n), clip)
    assert np.linalg.norm(g_target) <= clip * (1 + 1e-12)
    # float64; the noise (same key) cancels to rounding of its sigma C scale
    tol = dict(rtol=1e-10, atol=1e-12 * max(1.0, sigma))
    np.testing.assert_allclose(np.asarray(released[1.0] - released[0.0]) * (n + 1), g_target, **tol)
    if sigma == 0.0:
        np.testing.assert_allclose(released[0.0], s_minus / (n + 1), rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(released[1.0], (s_minus + g_target) / (n + 1), rtol=1e-10, atol=1e-13)


class _NormalisedInputs(models.MLP):
    """An MLP on each input divided by its norm: not finite at x = 0 (the old microbatch padding)."""

    def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        return super().__call__(x / jnp.linalg.norm(x, axis=-1, keepdims=True))


@pytest.mark.parametrize("microbatch", [2, 3, 4])
def test_microbatch_padding_is_finite_for_models_undefined_at_zero(x64, microbatch):
    # B = 5 is not a multiple of the microbatch size, so the last microbatch is padded. Zero padding gave NaN for
    # this model (0 * NaN = NaN in the weighted sum); padding with copies of real rows at weight 0 does not.
    fns = models.from_flax(_NormalisedInputs(features=(8, 4)))
    params, x, y = _setup(n=5)
    params = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), fns.init(jax.random.key(0), x[:1]))
    w = jnp.array([1.0, 0.0, 1.0, 1.0, 1.0])
    loss, total = training.clipped_gradient_sum(fns, params, x, y, clip_norm=0.3, weights=w, per_example="vmap",
                                                microbatch_size=microbatch)
    ref_total, ref_loss = 0.0, 0.0
    for i in range(5):  # naive: one example at a time
        v, g = jax.value_and_grad(lambda p: training.softmax_cross_entropy(fns.apply(p, x[i:i + 1]), y[i:i + 1])[0])(
            params)
        ref_total = ref_total + float(w[i]) * _naive_clip(g, 0.3, "flat")
        ref_loss = ref_loss + float(w[i]) * float(v)
    assert np.all(np.isfinite(np.asarray(total)))
    np.testing.assert_allclose(total, ref_total, rtol=1e-10, atol=1e-13)  # float64: summation order only
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)
    # and through a DP step (the target term, Gaussian noise): finite, equal to the unbatched path
    alg = training.dp_gd(0.3, noise_multiplier=1.0, per_example="vmap", microbatch_size=microbatch)
    batch = training.Batch(x[:4], y[:4], weights=w[:4], target_x=x[4], target_y=y[4])
    _, g_mb = training.privatized_loss_and_gradient(fns, params, batch, jax.random.key(2), alg)
    _, g_one = training.privatized_loss_and_gradient(fns, params, batch, jax.random.key(2),
                                                     training.dp_gd(0.3, noise_multiplier=1.0, per_example="vmap"))
    np.testing.assert_allclose(g_mb, g_one, rtol=1e-10, atol=1e-13)


class _Nested(models.MLP):
    """A flax model with a nested module: its per-layer groups are the top-level modules, as before."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(4)(models.MLP(features=(5, 3), name="Body")(x))


def test_per_layer_groups_are_the_first_pytree_keys_for_haiku_and_flax(x64):
    # Haiku module names contain "/" (mlp/~/linear_0): splitting the joined layout path at its first "/" put every
    # layer of a haiku MLP in one group, so per-layer clipping silently became flat clipping.
    hk_fns = models.from_haiku(hk.transform(lambda x: hk.nets.MLP([8, 4], activation=jax.nn.elu)(x)))
    params, x, y = _setup()
    hk_params = jax.tree_util.tree_map(lambda a: 3.0 * a.astype(jnp.float64), hk_fns.init(jax.random.key(0), x[:1]))
    assert len(hk_params) == 2
    w = jnp.array([1.0, 0.0, 1.0, 1.0, 0.5, 1.0, 1.0])
    for fns, p in ((hk_fns, hk_params), (FNS, params)):
        ref_loss, ref = 0.0, 0.0
        for i in range(7):  # naive: each top-level layer of each example's gradient clipped to C / sqrt(2)
            v, g = jax.value_and_grad(lambda q: training.softmax_cross_entropy(fns.apply(q, x[i:i + 1]),
                                                                               y[i:i + 1])[0])(p)
            ref = ref + float(w[i]) * _naive_clip(g, 0.3, "per_layer")
            ref_loss = ref_loss + float(w[i]) * float(v)
        for mb in (None, 3):
            loss, total = training.clipped_gradient_sum(fns, p, x, y, clip_norm=0.3, clipping="per_layer", weights=w,
                                                        microbatch_size=mb)
            np.testing.assert_allclose(total, ref, rtol=1e-10, atol=1e-13)  # float64: summation order only
            np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)
        layout = models.layout_of(p)
        g = training.per_example_gradients(fns, p, x, y)
        np.testing.assert_array_equal(training.clip_gradients(g, 0.3, "per_layer", layout),
                                      training.clip_gradients(g, 0.3, "per_layer", p))
    for layout in (hk_params, models.layout_of(hk_params)):
        ids, n = training.layer_groups(layout)
        assert n == 2 and np.bincount(ids).tolist() == [6 * 8 + 8, 8 * 4 + 4]
    # Modules under hk.name_scope are named "scope/linear" (no "~"): the joined-path rule put both in one group
    # ("scope"); a Layout from layout_of carries the pytree keys, which give the modules, as the pytree does.
    def scoped(x):
        with hk.name_scope("scope"):
            return hk.Linear(3)(jax.nn.elu(hk.Linear(4)(x)))

    scoped_params = models.from_haiku(hk.transform(scoped)).init(jax.random.key(0), x[:1])
    assert sorted(scoped_params) == ["scope/linear", "scope/linear_1"]
    for layout in (scoped_params, models.layout_of(scoped_params)):
        ids, n = training.layer_groups(layout)
        assert n == 2 and np.bincount(ids).tolist() == [4 * 3 + 3, 6 * 4 + 4]  # the outer Linear(3) is made first
    # flax: the groups are the top-level modules, as the first "/"-component always gave
    nested = models.from_flax(_Nested(features=(1,)))
    p_nested = nested.init(jax.random.key(0), x[:1])
    for p in (params, p_nested):
        layout = models.layout_of(p)
        names = {}
        old_rule = [names.setdefault(e.path.split("/")[0], len(names)) for e in layout.entries for _ in range(e.size)]
        for arg in (p, layout):
            ids, n = training.layer_groups(arg)
            assert ids.tolist() == old_rule and n == len(names)
    assert training.layer_groups(p_nested)[1] == 2  # Body, Dense_0


def test_per_layer_clipping_sums_layers_without_a_scatter_and_handles_interleaved_layouts():
    # Layers that are blocks of the flat vector (every pytree's layout) are summed by static slices: a segment sum
    # is a scatter-add, which a GPU computes with contended atomics in no fixed order.
    rng = np.random.default_rng(0)
    g = jnp.asarray(rng.standard_normal((5, 7)) * np.array([1, 1, 1, 4, 4, 0.1, 0.1]), jnp.float32)
    e = lambda path, off, size: models.LayoutEntry(path, (size,), off, size, "float32")  # noqa: E731
    blocked = models.Layout((e("a/w", 0, 3), e("b/w", 3, 2), e("c/w", 5, 2)))
    interleaved = models.Layout((e("a/w", 0, 3), e("b/w", 3, 2), e("a/b", 5, 2)))  # a hand-built layout
    for layout, groups in ((blocked, [[0, 1, 2], [3, 4], [5, 6]]), (interleaved, [[0, 1, 2, 5, 6], [3, 4]])):
        ref = np.array(g, np.float64)
        for idx in groups:  # naive: each group of each row to C / sqrt(L)
            norms = np.linalg.norm(ref[:, idx], axis=1, keepdims=True)
            ref[:, idx] *= np.minimum(1.0, (0.5 / np.sqrt(len(groups))) / norms)
        np.testing.assert_allclose(training.clip_gradients(g, 0.5, "per_layer", layout), ref, rtol=1e-6)
    jaxpr = str(jax.make_jaxpr(lambda v: training.clip_gradients(v, 0.5, "per_layer", blocked))(g))
    assert "scatter" not in jaxpr
