"""Tests for recon_jax.attacks.gradient: Ziller's linear-layer attack, Inverting Gradients, DLG, iDLG.

References: closed-form expressions of Ziller et al. (eq. 3, 4, Prop. 4) evaluated in NumPy, naive per-example
loops, and the original image (exact recovery / PSNR).
"""

import collections

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.attacks import gradient as ga
from recon_jax.attacks._gradient_inputs import default_last_layer
from recon_jax.mechanisms import GaussianMechanism, NoNoise, VMFMechanism


def _mnist_digits(n: int, crop: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """n embedded-MNIST test digits, centre-cropped to crop x crop (Biswas et al.'s MNIST preprocessing)."""
    from recon_jax.data import load_dataset

    images, labels = load_dataset("mnist", "test")
    lo = (28 - crop) // 2
    return np.asarray(images[:n, lo:lo + crop, lo:lo + crop, :], np.float32), np.asarray(labels[:n])


def _mlp_init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return {
        f"w{i}": jax.random.uniform(keys[i], (a, b), minval=-1.0, maxval=1.0) / np.sqrt(a)
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))
    }


def _mlp_apply(params, x):
    """Sigmoid MLP without biases (Biswas et al.'s architecture when sizes = 256-50-15-10)."""
    h = x.reshape(x.shape[0], -1)
    n = len(params)
    for i in range(n):
        h = h @ params[f"w{i}"]
        if i < n - 1:
            h = jax.nn.sigmoid(h)
    return h


# ---------------------------------------------------------------------------------------------------------------
# Linear-layer attack (Ziller et al.)
# ---------------------------------------------------------------------------------------------------------------


def test_linear_attack_exact_without_noise():
    x, _ = _mnist_digits(3, crop=28)
    obs = ga.linear_layer_observations(jax.random.key(0), x, NoNoise(), clip_norm=1e3, steps=2)
    rec = ga.linear_layer_attack(obs, batch_size=3, input_shape=x.shape[1:])
    assert rec.shape == x.shape
    np.testing.assert_allclose(np.asarray(rec), x, rtol=1e-6, atol=1e-6)  # float32 round trip of *B/B


def test_linear_attack_clipping_matches_eq3():
    x, _ = _mnist_digits(4, crop=28)
    clip = 3.0
    obs = ga.linear_layer_observations(jax.random.key(0), x, NoNoise(), clip_norm=clip)
    rec = np.asarray(ga.linear_layer_attack(obs, batch_size=4, input_shape=x.shape[1:]))
    # Naive reference: each sample clipped on its own, beta = 1 / max(1, ||X|| / C) (eq. 3 with xi = 0).
    for b in range(4):
        beta = 1.0 / max(1.0, np.linalg.norm(x[b]) / clip)
        np.testing.assert_allclose(rec[b], beta * x[b], rtol=1e-5, atol=1e-6)
    assert np.all(np.linalg.norm(x.reshape(4, -1), axis=1) > clip)  # the test really exercises clipping


@pytest.mark.parametrize("steps", [1, 8])
def test_linear_attack_gaussian_mse_matches_prop1_prop4(steps):
    x, _ = _mnist_digits(2, crop=28)
    sigma, clip = 0.05, 5.0
    reps = 64
    keys = jax.random.split(jax.random.key(steps), reps)
    mech = GaussianMechanism(noise_multiplier=sigma)
    obs = jax.vmap(lambda k: ga.linear_layer_observations(k, x, mech, clip_norm=clip, steps=steps))(keys)
    recs = jax.vmap(lambda o: ga.linear_layer_attack(o, 2, x.shape[1:]))(obs)
    mse = np.mean((np.asarray(recs) - x[None]) ** 2, axis=(2, 3, 4))  # [reps, B]
    n = x[0].size
    for b in range(2):
        beta = 1.0 / max(1.0, np.linalg.norm(x[b]) / clip)
        # Ziller eq. (4) with sigma^2 -> sigma^2 / T (Prop. 4): (1 - beta)^2 mean(x^2) + C^2 sigma^2 / T.
        expected = (1 - beta) ** 2 * np.mean(x[b] ** 2) + clip**2 * sigma**2 / steps
        # Standard error of the mean over reps, analytic: MSE - expected = s2 (chi2_N / N - 1) + 2 (beta - 1) X.xi / N
        # with s2 = C^2 sigma^2 / T, two uncorrelated terms of variances 2 s2^2 / N and 4 (1 - beta)^2 ||X||^2 s2 / N^2.
        # (The old "2 x noise-only sd" was 3.4 SE at T = 8, where the cross term dominates, and 8.8 SE at T = 1.)
        s2 = clip**2 * sigma**2 / steps
        se = np.sqrt(2 * s2**2 / n + 4 * (1 - beta) ** 2 * np.sum(x[b] ** 2) * s2 / n**2) / np.sqrt(reps)
        assert abs(mse[:, b].mean() - expected) < 5 * se, (mse[:, b].mean(), expected, se)


