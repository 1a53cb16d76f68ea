"""Reconstruction attack on dimensionality-reduction embeddings (Lumbut & Ponnoprat, 2024).

Threat model (paper Def. 2.1, the informed adversary of Balle et al. 2022): the curator releases the 2-D
embedding ``theta = M(D)`` of a dataset ``D = D- u {x}``; the adversary knows ``M``'s algorithm, the other
points ``D-`` and a public dataset ``D'`` from the same distribution, and wants ``x``.

Attack (Algorithms 1-2): for each public point ``x'_j`` embed ``D- u {x'_j}`` with the target in a fixed row
(:func:`shadow_embeddings`; the mechanism is an :class:`EmbeddingSpec`), train a reconstruction network
``theta_j -> x'_j`` (:func:`fit_attack`; the paper's split encoder + transposed-conv decoder or the Balle et al.
MLP from :mod:`recon_jax.models.dimred`, sized and trained as an :class:`AttackTrainingSpec` says), then apply it
to the released embedding (:func:`recon_jax.attacks.reconn.reconstruct`).

Shared machinery: the shadow embeddings are rows of a resumable shadow store
(:func:`recon_jax.shadow.fill_store`: atomic chunks, SHA-256 checks, keyed by a hash of everything that
determines them, refused when made by other code: the recon_jax sources but ``evidence`` and ``report``, Python,
scikit-learn, umap-learn, jax and the other numeric packages' versions), and the network is trained by the
shared reconstructor trainer (:func:`recon_jax.attacks.reconn.train_reconstructor`) with the paper's settings:
Adam, MSE + L1, min-max input scaling, early stopping on the validation objective, BatchNorm in training mode.

Randomness and the adversary's knowledge are explicit: every method takes a typed key, and the
``seed_policy`` of :class:`EmbeddingSpec` says whether all runs share the victim's key (``"known"``) or
draw fresh randomness per run (``"fresh"``, the paper's setting).

Defence (Sec. 6): Gaussian noise ``N(0, sigma^2 I)`` added to the data before embedding
(``noise_sigma`` of :class:`EmbeddingSpec`), evaluated with networks trained on clean data
(:func:`noise_defence_mse`). Scale: the paper's sigma in {2, 4, 8, 16, 32} is in 8-bit pixel units (the
reference code embeds raw 0-255 MNIST pixels), i.e. ``data_scale=255`` for images in [0, 1].

Methods: :func:`recon_jax.attacks.dimred_embed.embed` (PCA and SRP in ``jnp``; MDS, Isomap, t-SNE from scikit-learn;
UMAP from umap-learn), with the method names and seed policies (``METHODS``, ``SEED_POLICIES``) and
:func:`~recon_jax.attacks.dimred_embed.run_key`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from recon_jax._validation import FINITE, FINITE_NONNEGATIVE, FINITE_POSITIVE, check, check_integer
from recon_jax.attacks.dimred_embed import (
    JNP_METHODS,
    METHODS,
    SEED_POLICIES,
    check_method_options,
    pca_embed,
    run_key,
    sklearn_embed,
    srp_matrix,
)
from recon_jax.attacks.reconn import ReconstructorFit, ReconstructorSpec, reconstruct, train_reconstructor
from recon_jax.bounds.dct import full_precision
from recon_jax.io import seed_from_key
from recon_jax.models.dimred import make_reconstructor
from recon_jax.shadow import array_digest, fill_store, key_fingerprint

__all__ = [
    "EmbeddingSpec",
    "AttackTrainingSpec",
    "insert_row",
    "shadow_embeddings",
    "fit_attack",
    "per_example_mse",
    "noise_defence_mse",
]

# 2: rows of the shared shadow store; 3: run_key's sibling streams
_STORE_FORMAT = "recon_jax.attacks.dimred.shadow_embeddings/3"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EmbeddingSpec:
    """The embedding mechanism ``M`` the curator runs and the adversary knows (Lumbut & Ponnoprat, Def. 2.1):
    the method and its options, where its randomness comes from, the data scale, and the Sec. 6 input-noise
    defence. Hashable when the option values are (``method_opts`` is stored as sorted ``(name, value)`` pairs; a
    dict value such as Isomap's ``metric_params`` is not).

    Attributes:
      method: one of ``METHODS``.
      method_opts: options passed to the method, a mapping or ``(name, value)`` pairs (None: none); stored as
        ``(name, value)`` pairs sorted by name, so ``dict(spec.method_opts)`` reads them back. The names allowed are
        :func:`~recon_jax.attacks.dimred_embed.method_options`: ``density`` for SRP, ``solver`` for PCA (the
        embedding is always 2-D), the estimator's parameters but ``n_components`` / ``random_state`` for the
        scikit-learn / umap methods.
      seed_policy: ``"known"`` (every run shares the key) or ``"fresh"`` (every run draws its own randomness, the
        paper's setting; see :func:`~recon_jax.attacks.dimred_embed.run_key`).
      data_scale: the data are multiplied by this before noise and embedding (finite and > 0; 255 reproduces the
        reference implementation, which embedded raw 8-bit MNIST pixels).
      noise_sigma: standard deviation of the additive Gaussian input noise (finite and >= 0; 0: none), in units of
        the scaled data; the noise key is an argument of :func:`shadow_embeddings`.

    Raises:
      ValueError: ``method`` or ``seed_policy`` is not one of the allowed names, ``method_opts`` is not a mapping
        or names an option the method does not take, ``data_scale`` is not finite and > 0 or ``noise_sigma`` not
        finite and >= 0.

    Example:
      >>> import dataclasses
      >>> spec = EmbeddingSpec(method="srp", method_opts={"density": 0.5})
      >>> spec.method_opts, dataclasses.replace(spec, noise_sigma=8.0).noise_sigma
      ((('density', 0.5),), 8.0)
    """

    method: str
    method_opts: Mapping[str, Any] | tuple[tuple[str, Any], ...] | None = ()
    seed_policy: str = "fresh"
    data_scale: float = 1.0
    noise_sigma: float = 0.0

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.seed_policy not in SEED_POLICIES:
            raise ValueError(f"seed_policy must be one of {SEED_POLICIES}, got {self.seed_policy!r}")
        try:
            opts = dict(self.method_opts or {})
        except (TypeError, ValueError) as e:
            raise ValueError(f"method_opts must be a mapping of option names to values, got {self.method_opts!r}") \
                from e
        if not all(isinstance(name, str) for name in opts):
            raise ValueError(f"method_opts must be a mapping of option names to values, got {self.method_opts!r}")
        check_method_options(self.method, opts, "method_opts")
        object.__setattr__(self, "method_opts", tuple(sorted(opts.items())))
        check("data_scale", self.data_scale, FINITE_POSITIVE)
        check("noise_sigma", self.noise_sigma, FINITE_NONNEGATIVE)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttackTrainingSpec:
    """How :func:`fit_attack` sizes and trains the reconstruction network (Lumbut & Ponnoprat, Sec. 4.1; hashable).

    The defaults are the paper's (and its reference code's early stopping).

    Attributes:
      width: decoder channel scale of the split network (integer >= 1; 64 = paper; the MLP ignores it).
      learning_rate: Adam step size (finite and > 0; paper: 1e-5).
      batch_size: minibatch size (integer >= 1; paper: 64); capped at the number of shadows.
      max_epochs: maximum epochs (integer >= 1; paper: 500).
      patience: epochs without validation improvement before stopping (integer >= 1; reference code: 5); None
        trains all ``max_epochs`` and returns the last parameters.
      l1_weight: weight of the L1 term of the loss MSE + ``l1_weight`` * L1 (finite and >= 0; paper: 1).
      output: the network's output activation: ``"relu"`` (the paper's; on MNIST's zero background an output unit
        that dies is harmless, on images without one its pixel stays 0 and the attack can lose to the mean
        image), ``"sigmoid"`` (images in [0, 1]) or ``"linear"``.

    Raises:
      ValueError: a field is out of its range (the message names the field and the range).

    Example:
      >>> AttackTrainingSpec(max_epochs=1, batch_size=8).learning_rate
      1e-05
      >>> AttackTrainingSpec(batch_size=0)
      Traceback (most recent call last):
      ...
      ValueError: batch_size must be an integer >= 1; got 0
    """

    width: int = 64
    learning_rate: float = 1e-5
    batch_size: int = 64
    max_epochs: int = 500
    patience: int | None = 5
    l1_weight: float = 1.0
    output: str = "relu"

    def __post_init__(self):
        check_integer("width", self.width, 1)
        check("learning_rate", self.learning_rate, FINITE_POSITIVE)
        check_integer("batch_size", self.batch_size, 1)
        check_integer("max_epochs", self.max_epochs, 1)
        if self.patience is not None:
            check_integer("patience", self.patience, 1)
        check("l1_weight", self.l1_weight, FINITE_NONNEGATIVE)
        if self.output not in ("relu", "sigmoid", "linear"):
            raise ValueError(f"output must be 'relu', 'sigmoid' or 'linear', got {self.output!r}")



def insert_row(known: jax.Array, x: jax.Array, target_row: int) -> jax.Array:
    """Returns ``known`` [n-1, d] with ``x`` [d] inserted as row ``target_row`` ([n, d]).

    Example:
      >>> import jax.numpy as jnp
      >>> insert_row(jnp.zeros((2, 3)), jnp.ones(3), 1)[:, 0].tolist()
      [0.0, 1.0, 0.0]
    """
    return jnp.concatenate([known[:target_row], x[None, :], known[target_row:]], axis=0)


def _run_keys(key: jax.Array, seed_policy: str, indices: np.ndarray) -> jax.Array:
    return jax.vmap(lambda i: run_key(key, seed_policy, i))(jnp.asarray(indices, dtype=jnp.uint32))


def _noise_keys(noise_key: jax.Array, indices: np.ndarray) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(noise_key, i))(jnp.asarray(indices, dtype=jnp.uint32))


@functools.lru_cache(maxsize=32)
def _jnp_chunk_fn(method: str, target_row: int, noisy: bool, density: Any, solver: str = "auto"):
    """``jit(vmap(...))`` embedding one chunk of candidates with PCA or SRP (cached: one trace per setting)."""

    @full_precision  # as pca_embed and srp_embed: the embedding is the released mechanism
    def one(known, x, key, noise_key, run_index, scale, sigma):
        z = insert_row(known, x, target_row) * scale
        if noisy:
            z = z + sigma * jax.random.normal(jax.random.fold_in(noise_key, run_index), z.shape, z.dtype)
        if method == "pca":
            out = pca_embed(z, 2, solver)
        else:
            out = z @ srp_matrix(key, z.shape[1], 2, density)
        return out.reshape(-1)

    return jax.jit(jax.vmap(one, in_axes=(None, 0, 0, None, 0, None, None)))


def _sklearn_chunk(method, known, xs, seeds, noise_seeds, target_row, scale, sigma, opts):
    """Worker: embeds each candidate of one chunk (host NumPy, runs in a joblib process)."""
    out = []
    for x, seed, nseed in zip(xs, seeds, noise_seeds):
        z = np.concatenate([known[:target_row], x[None], known[target_row:]], axis=0).astype(np.float64) * scale
        if sigma > 0:
            z = z + sigma * np.random.default_rng(int(nseed)).standard_normal(z.shape)
        out.append(np.asarray(sklearn_embed(method, z, int(seed), **opts), dtype=np.float32).reshape(-1))
    return np.stack(out)


def shadow_embeddings(
    spec: EmbeddingSpec,
    known: Any,
    candidates: Any,
    key: jax.Array,
    *,
    noise_key: jax.Array | None = None,
    index_offset: int = 0,
    target_row: int = 0,
    store_dir: str | None = None,
    chunk_size: int = 128,
    n_jobs: int = 1,
    progress: bool = True,
) -> np.ndarray:
    """Embeds ``D- u {x'_j}`` for every candidate (Lumbut & Ponnoprat, Alg. 1 lines 4-10), optionally with noise.

    Run ``j`` (global run index ``index_offset + j``) uses the method key
    ``run_key(key, spec.seed_policy, index_offset + j)`` and, when ``spec.noise_sigma > 0``, input noise
    ``N(0, spec.noise_sigma^2)`` added to every row of the scaled dataset (Sec. 6 defence) drawn from
    ``fold_in(noise_key, index_offset + j)``; the scikit-learn / umap methods get these keys as integer seeds
    (:func:`recon_jax.io.seed_from_key`). PCA and SRP run as one ``jax.jit(jax.vmap(...))`` per chunk; MDS / Isomap / t-SNE /
    UMAP in joblib worker processes. Results do not depend on ``chunk_size``, ``n_jobs`` or resume point (beyond
    float rounding: PCA rows move by ~1e-7 relative with the chunk's batched products). Give
    the train / validation / test candidate sets disjoint ``index_offset`` ranges so that under the ``"fresh"``
    policy every run has its own randomness.

    With ``store_dir`` the rows are a resumable shadow store (:func:`recon_jax.shadow.fill_store`): each chunk
    is written atomically as it finishes, a re-run computes only the missing or corrupted chunks, and the
    directory is keyed by a hash of everything that determines the rows (method and options, seed policy,
    offsets, scale, noise, the keys, and the digests of ``known`` and ``candidates``).

    Args:
      spec: the embedding mechanism (:class:`EmbeddingSpec`: method and options, seed policy, data scale, input
        noise).
      known: the known members D- ``[n-1 >= 2, d >= 3]`` (images are flattened; finite, as float32).
      candidates: ``[m, d]`` public points x'_j (or the victim's targets; finite, as float32).
      key: typed key of the method's randomness (shadows: the adversary's; victim: the curator's).
      noise_key: typed key of the input noise (required when ``spec.noise_sigma > 0``, unused otherwise).
      index_offset: global index of the first run.
      target_row: row of the candidate in each embedded dataset (0 in the paper's code).
      store_dir: directory of the resumable store (None: in memory only).
      chunk_size: runs per chunk (and per worker task).
      n_jobs: joblib worker processes for the scikit-learn / umap methods.
      progress: show a tqdm progress bar.

    Returns:
      ``[m, 2n]`` float32 array; row ``j`` is the flattened embedding of run ``j`` (row-major, so the
      candidate's two coordinates are entries ``2*target_row`` and ``2*target_row + 1``).

    Raises:
      TypeError: if ``spec`` is not an :class:`EmbeddingSpec`.
      ValueError: for invalid arguments, or (:class:`recon_jax.shadow.ShadowStoreMismatchError`) when
        ``store_dir`` holds a different configuration or rows made by other code.
      FloatingPointError: when a chunk's embeddings hold NaN or inf (e.g. ``spec.data_scale`` times the data
        overflows float32), before the chunk is stored.

    Example:
      >>> import jax, numpy as np
      >>> rng = np.random.default_rng(0)
      >>> known, cands = rng.random((9, 16)), rng.random((4, 16))
      >>> shadow_embeddings(EmbeddingSpec(method="pca"), known, cands, jax.random.key(0), progress=False).shape
      (4, 20)
    """
    if not isinstance(spec, EmbeddingSpec):
        raise TypeError(f"spec must be an EmbeddingSpec, got {type(spec).__name__}")
    method, seed_policy, data_scale, noise_sigma = spec.method, spec.seed_policy, spec.data_scale, spec.noise_sigma
    known = np.asarray(known, dtype=np.float32)
    candidates = np.asarray(candidates, dtype=np.float32)
    known = known.reshape(known.shape[0], -1)
    candidates = candidates.reshape(candidates.shape[0], -1)
    # Every embedded dataset is [n >= 3, d >= 3], the rule of dimred_embed.embed (paper: d > 2).
    if known.shape[0] < 2 or known.shape[1] < 3 or known.shape[1] != candidates.shape[1]:
        raise ValueError(f"known must be [n-1 >= 2, d >= 3] matching candidates [m, d]; got {known.shape}, "
                         f"{candidates.shape}")
    check("known", known, FINITE)  # a NaN or inf (also from the cast to float32) gives all-NaN PCA / SRP rows
    check("candidates", candidates, FINITE)
    n = known.shape[0] + 1
    if not 0 <= target_row < n:
        raise ValueError(f"target_row must be in [0, {n - 1}], got {target_row}")
    if not 0 <= index_offset <= 2**32 - candidates.shape[0]:  # run indices are folded in as uint32: no wrap-around
        raise ValueError(f"index_offset must be in [0, 2**32 - {candidates.shape[0]}] (one run index per candidate "
                         f"below 2**32), got {index_offset}")
    check_integer("chunk_size", chunk_size, 1)  # 2.5 was taken
    check_integer("n_jobs", n_jobs, 1)
    if noise_sigma > 0 and noise_key is None:
        raise ValueError("noise_key is required when spec.noise_sigma > 0")
    opts = dict(spec.method_opts)
    m = candidates.shape[0]
    if m == 0:
        return np.zeros((0, 2 * n), np.float32)
    noisy = noise_sigma > 0
    config = {
        "format": _STORE_FORMAT,
        "method": method,
        "opts": json.loads(json.dumps(opts, sort_keys=True, default=str)),
        "seed_policy": seed_policy,
        "index_offset": int(index_offset),
        "target_row": int(target_row),
        "data_scale": float(data_scale),
        "noise_sigma": float(noise_sigma),
        "key": key_fingerprint(key),
        "noise_key": key_fingerprint(noise_key) if noisy else None,
        "known": array_digest(known),
        "candidates": array_digest(candidates),
    }

    def compute_jnp(pieces):
        fn = _jnp_chunk_fn(method, target_row, noisy, opts.get("density", "paper"), opts.get("solver", "auto"))
        nkey = noise_key if noisy else jax.random.key(0)  # unused without noise
        known_j = jnp.asarray(known)
        for s, e in pieces:
            idx = np.arange(index_offset + s, index_offset + e)
            theta = fn(known_j, jnp.asarray(candidates[s:e]), _run_keys(key, seed_policy, idx), nkey,
                       jnp.asarray(idx, jnp.uint32), jnp.float32(data_scale), jnp.float32(noise_sigma))
            yield {"theta": np.asarray(theta, dtype=np.float32)}

    def compute_sklearn(pieces):
        all_idx = np.arange(index_offset, index_offset + m)
        seeds = seed_from_key(_run_keys(key, seed_policy, all_idx))
        nseeds = seed_from_key(_noise_keys(noise_key, all_idx)) if noisy else np.zeros(m, np.int64)
        tasks = [(method, known, candidates[s:e], seeds[s:e], nseeds[s:e], target_row, float(data_scale),
                  float(noise_sigma), opts) for s, e in pieces]
        if n_jobs == 1:
            chunks = (_sklearn_chunk(*t) for t in tasks)
        else:
            from joblib import Parallel, delayed

            chunks = Parallel(n_jobs=n_jobs, return_as="generator")(delayed(_sklearn_chunk)(*t) for t in tasks)
        for theta in chunks:
            yield {"theta": theta}

    def compute_finite(pieces):
        compute = compute_jnp if method in JNP_METHODS else compute_sklearn
        for (s, e), chunk in zip(pieces, compute(pieces)):
            if not np.all(np.isfinite(chunk["theta"])):
                raise FloatingPointError(
                    f"shadow {method} embeddings of runs {index_offset + s}..{index_offset + e - 1} hold NaN or inf "
                    f"(data_scale={data_scale:g}, noise_sigma={noise_sigma:g}: the scaled data or the embedding may "
                    "overflow float32)")
            yield chunk

    rows = fill_store(store_dir, config, m, {"theta": ((2 * n,), "float32")}, compute_finite,
                      chunk_size=int(chunk_size), mmap=False, progress=progress, desc=f"shadow {method} n={n}")
    return rows["theta"]


@functools.lru_cache(maxsize=8)
def _adam(learning_rate: float) -> optax.GradientTransformation:
    """One Adam object per learning rate, so repeated fits of one network reuse one compiled training step."""
    return optax.adam(learning_rate)


def fit_attack(
    kind: str,
    train_theta: Any,
    train_images: Any,
    val_theta: Any,
    val_images: Any,
    key: jax.Array,
    *,
    spec: AttackTrainingSpec = AttackTrainingSpec(),
    target_row: int = 0,
    checkpoint_dir: str | None = None,
    progress: bool = False,
) -> ReconstructorFit:
    """Trains the reconstruction network on shadow pairs (Lumbut & Ponnoprat, Alg. 1 lines 11-12, Sec. 4.1).

    The shared trainer (:func:`recon_jax.attacks.reconn.train_reconstructor`) with the paper's settings: Adam,
    loss MSE + ``spec.l1_weight`` * L1, inputs min-max scaled per feature with statistics of the shadow training set
    (as in the reference implementation), targets the images in [0, 1], BatchNorm / dropout in training mode,
    one jitted step per minibatch. After each epoch the objective over the whole validation set is computed in
    evaluation mode; training stops after ``spec.patience`` epochs without improvement and the parameters of the
    best epoch are returned. (The public reference implementation compares only the last validation batch's
    loss and keeps a reference to the live model, i.e. returns the final weights.)

    Args:
      kind: ``"split"`` (paper, Tables 1 + 3/5) or ``"mlp"`` (Balle et al. 2 x 1000 baseline).
      train_theta, val_theta: ``[m, 2n]`` shadow embeddings (:func:`shadow_embeddings`).
      train_images, val_images: ``[m, H, W, 1]`` the corresponding public points.
      key: typed key (initialisation, shuffling, dropout).
      spec: the network's width and the training hyper-parameters (:class:`AttackTrainingSpec`; default: the
        paper's).
      target_row: the target's row used when the shadows were made; the split network's encoder separates it
        from the other rows, the MLP reads the whole embedding and does not use it.
      checkpoint_dir: resume training from per-epoch checkpoints in this directory (see the shared trainer).
      progress: show a tqdm bar over epochs.

    Returns:
      A :class:`recon_jax.attacks.reconn.ReconstructorFit`: ``model``, the best epoch's ``params``, the
      min-max ``standardizer``, the curves ``losses`` / ``eval_loss`` (the early-stopping objective) /
      ``eval_mse`` and ``best_epoch`` (1-based).

    Raises:
      TypeError: if ``spec`` is not an :class:`AttackTrainingSpec`.
      ValueError: for malformed data, an unknown ``kind`` or an image shape the split network cannot emit.

    Example:
      >>> import jax, numpy as np
      >>> rng = np.random.default_rng(0)
      >>> th, im = rng.random((16, 20)), rng.random((16, 28, 28, 1))
      >>> spec = AttackTrainingSpec(max_epochs=1, batch_size=8)
      >>> atk = fit_attack("mlp", th, im, th, im, jax.random.key(0), spec=spec)
      >>> reconstruct(atk, th[:3]).shape
      (3, 28, 28, 1)
    """
    if not isinstance(spec, AttackTrainingSpec):
        raise TypeError(f"spec must be an AttackTrainingSpec, got {type(spec).__name__}")
    train_images = np.asarray(train_images, np.float32)
    val_images = np.asarray(val_images, np.float32)
    if train_images.ndim != 4:
        raise ValueError(f"train_images must be [m, H, W, C], got shape {train_images.shape}")
    train_theta, val_theta = np.asarray(train_theta, np.float32), np.asarray(val_theta, np.float32)
    if train_theta.ndim != 2 or train_theta.shape[0] < 1 or val_theta.ndim != 2 or val_theta.shape[0] < 1 \
            or val_images.shape[0] != val_theta.shape[0]:
        raise ValueError(f"train/val sets must be non-empty and matched, got {train_theta.shape}, "
                         f"{train_images.shape}, {val_theta.shape}, {val_images.shape}")
    for name, a in (("train_theta", train_theta), ("train_images", train_images), ("val_theta", val_theta),
                    ("val_images", val_images)):
        check(name, a, FINITE)  # a NaN trained NaN networks and returned them as a fit
    net = make_reconstructor(kind, image_shape=train_images.shape[1:], width=spec.width, target_row=target_row,
                             output=spec.output)
    trainer = ReconstructorSpec(
        model=net, epochs=spec.max_epochs, batch_size=spec.batch_size, optimizer=_adam(float(spec.learning_rate)),
        mae_weight=float(spec.l1_weight), mse_weight=1.0, scaling="minmax", patience=spec.patience, monitor="loss",
        train_flag=True, step_loop="host")  # one jitted step per minibatch: no loop around the conv decoder (slow on XLA:CPU)
    return train_reconstructor(
        train_theta, train_images, trainer, key, eval_set=(val_theta, val_images), checkpoint_dir=checkpoint_dir,
        checkpoint_key=None if checkpoint_dir is None else {"optimizer": "adam", "learning_rate": spec.learning_rate},
        progress=progress)


def per_example_mse(a: Any, b: Any) -> jax.Array:
    """Mean squared error over pixels for each example (the paper's MSE, before averaging over examples).

    Example:
      >>> import jax.numpy as jnp
      >>> per_example_mse(jnp.zeros((2, 2, 2, 1)), jnp.ones((2, 2, 2, 1))).tolist()
      [1.0, 1.0]
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape != b.shape or a.ndim < 2:
        raise ValueError(f"a and b must have the same shape [N, ...], got {a.shape}, {b.shape}")
    return jnp.mean((a - b).reshape(a.shape[0], -1) ** 2, axis=1)


def noise_defence_mse(attack: ReconstructorFit, clean_theta: Any, noisy_theta: Any) -> jax.Array:
    """Per-example MSE between reconstructions from clean and from noisy-data embeddings (paper Sec. 6, eq. 12).

    The network (:func:`fit_attack`) was trained on clean shadows; the curator added noise before embedding.
    Eq. 12 sums over the 784 pixels; this returns the per-pixel mean (divide eq. 12 by d) so it is on the scale
    of the attack MSE.

    Example:
      >>> # see fit_attack; noise_defence_mse(atk, theta, theta) is all zeros
    """
    return per_example_mse(reconstruct(attack, clean_theta), reconstruct(attack, noisy_theta))
