"""The DP clipping bound at reduced matmul precision (GPU TF32, TPU bfloat16), emulated on the CPU.

Each example's contribution to the clipped sum must have norm at most C whatever
``jax.default_matmul_precision`` is: on every clipping path (flat and per-layer; ghost clipping and materialised
``vmap(grad)`` per-example gradients, with and without microbatches; full-batch DP-GD and minibatch DP-SGD, shuffled
and Poisson; the separate target term). A contribution is measured exactly as the training step computes it: the
step's released gradient without noise, on a batch whose weights are one for that example and zero for the others
(the weighted sum then holds that example's term alone, rounded as in the full sum).
:func:`recon_jax.testing.emulate_matmul_precision` rounds the operands of every product that is not pinned at
``Precision.HIGHEST``, as a GPU (TF32) or a TPU (bfloat16) does at default precision.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import mechanisms, models, testing, training
from recon_jax.attacks.linear_layer import linear_layer_observations

# float32 rounding of the norm (a sum of squares), the clip factor (sqrt, divide) and the one product per entry
# that forms a term: a few units of 2^-24 ~ 6e-8 each (module docstring of recon_jax.training.dp). TF32 rounding
# of a term's operands moves its norm by up to 2^-11 ~ 5e-4 (observed up to ~1e-3 before the products were
# pinned), bfloat16 by up to 2^-8, so this bound separates the two by more than two orders of magnitude.
BOUND_RTOL = 1e-6
CLIP = 0.05  # below every per-example gradient norm of the setup: every term is clipped to norm C exactly


class _SequenceMLP(nn.Module):
    """A dense layer applied to each of 3 rows per example: ghost norms through the [B, T, T] Gram products."""

    @nn.compact
    def __call__(self, x):
        h = nn.elu(nn.Dense(5)(x.reshape(x.shape[0], 3, -1)))
        return nn.Dense(4)(h.reshape(x.shape[0], -1))


MLP = models.from_flax(models.MLP(features=(8, 4), activation="elu"))
SEQ = models.from_flax(_SequenceMLP())


def _setup(fns, n=8, d=9):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
    # larger weights, and each example labelled with its least likely class: every per-example gradient (and each
    # layer's block of it) is well above the clip norm, so every term of the clipped sum has norm C
    params = jax.tree_util.tree_map(lambda a: 3.0 * a, fns.init(jax.random.key(0), x[:1]))
    y = jnp.argmin(fns.apply(params, x), axis=-1).astype(jnp.int32)
    return params, x, y


# (name, model, algorithm): every clipping path of the training step.
PATHS = [
    ("gd_flat_ghost", MLP, training.dp_gd(CLIP, per_example="ghost")),
    ("gd_flat_ghost_sequence", SEQ, training.dp_gd(CLIP, per_example="ghost")),
    ("gd_flat_vmap", MLP, training.dp_gd(CLIP, per_example="vmap")),
    ("gd_flat_vmap_microbatch", MLP, training.dp_gd(CLIP, per_example="vmap", microbatch_size=3)),
    ("gd_per_layer_vmap", MLP, training.dp_gd(CLIP, clipping="per_layer")),
    ("sgd_flat_ghost", MLP, training.dp_sgd(8, CLIP, per_example="ghost")),
    ("sgd_flat_vmap_microbatch", MLP, training.dp_sgd(8, CLIP, per_example="vmap", microbatch_size=3)),
    ("sgd_per_layer_vmap", MLP, training.dp_sgd(8, CLIP, clipping="per_layer")),
    ("sgd_poisson_flat_ghost_sequence", SEQ, training.dp_sgd(8, CLIP, per_example="ghost", sampling="poisson")),
    ("sgd_poisson_per_layer_vmap_microbatch", MLP,
     training.dp_sgd(8, CLIP, clipping="per_layer", microbatch_size=3, sampling="poisson")),
]


def _contributions(fns, alg, params, x, y):
    """``[B (+1), P]``: each example's term of the step's clipped sum (and, for full batch, the target term's)."""
    b = x.shape[0]
    target = alg.batch_size is None  # the full-batch step's separate target term (train() gathers it otherwise)
    step = training.make_train_step(fns, dataclasses.replace(alg, mechanism=mechanisms.NoNoise()),
                                    with_gradient=True)

    @jax.jit
    def term(w, t_w):
        # As train() builds its batches: minibatch steps reuse squared row norms of the inputs for the ghost norms.
        sq = jnp.sum(jnp.square(x), axis=-1) if alg.batch_size is not None else None
        extra = dict(target_x=x[0], target_y=y[0], target_weight=t_w) if target else {}
        batch = training.Batch(x, y, w, x_sq_norms=sq, **extra)
        released = step(training.TrainState.create(params, alg), batch, jax.random.key(0))[1]["gradient"]
        # Undo the normaliser, exactly (powers of two): Poisson divides by the expected size 8, the full-batch step by
        # sum(w) plus 1 for the target slot (public: it counts 1 whatever t_w), minibatches by sum(w) = 1.
        return released * (alg.batch_size if alg.poisson else (jnp.sum(w) + 1.0 if target else 1.0))

    weights = np.eye(b + int(target), b, dtype=np.float32)  # one-hot rows; the last is all zero with a target
    t_ws = (np.arange(b + int(target)) == b).astype(np.float32)
    return np.stack([np.asarray(term(w, t), np.float64) for w, t in zip(weights, t_ws)])


def _check_bounded(contrib, what):
    norms = np.linalg.norm(contrib, axis=1)
    assert norms.max() <= CLIP * (1 + BOUND_RTOL), (what, norms.max() / CLIP - 1)
    # Not vacuous: every term is clipped (see _setup), so each has norm C up to the same rounding.
    assert norms.min() >= CLIP * (1 - BOUND_RTOL), (what, norms.min() / CLIP - 1)


@pytest.mark.parametrize("name,fns,alg", PATHS, ids=[p[0] for p in PATHS])
def test_every_contribution_bounded_at_reduced_matmul_precision(own_precision_emulation, name, fns, alg):
    params, x, y = _setup(fns)
    exact = _contributions(fns, alg, params, x, y)
    _check_bounded(exact, (name, "float32"))
    for fmt in testing.FORMATS:
        record = []
        with testing.emulate_matmul_precision(fmt, record=record):
            rounded = _contributions(fns, alg, params, x, y)
        assert record  # the forward and backward products were rounded: the emulation was active
        # Rounding in the forward/backward passes changes the gradients themselves (allowed: g_i is still a
        # function of example i alone), visibly at these precisions, but not the norm of each clipped term.
        assert np.abs(rounded - exact).max() > 1e-6 * CLIP
        _check_bounded(rounded, (name, fmt))


def test_emulation_detects_an_unpinned_weighted_sum(own_precision_emulation):
    """The measurement can fail: a clipped sum formed with a default-precision product (as the vmap path did before
    its sum was pinned) has terms above C(1 + 1e-6) under TF32 emulation; the pinned sum has none."""
    params, x, y = _setup(MLP)
    g = training.clip_gradients(training.per_example_gradients(MLP, params, x, y), CLIP)
    eye = jnp.eye(x.shape[0], dtype=jnp.float32)
    with testing.emulate_matmul_precision("tensorfloat32"):
        unpinned = np.asarray(jax.jit(lambda e: e @ g)(eye), np.float64)
        pinned = np.asarray(jax.jit(lambda e: training.weighted_row_sum(e, g))(eye), np.float64)
    assert np.linalg.norm(unpinned, axis=1).max() > CLIP * (1 + 10 * BOUND_RTOL)  # observed 6.5e-5 at TF32
    _check_bounded(pinned, "weighted_row_sum")


def test_noise_does_not_depend_on_the_matmul_precision(own_precision_emulation):
    """The noise scale and the noise itself: Gaussian and von Mises-Fisher draws are bitwise the same when products
    round (the VMF sampler's projection onto the tangent space is a product)."""
    s = jnp.asarray(np.random.default_rng(1).normal(size=37), jnp.float32)
    mechs = [mechanisms.GaussianMechanism(noise_multiplier=1.3), mechanisms.VMFMechanism(kappa=50.0)]
    exact = [np.asarray(m.privatize(jax.random.key(3), s, 0.7, 5.0)) for m in mechs]
    with testing.emulate_matmul_precision("bfloat16"):
        rounded = [np.asarray(m.privatize(jax.random.key(3), s, 0.7, 5.0)) for m in mechs]
    for a, b in zip(exact, rounded):
        np.testing.assert_array_equal(a, b)


def test_linear_layer_attack_step_bounded_and_unmoved_at_reduced_matmul_precision(own_precision_emulation):
    """Ziller et al.'s linear-layer DP step (recon_jax.attacks.linear_layer) clips and sums on its own: its terms
    stay within C, and its released gradients (the reconstructions of experiments/ziller_empirical) are bitwise
    the same when products round (the per-example gradient X_b comes from a product too)."""
    x = jnp.asarray(np.random.default_rng(2).normal(size=(4, 3, 5)), jnp.float32)  # norms ~4, all above CLIP
    gauss = mechanisms.GaussianMechanism(noise_multiplier=0.5)
    exact = np.asarray(linear_layer_observations(jax.random.key(0), x, gauss, CLIP, steps=2))
    for fmt in testing.FORMATS:
        with testing.emulate_matmul_precision(fmt):
            released = linear_layer_observations(jax.random.key(0), x, mechanisms.NoNoise(), CLIP)
            noisy = np.asarray(linear_layer_observations(jax.random.key(0), x, gauss, CLIP, steps=2))
        # block b of the mean is beta_b x_b / B; B = 4 makes the rescaling exact
        _check_bounded(4.0 * np.asarray(released[0], np.float64).reshape(4, -1), ("linear_layer", fmt))
        np.testing.assert_array_equal(noisy, exact)
