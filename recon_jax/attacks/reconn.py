"""Reconstructor networks (RecoNN) trained on shadow models (Balle et al. 2022, Sec. IV, V-A c, App. B).

The informed adversary knows D- and the training algorithm A. It trains one shadow model
``theta_i = A(D- u {z_i})`` per shadow target (:func:`recon_jax.shadow.generate_shadow_models`), turns each
model into a feature vector, and trains a network ``phi`` mapping features to targets; the reconstruction of
the released model's unknown target is ``phi(features(theta))``.

Features (Sec. V-A c, VI-C, App. F): white-box (flattened parameters) or black-box (logits on a probe set),
standardised with statistics of the *training* shadows only, live in :mod:`recon_jax.attacks.features`; the
objective is :func:`recon_jax.models.losses.reconstruction_loss`. The trainer's compiled kernels and its per-epoch
checkpoints are the private modules ``_reconn_steps`` and ``_reconn_checkpoint``.

What the adversary trains is one :class:`ReconstructorSpec`: the network (``model``, or the one
:func:`reconstructor_network` builds from ``kind`` and ``hidden``; ``RECONSTRUCTOR_KINDS`` lists the kinds) and
every hyper-parameter of its training.

Training (:func:`train_reconstructor`, ``train_reconstructor(features, targets, spec, key)``): loss ``mae_weight * MAE + mse_weight * MSE`` (Table V), optionally plus
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
import math
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from recon_jax._validation import FINITE_NONNEGATIVE, FINITE_POSITIVE, check, check_integer
from recon_jax.attacks._reconn_checkpoint import CheckpointMismatchError, EpochCheckpoint, module_program, tree_digest
from recon_jax.attacks.features import Standardizer, as_feature_matrix, fit_minmax, fit_standardizer
from recon_jax.attacks._reconn_steps import (
    DROPOUT_STREAM,
    batch_mse,
    batch_objective,
    default_optimizer,
    RESIDENT_BLOCK_ROWS,
    gather,
    make_steps,
    permutation,
    predict_jit,
    resident_on_accelerator,
    trainable_part,
)
from recon_jax.io import array_digest, callable_identity
from recon_jax.models.reconstructors import reconstructor_mlp, transposed_conv_decoder

__all__ = [
    "CheckpointMismatchError",
    "RECONSTRUCTOR_KINDS",
    "ReconstructorSpec",
    "reconstructor_network",
    "early_stopping",
    "ReconstructorFit",
    "train_reconstructor",
    "fine_tune_reconstructor",
    "reconstruct",
]


RECONSTRUCTOR_KINDS = ("mlp", "conv", "auto")


@dataclasses.dataclass(frozen=True)
class ReconstructorSpec:
    """The reconstructor network and how it is trained (Balle et al. Table V / VII / VIII): what
    :func:`train_reconstructor` trains, and the informed pipeline's held-out share (``validation_size``).

    The defaults are Table V's: an MLP of two hidden layers of 1,000, RMSProp at 1e-3, batches of 128, 100 epochs,
    loss MAE + MSE.

    Attributes:
      hidden: hidden widths of the default MLP reconstructor (Table V: two layers of 1,000).
      epochs: maximum passes over the shadow set (>= 1; Table V: 100).
      batch_size: minibatch size (>= 1, capped at the number of shadows; the last partial batch of an epoch is
        dropped; Table V: 128).
      learning_rate: RMSProp learning rate when ``optimizer`` is None (> 0; Table V: 1e-3).
      validation_size: shadow models the informed pipeline holds out (the last ones) for the validation values
        (:func:`recon_jax.attacks.informed.fit_reconstructor`); 0 trains on all. :func:`train_reconstructor`
        takes its held-out set as ``eval_set`` instead.
      patience: early stopping (:func:`early_stopping`): stop once the monitored validation value has not
        improved by more than ``min_delta`` for ``patience`` epochs, and return the parameters of the best epoch
        (needs an evaluation set; None: run all ``epochs`` and return the last parameters).
      kind: the network when ``model`` is None (:func:`reconstructor_network`): ``"mlp"`` (Table V),
        ``"conv"`` (the Table VII transposed-convolution decoder) or ``"auto"`` (chosen from the target shape).
      model: a flax module ``phi`` mapping ``[B, F]`` features to ``[B, *target_shape]`` that replaces the
        network ``kind`` names (e.g. :func:`recon_jax.models.reconstructors.reconstructor_mlp`).
      discriminator: optional flax module (PatchGAN, Table VIII) for a least-squares adversarial loss; targets
        must then be images ``[K, H, W, C]``.
      adversarial_weight: weight of the generator's adversarial loss (>= 0).
      discriminator_learning_rate: Adam learning rate of the discriminator (paper: 1e-5).
      optimizer: any optax transformation (overrides ``learning_rate``). Repeated fits that pass the same
        optimizer object (and model) reuse one compiled step.
      mae_weight, mse_weight: weights of the MAE and MSE terms (>= 0).
      scaling: ``"standard"`` (:func:`~recon_jax.attacks.features.fit_standardizer`, zero mean and unit
        variance) or ``"minmax"`` (:func:`~recon_jax.attacks.features.fit_minmax`, each coordinate's training
        range to [0, 1]): how the features are scaled when no fitted standardizer is given.
      perceptual_fn: optional ``(targets, outputs) -> [B]`` perceptual distance (e.g. LPIPS from a feature
        network the caller provides), weighted by ``perceptual_weight``.
      perceptual_weight: weight of the perceptual term (>= 0).
      min_delta: smallest decrease of the monitored value that counts as an improvement (>= 0).
      monitor: the validation value that picks the best epoch: ``"mse"`` or ``"loss"`` (the objective
        ``mae_weight * MAE + mse_weight * MSE``, as in the DR attack's reference code).
      train_flag: the network takes a ``train`` argument: ``train=True`` while training (BatchNorm batch
        statistics, dropout with the ``"dropout"`` rng; the optimiser updates ``"params"``, the forward pass the
        other collections) and ``train=False`` for evaluation and :func:`reconstruct`.
      step_loop: ``"scan"`` runs each block's minibatches in one jitted ``lax.scan``; ``"host"`` loops over them
        on the host, one jitted step per minibatch (no loop in the compiled program: XLA:CPU runs the DR attack's
        transposed-convolution + BatchNorm steps ~25x slower inside a loop). Same result up to float rounding.
    """

    hidden: tuple[int, ...] = (1000, 1000)
    epochs: int = 100
    batch_size: int = 128
    learning_rate: float = 1e-3
    validation_size: int = 0
    patience: int | None = None
    kind: str = "mlp"
    model: Any = None
    discriminator: Any = None
    adversarial_weight: float = 0.01
    discriminator_learning_rate: float = 1e-5
    optimizer: optax.GradientTransformation | None = None
    mae_weight: float = 1.0
    mse_weight: float = 1.0
    scaling: str = "standard"
    perceptual_fn: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    perceptual_weight: float = 1.0
    min_delta: float = 0.0
    monitor: str = "mse"
    train_flag: bool = False
    step_loop: str = "scan"

    def __post_init__(self):
        # checked when built, so that a bad value stops the informed pipeline before any shadow model trains
        check_integer("epochs", self.epochs, 1)
        check_integer("batch_size", self.batch_size, 1)
        check_integer("validation_size", self.validation_size, 0)
        if self.patience is not None:
            check_integer("patience", self.patience, 1)
        for name in ("mae_weight", "mse_weight", "adversarial_weight", "perceptual_weight", "min_delta"):
            check(name, getattr(self, name), FINITE_NONNEGATIVE)
        if self.optimizer is None:
            check("learning_rate", self.learning_rate, FINITE_POSITIVE)
        if self.discriminator is not None:
            check("discriminator_learning_rate", self.discriminator_learning_rate, FINITE_POSITIVE)
        for name, allowed in (("kind", RECONSTRUCTOR_KINDS), ("scaling", ("standard", "minmax")),
                              ("monitor", ("mse", "loss")), ("step_loop", ("scan", "host"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")


def reconstructor_network(target_shape: Sequence[int], kind: str = "mlp", hidden: Sequence[int] = (1000, 1000)):
    """The reconstructor network for targets of ``target_shape`` (one example, e.g. ``(28, 28, 1)``).

    ``"mlp"``: Balle et al.'s MLP (Table V, hidden widths ``hidden``), any shape. ``"conv"``: their
    transposed-convolution decoder (Table VII), for square images ``(s, s, c)`` with ``s`` a multiple of 4 and
    ``c`` in {1, 3}. ``"auto"``: the decoder for square RGB images it fits, the MLP otherwise.

    Raises:
      ValueError: ``kind`` is not one of :data:`RECONSTRUCTOR_KINDS`, or ``"conv"`` on a shape it cannot emit.

    >>> [type(reconstructor_network(shape, "auto")).__name__ for shape in ((32, 32, 3), (28, 28, 1))]
    ['TransposedConvDecoder', 'ReconstructorMLP']
    """
    shape = tuple(int(d) for d in target_shape)
    if kind not in RECONSTRUCTOR_KINDS:
        raise ValueError(f"kind must be one of {list(RECONSTRUCTOR_KINDS)}, got {kind!r}")
    conv_fits = len(shape) == 3 and shape[0] == shape[1] and shape[0] % 4 == 0 and shape[2] in (1, 3)
    if kind == "auto":
        kind = "conv" if conv_fits and shape[2] == 3 else "mlp"
    if kind == "conv":
        if not conv_fits:
            raise ValueError(f"kind 'conv' needs square images with a side divisible by 4 and 1 or 3 channels, "
                             f"got target shape {shape}")
        return transposed_conv_decoder(shape[0], shape[2])
    return reconstructor_mlp(shape, tuple(hidden))


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


def _stop_point(saved: dict, epochs: int, patience: int | None, min_delta: float, monitor: str) -> int:
    """The number of epochs a call with these settings runs when its history starts as ``saved``'s: the first
    ``k`` with ``k == epochs`` or the early-stopping rule met after ``k`` epochs (``len(saved)`` or more when the
    saved history never meets either, so the call goes on from it)."""
    monitored = saved["eval_mse"] if monitor == "mse" else saved["eval_loss"]
    for k in range(len(saved["losses"]) + 1):
        if k >= epochs or (patience is not None and early_stopping(monitored[:k], patience, min_delta)[1]):
            return k
    return len(saved["losses"])


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
      best_epoch: the epoch (1-based) with the lowest monitored validation value (``spec.monitor``; None without an
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


# Seconds between checkpoint writes of train_reconstructor (plus one after its last epoch). Writing every epoch
# cost more than the epoch itself on an accelerator (a 2 x 1,000 MLP on 79,510 features: ~1 GB of state).
CHECKPOINT_SECONDS = 30.0


def train_reconstructor(features, targets, spec: ReconstructorSpec, key: jax.Array, *,
                        standardizer: Standardizer | None = None, init_params=None, eval_set: tuple | None = None,
                        checkpoint_dir: str | None = None, checkpoint_key: dict | None = None,
                        stream_rows: int | None = None, progress: bool = True,
                        desc: str = "reconstructor") -> ReconstructorFit:
    """Trains a reconstructor network on shadow-model features and their targets (Balle et al. Sec. IV-B).

    Features are streamed: each epoch draws a permutation, then gathers ``stream_rows`` rows at a time from
    ``features`` (NumPy, a memory-mapped shadow store, or a device array) and runs those minibatches in one
    jitted ``lax.scan``; only one block is on the device at once and a memory-mapped store is never copied
    whole. On a GPU or TPU with room for them (and ``stream_rows`` not given), host features are copied to the
    device once instead (:func:`~recon_jax.attacks._reconn_steps.resident_on_accelerator`). The result does not
    depend on ``stream_rows`` or on where the features live.

    Args:
      features: ``[K, F]`` raw (unstandardised) features of the training shadow models.
      targets: ``[K, ...]`` their shadow targets.
      spec: the network and every training hyper-parameter (:class:`ReconstructorSpec`; ``spec.model``, or
        :func:`reconstructor_network` of the targets' shape, ``spec.kind`` and ``spec.hidden``).
        ``spec.validation_size`` is not used here: the held-out shadows are ``eval_set``.
      key: typed key; ``fold_in(key, 0)`` initialises ``phi`` (and ``fold_in(key, 1)`` the discriminator),
        epoch ``e`` shuffles with ``fold_in(key, e + 2)``; with ``spec.train_flag``, minibatch ``i`` of epoch
        ``e`` draws dropout from ``fold_in(fold_in(fold_in(key, 2**32 - 1), e), i)``.
      standardizer: a fitted :class:`~recon_jax.attacks.features.Standardizer`; default: fitted on ``features``
        (the training shadows) as ``spec.scaling`` says.
      init_params: start from these ``phi`` variables (fine-tuning) instead of a fresh initialisation.
      eval_set: optional ``(features [E, F], targets [E, ...])`` of held-out shadows; their MSE and objective
        (the validation values) are recorded after every epoch (not used for training or for standardisation);
        ``spec.patience`` needs one.
      checkpoint_dir: save the training state atomically in this directory (after the last epoch, and every
        ``CHECKPOINT_SECONDS`` of training before it), under a name
        hashed from everything that determines it; a later call with the same arguments resumes after the last
        saved epoch (``spec.epochs`` may be larger) and gives the same result as an uninterrupted run. A checkpoint
        that ran past where this call stops (smaller ``spec.epochs``, or a ``spec.patience`` that stops sooner) is
        not used: the call trains from the start and replaces it. A checkpoint saved by other code (the recon_jax
        sources but ``evidence`` and ``report``, Python or a numeric package's version) is refused.
      checkpoint_key: optional JSON-able description of anything else the checkpoint should be keyed by
        (``spec.optimizer`` and ``spec.perceptual_fn`` are, by :func:`recon_jax.io.callable_identity`: their code
        and the values they captured).
      stream_rows: rows gathered per block (rounded down to a multiple of the batch size; default 2,048).
      progress: show a tqdm bar over epochs.
      desc: the bar's label.

    Returns:
      A :class:`ReconstructorFit` (``epochs_run``, ``best_epoch`` and ``stopped_early`` record early stopping).

    Raises:
      TypeError: if ``spec`` is not a :class:`ReconstructorSpec`.
      ValueError: on mismatched shapes or out-of-range hyper-parameters.
      CheckpointMismatchError: (a ``ValueError``) the checkpoint in ``checkpoint_dir`` was saved for a model of
        other shapes, or by other code (:class:`~recon_jax.attacks._reconn_checkpoint.EpochCheckpoint`).

    >>> import jax, jax.numpy as jnp
    >>> f = jax.random.normal(jax.random.key(1), (64, 5)); t = jax.nn.sigmoid(f[:, :2] @ jnp.ones((2, 4)))
    >>> spec = ReconstructorSpec(hidden=(32,), epochs=40, batch_size=16)  # the MLP 5 -> 32 -> 4
    >>> fit = train_reconstructor(f, t, spec, jax.random.key(0), progress=False)
    >>> bool(fit.losses[-1] < fit.losses[0]), reconstruct(fit, f[:3]).shape, fit.epochs_run
    (True, (3, 4), 40)
    """
    if not isinstance(spec, ReconstructorSpec):
        raise TypeError(f"spec must be a ReconstructorSpec, got {type(spec).__name__} (the network is spec.model)")
    f = as_feature_matrix(features)
    t = targets if isinstance(targets, (np.ndarray, jax.Array)) else np.asarray(targets)
    if t.shape[0] != f.shape[0]:
        raise ValueError(f"features and targets must have the same length, got {f.shape[0]} and {t.shape[0]}")
    model = spec.model if spec.model is not None else reconstructor_network(t.shape[1:], spec.kind, spec.hidden)
    epochs, batch_size, learning_rate, optimizer = spec.epochs, spec.batch_size, spec.learning_rate, spec.optimizer
    mae_weight, mse_weight, scaling, patience = spec.mae_weight, spec.mse_weight, spec.scaling, spec.patience
    discriminator, adversarial_weight = spec.discriminator, spec.adversarial_weight
    discriminator_learning_rate = spec.discriminator_learning_rate
    perceptual_fn, perceptual_weight = spec.perceptual_fn, spec.perceptual_weight
    min_delta, monitor, train_flag, step_loop = spec.min_delta, spec.monitor, spec.train_flag, spec.step_loop
    if discriminator is not None and t.ndim != 4:
        raise ValueError(f"a discriminator needs image targets [K, H, W, C], got shape {t.shape}")
    if patience is not None and eval_set is None:  # the spec's own values are checked when it is built
        raise ValueError("patience (early stopping) needs an eval_set of held-out shadows")
    if stream_rows is not None:
        check_integer("stream_rows", stream_rows, 1)
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
        params = model.init(jax.random.fold_in(key, 0), gather(f, np.arange(1), dtype), train=False)
    else:
        params = model.init(jax.random.fold_in(key, 0), gather(f, np.arange(1), dtype))
    opt = default_optimizer(float(learning_rate)) if optimizer is None else optimizer
    dparams = dopt = dopt_state = None
    if discriminator is not None:
        dparams = discriminator.init(jax.random.fold_in(key, 1), gather(t, np.arange(1), dtype))
        dopt = optax.adam(discriminator_learning_rate)
        dopt_state = dopt.init(dparams)
    steps_fn = make_steps(model, opt, float(mae_weight), float(mse_weight), discriminator, dopt,
                           float(adversarial_weight), perceptual_fn, float(perceptual_weight), train_flag, step_loop)
    state = (params, opt.init(trainable_part(params, train_flag)), dparams, dopt_state)
    dropout_key = jax.random.fold_in(key, DROPOUT_STREAM)
    ef = et = None
    if eval_set is not None:
        ef = jnp.asarray(as_feature_matrix(eval_set[0], "eval_set features"), dtype)
        et = jnp.asarray(eval_set[1], dtype)
        if ef.shape[1] != f.shape[1] or et.shape[1:] != tuple(t.shape[1:]) or ef.shape[0] != et.shape[0]:
            raise ValueError("eval_set must be (features [E, F], targets [E, ...]) matching the training shapes")
    losses, eval_mse, eval_loss, best, best_epoch = [], [], [], state[0], 0
    ckpt = None
    if checkpoint_dir is not None:
        description = {
            "format": "recon_jax.reconn/3", "model": repr(model), "discriminator": repr(discriminator),
            "programs": [module_program(model, gather(f, np.arange(1), dtype), **({"train": False} if train_flag
                                                                                   else {})),
                         module_program(discriminator, gather(t, np.arange(1), dtype))],  # __call__ edited, same repr
            "learning_rate": None if optimizer is not None else float(learning_rate),
            "weights": [float(mae_weight), float(mse_weight), float(adversarial_weight), float(perceptual_weight)],
            "discriminator_learning_rate": float(discriminator_learning_rate), "batch_size": bs,
            "key": np.asarray(jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
                              else key).tolist(), "features": array_digest(f),
            "targets": array_digest(t), "standardizer": tree_digest(tuple(scaler)),
            "init_params": None if init_params is None else tree_digest(init_params),
            "eval_set": None if eval_set is None else [array_digest(ef), array_digest(et)],
            "dtype": str(dtype), "extra": checkpoint_key, "train_flag": bool(train_flag), "monitor": monitor,
            "callables": [None if optimizer is None else [callable_identity(optimizer.init),
                                                          callable_identity(optimizer.update)],
                          None if perceptual_fn is None else callable_identity(perceptual_fn)],
            "min_delta": float(min_delta)}  # it picks the saved best epoch
        ckpt = EpochCheckpoint(checkpoint_dir, description)
        saved = ckpt.load(state, best)
        if saved is not None and _stop_point(saved, epochs, patience, min_delta, monitor) < len(saved["losses"]):
            # The checkpoint ran past where this call stops (fewer epochs, or a patience that stops sooner): its
            # state cannot be rolled back, so this call trains from the start and its saves replace that file.
            saved, ckpt.resumed_from_code = None, []
        if saved is not None:
            state, best = saved["state"], saved["best"]
            losses, eval_mse, best_epoch = saved["losses"], saved["eval_mse"], saved["best_epoch"]
            eval_loss = saved["eval_loss"]
    resumed_from = len(losses)
    monitored = eval_mse if monitor == "mse" else eval_loss
    if stream_rows is None:  # on an accelerator with room, the features are copied over once (same values)
        f_dev, t_dev = resident_on_accelerator(f, dtype), resident_on_accelerator(t, dtype)
        if isinstance(f_dev, jax.Array) and isinstance(t_dev, jax.Array):
            f, t = f_dev, t_dev
            block_steps = max(block_steps, RESIDENT_BLOCK_ROWS // bs)

    def should_stop():
        return patience is not None and early_stopping(monitored, patience, min_delta)[1]

    bar = tqdm(range(resumed_from, epochs), desc=desc, unit="epoch", disable=not progress)
    seconds = []
    last_save = time.monotonic()
    for e in bar:
        if should_stop():
            break
        t_epoch = time.perf_counter()
        perm = np.asarray(permutation(jax.random.fold_in(key, e + 2), f.shape[0]))[: n_steps * bs]
        epoch_dropout_key = jax.random.fold_in(dropout_key, e)
        epoch_losses = []
        for s0 in range(0, n_steps, block_steps):
            idx = perm[s0 * bs: min(n_steps, s0 + block_steps) * bs]
            shape = (-1, bs)
            xs = gather(f, idx, dtype).reshape(*shape, f.shape[1])
            ts = gather(t, idx, dtype).reshape(*shape, *t.shape[1:])
            state, block_losses = steps_fn(state, xs, ts, scaler, epoch_dropout_key,
                                           np.uint32(s0))  # async: the next gather overlaps it
            if epoch_losses:  # but at most two blocks in flight, never the whole epoch's features
                epoch_losses[-1].block_until_ready()
            epoch_losses.append(block_losses)
        losses.append(float(np.mean(np.concatenate([np.asarray(x, np.float64) for x in epoch_losses]))))
        seconds.append(time.perf_counter() - t_epoch)
        post = {"loss": f"{losses[-1]:.4f}"}
        if eval_set is not None:
            out = predict_jit(model, state[0], scaler, ef, min(256, ef.shape[0]), train_flag)
            eval_mse.append(float(batch_mse(out, et)))
            eval_loss.append(float(batch_objective(out, et, float(mae_weight), float(mse_weight))))
            new_best = early_stopping(monitored, None, min_delta)[0]
            if new_best == len(monitored):
                best, best_epoch = state[0], new_best
            post[f"eval_{monitor}"] = f"{monitored[-1]:.4f}"
        bar.set_postfix(**post)
        # Saved at most every CHECKPOINT_SECONDS and after the last epoch of this call: a resumed run repeats at
        # most that much work, and each epoch's result is the same whenever it is saved (keys derive from e).
        if ckpt is not None and (e + 1 == epochs or should_stop()
                                 or time.monotonic() - last_save >= CHECKPOINT_SECONDS):
            ckpt.save(state, best, losses, eval_mse, eval_loss, best_epoch)
            last_save = time.monotonic()
    bar.close()
    stopped = should_stop() and len(losses) < epochs
    params = best if patience is not None and best_epoch > 0 else state[0]
    return ReconstructorFit(model=model, params=params, standardizer=scaler, losses=np.asarray(losses),
                            eval_mse=np.asarray(eval_mse), disc_params=state[2], epochs_run=len(losses),
                            best_epoch=best_epoch if eval_set is not None else None, stopped_early=stopped,
                            resumed_from=resumed_from, epoch_seconds=np.asarray(seconds),
                            eval_loss=np.asarray(eval_loss), final_params=state[0], train_flag=train_flag)


def fine_tune_reconstructor(fit: ReconstructorFit, features, targets, spec: ReconstructorSpec, key: jax.Array, *,
                            refit_standardizer: bool = True, **kwargs) -> ReconstructorFit:
    """Fine-tunes a trained reconstructor on shadow models of a *new* fixed set D'- (Balle et al. App. B).

    Starts from ``fit.params`` and trains ``fit.model`` (with ``fit.train_flag``) under the other settings of
    ``spec`` (``spec.model``, ``kind`` and ``hidden`` are ignored; the discriminator is ``spec.discriminator``, not
    carried over). By default the feature standardisation is re-fitted on the new training shadows (the parameter
    statistics change with the fixed set); ``refit_standardizer=False`` keeps the old one. Other keyword arguments
    go to :func:`train_reconstructor`.

    >>> import jax, jax.numpy as jnp
    >>> f = jax.random.normal(jax.random.key(1), (32, 5)); t = jax.nn.sigmoid(f[:, :3])
    >>> spec = ReconstructorSpec(hidden=(16,), epochs=2, batch_size=8)
    >>> fit = train_reconstructor(f, t, spec, jax.random.key(0), progress=False)
    >>> fine_tune_reconstructor(fit, f + 1.0, t, spec, jax.random.key(2), progress=False).losses.shape
    (2,)
    """
    scaler = None if refit_standardizer else fit.standardizer
    spec = dataclasses.replace(spec, model=fit.model, train_flag=fit.train_flag)
    return train_reconstructor(features, targets, spec, key, standardizer=scaler, init_params=fit.params, **kwargs)


def reconstruct(fit: ReconstructorFit, features, batch_size: int = 256) -> jax.Array:
    """Reconstructions ``phi(standardise(features))`` for released (or held-out shadow) models, ``[K, ...]``.

    >>> import jax, jax.numpy as jnp
    >>> f = jax.random.normal(jax.random.key(1), (16, 5))
    >>> fit = train_reconstructor(f, jnp.zeros((16, 2)), ReconstructorSpec(hidden=(8,), epochs=1, batch_size=8),
    ...                           jax.random.key(0), progress=False)
    >>> reconstruct(fit, f).shape
    (16, 2)
    """
    f = as_feature_matrix(features)
    if f.shape[1] != fit.standardizer.mean.shape[-1]:
        raise ValueError(f"features must have {fit.standardizer.mean.shape[-1]} columns, got {f.shape[1]}")
    check_integer("batch_size", batch_size, 1)
    return predict_jit(fit.model, fit.params, fit.standardizer, jnp.asarray(f, fit.standardizer.mean.dtype),
                        min(int(batch_size), f.shape[0]), bool(fit.train_flag))
