"""Config for experiments.lumbut_dimred (Lumbut & Ponnoprat: reconstruction from DR embeddings of MNIST).

Variants:
  ci      -- under a minute: embedded MNIST, PCA only, |D-| = 9, 1280 / 128 / 128 shadows, the MLP attack (no
             conv-transpose compilation); the default-suite quality test (attack beats the mean image).
  smoke   -- a few CPU-minutes: synthetic images, tiny splits, |D-| = 9, PCA / SRP (both densities) / t-SNE,
             width-2 decoder, 2 epochs; exercises every part of the pipeline.
  default -- about 70 min on the 2-core CPU (the committed run results/lumbut_dimred/default: wall_time_s 4201.8 in
             its config.json, which includes about 16 min paused while `make demo` was timed; see
             experiments/README.md): PCA / SRP / Isomap at |D-| in {9, 99, 199} x 2 repeats;
             MDS / t-SNE / UMAP at |D-| = 99, 1 repeat; all on the same 2000 / 250 / 250 shadow splits (half the
             paper's); SRP at densities 1/d and 1/sqrt(d); split vs MLP (Table 4) at 199 for PCA, SRP and Isomap
             and at 99 for MDS, t-SNE and UMAP; known vs fresh seeds for
             SRP / t-SNE / UMAP at 99; noise defence at 99. Decoder width 8 (paper 64), Adam lr 1e-3 (paper
             1e-5), at most 25 epochs (paper 500). (With 600 / 100 / 100 splits for MDS / t-SNE / UMAP the run
             took 12.6 min on 2026-11-22.)
  paper   -- the paper's grid (accelerator): all six methods, |D-| in {9, 99, 199, 499, 999}, 5 repeats,
             4000 / 500 / 500, width 64, lr 1e-5, 500 epochs, patience 5.
"""

from __future__ import annotations

import ml_collections

from experiments.configs.shared_checks import CLAIMS, SEED
from recon_jax.evidence.config_checks import any_of, each, integer, number, one_of

ALL_METHODS = ("pca", "srp", "mds", "isomap", "tsne", "umap")
VARIANTS = ("ci", "smoke", "default", "paper")

