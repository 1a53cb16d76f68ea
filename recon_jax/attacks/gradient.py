"""Gradient-based reconstruction attacks on (DP-)SGD updates.

- **Linear-layer attack** (Ziller et al., "Bounding Reconstruction Attack Success of Adversaries Without Data
  Priors", Sec. 2.1): the observed gradient of a linear layer *is* the (clipped, noised) input;
  :func:`linear_layer_observations` and :func:`linear_layer_attack` live in :mod:`recon_jax.attacks.linear_layer`
  and are re-exported here.
- **Inverting Gradients** (Geiping et al. 2020, "Inverting Gradients - How easy is it to break privacy in
  federated learning?"): minimise ``1 - cos(grad(x), g_obs)`` over all layers plus total variation, with Adam on the
  *signed* gradient, a box constraint to the data range and step learning-rate decay (x0.1 from the steps
  ``n // 2.667``, ``n // 1.6``, ``n // 1.142`` of ``n``, their MultiStepLR); several restarts run in parallel with
  ``vmap``, the best kept by loss. Unknown labels are inferred with iDLG (Zhao et al. 2020): for softmax
  cross-entropy and non-negative last-layer inputs, the true class is the column of the last weight gradient with
  negative sum. See :func:`inverting_gradients`.
- **DLG** (Zhu et al. 2019, "Deep Leakage from Gradients"): minimise ``||grad(x, y) - g_obs||^2`` jointly over
  dummy inputs and (optionally) soft dummy labels. Zhu et al. use L-BFGS; here Adam (same objective), vmapped
  restarts. See :func:`dlg`.

Assumptions (all attacks): the adversary knows the architecture, the parameters at the attacked step, the loss
and the batch size; the observed gradient is the *released* update of one step (e.g. the noisy mean of
:meth:`recon_jax.mechanisms.Mechanism.privatize`), given as a flat vector in ``ravel_pytree(params)`` order or as a
pytree like ``params``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from recon_jax._validation import FINITE_NONNEGATIVE, FINITE_POSITIVE, Range, check, check_integer, guard, nan_if
from recon_jax.attacks._gradient_inputs import (check_release, default_last_layer, flat_release, init_inputs,
                                                num_classes_of, search_dtype, validate_search)
from recon_jax.attacks.linear_layer import linear_layer_attack, linear_layer_observations
from recon_jax.models.losses import softmax_cross_entropy

__all__ = ["linear_layer_observations", "linear_layer_attack", "total_variation", "softmax_cross_entropy",
           "infer_labels_idlg", "model_gradient", "GradientAttackResult", "InvertingGradientsOptions",
           "inverting_gradients", "DLGOptions", "dlg"]

ApplyFn = Callable[[Any, jax.Array], jax.Array]
LossFn = Callable[[jax.Array, jax.Array], jax.Array]


# ----------------------------------------------------------------------------------------------------------------
# Gradient matching: Inverting Gradients and DLG.
# ----------------------------------------------------------------------------------------------------------------


def total_variation(x: jax.Array) -> jax.Array:
    """Anisotropic total variation ``mean|dx| + mean|dy|`` of images ``[B, H, W]`` or ``[B, H, W, C]`` (Geiping et al.).

    >>> import jax.numpy as jnp
    >>> float(total_variation(jnp.array([[[0.0, 1.0], [0.0, 1.0]]])))
    1.0
    """
    x = jnp.asarray(x)
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise ValueError(f"x must have shape [B, H, W] or [B, H, W, C], got {x.shape}")
    dx = jnp.mean(jnp.abs(x[:, :, 1:, :] - x[:, :, :-1, :]))
    dy = jnp.mean(jnp.abs(x[:, 1:, :, :] - x[:, :-1, :, :]))
    return dx + dy


def model_gradient(
    apply_fn: ApplyFn, params, inputs: jax.Array, targets: jax.Array, loss: LossFn = softmax_cross_entropy,
    clip_norm: float | None = None,
) -> jax.Array:
    """The flat gradient the attacked step would release without noise: mean over the batch of the loss gradients.

    With ``clip_norm`` set, each per-example gradient is clipped to that norm first (the DP-SGD step, Biswas et al.
    Alg. 1 lines 6-9); the adversary knows the algorithm, so simulating it is within the threat model.

    Args:
      apply_fn: ``apply_fn(params, inputs) -> logits [B, K]``.
      params: model parameters (pytree).
      inputs: ``[B, ...]``.
      targets: ``[B, K]`` one-hot or soft labels.
      loss: ``loss(logits, targets) -> [B]`` per-example losses.
      clip_norm: optional per-example clip norm C, finite and > 0.

    Returns:
      The flat gradient in ``ravel_pytree(params)`` order; all NaN where a traced ``clip_norm`` is invalid.

    Raises:
      ValueError: if a concrete ``clip_norm`` is not finite and > 0.

    >>> import jax.numpy as jnp
    >>> apply = lambda p, x: x.reshape(x.shape[0], -1) @ p["w"]
    >>> g = model_gradient(apply, {"w": jnp.zeros((2, 2))}, jnp.ones((1, 2)), jnp.array([[1.0, 0.0]]))
    >>> [round(float(v), 3) for v in g]
    [-0.5, 0.5, -0.5, 0.5]
    """
    if clip_norm is None:
        def batch_loss(p):
            return jnp.mean(loss(apply_fn(p, inputs), targets))

        return ravel_pytree(jax.grad(batch_loss)(params))[0]

    def example_grad(x, t):
        g = jax.grad(lambda p: loss(apply_fn(p, x[None]), t[None])[0])(params)
        return ravel_pytree(g)[0]

    bad = guard(("clip_norm", clip_norm, FINITE_POSITIVE))  # <= 0 clipped nothing or to 0; NaN under jit
    per_example = jax.vmap(example_grad)(inputs, targets)
    norms = jnp.sqrt(jnp.sum(per_example**2, axis=1) + 1e-30)
    factors = 1.0 / jnp.maximum(1.0, norms / clip_norm)
    return nan_if(bad, jnp.mean(per_example * factors[:, None], axis=0))


def infer_labels_idlg(last_layer_weight_grad: jax.Array, batch_size: int = 1) -> jax.Array:
    """iDLG label inference (Zhao et al. 2020) from the gradient of the last weight matrix ``[fan_in, K]``.

    For softmax cross-entropy, the last-layer weight gradient is ``h (p - onehot(y))^T``; with non-negative
    inputs ``h`` to that layer (sigmoid, ReLU) the true class's column has a negative sum and every other column a
    non-negative one. For ``batch_size > 1`` this returns the ``batch_size`` most negative columns (a heuristic that
    assumes distinct labels, as in Yin et al. 2021), in ascending column order.

    Args:
      last_layer_weight_grad: ``[fan_in, K]``.
      batch_size: number of labels to return.

    Returns:
      Integer labels ``[batch_size]``.

    >>> import jax.numpy as jnp
    >>> h, p = jnp.array([0.2, 0.7]), jnp.array([0.3, 0.5, 0.2])
    >>> infer_labels_idlg(jnp.outer(h, p - jnp.eye(3)[1]))
    Array([1], dtype=int32)
    """
    g = jnp.asarray(last_layer_weight_grad)
    if g.ndim != 2:
        raise ValueError(f"last_layer_weight_grad must have shape [fan_in, K], got {g.shape}")
    check_integer("batch_size", batch_size, 1, g.shape[1])
    col = jnp.sum(g, axis=0)
    return jnp.sort(jnp.argsort(col)[:batch_size]).astype(jnp.int32)


class GradientAttackResult(NamedTuple):
    """Output of :func:`inverting_gradients` / :func:`dlg`.

    Attributes:
      reconstruction: best restart, ``[B, *input_shape]``.
      labels: labels used (given, inferred by iDLG, or argmax of DLG's optimised soft labels), ``[B]``.
      loss: final matching loss of the best restart (Inverting Gradients: ``1 - cos``, without the TV term).
      all_reconstructions: ``[K, B, *input_shape]``.
      all_losses: ``[K]`` final matching losses of every restart.
    """

    reconstruction: jax.Array
    labels: jax.Array
    loss: jax.Array
    all_reconstructions: jax.Array
    all_losses: jax.Array


@dataclasses.dataclass(frozen=True, kw_only=True)
class InvertingGradientsOptions:
    """How :func:`inverting_gradients` searches (Geiping et al. 2020; hashable, so usable as a static argument).

    Attributes:
      num_restarts: random initialisations, run in one ``vmap`` (>= 1).
      num_steps: iterations per restart (>= 1).
      lr: initial Adam learning rate (finite, > 0).
      tv_weight: total-variation weight (finite, >= 0; inputs must be images ``[H, W]`` / ``[H, W, C]`` when > 0).
      data_range: box ``(low, high)``, finite, for the inputs, or ``None`` for no constraint.
      lr_decay: Geiping's step decay (their torch ``MultiStepLR``): step ``t`` (from 0) uses ``lr * 0.1 ** k``, ``k``
        the number of milestones ``n // 2.667, n // 1.6, n // 1.142`` (``n = num_steps``, repeats counted) ``<= t``.
      signed: Adam on the signed gradient (Geiping et al.); ``False`` uses the raw gradient.
      init: ``"uniform"`` in the box or ``"normal"`` (both standard normal when ``data_range`` is None).
    """

    num_restarts: int = 8
    num_steps: int = 2000
    lr: float = 0.1
    tv_weight: float = 1e-4
    data_range: tuple[float, float] | None = (0.0, 1.0)
    lr_decay: bool = True
    signed: bool = True
    init: str = "uniform"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DLGOptions:
    """How :func:`dlg` searches (Zhu et al. 2019, with Adam instead of L-BFGS; hashable).

    Attributes:
      num_restarts: random initialisations, run in one ``vmap`` (>= 1).
      num_steps: iterations per restart (>= 1).
      lr: Adam learning rate (finite, > 0).
      data_range: finite box ``(low, high)`` the inputs are projected onto, or ``None`` for no constraint.
      init: ``"uniform"`` in the box or ``"normal"`` (both standard normal when ``data_range`` is None).
      optimize_labels: optimise soft dummy labels ``softmax(z)`` jointly with the inputs (original DLG) instead of
        using the given or iDLG-inferred labels.
    """

    num_restarts: int = 4
    num_steps: int = 1000
    lr: float = 0.01
    data_range: tuple[float, float] | None = (0.0, 1.0)
    init: str = "uniform"
    optimize_labels: bool = False


def _prepare(apply_fn, params, observed_grad, input_shape, labels, batch_size, num_classes, last_layer_fn,
             zero_refused):
    g_obs = flat_release(observed_grad, params)
    num_classes = num_classes_of(apply_fn, params, input_shape, num_classes)
    if labels is None:
        zero_refused = zero_refused or "iDLG cannot read labels from it; pass labels"
    check_release(g_obs, zero_refused)
    if labels is None:
        _, unravel = ravel_pytree(params)
        tree = unravel(g_obs)
        last = last_layer_fn(tree) if last_layer_fn is not None else default_last_layer(tree, num_classes)
        labels = infer_labels_idlg(last, batch_size)
    # one_hot makes a label outside [0, K) a zero row, a silent wrong target: refused, or NaN targets when traced.
    bad = guard(("labels", labels, Range(lambda v: (v >= 0) & (v < num_classes) & (v % 1 == 0),
                                         f"integers in [0, {num_classes})"))).reshape(-1)
    if jnp.ndim(labels) > 1:  # reshape(-1) of one-hot rows gave "batch_size = 1 entries, got (10,)"
        raise ValueError(f"labels must be integer class indices [batch_size], not one-hot; got shape "
                         f"{jnp.shape(labels)}")
    labels = jnp.asarray(labels, jnp.int32).reshape(-1)
    if labels.shape[0] != batch_size:
        raise ValueError(f"labels must have batch_size = {batch_size} entries, got {labels.shape}")
    return g_obs, labels, nan_if(bad[:, None], jax.nn.one_hot(labels, num_classes))


def _step_schedule(lr, num_steps, decay):
    """Geiping's ``MultiStepLR([n // 2.667, n // 1.6, n // 1.142], gamma=0.1)`` stepped after each step: optax's
    ``count`` (0 first) uses ``lr * 0.1 ** #{m <= count}``, repeats counted, the products rounded as optax rounds."""
    if not decay:
        return optax.constant_schedule(lr)
    milestones = jnp.asarray([int(num_steps // f) for f in (2.667, 1.6, 1.142)])
    values = jnp.stack(functools.reduce(lambda v, _: v + [v[-1] * 0.1], range(3), [jnp.asarray(lr)]))
    return lambda count: values[jnp.sum(count >= milestones)]


def inverting_gradients(
    key: jax.Array,
    apply_fn: ApplyFn,
    params,
    observed_grad,
    input_shape: tuple[int, ...],
    options: InvertingGradientsOptions = InvertingGradientsOptions(),
    *,
    labels: jax.Array | None = None,
    batch_size: int = 1,
    loss: LossFn = softmax_cross_entropy,
    num_classes: int | None = None,
    clip_norm: float | None = None,
    last_layer_fn: Callable[[Any], jax.Array] | None = None,
) -> GradientAttackResult:
    """Inverting Gradients (Geiping et al. 2020): cosine gradient matching + TV, restarts in parallel.

    Minimises ``1 - <g(x), g_obs> / (||g(x)|| ||g_obs||) + tv_weight * TV(x)`` where ``g(x)`` is the flat gradient of
    the batch loss over *all* layers (:func:`model_gradient`), by Adam on ``sign(grad)`` with learning rate ``lr``
    decayed x0.1 from the steps ``n // 2.667``, ``n // 1.6``, ``n // 1.142`` of ``n = num_steps``, projecting onto
    the box ``data_range`` after every step (the search settings are ``options``, an
    :class:`InvertingGradientsOptions`). The ``num_restarts`` random initialisations run in one ``vmap``; the restart
    with the lowest final cosine cost ``1 - cos`` is returned (the TV term steers the search but does not score it,
    as in Geiping et al.'s code, whose default scores a trial by the gradient-matching cost alone).
    The cosine objective is scale-invariant, so it applies unchanged to clipped updates and to the unit-norm
    releases of the VMF mechanism.

    Args:
      key: typed PRNG key (restart ``k`` uses ``fold_in(key, k)``).
      apply_fn: ``apply_fn(params, inputs[B, ...]) -> logits [B, K]``.
      params: the model parameters at the attacked step (pytree).
      observed_grad: released update, flat (``ravel_pytree(params)`` order) or a pytree like ``params``.
      input_shape: shape of one input.
      options: the search (:class:`InvertingGradientsOptions`: restarts, steps, learning rate and its decay, TV
        weight, input box, signed steps, initialisation).
      labels: ``[B]`` integer labels, or ``None`` to infer them with iDLG (:func:`infer_labels_idlg`).
      batch_size: B.
      loss: ``loss(logits, targets[B, K]) -> [B]``; softmax cross-entropy by default.
      num_classes: K (inferred from ``apply_fn`` when ``None``).
      clip_norm: simulate per-example clipping of the attacked step (see :func:`model_gradient`).
      last_layer_fn: maps the observed gradient pytree to the last weight gradient ``[fan_in, K]`` for iDLG
        (default: the last 2-D leaf with K columns, layer numbers in numeric order; leaves of differently named
        layers, such as ``proj`` and ``head``, have no order in the tree and are refused).

    Returns:
      A :class:`GradientAttackResult`.

    Raises:
      ValueError: on invalid sizes or hyper-parameters (``lr``, ``clip_norm`` finite and > 0, ``tv_weight`` finite
        and >= 0, ``data_range`` finite), or concrete ``labels`` outside ``[0, num_classes)``, or a concrete
        ``observed_grad`` with NaN or inf entries or all zeros (traced: NaN loss).

    >>> import jax, jax.numpy as jnp
    >>> apply = lambda p, x: jax.nn.sigmoid(x.reshape(x.shape[0], -1) @ p["w1"]) @ p["w2"]
    >>> params = {"w1": jax.random.normal(jax.random.key(1), (4, 6)), "w2": jax.random.normal(jax.random.key(2), (6, 3))}
    >>> x = jnp.array([[0.1, 0.9, 0.4, 0.7]])
    >>> g = model_gradient(apply, params, x, jnp.eye(3)[1:2])
    >>> res = inverting_gradients(jax.random.key(0), apply, params, g, (4,),
    ...                           InvertingGradientsOptions(num_restarts=2, num_steps=300, tv_weight=0.0))
    >>> int(res.labels[0]), bool(jnp.abs(res.reconstruction - x).max() < 0.05)
    (1, True)
    """
    if not isinstance(options, InvertingGradientsOptions):
        raise TypeError(f"options must be an InvertingGradientsOptions, got {type(options).__name__}")
    num_restarts, num_steps, lr, tv_weight = options.num_restarts, options.num_steps, options.lr, options.tv_weight
    data_range, lr_decay, signed, init = options.data_range, options.lr_decay, options.signed, options.init
    input_shape = validate_search(input_shape, batch_size, num_restarts, num_steps, lr, data_range, clip_norm)
    check("tv_weight", tv_weight, FINITE_NONNEGATIVE)  # NaN failed both `< 0` and `> 0`: TV silently dropped
    if tv_weight > 0 and len(input_shape) not in (2, 3):
        raise ValueError(f"tv_weight > 0 needs image inputs [H, W] or [H, W, C], got input_shape {input_shape}; for "
                         "other inputs pass InvertingGradientsOptions(tv_weight=0.0)")
    g_obs, labels, targets = _prepare(apply_fn, params, observed_grad, input_shape, labels, batch_size, num_classes,
                                      last_layer_fn, "no direction for the cosine matching cost to match (a model at "
                                      "an exact stationary point, or an empty release)")
    xs, losses = _ig_run(key, params, g_obs, targets, apply_fn=apply_fn, loss=loss, input_shape=tuple(input_shape),
        batch_size=int(batch_size), num_restarts=int(num_restarts), num_steps=int(num_steps), lr=float(lr),
        tv_weight=float(tv_weight), data_range=None if data_range is None else tuple(map(float, data_range)),
        lr_decay=bool(lr_decay), signed=bool(signed), clip_norm=None if clip_norm is None else float(clip_norm),
        init=init)
    best = jnp.argmin(jnp.where(jnp.isfinite(losses), losses, jnp.inf))
    return GradientAttackResult(xs[best], labels, losses[best], xs, losses)


def _restarts(key, num_restarts, num_steps, opt, init, rec_loss, *, project, signed=False, score=None):
    """``num_restarts`` independent runs of ``opt`` on ``rec_loss`` (vmapped, each a ``lax.scan`` of ``num_steps``):
    ``init(key)`` starts a run, ``project`` maps every iterate back (clipping to the data range), ``signed`` steps
    along the gradient's sign. The one restart optimiser of Inverting Gradients and DLG; returns the final
    variables and their ``score`` (default ``rec_loss``), stacked over restarts."""

    def single(k):
        v0 = init(k)

        def step(carry, _):
            v, state = carry
            grad = jax.grad(rec_loss)(v)
            if signed:
                grad = jax.tree_util.tree_map(jnp.sign, grad)
            updates, state = opt.update(grad, state, v)
            return (project(optax.apply_updates(v, updates)), state), None

        (v, _), _ = jax.lax.scan(step, (v0, opt.init(v0)), None, length=num_steps)
        return v, (rec_loss if score is None else score)(v)

    keys = jax.vmap(lambda k: jax.random.fold_in(key, k))(jnp.arange(num_restarts))
    return jax.vmap(single)(keys)


def _clip_to(data_range):
    return (lambda x: x) if data_range is None else (lambda x: jnp.clip(x, data_range[0], data_range[1]))


_IG_STATIC = ("apply_fn", "loss", "input_shape", "batch_size", "num_restarts", "num_steps", "lr", "tv_weight",
              "data_range", "lr_decay", "signed", "clip_norm", "init")


@functools.partial(jax.jit, static_argnames=_IG_STATIC)
def _ig_run(key, params, g_obs, targets, *, apply_fn, loss, input_shape, batch_size, num_restarts, num_steps, lr,
            tv_weight, data_range, lr_decay, signed, clip_norm, init):
    shape = (batch_size,) + input_shape

    def matching_cost(x):
        g = model_gradient(apply_fn, params, x, targets, loss, clip_norm)
        return 1.0 - jnp.vdot(g, g_obs) / (jnp.linalg.norm(g) * jnp.linalg.norm(g_obs) + 1e-30)

    def rec_loss(x):
        return matching_cost(x) + (tv_weight * total_variation(x) if tv_weight > 0 else 0.0)

    return _restarts(key, num_restarts, num_steps, optax.adam(_step_schedule(lr, num_steps, lr_decay)),
                     lambda k: init_inputs(k, shape, data_range, init, g_obs.dtype), rec_loss,
                     project=_clip_to(data_range),
                     signed=signed, score=matching_cost)


def dlg(
    key: jax.Array,
    apply_fn: ApplyFn,
    params,
    observed_grad,
    input_shape: tuple[int, ...],
    options: DLGOptions = DLGOptions(),
    *,
    labels: jax.Array | None = None,
    batch_size: int = 1,
    loss: LossFn = softmax_cross_entropy,
    num_classes: int | None = None,
    clip_norm: float | None = None,
    last_layer_fn: Callable[[Any], jax.Array] | None = None,
) -> GradientAttackResult:
    """Deep Leakage from Gradients (Zhu et al. 2019): L2 gradient matching ``||g(x, y) - g_obs||^2``.

    With ``options.optimize_labels`` the labels are soft dummy labels ``softmax(z)`` optimised jointly with the inputs
    (original DLG); otherwise they are the given ``labels`` or the iDLG inference. Optimiser: Adam (Zhu et al. used
    L-BFGS) with a box projection when ``data_range`` is set; restarts are vmapped, the lowest loss kept. Unlike the
    cosine objective of :func:`inverting_gradients`, the L2 objective is not scale-invariant, so it fails on
    rescaled releases (e.g. the unit-norm VMF output) unless ``observed_grad`` is rescaled by the caller.

    Args:
      key: typed PRNG key.
      apply_fn, params, observed_grad, input_shape, labels, batch_size, loss, num_classes, clip_norm,
        last_layer_fn: as in :func:`inverting_gradients`.
      options: the search (:class:`DLGOptions`: restarts, steps, learning rate, input box, initialisation, and
        whether soft labels are optimised jointly).

    Returns:
      A :class:`GradientAttackResult` (labels = argmax of the optimised soft labels with
      ``options.optimize_labels``).

    >>> import jax, jax.numpy as jnp
    >>> apply = lambda p, x: jax.nn.sigmoid(x.reshape(x.shape[0], -1) @ p["w1"]) @ p["w2"]
    >>> params = {"w1": jax.random.normal(jax.random.key(1), (4, 6)), "w2": jax.random.normal(jax.random.key(2), (6, 3))}
    >>> x = jnp.array([[0.1, 0.9, 0.4, 0.7]])
    >>> g = model_gradient(apply, params, x, jnp.eye(3)[1:2])
    >>> res = dlg(jax.random.key(0), apply, params, g, (4,), DLGOptions(num_restarts=2, num_steps=1500, lr=0.02))
    >>> int(res.labels[0]), bool(jnp.abs(res.reconstruction - x).max() < 0.05)
    (1, True)
    """
    if not isinstance(options, DLGOptions):
        raise TypeError(f"options must be a DLGOptions, got {type(options).__name__}")
    num_restarts, num_steps, lr, data_range = options.num_restarts, options.num_steps, options.lr, options.data_range
    init, optimize_labels = options.init, options.optimize_labels
    input_shape = validate_search(input_shape, batch_size, num_restarts, num_steps, lr, data_range, clip_norm)
    if optimize_labels:
        if labels is not None or last_layer_fn is not None:
            raise ValueError("labels and last_layer_fn are not used with DLGOptions(optimize_labels=True), which "
                             "optimises soft labels instead: pass neither, or optimize_labels=False")
        g_obs = flat_release(observed_grad, params)
        num_classes = num_classes_of(apply_fn, params, input_shape, num_classes)
        check_release(g_obs, None)
        label_init = None
    else:
        g_obs, labels, label_init = _prepare(apply_fn, params, observed_grad, input_shape, labels, batch_size,
                                             num_classes, last_layer_fn, None)
        num_classes = label_init.shape[-1]
    targets = label_init if label_init is not None else jnp.zeros((batch_size, num_classes))
    xs, zs, losses = _dlg_run(key, params, g_obs, targets, apply_fn=apply_fn, loss=loss, input_shape=tuple(input_shape),
        batch_size=int(batch_size), num_classes=int(num_classes), num_restarts=int(num_restarts),
        num_steps=int(num_steps), lr=float(lr), data_range=None if data_range is None else tuple(map(float, data_range)),
        optimize_labels=bool(optimize_labels), clip_norm=None if clip_norm is None else float(clip_norm), init=init)
    best = jnp.argmin(jnp.where(jnp.isfinite(losses), losses, jnp.inf))
    out_labels = jnp.argmax(zs[best], axis=-1).astype(jnp.int32) if optimize_labels else labels
    return GradientAttackResult(xs[best], out_labels, losses[best], xs, losses)


_DLG_STATIC = ("apply_fn", "loss", "input_shape", "batch_size", "num_classes", "num_restarts", "num_steps", "lr",
               "data_range", "optimize_labels", "clip_norm", "init")


@functools.partial(jax.jit, static_argnames=_DLG_STATIC)
def _dlg_run(key, params, g_obs, fixed_targets, *, apply_fn, loss, input_shape, batch_size, num_classes, num_restarts,
             num_steps, lr, data_range, optimize_labels, clip_norm, init):
    shape = (batch_size,) + input_shape

    def rec_loss(variables):
        x, z = variables
        targets = jax.nn.softmax(z, axis=-1) if optimize_labels else fixed_targets
        g = model_gradient(apply_fn, params, x, targets, loss, clip_norm)
        return jnp.sum((g - g_obs) ** 2)

    def init_run(k):
        k_x, k_z = jax.random.split(k)
        return (init_inputs(k_x, shape, data_range, init, g_obs.dtype),
                jax.random.normal(k_z, (batch_size, num_classes), search_dtype(g_obs.dtype)))

    clip = _clip_to(data_range)
    (xs, zs), losses = _restarts(key, num_restarts, num_steps, optax.adam(lr), init_run, rec_loss,
                                 project=lambda v: (clip(v[0]), v[1]))
    return xs, zs, losses
