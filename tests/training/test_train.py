"""Training algorithms: GD+momentum vs a hand-written loop, minibatch seeds, DP clipping and noise."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from recon_jax import models, testing, training
from recon_jax.mechanisms import GaussianMechanism, NoNoise
from recon_jax.training.train import poisson_slots

FNS = models.from_flax(models.MLP(features=(8, 4), activation="elu"))


def _data(n=24, d=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + 1, d)).astype(np.float32)
    y = (np.arange(n + 1) % 4).astype(np.int32)
    return (jnp.asarray(x[:n]), jnp.asarray(y[:n])), (jnp.asarray(x[n]), jnp.asarray(y[n]))


def _max_abs(tree) -> float:
    return max(float(np.max(np.abs(np.asarray(a)))) for a in jax.tree_util.tree_leaves(tree))


def _naive_gd(params, x, y, lr, momentum, epochs):
    """Full-batch heavy-ball GD written out by hand on the concatenated data (independent of the trainer)."""

    def loss(p):
        logits = FNS.apply(p, x)
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(y)), y])

    vel = jax.tree_util.tree_map(jnp.zeros_like, params)
    for _ in range(epochs):
        g = jax.grad(loss)(params)
        vel = jax.tree_util.tree_map(lambda v, gi: momentum * v + gi, vel, g)
        params = jax.tree_util.tree_map(lambda p, v: p - lr * v, params, vel)
    return params


def test_full_batch_gd_momentum_matches_hand_written_loop(key):
    fixed, target = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    alg = training.full_batch_gd(learning_rate=0.3, momentum=0.9, epochs=6)
    res = training.train(FNS, alg, fixed, target, key=jax.random.fold_in(key, 1), init_params=p0)
    x = jnp.concatenate([fixed[0], target[0][None]])
    y = jnp.concatenate([fixed[1], target[1][None]])
    ref = _naive_gd(p0, x, y, 0.3, 0.9, 6)
    # float32; the separate target term sums in a different order than the concatenated mean. Where products
    # round (GPU TF32, TPU bfloat16, or emulated: eps = 2^-11, 2^-8) the two loops round different operands (the
    # target's own row, the mean's 1/25 applied before or after the product), and six momentum steps carry that:
    # up to 0.22 eps max|p| under emulation (TF32 and bf16), so 4 eps max|p|.
    eps = testing.default_matmul_eps()
    tol = dict(rtol=1e-5, atol=1e-6) if eps <= 2.0**-24 else dict(rtol=0, atol=4 * eps * _max_abs(ref))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, **tol), res.params, ref)
    assert res.losses.shape == (6,)


def test_target_weight_zero_is_training_without_target(key):
    fixed, target = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    alg = training.full_batch_gd(learning_rate=0.3, momentum=0.5, epochs=4)
    out = training.train(FNS, alg, fixed, target, key=key, init_params=p0, target_weight=0.0)
    ref = _naive_gd(p0, fixed[0], fixed[1], 0.3, 0.5, 4)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), out.params, ref)


def test_known_seed_minibatch_reproduces_fresh_seed_differs(key):
    fixed, target = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    sk = jax.random.key(7)
    known = training.minibatch_sgd(5, learning_rate=0.1, epochs=3, shuffle="known")
    fresh = training.minibatch_sgd(5, learning_rate=0.1, epochs=3, shuffle="fresh")
    run = lambda alg, k: training.train(FNS, alg, fixed, target, key=k, init_params=p0, shuffle_key=sk,
                                        return_trace=True)
    a, b = run(known, jax.random.key(1)), run(known, jax.random.key(2))
    np.testing.assert_array_equal(a.trace["batch_indices"], b.trace["batch_indices"])
    jax.tree_util.tree_map(np.testing.assert_array_equal, a.params, b.params)  # exact reproduction
    c, d = run(fresh, jax.random.key(1)), run(fresh, jax.random.key(2))
    assert not np.array_equal(c.trace["batch_indices"], d.trace["batch_indices"])
    assert not np.allclose(models.ravel(c.params)[0], models.ravel(d.params)[0])
    # every epoch is a permutation of the 25 points, 5 batches of 5
    idx = np.asarray(a.trace["batch_indices"]).reshape(3, 25)
    assert all(sorted(row) == list(range(25)) for row in idx)


def test_trace_is_consistent_with_plain_sgd_updates(key):
    fixed, target = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    alg = training.minibatch_sgd(8, learning_rate=0.05, momentum=0.0, epochs=2, shuffle="fresh")
    res = training.train(FNS, alg, fixed, target, key=key, init_params=p0, return_trace=True)
    P, G = np.asarray(res.trace["params"]), np.asarray(res.trace["gradients"])
    assert P.shape == G.shape == (6, 8 * 6 + 8 + 8 * 4 + 4)
    np.testing.assert_array_equal(P[0], models.ravel(p0)[0])
    # plain SGD: theta_{t+1} = theta_t - lr g_t (float32 rounding of one update)
    np.testing.assert_allclose(P[1:], P[:-1] - 0.05 * G[:-1], rtol=0, atol=1e-6)
    np.testing.assert_allclose(models.ravel(res.params)[0], P[-1] - 0.05 * G[-1], rtol=0, atol=1e-6)
    # the trace's step-0 gradient equals the gradient of the mean loss on the recorded batch
    idx = np.asarray(res.trace["batch_indices"][0])
    xs = np.concatenate([np.asarray(fixed[0]), np.asarray(target[0])[None]])[idx]
    ys = np.concatenate([np.asarray(fixed[1]), np.asarray(target[1])[None]])[idx]
    g0 = jax.grad(lambda p: jnp.mean(training.softmax_cross_entropy(FNS.apply(p, xs), ys)))(p0)
    np.testing.assert_allclose(G[0], models.ravel(g0)[0], rtol=1e-5, atol=1e-6)


def _per_example_norm_check(grads, clipped, clip_norm):
    norms = np.linalg.norm(np.asarray(clipped), axis=1)
    raw = np.linalg.norm(np.asarray(grads), axis=1)
    assert np.all(norms <= clip_norm * (1 + 1e-5))
    # unclipped rows untouched, clipped rows rescaled to exactly C
    small = raw <= clip_norm
    np.testing.assert_allclose(np.asarray(clipped)[small], np.asarray(grads)[small], rtol=1e-6)
    np.testing.assert_allclose(norms[~small], clip_norm, rtol=1e-5)


@pytest.mark.parametrize("clip_norm", [0.05, 0.5, 50.0])
def test_dp_clipping_bounds_every_per_example_gradient(key, clip_norm):
    fixed, _ = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    grads = training.per_example_gradients(FNS, p0, *fixed)
    # per-example gradients equal grad of each example's loss computed one at a time. Where products round (GPU
    # TF32, TPU bfloat16, or emulated: eps = 2^-11, 2^-8), the vmapped products are rounded (batched GEMMs) but one
    # example's matrix-vector products run in float32 on a GPU: entries differ by up to 0.83 eps max|g| under
    # emulation (TF32 and bf16, matrix-vector products exact), so 4 eps max|g| there.
    eps = testing.default_matmul_eps()
    for i in (0, 7):
        gi = jax.grad(lambda p: training.softmax_cross_entropy(FNS.apply(p, fixed[0][i:i + 1]), fixed[1][i:i + 1])[0])(p0)
        gi = models.ravel(gi)[0]
        tol = dict(rtol=1e-5, atol=1e-7) if eps <= 2.0**-24 else dict(rtol=0, atol=4 * eps * _max_abs(gi))
        np.testing.assert_allclose(grads[i], gi, **tol)
    _per_example_norm_check(grads, training.clip_gradients(grads, clip_norm), clip_norm)
    layout = models.layout_of(p0)
    per_layer = np.asarray(training.clip_gradients(grads, clip_norm, "per_layer", layout))
    ids, n_layers = training.layer_groups(layout)
    assert n_layers == 2
    for g in range(n_layers):
        assert np.all(np.linalg.norm(per_layer[:, ids == g], axis=1) <= clip_norm / np.sqrt(2) * (1 + 1e-5))
    assert np.all(np.linalg.norm(per_layer, axis=1) <= clip_norm * (1 + 1e-5))
    # The values, not only the norms (a clip that shrinks too much stays within them): a naive per-layer clip of each
    # example's gradient pytree, each top-level layer's subtree scaled by min(1, (C / sqrt(L)) / its norm) in
    # float64, independent of layer_groups and clip_gradients. Tolerances as for the gradients above.
    grad_one = jax.jit(lambda xi, yi: jax.grad(
        lambda p: training.softmax_cross_entropy(FNS.apply(p, xi[None]), yi[None])[0])(p0))
    layer_bound = clip_norm / np.sqrt(len(p0))
    for i in range(fixed[0].shape[0]):
        gi = grad_one(fixed[0][i], fixed[1][i])
        naive = {}
        for name, sub in gi.items():
            norm = np.sqrt(sum(np.sum(np.asarray(a, np.float64) ** 2) for a in jax.tree_util.tree_leaves(sub)))
            factor = min(1.0, layer_bound / norm)
            naive[name] = jax.tree_util.tree_map(lambda a, f=factor: np.asarray(a, np.float64) * f, sub)
        want = np.asarray(models.ravel(naive)[0])
        tol = dict(rtol=1e-5, atol=1e-7) if eps <= 2.0**-24 else dict(rtol=0, atol=4 * eps * _max_abs(gi))
        np.testing.assert_allclose(per_layer[i], want, **tol)


def test_dp_gd_released_gradients_are_bounded_and_noised(key):
    fixed, target = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    clean = training.dp_gd(0.1, epochs=3, learning_rate=0.1)  # clipping, no noise
    res = training.train(FNS, clean, fixed, target, key=key, init_params=p0, return_trace=True)
    # mean of clipped per-example gradients has norm <= C
    assert np.all(np.linalg.norm(np.asarray(res.trace["gradients"]), axis=1) <= 0.1 * (1 + 1e-5))
    # microbatching gives the same clipped sums
    mb = training.dp_gd(0.1, epochs=3, learning_rate=0.1, microbatch_size=7)
    res_mb = training.train(FNS, mb, fixed, target, key=key, init_params=p0, return_trace=True)
    np.testing.assert_allclose(res_mb.trace["gradients"], res.trace["gradients"], rtol=1e-5, atol=1e-7)
    # Gaussian mechanism: released - clipped mean ~ N(0, (sigma C / B)^2) per coordinate
    sigma, C, B = 3.0, 0.1, 25
    noisy = training.privatized_gradient(FNS, p0, jnp.concatenate([fixed[0], target[0][None]]),
                                         jnp.concatenate([fixed[1], target[1][None]]), key, clip_norm=C,
                                         mechanism=GaussianMechanism(noise_multiplier=sigma))
    base = training.privatized_gradient(FNS, p0, jnp.concatenate([fixed[0], target[0][None]]),
                                        jnp.concatenate([fixed[1], target[1][None]]), key, clip_norm=C,
                                        mechanism=NoNoise())
    z = (np.asarray(noisy) - np.asarray(base)) / (sigma * C / B)
    p = z.size  # 92 coordinates: std of the sample std is ~1/sqrt(2p) ~ 0.074; 5 sigma margin
    assert abs(z.std() - 1.0) < 5 / np.sqrt(2 * p) and abs(z.mean()) < 5 / np.sqrt(p)
    # train() takes the ghost path (per_example="auto"), privatized_gradient the vmap path: equal up to float32
    # rounding on a CPU. Where products round (eps = 2^-11 TF32, 2^-8 bf16) the two paths round different operands
    # (a_i, delta_i in the ghost product; the per-example backward products in vmap(grad)): up to 0.58 eps max|g|
    # under emulation, so 4 eps max|g|.
    eps = testing.default_matmul_eps()
    tol = dict(rtol=1e-5, atol=1e-7) if eps <= 2.0**-24 else dict(rtol=0, atol=4 * eps * _max_abs(base))
    np.testing.assert_allclose(base, res.trace["gradients"][0], **tol)


def test_dp_sgd_with_noise_draws_fresh_noise_per_key_and_repeats_per_key(key):
    fixed, target = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    alg = training.dp_sgd(5, clip_norm=1.0, noise_multiplier=1.0, epochs=2)
    a = training.train(FNS, alg, fixed, target, key=jax.random.key(1), init_params=p0, return_trace=True)
    b = training.train(FNS, alg, fixed, target, key=jax.random.key(2), init_params=p0, return_trace=True)
    assert a.trace["gradients"].shape == (10, 92)
    assert not np.allclose(a.trace["gradients"], b.trace["gradients"])
    a2 = training.train(FNS, alg, fixed, target, key=jax.random.key(1), init_params=p0, return_trace=True)
    np.testing.assert_array_equal(a.trace["gradients"], a2.trace["gradients"])


def test_random_init_and_optax_optimizer(key):
    fixed, target = _data()
    alg = training.Algorithm(epochs=30, init="random", optimizer=optax.adam(0.05), optimizer_id="adam(0.05)")
    r1 = training.train(FNS, alg, fixed, target, key=jax.random.key(1))
    r2 = training.train(FNS, alg, fixed, target, key=jax.random.key(2))
    assert r1.losses[-1] < 0.7 * r1.losses[0]
    assert not np.allclose(models.ravel(r1.params)[0], models.ravel(r2.params)[0])
    assert alg.describe()["optimizer_id"] == "adam(0.05)"
    with pytest.raises(ValueError, match="optimizer_id"):
        training.Algorithm(optimizer=optax.adam(0.1)).describe()


def test_invalid_arguments_raise(key):
    fixed, target = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    with pytest.raises(ValueError, match="epochs"):
        training.Algorithm(epochs=0)
    with pytest.raises(ValueError, match="momentum"):
        training.full_batch_gd(momentum=1.0)
    with pytest.raises(ValueError, match="shuffle"):
        training.minibatch_sgd(4, shuffle="sometimes")
    with pytest.raises(ValueError, match="clip_norm"):
        training.dp_gd(-1.0)
    # an infinite clip norm or noise multiplier trained NaN models (a reconstructor loss error far downstream);
    # True was taken as 1 epoch or a batch of 1
    inf = float("inf")
    for make, match in ((lambda: training.dp_gd(inf, noise_multiplier=1.0), "clip_norm must be None or finite"),
                        (lambda: training.dp_gd(1.0, noise_multiplier=inf), "noise_multiplier must be finite"),
                        (lambda: training.full_batch_gd(learning_rate=inf), "learning_rate must be finite"),
                        (lambda: training.full_batch_gd(epochs=True), "epochs must be an integer"),
                        (lambda: training.dp_sgd(True, 1.0, noise_multiplier=1.0), "batch_size must be None")):
        with pytest.raises(ValueError, match=match):
            make()
    with pytest.raises(ValueError, match="mechanism requires clip_norm"):
        training.Algorithm(mechanism=NoNoise())
    with pytest.raises(ValueError, match="init_params"):
        training.train(FNS, training.full_batch_gd(epochs=1), fixed, target, key=key)
    with pytest.raises(ValueError, match="shuffle_key"):
        training.train(FNS, training.minibatch_sgd(4, epochs=1), fixed, target, key=key, init_params=p0)
    with pytest.raises(ValueError, match="batch_size"):
        training.train(FNS, training.minibatch_sgd(100, epochs=1, shuffle="fresh"), fixed, target, key=key,
                       init_params=p0)
    with pytest.raises(ValueError, match="target x"):
        training.train(FNS, training.full_batch_gd(epochs=1), fixed, (fixed[0][:2], fixed[1][0]), key=key,
                       init_params=p0)
    with pytest.raises(ValueError, match="clipping"):
        training.clip_gradients(jnp.ones((2, 3)), 1.0, "per_tensor")


def _naive_poisson(p0, fixed, target, key, *, batch, epochs, lr, clip_norm=None, sigma=0.0, rows=None):
    """Poisson-sampled (DP-)SGD written as a plain per-step loop over the variable-size batch (no padding).

    The draws follow the documented derivation: step s of epoch e samples point i (fixed set, then the target)
    iff u_i < q, u = uniform(fold_in(fold_in(fold_in(key, 1), e), s)); with more than ``rows`` points sampled the
    ``rows`` smallest u are kept. DP: clip each example's flat gradient to ``clip_norm``, sum, add
    N(0, (clip_norm sigma)^2) with key fold_in(fold_in(key, 2), step); always divide by the expected size B.
    """
    from jax.flatten_util import ravel_pytree

    x = jnp.concatenate([fixed[0], target[0][None]])
    y = jnp.concatenate([fixed[1], target[1][None]])
    n_total = x.shape[0]
    q = batch / n_total
    flat, unravel = ravel_pytree(p0)
    grad_one = jax.jit(lambda f, xi, yi: ravel_pytree(jax.grad(lambda p: training.softmax_cross_entropy(
        FNS.apply(p, xi[None]), yi[None])[0])(unravel(f)))[0])
    sizes = []
    for e in range(epochs):
        for s in range(n_total // batch):
            u = np.asarray(jax.random.uniform(jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, 1), e), s),
                                              (n_total,)))
            chosen = [i for i in np.argsort(u, kind="stable") if u[i] < q][:rows]
            sizes.append(len(chosen))
            total = jnp.zeros_like(flat)
            for i in chosen:
                g = grad_one(flat, x[i], y[i])
                if clip_norm is not None:
                    g = g * jnp.minimum(1.0, clip_norm / jnp.linalg.norm(g))
                total = total + g
            if clip_norm is not None:
                step = e * (n_total // batch) + s
                noise = jax.random.normal(jax.random.fold_in(jax.random.fold_in(key, 2), step), flat.shape, flat.dtype)
                total = total + clip_norm * sigma * noise
            flat = flat - lr * total / batch
    return unravel(flat), sizes


@pytest.mark.parametrize("private,max_rows", [(True, None), (False, None), (True, 3)])
def test_poisson_sampling_matches_naive_per_step_loop(x64, key, private, max_rows):
    # float64 so that the padded/masked jitted trainer and the loop agree to rounding (1e-10).
    fixed, target = _data(n=15)
    fixed = (fixed[0].astype(jnp.float64), fixed[1])
    target = (target[0].astype(jnp.float64), target[1])
    p0 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), training.initial_params(FNS, key, fixed[0]))
    kw = dict(sampling="poisson", max_batch_size=max_rows, epochs=3, shuffle="fresh")
    if private:
        alg = training.dp_sgd(4, clip_norm=0.5, noise_multiplier=0.8, learning_rate=0.3, **kw)
    else:
        alg = training.minibatch_sgd(4, learning_rate=0.3, momentum=0.0, **kw)
    mkey = jax.random.fold_in(key, 7)
    res = jax.jit(lambda p: training.train(FNS, alg, fixed, target, key=mkey, init_params=p, return_trace=True))(p0)
    ref, sizes = _naive_poisson(p0, fixed, target, mkey, batch=4, epochs=3, lr=0.3, rows=max_rows,
                                clip_norm=0.5 if private else None, sigma=0.8)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12), res.params, ref)
    got_sizes = np.sum(np.asarray(res.trace["batch_indices"]) >= 0, axis=1)
    np.testing.assert_array_equal(got_sizes, sizes)
    assert len(set(sizes)) > 1  # the batch size really varies


def test_poisson_batch_sizes_have_the_expected_mean(key):
    fixed, target = _data(n=24)
    alg = training.minibatch_sgd(5, sampling="poisson", epochs=20, shuffle="fresh", learning_rate=0.01)
    res = training.train(FNS, alg, fixed, target, key=key, init_params=training.initial_params(FNS, key, fixed[0]),
                         return_trace=True)
    sizes = np.sum(np.asarray(res.trace["batch_indices"]) >= 0, axis=1)
    assert sizes.shape == (100,)
    # Binomial(25, 0.2) per step: mean 5, sd 2; the mean of 100 steps has sd 0.2 (5 sd margin).
    assert abs(sizes.mean() - 5.0) < 1.0


def test_float32_poisson_batches_are_the_stable_order_of_the_draws(key):
    """In float32 the trainer orders each Poisson batch with the packed integer sort (``poisson_slots``); its
    sampled slots must be the documented ones: the points with u_i < q in stable ascending order of u, at most
    ``rows`` of them (here 3, so overflowing steps occur), recomputed from ``jax.random`` directly."""
    fixed, target = _data(n=15)
    n_total, batch, rows, epochs = 16, 4, 3, 4
    alg = training.minibatch_sgd(batch, sampling="poisson", max_batch_size=rows, epochs=epochs, shuffle="fresh",
                                 learning_rate=0.1)
    mkey = jax.random.fold_in(key, 3)
    res = jax.jit(lambda p: training.train(FNS, alg, fixed, target, key=mkey, init_params=p, return_trace=True))(
        training.initial_params(FNS, key, fixed[0]))
    got = np.asarray(res.trace["batch_indices"])
    overflow = 0
    for e in range(epochs):
        for s in range(n_total // batch):
            u = np.asarray(jax.random.uniform(jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(mkey, 1), e), s),
                                              (n_total,)))
            chosen = [i for i in np.argsort(u, kind="stable") if u[i] < batch / n_total]
            overflow += len(chosen) > rows
            want = chosen[:rows] + [-1] * (rows - len(chosen[:rows]))
            np.testing.assert_array_equal(got[e * (n_total // batch) + s], want)
    assert overflow > 0


@pytest.mark.parametrize("n,q,rows", [(1001, 100 / 1001, 134), (5, 0.3, 4), (1001, 0.5, 300), (300, 0.9, 300)])
def test_poisson_slots_are_top_k_on_the_sampled_points(n, q, rows):
    """``poisson_slots`` against ``lax.top_k(-u, rows)`` (the selection it replaces): same sampled mask, same
    indices in every sampled slot, on uniform draws, draws with many ties and a draw of exactly 0; unsampled slots
    hold distinct unsampled points."""
    for seed in range(6):
        u = jax.random.uniform(jax.random.key(seed), (n,))
        if seed == 1:
            u = jnp.round(u * 32) / 32  # ties (still on the 2**-23 grid)
        if seed == 2:
            u = u.at[n // 2].set(0.0)
        idx, taken = jax.jit(poisson_slots, static_argnums=(1, 2))(u, q, rows)
        neg_u, ref = jax.lax.top_k(-u, rows)
        ref_taken = -neg_u < q
        np.testing.assert_array_equal(taken, ref_taken)
        np.testing.assert_array_equal(np.where(ref_taken, idx, -1), np.where(ref_taken, ref, -1))
        assert len(set(np.asarray(idx).tolist())) == rows and bool(jnp.all(taken == (u[idx] < q)))


def test_poisson_slots_fall_back_to_top_k_where_the_pair_does_not_fit():
    u = jax.random.uniform(jax.random.key(0), (70_000,))  # 17 index bits + 20 draw bits > 31
    idx, taken = poisson_slots(u, 0.1, 50)
    np.testing.assert_array_equal(idx, jax.lax.top_k(-u, 50)[1])
    assert bool(jnp.all(taken))


def test_poisson_options_validated():
    with pytest.raises(ValueError, match="sampling"):
        training.Algorithm(batch_size=4, sampling="bernoulli")
    with pytest.raises(ValueError, match="batch_size"):
        training.Algorithm(sampling="poisson")
    with pytest.raises(ValueError, match="max_batch_size"):
        training.Algorithm(batch_size=4, max_batch_size=8)
    assert training.minibatch_sgd(4).describe()["sampling"] == "shuffle"  # every field, defaults included
    assert training.minibatch_sgd(4, sampling="poisson").describe()["sampling"] == "poisson"


def _naive_shuffled_dp_sgd(p0, fixed, target, key, *, batch, epochs, lr, momentum, clip_norm, sigma, target_weight):
    """Shuffled DP-SGD with heavy-ball momentum as a plain per-step loop (independent of the trainer).

    The draws follow the documented derivation: epoch e permutes the n + 1 points (fixed set, then the target)
    with ``permutation(fold_in(fold_in(key, 1), e))``, steps take consecutive slices of ``batch`` (remainder
    dropped); each example's flat gradient is clipped to ``clip_norm`` (the target's is scaled by
    ``target_weight``), summed, noised with ``N(0, (clip_norm sigma)^2)`` from ``fold_in(fold_in(key, 2), step)``
    and divided by the batch size (public: a drawn target counts 1 whatever ``target_weight``).
    """
    from jax.flatten_util import ravel_pytree

    x = jnp.concatenate([fixed[0], target[0][None]])
    y = jnp.concatenate([fixed[1], target[1][None]])
    n_total = x.shape[0]
    weight = np.ones(n_total)
    weight[-1] = target_weight
    flat, unravel = ravel_pytree(p0)
    vel = jnp.zeros_like(flat)
    grad_one = jax.jit(lambda f, xi, yi: ravel_pytree(jax.grad(lambda p: training.softmax_cross_entropy(
        FNS.apply(p, xi[None]), yi[None])[0])(unravel(f)))[0])
    step = 0
    for e in range(epochs):
        perm = np.asarray(jax.random.permutation(jax.random.fold_in(jax.random.fold_in(key, 1), e), n_total))
        for s in range(n_total // batch):
            chosen = perm[s * batch:(s + 1) * batch]
            total = jnp.zeros_like(flat)
            for i in chosen:
                g = grad_one(flat, x[i], y[i])
                total = total + weight[i] * g * jnp.minimum(1.0, clip_norm / jnp.linalg.norm(g))
            noise = jax.random.normal(jax.random.fold_in(jax.random.fold_in(key, 2), step), flat.shape, flat.dtype)
            g_released = (total + clip_norm * sigma * noise) / len(chosen)
            vel = momentum * vel + g_released
            flat = flat - lr * vel
            step += 1
    return unravel(flat)


@pytest.mark.parametrize("target_weight", [1.0, 0.0])
def test_shuffled_dp_sgd_matches_naive_per_step_loop(x64, key, target_weight):
    # float64 so that the jitted trainer (target gathered into the batch, ghost clipping) and the loop agree to
    # rounding (1e-10); the target is drawn in some steps and not in others (n + 1 = 16 points, batch 5).
    fixed, target = _data(n=15)
    fixed = (fixed[0].astype(jnp.float64), fixed[1])
    target = (target[0].astype(jnp.float64), target[1])
    p0 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), training.initial_params(FNS, key, fixed[0]))
    alg = training.dp_sgd(5, clip_norm=0.5, noise_multiplier=0.8, learning_rate=0.3, momentum=0.9, epochs=3,
                          shuffle="fresh")
    mkey = jax.random.fold_in(key, 7)
    res = jax.jit(lambda p: training.train(FNS, alg, fixed, target, key=mkey, init_params=p,
                                           target_weight=target_weight))(p0)
    ref = _naive_shuffled_dp_sgd(p0, fixed, target, mkey, batch=5, epochs=3, lr=0.3, momentum=0.9, clip_norm=0.5,
                                 sigma=0.8, target_weight=target_weight)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12), res.params, ref)


def test_minibatch_dp_sgd_on_integer_inputs_equals_float_inputs(key):
    # uint8 pixels: the squared row norms the minibatch path precomputes must be taken in float (no uint8 wrap).
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, size=(13, 6), dtype=np.uint8)
    y = (np.arange(13) % 4).astype(np.int32)
    p0 = training.initial_params(FNS, key, jnp.zeros((1, 6)))
    alg = training.dp_sgd(4, clip_norm=1.0, noise_multiplier=0.0, learning_rate=0.05, epochs=2, shuffle="fresh")
    run = lambda xs: training.train(FNS, alg, (xs[:12], jnp.asarray(y[:12])), (xs[12], jnp.asarray(y[12])), key=key,
                                    init_params=p0)
    ints, floats = run(jnp.asarray(x)), run(jnp.asarray(x, jnp.float32))
    # float32, same math on the same values (the integers are exact in float32)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), ints.params,
                           floats.params)


def _clipped_target_gradient(flat_params, target, clip_norm):
    """The target's flat gradient at ``flat_params``, clipped to ``clip_norm`` by hand (float64)."""
    from jax.flatten_util import ravel_pytree

    p0 = training.initial_params(FNS, jax.random.key(0), target[0][None])
    unravel = ravel_pytree(jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), p0))[1]
    g = ravel_pytree(jax.grad(lambda p: training.softmax_cross_entropy(FNS.apply(p, target[0][None]),
                                                                        target[1][None])[0])(
        unravel(jnp.asarray(flat_params))))[0]
    g = np.asarray(g)
    return g * min(1.0, clip_norm / np.linalg.norm(g))


