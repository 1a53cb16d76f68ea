"""Config of the reconstruction-risk report (:mod:`recon_jax.report.app`): "how well could someone
reconstruct a training record of my model?"

Shipped inside the package so that the ``recon-jax-report`` console script finds it from an installed wheel
(``recon-jax-report --config=smoke`` names a variant); ``experiments/configs/risk_report.py`` (``make demo``)
re-exports :func:`get_config`.

Variants: ``smoke`` (seconds, CI), ``default`` (``make demo``: under 20 minutes on a 2-core CPU), ``paper``
(fixed set 1,000, 10,000 shadow and 1,000 released models, 100 reconstructor epochs; not Table V's 59,000 shadow
models; accelerator). Override any field: ``--config.noise_multipliers='(1.0, 4.0)'``.

Every field is declared once, in :data:`FIELDS`, with its value in the ``default`` variant and one line of
meaning; ``recon-jax-report --help`` prints those lines and the report's validation knows the fields from there
(:data:`DESCRIPTIONS`).
"""

import ml_collections
from ml_collections import config_dict

__all__ = ["VARIANTS", "FIELDS", "DESCRIPTIONS", "SIZE_FIELDS", "get_config"]

VARIANTS = ("smoke", "default", "paper")


class _Unset:
    """A field without a value by default that takes one of type ``kind`` (an ml_collections placeholder, made
    fresh for every config: one placeholder object shared by two configs would tie their values)."""

    def __init__(self, kind):
        self.kind = kind

    def __repr__(self):
        return "None"