def test_linear_attack_with_vmf_recovers_direction():
    x, _ = _mnist_digits(1, crop=28)
    obs = ga.linear_layer_observations(jax.random.key(1), x, VMFMechanism(kappa=1e7), clip_norm=1.0)
    rec = np.asarray(ga.linear_layer_attack(obs, 1, x.shape[1:])).ravel()
    cos = rec @ x.ravel() / (np.linalg.norm(rec) * np.linalg.norm(x))
    assert cos > 0.99  # E[1 - cos] ~ (N - 1) / (2 kappa) = 4e-5
    obs_weak = ga.linear_layer_observations(jax.random.key(1), x, VMFMechanism(kappa=1.0), clip_norm=1.0)
    rec_weak = np.asarray(ga.linear_layer_attack(obs_weak, 1, x.shape[1:])).ravel()
    assert abs(rec_weak @ x.ravel()) / (np.linalg.norm(rec_weak) * np.linalg.norm(x)) < 0.2  # ~N(0, 1/784)


def test_linear_attack_validation():
    x = jnp.ones((2, 4))
    with pytest.raises(ValueError, match="clip_norm"):
        ga.linear_layer_observations(jax.random.key(0), x, NoNoise(), clip_norm=0.0)
    with pytest.raises(ValueError, match="steps"):
        ga.linear_layer_observations(jax.random.key(0), x, NoNoise(), clip_norm=1.0, steps=0)
    with pytest.raises(ValueError, match="inputs"):
        ga.linear_layer_observations(jax.random.key(0), jnp.ones(4), NoNoise(), clip_norm=1.0)
    with pytest.raises(ValueError, match="observed"):
        ga.linear_layer_attack(jnp.ones((1, 7)), batch_size=2, input_shape=(4,))
    with pytest.raises(ValueError, match="batch_size"):
        ga.linear_layer_attack(jnp.ones((1, 8)), batch_size=0, input_shape=(4,))


def test_linear_attack_traced_invalid_clip_norm_gives_nan():
    """Under jit a bad clip norm cannot raise: the release is NaN (it was X unclipped at -1 and inf, zeros at 0; the
    VMF release, a unit direction, looked valid for every one of them)."""
    x = jnp.ones((2, 4))
    for mechanism in (NoNoise(), VMFMechanism(kappa=10.0)):
        observe = jax.jit(lambda c: ga.linear_layer_observations(jax.random.key(0), x, mechanism, c, steps=2))
        for clip_norm in (-1.0, 0.0, np.nan, np.inf):
            assert np.all(np.isnan(np.asarray(observe(clip_norm)))), (mechanism, clip_norm)
            with pytest.raises(ValueError, match="clip_norm must be finite and > 0"):
                ga.linear_layer_observations(jax.random.key(0), x, mechanism, clip_norm)
        # A valid traced clip norm still gives the eager release (float32 rounding of the jitted VMF sampler).
        eager = ga.linear_layer_observations(jax.random.key(0), x, mechanism, 3.0, steps=2)
        np.testing.assert_allclose(np.asarray(observe(3.0)), np.asarray(eager), rtol=1e-5, atol=1e-6)
    # Without noise each block is X_b / B (||X_b|| = 2 <= C = 3).
    plain = ga.linear_layer_observations(jax.random.key(0), x, NoNoise(), 3.0, steps=2)
    np.testing.assert_array_equal(np.asarray(plain), np.full((2, 8), 0.5, np.float32))


# ---------------------------------------------------------------------------------------------------------------
# Gradient matching
# ---------------------------------------------------------------------------------------------------------------


def test_model_gradient_clipping_equals_naive_loop():
    params = _mlp_init(jax.random.key(0), (6, 5, 3))
    x = jax.random.uniform(jax.random.key(1), (4, 6))
    t = jax.nn.one_hot(jnp.array([0, 2, 1, 2]), 3)
    clip = 0.05
    got = ga.model_gradient(_mlp_apply, params, x, t, clip_norm=clip)
    naive = []
    for i in range(4):
        g = jax.grad(lambda p: ga.softmax_cross_entropy(_mlp_apply(p, x[i:i + 1]), t[i:i + 1])[0])(params)
        flat = np.concatenate([np.asarray(g[k]).ravel() for k in sorted(g)])  # ravel_pytree order: sorted keys
        naive.append(flat / max(1.0, np.linalg.norm(flat) / clip))
    np.testing.assert_allclose(np.asarray(got), np.mean(naive, axis=0), rtol=1e-5, atol=1e-8)
    unclipped = ga.model_gradient(_mlp_apply, params, x, t)
    full = jax.grad(lambda p: jnp.mean(ga.softmax_cross_entropy(_mlp_apply(p, x), t)))(params)
    np.testing.assert_allclose(np.asarray(unclipped), np.concatenate([np.asarray(full[k]).ravel() for k in sorted(full)]),
                               rtol=1e-5, atol=1e-8)


