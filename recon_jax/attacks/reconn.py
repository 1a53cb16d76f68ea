"""Reconstructor networks (RecoNN) trained on shadow models (Balle et al. 2022, Sec. IV, V-A c, App. B).

The informed adversary knows D- and the training algorithm A. It trains one shadow model
``theta_i = A(D- u {z_i})`` per shadow target (:func:`recon_jax.shadow.generate_shadow_models`), turns each
model into a feature vector, and trains a network ``phi`` mapping features to targets; the reconstruction of
the released model's unknown target is ``phi(features(theta))``.

Features (Sec. V-A c, VI-C, App. F):

- white-box: the flattened parameters (all layers concatenated, or a subset of layers selected by path with
  :func:`recon_jax.models.select`), see :func:`whitebox_features`;
- black-box: the concatenated logits of the model on a fixed probe set, see :func:`blackbox_features`.

Every coordinate is standardised to zero mean and unit variance with statistics fitted on the *training*
shadow models only (:func:`fit_standardizer`); the same transform is then applied to held-out shadows and
released models. ``scaling="minmax"`` maps each coordinate's training range to [0, 1] instead
(:func:`fit_minmax`; the dimensionality-reduction attack of Lumbut & Ponnoprat, :mod:`recon_jax.attacks.dimred`).

Training (:func:`train_reconstructor`): loss ``mae_weight * MAE + mse_weight * MSE`` (Table V), optionally plus
a perceptual loss from a caller-supplied feature network (the paper uses LPIPS on CIFAR-10; no pretrained LPIPS
network ships with recon_jax) and a least-squares PatchGAN adversarial loss (Table VIII, discriminator trained
with Adam at 1e-5). RMSProp (lr 1e-3) by default; each epoch is one jitted ``lax.scan`` over minibatches of a
permutation drawn from ``fold_in(key, epoch + 2)`` (seeded shuffling; the last partial batch is dropped).
Early stopping on held-out shadows (:func:`early_stopping`) keeps the best epoch's parameters. Networks with
BatchNorm or dropout (the DR attack's split network) train with ``train_flag=True``. Fine-tuning a trained
reconstructor on shadow models of a new fixed set (App. B) is :func:`fine_tune_reconstructor`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from recon_jax.io import array_digest, atomic_save_npz, stable_hash
from recon_jax.models.flatten import Layout, select

__all__ = [
    "Standardizer",
    "fit_standardizer",
    "fit_minmax",
    "standardize",
    "whitebox_features",
    "blackbox_features",
    "reconstruction_loss",
    "early_stopping",
    "ReconstructorFit",
    "train_reconstructor",
    "fine_tune_reconstructor",
    "reconstruct",
]


class Standardizer(NamedTuple):
    """Per-coordinate affine standardisation ``(features - mean) / scale`` (``[F]`` each)."""

    mean: jax.Array
    scale: jax.Array


def _features_2d(features, name="features"):
    f = features if isinstance(features, (np.ndarray, jax.Array)) else np.asarray(features)
    if f.ndim != 2:
        raise ValueError(f"{name} must be [K, F] (one feature row per model), got shape {f.shape}")
    return f


def fit_standardizer(features: jax.Array, min_scale: float = 1e-8) -> Standardizer:
    """Fits per-coordinate mean and standard deviation on the *training* shadow features ``[K, F]``.

    Coordinates whose standard deviation is below ``min_scale`` (e.g. parameters no model ever updates) get
    scale 1, so they are centred but not blown up.

    Args:
      features: ``[K, F]`` features of the training shadow models only (NumPy, memory-mapped or jax).
      min_scale: threshold below which a coordinate is treated as constant (>= 0).

    Returns:
      A :class:`Standardizer`.

    >>> import numpy as np
    >>> s = fit_standardizer(np.array([[0., 1.], [2., 1.]]))
    >>> s.mean.tolist(), s.scale.tolist()
    ([1.0, 1.0], [1.0, 1.0])
    """
    f = _features_2d(features)
    if f.shape[0] < 2:
        raise ValueError(f"features needs at least 2 rows to estimate a variance, got {f.shape[0]}")
    if not min_scale >= 0:
        raise ValueError(f"min_scale must be >= 0, got {min_scale}")
    # Host-side float64 accumulation in row chunks: exact enough and never holds a second [K, F] copy.
    n, mean, m2 = 0, np.zeros(f.shape[1]), np.zeros(f.shape[1])
    for start in range(0, f.shape[0], 1024):
        block = np.asarray(f[start:start + 1024], np.float64)
        bn, bmean = block.shape[0], block.mean(axis=0)
        bm2 = ((block - bmean) ** 2).sum(axis=0)
        delta = bmean - mean
        tot = n + bn
        mean = mean + delta * bn / tot
        m2 = m2 + bm2 + delta**2 * n * bn / tot
        n = tot
    std = np.sqrt(m2 / n)
    scale = np.where(std > min_scale, std, 1.0)
    dtype = f.dtype if np.issubdtype(np.dtype(f.dtype), np.floating) else np.float32
    dtype = jax.dtypes.canonicalize_dtype(dtype)  # float64 only under jax_enable_x64
    return Standardizer(jnp.asarray(mean, dtype), jnp.asarray(scale, dtype))


def fit_minmax(features: jax.Array) -> Standardizer:
    """Fits a per-coordinate min-max map to [0, 1] on the *training* features ``[K, F]``, as a :class:`Standardizer`.

    ``mean`` holds the minimum and ``scale`` the range (1 for a constant coordinate), so :func:`standardize` maps
    the training rows into [0, 1] (the scaling of the DR attack's reference implementation, Lumbut & Ponnoprat).

    Args:
      features: ``[K, F]`` features of the training shadows only (K >= 1; NumPy, memory-mapped or jax).

    Returns:
      A :class:`Standardizer` in the features' (canonical) float dtype.

    >>> import numpy as np
    >>> s = fit_minmax(np.array([[0., 5.], [2., 5.]]))
    >>> standardize(s, np.array([[1., 5.]])).tolist()
    [[0.5, 0.0]]
    """
    f = _features_2d(features)
    if f.shape[0] < 1:
        raise ValueError(f"features needs at least 1 row, got {f.shape[0]}")
    dtype = f.dtype if np.issubdtype(np.dtype(f.dtype), np.floating) else np.float32
    dtype = jax.dtypes.canonicalize_dtype(dtype)  # float64 only under jax_enable_x64
    low, high = np.full(f.shape[1], np.inf, dtype), np.full(f.shape[1], -np.inf, dtype)
    for start in range(0, f.shape[0], 1024):  # row blocks: never a second copy of a memory map
        block = np.asarray(f[start:start + 1024], dtype)
        low, high = np.minimum(low, block.min(axis=0)), np.maximum(high, block.max(axis=0))
    span = high - low
    return Standardizer(jnp.asarray(low, dtype), jnp.asarray(np.where(span > 0, span, 1).astype(dtype)))


def standardize(standardizer: Standardizer, features: jax.Array) -> jax.Array:
    """Applies a fitted :class:`Standardizer` to ``[K, F]`` (or ``[F]``) features.

    >>> import numpy as np
    >>> s = fit_standardizer(np.array([[0., 1.], [2., 1.]]))
    >>> standardize(s, np.array([[4., 3.]])).tolist()
    [[3.0, 2.0]]
    """
    f = jnp.asarray(features)
    if f.shape[-1] != standardizer.mean.shape[-1]:
        raise ValueError(f"features must have {standardizer.mean.shape[-1]} columns, got shape {f.shape}")
    return (f - standardizer.mean) / standardizer.scale


def whitebox_features(flat_params, layout: Layout | None = None, include: str | Sequence[str] | None = None):
    """White-box features: flattened parameters ``[K, P]``, optionally restricted to layers matched by path.

    Args:
      flat_params: ``[K, P]`` flat parameters (e.g. ``ShadowSet.params``).
      layout: their :class:`~recon_jax.models.Layout` (required with ``include``).
      include: layer paths, prefixes or globs (Balle et al. App. F: ``"Dense_1"``, the second layer only).

    Returns:
      ``[K, F]`` (a view for ``include=None``; NumPy in, NumPy out).

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import balle_mnist_mlp, ravel
    >>> flat, layout = ravel(balle_mnist_mlp().init(jax.random.key(0), jnp.zeros((1, 784)))["params"])
    >>> whitebox_features(flat[None], layout, "Dense_1").shape
    (1, 110)
    """
    f = _features_2d(flat_params, "flat_params")
    if include is None:
        return f
    if layout is None:
        raise ValueError("layout is required to select layers with include")
    if f.shape[1] != layout.size:
        raise ValueError(f"flat_params must have {layout.size} columns (the layout size), got {f.shape[1]}")
    return select(f, layout, include)


def blackbox_features(probe_logits) -> jax.Array:
    """Black-box features (Balle et al. Sec. VI-C): logits on a probe set, concatenated, ``[K, m * C]``.

    >>> import numpy as np
    >>> blackbox_features(np.zeros((3, 200, 10))).shape
    (3, 2000)
    """
    p = probe_logits if isinstance(probe_logits, (np.ndarray, jax.Array)) else np.asarray(probe_logits)
    if p.ndim < 2:
        raise ValueError(f"probe_logits must be [K, m, C] or [K, F], got shape {p.shape}")
    return p.reshape(p.shape[0], -1)


def reconstruction_loss(targets: jax.Array, outputs: jax.Array, mae_weight: float = 1.0,
                        mse_weight: float = 1.0) -> jax.Array:
    """The MAE + MSE objective of Balle et al. (Table V), averaged over the batch and all coordinates.

    >>> import jax.numpy as jnp
    >>> float(reconstruction_loss(jnp.zeros((1, 2)), jnp.array([[0.5, 0.5]])))
    0.75
    """
    diff = outputs - targets
    return mae_weight * jnp.mean(jnp.abs(diff)) + mse_weight * jnp.mean(diff**2)


def early_stopping(history: Sequence[float], patience: int | None = None,
                   min_delta: float = 0.0) -> tuple[int, bool]:
    """The early-stopping rule of :func:`train_reconstructor` after the validation values ``history`` (one per epoch).

    An epoch improves when its value is below the best so far by more than ``min_delta`` (a NaN never improves);
    training stops once ``patience`` epochs in a row have not improved.

    Args:
      history: validation values of the epochs run so far (lower is better).
      patience: epochs without improvement before stopping (None: never stop).
      min_delta: smallest decrease that counts as an improvement (>= 0).

    Returns:
      ``(best_epoch, stop)``: the 1-based epoch with the best value (0 if none was finite), and whether to stop.

    >>> early_stopping([3.0, 2.0, 2.5, 1.0, 1.5, 1.2], patience=3)
    (4, False)
    >>> early_stopping([3.0, 2.0, 2.5, 1.0, 1.5, 1.2, 1.1], patience=3)
    (4, True)
    """
    best, best_value = 0, math.inf
    for epoch, value in enumerate(history, 1):
        if value < best_value - min_delta:  # False for NaN
            best, best_value = epoch, value
    return best, patience is not None and len(history) - best >= patience


@dataclasses.dataclass(frozen=True)
class ReconstructorFit:
    """A trained reconstructor.

    Attributes:
      model: the flax module ``phi`` (features ``[B, F]`` -> targets ``[B, ...]``).
      params: its variables (``{"params": ...}``).
      standardizer: the feature standardisation fitted on the training shadows.
      losses: ``[epochs]`` mean training loss per epoch.
      eval_mse: ``[epochs]`` mean MSE on the evaluation set after each epoch (empty without one).
      disc_params: the PatchGAN discriminator's variables (None without one).
      epochs_run: epochs trained (fewer than asked for after early stopping), counting resumed ones.
      best_epoch: the epoch (1-based) with the lowest monitored validation value (``monitor``; None without an
        evaluation set, 0 if no epoch had a finite one).
      stopped_early: whether early stopping ended the run before ``epochs``.
      resumed_from: epochs restored from a checkpoint (0 for a fresh run).
      epoch_seconds: wall time of each epoch trained in this call (the first includes compilation).
      eval_loss: ``[epochs]`` the training objective ``mae_weight * MAE + mse_weight * MSE`` on the evaluation
        set after each epoch (empty without one).
      final_params: the last epoch's variables (``params`` is the best epoch's under early stopping).
      train_flag: whether ``model`` takes a ``train`` argument (see :func:`train_reconstructor`).
    """

    model: Any
    params: Any
    standardizer: Standardizer
    losses: np.ndarray
    eval_mse: np.ndarray
    disc_params: Any = None
    epochs_run: int = 0
    best_epoch: int | None = None
    stopped_early: bool = False
    resumed_from: int = 0
    epoch_seconds: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    eval_loss: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    final_params: Any = None
    train_flag: bool = False


def _check_int(name, v, lo=1):
    if not (isinstance(v, (int, np.integer)) and v >= lo):
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


# Reserved: ``fold_in(key, e + 2)`` shuffles epoch e, so this index is never an epoch's key (epochs < 2**32 - 3).
_DROPOUT_STREAM = 2**32 - 1


def _trainable(variables, train_flag):
    """The optimised part of a model's variables: all of them, or only ``"params"`` with ``train_flag``."""
    return variables["params"] if train_flag else variables


