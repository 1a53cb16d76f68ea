"""Pure training of ONE model on ``fixed_set + {target}``, epochs in ``lax.scan`` (vmap it for many models).

The data is the fixed set D_- ``(x [n, ...], y [n])``, shared by all shadow models, plus an optional target
``(x [...], y [])`` that enters as a *separate loss term* (never concatenated into the fixed array, so that
``vmap`` over targets keeps the fixed-set matrix products unbatched, Balle et al. Sec. IV).

Randomness is derived from the model's ``key`` (never carried):

- random initialisation: ``fold_in(key, 0)``;
- fresh shuffling, epoch e: ``fold_in(fold_in(key, 1), e)``; known shuffling: ``fold_in(shuffle_key, e)``;
- mechanism noise, step t: ``fold_in(fold_in(key, 2), t)``.

With ``target_weight = 0`` the target slot is kept (same batches as the "in" model) but does not count:
the informed membership-inference "out" model of Balle et al. Alg. 2.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from recon_jax.mechanisms.base import NoNoise
from recon_jax.models.adapters import ModelFns
from recon_jax.models.flatten import layout_of
from recon_jax.training.algorithms import Algorithm
from recon_jax.training.dp import clip_gradients
from recon_jax.training.ghost import ghost_clipped_sum, ghost_supported

__all__ = ["TrainResult", "train", "initial_params"]


class TrainResult(flax.struct.PyTreeNode):
    """Output of :func:`train`.

    Attributes:
      params: final parameters (pytree).
      losses: ``[T]`` training loss at each of the T steps (before the update).
      trace: ``None``, or (``return_trace=True``) a dict with ``"params"`` ``[T, P]`` (flat parameters at which
        step t's gradient was taken), ``"gradients"`` ``[T, P]`` (the released, i.e. noisy for DP, mean
        gradient of step t) and, for minibatches, ``"batch_indices"`` ``[T, B]`` (indices into the n + 1
        points; index n is the target).
    """

    params: Any
    losses: jax.Array
    trace: Any = None


def initial_params(model_fns: ModelFns, key: jax.Array, example_inputs: jax.Array):
    """``model_fns.init(key, example_inputs[:1])``: the adversary-known initialisation of fixed-init training.

    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> p = initial_params(from_flax(balle_mnist_mlp()), jax.random.key(0), jnp.zeros((5, 784)))
    >>> p["Dense_0"]["kernel"].shape
    (784, 10)
    """
    return model_fns.init(key, example_inputs[:1])


def starting_params(model_fns: ModelFns, algorithm: Algorithm, key: jax.Array, init_params, fx):
    """The parameters training starts from: ``init_params`` for fixed initialisation (required), else a draw
    from ``fold_in(key, 0)`` (``init_params`` must then be ``None``).

    Raises:
      ValueError: if ``init_params`` is missing (fixed) or given (random).
    """
    if algorithm.init == "fixed":
        if init_params is None:
            raise ValueError("init_params is required when algorithm.init == 'fixed' (the adversary-known init)")
        return init_params
    if init_params is not None:
        raise ValueError("init_params must be None when algorithm.init == 'random'")
    return model_fns.init(jax.random.fold_in(key, 0), fx[:1])


def _check_data(fixed_set, target):
    if not (isinstance(fixed_set, (tuple, list)) and len(fixed_set) == 2):
        raise ValueError("fixed_set must be a pair (x [n, ...], y [n])")
    fx, fy = fixed_set
    if fx.shape[0] != fy.shape[0] or fx.shape[0] < 1:
        raise ValueError(f"fixed_set x and y must have the same leading size >= 1, got {fx.shape}, {fy.shape}")
    if target is not None:
        if not (isinstance(target, (tuple, list)) and len(target) == 2):
            raise ValueError("target must be None or a pair (x [...], y [])")
        if tuple(target[0].shape) != tuple(fx.shape[1:]):
            raise ValueError(f"target x must have shape {tuple(fx.shape[1:])} (one example), got {target[0].shape}")


def train(model_fns: ModelFns, algorithm: Algorithm, fixed_set, target=None, *, key: jax.Array,
          init_params=None, shuffle_key: jax.Array | None = None, target_weight: float | jax.Array = 1.0,
          return_trace: bool = False) -> TrainResult:
    """Trains one model with ``algorithm`` on ``fixed_set`` plus ``target`` (pure; jit- and vmap-friendly).

    Args:
      model_fns: the model (:func:`recon_jax.models.from_flax` / :func:`~recon_jax.models.from_haiku`).
      algorithm: the :class:`Algorithm` (full-batch GD, minibatch SGD, DP-GD, DP-SGD, any optax optimizer).
      fixed_set: ``(x [n, ...], y [n])``.
      target: ``None`` or one extra example ``(x [...], y [])`` (a separate loss term).
      key: this model's key (initialisation if random, fresh shuffling, mechanism noise).
      init_params: initial parameters; required iff ``algorithm.init == "fixed"``.
      shuffle_key: shared shuffling key; required iff minibatches with ``shuffle == "known"``.
      target_weight: 1 (target trained on) or 0 (target slot kept but ignored: the MIA "out" model).
      return_trace: also return the per-step flat parameters, released gradients and batch indices (Poisson: one
        row per slot, -1 where the slot is empty).

    Returns:
      A :class:`TrainResult`.

    Raises:
      ValueError: on inconsistent arguments (named in the message).

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> from recon_jax.training import full_batch_gd
    >>> fns = from_flax(balle_mnist_mlp())
    >>> x, y = jax.random.uniform(jax.random.key(1), (32, 784)), jnp.arange(32) % 10
    >>> p0 = initial_params(fns, jax.random.key(0), x)
    >>> res = train(fns, full_batch_gd(epochs=20, learning_rate=0.05), (x, y), (x[0], y[0]), key=jax.random.key(2), init_params=p0)
    >>> bool(res.losses[-1] < res.losses[0])
    True
    """
    _check_data(fixed_set, target)
    fx, fy = jnp.asarray(fixed_set[0]), jnp.asarray(fixed_set[1])
    n = fx.shape[0]
    has_target = target is not None
    n_total = n + int(has_target)
    alg = algorithm

    params0 = starting_params(model_fns, alg, key, init_params, fx)

    full_batch = alg.batch_size is None
    if not full_batch:
        if alg.batch_size > n_total:
            raise ValueError(f"batch_size must be <= the number of training points {n_total}, got {alg.batch_size}")
        if alg.shuffle == "known" and shuffle_key is None:
            raise ValueError("shuffle_key is required for minibatch training with shuffle='known'")
    steps_per_epoch = 1 if full_batch else n_total // alg.batch_size
    poisson = not full_batch and alg.poisson
    if poisson:
        sample_q = alg.batch_size / n_total
        rows = alg.poisson_max_batch(n_total)  # fixed under jit; unsampled slots get weight 0

    flat0, unravel = ravel_pytree(params0)
    use_ghost = False
    if alg.private and alg.per_example != "vmap":
        use_ghost = alg.clipping == "flat" and ghost_supported(model_fns.tap, params0, fx)
        if alg.per_example == "ghost" and not use_ghost:
            raise ValueError("algorithm.per_example='ghost' needs flat clipping and a model whose parameters are all "
                             "in dense layers (flax nn.Dense / haiku hk.Linear, each called once); use 'auto' or 'vmap'")
    layout = layout_of(params0) if (alg.private and alg.clipping == "per_layer") else None
    optimizer = alg.make_optimizer()
    mechanism = alg.mechanism if alg.mechanism is not None else NoNoise()
    loss_fn = alg.loss_fn
    if has_target:
        tx = jnp.asarray(target[0])[None]
        ty = jnp.asarray(target[1]).reshape((1,))
        tw = jnp.asarray(target_weight, flat0.dtype)
    noise_base = jax.random.fold_in(key, 2)
    shuffle_base = shuffle_key if alg.shuffle == "known" else jax.random.fold_in(key, 1)

    def batch_indices(perm, epoch, s):
        """Indices into fixed set + target (n = the target) of step s and which of them are in the batch."""
        if poisson:
            # Point i is in the batch iff u_i < q (independently); the `rows` smallest u are the slots, so when more
            # than `rows` points are sampled a uniformly random subset of them is kept.
            u = jax.random.uniform(jax.random.fold_in(jax.random.fold_in(shuffle_base, epoch), s), (n_total,))
            neg_u, idx = jax.lax.top_k(-u, rows)
            return idx, -neg_u < sample_q
        idx = jax.lax.dynamic_slice_in_dim(perm, s * alg.batch_size, alg.batch_size)
        return idx, jnp.ones(idx.shape, bool)

    def batch_for(perm, epoch, s):
        """(x, y, weight) of the fixed-set part of step s, and the target's weight in this step."""
        if full_batch:
            return fx, fy, jnp.ones((n,), flat0.dtype), (tw if has_target else None)
        idx, taken = batch_indices(perm, epoch, s)
        safe = jnp.minimum(idx, n - 1)
        if has_target:
            is_t = idx == n
            w = jnp.where(is_t | ~taken, 0.0, 1.0).astype(flat0.dtype)
            t_w = jnp.any(is_t & taken).astype(flat0.dtype) * tw
        else:
            w, t_w = taken.astype(flat0.dtype), None
        return fx[safe], fy[safe], w, t_w

    def normaliser(w, t_w):
        """Poisson: the expected batch size (as in the accounted mechanism); otherwise the weight in the batch."""
        if poisson:
            return jnp.asarray(alg.batch_size, flat0.dtype)
        return jnp.sum(w) + (t_w if t_w is not None else 0.0)

    def nonprivate_grad(params, xb, yb, w, t_w):
        def loss(p):
            total = jnp.sum(w * loss_fn(model_fns.apply(p, xb), yb))
            if t_w is not None:
                total = total + t_w * loss_fn(model_fns.apply(p, tx), ty)[0]
            return total / normaliser(w, t_w)
        value, grads = jax.value_and_grad(loss)(params)
        return value, ravel_pytree(grads)[0]

    def example_grads(params, xb, yb):
        def one(xi, yi):
            v, g = jax.value_and_grad(lambda p: loss_fn(model_fns.apply(p, xi[None]), yi[None])[0])(params)
            return v, ravel_pytree(g)[0]
        v, g = jax.vmap(one)(xb, yb)
        return v, clip_gradients(g, alg.clip_norm, alg.clipping, layout)

    def ghost_sum(params, xb, yb, w):
        v, g, _ = ghost_clipped_sum(model_fns.tap, params, xb, yb, alg.clip_norm, w, loss_fn)
        return v, ravel_pytree(g)[0]

    def private_grad(params, xb, yb, w, t_w, step):
        b = xb.shape[0]
        m = alg.microbatch_size
        if use_ghost:
            v, total = ghost_sum(params, xb, yb, w)
            loss_sum = w @ v
        elif m is None or m >= b:
            v, g = example_grads(params, xb, yb)
            total, loss_sum = w @ g, w @ v
        else:
            n_mb = -(-b // m)
            pad = n_mb * m - b
            xp = jnp.concatenate([xb, jnp.zeros((pad,) + xb.shape[1:], xb.dtype)]) if pad else xb
            yp = jnp.concatenate([yb, jnp.zeros((pad,), yb.dtype)]) if pad else yb
            wp = jnp.concatenate([w, jnp.zeros((pad,), w.dtype)]) if pad else w

            def body(carry, mb):
                acc, lacc = carry
                v, g = example_grads(params, *mb[:2])
                return (acc + mb[2] @ g, lacc + mb[2] @ v), None

            mbs = (xp.reshape((n_mb, m) + xb.shape[1:]), yp.reshape((n_mb, m)), wp.reshape((n_mb, m)))
            (total, loss_sum), _ = jax.lax.scan(body, (jnp.zeros_like(flat0), jnp.zeros((), flat0.dtype)), mbs)
        if t_w is not None:
            if use_ghost:
                vt, gt = ghost_sum(params, tx, ty, None)
                total = total + t_w * gt
            else:
                vt, gt = example_grads(params, tx, ty)
                total = total + t_w * gt[0]
            loss_sum = loss_sum + t_w * vt[0]
        count = normaliser(w, t_w)
        noisy = mechanism.privatize(jax.random.fold_in(noise_base, step), total, alg.clip_norm, count)
        return loss_sum / count, noisy

    def epoch_fn(carry, epoch):
        if full_batch or poisson:
            perm = None
        else:
            perm = jax.random.permutation(jax.random.fold_in(shuffle_base, epoch), n_total)

        def step_fn(carry, s):
            params, opt_state = carry
            step = epoch * steps_per_epoch + s
            xb, yb, w, t_w = batch_for(perm, epoch, s)
            if alg.private:
                value, gflat = private_grad(params, xb, yb, w, t_w, step)
            else:
                value, gflat = nonprivate_grad(params, xb, yb, w, t_w)
            updates, opt_state = optimizer.update(unravel(gflat), opt_state, params)
            new_params = jax.tree_util.tree_map(lambda p, u: p + u.astype(p.dtype), params, updates)
            out = {"loss": value}
            if return_trace:
                out["params"] = ravel_pytree(params)[0]
                out["gradients"] = gflat
                if not full_batch:
                    idx, taken = batch_indices(perm, epoch, s)
                    out["batch_indices"] = jnp.where(taken, idx, -1)  # Poisson: -1 marks an empty slot
            return (new_params, opt_state), out

        return jax.lax.scan(step_fn, carry, jnp.arange(steps_per_epoch))

    carry0 = (params0, optimizer.init(params0))
    (params, _), outs = jax.lax.scan(epoch_fn, carry0, jnp.arange(alg.epochs))
    outs = jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), outs)
    losses = outs.pop("loss")
    return TrainResult(params=params, losses=losses, trace=outs if return_trace else None)