def test_idlg_infers_every_label():
    params = _mlp_init(jax.random.key(3), (256, 50, 15, 10))
    x, _ = _mnist_digits(1)
    for label in range(10):
        g = jax.grad(lambda p: ga.softmax_cross_entropy(_mlp_apply(p, x), jax.nn.one_hot(jnp.array([label]), 10))[0])(
            params)
        assert int(ga.infer_labels_idlg(g["w2"])[0]) == label
    with pytest.raises(ValueError, match="batch_size"):
        ga.infer_labels_idlg(jnp.ones((3, 4)), batch_size=5)


def test_inverting_gradients_mnist_mlp_psnr_fast():
    """IG on Biswas's 256-50-15-10 sigmoid MLP, no noise, batch 1, labels inferred by iDLG: PSNR > 30 dB."""
    params = _mlp_init(jax.random.key(0), (256, 50, 15, 10))
    x, y = _mnist_digits(1)
    g = ga.model_gradient(_mlp_apply, params, jnp.asarray(x), jax.nn.one_hot(y, 10))
    res = ga.inverting_gradients(jax.random.key(1), _mlp_apply, params, g, (16, 16, 1),
                                 ga.InvertingGradientsOptions(num_restarts=2, num_steps=200, tv_weight=0.0))
    assert int(res.labels[0]) == int(y[0])
    mse = float(jnp.mean((res.reconstruction - x) ** 2))
    assert 10 * np.log10(1.0 / mse) > 30.0
    assert float(res.loss) == float(jnp.min(res.all_losses))
    assert res.all_reconstructions.shape == (2, 1, 16, 16, 1)
    assert float(res.reconstruction.min()) >= 0.0 and float(res.reconstruction.max()) <= 1.0  # box constraint


@pytest.mark.slow
def test_inverting_gradients_mnist_mlp_psnr_default_settings():
    """Same with the library defaults (2000 steps, 8 restarts, TV 1e-4, step decay) on 4 digits."""
    params = _mlp_init(jax.random.key(0), (256, 50, 15, 10))
    xs, ys = _mnist_digits(4)
    for i in range(4):
        x = jnp.asarray(xs[i:i + 1])
        g = ga.model_gradient(_mlp_apply, params, x, jax.nn.one_hot(ys[i:i + 1], 10))
        res = ga.inverting_gradients(jax.random.key(i), _mlp_apply, params, g, (16, 16, 1))
        assert 10 * np.log10(1.0 / float(jnp.mean((res.reconstruction - x) ** 2))) > 30.0


def test_inverting_gradients_restarts_vmapped_equal_single_runs():
    params = _mlp_init(jax.random.key(0), (16, 8, 4))
    x = jax.random.uniform(jax.random.key(1), (1, 4, 4))
    g = ga.model_gradient(_mlp_apply, params, x, jax.nn.one_hot(jnp.array([2]), 4))
    opts = dict(num_steps=50, tv_weight=1e-3)
    # Full-precision products, as on a CPU: the vmapped restarts run batched products and the single run
    # matrix-vector ones, which a GPU rounds differently at default precision (TF32 GEMMs, float32 GEMVs); 50 Adam
    # steps on a cosine loss amplify that to 2e-3 (TF32) and 6e-2 (bfloat16) under emulation, as large as the
    # difference between two restarts (3e-2 to 7e-2). What is tested is the vectorisation, so both run in float32.
    with jax.default_matmul_precision("highest"):
        many = ga.inverting_gradients(jax.random.key(5), _mlp_apply, params, g, (4, 4),
                                      ga.InvertingGradientsOptions(num_restarts=3, **opts), labels=jnp.array([2]))
        one = ga.inverting_gradients(jax.random.key(5), _mlp_apply, params, g, (4, 4),
                                     ga.InvertingGradientsOptions(num_restarts=1, **opts), labels=jnp.array([2]))
    np.testing.assert_allclose(np.asarray(many.all_reconstructions[0]), np.asarray(one.reconstruction), atol=1e-5)
    assert len(set(np.round(np.asarray(many.all_losses), 7))) > 1  # restarts differ