# (field, value in the default variant, one line of meaning). The variants below change some values.
FIELDS = (
    ("variant", "default", "the shipped variant the other defaults come from: smoke, default or paper"),
    ("seed", 0, "seed of the data split, the initialisation and every noise draw"),
    # Data: any recon_jax.data.load_dataset name. "folder" reads data_path/train/<class>/*.png and
    # data_path/test/<class>/*.png (PNG or JPEG), resized to image_size x image_size x channels.
    ("dataset", "mnist", "mnist (embedded), tfds:mnist, tfds:fashion_mnist, tfds:cifar10, tfds:cifar100, or folder"),
    ("data_path", _Unset(str), "dataset=folder: a directory with train/<class>/ and test/<class>/ image folders"),
    ("image_size", _Unset(int), "dataset=folder: resize images to this side (default: their own size if all "
                                "share one square size)"),
    ("channels", 1, "dataset=folder: 1 (grayscale) or 3 (RGB); other datasets keep their images' channels "
                    "(leave 1 or give theirs: 3 for tfds:cifar10 and tfds:cifar100)"),
    # The released model trains on the fixed set D- (fixed_size records) plus one target.
    ("model", "balle_mnist_mlp", "released model: balle_mnist_mlp, lenet, balle_cifar_cnn, module:attribute or "
                                 "file.py:attribute (a flax module, a Module class, or a function num_classes -> "
                                 "module; resolved from the current directory)"),
    ("hidden", 10, "balle_mnist_mlp: hidden units"),
    ("activation", "elu", "balle_mnist_mlp and balle_cifar_cnn: elu, relu, tanh or sigmoid"),
    ("reconstructor", "auto", "adversary's reconstructor network: auto (transposed-conv decoder for square RGB "
                              "images with a side divisible by 4, MLP otherwise), mlp or conv"),
    # Sizes: Balle et al.'s MNIST set-up (fixed set 1,000, 100 epochs) with 5,000 instead of 59,000 shadow models,
    # so that `make demo` stays under 20 minutes on a 2-core CPU (the shadow models are about half its time, at
    # about the matmul peak: DP-GD shadow models cost about 1.5x non-private ones, ghost clipping included).
    ("sizes", "auto", "auto: the size fields left at the variant's values shrink to fit a smaller dataset (the "
                      "report states the split); fixed: use them as given"),
    ("fixed_size", 1000, "records in the fixed set D- that every model trains on, besides its one target"),
    ("num_shadow", 5000, "shadow models (one per shadow target) the reconstructor network learns from"),
    ("num_targets", 200, "released models, one per evaluation target"),
    ("eval_size", 2000, "test records for the released models' accuracy"),
    # Released-model training: full-batch gradient descent with momentum (batch_size None) or minibatch SGD.
    ("epochs", 100, "training epochs of every released, shadow and calibration model"),
    ("learning_rate", 0.2, "learning rate of the released model's training"),
    ("momentum", 0.9, "momentum of the released model's training, in [0, 1)"),
    ("batch_size", _Unset(int), "None: full-batch gradient descent; a number: minibatch (DP-)SGD with that batch"),
    ("shuffle", "fresh", "minibatch order: fresh (secret, random per model; accounted with subsampling) or known "
                         "(to the adversary: no amplification)"),
    # Privacy sweep: a non-private run (no clipping, no noise) and DP-GD / DP-SGD at each noise multiplier. The
    # default sweeps eps ~13 and ~2.6 (sigma 4 and 16 at 100 full-batch steps); sigma 1 (eps ~92) is left out of
    # the default: its ReRo bounds are 1 everywhere (context, never a claim) and its setting cost 5 of the demo's
    # minutes. Add it back with --config.noise_multipliers='(1.0, 4.0, 16.0)'.
    ("include_non_private", True, "also run without DP (no clipping, no noise)"),
    ("noise_multipliers", (4.0, 16.0), "DP noise multipliers sigma > 0 of the sweep, e.g. '(1.0,)'"),
    ("clip_norm", 1.0, "per-example gradient clip norm C of DP training"),
    ("delta", 1e-5, "delta of the reported (eps, delta)"),
    ("kappas", (1e-3, 1e-2, 1e-1), "priors (baseline success probabilities) of the ReRo bounds table"),
    # "Every update released": the prior-aware attack of Hayes et al. (2023) on the accounted mechanism, with a
    # uniform prior of k candidates (kappa = 1/k): random test records (the realistic prior) and crafted gradient
    # canaries (the prior closest to the bound), and the audits of the mechanism.
    ("prior_sizes", (2, 10, 100), "prior-aware game: sizes k of the uniform priors (random test records and "
                                  "crafted canaries)"),
    ("prior_aware_trials", 200, "prior-aware game with random-record priors: games per DP setting (the prior "
                                "sizes share them)"),
    # Crafted priors: their runs also carry the with/without audit's canary. Runs per DP setting: enough for a 95%
    # interval of success / bound of half-width crafted_precision at k <= 10 (from the exact optimum, fixed before
    # the run), at least prior_aware_trials and 2 x audit_runs, at most crafted_trials, rounded up to whole chunks
    # (at sigma 16: 6,016 runs, 3,008 per audit world; at sigma 4: 512).
    ("crafted_candidates", "simplex", "crafted priors: simplex (centred regular simplex of gradient canaries, "
                                      "antipodal at k = 2) or orthogonal (Dirac canaries)"),
    ("crafted_precision", 0.04, "crafted priors: half-width of the 95% interval of success / bound asked at k <= 10"),
    ("crafted_trials", 6000, "crafted priors: at most this many runs per DP setting (before rounding to chunks)"),
    ("audit_runs", 200, "with/without-canary audit: at least this many runs per world per DP setting"),
    # ~6,000 puts the idealised Gaussian one-run audit at sigma 16 above 0.35 of the accountant's epsilon in 9 of
    # 10 runs.
    ("one_run_canaries", 6000, "one-run audit (Steinke et al.): Dirac canaries in one training run per DP setting, "
                               "each included with probability 1/2 (capped at the number of parameters)"),
    ("confidence", 0.95, "confidence of the Clopper-Pearson intervals and of every audit's lower bound"),
    # Claim thresholds, fixed before any run (the reason beside each). A success within its ReRo bound "holds" when
    # the upper end of its 95% interval is at most (1 + tolerance) x the bound (an attack that reaches a bound
    # exactly can never be shown below it; 15% is what the default run resolves at kappa = 1/100), and "fails"
    # when the whole interval lies above the bound.
    ("bound_tolerance", 0.15, "claims: a success within (1 + this) x its ReRo bound at the top of its 95% interval "
                              "holds"),
    # Issue 35: 0.85 (the exact optimum of simplex canaries is 0.94 to 1.0 of the bound at k <= 10).
    ("crafted_reach", 0.85, "claims: crafted canaries reach the bound when the 95% interval of success / bound at "
                            "k <= 10 lies above this"),
    # Issue 35: Gaussian-DP reading 0.8, one-run audit 0.35 (an idealised Gaussian model puts the one-run ceiling
    # at 0.31-0.46 of eps for 10^3-10^4 canaries).
    ("audit_gdp_reach", 0.8, "claims: the Gaussian-DP audit certifies this fraction of the accountant's eps "
                             "where eps <= 10"),
    ("audit_one_run_reach", 0.35, "claims: the one-run audit certifies this fraction of the accountant's eps "
                                  "where eps <= 10"),
    # Calibration: the smallest sigma keeping any attacker's success <= calibration_rero at prior
    # calibration_kappa, and the test accuracy of calibration_models released models trained at it.
    ("calibration_rero", 0.05, "calibration: the ReRo target (success probability any attack may reach)"),
    ("calibration_kappa", 0.01, "calibration: the prior at which the target applies"),
    ("calibration_models", 8, "calibration: released models trained at the calibrated sigma (their accuracy)"),
    # Adversary's reconstructor network (Balle et al.: MLP 2x1000, MAE+MSE, RMSProp).
    ("reconstructor_epochs", 30, "reconstructor network: training epochs"),
    ("reconstructor_batch_size", 128, "reconstructor network: minibatch size"),
    ("reconstructor_learning_rate", 1e-3, "reconstructor network: RMSProp learning rate"),
    ("chunk_size", 128, "models trained per compiled call (bounds memory)"),
    ("keep_intermediates", False, "keep each setting's shadow and released models and reconstructor checkpoint "
                                  "after its results are saved (a rerun needs only the results)"),
)

DESCRIPTIONS = {name: meaning for name, _, meaning in FIELDS}
"""Field -> one line of meaning (``recon-jax-report --help``; the report's known fields)."""

SIZE_FIELDS = ("fixed_size", "num_shadow", "num_targets", "eval_size", "prior_sizes", "calibration_models")
"""The fields ``sizes="auto"`` fits to the data (:func:`recon_jax.report.sizes.fit_sizes`)."""


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """The report's locked config for ``variant`` (``smoke``, ``default`` or ``paper``).

    >>> c = get_config("smoke")
    >>> c.variant, c.num_shadow, tuple(c.noise_multipliers)
    ('smoke', 96, (2.0,))
    >>> list(c.keys()) == sorted(DESCRIPTIONS)
    True
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    for name, value, _ in FIELDS:
        c[name] = config_dict.placeholder(value.kind) if isinstance(value, _Unset) else value
    c.variant = variant
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
    c.lock()
    return c
