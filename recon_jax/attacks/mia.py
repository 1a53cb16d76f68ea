"""Informed membership inference (Balle et al. 2022, Sec. II-D, Algorithm 2, App. A / Fig. 11).

The informed MIA adversary knows D-, the training algorithm A and two candidates; the model developer trains
``theta = A(D- u {z_b})`` for a uniformly random bit ``b`` and the adversary guesses ``b``. We implement the
loss-threshold attack of App. A:

- *in/out* (Fig. 11, the default): candidate ``z`` is in the training set (``b = 1``) or not (``b = 0``, the
  model is trained on D- alone). Score ``-loss(theta, z)``: members have small loss.
- *two candidates* (Alg. 2 with ``alternative=z'``): ``b = 1`` trains on ``D- u {z}``, ``b = 0`` on
  ``D- u {z'}``. Score ``loss(theta, z') - loss(theta, z)``.

The adversary trains shadow models with and without the candidate (same D-, same A, and -- in the "known
initialisation" setting -- the same initial parameters as the released model), sets the score threshold that
maximises its accuracy on the shadow models, and applies it to fresh released models. Accuracy (of the
thresholded guess) and AUC (threshold-free, Mann-Whitney) are reported on the released models. With a known
initialisation and deterministic full-batch training, the shadow scores collapse to two points and membership
is trivial; with a random initialisation the two score distributions nearly overlap (Fig. 11).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import FINITE, check, nan_if
from recon_jax.models.adapters import ModelFns
from recon_jax.models.flatten import Layout, unravel
from recon_jax.training import Algorithm

__all__ = ["roc_auc", "best_threshold", "threshold_accuracy", "candidate_losses", "MIAResult", "informed_mia"]


def _scores_labels(scores, labels):
    """The scores as floats and the labels as bools, checked; and whether any score is not finite (for NaN under
    ``jit``: a concrete non-finite score raises here, so a diverged shadow model never becomes an accuracy)."""
    s, l = jnp.asarray(scores), jnp.asarray(labels)
    if s.ndim != 1 or s.shape != l.shape:
        raise ValueError(f"scores and labels must be 1-D of the same length, got {s.shape} and {l.shape}")
    if s.shape[0] < 1:
        raise ValueError("scores must be non-empty")
    s = s.astype(jnp.result_type(s, jnp.float32))
    check("scores", s, FINITE)
    return s, l.astype(bool), jnp.any(~jnp.isfinite(s))


def roc_auc(scores: jax.Array, labels: jax.Array) -> jax.Array:
    """Area under the ROC curve of ``scores`` (higher = member) for boolean ``labels`` (True = member).

    Equal to ``P[s_member > s_nonmember] + P[tie] / 2`` (the Mann-Whitney statistic with average ranks); NaN
    when one class is empty.

    Args:
      scores: ``[N]`` attack scores, higher = more likely a member.
      labels: ``[N]`` membership labels; any dtype, cast to bool (nonzero = member).

    Returns:
      A 0-d float array in ``[0, 1]`` (0.5: no better than chance); NaN when all labels are equal. Jittable.

    Raises:
      ValueError: if ``scores`` and ``labels`` are not 1-D of the same length, or are empty (shapes are static, so
        also under ``jit``), or if a concrete score is NaN or infinite (under ``jit``: NaN results).

    >>> import jax.numpy as jnp
    >>> float(roc_auc(jnp.array([0.1, 0.4, 0.35, 0.8]), jnp.array([0, 0, 1, 1])))
    0.75
    """
    s, l, bad = _scores_labels(scores, labels)
    ranks = jax.scipy.stats.rankdata(s, method="average")
    n_pos = jnp.sum(l, dtype=s.dtype)  # counted in floats: n_pos * n_neg overflows int32 from 46,341 per class
    n_neg = l.shape[0] - n_pos
    u = jnp.sum(jnp.where(l, ranks, 0.0)) - n_pos * (n_pos + 1) / 2.0
    return nan_if(bad, jnp.where((n_pos > 0) & (n_neg > 0), u / jnp.maximum(n_pos * n_neg, 1), jnp.nan))


def best_threshold(scores: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The threshold ``tau`` maximising the accuracy of "member iff score > tau" on (shadow) scores.

    Thresholds are midpoints between consecutive distinct sorted scores (or below/above all of them).

    Args:
      scores: ``[N]`` attack scores, higher = more likely a member.
      labels: ``[N]`` membership labels; any dtype, cast to bool (nonzero = member).

    Returns:
      ``(tau, accuracy)``, two 0-d float arrays: the threshold and the fraction of ``scores`` it classifies
      correctly. Among thresholds of equal accuracy the smallest is returned; below all scores it is
      ``min(scores) - 0.5``, above all ``max(scores) + 0.5`` (where float rounding allows: the threshold always
      splits the scores as its accuracy says: the lower score itself where the midpoint of two adjacent floats
      rounds up to the higher).

    Raises:
      ValueError: if ``scores`` and ``labels`` are not 1-D of the same length, or are empty (shapes are static, so
        also under ``jit``), or if a concrete score is NaN or infinite (under ``jit``: NaN results).

    >>> import jax.numpy as jnp
    >>> tau, acc = best_threshold(jnp.array([0.0, 1.0, 2.0, 3.0]), jnp.array([0, 0, 1, 1]))
    >>> float(tau), float(acc)
    (1.5, 1.0)
    """
    s, l, bad = _scores_labels(scores, labels)
    order = jnp.argsort(s)
    s, l = s[order], l[order]
    n = s.shape[0]
    cum_pos = jnp.concatenate([jnp.zeros(1), jnp.cumsum(l)])  # positives among the first i (predicted non-member)
    cum_neg = jnp.arange(n + 1) - cum_pos
    acc = (cum_neg + (cum_pos[-1] - cum_pos)) / n  # split i: indices >= i predicted member
    valid = jnp.concatenate([jnp.ones(1, bool), s[1:] > s[:-1], jnp.ones(1, bool)])
    i = jnp.argmax(jnp.where(valid, acc, -1.0))
    below = jnp.minimum(s[:1] - 1.0, jnp.nextafter(s[:1], -jnp.inf))  # below min(scores) even where s - 1 == s
    lo = jnp.concatenate([below, s])[i]
    hi = jnp.concatenate([s, s[-1:] + 1.0])[i]
    mid = lo + (hi - lo) / 2.0
    # "score > tau" must split at i: s[i - 1] <= tau < s[i]. The midpoint of two adjacent floats can round up to
    # s[i], which would misclassify it; lo itself then splits correctly.
    tau = jnp.where(mid < hi, mid, lo)
    return nan_if(bad, tau), nan_if(bad, acc[i])