def test_inverting_gradients_scores_restarts_by_the_matching_cost_without_tv():
    """Geiping et al.'s code scores a trial by the gradient-matching cost alone (scoring_choice "loss"); TV only
    steers the search. Reference: 1 - cos of each returned restart's gradient, by a naive jax.grad."""
    params = _mlp_init(jax.random.key(0), (16, 8, 4))
    x = jax.random.uniform(jax.random.key(1), (1, 4, 4))
    target = jax.nn.one_hot(jnp.array([2]), 4)
    g = ga.model_gradient(_mlp_apply, params, x, target)
    res = ga.inverting_gradients(jax.random.key(5), _mlp_apply, params, g, (4, 4),
                                 ga.InvertingGradientsOptions(num_restarts=3, num_steps=30, tv_weight=0.5),
                                 labels=jnp.array([2]))

    def naive_cost(xr):
        grads = jax.grad(lambda p: -jnp.sum(target * jax.nn.log_softmax(_mlp_apply(p, xr))))(params)
        flat = np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(grads)]).astype(np.float64)
        ref = np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(g)]).astype(np.float64)
        return 1.0 - flat @ ref / (np.linalg.norm(flat) * np.linalg.norm(ref))

    costs = [naive_cost(xr) for xr in res.all_reconstructions]
    np.testing.assert_allclose(np.asarray(res.all_losses), costs, atol=1e-5)  # float32 cosine
    assert float(res.loss) == float(np.min(np.asarray(res.all_losses)))
    np.testing.assert_array_equal(res.reconstruction, res.all_reconstructions[int(np.argmin(costs))])


def test_inverting_gradients_strong_noise_degrades():
    params = _mlp_init(jax.random.key(0), (256, 50, 15, 10))
    x, y = _mnist_digits(1)
    t = jax.nn.one_hot(y, 10)
    clean = ga.model_gradient(_mlp_apply, params, jnp.asarray(x), t, clip_norm=1.0)
    noisy = GaussianMechanism(noise_multiplier=10.0).privatize(jax.random.key(2), clean, 1.0, 1)
    opts = ga.InvertingGradientsOptions(num_restarts=1, num_steps=150, tv_weight=0.0)
    kw = dict(labels=jnp.asarray(y), clip_norm=1.0)
    r_clean = ga.inverting_gradients(jax.random.key(1), _mlp_apply, params, clean, (16, 16, 1), opts, **kw)
    r_noisy = ga.inverting_gradients(jax.random.key(1), _mlp_apply, params, noisy, (16, 16, 1), opts, **kw)
    mse_clean = float(jnp.mean((r_clean.reconstruction - x) ** 2))
    mse_noisy = float(jnp.mean((r_noisy.reconstruction - x) ** 2))
    assert mse_clean < 1e-3 and mse_noisy > 10 * mse_clean


def test_dlg_recovers_small_mlp_input_and_label():
    params = _mlp_init(jax.random.key(1), (8, 12, 3))
    x = jax.random.uniform(jax.random.key(2), (1, 8))
    g = ga.model_gradient(_mlp_apply, params, x, jax.nn.one_hot(jnp.array([1]), 3))
    res = ga.dlg(jax.random.key(0), _mlp_apply, params, g, (8,), ga.DLGOptions(num_restarts=2, num_steps=1500, lr=0.02))
    assert int(res.labels[0]) == 1
    assert float(jnp.max(jnp.abs(res.reconstruction - x))) < 0.02
    soft = ga.dlg(jax.random.key(0), _mlp_apply, params, g, (8,),
                  ga.DLGOptions(optimize_labels=True, num_restarts=2, num_steps=300, lr=0.02))
    assert soft.reconstruction.shape == (1, 8) and bool(jnp.isfinite(soft.loss))
    assert int(soft.labels[0]) == 1  # the jointly optimised soft label's argmax is the true label
    # the matching loss fell to a small share of the zero-gradient baseline (measured 0.0045 of it at 300 steps)
    assert float(soft.loss) < 0.05 * float(jnp.sum(g**2))


