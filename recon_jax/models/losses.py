"""Losses on model outputs, shared by training, the shadow engine and the gradient attacks."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["softmax_cross_entropy", "reconstruction_loss"]


def softmax_cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Per-example softmax cross-entropy ``[N, C] -> [N]``, with integer labels ``[N]`` or soft targets ``[N, C]``.

    Which one ``labels`` is follows from its rank (static under ``jit``): one less than ``logits`` means class
    indices, the same rank means targets (one-hot or soft): ``-sum_c t_c log softmax(logits)_c``, as
    ``optax.softmax_cross_entropy``.

    >>> float(softmax_cross_entropy(jnp.zeros((1, 4)), jnp.array([2]))[0])  # log 4
    1.3862943649291992
    >>> round(float(softmax_cross_entropy(jnp.zeros((1, 4)), jnp.eye(4)[2:3])[0]), 6)  # the same, one-hot
    1.386294
    >>> softmax_cross_entropy(jnp.zeros((2, 4)), jnp.zeros((3,), jnp.int32))
    Traceback (most recent call last):
    ...
    ValueError: labels must have shape (2,) (class indices) or (2, 4) (targets) for logits of shape (2, 4); got (3,)
    """
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels)
    if labels.shape == logits.shape:
        return -jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1)
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels must have shape {logits.shape[:-1]} (class indices) or {logits.shape} (targets) "
                         f"for logits of shape {logits.shape}; got {labels.shape}")
    logz = jax.nn.logsumexp(logits, axis=-1)
    # a one-hot product (fused elementwise) rather than a gather, whose gradient is a scatter (slow on CPU)
    onehot = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    return logz - jnp.sum(onehot * logits, axis=-1)


def reconstruction_loss(targets: jax.Array, outputs: jax.Array, mae_weight: float = 1.0,
                        mse_weight: float = 1.0) -> jax.Array:
    """The MAE + MSE objective of Balle et al. (Table V), averaged over the batch and all coordinates.

    >>> import jax.numpy as jnp
    >>> float(reconstruction_loss(jnp.zeros((1, 2)), jnp.array([[0.5, 0.5]])))
    0.75
    """
    diff = outputs - targets
    return mae_weight * jnp.mean(jnp.abs(diff)) + mse_weight * jnp.mean(diff**2)
