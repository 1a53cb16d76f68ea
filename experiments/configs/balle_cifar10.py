"""Config for experiments.balle_cifar10: Balle et al. (2022) RecoNN attack on CIFAR-10 (Table II, VI-IX).

Data layout: train + test (CIFAR-10: 60,000 records), evaluation targets apart, every other record in the
adversary's pool (the NN oracle's search set); fixed set and shadow targets from the pool.

Variants and the sizes they really use:

- ``smoke``: 84 synthetic 32x32x3 blobs (CI): fixed set 16, 48 shadow models (8 held out for validation), 4
  targets, released CNN trained 2 epochs, logits features on 8 probes, decoder + PatchGAN for 2 epochs.
- ``default``: TFDS CIFAR-10 if prepared: fixed set 5,000, 5,000 shadow models (500 held out), 200 targets,
  59,800-record pool, convolution-layer features, decoder for 30 epochs (CPU hours; meant for an accelerator).
- ``paper``: fixed set 5,000, 44,000 shadow models (1,000 held out), 1,000 targets, 59,000-record pool (Fig.
  3b), all 55K parameters into the Table VII decoder, PatchGAN loss, 100 epochs (accelerator).

Sections that map one-to-one onto library structures (built with ``**``; override as e.g.
``--config.reconstructor.epochs=5``): ``model``, the arguments of :func:`recon_jax.models.balle_cifar_cnn`
(``activation``); ``train``, those of :func:`recon_jax.training.full_batch_gd` (``learning_rate``, ``momentum``,
``epochs``); ``reconstructor``, fields of :class:`recon_jax.attacks.reconn.ReconstructorSpec` (``epochs``,
``batch_size``, ``learning_rate``, ``validation_size``, ``adversarial_weight``, ``discriminator_learning_rate``;
the experiment adds the decoder and, with ``use_discriminator``, the PatchGAN).
"""

import ml_collections

from experiments.configs.shared_checks import BALLE_RECONSTRUCTOR, BALLE_SIZES, BALLE_TRAINING, CLAIMS, SEED
from recon_jax.evidence.config_checks import integer, number, one_of

VARIANTS = ("smoke", "default", "paper")

# Allowed values of the fields a user sets, checked before the run writes anything (experiments.common.check_config).
CHECKS = {
    **SEED,
    "dataset": one_of("synthetic", "tfds:cifar10"),
    **BALLE_SIZES,
    **BALLE_TRAINING,
    **BALLE_RECONSTRUCTOR,
    "reconstructor.adversarial_weight": number(at_least=0),
    "reconstructor.discriminator_learning_rate": number(above=0),
    "grid_columns": integer(at_least=1),
    **CLAIMS,
}


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.dataset = "tfds:cifar10"
    c.data_dir = ""  # TFDS data_dir ("" = TFDS default); this library never downloads
    c.fixed_size = 5000
    c.num_shadow = 5000
    c.num_targets = 200
    c.eval_size = 1000
    c.probe_size = 500  # Sec. VI-C: 500 probe images for CIFAR-10 black-box features

    # Released model (Table VI): conv 16@4x4/2, conv 32@4x4/1, dense 10, ELU; full-batch GD + momentum. `model`:
    # the arguments of models.balle_cifar_cnn; `train`: those of training.full_batch_gd.
    c.model = ml_collections.ConfigDict({"activation": "elu"})
    c.train = ml_collections.ConfigDict({"learning_rate": 0.2, "momentum": 0.9, "epochs": 100})
    c.chunk_size = 64

    # Features: "params" (all 55K), "logits" (probe logits) or comma-separated layer paths (App. F / Table II
    # "released layers": the convolutions).
    c.features = "Conv_0,Conv_1"
    # Reconstructor (Table VII decoder) and optional PatchGAN (Table VIII): fields of informed.ReconstructorSpec
    # (the experiment adds the decoder, and the discriminator when `use_discriminator`). validation_size: the last
    # shadow models, held out for the validation MSE.
    c.reconstructor = ml_collections.ConfigDict({"epochs": 30, "batch_size": 128, "learning_rate": 1e-3,
                                                 "validation_size": 500, "adversarial_weight": 0.01,
                                                 "discriminator_learning_rate": 1e-5})
    c.use_discriminator = False
    c.grid_columns = 10
    # Claims, fixed before the run: the row against the NN oracle (the paper's ✓ or ✗) by a one-sided paired t-test
    # over the targets at claim_alpha (holds when the test in the paper's direction rejects, fails when the reverse
    # one does, undecided otherwise), as in balle_mnist.
    c.claim_alpha = 0.05

    if variant == "smoke":
        c.dataset = "synthetic"
        c.fixed_size = 16
        c.num_shadow = 48
        c.num_targets = 4
        c.eval_size = 16
        c.probe_size = 8
        c.train.epochs = 2
        c.chunk_size = 16
        c.features = "logits"
        c.reconstructor.update(epochs=2, batch_size=16, validation_size=8)
        c.use_discriminator = True
        c.grid_columns = 6
    elif variant == "paper":
        c.fixed_size = 5000
        c.num_shadow = 44000
        c.num_targets = 1000
        c.eval_size = 1000
        c.reconstructor.update(epochs=100, validation_size=1000)
        c.chunk_size = 512
        c.features = "params"
        c.use_discriminator = True
    elif variant != "default":
        raise ValueError(f"unknown variant {variant!r}; choose smoke, default or paper")
    return c