def test_gradient_matching_validation():
    params = _mlp_init(jax.random.key(0), (4, 3))
    g = jnp.zeros(12)
    with pytest.raises(ValueError, match="observed_grad"):
        ga.inverting_gradients(jax.random.key(0), _mlp_apply, params, jnp.zeros(11), (4,),
                               ga.InvertingGradientsOptions(tv_weight=0.0), labels=jnp.array([0]))
    with pytest.raises(ValueError, match="num_restarts"):
        ga.inverting_gradients(jax.random.key(0), _mlp_apply, params, g, (4,),
                               ga.InvertingGradientsOptions(num_restarts=0, tv_weight=0.0))
    with pytest.raises(ValueError, match="tv_weight"):
        ga.inverting_gradients(jax.random.key(0), _mlp_apply, params, g, (4,), labels=jnp.array([0]))
    with pytest.raises(ValueError, match="data_range"):
        ga.dlg(jax.random.key(0), _mlp_apply, params, g, (4,), ga.DLGOptions(data_range=(1.0, 0.0)),
               labels=jnp.array([0]))
    with pytest.raises(ValueError, match="labels"):
        ga.dlg(jax.random.key(0), _mlp_apply, params, g, (4,), labels=jnp.array([0, 1]))
    with pytest.raises(ValueError, match="x"):
        ga.total_variation(jnp.ones((2, 3)))
    with pytest.raises(TypeError, match="DLGOptions"):
        ga.dlg(jax.random.key(0), _mlp_apply, params, g, (4,), ga.InvertingGradientsOptions())
    # The messages say what to do: TV on a vector input names the option that turns it off; an all-zero release (a
    # NaN reconstruction before) and an input shape the model cannot take (JAX's dot_general TypeError) are named.
    with pytest.raises(ValueError, match=r"InvertingGradientsOptions\(tv_weight=0.0\)"):
        ga.inverting_gradients(jax.random.key(0), _mlp_apply, params, g, (4,), labels=jnp.array([0]))
    no_tv = ga.InvertingGradientsOptions(tv_weight=0.0, num_steps=2)
    with pytest.raises(ValueError, match="observed_grad is all zeros"):
        ga.inverting_gradients(jax.random.key(0), _mlp_apply, params, g, (4,), no_tv, labels=jnp.array([0]))
    for attack, options in ((ga.inverting_gradients, no_tv), (ga.dlg, ga.DLGOptions(num_steps=2))):
        for extra in ({}, {"num_classes": 3}):
            with pytest.raises(ValueError, match=r"input_shape \(5,\) does not fit the model"):
                attack(jax.random.key(0), _mlp_apply, params, g + 1.0, (5,), options, labels=jnp.array([0]), **extra)


@pytest.mark.parametrize("clip_norm", [-1.0, 0.0, np.nan, np.inf])
def test_model_gradient_invalid_clip_norm_raises_or_gives_nan(clip_norm):
    """-1 returned the unclipped gradient and 0 an all-zero one (then a NaN cosine): concrete values raise, traced
    ones give NaN; the attacks that simulate clipping refuse them before running."""
    params = _mlp_init(jax.random.key(0), (4, 3))
    x, t = jnp.full((1, 4), 0.5), jnp.eye(3)[1:2]
    with pytest.raises(ValueError, match="clip_norm must be finite and > 0"):
        ga.model_gradient(_mlp_apply, params, x, t, clip_norm=clip_norm)
    traced = jax.jit(lambda c: ga.model_gradient(_mlp_apply, params, x, t, clip_norm=c))
    assert np.all(np.isnan(np.asarray(traced(clip_norm))))
    eager = ga.model_gradient(_mlp_apply, params, x, t, clip_norm=0.05)
    np.testing.assert_allclose(np.asarray(traced(0.05)), np.asarray(eager), rtol=1e-6)  # float32 rounding of jit
    g = jnp.zeros(12)
    with pytest.raises(ValueError, match="clip_norm"):
        ga.inverting_gradients(jax.random.key(0), _mlp_apply, params, g, (4,),
                               ga.InvertingGradientsOptions(num_restarts=1, num_steps=2, tv_weight=0.0),
                               labels=jnp.array([0]), clip_norm=clip_norm)
    with pytest.raises(ValueError, match="clip_norm"):
        ga.dlg(jax.random.key(0), _mlp_apply, params, g, (4,), ga.DLGOptions(num_restarts=1, num_steps=2),
               labels=jnp.array([0]), clip_norm=clip_norm)


@pytest.mark.parametrize("labels", [[3], [-1], [1.5]])
def test_gradient_attacks_refuse_labels_outside_the_classes(labels):
    """one_hot made a label outside [0, K) an all-zero target row: IG gave a NaN loss, DLG a plausible one."""
    params = _mlp_init(jax.random.key(0), (4, 3))
    g = ga.model_gradient(_mlp_apply, params, jnp.full((1, 4), 0.5), jnp.eye(3)[1:2])
    ig_opts = ga.InvertingGradientsOptions(num_restarts=1, num_steps=2, tv_weight=0.0)
    dlg_opts = ga.DLGOptions(num_restarts=1, num_steps=2)
    with pytest.raises(ValueError, match=r"labels must be integers in \[0, 3\)"):
        ga.inverting_gradients(jax.random.key(0), _mlp_apply, params, g, (4,), ig_opts, labels=np.array(labels))
    with pytest.raises(ValueError, match=r"labels must be integers in \[0, 3\)"):
        ga.dlg(jax.random.key(0), _mlp_apply, params, g, (4,), dlg_opts, labels=np.array(labels))
    # Traced labels cannot raise: the loss is NaN for an invalid label, finite for a valid one.
    traced = jax.jit(lambda lab: ga.dlg(jax.random.key(0), _mlp_apply, params, g, (4,), dlg_opts, labels=lab).loss)
    assert np.isnan(float(traced(jnp.asarray(labels, jnp.float32))))
    assert np.isfinite(float(traced(jnp.array([1.0]))))


