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
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

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
    for start in range(0, f.shape[0], 4096):
        block = np.asarray(f[start:start + 4096], np.float64)
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
    """

    model: Any
    params: Any
    standardizer: Standardizer
    losses: np.ndarray
    eval_mse: np.ndarray
    disc_params: Any = None


def _check_int(name, v, lo=1):
    if not (isinstance(v, (int, np.integer)) and v >= lo):
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def _make_epoch(model, optimizer, mae_weight, mse_weight, discriminator, disc_optimizer, adversarial_weight,
                perceptual_fn, perceptual_weight, batch_size):
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

    def epoch(state, features, targets, scaler, key):
        n = features.shape[0]
        steps = n // batch_size
        perm = jax.random.permutation(key, n)[: steps * batch_size].reshape(steps, batch_size)

        def step(s, idx):
            params, opt_state, dparams, dopt_state = s
            x = (features[idx] - scaler.mean) / scaler.scale
            t = targets[idx]
            (loss, out), g = jax.value_and_grad(gen_loss, has_aux=True)(params, dparams, x, t)
            upd, opt_state = optimizer.update(g, opt_state, params)
            params = optax.apply_updates(params, upd)
            if discriminator is not None:
                dg = jax.grad(disc_loss)(dparams, t, jax.lax.stop_gradient(out))
                dupd, dopt_state = disc_optimizer.update(dg, dopt_state, dparams)
                dparams = optax.apply_updates(dparams, dupd)
            return (params, opt_state, dparams, dopt_state), loss

        state, losses = jax.lax.scan(step, state, perm)
        return state, jnp.mean(losses)

    return jax.jit(epoch)


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


def train_reconstructor(model, features, targets, key: jax.Array, *, epochs: int = 100, batch_size: int = 128,
                        learning_rate: float = 1e-3, optimizer: optax.GradientTransformation | None = None,
                        mae_weight: float = 1.0, mse_weight: float = 1.0, standardizer: Standardizer | None = None,
                        init_params=None, discriminator=None, adversarial_weight: float = 0.01,
                        discriminator_learning_rate: float = 1e-5,
                        perceptual_fn: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
                        perceptual_weight: float = 1.0, eval_set: tuple | None = None,
                        progress: bool = True) -> ReconstructorFit:
    """Trains a reconstructor network on shadow-model features and their targets (Balle et al. Sec. IV-B).

    Args:
      model: flax module ``phi`` mapping ``[B, F]`` features to ``[B, *target_shape]`` (e.g.
        :func:`recon_jax.models.reconstructors.reconstructor_mlp`).
      features: ``[K, F]`` raw (unstandardised) features of the training shadow models.
      targets: ``[K, ...]`` their shadow targets.
      key: typed key; ``fold_in(key, 0)`` initialises ``phi`` (and ``fold_in(key, 1)`` the discriminator),
        epoch ``e`` shuffles with ``fold_in(key, e + 2)``.
      epochs: passes over the shadow set (>= 1).
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
      eval_set: optional ``(features [E, F], targets [E, ...])`` of held-out shadows; their MSE is recorded after
        every epoch (not used for training or for standardisation).
      progress: show a tqdm bar over epochs.

    Returns:
      A :class:`ReconstructorFit`.

    Raises:
      ValueError: on mismatched shapes or out-of-range hyper-parameters.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models.reconstructors import reconstructor_mlp
    >>> f = jax.random.normal(jax.random.key(1), (64, 5)); t = jax.nn.sigmoid(f[:, :2] @ jnp.ones((2, 4)))
    >>> fit = train_reconstructor(reconstructor_mlp((4,), (32,)), f, t, jax.random.key(0), epochs=40,
    ...                           batch_size=16, progress=False)
    >>> bool(fit.losses[-1] < fit.losses[0]), reconstruct(fit, f[:3]).shape
    (True, (3, 4))
    """
    f = _features_2d(features)
    t = targets if isinstance(targets, (np.ndarray, jax.Array)) else np.asarray(targets)
    if t.shape[0] != f.shape[0]:
        raise ValueError(f"features and targets must have the same length, got {f.shape[0]} and {t.shape[0]}")
    _check_int("epochs", epochs)
    _check_int("batch_size", batch_size)
    for name, v in (("mae_weight", mae_weight), ("mse_weight", mse_weight),
                    ("adversarial_weight", adversarial_weight), ("perceptual_weight", perceptual_weight)):
        if not v >= 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    if optimizer is None and not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    if discriminator is not None and not discriminator_learning_rate > 0:
        raise ValueError(f"discriminator_learning_rate must be > 0, got {discriminator_learning_rate}")
    if discriminator is not None and t.ndim != 4:
        raise ValueError(f"a discriminator needs image targets [K, H, W, C], got shape {t.shape}")
    scaler = fit_standardizer(f) if standardizer is None else standardizer
    if scaler.mean.shape[-1] != f.shape[1]:
        raise ValueError(f"standardizer has {scaler.mean.shape[-1]} columns, features have {f.shape[1]}")
    bs = min(int(batch_size), f.shape[0])
    fx = jnp.asarray(f, scaler.mean.dtype)
    tx = jnp.asarray(t, scaler.mean.dtype)
    params = model.init(jax.random.fold_in(key, 0), fx[:1]) if init_params is None else init_params
    opt = optax.rmsprop(learning_rate) if optimizer is None else optimizer
    dparams = dopt = dopt_state = None
    if discriminator is not None:
        dparams = discriminator.init(jax.random.fold_in(key, 1), tx[:1])
        dopt = optax.adam(discriminator_learning_rate)
        dopt_state = dopt.init(dparams)
    epoch_fn = _make_epoch(model, opt, float(mae_weight), float(mse_weight), discriminator, dopt,
                           float(adversarial_weight), perceptual_fn, float(perceptual_weight), bs)
    state = (params, opt.init(params), dparams, dopt_state)
    if eval_set is not None:
        ef = jnp.asarray(_features_2d(eval_set[0], "eval_set features"), fx.dtype)
        et = jnp.asarray(eval_set[1], fx.dtype)
        if ef.shape[1] != f.shape[1] or et.shape[1:] != tx.shape[1:] or ef.shape[0] != et.shape[0]:
            raise ValueError("eval_set must be (features [E, F], targets [E, ...]) matching the training shapes")
    losses, eval_mse = [], []
    bar = tqdm(range(epochs), desc="reconstructor", unit="epoch", disable=not progress)
    for e in bar:
        state, loss = epoch_fn(state, fx, tx, scaler, jax.random.fold_in(key, e + 2))
        losses.append(float(loss))
        if eval_set is not None:
            out = _predict_jit(model, state[0], scaler, ef, min(256, ef.shape[0]))
            eval_mse.append(float(_eval_mse(out, et)))
            bar.set_postfix(loss=f"{losses[-1]:.4f}", eval_mse=f"{eval_mse[-1]:.4f}")
        else:
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    bar.close()
    return ReconstructorFit(model=model, params=state[0], standardizer=scaler, losses=np.asarray(losses),
                            eval_mse=np.asarray(eval_mse), disc_params=state[2])


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
