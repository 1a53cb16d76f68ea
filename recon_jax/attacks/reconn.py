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
released models.

Training (:func:`train_reconstructor`): loss ``mae_weight * MAE + mse_weight * MSE`` (Table V), optionally plus
a perceptual loss from a caller-supplied feature network (the paper uses LPIPS on CIFAR-10; no pretrained LPIPS
network ships with recon_jax) and a least-squares PatchGAN adversarial loss (Table VIII, discriminator trained
with Adam at 1e-5). RMSProp (lr 1e-3) by default; each epoch is one jitted ``lax.scan`` over minibatches of a
permutation drawn from ``fold_in(key, epoch + 1)`` (seeded shuffling; the last partial batch is dropped).
Fine-tuning a trained reconstructor on shadow models of a new fixed set (App. B) is
:func:`fine_tune_reconstructor`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from recon_jax.io import atomic_save_npz
from recon_jax.models.flatten import Layout, select

__all__ = [
    "Standardizer",
    "fit_standardizer",
    "standardize",
    "whitebox_features",
    "blackbox_features",
    "reconstruction_loss",
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
      best_epoch: the epoch (1-based) with the lowest validation MSE (None without an evaluation set).
      stopped_early: whether early stopping ended the run before ``epochs``.
      resumed_from: epochs restored from a checkpoint (0 for a fresh run).
      epoch_seconds: wall time of each epoch trained in this call (the first includes compilation).
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


def _check_int(name, v, lo=1):
    if not (isinstance(v, (int, np.integer)) and v >= lo):
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def _make_steps(model, optimizer, mae_weight, mse_weight, discriminator, disc_optimizer, adversarial_weight,
                perceptual_fn, perceptual_weight):
    """A jitted ``(state, x [S, B, F], t [S, B, ...], scaler) -> (state, losses [S])``: S optimiser steps."""

    def gen_loss(params, disc_params, x, t):
        out = model.apply(params, x)
        loss = reconstruction_loss(t, out, mae_weight, mse_weight)
        if perceptual_fn is not None:
            loss = loss + perceptual_weight * jnp.mean(perceptual_fn(t, out))
        if discriminator is not None:
            score = discriminator.apply(disc_params, out)
            loss = loss + adversarial_weight * jnp.mean((score - 1.0) ** 2)  # LSGAN generator loss
        return loss, out

    def disc_loss(disc_params, real, fake):
        return jnp.mean((discriminator.apply(disc_params, real) - 1.0) ** 2) + jnp.mean(
            discriminator.apply(disc_params, fake) ** 2)

    def steps(state, xs, ts, scaler):
        def step(s, batch):
            params, opt_state, dparams, dopt_state = s
            x = (batch[0] - scaler.mean) / scaler.scale
            t = batch[1]
            (loss, out), g = jax.value_and_grad(gen_loss, has_aux=True)(params, dparams, x, t)
            upd, opt_state = optimizer.update(g, opt_state, params)
            params = optax.apply_updates(params, upd)
            if discriminator is not None:
                dg = jax.grad(disc_loss)(dparams, t, jax.lax.stop_gradient(out))
                dupd, dopt_state = disc_optimizer.update(dg, dopt_state, dparams)
                dparams = optax.apply_updates(dparams, dupd)
            return (params, opt_state, dparams, dopt_state), loss

        return jax.lax.scan(step, state, (xs, ts))

    return jax.jit(steps)


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


def _predict(model, params, scaler, features, batch_size):
    """Applies the standardiser and the model in batches (``lax.map``), ``[K, ...]``."""
    f = jnp.asarray(features)
    n = f.shape[0]
    pad = (-n) % batch_size
    if pad:
        f = jnp.concatenate([f, jnp.zeros((pad, f.shape[1]), f.dtype)])
    blocks = f.reshape(-1, batch_size, f.shape[1])
    out = jax.lax.map(lambda b: model.apply(params, (b - scaler.mean) / scaler.scale), blocks)
    return out.reshape((-1, *out.shape[2:]))[:n]


_predict_jit = jax.jit(_predict, static_argnums=(0, 4))


def _digest_rows(a, block: int = 4096) -> str:
    """SHA-256 of an array's dtype, shape and bytes, read in row blocks (no whole copy of a memory map)."""
    a_host = a if not isinstance(a, jax.Array) else np.asarray(a)
    h = hashlib.sha256(f"{np.dtype(a_host.dtype).str}{tuple(a_host.shape)}".encode())
    for start in range(0, a_host.shape[0], block):
        h.update(np.ascontiguousarray(a_host[start:start + block]).tobytes())
    return h.hexdigest()


def _tree_digest(tree) -> str:
    leaves = jax.tree_util.tree_leaves(tree)
    return hashlib.sha256("".join(_digest_rows(np.atleast_1d(np.asarray(x))) for x in leaves).encode()).hexdigest()


class _Checkpoint:
    """Per-epoch training state in ``directory/reconstructor-<hash>.npz``, written atomically.

    The file name is a hash of everything that determines the state after epoch ``e`` (model, optimiser
    settings, key, data digests, batch size, ...), not of ``epochs`` or ``patience``: a run can be resumed with
    more epochs, and a different configuration never picks up another's state.
    """

    def __init__(self, directory: str, key_description: dict):
        digest = hashlib.sha256(json.dumps(key_description, sort_keys=True, default=str).encode()).hexdigest()
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
        return {"state": jax.tree_util.tree_unflatten(state_def, [jnp.asarray(x) for x in got_state]),
                "best": jax.tree_util.tree_unflatten(best_def, [jnp.asarray(x) for x in got_best]),
                "losses": list(data["losses"]), "eval_mse": list(data["eval_mse"]),
                "best_epoch": int(data["best_epoch"])}

    def save(self, state, best, losses, eval_mse, best_epoch):
        arrays = {f"state_{i}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(state))}
        arrays.update({f"best_{i}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(best))})
        atomic_save_npz(self.path, losses=np.asarray(losses, np.float64), eval_mse=np.asarray(eval_mse, np.float64),
                        best_epoch=np.asarray(best_epoch), **arrays)


def train_reconstructor(model, features, targets, key: jax.Array, *, epochs: int = 100, batch_size: int = 128,
                        learning_rate: float = 1e-3, optimizer: optax.GradientTransformation | None = None,
                        mae_weight: float = 1.0, mse_weight: float = 1.0, standardizer: Standardizer | None = None,
                        init_params=None, discriminator=None, adversarial_weight: float = 0.01,
                        discriminator_learning_rate: float = 1e-5,
                        perceptual_fn: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
                        perceptual_weight: float = 1.0, eval_set: tuple | None = None,
                        patience: int | None = None, min_delta: float = 0.0, checkpoint_dir: str | None = None,
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
        epoch ``e`` shuffles with ``fold_in(key, e + 2)``.
      epochs: maximum passes over the shadow set (>= 1).
      batch_size: minibatch size (>= 1; capped at ``K``; the last partial batch of an epoch is dropped).
      learning_rate: RMSProp learning rate when ``optimizer`` is None (Table V: 1e-3).
      optimizer: any optax transformation (overrides ``learning_rate``).
      mae_weight, mse_weight: weights of the MAE and MSE terms (>= 0).
      standardizer: a fitted :class:`Standardizer`; default: fitted on ``features`` (the training shadows).
      init_params: start from these ``phi`` variables (fine-tuning) instead of a fresh initialisation.
      discriminator: optional flax module (PatchGAN, Table VIII) for a least-squares adversarial loss; targets
        must then be images ``[K, H, W, C]``.
      adversarial_weight: weight of the generator's adversarial loss (>= 0).
      discriminator_learning_rate: Adam learning rate of the discriminator (paper: 1e-5).
      perceptual_fn: optional ``(targets, outputs) -> [B]`` perceptual distance (e.g. LPIPS from a feature
        network the caller provides), weighted by ``perceptual_weight``.
      eval_set: optional ``(features [E, F], targets [E, ...])`` of held-out shadows; their MSE (the validation
        loss) is recorded after every epoch (not used for training or for standardisation).
      patience: early stopping: stop once the validation MSE has not improved by more than ``min_delta`` for
        ``patience`` epochs, and return the parameters of the best epoch (needs ``eval_set``; None: run all
        ``epochs`` and return the last parameters).
      min_delta: smallest decrease of the validation MSE that counts as an improvement (>= 0).
      checkpoint_dir: save the training state atomically after every epoch in this directory, under a name
        hashed from everything that determines it; a later call with the same arguments resumes after the last
        saved epoch (``epochs`` may be larger) and gives the same result as an uninterrupted run.
      checkpoint_key: JSON-able description of what the hash cannot see; required with ``checkpoint_dir`` when
        ``optimizer`` or ``perceptual_fn`` is given (functions have no stable hash).
      stream_rows: rows gathered per block (rounded down to a multiple of the batch size; default 2,048).
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
    if patience is not None:
        _check_int("patience", patience)
        if eval_set is None:
            raise ValueError("patience (early stopping) needs an eval_set of held-out shadows")
    if stream_rows is not None:
        _check_int("stream_rows", stream_rows)
    if checkpoint_dir is not None and checkpoint_key is None and (optimizer is not None or perceptual_fn is not None):
        raise ValueError("checkpoint_key is required with checkpoint_dir when optimizer or perceptual_fn is given")
    scaler = fit_standardizer(f) if standardizer is None else standardizer
    if scaler.mean.shape[-1] != f.shape[1]:
        raise ValueError(f"standardizer has {scaler.mean.shape[-1]} columns, features have {f.shape[1]}")
    bs = min(int(batch_size), f.shape[0])
    dtype = scaler.mean.dtype
    n_steps = f.shape[0] // bs
    block_steps = max(1, (stream_rows if stream_rows is not None else 2048) // bs)
    params = model.init(jax.random.fold_in(key, 0), _gather(f, np.arange(1), dtype)) if init_params is None \
        else init_params
    opt = optax.rmsprop(learning_rate) if optimizer is None else optimizer
    dparams = dopt = dopt_state = None
    if discriminator is not None:
        dparams = discriminator.init(jax.random.fold_in(key, 1), _gather(t, np.arange(1), dtype))
        dopt = optax.adam(discriminator_learning_rate)
        dopt_state = dopt.init(dparams)
    steps_fn = _make_steps(model, opt, float(mae_weight), float(mse_weight), discriminator, dopt,
                           float(adversarial_weight), perceptual_fn, float(perceptual_weight))
    state = (params, opt.init(params), dparams, dopt_state)
    ef = et = None
    if eval_set is not None:
        ef = jnp.asarray(_features_2d(eval_set[0], "eval_set features"), dtype)
        et = jnp.asarray(eval_set[1], dtype)
        if ef.shape[1] != f.shape[1] or et.shape[1:] != tuple(t.shape[1:]) or ef.shape[0] != et.shape[0]:
            raise ValueError("eval_set must be (features [E, F], targets [E, ...]) matching the training shapes")
    losses, eval_mse, best, best_epoch = [], [], state[0], 0
    ckpt = None
    if checkpoint_dir is not None:
        ckpt = _Checkpoint(checkpoint_dir, {
            "format": "recon_jax.reconn/1", "model": repr(model), "discriminator": repr(discriminator),
            "learning_rate": None if optimizer is not None else float(learning_rate),
            "weights": [float(mae_weight), float(mse_weight), float(adversarial_weight), float(perceptual_weight)],
            "discriminator_learning_rate": float(discriminator_learning_rate), "batch_size": bs,
            "key": np.asarray(jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
                              else key).tolist(), "features": _digest_rows(f),
            "targets": _digest_rows(t), "standardizer": _tree_digest(tuple(scaler)),
            "init_params": None if init_params is None else _tree_digest(init_params),
            "eval_set": None if eval_set is None else [_digest_rows(ef), _digest_rows(et)],
            "dtype": str(dtype), "extra": checkpoint_key})
        saved = ckpt.load(state, best)
        if saved is not None:
            state, best = saved["state"], saved["best"]
            losses, eval_mse, best_epoch = saved["losses"], saved["eval_mse"], saved["best_epoch"]
    resumed_from = len(losses)

    def should_stop():
        return patience is not None and len(eval_mse) - best_epoch >= patience

    bar = tqdm(range(resumed_from, epochs), desc="reconstructor", unit="epoch", disable=not progress)
    seconds = []
    for e in bar:
        if should_stop():
            break
        t_epoch = time.perf_counter()
        perm = np.asarray(_permutation(jax.random.fold_in(key, e + 2), f.shape[0]))[: n_steps * bs]
        epoch_losses = []
        for s0 in range(0, n_steps, block_steps):
            idx = perm[s0 * bs: min(n_steps, s0 + block_steps) * bs]
            shape = (-1, bs)
            xs = _gather(f, idx, dtype).reshape(*shape, f.shape[1])
            ts = _gather(t, idx, dtype).reshape(*shape, *t.shape[1:])
            state, block_losses = steps_fn(state, xs, ts, scaler)  # async: the next gather overlaps it
            if epoch_losses:  # but at most two blocks in flight, never the whole epoch's features
                epoch_losses[-1].block_until_ready()
            epoch_losses.append(block_losses)
        losses.append(float(np.mean(np.concatenate([np.asarray(x, np.float64) for x in epoch_losses]))))
        seconds.append(time.perf_counter() - t_epoch)
        post = {"loss": f"{losses[-1]:.4f}"}
        if eval_set is not None:
            out = _predict_jit(model, state[0], scaler, ef, min(256, ef.shape[0]))
            eval_mse.append(float(_eval_mse(out, et)))
            if len(eval_mse) == 1 or eval_mse[-1] < eval_mse[best_epoch - 1] - min_delta:
                best, best_epoch = state[0], len(eval_mse)
            post["eval_mse"] = f"{eval_mse[-1]:.4f}"
        bar.set_postfix(**post)
        if ckpt is not None:
            ckpt.save(state, best, losses, eval_mse, best_epoch)
    bar.close()
    stopped = should_stop() and len(losses) < epochs
    params = best if patience is not None else state[0]
    return ReconstructorFit(model=model, params=params, standardizer=scaler, losses=np.asarray(losses),
                            eval_mse=np.asarray(eval_mse), disc_params=state[2], epochs_run=len(losses),
                            best_epoch=best_epoch if eval_set is not None else None, stopped_early=stopped,
                            resumed_from=resumed_from, epoch_seconds=np.asarray(seconds))


def fine_tune_reconstructor(fit: ReconstructorFit, features, targets, key: jax.Array, *, epochs: int = 20,
                            refit_standardizer: bool = True, **kwargs) -> ReconstructorFit:
    """Fine-tunes a trained reconstructor on shadow models of a *new* fixed set D'- (Balle et al. App. B).

    Starts from ``fit.params``; by default the feature standardisation is re-fitted on the new training
    shadows (the parameter statistics change with the fixed set); ``refit_standardizer=False`` keeps the old one.
    Other keyword arguments go to :func:`train_reconstructor` (``discriminator`` is not carried over).

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
                        min(int(batch_size), f.shape[0]))
