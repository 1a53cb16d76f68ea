"""The exposed training step: by hand it reproduces `train`, it jits once, vmaps, and the key streams are the
documented fold_ins."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import models, training
from recon_jax.training import Batch, TrainState, make_train_step

FNS = models.from_flax(models.MLP(features=(8, 4), activation="elu"))


def _data(n=24, d=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + 1, d)).astype(np.float32)
    y = (np.arange(n + 1) % 4).astype(np.int32)
    return (jnp.asarray(x[:n]), jnp.asarray(y[:n])), (jnp.asarray(x[n]), jnp.asarray(y[n]))


def _same_key(a, b):
    return np.array_equal(jax.random.key_data(a), jax.random.key_data(b))


def test_key_streams_are_the_documented_fold_ins(key):
    f = jax.random.fold_in
    assert _same_key(training.init_key(key), f(key, 0))
    assert _same_key(training.shuffle_stream(key), f(key, 1))
    assert _same_key(training.epoch_shuffle_key(training.shuffle_stream(key), 3), f(f(key, 1), 3))
    assert _same_key(training.noise_stream(key), f(key, 2))
    assert _same_key(training.noise_key(key, 5), f(f(key, 2), 5))
    # train's random initialisation is init_key's draw
    fixed, target = _data()
    alg = training.full_batch_gd(epochs=1, init="random", learning_rate=1e-9, momentum=0.0)
    res = training.train(FNS, alg, fixed, target, key=key, return_trace=True)
    p_init = FNS.init(training.init_key(key), fixed[0][:1])
    np.testing.assert_array_equal(res.trace["params"][0], models.ravel(p_init)[0])


@pytest.mark.parametrize("target_weight", [1.0, 0.0])
def test_dp_gd_by_hand_reproduces_train(key, target_weight):
    """Full-batch DP-GD (Gaussian noise, momentum) with the target as a separate term: a Python loop over the
    jitted step, keys from noise_key, equals train (which scans the same step)."""
    fixed, target = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    alg = training.dp_gd(0.5, noise_multiplier=1.0, epochs=4, learning_rate=0.1, momentum=0.9, per_example="vmap")
    mkey = jax.random.fold_in(key, 1)
    res = training.train(FNS, alg, fixed, target, key=mkey, init_params=p0, target_weight=target_weight,
                         return_trace=True)
    step = jax.jit(make_train_step(FNS, alg, with_gradient=True))
    state = TrainState.create(p0, alg)
    batch = Batch(fixed[0], fixed[1], jnp.ones(24), target[0], target[1], jnp.float32(target_weight))
    np.testing.assert_array_equal(models.ravel(state.params)[0], res.trace["params"][0])
    for t in range(4):
        state, metrics = step(state, batch, training.noise_key(mkey, t))
        # one jitted step vs the same step inside lax.scan: XLA may fuse the two programs differently, so equal
        # to float32 rounding of a few updates, not bitwise
        np.testing.assert_allclose(metrics["gradient"], res.trace["gradients"][t], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(metrics["loss"], res.losses[t], rtol=1e-6)
    assert int(state.step) == 4
    np.testing.assert_allclose(models.ravel(state.params)[0], models.ravel(res.params)[0], rtol=1e-5, atol=1e-6)


def test_minibatch_sgd_by_hand_reproduces_train(key):
    """Known-shuffle minibatch SGD without a target: batches taken from train's trace, default weights."""
    fixed, _ = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    alg = training.minibatch_sgd(6, learning_rate=0.1, momentum=0.5, epochs=2, shuffle="known")
    res = training.train(FNS, alg, fixed, None, key=key, init_params=p0, shuffle_key=jax.random.key(9),
                         return_trace=True)
    step = jax.jit(make_train_step(FNS, alg))
    state = TrainState.create(p0, alg)
    for t, idx in enumerate(np.asarray(res.trace["batch_indices"])):
        state, metrics = step(state, Batch(fixed[0][idx], fixed[1][idx]), training.noise_key(key, t))
        np.testing.assert_allclose(metrics["loss"], res.losses[t], rtol=1e-5)  # float32, see above
    np.testing.assert_allclose(models.ravel(state.params)[0], models.ravel(res.params)[0], rtol=1e-5, atol=1e-6)


def test_step_defaults_traces_once_and_vmaps_over_keys(key):
    fixed, target = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    alg = training.dp_sgd(8, clip_norm=0.5, noise_multiplier=1.0)

    state = TrainState.create(p0, alg)
    x, y = fixed[0][:8], fixed[1][:8]
    counted = jax.jit(chex.assert_max_traces(make_train_step(FNS, alg), n=1))
    for t in range(3):  # same shapes and structure: traced once
        state = counted(state, Batch(x, y, jnp.ones(8)), training.noise_key(key, t))[0]
    # weights None = all ones; target_weight None = 1
    step = jax.jit(make_train_step(FNS, alg, with_gradient=True))
    k = training.noise_key(key, 3)
    # Two programs (with and without the weights): XLA may order their float32 sums differently (1 ulp apart with
    # XLA:CPU's loop emitters), so equal to rounding, not bit for bit.
    a = step(state, Batch(x, y), k)[1]["gradient"]
    b = step(state, Batch(x, y, jnp.ones(8)), k)[1]["gradient"]
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
    c = step(state, Batch(x, y, jnp.ones(8), target[0], target[1]), k)[1]["gradient"]
    d = step(state, Batch(x, y, jnp.ones(8), target[0], target[1], jnp.float32(1.0)), k)[1]["gradient"]
    np.testing.assert_allclose(c, d, rtol=1e-6, atol=1e-9)
    # vmap over keys (unbatched state and data): each row is the single-key step
    keys = jax.vmap(lambda t: training.noise_key(key, t))(jnp.arange(3))
    plain = make_train_step(FNS, alg, with_gradient=True)
    states, metrics = jax.jit(jax.vmap(plain, in_axes=(None, None, 0)))(state, Batch(x, y), keys)
    assert metrics["gradient"].shape == (3, 92) and states.step.tolist() == [4, 4, 4]
    for t in range(3):
        np.testing.assert_allclose(metrics["gradient"][t], jax.jit(plain)(state, Batch(x, y), keys[t])[1]["gradient"],
                                   rtol=1e-5, atol=1e-7)  # vmapped vs single program: float32 rounding
    assert not np.allclose(metrics["gradient"][0], metrics["gradient"][1])  # fresh noise per key