def test_gradient_attack_hyperparameters_must_be_finite():
    """tv_weight = NaN dropped the TV term (NaN < 0 and NaN > 0 are both False); lr = inf and an infinite box end
    ran to NaN reconstructions. Each is refused, naming the option."""
    params = _mlp_init(jax.random.key(0), (4, 3))
    g = jnp.zeros(12)
    cases = [("tv_weight", np.nan), ("tv_weight", np.inf), ("lr", np.inf), ("lr", np.nan),
             ("data_range", (0.0, np.inf)), ("data_range", (-np.inf, 1.0)), ("data_range", (np.nan, 1.0))]
    for field, value in cases:
        ig_opts = ga.InvertingGradientsOptions(num_restarts=1, num_steps=2, **{"tv_weight": 0.0, field: value})
        with pytest.raises(ValueError, match=field + " must be"):
            ga.inverting_gradients(jax.random.key(0), _mlp_apply, params, g, (2, 2), ig_opts, labels=jnp.array([0]))
        if field != "tv_weight":
            with pytest.raises(ValueError, match=field + " must be"):
                ga.dlg(jax.random.key(0), _mlp_apply, params, g, (4,),
                       ga.DLGOptions(num_restarts=1, num_steps=2, **{field: value}), labels=jnp.array([0]))