def threshold_accuracy(scores: jax.Array, labels: jax.Array, threshold: jax.Array) -> jax.Array:
    """Accuracy of "member iff score > threshold".

    Args:
      scores: ``[N]`` attack scores, higher = more likely a member.
      labels: ``[N]`` membership labels; any dtype, cast to bool (nonzero = member).
      threshold: the score threshold ``tau`` (a scalar, e.g. from :func:`best_threshold`); a score equal to it
        is predicted non-member.

    Returns:
      A 0-d float array in ``[0, 1]``: the fraction of examples whose prediction ``score > threshold`` equals
      their label.

    Raises:
      ValueError: if ``scores`` and ``labels`` are not 1-D of the same length, or are empty (shapes are static, so
        also under ``jit``), or if a concrete score is NaN or infinite (under ``jit``: NaN results).

    >>> import jax.numpy as jnp
    >>> float(threshold_accuracy(jnp.array([0.0, 2.0]), jnp.array([0, 0]), 1.0))
    0.5
    """
    s, l, bad = _scores_labels(scores, labels)
    return nan_if(bad, jnp.mean((s > threshold) == l))


def candidate_losses(model_fns: ModelFns, flat_params: jax.Array, layout: Layout, x: jax.Array, y: jax.Array,
                     loss_fn: Callable | None = None) -> jax.Array:
    """Loss of each model (flat parameters ``[K, P]``) on one candidate ``(x, y)``, ``[K]``.

    Args:
      model_fns: the model.
      flat_params: ``[K, P]`` (e.g. ``ShadowSet.params``).
      layout: their layout.
      x: one example (no batch axis); y: its integer label.
      loss_fn: ``(logits [N, C], labels [N]) -> [N]``; default softmax cross-entropy.

    Returns:
      ``[K]``: ``loss_fn`` of each model on ``(x, y)`` (``x`` cast to the dtype of ``flat_params``).

    Raises:
      ValueError: if ``flat_params`` is not ``[K, layout.size]``.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, MLP, ravel
    >>> fns = from_flax(MLP(features=(3,)))
    >>> flat, layout = ravel(fns.init(jax.random.key(0), jnp.zeros((1, 2))))
    >>> candidate_losses(fns, jnp.stack([flat, flat]), layout, jnp.zeros(2), 0).shape
    (2,)
    """
    if loss_fn is None:
        from recon_jax.training import softmax_cross_entropy as loss_fn
    flat = jnp.asarray(flat_params)
    if flat.ndim != 2 or flat.shape[1] != layout.size:
        raise ValueError(f"flat_params must be [K, {layout.size}], got shape {flat.shape}")
    x = jnp.asarray(x, flat.dtype)[None]
    y = jnp.asarray(y).reshape((1,))
    params = unravel(flat, layout)
    return jax.vmap(lambda p: loss_fn(model_fns.apply(p, x), y)[0])(params)


