"""Config of the reconstruction-risk report (:mod:`recon_jax.report.risk_report`): "how well could someone
reconstruct a training record of my model?"

Shipped inside the package so that the ``recon-jax-report`` console script finds it from an installed wheel;
``experiments/configs/risk_report.py`` (``make demo``) re-exports :func:`get_config`.

Variants: ``smoke`` (seconds, CI), ``default`` (``make demo``: under 20 minutes on a 2-core CPU), ``paper``
(fixed set 1,000, 10,000 shadow and 1,000 released models, 100 reconstructor epochs; not Table V's 59,000 shadow
models; accelerator). Override any field: ``--config.noise_multipliers='(1.0, 4.0)'``.
"""

import ml_collections


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """The report's locked config for ``variant`` (``smoke``, ``default`` or ``paper``).

    >>> c = get_config("smoke")
    >>> c.variant, c.num_shadow, tuple(c.noise_multipliers)
    ('smoke', 96, (2.0,))
    """
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    # Data: any recon_jax.data.load_dataset name ("mnist", "tfds:cifar10", ... or "folder": data_path with train/
    # and test/ sub-directories, one sub-directory per class, images resized to image_size x image_size x channels).
    # The released model trains on D- (fixed_size) + one target.
    c.dataset = "mnist"
    c.data_path = ml_collections.config_dict.placeholder(str)
    c.image_size = ml_collections.config_dict.placeholder(int)
    c.channels = 1
    # Released model: a zoo name ("balle_mnist_mlp", "lenet", "balle_cifar_cnn") or "package.module:attribute" (a
    # flax module, or a callable num_classes -> module). hidden and activation configure the zoo models.
    c.model = "balle_mnist_mlp"
    # Reconstructor network: "auto" (Balle et al.'s transposed-conv decoder for square RGB images with a side
    # divisible by 4, their MLP otherwise), "mlp" or "conv".
    c.reconstructor = "auto"
    # Balle et al.'s MNIST set-up (fixed set 1,000, 100 epochs) with 6,000 instead of 59,000 shadow models: DP-GD
    # shadow models cost about as much as non-private ones (ghost clipping), so the whole sweep fits in ~10 min.
    c.fixed_size = 1000
    c.num_shadow = 6000  # shadow models (one per shadow target) for the reconstructor network
    c.num_targets = 200  # released models, one per evaluation target
    c.eval_size = 2000  # test examples for the released models' accuracy
    # Released-model architecture: Balle et al.'s MLP (784-hidden-10).
    c.hidden = 10
    c.activation = "elu"
    # Training: full-batch gradient descent with momentum (batch_size=None) or minibatch DP-SGD (batch_size set).
    c.epochs = 100
    c.learning_rate = 0.2
    c.momentum = 0.9
    c.batch_size = ml_collections.config_dict.placeholder(int)
    # Minibatch order: "fresh" (secret, random per model; accounted with subsampling at q = batch / n) or "known"
    # to the adversary (no amplification: one Gaussian step per epoch). Ignored for full-batch training.
    c.shuffle = "fresh"
    # Privacy sweep: a non-private run (no clipping, no noise) and DP-GD/DP-SGD at each noise multiplier > 0.
    c.include_non_private = True
    c.noise_multipliers = (1.0, 4.0, 16.0)
    c.clip_norm = 1.0
    c.delta = 1e-5
    c.kappas = (1e-3, 1e-2, 1e-1)  # priors for the ReRo bounds table
    # "Every update released": the prior-aware attack of Hayes et al. (2023) on the accounted mechanism, with a
    # uniform prior of k random records (kappa = 1/k), and the white-box canary game for the empirical epsilon.
    c.prior_sizes = (2, 10, 100)
    c.prior_aware_trials = 200  # runs of the game per DP setting (the prior sizes share them)
    c.audit_runs = 200  # runs per world (with / without the canary) per DP setting; half choose the threshold
    c.confidence = 0.95  # Clopper-Pearson intervals and the empirical-epsilon lower bound
    # Calibration: the smallest sigma keeping any attacker's success <= calibration_rero at prior
    # calibration_kappa, and the test accuracy of calibration_models released models trained at it.
    c.calibration_rero = 0.05
    c.calibration_kappa = 0.01
    c.calibration_models = 8
    # Adversary's reconstructor network (Balle et al.: MLP 2x1000, MAE+MSE, RMSProp).
    c.reconstructor_epochs = 30
    c.reconstructor_batch_size = 128
    c.reconstructor_learning_rate = 1e-3
    c.chunk_size = 128
    if variant == "smoke":
        c.fixed_size = 50
        c.num_shadow = 96
        c.num_targets = 8
        c.eval_size = 200
        c.epochs = 5
        c.noise_multipliers = (2.0,)
        c.prior_aware_trials = 32  # = chunk_size and 2 x audit_runs: the game and the audit share one compilation
        c.audit_runs = 16
        c.calibration_models = 2
        c.reconstructor_epochs = 2
        c.reconstructor_batch_size = 32
        c.chunk_size = 32
    elif variant == "paper":
        c.epochs = 100
        c.fixed_size = 1000
        c.num_shadow = 10000
        c.num_targets = 1000
        c.eval_size = 10000
        c.noise_multipliers = (0.3, 0.5, 1.0, 2.0, 4.0)
        c.reconstructor_epochs = 100
        c.chunk_size = 512
        c.prior_aware_trials = 1000
        c.audit_runs = 2000
    elif variant != "default":
        raise ValueError(f"unknown variant {variant!r}; choose smoke, default or paper")
    c.lock()
    return c
