"""Clipped per-example gradient sums without materialising per-example gradients ("ghost clipping").

For a dense layer ``z = a W + b`` the gradient of example i's loss is ``a_i^T delta_i`` (kernel) and ``delta_i``
(bias), where ``delta_i = d loss_i / d z_i``. Its squared norm is therefore ``||a_i||^2 ||delta_i||^2 +
||delta_i||^2`` for one input row per example (Goodfellow 2015), and for inputs with extra axes ``[B, T, d]``
``sum_{t,s} (a_t . a_s)(delta_t . delta_s) + ||sum_t delta_t||^2`` (Li et al. 2022). The clipped sum
``sum_i c_i g_i`` with ``c_i = min(1, C / ||g_i||)`` is ``a^T diag(c) delta`` per layer. So one forward pass,
one backward pass to the layer outputs, and one weighted outer product per layer give exactly what
``vmap(grad)`` + clip + sum gives, at about the cost of an ordinary gradient and without the ``[B, P]``
per-example gradient matrix (DP-GD on the Balle MLP at n = 1,000 is tens of times faster; see
``benchmarks/shadow.py``).

This applies when *every* parameter belongs to a dense layer called once per forward pass (flax ``nn.Dense``,
haiku ``hk.Linear``), and axis 0 of every dense input is the example axis (row i a function of example i alone,
checked on probe values, not only shapes): MLPs such as the Balle and Biswas models. Other models (convolutions,
normalisation, shared layers, time-major or batch-mixing layers) fall back to ``vmap(grad)``;
:func:`ghost_supported` tells which path a model takes.

The model's *tap* (:mod:`recon_jax.models.taps`, attached by :func:`recon_jax.models.from_flax` and
:func:`~recon_jax.models.from_haiku`) gives each dense call's input and adds perturbations to its output, which is
what the weighted outer products need.

Precision. Ghost clipping never materialises ``g_i``; example i's term of the clipped sum is the outer product
``fl(c_i w_i delta_i)^T a_i`` inside the product ``delta^T diag(c w) a``. Its norm is at most C (times ``1 + O(u)``,
``u = 2^-24``) whatever the matmul precision, because (1) ``c_i`` comes from ``||a_i||^2 ||delta_i||^2 +
||delta_i||^2`` computed from the same float32 ``a`` and ``delta`` arrays that enter the product, with elementwise
squares and reductions (the ``[B, T, T]`` Gram products of inputs with extra axes at ``Precision.HIGHEST``), and (2)
the summing product runs at ``Precision.HIGHEST``, so each entry of a term carries one float32 rounding instead of
the TF32 (GPU) or bfloat16 (TPU) rounding of ``a_i`` and ``delta_i`` that default precision would add (up to
``2^-11`` / ``2^-8`` relative, enough to lengthen a clipped term beyond C). The argument in full, with the other
clipping paths: :mod:`recon_jax.training.dp`.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.models.losses import softmax_cross_entropy
from recon_jax.models.taps import (TAP_FAILURES, DenseCall, flax_tap, haiku_tap, leaf_paths, static_calls,
                                   tap_calls)

# DenseCall and the taps live in recon_jax.models.taps (re-exported here for existing imports).
__all__ = ["DenseCall", "ghost_supported", "dense_call_gradients", "ghost_squared_norms", "ghost_clipped_sum",
           "flax_tap", "haiku_tap"]


def ghost_supported(tap: Callable | None, params, x) -> bool:
    """Whether every parameter of ``params`` belongs to exactly one dense call of one forward pass on ``x``.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, balle_mnist_mlp, balle_cifar_cnn
    >>> mlp = from_flax(balle_mnist_mlp())
    >>> ghost_supported(mlp.tap, mlp.init(jax.random.key(0), jnp.zeros((1, 784))), jnp.zeros((2, 784)))
    True
    >>> cnn = from_flax(balle_cifar_cnn())
    >>> cnn_params = jax.eval_shape(cnn.init, jax.random.key(0), jnp.zeros((1, 32, 32, 3)))  # shapes suffice
    >>> ghost_supported(cnn.tap, cnn_params, jnp.zeros((2, 32, 32, 3)))
    False

    Ghost clipping also needs axis 0 of every dense call's input (and of the logits) to be the example axis: row i
    a function of example i alone. Shapes cannot tell (a time-major layer on ``[T, B, d]`` has ``B`` rows when
    ``T == B``, and its ghost "examples" are then time steps), so this is checked on concrete values
    (:func:`_rows_are_examples`): the model is run on a random probe batch and on copies with example 0, and then
    example ``B - 1``, replaced, and only that row of every dense input and of the logits may change.

    The verdict reads only the tap, the shapes and dtypes of ``params`` and ``x`` and the matmul precision, and is
    cached on them (per tap, for as long as the tap lives): the games call this on every call.
    """
    if tap is None:
        return False
    key = _verdict_key(params, x)
    try:
        verdicts = _VERDICTS.setdefault(tap, {})
    except TypeError:  # a tap that cannot be weakly referenced or hashed: judged afresh every time
        return _ghost_verdict(tap, params, x)
    if key not in verdicts:
        verdicts[key] = _ghost_verdict(tap, params, x)
    return verdicts[key]


_VERDICTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per tap, :func:`ghost_supported`'s verdicts by :func:`_verdict_key`: the games call it on every call, and its
probe runs three eager forward passes. An entry lives as long as its tap (the model's ``ModelFns``)."""