def _multistep_lr(lr: float, n: int) -> list[float]:
    """The learning rate of each of the n steps of Geiping et al.'s loop, a naive transcription of torch's
    MultiStepLR(milestones=[n // 2.667, n // 1.6, n // 1.142], gamma=0.1) (milestones kept in a Counter, the rate
    multiplied by gamma ** count when last_epoch reaches one) with scheduler.step() after every optimizer.step()."""
    milestones = collections.Counter([n // 2.667, n // 1.6, n // 1.142])
    rate, last_epoch, rates = lr, 0, []
    rate *= 0.1 ** milestones[last_epoch]  # the constructor's initial step (last_epoch = 0)
    for _ in range(n):
        rates.append(rate)  # optimizer.step()
        last_epoch += 1  # scheduler.step()
        rate *= 0.1 ** milestones[last_epoch]
    return rates


def test_lr_schedule_matches_geiping_multisteplr():
    """The old schedule decayed from the steps int(n * 3/8), int(n * 5/8), int(n * 7/8) (750, 1250, 1750 at
    n = 2000) and merged coinciding boundaries (n = 1, 2, 3), so too few decays happened."""
    for n in [*range(1, 11), 16, 24, 100, 2000]:
        schedule = ga._step_schedule(0.1, n, True)
        got = np.asarray(jax.vmap(schedule)(jnp.arange(n)), np.float64)
        np.testing.assert_allclose(got, _multistep_lr(0.1, n), rtol=1e-6, err_msg=f"n = {n}")  # float32 rates
    # The last n, 2000: 2000 / 2.667 = 749.9, 2000 / 1.142 = 1751.3, and 2000 // 1.6 is 1249.0 in Python as in
    # theirs (1.6 is stored as 1.6000000000000000888, so the quotient is just below 1250).
    assert n == 2000 and [t for t in range(1, n) if got[t] < got[t - 1]] == [749, 1249, 1751]


def test_inverting_gradients_steps_take_the_multisteplr_rates():
    """End to end: with g(x) = (x, 1) and g_obs = (+-1, 0) the cosine loss falls monotonically in +-x, so every
    signed Adam step moves x by exactly its learning rate (m_hat = +-1, v_hat = 1); two runs from the same start
    end 2 * sum_t lr_t apart."""
    def apply(p, x):
        return x.reshape(x.shape[0], 1) * p["w"][0] + p["w"][1]

    params = {"w": jnp.array([0.3, -0.2])}
    for n in (1, 2, 3, 5, 8, 10):
        opts = ga.InvertingGradientsOptions(num_restarts=1, num_steps=n, lr=1.0, tv_weight=0.0, data_range=None,
                                            init="normal")
        ends = [ga.inverting_gradients(jax.random.key(3), apply, params, jnp.array([sign, 0.0]), (1,), opts,
                                       labels=jnp.array([0]), loss=lambda logits, t: logits[:, 0]).reconstruction
                for sign in (1.0, -1.0)]
        # float32 iterates of size ~1-10: rounding ~1e-6 over at most 10 steps; Adam's eps 1e-8 is negligible.
        np.testing.assert_allclose(float(ends[0][0, 0] - ends[1][0, 0]), 2 * sum(_multistep_lr(1.0, n)), rtol=1e-5,
                                   atol=2e-6, err_msg=f"n = {n}")


# ---------------------------------------------------------------------------------------------------------------
# Experiments (smoke configs, further shrunk, run in-process)
# ---------------------------------------------------------------------------------------------------------------


def test_ziller_experiment_smoke(tmp_path):
    from experiments import ziller_empirical
    from experiments.configs.ziller_empirical import get_config

    c = get_config("smoke")
    c.num_images, c.chunk_size, c.sigmas, c.clip_norms, c.steps = 3, 3, (0.1,), (50.0,), (1,)
    c.fig3_resolutions, c.fig3_clip_norms, c.fig3_repeats = (16,), (100.0,), 1
    res = ziller_empirical.run(c, str(tmp_path))
    for f in ("report.md", "metrics.json", "config.json", "fig1_metrics.png", "fig3_resolutions.png"):
        assert (tmp_path / f).exists(), f
    row = res["grid"][0]
    # C = 50 >= ||X|| (no clipping): E[MSE] = C^2 sigma^2 = 25 exactly (Ziller eq. 4); 3 images x 784 pixels.
    assert row["unclipped"] and abs(row["mse"]["mean"] / 25.0 - 1.0) < 0.1
    assert res["mse_bound_holds_all"]


def test_default_last_layer_orders_layer_numbers_as_numbers():
    """iDLG reads the last K-column weight gradient. With eleven flax layers of width K the tree's sorted names put
    Dense_10 (the last) before Dense_2, and the default used to take Dense_9's gradient; haiku's linear, linear_1,
    ..., linear_10 likewise."""
    k = 3
    for fmt in ("Dense_{}", "linear_{}"):
        names = [fmt.format(i) for i in range(11)]
        if fmt.startswith("linear"):
            names[0] = "linear"
        tree = {name: {"kernel": jnp.full((4, k), float(i))} for i, name in enumerate(names)}
        tree["Dense_10" if fmt.startswith("Dense") else "linear_10"]["kernel"] = -jnp.ones((4, k))
        assert sorted(tree)[-1] != names[-1]  # the tree's own order is not the layers' order
        np.testing.assert_array_equal(default_last_layer(tree, k), -np.ones((4, k)))
        # iDLG then reads the last layer's columns
        last = jnp.zeros((4, k)).at[:, 2].set(-1.0)  # class 2's column has the negative sum
        tree[names[-1]]["kernel"] = last
        np.testing.assert_array_equal(ga.infer_labels_idlg(default_last_layer(tree, k)), [2])


class _UserCNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.avg_pool(nn.relu(nn.Conv(3, (3, 3))(x)), (2, 2), strides=(2, 2))
        return nn.Dense(4)(x.reshape((x.shape[0], -1)))


class _NamedHead(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = jax.nn.sigmoid(nn.Dense(10, name="proj")(x))
        return nn.Dense(10, name="head")(h)


def test_attack_inputs_refused_naming_the_argument():
    """Each of these ran into a raw flax/Python error, a silent NaN reconstruction or a silently ignored argument."""
    k = jax.random.key(0)
    cnn = _UserCNN()
    params = cnn.init(k, jnp.zeros((1, 8, 8, 3)))["params"]
    x = jax.random.uniform(jax.random.key(1), (1, 8, 8, 3))
    g = ga.model_gradient(lambda p, v: cnn.apply({"params": p}, v), params, x, jnp.eye(4)[1:2])
    apply = lambda p, v: cnn.apply({"params": p}, v)  # noqa: E731
    fast_ig = ga.InvertingGradientsOptions(num_restarts=1, num_steps=1)
    fast_dlg = ga.DLGOptions(num_restarts=1, num_steps=1)
    with pytest.raises(ValueError, match="input_shape"):  # flax's ScopeParamShapeError escaped
        ga.inverting_gradients(k, apply, params, g, (6, 6, 3), fast_ig)
    with pytest.raises(ValueError, match="input_shape"):
        ga.dlg(k, apply, params, g, (6, 6, 3), fast_dlg)
    with pytest.raises(ValueError, match="num_classes must be the model's output width 4"):
        ga.inverting_gradients(k, apply, params, g, (8, 8, 3), fast_ig, num_classes=5)
    with pytest.raises(ValueError, match="input_shape must be the shape of one sample"):
        ga.inverting_gradients(k, apply, params, g, 192, fast_ig)
    with pytest.raises(ValueError, match="data_range"):
        ga.dlg(k, apply, params, g, (8, 8, 3), ga.DLGOptions(data_range=1.0))
    for value in (jnp.nan, jnp.inf):
        with pytest.raises(ValueError, match="observed_grad must be finite"):
            ga.inverting_gradients(k, apply, params, g.at[0].set(value), (8, 8, 3), fast_ig, labels=jnp.array([1]))
        with pytest.raises(ValueError, match="observed_grad must be finite"):
            ga.dlg(k, apply, params, g.at[0].set(value), (8, 8, 3), fast_dlg)
    with pytest.raises(ValueError, match="not one-hot"):
        ga.inverting_gradients(k, apply, params, g, (8, 8, 3), fast_ig, labels=jnp.eye(4)[1:2])
    with pytest.raises(ValueError, match="at least one record"):  # a ZeroDivisionError
        ga.linear_layer_observations(k, jnp.zeros((0, 3)), GaussianMechanism(noise_multiplier=1.0), clip_norm=1.0)
    with pytest.raises(ValueError, match="steps must be an integer"):  # an iota of dtype bool
        ga.linear_layer_observations(k, jnp.ones((2, 3)), GaussianMechanism(noise_multiplier=1.0), clip_norm=1.0,
                                     steps=True)
    with pytest.raises(ValueError, match="not used with DLGOptions"):
        ga.dlg(k, apply, params, g, (8, 8, 3), ga.DLGOptions(num_restarts=1, num_steps=1, optimize_labels=True),
               labels=jnp.array([3]))
    with pytest.raises(ValueError, match="iDLG cannot read labels"):
        ga.dlg(k, apply, params, jnp.zeros_like(g), (8, 8, 3), fast_dlg)
    # with labels given, DLG may still match an all-zero gradient (the inputs that make the loss stationary)
    assert ga.dlg(k, apply, params, jnp.zeros_like(g), (8, 8, 3), fast_dlg, labels=jnp.array([1])).loss.shape == ()


def test_idlg_refuses_differently_named_layers_and_reads_the_one_named():
    """With layers `proj` and `head`, both [*, 10], the tree's name order put `proj` last: iDLG read labels 3 and 7 as
    4 and 1. The default now refuses, and last_layer_fn names the layer."""
    m = _NamedHead()
    params = m.init(jax.random.key(0), jnp.zeros((1, 6)))["params"]
    x = jax.random.uniform(jax.random.key(1), (2, 6))
    apply = lambda p, v: m.apply({"params": p}, v)  # noqa: E731
    g = ga.model_gradient(apply, params, x, jax.nn.one_hot(jnp.array([3, 7]), 10))
    opts = ga.InvertingGradientsOptions(num_restarts=1, num_steps=1, tv_weight=0.0)
    with pytest.raises(ValueError, match="ambiguous.*last_layer_fn"):
        ga.inverting_gradients(jax.random.key(2), apply, params, g, (6,), opts, batch_size=2)
    res = ga.inverting_gradients(jax.random.key(2), apply, params, g, (6,), opts, batch_size=2,
                                 last_layer_fn=lambda t: t["head"]["kernel"])
    np.testing.assert_array_equal(res.labels, [3, 7])


def test_attacks_search_in_the_release_dtype(x64):
    """Under x64 a float64 release was searched from float32 starting points (a float32 reconstruction)."""
    apply = lambda p, v: jax.nn.sigmoid(v @ p["w1"]) @ p["w2"]  # noqa: E731
    params = {"w1": jax.random.normal(jax.random.key(1), (4, 6), jnp.float64),
              "w2": jax.random.normal(jax.random.key(2), (6, 3), jnp.float64)}
    x = jnp.array([[0.1, 0.9, 0.4, 0.7]], jnp.float64)
    g = ga.model_gradient(apply, params, x, jnp.eye(3, dtype=jnp.float64)[1:2])
    ig = ga.inverting_gradients(jax.random.key(0), apply, params, g, (4,),
                                ga.InvertingGradientsOptions(num_restarts=1, num_steps=3, tv_weight=0.0))
    d = ga.dlg(jax.random.key(0), apply, params, g, (4,), ga.DLGOptions(num_restarts=1, num_steps=3))
    assert ig.reconstruction.dtype == d.reconstruction.dtype == jnp.float64
    low = ga.dlg(jax.random.key(0), apply, params, g.astype(jnp.bfloat16), (4,), ga.DLGOptions(num_restarts=1,
                                                                                               num_steps=3))
    assert low.reconstruction.dtype == jnp.float32  # at least float32, as before
