"""The informed-adversary pipeline of Balle et al. (2022) in one place.

splits -> shadow and released models -> features -> reconstructor -> NN oracle -> metrics and success.

- :func:`train_model_sets`: one shadow model per shadow target and one released model per evaluation target,
  all on ``D- u {z}`` (:func:`recon_jax.shadow.generate_shadow_models`, optionally stored and resumable), as
  many as a :class:`ModelSetSizes` says, stored and shown as a :class:`RunOptions` says.
- :func:`attack_features`: white-box (all parameters, or a subset of layers) or black-box (probe logits).
- :func:`fit_reconstructor`: the reconstructor network on the shadow features, with held-out shadows for the
  validation MSE (early stopping), streaming from a memory-mapped store, per-epoch checkpoints. It trains a
  :class:`~recon_jax.attacks.reconn.ReconstructorSpec` (its ``model``, or
  :func:`~recon_jax.attacks.reconn.reconstructor_network`, is the network; the spec is importable from here too).
- :func:`oracle_for`: the nearest-neighbour oracle over the adversary's pool (``splits.pool_images``).
- :func:`evaluate_reconstructions`: per-target MSE, PSNR, SSIM, NCC, optional classifier KL and success.
- :func:`informed_attack`: features + reconstructor + evaluation for one setting on given model sets, so
  several settings can share one shadow set (Table II: default, logits, fewer shadow models, ...).
- :func:`run_informed_pipeline`: everything from the splits for one setting.

Success follows the paper (Sec. V-B d): a target is reconstructed when the reconstruction's MSE is below the
MSE of the target's nearest neighbour in the adversary's pool; a Table II row succeeds (✓) when the mean
reconstruction MSE is below the mean NN-oracle MSE.

Every function takes typed keyword arguments, those that belong together grouped in frozen dataclasses
(:class:`ModelSetSizes`, :class:`RunOptions`, :class:`ReconstructorSpec`); results are frozen dataclasses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable, Sequence

import jax
import numpy as np

from recon_jax._validation import check_integer
from recon_jax.attacks import oracle as _oracle
from recon_jax.attacks import reconn
from recon_jax.attacks.features import blackbox_features, whitebox_features
from recon_jax.attacks.reconn import ReconstructorSpec
from recon_jax.data.splits import InformedSplits
from recon_jax.io import atomic_save_npz
from recon_jax.models.adapters import ModelFns
from recon_jax.shadow import ShadowSet, generate_shadow_models
from recon_jax.shadow.store import host_key_data
from recon_jax.training import Algorithm

__all__ = [
    "ReconstructorSpec",  # defined in recon_jax.attacks.reconn; the spec the pipeline's functions take
    "ModelSetSizes",
    "RunOptions",
    "ModelSets",
    "AttackResult",
    "train_model_sets",
    "attack_features",
    "fit_reconstructor",
    "oracle_for",
    "evaluate_reconstructions",
    "informed_attack",
    "run_informed_pipeline",
    "save_attack_result",
    "load_attack_result",
]


@dataclasses.dataclass(frozen=True)
class ModelSets:
    """Shadow and released models of one training setting.

    Attributes:
      shadow: one model per shadow target (:class:`~recon_jax.shadow.ShadowSet`, memory-mapped when stored).
      released: one model per evaluation target (with ``eval_accuracy`` when an evaluation set was given).
      seconds: wall time spent training (or loading) them.
    """

    shadow: ShadowSet
    released: ShadowSet
    seconds: float


@dataclasses.dataclass(frozen=True)
class AttackResult:
    """One setting's reconstructions and their per-target metrics (``T`` evaluation targets).

    Attributes:
      name: the setting.
      reconstructions: ``[T, ...]``.
      mse, oracle_mse, psnr, ncc: ``[T]`` per-target metrics (``oracle_mse``: MSE of the target's nearest
        neighbour in the adversary's pool).
      success: ``[T]`` bool, ``mse < oracle_mse`` (the paper's criterion).
      ssim: ``[T]`` for images of side >= 11, else None.
      kl: ``[T]`` classifier KL (Sec. V-B c) when a classifier was given, else None.
      released_accuracy: ``[T]`` test accuracy of the released models, or None.
      num_shadow: shadow models the reconstructor trained on.
      num_validation: held-out shadow models for its validation MSE.
      feature_dim: reconstructor input size.
      epochs_run: reconstructor epochs trained (fewer than asked after early stopping).
      best_epoch: epoch with the lowest validation MSE (None without validation).
      stopped_early: whether early stopping ended training.
      train_loss: ``[epochs_run]`` training loss per epoch.
      validation_mse: ``[epochs_run]`` validation MSE per epoch (empty without validation).
      seconds: wall time of features + reconstructor + evaluation.
    """

    name: str
    reconstructions: np.ndarray
    mse: np.ndarray
    oracle_mse: np.ndarray
    success: np.ndarray
    psnr: np.ndarray
    ncc: np.ndarray
    ssim: np.ndarray | None
    kl: np.ndarray | None
    released_accuracy: np.ndarray | None
    num_shadow: int
    num_validation: int
    feature_dim: int
    epochs_run: int
    best_epoch: int | None
    stopped_early: bool
    train_loss: np.ndarray
    validation_mse: np.ndarray
    seconds: float

    @property
    def mean_mse(self) -> float:
        """Mean reconstruction MSE over the targets (Table II's number)."""
        return float(np.mean(self.mse))

    @property
    def mean_oracle_mse(self) -> float:
        """Mean NN-oracle MSE over the same targets."""
        return float(np.mean(self.oracle_mse))

    @property
    def row_success(self) -> bool:
        """Table II's ✓: the mean reconstruction MSE is below the mean NN-oracle MSE."""
        return self.mean_mse < self.mean_oracle_mse

    def summary(self) -> dict:
        """A JSON-able row: means over the targets, success rate, sizes, training record."""
        row = {
            "setting": self.name,
            "mean_mse": self.mean_mse,
            "median_mse": float(np.median(self.mse)),
            "mean_oracle_mse": self.mean_oracle_mse,
            "success_rate": float(np.mean(self.success)),
            "row_success": bool(self.row_success),
            "mean_psnr": float(np.mean(np.minimum(self.psnr, 100.0))),
            "mean_ssim": None if self.ssim is None else float(np.mean(self.ssim)),
            "mean_ncc": float(np.nanmean(self.ncc)),
            "mean_kl": None if self.kl is None else float(np.mean(self.kl)),
            "released_test_accuracy": None if self.released_accuracy is None
            else float(np.mean(self.released_accuracy)),
            "num_shadow_models": self.num_shadow,
            "num_validation_models": self.num_validation,
            "num_targets": int(self.mse.shape[0]),
            "feature_dim": self.feature_dim,
            "reconstructor_epochs": self.epochs_run,
            "best_epoch": self.best_epoch,
            "stopped_early": self.stopped_early,
            "final_validation_mse": float(self.validation_mse[-1]) if len(self.validation_mse) else None,
            "seconds": round(self.seconds, 1),
        }
        return row


def save_attack_result(path: str, result: AttackResult) -> None:
    """Writes ``result`` atomically to one ``.npz`` (arrays; other fields as JSON): what a rerun needs of a setting.

    >>> import os, tempfile, numpy as np
    >>> r = evaluate_reconstructions("x", np.zeros((2, 4)), np.full((2, 4), 0.1), np.array([0.02, 0.001]))
    >>> p = os.path.join(tempfile.mkdtemp(), "a.npz"); save_attack_result(p, r); back = load_attack_result(p)
    >>> back.name, back.success.tolist(), back.ssim, np.array_equal(back.reconstructions, r.reconstructions)
    ('x', [True, False], None, True)
    """
    values = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    arrays = {k: np.asarray(v) for k, v in values.items() if isinstance(v, (np.ndarray, jax.Array))}
    meta = json.dumps({k: v for k, v in values.items() if k not in arrays}, default=lambda v: v.item())
    atomic_save_npz(path, fields_json=np.frombuffer(meta.encode(), np.uint8), **arrays)


def load_attack_result(path: str) -> AttackResult:
    """The :class:`AttackResult` :func:`save_attack_result` wrote to ``path``."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files if k != "fields_json"}
        return AttackResult(**json.loads(bytes(z["fields_json"]).decode()), **arrays)


def _check_count(name: str, value, available: int, lo: int = 1) -> int:
    """``value`` (default: all ``available``) as a count in ``[lo, available]``."""
    return available if value is None else check_integer(name, value, lo, available)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSetSizes:
    """How many shadow and released models :func:`train_model_sets` trains, and on how many probe inputs.

    Checked when built (integers >= 1, ``probe_size`` >= 0); :func:`train_model_sets` checks they fit the splits.

    Attributes:
      num_shadow: one shadow model for each of the first ``num_shadow`` shadow targets (None: all of them).
      num_targets: one released model for each of the first ``num_targets`` evaluation targets (None: all).
      probe_size: > 0 adds probe logits on the first ``probe_size`` shadow targets (black-box features); 0: none.

    >>> ModelSetSizes(num_targets=0)
    Traceback (most recent call last):
    ...
    ValueError: num_targets must be an integer >= 1; got 0
    """

    num_shadow: int | None = None
    num_targets: int | None = None
    probe_size: int = 0

    def __post_init__(self):
        for name in ("num_shadow", "num_targets"):
            if getattr(self, name) is not None:
                check_integer(name, getattr(self, name), 1)
        check_integer("probe_size", self.probe_size, 0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How the model sets (and the pipeline's reconstructor) are run: stored or not, models per call, progress bars.

    Attributes:
      store: a directory for shadow and released models (``store/shadow``, ``store/released``: resumable,
        memory-mapped, :mod:`recon_jax.shadow.store`) and the pipeline's checkpoints; None: all in memory.
      chunk_size: models per compiled call (None: :func:`~recon_jax.shadow.generate_shadow_models`'s default).
      progress: tqdm bars.

    >>> RunOptions(chunk_size=0)
    Traceback (most recent call last):
    ...
    ValueError: chunk_size must be None or an integer >= 1, got 0
    """

    store: str | None = None
    chunk_size: int | None = None
    progress: bool = True

    def __post_init__(self):
        if self.chunk_size is not None and not (isinstance(self.chunk_size, int) and self.chunk_size >= 1):
            raise ValueError(f"chunk_size must be None or an integer >= 1, got {self.chunk_size!r}")


def train_model_sets(model_fns: ModelFns, algorithm: Algorithm, splits: InformedSplits, key: jax.Array, *,
                     init_params=None, shuffle_key: jax.Array | None = None, sizes: ModelSetSizes = ModelSetSizes(),
                     eval_set: tuple[np.ndarray, np.ndarray] | None = None, run: RunOptions = RunOptions(),
                     desc: str | None = None) -> ModelSets:
    """Trains the shadow models (one per shadow target) and released models (one per evaluation target).

    Every model trains on ``splits.fixed_* + {its target}`` with ``algorithm`` from ``init_params`` (the
    adversary-known initialisation; None with ``algorithm.init == "random"``). Shadow model ``i`` uses
    ``fold_in(fold_in(key, 1), i)``, released model ``j`` ``fold_in(fold_in(key, 2), j)`` (random inits,
    fresh shuffles, DP noise): a different ``key`` gives independent noise draws.

    Args:
      model_fns: the released model.
      algorithm: its training algorithm (shared by the adversary's shadow models).
      splits: from :func:`recon_jax.data.pool_splits` or :func:`recon_jax.data.informed_splits`.
      key: typed key.
      init_params: the known initial parameters.
      shuffle_key: shared batch-order key for minibatch training the adversary knows (``shuffle="known"``).
      sizes: how many models and probe inputs (:class:`ModelSetSizes`; default: every target, no probes).
      eval_set: ``(x, y)`` for the released models' test accuracy; default ``splits.eval_*`` when non-empty.
      run: the store, models per compiled call and progress bars (:class:`RunOptions`; default: in memory,
        the engine's chunk size, bars labelled ``"shadow models"`` and ``"released models"``).
      desc: a prefix for the bars' labels (e.g. the setting: ``"DP sigma=1: released models"``).

    Returns:
      :class:`ModelSets`.

    Raises:
      ValueError: where ``sizes`` asks for more targets than the splits hold (naming the field and the allowed
        range), or on what :func:`~recon_jax.shadow.generate_shadow_models` refuses.

    >>> import jax, numpy as np
    >>> from recon_jax import data, models, training
    >>> x, y = data.load_dataset("synthetic", "train", num_examples=40, shape=(4, 4, 1), seed=0)
    >>> sp = data.pool_splits(x, y, fixed_size=8, num_shadow=20, num_targets=4, eval_size=6)
    >>> fns = models.from_flax(models.MLP(features=(4, 10)))
    >>> p0 = training.initial_params(fns, jax.random.key(0), sp.fixed_images)
    >>> ms = train_model_sets(fns, training.full_batch_gd(epochs=3), sp, jax.random.key(1), init_params=p0,
    ...                       sizes=ModelSetSizes(probe_size=5), run=RunOptions(progress=False))
    >>> ms.shadow.params.shape, ms.shadow["probe_logits"].shape, ms.released["eval_accuracy"].shape
    ((20, 118), (20, 5, 10), (4,))
    """
    host_key_data(key)  # a typed key (an int failed inside jax.random.fold_in)
    n_shadow = _check_count("num_shadow", sizes.num_shadow, len(splits.shadow_images))
    n_targets = _check_count("num_targets", sizes.num_targets, len(splits.target_images))
    probe_size = sizes.probe_size
    if probe_size > len(splits.shadow_images):
        raise ValueError(f"probe_size must be an integer in [0, {len(splits.shadow_images)}], got {probe_size!r}")
    if eval_set is None and len(splits.eval_images):
        eval_set = (splits.eval_images, splits.eval_labels)
    outs = ("params",) + (("probe_logits",) if probe_size else ())
    common = dict(init_params=init_params, shuffle_key=shuffle_key, chunk_size=run.chunk_size,
                  progress=run.progress, probe_inputs=splits.shadow_images[:probe_size] if probe_size else None)
    fixed = (splits.fixed_images, splits.fixed_labels)
    store, prefix = run.store, (f"{desc}: " if desc else "")
    t0 = time.time()
    shadow = generate_shadow_models(
        model_fns, algorithm, fixed, (splits.shadow_images[:n_shadow], splits.shadow_labels[:n_shadow]),
        jax.random.fold_in(key, 1), outputs=outs, store=None if store is None else os.path.join(store, "shadow"),
        desc=prefix + "shadow models", **common)
    released = generate_shadow_models(
        model_fns, algorithm, fixed, (splits.target_images[:n_targets], splits.target_labels[:n_targets]),
        jax.random.fold_in(key, 2), outputs=outs + (("eval_accuracy",) if eval_set is not None else ()),
        eval_set=eval_set, store=None if store is None else os.path.join(store, "released"),
        desc=prefix + "released models", **common)
    return ModelSets(shadow=shadow, released=released, seconds=time.time() - t0)


def attack_features(models: ShadowSet, features: str | Sequence[str] = "params"):
    """The reconstructor's input for each model: ``"params"`` (all flat parameters, a view of the store),
    ``"logits"`` (probe logits, black box, Sec. VI-C) or layer paths (white box, App. F, e.g. ``("Dense_1",)``).

    >>> import jax, jax.numpy as jnp, numpy as np
    >>> from recon_jax.models import balle_mnist_mlp, ravel
    >>> from recon_jax.shadow import ShadowSet
    >>> flat, layout = ravel(balle_mnist_mlp().init(jax.random.key(0), jnp.zeros((1, 784)))["params"])
    >>> s = ShadowSet({"params": np.stack([np.asarray(flat)] * 2)}, layout, 2)
    >>> attack_features(s).shape, attack_features(s, ("Dense_1",)).shape
    ((2, 7960), (2, 110))
    """
    if isinstance(features, str) and features == "params":
        return models.params
    if isinstance(features, str) and features == "logits":
        if "probe_logits" not in models:
            raise ValueError("features='logits' needs models trained with probe_size > 0")
        return blackbox_features(models["probe_logits"])
    if isinstance(features, str) or not len(features):
        raise ValueError(f"features must be 'params', 'logits' or a non-empty sequence of layer paths, got "
                         f"{features!r}")
    return np.asarray(whitebox_features(models.params, models.layout, tuple(features)))


def fit_reconstructor(shadow_features, shadow_targets, key: jax.Array, spec: ReconstructorSpec = ReconstructorSpec(),
                      *, checkpoint_dir: str | None = None, progress: bool = True,
                      desc: str = "reconstructor") -> reconn.ReconstructorFit:
    """Trains the reconstructor on shadow features; the last ``spec.validation_size`` shadows are held out.

    Features may be memory-mapped (a stored shadow set): they are streamed, never copied whole.

    >>> import jax, numpy as np
    >>> f = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
    >>> fit = fit_reconstructor(f, 1 / (1 + np.exp(-f[:, :3])), jax.random.key(0),
    ...                         ReconstructorSpec(hidden=(8,), epochs=3, batch_size=8, validation_size=8),
    ...                         progress=False)
    >>> fit.epochs_run, len(fit.eval_mse)
    (3, 3)
    """
    n = shadow_features.shape[0]
    if shadow_targets.shape[0] != n:
        raise ValueError(f"shadow_features and shadow_targets must have the same length, got {n} and "
                         f"{shadow_targets.shape[0]}")
    if not (isinstance(spec.validation_size, int) and 0 <= spec.validation_size <= n - 2):
        raise ValueError(f"validation_size must be an integer in [0, {n - 2}], got {spec.validation_size!r}")
    n_tr = n - spec.validation_size
    eval_set = None
    if spec.validation_size:
        eval_set = (np.asarray(shadow_features[n_tr:]), np.asarray(shadow_targets[n_tr:]))
    return reconn.train_reconstructor(shadow_features[:n_tr], shadow_targets[:n_tr], spec, key, eval_set=eval_set,
                                      checkpoint_dir=checkpoint_dir, progress=progress, desc=desc)


def oracle_for(splits: InformedSplits, num_targets: int | None = None, *,
               percentiles: Sequence[float] = (1.0, 10.0, 50.0), bins: int = 0,
               max_mse: float | None = None) -> _oracle.OracleResult:
    """The NN oracle of the first ``num_targets`` evaluation targets over the adversary's pool
    (``splits.pool_images``: 69K MNIST records with :func:`recon_jax.data.pool_splits` at the paper's sizes).

    >>> import numpy as np
    >>> from recon_jax.data import pool_splits
    >>> x = np.linspace(0, 1, 10).reshape(10, 1, 1).repeat(2, 1)
    >>> sp = pool_splits(x, np.zeros(10, int), fixed_size=2, num_shadow=3, num_targets=2)
    >>> bool(oracle_for(sp).nn_mse.max() <= (1 / 9) ** 2 + 1e-7)   # every target has a neighbour 1/9 away
    True
    """
    if splits.pool_images is None:
        raise ValueError("splits has no pool; build it with recon_jax.data.pool_splits or informed_splits")
    n = _check_count("num_targets", num_targets, len(splits.target_images))
    return _oracle.nn_oracle(splits.target_images[:n], splits.pool_images, tuple(percentiles), bins=bins,
                             max_mse=max_mse)


def evaluate_reconstructions(name: str, targets, reconstructions, oracle_mse, *,
                             classifier_apply: Callable[[jax.Array], jax.Array] | None = None,
                             released_accuracy=None, num_shadow: int = 0, num_validation: int = 0,
                             feature_dim: int = 0, fit: reconn.ReconstructorFit | None = None,
                             seconds: float = 0.0) -> AttackResult:
    """Per-target metrics and success (``mse < oracle_mse``) of reconstructions, as an :class:`AttackResult`.

    >>> import numpy as np
    >>> r = evaluate_reconstructions("x", np.zeros((2, 4)), np.full((2, 4), 0.1), np.array([0.02, 0.001]))
    >>> round(r.mean_mse, 4), r.success.tolist(), r.row_success
    (0.01, [True, False], True)
    """
    targets, reconstructions = np.asarray(targets), np.asarray(reconstructions)
    oracle_mse = np.asarray(oracle_mse)
    if targets.shape != reconstructions.shape or oracle_mse.shape != targets.shape[:1]:
        raise ValueError(f"targets {targets.shape}, reconstructions {reconstructions.shape} and oracle_mse "
                         f"{oracle_mse.shape} must be [T, ...], [T, ...] and [T]")
    m = {k: np.asarray(v) for k, v in _oracle.reconstruction_metrics(targets, reconstructions, oracle_mse,
                                                                     classifier_apply).items()}
    return AttackResult(
        name=name, reconstructions=reconstructions, mse=m["mse"], oracle_mse=oracle_mse, success=m["success"],
        psnr=m["psnr"], ncc=m["ncc"], ssim=m.get("ssim"), kl=m.get("kl"),
        released_accuracy=None if released_accuracy is None else np.asarray(released_accuracy),
        num_shadow=int(num_shadow), num_validation=int(num_validation), feature_dim=int(feature_dim),
        epochs_run=0 if fit is None else fit.epochs_run, best_epoch=None if fit is None else fit.best_epoch,
        stopped_early=False if fit is None else fit.stopped_early,
        train_loss=np.zeros(0) if fit is None else fit.losses,
        validation_mse=np.zeros(0) if fit is None else fit.eval_mse, seconds=float(seconds))


def informed_attack(splits: InformedSplits, models: ModelSets, key: jax.Array, *,
                    oracle: _oracle.OracleResult, features: str | Sequence[str] = "params",
                    reconstructor: ReconstructorSpec = ReconstructorSpec(), num_shadow: int | None = None,
                    classifier_apply: Callable[[jax.Array], jax.Array] | None = None,
                    checkpoint_dir: str | None = None, name: str = "default",
                    progress: bool = True, desc: str | None = None) -> AttackResult:
    """Features -> reconstructor (on the first ``num_shadow`` shadow models) -> reconstructions of every
    released model's target -> metrics against ``oracle`` (from :func:`oracle_for`).

    Several settings can share ``models`` (Table II: default, logits, layer subset, fewer shadow models).
    ``desc`` prefixes the reconstructor's progress bar (e.g. the setting). Raises ``FloatingPointError`` when the reconstructor's loss or reconstructions are not finite.

    >>> import jax
    >>> from recon_jax import data, models, training
    >>> x, y = data.load_dataset("synthetic", "train", num_examples=60, shape=(4, 4, 1), seed=0)
    >>> sp = data.pool_splits(x, y, fixed_size=8, num_shadow=40, num_targets=4)
    >>> fns = models.from_flax(models.MLP(features=(4, 10)))
    >>> p0 = training.initial_params(fns, jax.random.key(0), sp.fixed_images)
    >>> ms = train_model_sets(fns, training.full_batch_gd(epochs=2), sp, jax.random.key(1), init_params=p0,
    ...                       sizes=ModelSetSizes(probe_size=4), run=RunOptions(progress=False))
    >>> spec, orc = ReconstructorSpec(hidden=(8,), epochs=1, batch_size=8), oracle_for(sp)
    >>> [informed_attack(sp, ms, jax.random.key(2), oracle=orc, features=f, reconstructor=spec,
    ...                  progress=False).feature_dim for f in ("params", "logits", ("Dense_1",))]
    [118, 40, 50]
    """
    t0 = time.time()
    n_models = models.shadow.count
    n = _check_count("num_shadow", num_shadow, n_models, lo=2)
    n_targets = models.released.count
    if oracle.nn_mse.shape[0] != n_targets:
        raise ValueError(f"oracle has {oracle.nn_mse.shape[0]} targets, models.released {n_targets}")
    f_shadow = attack_features(models.shadow, features)[:n]
    f_released = attack_features(models.released, features)
    fit = fit_reconstructor(f_shadow, splits.shadow_images[:n], key, reconstructor, checkpoint_dir=checkpoint_dir,
                            progress=progress, desc=f"{desc}: reconstructor" if desc else "reconstructor")
    if not np.all(np.isfinite(fit.losses)):
        raise FloatingPointError(f"{name}: reconstructor training loss is not finite ({fit.losses.tolist()}); "
                                 "reconstructor learning rate too large, or non-finite shadow parameters?")
    rec = np.asarray(reconn.reconstruct(fit, f_released))
    if not np.all(np.isfinite(rec)):
        raise FloatingPointError(f"{name}: reconstructions are not finite; non-finite released-model parameters "
                                 "(released learning rate too large?)")
    acc = models.released["eval_accuracy"] if "eval_accuracy" in models.released else None
    return evaluate_reconstructions(
        name, splits.target_images[:n_targets], rec, oracle.nn_mse, classifier_apply=classifier_apply,
        released_accuracy=acc, num_shadow=n - reconstructor.validation_size,
        num_validation=reconstructor.validation_size, feature_dim=f_shadow.shape[1], fit=fit, seconds=time.time() - t0)


def run_informed_pipeline(splits: InformedSplits, model_fns: ModelFns, algorithm: Algorithm, key: jax.Array, *,
                          init_params=None, shuffle_key: jax.Array | None = None,
                          features: str | Sequence[str] = "params",
                          reconstructor: ReconstructorSpec = ReconstructorSpec(),
                          sizes: ModelSetSizes = ModelSetSizes(probe_size=200),
                          classifier_apply: Callable[[jax.Array], jax.Array] | None = None,
                          name: str = "default", run: RunOptions = RunOptions()
                          ) -> tuple[AttackResult, ModelSets, _oracle.OracleResult]:
    """One setting end to end: shadow and released models, reconstructor, NN oracle, metrics and success.

    Model keys derive from ``key`` (see :func:`train_model_sets`); the reconstructor uses ``fold_in(key, 3)``.

    Args:
      splits, model_fns, algorithm, key, init_params, shuffle_key: as for :func:`train_model_sets`.
      features, reconstructor, classifier_apply, name: as for :func:`informed_attack`.
      sizes: as for :func:`train_model_sets` (default: every target, 200 probes); ``sizes.probe_size`` is used
        only for ``features="logits"``, which needs it > 0.
      run: as for :func:`train_model_sets`; the reconstructor's checkpoints go to ``run.store/reconstructor``.

    Returns:
      ``(result, models, oracle)``: the :class:`AttackResult`, the :class:`ModelSets` (to reuse for further
      settings with :func:`informed_attack`) and the :class:`~recon_jax.attacks.oracle.OracleResult`.

    Raises:
      ValueError: on invalid arguments, as :func:`train_model_sets` and :func:`informed_attack`; for
        ``features="logits"`` with ``sizes.probe_size == 0`` before any model trains.
      FloatingPointError: as :func:`informed_attack` (a non-finite reconstructor loss or reconstructions).

    >>> import jax
    >>> from recon_jax import data, models, training
    >>> x, y = data.load_dataset("synthetic", "train", num_examples=90, shape=(4, 4, 1), seed=0)
    >>> sp = data.pool_splits(x, y, fixed_size=10, num_shadow=70, num_targets=5)
    >>> fns = models.from_flax(models.MLP(features=(4, 10)))
    >>> p0 = training.initial_params(fns, jax.random.key(0), sp.fixed_images)
    >>> res, ms, orc = run_informed_pipeline(sp, fns, training.full_batch_gd(epochs=3), jax.random.key(1),
    ...     init_params=p0, reconstructor=ReconstructorSpec(hidden=(16,), epochs=2, batch_size=16),
    ...     run=RunOptions(progress=False))
    >>> res.mse.shape, res.num_shadow, bool(orc.nn_mse.shape == (5,))
    ((5,), 70, True)
    """
    logits = isinstance(features, str) and features == "logits"
    if logits and not sizes.probe_size:
        raise ValueError("features='logits' needs models trained with probe_size > 0 (sizes.probe_size)")
    ms = train_model_sets(model_fns, algorithm, splits, key, init_params=init_params, shuffle_key=shuffle_key,
                          sizes=sizes if logits else dataclasses.replace(sizes, probe_size=0), run=run)
    orc = oracle_for(splits, ms.released.count)
    ckpt = None if run.store is None else os.path.join(run.store, "reconstructor")
    res = informed_attack(splits, ms, jax.random.fold_in(key, 3), oracle=orc, features=features,
                          reconstructor=reconstructor, classifier_apply=classifier_apply, checkpoint_dir=ckpt,
                          name=name, progress=run.progress)
    return res, ms, orc