# Allowed values of the fields a user sets, checked before the run writes anything (experiments.common.check_config).
CHECKS = {
    **SEED,
    "dataset": one_of("mnist", "synthetic", "folder"),
    "folder_image_size": one_of(28, 64),
    "folder_max_examples": integer(at_least=0),
    "data_scale": number(above=0),
    "fast_methods": each(one_of(*ALL_METHODS), min_len=0),
    "slow_methods": each(one_of(*ALL_METHODS), min_len=0),
    "sizes": each(integer(at_least=1)),
    "slow_sizes": each(integer(at_least=1), min_len=0),
    "repeats": integer(at_least=1),
    "slow_repeats": integer(at_least=0),
    "n_train": integer(at_least=1),
    "n_val": integer(at_least=1),
    "n_test": integer(at_least=1),
    "slow_n_train": integer(at_least=1),
    "slow_n_val": integer(at_least=1),
    "slow_n_test": integer(at_least=1),
    "table4_size": integer(at_least=1),
    "slow_table4_size": integer(at_least=1),
    "nets": each(one_of("split", "mlp")),
    "seed_methods": each(one_of(*ALL_METHODS), min_len=0),
    "seed_sizes": each(integer(at_least=1), min_len=0),
    "noise_size": integer(at_least=1),
    "noise_sigmas": each(number(above=0), min_len=0),
    "noise_n_test": integer(at_least=1),
    "slow_noise_n_test": integer(at_least=1),
    "target_row": integer(at_least=0),
    "srp_densities": each(any_of(one_of("paper", "auto"), number(above=0, at_most=1))),
    "mds_n_init": integer(at_least=1),
    "tsne_init": one_of("random", "pca"),
    "width": integer(at_least=1),
    "learning_rate": number(above=0),
    "batch_size": integer(at_least=1),
    "max_epochs": integer(at_least=1),
    "patience": integer(at_least=1),
    "l1_weight": number(at_least=0),
    **CLAIMS,
    "n_jobs": integer(at_least=1),
    "chunk_size": integer(at_least=1),
    "time_budget_s": number(at_least=0),
}


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.dataset = "mnist"  # "mnist" (embedded), "synthetic" or "folder" (a directory of PNG/JPEG images)
    c.folder_path = ""  # dataset="folder": e.g. the NIH Chest X-ray images (all PNGs in one directory)
    c.folder_image_size = 64  # 28 (Table 3 decoder) or 64 (Table 5 decoder, the paper's X-ray size)
    c.folder_max_examples = 0  # 0 = every image in the folder
    c.data_scale = 255.0  # embed 8-bit pixel values like the reference code; sigma is on this scale
    # Methods with full-size shadow sets ("fast") and reduced ones ("slow": scikit-learn / umap optimisers).
    c.fast_methods = ("pca", "srp", "isomap")
    c.slow_methods = ("mds", "tsne", "umap")
    c.sizes = (9, 99, 199)  # |D-| for the fast methods
    c.slow_sizes = (99,)
    c.repeats = 2
    c.slow_repeats = 1
    c.n_train, c.n_val, c.n_test = 2000, 250, 250
    c.slow_n_train, c.slow_n_val, c.slow_n_test = 2000, 250, 250  # same as the fast methods: comparable MSEs
    c.table4_size = 199  # split encoder vs Balle MLP at this |D-| (paper Table 4) for the fast methods
    c.slow_table4_size = 99  # ... and at this |D-| for the slow methods (one of slow_sizes)
    c.nets = ("split", "mlp")  # "split" = the paper's network everywhere; "mlp" only at the Table 4 sizes
    c.seed_methods = ("srp", "tsne", "umap")  # also run with seed_policy="known"
    c.seed_sizes = (99,)
    c.noise_size = 99  # paper Fig. 6 uses |D-| = 99
    c.noise_sigmas = (2.0, 4.0, 8.0, 16.0, 32.0)  # on the 0-255 pixel scale (data_scale = 255)
    c.noise_n_test = 100
    c.slow_noise_n_test = 50
    c.target_row = 0
    # Method options.
    c.srp_densities = ("paper", "auto")  # "paper" (1/d, eq. 2; label srp), "auto" (1/sqrt(d); label srp_auto)
    c.mds_n_init = 1  # scikit-learn 1.4 default (paper era) was 4
    c.tsne_init = "random"  # random init per fresh seed, as the paper describes t-SNE (scikit-learn default: "pca")
    # Reconstruction network and training.
    c.width = 8  # paper: 64
    c.learning_rate = 1e-3  # paper: 1e-5
    c.batch_size = 64
    c.max_epochs = 25  # paper: 500 (with early stopping)
    c.patience = 5
    c.l1_weight = 1.0
    # Claims, fixed before the run: "PCA is the most vulnerable" and "the split network beats the MLP" compare
    # methods (networks) run at equal sizes on the same test images; each comparison is a one-sided paired t-test
    # over the images at claim_alpha divided among the claim's comparisons (Bonferroni), undecided where it does
    # not reject either way.
    c.claim_alpha = 0.05
    # Execution.
    c.n_jobs = 2
    c.chunk_size = 100
    c.progress = True
    c.n_grid_images = 1
    c.time_budget_s = 0.0  # > 0: stop starting new grid points after this many seconds (report says PARTIAL)

    if variant == "smoke":
        c.dataset = "synthetic"
        c.fast_methods = ("pca", "srp")
        c.slow_methods = ("tsne",)
        c.sizes = (9,)
        c.slow_sizes = (9,)
        c.repeats = 1
        c.slow_repeats = 1
        c.n_train, c.n_val, c.n_test = 32, 8, 8
        c.slow_n_train, c.slow_n_val, c.slow_n_test = 32, 8, 8  # equal shapes: networks compile once
        c.table4_size = 9
        c.slow_table4_size = 9
        c.seed_methods = ("srp",)
        c.seed_sizes = (9,)
        c.noise_size = 9
        c.noise_sigmas = (8.0, 32.0)
        c.noise_n_test = 8
        c.slow_noise_n_test = 8
        c.width = 2
        c.max_epochs = 2
        c.batch_size = 16
        c.n_jobs = 1
        c.chunk_size = 16
        c.progress = False
    elif variant == "ci":
        c.fast_methods = ("pca",)
        c.slow_methods = ()
        c.sizes = (9,)
        c.slow_sizes = ()
        c.repeats = 1
        c.n_train, c.n_val, c.n_test = 1280, 128, 128
        c.table4_size = 9
        c.nets = ("mlp",)
        c.seed_methods = ()
        c.seed_sizes = ()
        c.noise_size = 9
        c.max_epochs = 25
        c.batch_size = 64
        c.n_jobs = 1
        c.chunk_size = 512
        c.progress = False
    elif variant == "paper":
        c.fast_methods = ALL_METHODS
        c.slow_methods = ()
        c.sizes = (9, 99, 199, 499, 999)
        c.slow_sizes = ()
        c.repeats = 5
        c.n_train, c.n_val, c.n_test = 4000, 500, 500
        c.seed_methods = ("srp", "mds", "tsne", "umap")
        c.seed_sizes = (9, 99, 199, 499, 999)
        c.noise_n_test = 500
        c.mds_n_init = 4
        c.width = 64
        c.learning_rate = 1e-5
        c.max_epochs = 500
        c.n_jobs = 8
        c.chunk_size = 250
    elif variant != "default":
        raise ValueError(f"variant must be 'ci', 'smoke', 'default' or 'paper', got {variant!r}")
    return c
