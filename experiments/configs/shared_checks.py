"""Config checks that several experiments share: each block is a field -> rule dict that a config's ``CHECKS`` merges
in place (``{**SEED, "dataset": ..., **BALLE_SIZES, ...}``), so that a field every experiment means the same way
has its range written once. Not a config itself (no ``get_config``).

>>> from recon_jax.evidence.config_checks import check_config
>>> check_config({"seed": 0, "claim_alpha": 0.05}, {**SEED, **CLAIMS})
"""

from recon_jax.evidence.config_checks import integer, number, one_of
from recon_jax.models import ACTIVATIONS

__all__ = ["MNIST_LIKE", "SEED", "CLAIMS", "BALLE_SIZES", "BALLE_TRAINING", "BALLE_RECONSTRUCTOR"]

MNIST_LIKE = ("mnist", "tfds:mnist", "tfds:fashion_mnist")
"""The datasets of 28 x 28 x 1 images in ten classes."""

SEED = {"seed": integer(at_least=0)}
"""The run's seed (:func:`recon_jax.evidence.run.start_run` records it)."""

CLAIMS = {"claim_alpha": number(above=0, below=0.5)}
"""The significance level of the run's claims' comparisons (:mod:`recon_jax.evidence.claims`)."""

BALLE_SIZES = {
    "fixed_size": integer(at_least=1),
    "num_shadow": integer(at_least=2),
    "num_targets": integer(at_least=1),
    "eval_size": integer(at_least=0),
    "probe_size": integer(at_least=1, at_most="num_shadow"),
}
"""Balle et al.'s informed-adversary split (experiments.balle_mnist, experiments.balle_cifar10)."""

BALLE_TRAINING = {
    "model.activation": one_of(*ACTIVATIONS),
    "train.learning_rate": number(above=0),
    "train.momentum": number(at_least=0, below=1),
    "train.epochs": integer(at_least=1),
    "chunk_size": integer(at_least=1),
}
"""The released and shadow models' training in the Balle et al. experiments."""

BALLE_RECONSTRUCTOR = {
    "reconstructor.epochs": integer(at_least=1),
    "reconstructor.batch_size": integer(at_least=1),
    "reconstructor.learning_rate": number(above=0),
    "reconstructor.validation_size": integer(at_least=0, below="num_shadow"),
}
"""The reconstructor network's training in the Balle et al. experiments (after :data:`BALLE_SIZES`)."""