class MIAResult(NamedTuple):
    """Result of :func:`informed_mia` (scores: higher = candidate ``z`` was used, label True).

    Attributes:
      threshold: score threshold fitted on the shadow models.
      shadow_accuracy: its accuracy on the shadow models.
      accuracy: its accuracy on the released models (Alg. 2's success rate).
      auc: ROC AUC of the scores on the released models.
      shadow_scores, shadow_labels: ``[S]``.
      eval_scores, eval_labels: ``[E]``.
    """

    threshold: float
    shadow_accuracy: float
    accuracy: float
    auc: float
    shadow_scores: np.ndarray
    shadow_labels: np.ndarray
    eval_scores: np.ndarray
    eval_labels: np.ndarray


def informed_mia(model_fns: ModelFns, algorithm: Algorithm, fixed_set: tuple, candidate: tuple, key: jax.Array, *,
                 alternative: tuple | None = None, num_shadow: int = 200, num_eval: int = 200, init_params=None,
                 chunk_size: int = 128, progress: bool = False) -> MIAResult:
    """Runs the informed loss-threshold MIA of Balle et al. (Alg. 2, App. A) end to end.

    Shadow models alternate ``b = 1, 0, 1, ...``; released models draw ``b ~ Bernoulli(1/2)`` from
    ``fold_in(key, 2)``. Shadow models use the base key ``fold_in(key, 0)``, released models ``fold_in(key, 1)``
    (so with ``algorithm.init == "random"`` every model has its own initialisation, and with DP-GD its own
    noise). With ``algorithm.init == "fixed"``, ``init_params`` is the initialisation known to the adversary
    and shared by all models.

    Args:
      model_fns: the released model's architecture.
      algorithm: the training algorithm (:class:`recon_jax.training.Algorithm`).
      fixed_set: ``(x [n, ...], y [n])``, D-.
      candidate: ``(x, y)``, the challenge point ``z`` (one example, no batch axis).
      key: typed key.
      alternative: optional second candidate ``(x', y')``; default: "not in the training set".
      num_shadow: shadow models (>= 2); num_eval: released models (>= 2).
      init_params: initial parameters (required iff ``algorithm.init == "fixed"``).
      chunk_size: models per compiled call of the shadow engine.
      progress: progress bars.

    Returns:
      An :class:`MIAResult`.

    Raises:
      ValueError: if ``num_shadow`` or ``num_eval`` is not an integer >= 2, ``candidate`` (or ``alternative``) is
        not a pair, or its ``x`` does not have the example shape of ``fixed_set``; and from the shadow engine, on
        inconsistent training arguments (e.g. ``init_params`` missing or given against ``algorithm.init``).

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, MLP
    >>> from recon_jax.training import full_batch_gd, initial_params
    >>> fns = from_flax(MLP(features=(8, 2)))
    >>> x = jax.random.normal(jax.random.key(1), (17, 4)); y = (x[:, 0] > 0).astype(jnp.int32)
    >>> p0 = initial_params(fns, jax.random.key(0), x)
    >>> r = informed_mia(fns, full_batch_gd(epochs=10, learning_rate=0.1), (x[:16], y[:16]), (x[16], y[16]),
    ...                  jax.random.key(2), num_shadow=8, num_eval=8, init_params=p0)
    >>> r.accuracy, r.auc
    (1.0, 1.0)
    """
    from recon_jax.shadow import generate_shadow_models

    for name, v in (("num_shadow", num_shadow), ("num_eval", num_eval)):
        if not (isinstance(v, int) and v >= 2):
            raise ValueError(f"{name} must be an integer >= 2, got {v!r}")
    if not (isinstance(candidate, (tuple, list)) and len(candidate) == 2):
        raise ValueError("candidate must be a pair (x, y) of one example")
    if alternative is not None and not (isinstance(alternative, (tuple, list)) and len(alternative) == 2):
        raise ValueError("alternative must be None or a pair (x, y) of one example")
    fx = np.asarray(fixed_set[0])
    cx, cy = np.asarray(candidate[0], fx.dtype), np.asarray(candidate[1])
    if cx.shape != fx.shape[1:]:
        raise ValueError(f"candidate x must have the example shape {fx.shape[1:]}, got {cx.shape}")
    if alternative is not None:
        ax, ay = np.asarray(alternative[0], fx.dtype), np.asarray(alternative[1])
        if ax.shape != cx.shape:
            raise ValueError(f"alternative x must have shape {cx.shape}, got {ax.shape}")

    def run(bits, base_key):
        bits = np.asarray(bits, bool)
        k = bits.shape[0]
        if alternative is None:
            tx = np.broadcast_to(cx, (k, *cx.shape))
            ty = np.broadcast_to(cy, (k,))
            weights = bits.astype(np.float32)
        else:
            tx = np.where(bits.reshape((k,) + (1,) * cx.ndim), cx, ax)
            ty = np.where(bits, cy, ay)
            weights = None
        s = generate_shadow_models(model_fns, algorithm, fixed_set, (tx, ty), base_key, init_params=init_params,
                                   target_weights=weights, outputs=("params",), chunk_size=chunk_size,
                                   progress=progress)
        loss_z = candidate_losses(model_fns, s.params, s.layout, cx, cy, algorithm.loss_fn)
        if alternative is None:
            return np.asarray(-loss_z)
        loss_alt = candidate_losses(model_fns, s.params, s.layout, ax, ay, algorithm.loss_fn)
        return np.asarray(loss_alt - loss_z)

    shadow_bits = (np.arange(num_shadow) % 2 == 0)
    eval_bits = np.asarray(jax.random.bernoulli(jax.random.fold_in(key, 2), 0.5, (num_eval,)))
    shadow_scores = run(shadow_bits, jax.random.fold_in(key, 0))
    eval_scores = run(eval_bits, jax.random.fold_in(key, 1))
    tau, shadow_acc = best_threshold(shadow_scores, shadow_bits)
    acc = threshold_accuracy(eval_scores, eval_bits, tau)
    auc = roc_auc(eval_scores, eval_bits)
    return MIAResult(float(tau), float(shadow_acc), float(acc), float(auc), shadow_scores, shadow_bits,
                     eval_scores, eval_bits)
