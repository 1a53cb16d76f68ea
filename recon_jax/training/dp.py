"""Per-example gradients, clipping (flat or per layer) and the privatised gradient of one DP-SGD step.

DP-SGD (Abadi et al. 2016; Biswas et al. Alg. 1; Balle et al. Sec. VI-D uses the full-batch variant, DP-GD):
for a batch of B examples, compute each example's gradient g_i, flatten it, clip it to l2 norm at most C,
sum, and release ``mechanism.privatize(key, sum_i clip(g_i), C, B)`` (for the Gaussian mechanism
``(sum_i clip(g_i) + N(0, C^2 sigma^2 I)) / B``).

Clipping modes:

- ``"flat"``: ``g_i <- g_i / max(1, ||g_i|| / C)`` on the whole flattened gradient (Biswas et al. Alg. 1 line 7).
- ``"per_layer"``: each layer's block (parameters sharing the first key of their pytree path, e.g. ``Dense_0``,
  or haiku's ``mlp/~/linear_0``: :func:`layer_groups`) is clipped to ``C / sqrt(L)`` for L layers, so the whole
  per-example gradient still has norm at most C and the mechanism's sensitivity is unchanged (the Opacus-style
  per-layer clipping Biswas et al. Sec. VII discuss).

Per-example gradients (``per_example``): ``"vmap"`` materialises the ``[B, P]`` matrix (``vmap(grad)``, optionally
``microbatch_size`` examples at a time), ``"ghost"`` computes the clipped sum without it
(:mod:`recon_jax.training.ghost`; flat clipping, dense-layer models), ``"auto"`` takes ghost clipping where it
applies (:func:`use_ghost_clipping`). Both give the same result up to rounding.

The DP step is one composition of three stages, as in jax_privacy: clip and sum (:func:`clipped_gradient_sum`),
add the mechanism's noise (``mechanism.privatize``), apply the optimizer
(:func:`recon_jax.training.apply_gradient`). :func:`privatized_loss_and_gradient` is the first two for a
:class:`~recon_jax.training.Batch` and an :class:`~recon_jax.training.Algorithm`; the training step
(:func:`recon_jax.training.make_train_step`, scanned by :func:`recon_jax.training.train` and by the shadow
engine) adds the third. The games of :mod:`recon_jax.attacks.canaries` and :mod:`recon_jax.attacks.prior_aware`
run the same stages (D-'s sum from :func:`clipped_gradient_sum`, the Gaussian mechanism's noise, then
:func:`~recon_jax.training.apply_gradient`), scoring the released sum between the second and the third.

The clipping bound at any matmul precision. The mechanism's sensitivity is C, so each example's term of the clipped
sum must have norm at most C whatever ``jax.default_matmul_precision`` is. At JAX's default a GPU rounds the
operands of float32 matrix products to TF32 (relative error up to ``2^-11``) and a TPU to bfloat16 (``2^-8``), and
rounding the entries of a clipped vector can lengthen it by that much (before the sums below were pinned, terms
exceeded C by up to 4e-4 on the ghost path and 8e-5 on the vmap path with TF32 products emulated, by up to 2e-3
and 6e-4 with bfloat16). The bound is structural:

1. The norm that sets an example's clip factor is the norm of the very float32 vectors that are then summed,
   computed with elementwise squares and reductions (no matrix product) or with products at
   ``Precision.HIGHEST``: on the ``vmap`` path ``||g_i||`` (or each layer block's norm) of the materialised row
   (:func:`clip_gradients`); on the ghost path ``||a_i||^2 ||delta_i||^2 + ||delta_i||^2`` of the layer inputs
   and output gradients that the summing product then uses (:func:`~recon_jax.training.ghost.ghost_squared_norms`).
   The forward and backward passes run at the backend's default precision; that changes g_i, which is still a
   function of example i and the parameters alone, but not that the vector whose norm is clipped is the vector
   that is summed.
2. The clipped terms are summed by products at ``Precision.HIGHEST`` (:func:`weighted_row_sum`; the ghost kernel
   product ``delta^T diag(c w) a``), where each entry of a term is formed with one float32 rounding
   (``fl(w_i c_i g_ij)``, ``fl(fl(w_i c_i delta_io) a_ij)``): relative error at most ``u = 2^-24`` per entry, so
   the summing product cannot lengthen a term by more than a factor ``1 + u``, on any backend.
3. So a term's norm is at most ``|w_i| C sqrt(s / s_hat) (1 + 5u)`` (to first order: the square root, the division
   and three products each round once), with ``s`` the exact squared norm of the float32 vectors and ``s_hat`` its
   float32 computation: ``|s_hat / s - 1| <= n u`` for a sum of n squares in the worst case, a few u in practice
   (tests/training/test_dp_precision.py checks ``C (1 + 1e-6)`` on every path with TF32 and bfloat16 products
   emulated). For ghost clipping of inputs with extra axes (T rows per example) the
   norm ``sum_{t,s} (a_t . a_s)(delta_t . delta_s)`` can cancel, which multiplies that error by the cancellation
   ratio, as in any float32 evaluation of the norm of a sum of outer products; still not by the matmul precision.

Outside the bound, and the same at every precision as in any floating-point DP-SGD: the float32 accumulation of the
B terms into one sum, and the noise (``sigma C`` times elementwise normals; the VMF sampler's one product, its
tangent projection, is at ``HIGHEST``). ``HIGHEST`` is float32 on a GPU and 6-pass bfloat16 (float32 accuracy) on a
TPU; on a CPU every float32 product is already full precision, so the pins leave CPU results bitwise unchanged.
The games (:mod:`recon_jax.attacks.prior_aware`, :mod:`recon_jax.attacks.canaries`) take their clipped sums from
here; the linear-layer attack's DP step (:mod:`recon_jax.attacks.linear_layer`) forms its own the same way.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from recon_jax.mechanisms.base import Mechanism, NoNoise
from recon_jax.models.adapters import ModelFns
from recon_jax.models.losses import softmax_cross_entropy
from recon_jax.models.flatten import Layout, layout_of
from recon_jax.training.algorithms import CLIPPING_MODES, PER_EXAMPLE_MODES, Algorithm
from recon_jax.training.batch import Batch
from recon_jax.training.ghost import ghost_clipped_sum, ghost_supported

__all__ = [
    "softmax_cross_entropy",
    "per_example_gradients",
    "layer_groups",
    "clip_gradients",
    "use_ghost_clipping",
    "clipped_gradient_sum",
    "weighted_row_sum",
    "privatized_loss_and_gradient",
    "privatized_gradient",
]



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


def layer_groups(layout) -> tuple[np.ndarray, int]:
    """Group id of every flat coordinate (one group per layer) and the number of groups.

    A layer is the first key of a parameter's pytree path: a flax module (``Dense_0``) or a haiku module
    (``mlp/~/linear_0``; haiku's module names contain ``/``, so the ``/``-joined layout path cannot be split at its
    first ``/``). Group ids follow the flat (``ravel_pytree``) order of first appearance.

    Args:
      layout: the parameter pytree (arrays or shapes), or its :class:`~recon_jax.models.Layout`: the layer is the
        first of an entry's ``keys`` (the pytree path, as :func:`~recon_jax.models.layout_of` records it), exact
        for haiku module names with ``/`` (``hk.name_scope``) too. A Layout built by hand needs its entries'
        ``keys`` where a key contains ``/``, as :func:`~recon_jax.models.unravel` does.

    Returns:
      ``(ids [P] int32, number of groups)``.

    >>> ids, n = layer_groups(layout_of({"l1": {"w": jnp.zeros(2), "b": jnp.zeros(1)}, "l2": {"w": jnp.zeros(1)}}))
    >>> ids.tolist(), n
    ([0, 0, 0, 1], 2)
    >>> haiku_like = {"mlp/~/linear_0": {"w": jnp.zeros(2)}, "mlp/~/linear_1": {"w": jnp.zeros(1)}}
    >>> layer_groups(haiku_like)[0].tolist(), layer_groups(layout_of(haiku_like))[0].tolist()
    ([0, 0, 1], [0, 0, 1])
    """
    if not isinstance(layout, Layout):
        layout = layout_of(layout)
    blocks = [(e.keys[0], e.size) for e in layout.entries]
    names: dict[str, int] = {}
    ids = np.zeros(sum(size for _, size in blocks), dtype=np.int32)
    offset = 0
    for top, size in blocks:
        ids[offset:offset + size] = names.setdefault(top, len(names))
        offset += size
    return ids, len(names)


def clip_gradients(grads: jax.Array, clip_norm: float, clipping: str = "flat",
                   layout: Layout | None = None) -> jax.Array:
    """Clips each row of ``grads`` ``[B, P]`` to l2 norm at most ``clip_norm`` (flat or per layer).

    Args:
      grads: flattened per-example gradients ``[B, P]``.
      clip_norm: C > 0.
      clipping: ``"flat"`` or ``"per_layer"`` (each of the L layers clipped to ``C / sqrt(L)``).
      layout: the parameter pytree or its :class:`~recon_jax.models.Layout` (required for ``"per_layer"``; the
        layers are those of :func:`layer_groups`).

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
    ids, n_groups = layer_groups(layout)
    if ids.size != grads.shape[-1]:
        raise ValueError(f"layout size {ids.size} does not match grads of shape {grads.shape}")
    gg = grads * grads
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    if starts.size == n_groups:
        # Every layer one block of the flat vector (as pytrees flatten; ids number the layers in order, so block k
        # is layer k): static slices, summed in a fixed order on every backend (a segment sum is a scatter-add,
        # which a GPU computes with contended atomics).
        ends = np.r_[starts[1:], ids.size]
        sq = jnp.stack([jnp.sum(gg[..., a:b], axis=-1) for a, b in zip(starts, ends)], axis=-1)
    else:  # a hand-built layout whose layers interleave
        seg = jnp.asarray(ids)
        sq = jax.vmap(lambda g: jax.ops.segment_sum(g, seg, num_segments=n_groups))(gg.reshape(-1, gg.shape[-1]))
        sq = sq.reshape(grads.shape[:-1] + (n_groups,))
    ids = jnp.asarray(ids)
    factor = jnp.minimum(1.0, (clip_norm / np.sqrt(n_groups)) / jnp.maximum(jnp.sqrt(sq), tiny))
    return grads * jnp.take(factor, ids, axis=-1)