@pytest.mark.parametrize("per_example", ["auto", "vmap"])
@pytest.mark.parametrize("batch_size", [None, 4])
def test_private_out_model_uses_the_public_normaliser(x64, key, per_example, batch_size):
    # DP training of the MIA "in" (target weight 1) and "out" (weight 0) models, no noise: at the first step whose
    # batch holds the target, the released updates differ by the target's clipped gradient over the public
    # normaliser (n + 1 full batch, the batch size for shuffled minibatches), never by more than C in sum units.
    fixed, target = _data(n=11)
    fixed = (fixed[0].astype(jnp.float64), fixed[1])
    target = (target[0].astype(jnp.float64), target[1])
    p0 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), training.initial_params(FNS, key, fixed[0]))
    clip = 0.05
    if batch_size is None:
        alg = training.dp_gd(clip, noise_multiplier=0.0, epochs=2, learning_rate=0.3, per_example=per_example)
        normaliser = 12
    else:
        alg = training.dp_sgd(batch_size, clip, noise_multiplier=0.0, epochs=2, learning_rate=0.3,
                              shuffle="known", per_example=per_example)
        normaliser = batch_size
    out = {}
    for t_w in (0.0, 1.0):
        out[t_w] = training.train(FNS, alg, fixed, target, key=key, init_params=p0, shuffle_key=jax.random.key(9),
                                  target_weight=t_w, return_trace=True).trace
    if batch_size is None:
        t = 0
    else:
        drawn = np.any(np.asarray(out[1.0]["batch_indices"]) == 11, axis=1)
        np.testing.assert_array_equal(drawn, np.any(np.asarray(out[0.0]["batch_indices"]) == 11, axis=1))
        t = int(np.argmax(drawn))
        assert drawn[t]
        # before it, the two models take identical steps
        np.testing.assert_array_equal(out[1.0]["gradients"][:t], out[0.0]["gradients"][:t])
    np.testing.assert_array_equal(out[1.0]["params"][t], out[0.0]["params"][t])
    g_target = _clipped_target_gradient(out[1.0]["params"][t], target, clip)
    diff = np.asarray(out[1.0]["gradients"][t] - out[0.0]["gradients"][t]) * normaliser
    np.testing.assert_allclose(diff, g_target, rtol=1e-9, atol=1e-13)  # float64 rounding
    assert np.linalg.norm(diff) <= clip * (1 + 1e-9)
