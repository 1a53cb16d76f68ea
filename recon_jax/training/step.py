"""One training step, exposed: ``step(state, batch, key) -> (state, metrics)``, pure and jittable.

:func:`make_train_step` builds the step of an :class:`~recon_jax.training.Algorithm` (any optax optimizer; plain
gradients, or DP-GD / DP-SGD through :func:`recon_jax.training.privatized_loss_and_gradient`). The state is a
:class:`TrainState` (parameters, optimizer state, step counter); a :class:`Batch` holds the step's examples
``x [B, ...]``, ``y [B]``, their weights ``[B]`` and an optional separate target term (one example and its weight,
never concatenated into the batch, so that ``vmap`` over targets keeps the batch's products unbatched);
``key`` is the step's mechanism-noise key (:func:`recon_jax.training.noise_key`; unused without noise).

:func:`recon_jax.training.train` is this step scanned over epochs and batches (it selects the batches: full
batch, shuffled minibatches or Poisson slots); call the step yourself to train by hand, on your own data
pipeline, or to inspect each update.

Loss and normaliser of a step with weights ``w`` and target weight ``t`` (0 without a target):
``L = (sum_i w_i loss_i + t loss_target) / N``. Without clipping ``N = sum_i w_i + t`` (the realised count) and the
update follows ``grad L``; with clipping ``N = sum_i w_i + 1`` with a target slot (it counts 1 whatever ``t``, a
public normaliser, so ``t = 0`` and ``t = 1`` differ by the target's clipped gradient alone; ``sum_i w_i``
without, rows marked ``Batch.target_rows`` counting 1) and the update follows the released
``mechanism.privatize(key, S, C, N)`` of the clipped sum ``S``. Poisson-sampled algorithms use
``N = algorithm.batch_size`` either way (the expected batch size, as in the accounted mechanism).
"""

from __future__ import annotations

from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from recon_jax.models.adapters import ModelFns
from recon_jax.training.algorithms import Algorithm
from recon_jax.training.batch import Batch
from recon_jax.training.dp import privatized_loss_and_gradient

__all__ = ["TrainState", "apply_gradient", "make_train_step"]


class TrainState(flax.struct.PyTreeNode):
    """The state a training step maps to the next one.

    Attributes:
      params: the model's parameters (pytree).
      opt_state: the optax optimizer state.
      step: number of steps taken (int32 scalar); step t's noise key is ``noise_key(key, t)`` in
        :func:`recon_jax.training.train`.
    """

    params: Any
    opt_state: Any
    step: jax.Array

    @classmethod
    def create(cls, params, algorithm: Algorithm) -> "TrainState":
        """The state before the first step: ``algorithm``'s optimizer initialised at ``params``, step 0."""
        return cls(params=params, opt_state=algorithm.make_optimizer().init(params),
                   step=jnp.zeros((), jnp.int32))


def apply_gradient(optimizer, params, opt_state, gradient: jax.Array):
    """The last stage of a step: ``optimizer`` applied to a flat (released) gradient; ``(params, opt_state)``.

    The DP step is three stages: clip and sum (:func:`~recon_jax.training.clipped_gradient_sum`), add the
    mechanism's noise (``mechanism.privatize``; both in :func:`~recon_jax.training.privatized_loss_and_gradient`),
    then this. :func:`make_train_step` and the games of :mod:`recon_jax.attacks.canaries` and
    :mod:`recon_jax.attacks.prior_aware` (which score the released sum between the second stage and this one) all
    use it.

    Args:
      optimizer: an optax transformation.
      params: the parameters (pytree).
      opt_state: its state.
      gradient: the flat gradient ``[P]`` (unravelled to the layout of ``params``).

    Returns:
      ``(new_params, new_opt_state)``; each updated parameter keeps its dtype.
    """
    updates, opt_state = optimizer.update(ravel_pytree(params)[1](gradient), opt_state, params)
    return jax.tree_util.tree_map(lambda p, u: p + u.astype(p.dtype), params, updates), opt_state


