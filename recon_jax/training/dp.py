"""Per-example gradients, clipping (flat or per layer) and the privatised gradient of one DP-SGD step.

DP-SGD (Abadi et al. 2016; Biswas et al. Alg. 1; Balle et al. Sec. VI-D uses the full-batch variant, DP-GD):
for a batch of B examples, compute each example's gradient g_i, flatten it, clip it to l2 norm at most C,
sum, and release ``mechanism.privatize(key, sum_i clip(g_i), C, B)`` (for the Gaussian mechanism
``(sum_i clip(g_i) + N(0, C^2 sigma^2 I)) / B``).

Clipping modes:

- ``"flat"``: ``g_i <- g_i / max(1, ||g_i|| / C)`` on the whole flattened gradient (Biswas et al. Alg. 1 line 7).
- ``"per_layer"``: each layer's block (parameters sharing the top-level path component, e.g. ``Dense_0``) is
  clipped to ``C / sqrt(L)`` for L layers, so the whole per-example gradient still has norm at most C and the
  mechanism's sensitivity is unchanged (the Opacus-style per-layer clipping Biswas et al. Sec. VII discuss).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from recon_jax.mechanisms.base import Mechanism
from recon_jax.models.adapters import ModelFns
from recon_jax.models.losses import softmax_cross_entropy
from recon_jax.models.flatten import Layout, layout_of

__all__ = [
    "CLIPPING_MODES",
    "softmax_cross_entropy",
    "per_example_gradients",
    "layer_groups",
    "clip_gradients",
    "privatized_gradient",
]

CLIPPING_MODES = ("flat", "per_layer")


def per_example_gradients(model_fns: ModelFns, params, x: jax.Array, y: jax.Array,
                          loss_fn: Callable = softmax_cross_entropy) -> jax.Array:
    """Flattened per-example gradients ``[B, P]`` of ``loss_fn(apply(params, x_i), y_i)`` (``vmap(grad)``).

    >>> from recon_jax.models import from_flax, biswas_mlp
    >>> fns = from_flax(biswas_mlp())
    >>> params = fns.init(jax.random.key(0), jnp.zeros((1, 256)))
    >>> per_example_gradients(fns, params, jnp.ones((3, 256)), jnp.arange(3)).shape
    (3, 13700)
    """

    def one(xi, yi):
        g = jax.grad(lambda p: loss_fn(model_fns.apply(p, xi[None]), yi[None])[0])(params)
        return ravel_pytree(g)[0]

    return jax.vmap(one)(x, y)


def layer_groups(layout: Layout) -> tuple[np.ndarray, int]:
    """Group id of every flat coordinate (by the first path component) and the number of groups.

    >>> ids, n = layer_groups(layout_of({"l1": {"w": jnp.zeros(2), "b": jnp.zeros(1)}, "l2": {"w": jnp.zeros(1)}}))
    >>> ids.tolist(), n
    ([0, 0, 0, 1], 2)
    """
    names: dict[str, int] = {}
    ids = np.zeros(layout.size, dtype=np.int32)
    for e in layout.entries:
        top = e.path.split("/")[0]
        gid = names.setdefault(top, len(names))
        ids[e.offset:e.offset + e.size] = gid
    return ids, len(names)


def clip_gradients(grads: jax.Array, clip_norm: float, clipping: str = "flat",
                   layout: Layout | None = None) -> jax.Array:
    """Clips each row of ``grads`` ``[B, P]`` to l2 norm at most ``clip_norm`` (flat or per layer).

    Args:
      grads: flattened per-example gradients ``[B, P]``.
      clip_norm: C > 0.
      clipping: ``"flat"`` or ``"per_layer"`` (each of the L layers clipped to ``C / sqrt(L)``).
      layout: the parameter layout (required for ``"per_layer"``).

    Returns:
      The clipped gradients, same shape.

    >>> clip_gradients(jnp.array([[3.0, 4.0], [0.3, 0.4]]), 1.0).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
    """
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
    if clipping not in CLIPPING_MODES:
        raise ValueError(f"clipping must be one of {CLIPPING_MODES}, got {clipping!r}")
    tiny = jnp.finfo(grads.dtype).tiny
    if clipping == "flat":
        norms = jnp.sqrt(jnp.sum(grads * grads, axis=-1, keepdims=True))
        return grads * jnp.minimum(1.0, clip_norm / jnp.maximum(norms, tiny))
    if layout is None:
        raise ValueError("layout is required for clipping='per_layer'")
    if layout.size != grads.shape[-1]:
        raise ValueError(f"layout size {layout.size} does not match grads of shape {grads.shape}")
    ids, n_groups = layer_groups(layout)
    ids = jnp.asarray(ids)
    sq = jax.vmap(lambda g: jax.ops.segment_sum(g * g, ids, num_segments=n_groups))(grads.reshape(-1, grads.shape[-1]))
    sq = sq.reshape(grads.shape[:-1] + (n_groups,))
    factor = jnp.minimum(1.0, (clip_norm / np.sqrt(n_groups)) / jnp.maximum(jnp.sqrt(sq), tiny))
    return grads * jnp.take(factor, ids, axis=-1)


def privatized_gradient(model_fns: ModelFns, params, x: jax.Array, y: jax.Array, key: jax.Array, *,
                        clip_norm: float, mechanism: Mechanism, clipping: str = "flat",
                        weights: jax.Array | None = None, loss_fn: Callable = softmax_cross_entropy,
                        ) -> jax.Array:
    """The released (noisy, clipped, averaged) flat gradient of one DP-SGD step on the batch ``(x, y)``.

    Args:
      model_fns: the model.
      params: parameters at which the gradient is taken.
      x, y: the batch ``[B, ...]``, ``[B]``.
      key: the noise key of this step.
      clip_norm: C > 0.
      mechanism: a :class:`recon_jax.mechanisms.Mechanism` (``GaussianMechanism``, ``NoNoise``, VMF, ...).
      clipping: ``"flat"`` or ``"per_layer"``.
      weights: optional ``[B]`` 0/1 mask of the examples that count (default: all); the batch size given to
        the mechanism is ``sum(weights)``.
      loss_fn: per-example loss ``(logits, labels) -> [B]``.

    Returns:
      The flat noisy mean gradient ``[P]`` (unravel with :func:`recon_jax.models.unravel`).

    >>> from recon_jax.models import from_flax, biswas_mlp
    >>> from recon_jax.mechanisms import NoNoise
    >>> fns = from_flax(biswas_mlp())
    >>> params = fns.init(jax.random.key(0), jnp.zeros((1, 256)))
    >>> g = privatized_gradient(fns, params, jnp.ones((4, 256)), jnp.arange(4), jax.random.key(1),
    ...                         clip_norm=1.0, mechanism=NoNoise())
    >>> bool(jnp.linalg.norm(g) <= 1.0 + 1e-6)
    True
    """
    grads = per_example_gradients(model_fns, params, x, y, loss_fn)
    layout = layout_of(params) if clipping == "per_layer" else None
    clipped = clip_gradients(grads, clip_norm, clipping, layout)
    if weights is None:
        total, count = jnp.sum(clipped, axis=0), x.shape[0]
    else:
        w = jnp.asarray(weights, clipped.dtype)
        total, count = w @ clipped, jnp.sum(w)
    return mechanism.privatize(key, total, clip_norm, count)
