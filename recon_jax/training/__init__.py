"""Pure training algorithms over parameter pytrees: full-batch GD (+momentum), minibatch SGD, DP-GD / DP-SGD.

- :class:`Algorithm` and the factories :func:`full_batch_gd`, :func:`minibatch_sgd`, :func:`dp_gd`,
  :func:`dp_sgd` describe an algorithm (frozen, hashable).
- :func:`make_train_step`, :class:`TrainState`, :class:`Batch`: one training step ``step(state, batch, key) ->
  (state, metrics)``, pure and jittable, to train by hand.
- :func:`train` trains ONE model on ``fixed_set + {target}``: the step in ``lax.scan`` over epochs and batches;
  vmap/jit it, or use :func:`recon_jax.shadow.generate_shadow_models` for many.
- :func:`init_key`, :func:`shuffle_stream`, :func:`epoch_shuffle_key`, :func:`noise_stream`, :func:`noise_key`:
  the named key streams of training (:mod:`recon_jax.training.keys`).
- :func:`train_gram`: the same full-batch training with the first dense layer expressed through the fixed set's
  Gram matrix (cheaper per step when many models share the fixed set; :mod:`recon_jax.training.gram`).
- :func:`starting_params` (the parameters :func:`train` starts from) and :func:`poisson_slots` (the batch slots of
  one Poisson-sampled step), the pieces of :func:`train` that :func:`train_gram` shares.
- :func:`train_classifier`: ordinary minibatch Adam(W) training of a flax classifier (evaluation networks).
- :func:`per_example_gradients`, :func:`clip_gradients`, :func:`clipped_gradient_sum`,
  :func:`privatized_loss_and_gradient` (the one DP gradient, used by the step), :func:`privatized_gradient`
  and :func:`weighted_row_sum` (the full-precision sum of clipped rows):
  DP-SGD building blocks (a noise ``mechanism`` from :mod:`recon_jax.mechanisms`).
"""

from recon_jax.training.algorithms import CLIPPING_MODES, Algorithm, dp_gd, dp_sgd, full_batch_gd, minibatch_sgd
from recon_jax.training.classifier import train_classifier
from recon_jax.training.dp import (
    clip_gradients,
    clipped_gradient_sum,
    layer_groups,
    per_example_gradients,
    privatized_gradient,
    privatized_loss_and_gradient,
    use_ghost_clipping,
    weighted_row_sum,
)
from recon_jax.training.keys import epoch_shuffle_key, init_key, noise_key, noise_stream, shuffle_stream
from recon_jax.models.losses import softmax_cross_entropy
from recon_jax.training.gram import choose_first_layer, fixed_set_gram, gram_saves_work, gram_supported, train_gram
from recon_jax.training.batch import Batch
from recon_jax.training.step import TrainState, apply_gradient, make_train_step
from recon_jax.training.train import TrainResult, initial_params, poisson_slots, starting_params, train

__all__ = [
    "Algorithm",
    "full_batch_gd",
    "minibatch_sgd",
    "dp_gd",
    "dp_sgd",
    "CLIPPING_MODES",
    "clip_gradients",
    "layer_groups",
    "per_example_gradients",
    "clipped_gradient_sum",
    "privatized_loss_and_gradient",
    "privatized_gradient",
    "use_ghost_clipping",
    "weighted_row_sum",
    "init_key",
    "shuffle_stream",
    "epoch_shuffle_key",
    "noise_stream",
    "noise_key",
    "TrainState",
    "Batch",
    "apply_gradient",
    "make_train_step",
    "softmax_cross_entropy",
    "TrainResult",
    "initial_params",
    "starting_params",
    "poisson_slots",
    "train",
    "choose_first_layer",
    "fixed_set_gram",
    "gram_saves_work",
    "gram_supported",
    "train_gram",
    "train_classifier",
]