def _loss_and_gradient(model_fns: ModelFns, loss_fn: Callable, params, x, y, w, target, t_w, count):
    """Non-private: ``(L, flat grad L)`` with ``L = (sum_i w_i loss_i + t_w loss_target) / count``."""

    def loss(p):
        total = jnp.sum(w * loss_fn(model_fns.apply(p, x), y))
        if target is not None:
            total = total + t_w * loss_fn(model_fns.apply(p, target[0]), target[1])[0]
        return total / count

    value, grads = jax.value_and_grad(loss)(params)
    return value, ravel_pytree(grads)[0]


def make_train_step(model_fns: ModelFns, algorithm: Algorithm, *, with_gradient: bool = False):
    """The training step of ``algorithm``: a pure ``step(state, batch, key) -> (state, metrics)``.

    The step computes the gradient (DP-GD / DP-SGD: the released one, from
    :func:`~recon_jax.training.privatized_loss_and_gradient` with the algorithm's clipping, per-example path,
    microbatching and mechanism) at ``state.params``, applies ``algorithm``'s optimizer, and counts the step.
    It only reads ``algorithm``'s per-step fields (optimizer, clipping, mechanism, loss, and whether batches are
    Poisson-sampled, which sets the normaliser to ``algorithm.batch_size``); epochs, batch size and shuffling
    belong to whoever feeds it batches (:func:`~recon_jax.training.train`).

    Args:
      model_fns: the model.
      algorithm: the :class:`~recon_jax.training.Algorithm`.
      with_gradient: also return the flat (released) gradient of the step in ``metrics["gradient"]``.

    Returns:
      ``step(state: TrainState, batch: Batch, key) -> (TrainState, metrics)``; ``metrics["loss"]`` is the
      step's training loss at ``state.params`` (before the update), ``key`` the mechanism-noise key of this
      step (ignored without noise; any key then). Jit it once (``jax.jit(step, donate_argnums=0)`` for large
      states); it vmaps over states, batches and keys.

    Train a few steps by hand (DP-SGD on minibatches of 16, Gaussian noise; the keys from
    :func:`~recon_jax.training.noise_key`, as :func:`~recon_jax.training.train` draws them):

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> from recon_jax.training import Batch, TrainState, dp_sgd, make_train_step, noise_key
    >>> fns = from_flax(balle_mnist_mlp())
    >>> x, y = jax.random.uniform(jax.random.key(1), (64, 784)), jnp.arange(64) % 10
    >>> alg = dp_sgd(16, clip_norm=1.0, noise_multiplier=0.1, learning_rate=0.5)
    >>> state = TrainState.create(fns.init(jax.random.key(0), x[:1]), alg)
    >>> step = jax.jit(make_train_step(fns, alg))
    >>> losses = []
    >>> for t in range(12):
    ...     i = 16 * (t % 4) + jnp.arange(16)
    ...     state, metrics = step(state, Batch(x[i], y[i]), noise_key(jax.random.key(2), t))
    ...     losses.append(float(metrics["loss"]))
    >>> int(state.step), losses[-1] < losses[0]
    (12, True)
    """
    alg = algorithm
    optimizer = alg.make_optimizer()

    def step(state: TrainState, batch: Batch, key: jax.Array):
        params = state.params
        dtype = jax.eval_shape(lambda p: ravel_pytree(p)[0], params).dtype
        w = jnp.ones((batch.x.shape[0],), dtype) if batch.weights is None else batch.weights
        has_target = batch.target_x is not None
        t_w = None
        if has_target:
            t_w = jnp.ones((), dtype) if batch.target_weight is None else batch.target_weight
        if alg.private:  # clip, then noise (privatized_loss_and_gradient), then the optimizer below
            value, gflat = privatized_loss_and_gradient(model_fns, params, batch.replace(weights=w, target_weight=t_w),
                                                        key, alg)
        else:
            if alg.poisson:
                count = jnp.asarray(alg.batch_size, dtype)  # the expected batch size, never the realised one
            else:
                count = jnp.sum(w) + (t_w if has_target else 0.0)
            target = (batch.target_x[None], jnp.reshape(batch.target_y, (1,))) if has_target else None
            value, gflat = _loss_and_gradient(model_fns, alg.loss_fn, params, batch.x, batch.y, w, target, t_w, count)
        new_params, opt_state = apply_gradient(optimizer, params, state.opt_state, gflat)
        metrics = {"loss": value}
        if with_gradient:
            metrics["gradient"] = gflat
        return state.replace(params=new_params, opt_state=opt_state, step=state.step + 1), metrics

    return step
