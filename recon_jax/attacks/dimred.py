"""Reconstruction attack on dimensionality-reduction embeddings (Lumbut & Ponnoprat, 2024).

Threat model (paper Def. 2.1, the informed adversary of Balle et al. 2022): the curator releases the 2-D
embedding ``theta = M(D)`` of a dataset ``D = D- u {x}``; the adversary knows ``M``'s algorithm, the other
points ``D-`` and a public dataset ``D'`` from the same distribution, and wants ``x``.

Attack (Algorithms 1-2): for each public point ``x'_j`` embed ``D- u {x'_j}`` with the target in a fixed row
(:func:`shadow_embeddings`), train a reconstruction network ``theta_j -> x'_j`` (:func:`fit_attack`; the
paper's split encoder + transposed-conv decoder or the Balle et al. MLP from :mod:`recon_jax.models.dimred`),
then apply it to the released embedding (:func:`reconstruct`).

Randomness and the adversary's knowledge are explicit: every method takes a typed key, and the
``seed_policy`` of :func:`shadow_embeddings` says whether all runs share the victim's key (``"known"``) or
draw fresh randomness per run (``"fresh"``, the paper's setting).

Defence (Sec. 6): Gaussian noise ``N(0, sigma^2 I)`` added to the data before embedding
(``noise_sigma`` of :func:`shadow_embeddings`), evaluated with networks trained on clean data
(:func:`noise_defence_mse`). Scale: the paper's sigma in {2, 4, 8, 16, 32} is in 8-bit pixel units (the
reference code embeds raw 0-255 MNIST pixels), i.e. ``data_scale=255`` for images in [0, 1].

Methods: :func:`embed` (PCA and SRP in ``jnp``; MDS, Isomap, t-SNE from scikit-learn; UMAP from umap-learn).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from recon_jax.attacks._dimred_embed import (
    DETERMINISTIC_METHODS,
    METHODS,
    SEED_POLICIES,
    embed,
    pca_embed,
    run_key,
    seed_from_key,
    srp_embed,
    srp_matrix,
)
from recon_jax.attacks._dimred_shadow import insert_row, shadow_embeddings
from recon_jax.attacks._dimred_train import (
    EarlyStopping,
    MinMaxScaler,
    ReconstructorFit,
    early_stopping_update,
    fit_minmax,
    predict,
    recon_loss,
    train_reconstructor,
)
from recon_jax.models.dimred import make_reconstructor

__all__ = [
    "METHODS",
    "DETERMINISTIC_METHODS",
    "SEED_POLICIES",
    "embed",
    "pca_embed",
    "srp_matrix",
    "srp_embed",
    "run_key",
    "seed_from_key",
    "insert_row",
    "shadow_embeddings",
    "EarlyStopping",
    "early_stopping_update",
    "MinMaxScaler",
    "fit_minmax",
    "recon_loss",
    "ReconstructorFit",
    "train_reconstructor",
    "predict",
    "DimRedAttack",
    "fit_attack",
    "reconstruct",
    "per_example_mse",
    "noise_defence_mse",
]


class DimRedAttack(NamedTuple):
    """A trained attack: the network, its best-validation variables, the input scaler and the training fit."""

    net: nn.Module
    variables: Any
    scaler: MinMaxScaler
    fit: ReconstructorFit


def fit_attack(
    kind: str,
    train_theta: Any,
    train_images: Any,
    val_theta: Any,
    val_images: Any,
    key: jax.Array,
    *,
    width: int = 64,
    target_row: int = 0,
    **train_kwargs: Any,
) -> DimRedAttack:
    """Trains the reconstruction network on shadow pairs (Lumbut & Ponnoprat, Alg. 1 lines 11-12).

    Inputs are min-max scaled per feature with statistics of the shadow training set (as in the reference
    implementation); the targets are the images in [0, 1].

    Args:
        kind: ``"split"`` (paper, Tables 1 + 3/5) or ``"mlp"`` (Balle et al. 2 x 1000 baseline).
        train_theta, val_theta: ``[m, 2n]`` shadow embeddings (:func:`shadow_embeddings`).
        train_images, val_images: ``[m, H, W, 1]`` the corresponding public points.
        key: typed key.
        width: decoder channel scale of the split network (64 = paper).
        target_row: the target's row used when the shadows were made.
        **train_kwargs: passed to :func:`train_reconstructor` (learning_rate, batch_size, max_epochs, ...).

    Returns:
        :class:`DimRedAttack`.

    Example:
        >>> import jax, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> th, im = rng.random((16, 20)), rng.random((16, 28, 28, 1))
        >>> atk = fit_attack("mlp", th, im, th, im, jax.random.key(0), max_epochs=1, batch_size=8)
        >>> reconstruct(atk, th[:3]).shape
        (3, 28, 28, 1)
    """
    train_images = jnp.asarray(train_images, jnp.float32)
    if train_images.ndim != 4:
        raise ValueError(f"train_images must be [m, H, W, C], got shape {train_images.shape}")
    scaler = fit_minmax(train_theta)
    net = make_reconstructor(kind, image_shape=train_images.shape[1:], width=width, target_row=target_row)
    fit = train_reconstructor(net, scaler(train_theta), train_images, scaler(val_theta), val_images, key, **train_kwargs)
    return DimRedAttack(net, fit.variables, scaler, fit)


def reconstruct(attack: DimRedAttack, theta: Any) -> jax.Array:
    """Reconstructs the target of each released embedding ``theta`` [N, 2n] (Alg. 2). Returns [N, H, W, 1].

    Example:
        >>> # see fit_attack
    """
    return predict(attack.net, attack.variables, attack.scaler(theta))


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


def noise_defence_mse(attack: DimRedAttack, clean_theta: Any, noisy_theta: Any) -> jax.Array:
    """Per-example MSE between reconstructions from clean and from noisy-data embeddings (paper Sec. 6, eq. 12).

    The network was trained on clean shadows; the curator added noise before embedding. Eq. 12 sums over the
    784 pixels; this returns the per-pixel mean (divide eq. 12 by d) so it is on the scale of the attack MSE.

    Example:
        >>> # see fit_attack; noise_defence_mse(atk, theta, theta) is all zeros
    """
    return per_example_mse(reconstruct(attack, clean_theta), reconstruct(attack, noisy_theta))