def weighted_row_sum(weights: jax.Array, rows: jax.Array) -> jax.Array:
    """``sum_i w_i rows[i]`` (``[B] x [B, ...] -> [...]``) as a full-float32 product on every backend.

    The sum of clipped per-example gradients goes through here: at ``Precision.HIGHEST`` each term is
    ``fl(w_i g_i)``, one rounding per entry, so a term of norm at most C stays at most ``|w_i| C (1 + 2^-24)``.
    At default precision a GPU would first round ``g_i`` to TF32 (a TPU to bfloat16), which can lengthen a
    clipped term by up to ``2^-11`` (``2^-8``) relative (module docstring).

    >>> weighted_row_sum(jnp.array([1.0, 0.0, 2.0]), jnp.array([[1.0, 2.0], [5.0, 5.0], [0.5, 0.25]])).tolist()
    [2.0, 2.5]
    """
    return jnp.matmul(jnp.asarray(weights), rows, precision=jax.lax.Precision.HIGHEST)


def use_ghost_clipping(model_fns: ModelFns, params, x: jax.Array, per_example: str = "auto",
                       clipping: str = "flat") -> bool:
    """Whether the clipped sum takes the ghost-clipping path (:mod:`recon_jax.training.ghost`) for this model.

    Decided statically from shapes (``params`` and ``x`` may be abstract or traced): ``"vmap"`` never,
    ``"auto"`` when the clipping is flat and :func:`~recon_jax.training.ghost.ghost_supported`, ``"ghost"``
    always (it raises if the model does not allow it).

    Args:
      model_fns: the model (its ``tap`` is what ghost clipping reads).
      params: parameters (shapes suffice).
      x: a batch of inputs ``[B, ...]`` (shapes suffice).
      per_example: ``"auto"``, ``"ghost"`` or ``"vmap"``.
      clipping: ``"flat"`` or ``"per_layer"`` (ghost clipping is flat only).

    Returns:
      ``True`` for ghost clipping, ``False`` for ``vmap(grad)`` per-example gradients.

    Raises:
      ValueError: on an unknown mode, or ``per_example="ghost"`` where ghost clipping does not apply.

    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> fns = from_flax(balle_mnist_mlp())
    >>> p = jax.eval_shape(fns.init, jax.random.key(0), jnp.zeros((1, 784)))
    >>> use_ghost_clipping(fns, p, jnp.zeros((4, 784))), use_ghost_clipping(fns, p, jnp.zeros((4, 784)), "vmap")
    (True, False)
    """
    if per_example not in PER_EXAMPLE_MODES:
        raise ValueError(f"per_example must be one of {PER_EXAMPLE_MODES}, got {per_example!r}")
    if clipping not in CLIPPING_MODES:
        raise ValueError(f"clipping must be one of {CLIPPING_MODES}, got {clipping!r}")
    if per_example == "vmap":
        return False
    ghost = clipping == "flat" and ghost_supported(model_fns.tap, params, x)
    if per_example == "ghost" and not ghost:
        raise ValueError("per_example='ghost' needs flat clipping and a model whose parameters are all in dense "
                         "layers (flax nn.Dense / haiku hk.Linear, each called once); use 'auto' or 'vmap'")
    return ghost