@functools.lru_cache(maxsize=16)
def _make_steps(model, optimizer, mae_weight, mse_weight, discriminator, disc_optimizer, adversarial_weight,
                perceptual_fn, perceptual_weight, train_flag, step_loop):
    """``(state, x [S, B, F], t [S, B, ...], scaler, epoch_key, step0) -> (state, losses [S])``: S optimiser steps.

    ``step_loop="scan"``: one jitted ``lax.scan`` over the S steps; ``"host"``: a host loop calling one jitted
    step per minibatch. Cached on its (hashable) arguments, so repeated fits of one model with one optimizer object
    compile once. With ``train_flag`` the model runs in training mode: the optimiser updates ``"params"``, the
    other collections (BatchNorm ``"batch_stats"``) take the forward pass's updates, and step ``i`` of the epoch
    draws dropout from ``fold_in(epoch_key, i)``.
    """

    def gen_loss(trainable, variables, disc_params, x, t, rng):
        if train_flag:
            others = {k: v for k, v in variables.items() if k != "params"}
            out = model.apply({**others, "params": trainable}, x, train=True, rngs={"dropout": rng},
                              mutable=list(others) or False)
            out, updates = out if others else (out, {})
        else:
            out, updates = model.apply(trainable, x), None
        loss = reconstruction_loss(t, out, mae_weight, mse_weight)
        if perceptual_fn is not None:
            loss = loss + perceptual_weight * jnp.mean(perceptual_fn(t, out))
        if discriminator is not None:
            score = discriminator.apply(disc_params, out)
            loss = loss + adversarial_weight * jnp.mean((score - 1.0) ** 2)  # LSGAN generator loss
        return loss, (out, updates)

    def disc_loss(disc_params, real, fake):
        return jnp.mean((discriminator.apply(disc_params, real) - 1.0) ** 2) + jnp.mean(
            discriminator.apply(disc_params, fake) ** 2)

    def step(s, batch, scaler, epoch_key):
        params, opt_state, dparams, dopt_state = s
        x = (batch[0] - scaler.mean) / scaler.scale
        t = batch[1]
        rng = jax.random.fold_in(epoch_key, batch[2]) if train_flag else None
        trainable = _trainable(params, train_flag)
        (loss, (out, updates)), g = jax.value_and_grad(gen_loss, has_aux=True)(trainable, params, dparams, x, t,
                                                                              rng)
        upd, opt_state = optimizer.update(g, opt_state, trainable)
        trainable = optax.apply_updates(trainable, upd)
        params = {**params, **updates, "params": trainable} if train_flag else trainable
        if discriminator is not None:
            dg = jax.grad(disc_loss)(dparams, t, jax.lax.stop_gradient(out))
            dupd, dopt_state = disc_optimizer.update(dg, dopt_state, dparams)
            dparams = optax.apply_updates(dparams, dupd)
        return (params, opt_state, dparams, dopt_state), loss

    if step_loop == "scan":
        def steps(state, xs, ts, scaler, epoch_key, step0):
            return jax.lax.scan(lambda s, b: step(s, b, scaler, epoch_key), state,
                                (xs, ts, step0 + jnp.arange(xs.shape[0], dtype=jnp.uint32)))

        return jax.jit(steps)

    one_step = jax.jit(lambda state, x, t, scaler, epoch_key, i: step(state, (x, t, i), scaler, epoch_key))

    def host_steps(state, xs, ts, scaler, epoch_key, step0):
        losses = []
        for j in range(xs.shape[0]):  # dispatch is asynchronous: the host runs ahead of the device
            state, loss = one_step(state, xs[j], ts[j], scaler, epoch_key, np.uint32(step0 + j))
            losses.append(loss)
        return state, jnp.stack(losses)

    return host_steps


