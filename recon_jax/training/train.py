"""Pure training of ONE model on ``fixed_set + {target}``: the training step scanned over epochs and batches.

:func:`train` validates its arguments, selects each step's batch (the full batch, slices of a shuffled
permutation, or Poisson-sampled slots) and runs ``lax.scan`` over epochs and steps of the training step of
:func:`recon_jax.training.make_train_step` (``step(state, batch, key) -> (state, metrics)``, public: call it
yourself to train by hand). vmap it for many models (:func:`recon_jax.shadow.generate_shadow_models`).

The data is the fixed set D_- ``(x [n, ...], y [n])``, shared by all shadow models, plus an optional target
``(x [...], y [])``. In full-batch training it enters as a *separate loss term* (never concatenated into the fixed
array, so that ``vmap`` over targets keeps the fixed-set matrix products unbatched, Balle et al. Sec. IV). In
minibatch training each model gathers its own batch anyway, so a drawn target is a row of that batch (weight
``target_weight``), which saves a second forward/backward pass per step.

Randomness is derived from the model's ``key`` (never carried), through the named streams of
:mod:`recon_jax.training.keys`:

- random initialisation: ``init_key(key) = fold_in(key, 0)``;
- fresh shuffling, epoch e: ``fold_in(fold_in(key, 1), e)``; known shuffling: ``fold_in(shuffle_key, e)``
  (Poisson step s of epoch e: ``fold_in(<that>, s)``);
- mechanism noise, step t: ``noise_key(key, t) = fold_in(fold_in(key, 2), t)``, the key given to the step.

With ``target_weight = 0`` the target slot is kept (same batches as the "in" model) but its loss and gradient do
not count: the informed membership-inference "out" model of Balle et al. Alg. 2. The normaliser then depends on the
kind of training:

- *private* (DP-GD / DP-SGD, ``clip_norm`` set): the slot counts 1 whatever its weight, a public normaliser
  (``n + 1`` full batch, the batch size for shuffled minibatches, the expected batch size for Poisson sampling).
  The "in" and "out" releases of a step then differ by the target's clipped gradient over that normaliser alone
  (norm <= C in sum units), the add/remove sensitivity the accountants assume; a realised ``n + target_weight``
  would let them differ by up to 2C (the "out" model would release ``S / n``, the "in" model ``(S + g) / (n + 1)``).
- *non-private*: the realised count ``n + target_weight`` (the "out" model trains on D- alone with its own mean, as
  in Balle et al.'s non-private membership inference, Fig. 11; :func:`~recon_jax.training.train_gram` likewise).
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from recon_jax import threefry
from recon_jax.models.adapters import ModelFns
from recon_jax.training.algorithms import Algorithm
from recon_jax.training.keys import epoch_shuffle_key, init_key, noise_stream, shuffle_stream
from recon_jax.training.batch import Batch
from recon_jax.training.step import TrainState, make_train_step

__all__ = ["TrainResult", "train", "initial_params", "starting_params", "poisson_slots"]


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


def poisson_slots(u: jax.Array, sample_q: float, rows: int) -> tuple[jax.Array, jax.Array]:
    """The ``rows`` batch slots of a Poisson-sampled step from its uniform draws ``u`` ``float32[n]`` (point i is
    sampled iff ``u_i < q``): ``(idx [rows], taken [rows])``.

    The sampled points fill the first slots in ascending order of ``u`` (ties by index), exactly the slots of
    ``lax.top_k(-u, rows)``; when more than ``rows`` are sampled, the ``rows`` with the smallest ``u`` (a uniformly
    random subset) are kept. The remaining slots are not sampled (``taken`` False, weight 0 in the step). They
    hold unsampled points in index order, where ``top_k`` puts those with the next-smallest ``u``; a weight-0 row
    adds exact zeros, so the step is the same.

    On the uniform grid of ``jax.random.uniform`` (multiples of ``2**-23``) a sampled draw is ``m 2**-23`` with
    ``m < q 2**23``, so ``(m, i)`` packs into one ``uint32`` and a single sort of plain integers orders the batch
    (XLA:CPU sorts one primitive array without calling a comparator: several times faster than ``top_k``). Where
    the pair does not fit in 31 bits this is ``lax.top_k`` itself.

    >>> u = jnp.array([0.5, 0.0625, 0.25, 0.0, 0.0625], jnp.float32)
    >>> idx, taken = poisson_slots(u, 0.3, 4)
    >>> idx.tolist(), taken.tolist()
    ([3, 1, 4, 2], [True, True, True, True])
    """
    n = u.shape[-1]
    index_bits = max(1, (n - 1).bit_length())
    m_bound = int(np.ceil(float(sample_q) * 2**23))  # every sampled draw has m < m_bound
    if u.dtype != jnp.float32 or m_bound * 2**index_bits + n > 2**31:
        neg_u, idx = jax.lax.top_k(-u, rows)
        return idx, -neg_u < sample_q
    taken = u < sample_q
    m = (u * np.float32(2**23)).astype(np.uint32)  # exact: u is a multiple of 2**-23 in [0, 1)
    i = jax.lax.iota(np.uint32, n)
    packed = jnp.where(taken, (m << index_bits) | i, np.uint32(2**31) | i)  # unsampled after every sampled point
    slots = jax.lax.sort(packed)[:rows]
    return (slots & np.uint32(2**index_bits - 1)).astype(np.int32), slots < np.uint32(2**31)


def initial_params(model_fns: ModelFns, key: jax.Array, example_inputs: jax.Array) -> Any:
    """``model_fns.init(key, example_inputs[:1])``: the adversary-known initialisation of fixed-init training.

    Pass the result as ``init_params`` to :func:`train` (or the shadow engine) with an algorithm whose
    ``init == "fixed"``; every model then starts from it.

    Args:
      model_fns: the model (:func:`recon_jax.models.from_flax` / :func:`~recon_jax.models.from_haiku`).
      key: typed key of the initialisation (used as given: no ``fold_in``, unlike a random initialisation in
        :func:`train`, which draws from ``fold_in(key, 0)``).
      example_inputs: inputs ``[n, ...]`` (e.g. the fixed set's ``x``); only ``example_inputs[:1]`` is passed, to
        fix the input shape and dtype.

    Returns:
      The parameter pytree ``model_fns.init`` returns (for :func:`~recon_jax.models.from_flax`, the ``params``
      collection, e.g. ``{"Dense_0": {"kernel": ..., "bias": ...}, ...}``).

    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> p = initial_params(from_flax(balle_mnist_mlp()), jax.random.key(0), jnp.zeros((5, 784)))
    >>> p["Dense_0"]["kernel"].shape
    (784, 10)
    """
    return model_fns.init(key, example_inputs[:1])


def starting_params(model_fns: ModelFns, algorithm: Algorithm, key: jax.Array, init_params, fx):
    """The parameters training starts from: ``init_params`` for fixed initialisation (required), else a draw
    from ``init_key(key) = fold_in(key, 0)`` (``init_params`` must then be ``None``).

    Args:
      model_fns: the model (:func:`recon_jax.models.from_flax` / :func:`~recon_jax.models.from_haiku`).
      algorithm: the training algorithm; its ``init`` (``"fixed"`` or ``"random"``) decides.
      key: typed key of the model's training (the random initialisation draws from ``fold_in(key, 0)``).
      init_params: the adversary-known initialisation (fixed) or ``None`` (random).
      fx: the fixed set's inputs ``[n, ...]``; only ``fx[:1]`` is used, for the input shape and dtype.

    Returns:
      The parameter pytree training starts from.

    Raises:
      ValueError: if ``init_params`` is missing (fixed) or given (random).

    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> from recon_jax.training import full_batch_gd
    >>> fns, fx = from_flax(balle_mnist_mlp()), jnp.zeros((5, 784))
    >>> p = starting_params(fns, full_batch_gd(init="random"), jax.random.key(1), None, fx)
    >>> p["Dense_0"]["kernel"].shape
    (784, 10)
    """
    if algorithm.init == "fixed":
        if init_params is None:
            raise ValueError("init_params is required when algorithm.init == 'fixed' (the adversary-known init)")
        return init_params
    if init_params is not None:
        raise ValueError("init_params must be None when algorithm.init == 'random'")
    return model_fns.init(init_key(key), fx[:1])


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
      target_weight: 1 (target trained on) or 0 (target slot kept but ignored: the MIA "out" model). Private
        training counts the slot 1 in its normaliser either way; non-private training counts ``target_weight``
        (module docstring).
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

    dtype = ravel_pytree(params0)[0].dtype
    if has_target:
        tx, ty = jnp.asarray(target[0]), jnp.asarray(target[1])
        tw = jnp.asarray(target_weight, dtype)
    noise_base = noise_stream(key)  # step t's noise key: noise_key(key, t) = fold_in(noise_base, t)
    shuffle_base = shuffle_key if alg.shuffle == "known" else shuffle_stream(key)
    train_step = make_train_step(model_fns, alg, with_gradient=return_trace)

    def batch_indices(epoch_key, perm, s):
        """Indices into fixed set + target (n = the target) of step s and which of them are in the batch."""
        if poisson:
            # Point i is in the batch iff u_i < q (independently); the `rows` smallest u are the slots, so when more
            # than `rows` points are sampled a uniformly random subset of them is kept.
            u = threefry.uniform(threefry.fold_in(epoch_key, s), (n_total,))  # = jax.random.uniform, bitwise
            return poisson_slots(u, sample_q, rows)
        idx = jax.lax.dynamic_slice_in_dim(perm, s * alg.batch_size, alg.batch_size)
        return idx, jnp.ones(idx.shape, bool)

    fx_sq = tx_sq = None
    if not full_batch and alg.private:
        # Squared row norms of the fixed set, once (unbatched under vmap over targets: shared by every model);
        # ghost clipping reads them for the layer that sees the input instead of reducing each gathered batch.
        fx_sq = jnp.sum(jnp.square(fx.reshape(n, -1).astype(dtype)), axis=-1)  # in float: inputs may be integers
        if has_target:
            tx_sq = jnp.sum(jnp.square(tx.reshape(-1).astype(dtype)))

    def batch_of(idx, taken):
        """The :class:`Batch` of the points ``idx`` (those not ``taken`` get weight 0). The target, when drawn, is
        a row of the gathered batch with weight ``target_weight``: the batch is gathered per model anyway, so
        the target needs no separate loss term (which would cost a second forward/backward pass per step)."""
        safe = jnp.minimum(idx, n - 1)
        sq = None if fx_sq is None else fx_sq[safe]
        if not has_target:
            return Batch(fx[safe], fy[safe], taken.astype(dtype), x_sq_norms=sq)
        is_t = idx == n
        xb = jnp.where(is_t.reshape(is_t.shape + (1,) * (fx.ndim - 1)), tx[None], fx[safe])
        yb = jnp.where(is_t, ty, fy[safe])
        w = jnp.where(taken, jnp.where(is_t, tw, 1.0), 0.0).astype(dtype)
        if sq is not None:
            sq = jnp.where(is_t, tx_sq, sq)
        # private training counts a drawn target slot 1 in its normaliser whatever tw (Batch.target_rows)
        return Batch(xb, yb, w, x_sq_norms=sq, target_rows=is_t & taken)

    def epoch_fn(state, epoch):
        epoch_key = perm = None
        if not full_batch:
            epoch_key = epoch_shuffle_key(shuffle_base, epoch)
            if not poisson:
                perm = threefry.permutation(epoch_key, n_total)  # = jax.random.permutation, bitwise

        def step_fn(state, s):
            if full_batch:
                batch = Batch(fx, fy, jnp.ones((n,), dtype), *((tx, ty, tw) if has_target else ()))
            else:
                idx, taken = batch_indices(epoch_key, perm, s)
                batch = batch_of(idx, taken)
            new_state, metrics = train_step(state, batch, threefry.fold_in(noise_base, state.step))
            out = {"loss": metrics["loss"]}
            if return_trace:
                out["params"] = ravel_pytree(state.params)[0]
                out["gradients"] = metrics["gradient"]
                if not full_batch:
                    out["batch_indices"] = jnp.where(taken, idx, -1)  # Poisson: -1 marks an empty slot
            return new_state, out

        return jax.lax.scan(step_fn, state, jnp.arange(steps_per_epoch))

    state, outs = jax.lax.scan(epoch_fn, TrainState.create(params0, alg), jnp.arange(alg.epochs))
    outs = jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), outs)
    losses = outs.pop("loss")
    return TrainResult(params=state.params, losses=losses, trace=outs if return_trace else None)