def test_poisson_step_divides_by_the_expected_batch_size(key):
    fixed, _ = _data()
    p0 = training.initial_params(FNS, key, fixed[0])
    x, y = fixed[0][:5], fixed[1][:5]
    w = jnp.array([1.0, 1.0, 0.0, 1.0, 0.0])
    shuffled = training.dp_sgd(4, clip_norm=0.5, learning_rate=0.1)
    poisson = training.dp_sgd(4, clip_norm=0.5, learning_rate=0.1, sampling="poisson")
    run = lambda alg: make_train_step(FNS, alg, with_gradient=True)(TrainState.create(p0, alg), Batch(x, y, w), key)[1]
    a, b = run(shuffled), run(poisson)
    # same clipped sum; shuffled batches divide by the realised weight (3), Poisson by the expected size (4)
    np.testing.assert_allclose(3.0 * a["gradient"], 4.0 * b["gradient"], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(3.0 * a["loss"], 4.0 * b["loss"], rtol=1e-6)


def test_dp_step_is_clip_then_noise_then_optimizer(key):
    """The DP step composed by hand from its three stages (clipped_gradient_sum, the mechanism's privatize,
    apply_gradient) is the training step, to the bit."""
    from recon_jax.mechanisms import GaussianMechanism

    (x, y), _ = _data()
    alg = training.dp_gd(0.5, noise_multiplier=2.0, learning_rate=0.3, momentum=0.9, per_example="vmap")
    state = TrainState.create(FNS.init(jax.random.key(0), x[:1]), alg)
    k = jax.random.fold_in(key, 7)
    w = jnp.ones((x.shape[0],), jnp.float32)
    new, _ = make_train_step(FNS, alg)(state, Batch(x, y, weights=w), k)

    _, clipped = training.clipped_gradient_sum(FNS, state.params, x, y, clip_norm=0.5, weights=w)  # stage 1
    released = GaussianMechanism(noise_multiplier=2.0).privatize(k, clipped, 0.5, jnp.sum(w))  # stage 2
    params, _ = training.apply_gradient(alg.make_optimizer(), state.params, state.opt_state, released)  # stage 3
    chex.assert_trees_all_equal(new.params, params)
    moved = jax.tree_util.tree_map(lambda a, b: float(jnp.max(jnp.abs(a - b))), new.params, state.params)
    assert max(jax.tree_util.tree_leaves(moved)) > 1e-3  # the step did move the parameters


def test_gaussian_mechanism_takes_a_traced_noise_multiplier():
    """The games vmap one mechanism over noise levels: a traced sigma gives the concrete mechanism's release."""
    from recon_jax.mechanisms import GaussianMechanism

    s = jnp.arange(5.0)
    k = jax.random.key(3)
    vm = jax.vmap(lambda sigma: GaussianMechanism(noise_multiplier=sigma).privatize(k, s, 1.5, 2))(jnp.array([0.5, 3.0]))
    for row, sigma in zip(vm, (0.5, 3.0)):
        np.testing.assert_array_equal(row, GaussianMechanism(noise_multiplier=sigma).privatize(k, s, 1.5, 2))
    for sigma in (-1.0, float("inf")):  # an infinite sigma released inf
        with pytest.raises(ValueError, match="noise_multiplier must be finite and >= 0"):
            GaussianMechanism(noise_multiplier=sigma)
    # a traced negative (or NaN) sigma releases NaN, not the release of |sigma| that the symmetric noise would give
    bad = jax.vmap(lambda sigma: GaussianMechanism(noise_multiplier=sigma).privatize(k, s, 1.5, 2))(
        jnp.array([-0.5, jnp.nan, 0.0]))
    assert np.all(np.isnan(bad[:2]))
    np.testing.assert_array_equal(bad[2], s / 2)


def test_gaussian_mechanism_refuses_a_clip_norm_or_batch_size_out_of_range():
    """clip_norm 0 released the sum without noise, a batch size of 0 or below inf or a flipped gradient; an integer
    sum failed inside jax.random. Traced: NaN, as for sigma."""
    from recon_jax.mechanisms import GaussianMechanism

    m, k, s = GaussianMechanism(noise_multiplier=1.0), jax.random.key(0), jnp.arange(3.0)
    for clip_norm, batch_size, name in ((0.0, 1, "clip_norm"), (float("inf"), 1, "clip_norm"), (1.0, 0, "batch_size"),
                                        (1.0, -2, "batch_size")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            m.privatize(k, s, clip_norm, batch_size)
        out = jax.jit(lambda c, b: m.privatize(k, s, c, b))(clip_norm, batch_size)
        assert np.all(np.isnan(out)), (clip_norm, batch_size)
    np.testing.assert_array_equal(m.privatize(k, jnp.arange(3), 2.0, 4), m.privatize(k, s, 2.0, 4))