@functools.lru_cache(maxsize=16)
def _default_optimizer(learning_rate: float) -> optax.GradientTransformation:
    """RMSProp (Balle et al. Table V); one object per learning rate, so :func:`_make_steps` hits its cache."""
    return optax.rmsprop(learning_rate)


@functools.partial(jax.jit, static_argnums=1)
def _permutation(key, n):
    return jax.random.permutation(key, n)


def _gather(a, idx, dtype):
    """Rows ``idx`` of a host (NumPy / memory-mapped) or device array, as a device array of ``dtype``.

    Host arrays are read row by row through NumPy fancy indexing, so a memory-mapped store is paged in one
    chunk at a time and never copied whole."""
    if isinstance(a, jax.Array):
        return jnp.take(a, jnp.asarray(idx), axis=0).astype(dtype)
    return jnp.asarray(np.asarray(a[idx], dtype=dtype))


@jax.jit
def _eval_mse(params_and_model_out, targets):
    return jnp.mean((params_and_model_out - targets) ** 2)


def _predict(model, params, scaler, features, batch_size, train_flag=False):
    """Applies the standardiser and the model (evaluation mode) in batches (``lax.map``), ``[K, ...]``."""
    f = jnp.asarray(features)
    n = f.shape[0]
    pad = (-n) % batch_size
    if pad:
        f = jnp.concatenate([f, jnp.zeros((pad, f.shape[1]), f.dtype)])
    blocks = f.reshape(-1, batch_size, f.shape[1])
    kw = {"train": False} if train_flag else {}
    out = jax.lax.map(lambda b: model.apply(params, (b - scaler.mean) / scaler.scale, **kw), blocks)
    return out.reshape((-1, *out.shape[2:]))[:n]