def _verdict_key(params, x) -> tuple:
    """What the verdict depends on besides the tap: the parameters' tree and leaf shapes and dtypes, ``x``'s shape
    and dtype (the probe replaces every value by a seeded stand-in), and the matmul precision the probe runs at."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    shapes = tuple((tuple(np.shape(a)), str(jnp.result_type(a))) for a in leaves)
    return (treedef, shapes, tuple(np.shape(x)), str(jnp.result_type(x)), str(jax.config.jax_default_matmul_precision))


def _ghost_verdict(tap: Callable, params, x) -> bool:
    """:func:`ghost_supported` without the cache."""
    leaves = leaf_paths(params)
    if not leaves:
        return False
    calls = tap_calls(tap, params, x)
    if calls is None:  # the tap cannot run the model (e.g. a custom apply signature)
        return False
    seen: set = set()
    for kernel_path, bias_path, in_shape, out_shape, _ in calls:
        for path in (kernel_path, bias_path):
            if path is None:
                continue
            if path in seen or path not in leaves:
                return False
            seen.add(path)
        if len(in_shape) < 2 or in_shape[0] != x.shape[0]:
            return False
        if tuple(leaves[kernel_path].shape) != (in_shape[-1], out_shape[-1]):
            return False
    return seen == set(leaves) and _rows_are_examples(tap, params, x)


def _probe_values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random stand-in values of ``shape`` and ``dtype``: normals for floats, 0/1 for integers and booleans."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def _rows_are_examples(tap: Callable, params, x) -> bool:
    """Whether row i of every dense call's input, and of the logits, depends on example i of ``x`` alone.

    Checked on concrete stand-ins (``params`` and ``x`` may be abstract or traced; only shapes and dtypes are read):
    random parameters (normals scaled by ``1 / sqrt(fan_in)``) and a random probe batch of ``x``'s shape. The
    model runs on the probe and on two copies, one with example 0 and one with example ``B - 1`` redrawn; in every
    dense input and in the logits, every other row must be bitwise unchanged (the same operations on the same
    values; a NaN matches a NaN). A layer that mixes examples (time-major ``[T, B, d]`` with ``T == B``, a batch
    statistic, a permutation or cumulative sum over the batch) changes other rows and fails. Three forward passes,
    once per trace. Any failure of the tap on concrete values counts as "no" (the ``vmap`` path is always right).
    """
    b = x.shape[0]
    if b < 2:
        return True  # one example: every row is its own
    rng = np.random.default_rng(0)

    def stand_in(leaf):
        shape = tuple(np.shape(leaf))
        fan_in = int(np.prod(shape[:-1])) if len(shape) >= 2 else 1
        return (_probe_values(rng, shape, jnp.result_type(leaf)) / np.sqrt(max(fan_in, 1))).astype(
            jnp.result_type(leaf))

    concrete = jax.tree_util.tree_map(stand_in, params)
    probe = _probe_values(rng, tuple(x.shape), jnp.result_type(x))

    def rows(xx):
        logits, recs = tap(concrete, xx, None)
        return [np.asarray(a) for a in jax.tree_util.tree_leaves(logits)] + [np.asarray(r.inputs) for r in recs]

    try:
        with jax.ensure_compile_time_eval():
            base = rows(probe)
            for k in (0, b - 1):
                other = probe.copy()
                redraw = _probe_values(rng, probe.shape[1:], probe.dtype)
                other[k] = redraw if np.issubdtype(probe.dtype, np.inexact) else (probe[k] == 0).astype(probe.dtype)
                changed = rows(other)
                if len(changed) != len(base):
                    return False
                for a, c in zip(base, changed):
                    if a.shape != c.shape or a.ndim == 0 or a.shape[0] != b:
                        return False
                    keep = np.arange(b) != k
                    if not np.array_equal(a[keep], c[keep], equal_nan=True):
                        return False
    except TAP_FAILURES:
        return False
    return True


def _flat3(a):
    """``[B, ..., d] -> [B, T, d]``."""
    return a.reshape((a.shape[0], -1, a.shape[-1]))


def dense_call_gradients(tap: Callable, params, x: jax.Array, y: jax.Array, loss_fn: Callable | None = None):
    """One forward pass and one backward pass to the outputs of every dense call.

    Args:
      tap: the model's tap (``ModelFns.tap``).
      params: parameters.
      x, y: the batch ``[B, ...]``, ``[B]``.
      loss_fn: per-example loss ``(logits, labels) -> [B]`` (default softmax cross-entropy).

    Returns:
      ``(losses [B], calls, inputs, deltas)``: the per-example losses, the dense calls
      (:func:`recon_jax.models.taps.static_calls`), and per call its inputs ``a`` and the gradients
      ``delta = d loss_i / d z_i`` of the summed loss at its outputs ``z = a W + b``. Example i's gradient of
      a call's kernel is ``a_i^T delta_i``, of its bias ``sum_t delta_i[t]``.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, MLP
    >>> fns = from_flax(MLP(features=(5, 3)))
    >>> x, y = jnp.ones((4, 6)), jnp.arange(4) % 3
    >>> losses, calls, inputs, deltas = dense_call_gradients(fns.tap, fns.init(jax.random.key(0), x), x, y)
    >>> losses.shape, len(calls), [a.shape for a in inputs], [d.shape for d in deltas]
    ((4,), 2, [(4, 6), (4, 5)], [(4, 5), (4, 3)])
    """
    return _dense_call_gradients(tap, params, x, y, loss_fn)[:4]


def _dense_call_gradients(tap, params, x, y, loss_fn):
    """:func:`dense_call_gradients` and, per dense call, whether it receives ``x`` itself (static)."""
    if loss_fn is None:
        loss_fn = softmax_cross_entropy
    calls = static_calls(tap, params, x)
    zeros = [jnp.zeros(out_shape, out_dtype) for *_, out_shape, out_dtype in calls]
    reads_x = []  # recorded while tracing: the tap hands x itself to the first layer of an MLP

    def total_loss(perturbations):
        logits, recs = tap(params, x, perturbations)
        reads_x[:] = [r.inputs is x for r in recs]
        losses = loss_fn(logits, y)
        return jnp.sum(losses), (losses, [r.inputs for r in recs])

    (_, (losses, inputs)), deltas = jax.value_and_grad(total_loss, has_aux=True)(zeros)
    return losses, calls, inputs, deltas, tuple(reads_x)


def ghost_squared_norms(calls, inputs, deltas, dtype, input_sq_norms=None) -> jax.Array:
    """``||g_i||^2``, the squared norm of each example's whole gradient, from :func:`dense_call_gradients`.

    Per dense call ``||a_i||^2 ||delta_i||^2`` (one input row per example) or ``sum_{t,s} (a_t . a_s)
    (delta_t . delta_s)`` (inputs ``[B, T, d]``), plus ``||sum_t delta_t||^2`` for its bias; computed in
    ``dtype``. ``input_sq_norms``: optional sequence, one entry per call, of ``None`` or the ``[B]`` squared norms
    ``||a_i||^2`` of that call's (one-row) inputs, used instead of reducing ``a`` again (minibatch training
    gathers them from norms of the fixed set computed once).

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, MLP
    >>> from recon_jax.training import per_example_gradients
    >>> fns = from_flax(MLP(features=(5, 3)))
    >>> x, y = jax.random.normal(jax.random.key(1), (4, 6)), jnp.arange(4) % 3
    >>> params = fns.init(jax.random.key(0), x)
    >>> _, calls, inputs, deltas = dense_call_gradients(fns.tap, params, x, y)
    >>> sq = ghost_squared_norms(calls, inputs, deltas, jnp.float32)
    >>> bool(jnp.allclose(sq, jnp.sum(per_example_gradients(fns, params, x, y) ** 2, -1), rtol=1e-4))
    True
    """
    sq = jnp.zeros((inputs[0].shape[0],) if inputs else (0,), dtype)
    given = [None] * len(calls) if input_sq_norms is None else list(input_sq_norms)
    for (kernel_path, bias_path, *_), a, d, a_sq in zip(calls, inputs, deltas, given):
        a3, d3 = _flat3(a).astype(dtype), _flat3(d).astype(dtype)
        if a3.shape[1] == 1:
            a_sq = jnp.sum(a3[:, 0] ** 2, -1) if a_sq is None else jnp.asarray(a_sq).astype(dtype)
            sq = sq + a_sq * jnp.sum(d3[:, 0] ** 2, -1)
        else:
            hi = jax.lax.Precision.HIGHEST  # a norm that sets a clip factor: full float32 on every backend
            sq = sq + jnp.einsum("bts,bts->b", jnp.einsum("bti,bsi->bts", a3, a3, precision=hi),
                                 jnp.einsum("bto,bso->bts", d3, d3, precision=hi), precision=hi)
        if bias_path is not None:
            sq = sq + jnp.sum(jnp.sum(d3, axis=1) ** 2, -1)
    return sq


def ghost_clipped_sum(tap: Callable, params, x: jax.Array, y: jax.Array, clip_norm: float,
                      weights: jax.Array | None = None, loss_fn: Callable | None = None,
                      per_model_batches: bool = False, input_sq_norms: jax.Array | None = None):
    """Per-example losses and ``sum_i w_i clip_C(g_i)`` as a parameter pytree, via ghost norms.

    Requires :func:`ghost_supported` (checked by the caller once, statically). Equal, up to rounding, to
    ``weights @ clip_gradients(per_example_gradients(...), clip_norm)`` unravelled.

    Args:
      tap: the model's tap (``ModelFns.tap``).
      params: parameters.
      x, y: the batch ``[B, ...]``, ``[B]``.
      clip_norm: C > 0 (flat clipping of each example's whole gradient).
      weights: optional ``[B]`` weights (default 1).
      loss_fn: per-example loss ``(logits, labels) -> [B]`` (default softmax cross-entropy).
      per_model_batches: a layout hint for ``vmap`` over models that each have their own batch (minibatch
        training of many models): each kernel gradient is formed as ``[out, in]`` and transposed behind an
        optimisation barrier. Without it XLA:CPU folds that transpose into the batched product and transposes
        every model's ``[B, in]`` inputs instead (about 3x slower for the Balle MLP). Same values up to float
        rounding; the default (``False``) leaves the choice to XLA, which is right when the inputs are shared by
        all models (full batch: one large product).
      input_sq_norms: optional ``[B]`` squared l2 norms of the rows of ``x`` (flattened). A dense call that
        receives ``x`` itself (the first layer of an MLP) then uses them instead of reducing its ``[B, in]``
        input again: minibatch training gathers them from norms computed once for the fixed set, shared by
        all models. Same values up to float rounding.

    Returns:
      ``(losses [B], clipped_sum pytree, norms [B])``.
    """
    losses, calls, inputs, deltas, reads_x = _dense_call_gradients(tap, params, x, y, loss_fn)
    given = [input_sq_norms if is_x else None for is_x in reads_x] if input_sq_norms is not None else None
    sq = ghost_squared_norms(calls, inputs, deltas, losses.dtype, given)
    norms = jnp.sqrt(sq)
    factor = jnp.minimum(1.0, clip_norm / jnp.maximum(norms, jnp.finfo(sq.dtype).tiny))
    if weights is not None:
        factor = factor * jnp.asarray(weights, factor.dtype)

    leaves = leaf_paths(params)
    grads = {}
    for (kernel_path, bias_path, *_), a, d in zip(calls, inputs, deltas):
        a3, d3 = _flat3(a), _flat3(d)
        dw = d3 * factor[:, None, None].astype(d3.dtype)
        # (dw^T a)^T rather than a^T dw: the contraction then transposes the small [B, out] operand, not the
        # [B, in] inputs (under vmap over models the latter was a full copy of every gathered batch per step).
        dw_t = jnp.swapaxes(dw.reshape((-1, dw.shape[-1])), 0, 1)  # [out, B T], small
        # Full float32 on every backend (module docstring: each example's term keeps norm <= C).
        g_t = jnp.matmul(dw_t, a3.reshape((-1, a3.shape[-1])).astype(dw_t.dtype),
                         precision=jax.lax.Precision.HIGHEST)  # [out, in]
        if per_model_batches:
            g_t = jax.lax.optimization_barrier(g_t)
        grads[kernel_path] = g_t.T.astype(leaves[kernel_path].dtype)
        if bias_path is not None:
            grads[bias_path] = jnp.sum(dw, axis=(0, 1)).astype(leaves[bias_path].dtype)
    tree = jax.tree_util.tree_map_with_path(lambda kp, _: grads[tuple(k.key for k in kp)], params)
    return losses, tree, norms