def _losses_and_clipped_gradients(model_fns, params, x, y, clip_norm, clipping, layout, loss_fn):
    """Per-example losses ``[B]`` and clipped flat per-example gradients ``[B, P]`` (``vmap(value_and_grad)``)."""

    def one(xi, yi):
        v, g = jax.value_and_grad(lambda p: loss_fn(model_fns.apply(p, xi[None]), yi[None])[0])(params)
        return v, ravel_pytree(g)[0]

    v, g = jax.vmap(one)(x, y)
    return v, clip_gradients(g, clip_norm, clipping, layout)


def _clipped_sum(model_fns, params, x, y, weights, *, clip_norm, clipping, ghost, microbatch_size, loss_fn,
                 per_model_batches=False, input_sq_norms=None):
    """``(sum_i w_i loss_i, sum_i w_i clip(g_i))`` with the path already chosen (see :func:`clipped_gradient_sum`)."""
    if ghost:
        v, tree, _ = ghost_clipped_sum(model_fns.tap, params, x, y, clip_norm, weights, loss_fn, per_model_batches,
                                       input_sq_norms)
        return (jnp.sum(v) if weights is None else weighted_row_sum(weights, v)), ravel_pytree(tree)[0]
    layout = params if clipping == "per_layer" else None  # layer_groups reads the pytree's first keys
    b, m = x.shape[0], microbatch_size
    if m is None or m >= b:
        v, g = _losses_and_clipped_gradients(model_fns, params, x, y, clip_norm, clipping, layout, loss_fn)
        if weights is None:
            return jnp.sum(v), jnp.sum(g, axis=0)
        w = jnp.asarray(weights, g.dtype)
        return weighted_row_sum(w, v), weighted_row_sum(w, g)
    # Microbatches of m examples in a scan (the last one padded with weight-0 rows): memory O(m P), not O(B P).
    # The padding rows are copies of real rows (pad < m <= b), never zeros: a model need not be finite at x = 0
    # (one that normalises each input gives NaN there, and 0 * NaN = NaN would poison the whole sum).
    flat = jax.eval_shape(lambda p: ravel_pytree(p)[0], params)
    w = jnp.ones((b,), flat.dtype) if weights is None else jnp.asarray(weights, flat.dtype)
    n_mb = -(-b // m)
    pad = n_mb * m - b
    xp = jnp.concatenate([x, x[:pad]]) if pad else x
    yp = jnp.concatenate([y, y[:pad]]) if pad else y
    wp = jnp.concatenate([w, jnp.zeros((pad,), w.dtype)]) if pad else w

    def body(carry, mb):
        acc, lacc = carry
        v, g = _losses_and_clipped_gradients(model_fns, params, mb[0], mb[1], clip_norm, clipping, layout, loss_fn)
        return (acc + weighted_row_sum(mb[2], g), lacc + weighted_row_sum(mb[2], v)), None

    mbs = (xp.reshape((n_mb, m) + x.shape[1:]), yp.reshape((n_mb, m)), wp.reshape((n_mb, m)))
    carry0 = (jnp.zeros(flat.shape, flat.dtype), jnp.zeros((), flat.dtype))
    (total, loss_sum), _ = jax.lax.scan(body, carry0, mbs)
    return loss_sum, total


def _check_clipping(clip_norm, microbatch_size):
    """(``clipping`` and ``per_example`` are checked by :func:`use_ghost_clipping`.)"""
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
    if microbatch_size is not None and not (isinstance(microbatch_size, int) and microbatch_size >= 1):
        raise ValueError(f"microbatch_size must be None or an integer >= 1, got {microbatch_size!r}")


def clipped_gradient_sum(model_fns: ModelFns, params, x: jax.Array, y: jax.Array, *, clip_norm: float,
                         clipping: str = "flat", weights: jax.Array | None = None, per_example: str = "vmap",
                         microbatch_size: int | None = None, loss_fn: Callable = softmax_cross_entropy,
                         ) -> tuple[jax.Array, jax.Array]:
    """The weighted sum of the clipped per-example gradients of a batch, and of the per-example losses.

    ``sum_i w_i clip_C(g_i)`` with ``g_i`` the flat gradient of ``loss_fn(apply(params, x_i), y_i)``; this is
    what a DP mechanism privatises (:func:`privatized_loss_and_gradient` adds the mechanism).

    Args:
      model_fns: the model.
      params: parameters at which the gradients are taken.
      x, y: the batch ``[B, ...]``, ``[B]``.
      clip_norm: C > 0.
      clipping: ``"flat"`` or ``"per_layer"`` (:func:`clip_gradients`).
      weights: optional ``[B]`` weights ``w_i`` (default 1).
      per_example: ``"vmap"`` (default: materialise ``[B, P]`` per-example gradients), ``"ghost"`` or
        ``"auto"`` (ghost clipping where :func:`use_ghost_clipping` allows; equal up to rounding).
      microbatch_size: on the ``vmap`` path, compute per-example gradients this many at a time (memory);
        ignored by ghost clipping.
      loss_fn: per-example loss ``(logits, labels) -> [B]``.

    Returns:
      ``(loss_sum [], gradient_sum [P])``: ``sum_i w_i loss_i`` and the flat clipped sum.

    Raises:
      ValueError: on invalid ``clip_norm``, ``clipping``, ``per_example`` or ``microbatch_size``.

    >>> from recon_jax.models import from_flax, biswas_mlp
    >>> fns = from_flax(biswas_mlp())
    >>> params = fns.init(jax.random.key(0), jnp.zeros((1, 256)))
    >>> x, y = jnp.ones((5, 256)), jnp.arange(5)
    >>> _, a = clipped_gradient_sum(fns, params, x, y, clip_norm=0.1)
    >>> _, b = clipped_gradient_sum(fns, params, x, y, clip_norm=0.1, per_example="ghost")
    >>> _, c = clipped_gradient_sum(fns, params, x, y, clip_norm=0.1, microbatch_size=2)
    >>> bool(jnp.allclose(a, b, atol=1e-6) and jnp.allclose(a, c, atol=1e-6)), bool(jnp.linalg.norm(a) <= 0.5 + 1e-6)
    (True, True)
    """
    _check_clipping(clip_norm, microbatch_size)
    ghost = use_ghost_clipping(model_fns, params, x, per_example, clipping)
    return _clipped_sum(model_fns, params, x, y, weights, clip_norm=clip_norm, clipping=clipping, ghost=ghost,
                        microbatch_size=microbatch_size, loss_fn=loss_fn)


def privatized_loss_and_gradient(model_fns: ModelFns, params, batch: Batch, key: jax.Array,
                                 algorithm: Algorithm) -> tuple[jax.Array, jax.Array]:
    """The mean loss and the released gradient of one DP step of ``algorithm``: clip, then noise.

    The one DP gradient: the training step (:func:`recon_jax.training.make_train_step`, hence
    :func:`recon_jax.training.train` and the shadow engine) and :func:`privatized_gradient` call it; the step then
    applies the algorithm's optimizer. Composed of two stages:

    1. *clip*: ``S = sum_i w_i clip_C(g_i) + t clip_C(g_target)`` over ``batch`` (:func:`clipped_gradient_sum`'s
       paths: ``algorithm.per_example``, ``clipping``, ``microbatch_size``; the target term only with
       ``batch.target_x``, weighted by ``batch.target_weight``, default 1);
    2. *noise*: ``algorithm.mechanism.privatize(key, S, C, N)`` (no mechanism: ``NoNoise``), with the public
       normaliser ``N = sum_i w_i + 1`` with a target term, ``sum_i w_i`` without (``B`` without weights; rows
       marked ``batch.target_rows`` count 1 whatever their weight), or ``algorithm.batch_size`` for
       Poisson-sampled algorithms (the expected batch size, as in the accounted mechanism). The target slot
       counts 1 whatever its weight ``t``: with ``t = 0`` (the MIA "out" model) the release is ``(S_- + Z) / N``
       and with ``t = 1`` ``(S_- + clip(g_target) + Z) / N``, which differ by one clipped gradient (norm <= C),
       the add/remove sensitivity the accountants assume. (A realised ``N = n + t`` would make them differ by
       ``clip(g_target) - S_- / n`` in sum units, up to 2C.) Non-private training keeps the realised count
       (:func:`~recon_jax.training.make_train_step`).

    The loss is ``(sum_i w_i loss_i + t loss_target) / N`` with ``algorithm.loss_fn``.

    Args:
      model_fns: the model.
      params: parameters at which the gradient is taken.
      batch: the step's :class:`~recon_jax.training.Batch` (``x``, ``y``, optional ``weights``, target term and
        ``x_sq_norms`` for ghost clipping).
      key: the noise key of this step.
      algorithm: a DP :class:`~recon_jax.training.Algorithm` (``clip_norm`` set), e.g. from
        :func:`~recon_jax.training.dp_gd` or :func:`~recon_jax.training.dp_sgd`.

    Returns:
      ``(loss [], released [P])``; unravel the flat gradient with :func:`recon_jax.models.unravel`.

    Raises:
      ValueError: if ``algorithm`` does not clip (``clip_norm`` None), or ``per_example="ghost"`` where ghost
        clipping does not apply.

    >>> from recon_jax.models import from_flax, biswas_mlp
    >>> from recon_jax.training import Batch, dp_gd
    >>> fns = from_flax(biswas_mlp())
    >>> params = fns.init(jax.random.key(0), jnp.zeros((1, 256)))
    >>> x, y = jnp.ones((4, 256)), jnp.arange(4)
    >>> alg = dp_gd(1.0, per_example="vmap")  # clipping, no noise
    >>> # the target as a separate term equals it as a fourth row (at full-precision products: a GPU's default
    >>> # TF32 rounds the batched rows' operands but not the lone target's)
    >>> with jax.default_matmul_precision("highest"):
    ...     loss, g = privatized_loss_and_gradient(fns, params, Batch(x[:3], y[:3], target_x=x[3], target_y=y[3]),
    ...                                            jax.random.key(1), alg)
    ...     _, g4 = privatized_loss_and_gradient(fns, params, Batch(x, y), jax.random.key(1), alg)
    >>> bool(jnp.allclose(g, g4, atol=1e-6))
    True
    """
    alg = algorithm
    if alg.clip_norm is None:
        raise ValueError("algorithm must clip (clip_norm > 0) for a DP gradient; got clip_norm=None "
                         "(use recon_jax.training.dp_gd or dp_sgd)")
    mechanism = alg.mechanism if alg.mechanism is not None else NoNoise()
    x, y, weights = batch.x, batch.y, batch.weights
    ghost = use_ghost_clipping(model_fns, params, x, alg.per_example, alg.clipping)
    kw = dict(clip_norm=alg.clip_norm, clipping=alg.clipping, ghost=ghost, loss_fn=alg.loss_fn)
    # stage 1: clip (and sum)
    loss_sum, total = _clipped_sum(model_fns, params, x, y, weights, microbatch_size=alg.microbatch_size,
                                   per_model_batches=alg.batch_size is not None, input_sq_norms=batch.x_sq_norms,
                                   **kw)
    # The normaliser is public: the target slot counts 1 whatever its weight (a gathered target row as the separate
    # term), so the "in" and "out" releases differ by t * clip(g_target) / N alone (Batch.target_weight).
    if weights is None:
        count = x.shape[0]
    else:
        w_count = jnp.asarray(weights, total.dtype)
        if batch.target_rows is not None:
            w_count = jnp.where(batch.target_rows, jnp.ones((), total.dtype), w_count)
        count = jnp.sum(w_count)
    if batch.target_x is not None:
        t_w = jnp.asarray(1.0 if batch.target_weight is None else batch.target_weight, total.dtype)
        tx, ty = jnp.asarray(batch.target_x)[None], jnp.asarray(batch.target_y).reshape((1,))
        t_loss, t_grad = _clipped_sum(model_fns, params, tx, ty, None, microbatch_size=None, **kw)
        total = total + t_w * t_grad
        loss_sum = loss_sum + t_w * t_loss
        # Public, so it no longer involves t_w. The barrier keeps it a runtime divisor, as it was with t_w in it:
        # a compile-time 13.0 lets XLA multiply by a rounded reciprocal instead, one ulp off weight-1 results.
        count = jax.lax.optimization_barrier(count + jnp.ones((), total.dtype))
    if alg.poisson:
        count = jnp.asarray(alg.batch_size, total.dtype)  # the expected batch size, never the realised one
    # stage 2: noise (stage 3, the optimizer, is the training step's)
    return loss_sum / count, mechanism.privatize(key, total, alg.clip_norm, count)


def privatized_gradient(model_fns: ModelFns, params, x: jax.Array, y: jax.Array, key: jax.Array, *,
                        clip_norm: float, mechanism: Mechanism, clipping: str = "flat",
                        weights: jax.Array | None = None, loss_fn: Callable = softmax_cross_entropy,
                        per_example: str = "vmap") -> jax.Array:
    """The released (noisy, clipped, averaged) flat gradient of one DP-SGD step on the batch ``(x, y)``.

    :func:`privatized_loss_and_gradient` without the loss, for one released gradient without building an
    :class:`~recon_jax.training.Algorithm`: the noisy sum is divided by ``sum(weights)`` (the batch size).

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
      per_example: ``"vmap"`` (default), ``"ghost"`` or ``"auto"`` (see :func:`clipped_gradient_sum`).

    Returns:
      The flat noisy mean gradient ``[P]`` (unravel with :func:`recon_jax.models.unravel`).

    Raises:
      ValueError: on invalid ``clip_norm``, ``clipping`` or ``per_example``.

    >>> from recon_jax.models import from_flax, biswas_mlp
    >>> from recon_jax.mechanisms import NoNoise
    >>> fns = from_flax(biswas_mlp())
    >>> params = fns.init(jax.random.key(0), jnp.zeros((1, 256)))
    >>> g = privatized_gradient(fns, params, jnp.ones((4, 256)), jnp.arange(4), jax.random.key(1),
    ...                         clip_norm=1.0, mechanism=NoNoise())
    >>> bool(jnp.linalg.norm(g) <= 1.0 + 1e-6)
    True
    """
    algorithm = Algorithm(clip_norm=clip_norm, mechanism=mechanism, clipping=clipping, loss_fn=loss_fn,
                          per_example=per_example)
    return privatized_loss_and_gradient(model_fns, params, Batch(x, y, weights), key, algorithm)[1]
