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
    c.prior_aware_trials = 200  # games with random-record priors per DP setting (the prior sizes share them)
    # Crafted priors: gradient canaries of a fixed geometry ("simplex": centred regular simplex, antipodal at k = 2,
    # the prior closest to the bound; or "orthogonal"). Their runs also carry the with/without audit's canary.
    # Runs per DP setting: enough for a 95% interval of success / bound of half-width crafted_precision at k <= 10
    # (from the exact optimum, fixed before the run), at least prior_aware_trials and 2 x audit_runs, at most
    # crafted_trials (at sigma 16: 6,016 runs, 3,008 per audit world; at sigma 1 and 4: 512).
    c.crafted_candidates = "simplex"
    c.crafted_precision = 0.04
    c.crafted_trials = 6000
    c.audit_runs = 200  # at least this many runs per world (with / without the audit canary) per DP setting
    # One-run audit (Steinke et al.): Dirac canaries in one training run per DP setting, each included with
    # probability 1/2 (capped at the number of parameters). ~6,000 puts the idealised Gaussian audit at sigma 16
    # above 0.35 of the accountant's epsilon in 9 of 10 runs.
    c.one_run_canaries = 6000
    c.confidence = 0.95  # Clopper-Pearson intervals and every audit's confidence
    # Claim thresholds, fixed before any run (the reason beside each):
    # - a success within its ReRo bound "holds" when the upper end of its 95% interval is at most (1 + tolerance)
    #   x the bound (an attack that reaches a bound exactly can never be shown below it; 15% is what the default
    #   run resolves at kappa = 1/100), and "fails" when the whole interval lies above the bound;
    c.bound_tolerance = 0.15
    # - crafted canaries reach the bound: lower end of the 95% interval of success / bound at k <= 10 (issue 35:
    #   0.85; the exact optimum is 0.94 to 1.0 of the bound there);
    c.crafted_reach = 0.85
    # - the audits where the accountant's eps <= 10 certify these fractions of it (issue 35: Gaussian-DP reading
    #   0.8, one-run audit 0.35; an idealised Gaussian model puts the one-run ceiling at 0.31-0.46).
    c.audit_gdp_reach = 0.8
    c.audit_one_run_reach = 0.35
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
        c.prior_aware_trials = 32  # = chunk_size: one compiled call
        c.audit_runs = 16
        c.crafted_trials = 32
        c.one_run_canaries = 200
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
        c.crafted_trials = 20000
    elif variant != "default":
        raise ValueError(f"unknown variant {variant!r}; choose smoke, default or paper")
    c.lock()
    return c
