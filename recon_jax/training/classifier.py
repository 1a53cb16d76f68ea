"""Ordinary (non-private) classifier training by minibatch Adam/AdamW: the evaluation classifiers of the Balle
oracle (classifier-KL metric) and the Tygert et al. feature networks."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from recon_jax import threefry
from recon_jax.models.losses import softmax_cross_entropy

__all__ = ["train_classifier"]


def train_classifier(model, images: jax.Array, labels: jax.Array, key: jax.Array, *, epochs: int = 6,
                     batch_size: int = 32, learning_rate: float = 1e-3, weight_decay: float = 0.0, params=None,
                     epoch_callback: Callable[[int, object, jax.Array], None] | None = None):
    """Trains a flax classifier by minibatch AdamW on the mean softmax cross-entropy.

    Each epoch is one jitted ``lax.scan`` over a fresh permutation (the last incomplete batch is dropped). ``key``
    is split into an initialisation key (used when ``params`` is None) and a shuffling key; epoch ``e`` shuffles
    with ``fold_in(shuffle_key, e)``. ``weight_decay=0`` is Adam exactly. Tygert et al. (Sec. 3) train with AdamW,
    learning rate 1e-3, batches of 32, 6 epochs (MNIST) / 7 (CIFAR-10) and PyTorch's default weight decay 1e-2.

    Args:
      model: a flax.linen module mapping images to logits.
      images: ``[N, ...]`` inputs; labels: ``[N]`` integer labels.
      key: a typed PRNG key.
      epochs: passes over the data (integer >= 0).
      batch_size: examples per step, an integer in ``[1, N]``.
      learning_rate: > 0; weight_decay: AdamW's decoupled weight decay, >= 0.
      params: initial variables (default ``model.init``).
      epoch_callback: called as ``epoch_callback(epoch, variables, mean_loss)`` after each epoch.

    Returns:
      The trained variables (``{"params": ...}``), to use as ``functools.partial(model.apply, variables)``.

    Raises:
      ValueError: when the lengths of ``images`` and ``labels`` differ or a setting is out of range.

    >>> from recon_jax.models import MLP
    >>> x = jax.random.normal(jax.random.key(1), (64, 4)); y = (x[:, 0] > 0).astype(jnp.int32)
    >>> v = train_classifier(MLP(features=(8, 2)), x, y, jax.random.key(0), epochs=30, batch_size=16,
    ...                      learning_rate=1e-2)
    >>> float(jnp.mean(MLP(features=(8, 2)).apply(v, x).argmax(-1) == y)) > 0.9
    True
    """
    images = jnp.asarray(images)
    labels = jnp.asarray(labels)
    n = images.shape[0]
    if labels.shape[:1] != (n,):
        raise ValueError(f"images and labels must have the same length; got {n} and {labels.shape[:1]}")
    if int(epochs) != epochs or epochs < 0:
        raise ValueError(f"epochs must be an integer >= 0; got {epochs!r}")
    if int(batch_size) != batch_size or not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be an integer in [1, {n}]; got {batch_size!r}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be in (0, inf); got {learning_rate!r}")
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay must be in [0, inf); got {weight_decay!r}")
    init_key, shuffle_key = jax.random.split(key)
    if params is None:
        params = model.init(init_key, images[:1])
    tx = optax.adamw(learning_rate, weight_decay=weight_decay)
    opt_state = tx.init(params)
    steps = n // int(batch_size)

    def loss_fn(p, xb, yb):
        return jnp.mean(softmax_cross_entropy(model.apply(p, xb), yb))

    @jax.jit
    def run_epoch(params, opt_state, epoch_key):
        perm = threefry.permutation(epoch_key, n)[: steps * batch_size]  # = jax.random.permutation, bitwise
        perm = perm.reshape(steps, batch_size)

        def step(carry, idx):
            p, s = carry
            loss, grads = jax.value_and_grad(loss_fn)(p, images[idx], labels[idx])
            updates, s = tx.update(grads, s, p)
            return (optax.apply_updates(p, updates), s), loss

        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), perm)
        return params, opt_state, losses.mean()

    for epoch in range(int(epochs)):
        params, opt_state, mean_loss = run_epoch(params, opt_state, jax.random.fold_in(shuffle_key, epoch))
        if epoch_callback is not None:
            epoch_callback(epoch, params, mean_loss)
    return params