_predict_jit = jax.jit(_predict, static_argnums=(0, 4, 5))


@functools.partial(jax.jit, static_argnums=(2, 3))
def _eval_loss(outputs, targets, mae_weight, mse_weight):
    """The validation objective ``mae_weight * MAE + mse_weight * MSE``."""
    return reconstruction_loss(targets, outputs, mae_weight, mse_weight)


def _tree_digest(tree) -> str:
    leaves = jax.tree_util.tree_leaves(tree)
    return stable_hash([array_digest(np.atleast_1d(np.asarray(x))) for x in leaves])


class _Checkpoint:
    """Per-epoch training state in ``directory/reconstructor-<hash>.npz``, written atomically.

    The file name is a hash of everything that determines the state after epoch ``e`` (model, optimiser
    settings, key, data digests, batch size, ...), not of ``epochs`` or ``patience``: a run can be resumed with
    more epochs, and a different configuration never picks up another's state.
    """

    def __init__(self, directory: str, key_description: dict):
        digest = stable_hash(key_description)
        self.path = os.path.join(os.fspath(directory), f"reconstructor-{digest[:24]}.npz")
        self.description = key_description

    def load(self, template_state, template_best):
        if not os.path.exists(self.path):
            return None
        with np.load(self.path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        state_leaves, state_def = jax.tree_util.tree_flatten(template_state)
        best_leaves, best_def = jax.tree_util.tree_flatten(template_best)
        got_state = [data[f"state_{i}"] for i in range(len(state_leaves))]
        got_best = [data[f"best_{i}"] for i in range(len(best_leaves))]
        for want, got in zip(state_leaves + best_leaves, got_state + got_best):
            if np.shape(want) != got.shape:
                raise ValueError(f"checkpoint {self.path} does not match the model (shape {got.shape} != "
                                 f"{np.shape(want)}); delete it to start over")
        eval_mse = list(data["eval_mse"])
        # Checkpoints written before the objective was recorded: NaN for those epochs (never "best" under
        # monitor="loss", which is part of the checkpoint name, so such a run never resumes from them).
        eval_loss = list(data["eval_loss"]) if "eval_loss" in data else [math.nan] * len(eval_mse)
        return {"state": jax.tree_util.tree_unflatten(state_def, [jnp.asarray(x) for x in got_state]),
                "best": jax.tree_util.tree_unflatten(best_def, [jnp.asarray(x) for x in got_best]),
                "losses": list(data["losses"]), "eval_mse": eval_mse, "eval_loss": eval_loss,
                "best_epoch": int(data["best_epoch"])}

    def save(self, state, best, losses, eval_mse, eval_loss, best_epoch):
        arrays = {f"state_{i}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(state))}
        arrays.update({f"best_{i}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(best))})
        atomic_save_npz(self.path, losses=np.asarray(losses, np.float64), eval_mse=np.asarray(eval_mse, np.float64),
                        eval_loss=np.asarray(eval_loss, np.float64), best_epoch=np.asarray(best_epoch), **arrays)


def train_reconstructor(model, features, targets, key: jax.Array, *, epochs: int = 100, batch_size: int = 128,
                        learning_rate: float = 1e-3, optimizer: optax.GradientTransformation | None = None,
                        mae_weight: float = 1.0, mse_weight: float = 1.0, standardizer: Standardizer | None = None,
                        scaling: str = "standard", init_params=None, discriminator=None,
                        adversarial_weight: float = 0.01, discriminator_learning_rate: float = 1e-5,
                        perceptual_fn: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
                        perceptual_weight: float = 1.0, eval_set: tuple | None = None,
                        patience: int | None = None, min_delta: float = 0.0, monitor: str = "mse",
                        train_flag: bool = False, step_loop: str = "scan", checkpoint_dir: str | None = None,
                        checkpoint_key: dict | None = None, stream_rows: int | None = None,
                        progress: bool = True) -> ReconstructorFit:
    """Trains a reconstructor network on shadow-model features and their targets (Balle et al. Sec. IV-B).

    Features are streamed: each epoch draws a permutation, then gathers ``stream_rows`` rows at a time from
    ``features`` (NumPy, a memory-mapped shadow store, or a device array) and runs those minibatches in one
    jitted ``lax.scan``; only one block is on the device at once and a memory-mapped store is never copied
    whole. The result does not depend on ``stream_rows``.

    Args:
      model: flax module ``phi`` mapping ``[B, F]`` features to ``[B, *target_shape]`` (e.g.
        :func:`recon_jax.models.reconstructors.reconstructor_mlp`).
      features: ``[K, F]`` raw (unstandardised) features of the training shadow models.
      targets: ``[K, ...]`` their shadow targets.
      key: typed key; ``fold_in(key, 0)`` initialises ``phi`` (and ``fold_in(key, 1)`` the discriminator),
        epoch ``e`` shuffles with ``fold_in(key, e + 2)``; with ``train_flag``, minibatch ``i`` of epoch ``e``
        draws dropout from ``fold_in(fold_in(fold_in(key, 2**32 - 1), e), i)``.
      epochs: maximum passes over the shadow set (>= 1).
      batch_size: minibatch size (>= 1; capped at ``K``; the last partial batch of an epoch is dropped).
      learning_rate: RMSProp learning rate when ``optimizer`` is None (Table V: 1e-3).
      optimizer: any optax transformation (overrides ``learning_rate``). Repeated fits that pass the same
        optimizer object (and model) reuse one compiled step.
      mae_weight, mse_weight: weights of the MAE and MSE terms (>= 0).
      standardizer: a fitted :class:`Standardizer`; default: fitted on ``features`` (the training shadows) as
        ``scaling`` says.
      scaling: ``"standard"`` (:func:`fit_standardizer`, zero mean and unit variance) or ``"minmax"``
        (:func:`fit_minmax`, each coordinate's training range to [0, 1]); used when ``standardizer`` is None.
      init_params: start from these ``phi`` variables (fine-tuning) instead of a fresh initialisation.
      discriminator: optional flax module (PatchGAN, Table VIII) for a least-squares adversarial loss; targets
        must then be images ``[K, H, W, C]``.
      adversarial_weight: weight of the generator's adversarial loss (>= 0).
      discriminator_learning_rate: Adam learning rate of the discriminator (paper: 1e-5).
      perceptual_fn: optional ``(targets, outputs) -> [B]`` perceptual distance (e.g. LPIPS from a feature
        network the caller provides), weighted by ``perceptual_weight``.
      eval_set: optional ``(features [E, F], targets [E, ...])`` of held-out shadows; their MSE and objective
        (the validation values) are recorded after every epoch (not used for training or for standardisation).
      patience: early stopping (:func:`early_stopping`): stop once the monitored validation value has not
        improved by more than ``min_delta`` for ``patience`` epochs, and return the parameters of the best epoch
        (needs ``eval_set``; None: run all ``epochs`` and return the last parameters).
      min_delta: smallest decrease of the monitored value that counts as an improvement (>= 0).
      monitor: the validation value that picks the best epoch: ``"mse"`` or ``"loss"`` (the objective
        ``mae_weight * MAE + mse_weight * MSE``, as in the DR attack's reference code).
      train_flag: ``model`` takes a ``train`` argument: ``train=True`` while training (BatchNorm batch
        statistics, dropout with the ``"dropout"`` rng; the optimiser updates ``"params"``, the forward pass the
        other collections) and ``train=False`` for evaluation and :func:`reconstruct`.
      checkpoint_dir: save the training state atomically after every epoch in this directory, under a name
        hashed from everything that determines it; a later call with the same arguments resumes after the last
        saved epoch (``epochs`` may be larger) and gives the same result as an uninterrupted run.
      checkpoint_key: JSON-able description of what the hash cannot see; required with ``checkpoint_dir`` when
        ``optimizer`` or ``perceptual_fn`` is given (functions have no stable hash).
      stream_rows: rows gathered per block (rounded down to a multiple of the batch size; default 2,048).
      step_loop: ``"scan"`` runs each block's minibatches in one jitted ``lax.scan``; ``"host"`` loops over them
        on the host, one jitted step per minibatch (no loop in the compiled program: XLA:CPU runs the DR attack's
        transposed-convolution + BatchNorm steps ~25x slower inside a loop). Same result up to float rounding.
      progress: show a tqdm bar over epochs.

    Returns:
      A :class:`ReconstructorFit` (``epochs_run``, ``best_epoch`` and ``stopped_early`` record early stopping).

    Raises:
      ValueError: on mismatched shapes or out-of-range hyper-parameters.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models.reconstructors import reconstructor_mlp
    >>> f = jax.random.normal(jax.random.key(1), (64, 5)); t = jax.nn.sigmoid(f[:, :2] @ jnp.ones((2, 4)))
    >>> fit = train_reconstructor(reconstructor_mlp((4,), (32,)), f, t, jax.random.key(0), epochs=40,
    ...                           batch_size=16, progress=False)
    >>> bool(fit.losses[-1] < fit.losses[0]), reconstruct(fit, f[:3]).shape, fit.epochs_run
    (True, (3, 4), 40)
    """
    f = _features_2d(features)
    t = targets if isinstance(targets, (np.ndarray, jax.Array)) else np.asarray(targets)
    if t.shape[0] != f.shape[0]:
        raise ValueError(f"features and targets must have the same length, got {f.shape[0]} and {t.shape[0]}")
    _check_int("epochs", epochs)
    _check_int("batch_size", batch_size)
    for name, v in (("mae_weight", mae_weight), ("mse_weight", mse_weight),
                    ("adversarial_weight", adversarial_weight), ("perceptual_weight", perceptual_weight),
                    ("min_delta", min_delta)):
        if not v >= 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    if optimizer is None and not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    if discriminator is not None and not discriminator_learning_rate > 0:
        raise ValueError(f"discriminator_learning_rate must be > 0, got {discriminator_learning_rate}")
    if discriminator is not None and t.ndim != 4:
        raise ValueError(f"a discriminator needs image targets [K, H, W, C], got shape {t.shape}")
    if scaling not in ("standard", "minmax"):
        raise ValueError(f"scaling must be 'standard' or 'minmax', got {scaling!r}")
    if monitor not in ("mse", "loss"):
        raise ValueError(f"monitor must be 'mse' or 'loss', got {monitor!r}")
    if step_loop not in ("scan", "host"):
        raise ValueError(f"step_loop must be 'scan' or 'host', got {step_loop!r}")
    if patience is not None:
        _check_int("patience", patience)
        if eval_set is None:
            raise ValueError("patience (early stopping) needs an eval_set of held-out shadows")
    if stream_rows is not None:
        _check_int("stream_rows", stream_rows)
    if checkpoint_dir is not None and checkpoint_key is None and (optimizer is not None or perceptual_fn is not None):
        raise ValueError("checkpoint_key is required with checkpoint_dir when optimizer or perceptual_fn is given")
    if standardizer is not None:
        scaler = standardizer
    else:
        scaler = fit_standardizer(f) if scaling == "standard" else fit_minmax(f)
    if scaler.mean.shape[-1] != f.shape[1]:
        raise ValueError(f"standardizer has {scaler.mean.shape[-1]} columns, features have {f.shape[1]}")
    train_flag = bool(train_flag)
    bs = min(int(batch_size), f.shape[0])
    dtype = scaler.mean.dtype
    n_steps = f.shape[0] // bs
    block_steps = max(1, (stream_rows if stream_rows is not None else 2048) // bs)
    if init_params is not None:
        params = init_params
    elif train_flag:
        params = model.init(jax.random.fold_in(key, 0), _gather(f, np.arange(1), dtype), train=False)
    else:
        params = model.init(jax.random.fold_in(key, 0), _gather(f, np.arange(1), dtype))
    opt = _default_optimizer(float(learning_rate)) if optimizer is None else optimizer
    dparams = dopt = dopt_state = None
    if discriminator is not None:
        dparams = discriminator.init(jax.random.fold_in(key, 1), _gather(t, np.arange(1), dtype))
        dopt = optax.adam(discriminator_learning_rate)
        dopt_state = dopt.init(dparams)
    steps_fn = _make_steps(model, opt, float(mae_weight), float(mse_weight), discriminator, dopt,
                           float(adversarial_weight), perceptual_fn, float(perceptual_weight), train_flag, step_loop)
    state = (params, opt.init(_trainable(params, train_flag)), dparams, dopt_state)
    dropout_key = jax.random.fold_in(key, _DROPOUT_STREAM)
    ef = et = None
    if eval_set is not None:
        ef = jnp.asarray(_features_2d(eval_set[0], "eval_set features"), dtype)
        et = jnp.asarray(eval_set[1], dtype)
        if ef.shape[1] != f.shape[1] or et.shape[1:] != tuple(t.shape[1:]) or ef.shape[0] != et.shape[0]:
            raise ValueError("eval_set must be (features [E, F], targets [E, ...]) matching the training shapes")
    losses, eval_mse, eval_loss, best, best_epoch = [], [], [], state[0], 0
    ckpt = None
    if checkpoint_dir is not None:
        description = {
            "format": "recon_jax.reconn/1", "model": repr(model), "discriminator": repr(discriminator),
            "learning_rate": None if optimizer is not None else float(learning_rate),
            "weights": [float(mae_weight), float(mse_weight), float(adversarial_weight), float(perceptual_weight)],
            "discriminator_learning_rate": float(discriminator_learning_rate), "batch_size": bs,
            "key": np.asarray(jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
                              else key).tolist(), "features": array_digest(f),
            "targets": array_digest(t), "standardizer": _tree_digest(tuple(scaler)),
            "init_params": None if init_params is None else _tree_digest(init_params),
            "eval_set": None if eval_set is None else [array_digest(ef), array_digest(et)],
            "dtype": str(dtype), "extra": checkpoint_key}
        if train_flag:  # only when set, so checkpoints written before these options existed still resume
            description["train_flag"] = True
        if monitor != "mse":
            description["monitor"] = monitor
        ckpt = _Checkpoint(checkpoint_dir, description)
        saved = ckpt.load(state, best)
        if saved is not None:
            state, best = saved["state"], saved["best"]
            losses, eval_mse, best_epoch = saved["losses"], saved["eval_mse"], saved["best_epoch"]
            eval_loss = saved["eval_loss"]
    resumed_from = len(losses)
    monitored = eval_mse if monitor == "mse" else eval_loss

    def should_stop():
        return patience is not None and early_stopping(monitored, patience, min_delta)[1]

    bar = tqdm(range(resumed_from, epochs), desc="reconstructor", unit="epoch", disable=not progress)
    seconds = []
    for e in bar:
        if should_stop():
            break
        t_epoch = time.perf_counter()
        perm = np.asarray(_permutation(jax.random.fold_in(key, e + 2), f.shape[0]))[: n_steps * bs]
        epoch_dropout_key = jax.random.fold_in(dropout_key, e)
        epoch_losses = []
        for s0 in range(0, n_steps, block_steps):
            idx = perm[s0 * bs: min(n_steps, s0 + block_steps) * bs]
            shape = (-1, bs)
            xs = _gather(f, idx, dtype).reshape(*shape, f.shape[1])
            ts = _gather(t, idx, dtype).reshape(*shape, *t.shape[1:])
            state, block_losses = steps_fn(state, xs, ts, scaler, epoch_dropout_key,
                                           np.uint32(s0))  # async: the next gather overlaps it
            if epoch_losses:  # but at most two blocks in flight, never the whole epoch's features
                epoch_losses[-1].block_until_ready()
            epoch_losses.append(block_losses)
        losses.append(float(np.mean(np.concatenate([np.asarray(x, np.float64) for x in epoch_losses]))))
        seconds.append(time.perf_counter() - t_epoch)
        post = {"loss": f"{losses[-1]:.4f}"}
        if eval_set is not None:
            out = _predict_jit(model, state[0], scaler, ef, min(256, ef.shape[0]), train_flag)
            eval_mse.append(float(_eval_mse(out, et)))
            eval_loss.append(float(_eval_loss(out, et, float(mae_weight), float(mse_weight))))
            new_best = early_stopping(monitored, None, min_delta)[0]
            if new_best == len(monitored):
                best, best_epoch = state[0], new_best
            post[f"eval_{monitor}"] = f"{monitored[-1]:.4f}"
        bar.set_postfix(**post)
        if ckpt is not None:
            ckpt.save(state, best, losses, eval_mse, eval_loss, best_epoch)
    bar.close()
    stopped = should_stop() and len(losses) < epochs
    params = best if patience is not None and best_epoch > 0 else state[0]
    return ReconstructorFit(model=model, params=params, standardizer=scaler, losses=np.asarray(losses),
                            eval_mse=np.asarray(eval_mse), disc_params=state[2], epochs_run=len(losses),
                            best_epoch=best_epoch if eval_set is not None else None, stopped_early=stopped,
                            resumed_from=resumed_from, epoch_seconds=np.asarray(seconds),
                            eval_loss=np.asarray(eval_loss), final_params=state[0], train_flag=train_flag)


def fine_tune_reconstructor(fit: ReconstructorFit, features, targets, key: jax.Array, *, epochs: int = 20,
                            refit_standardizer: bool = True, **kwargs) -> ReconstructorFit:
    """Fine-tunes a trained reconstructor on shadow models of a *new* fixed set D'- (Balle et al. App. B).

    Starts from ``fit.params``; by default the feature standardisation is re-fitted on the new training
    shadows (the parameter statistics change with the fixed set); ``refit_standardizer=False`` keeps the old one.
    Other keyword arguments go to :func:`train_reconstructor` (``discriminator`` is not carried over;
    ``train_flag`` is, unless given).

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models.reconstructors import reconstructor_mlp
    >>> f = jax.random.normal(jax.random.key(1), (32, 5)); t = jax.nn.sigmoid(f[:, :3])
    >>> fit = train_reconstructor(reconstructor_mlp((3,), (16,)), f, t, jax.random.key(0), epochs=2,
    ...                           batch_size=8, progress=False)
    >>> fine_tune_reconstructor(fit, f + 1.0, t, jax.random.key(2), epochs=2, batch_size=8,
    ...                         progress=False).losses.shape
    (2,)
    """
    scaler = None if refit_standardizer else fit.standardizer
    kwargs.setdefault("train_flag", fit.train_flag)
    return train_reconstructor(fit.model, features, targets, key, epochs=epochs, standardizer=scaler,
                               init_params=fit.params, **kwargs)


def reconstruct(fit: ReconstructorFit, features, batch_size: int = 256) -> jax.Array:
    """Reconstructions ``phi(standardise(features))`` for released (or held-out shadow) models, ``[K, ...]``.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models.reconstructors import reconstructor_mlp
    >>> f = jax.random.normal(jax.random.key(1), (16, 5))
    >>> fit = train_reconstructor(reconstructor_mlp((2,), (8,)), f, jnp.zeros((16, 2)), jax.random.key(0),
    ...                           epochs=1, batch_size=8, progress=False)
    >>> reconstruct(fit, f).shape
    (16, 2)
    """
    f = _features_2d(features)
    if f.shape[1] != fit.standardizer.mean.shape[-1]:
        raise ValueError(f"features must have {fit.standardizer.mean.shape[-1]} columns, got {f.shape[1]}")
    _check_int("batch_size", batch_size)
    return _predict_jit(fit.model, fit.params, fit.standardizer, jnp.asarray(f, fit.standardizer.mean.dtype),
                        min(int(batch_size), f.shape[0]), bool(fit.train_flag))
