"""Config for experiments.balle_mnist: Balle et al. (2022) RecoNN attack on the embedded MNIST (Table II, Fig. 3,
5c, 9, 11).

Variants: ``smoke`` (CI, tiny sizes), ``default`` (CPU: fixed set 1,000, 10,000 shadow models, 1,000 targets;
secondary settings on smaller shadow sets), ``paper`` (Table V sizes: fixed set 10,000, 59,000 shadow
models, reconstructor trained 100 epochs; for an accelerator).
"""

import ml_collections


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.dataset = "mnist"

    # Data splits (Sec. V-A a). The probe set for black-box features is the first `probe_size` shadow targets.
    c.fixed_size = 1000
    c.num_shadow = 10000
    c.num_targets = 1000
    c.eval_size = 1000  # held-out images for the released models' test accuracy
    c.probe_size = 200

    # Released / shadow model training (Table V).
    c.hidden = 10
    c.activation = "elu"
    c.learning_rate = 0.2
    c.momentum = 0.9
    c.epochs = 100
    c.chunk_size = 256

    # Reconstructor (Table V: 2 x 1000 ReLU, sigmoid, MAE+MSE, RMSProp 1e-3, batch 128, 100 epochs).
    c.recon_hidden = (1000, 1000)
    c.recon_epochs = 30
    c.recon_batch_size = 128
    c.recon_learning_rate = 1e-3

    # Table II rows. "default", "logits", "layer_subset" and "fewer_shadow" reuse the default shadow set;
    # "random_init", "relu" and "dp" train new shadow and released models with `secondary_*` sizes.
    c.settings = ("default", "random_init", "relu", "logits", "layer_subset", "fewer_shadow", "dp")
    c.layer_subset = ("Dense_1",)  # App. F: the second layer only (110 of 7,960 parameters)
    c.fewer_shadow_counts = (1000, 3000)
    c.secondary_num_shadow = 2000
    c.secondary_num_targets = 200

    # DP-GD (Sec. VI-D): clip 1, Gaussian noise calibrated to (eps, delta) over `epochs` full-batch steps.
    c.dp_eps = (10.0, 1000.0)
    c.dp_delta = 1e-5
    c.dp_clip_norm = 1.0

    # Classifier-KL metric (Sec. V-B c): a LeNet trained on the MNIST test split; 0 epochs disables it.
    c.kl_classifier_epochs = 2
    # Informed MIA (App. A, Fig. 11): models per phase (shadow / released) for known vs random initialisation,
    # for each candidate (the first evaluation targets) and each fixed-set size; 0 disables it.
    c.mia_num_models = 100
    c.mia_num_candidates = 3
    c.mia_fixed_sizes = (1000, 10000)  # D- = the first n of fixed set + shadow pool; the paper's is 10,000
    c.grid_columns = 10

    if variant == "smoke":
        c.fixed_size = 100
        c.num_shadow = 300
        c.num_targets = 20
        c.eval_size = 100
        c.probe_size = 20
        c.epochs = 10
        c.chunk_size = 128
        c.recon_hidden = (64, 64)
        c.recon_epochs = 3
        c.recon_batch_size = 32
        c.fewer_shadow_counts = (100,)
        c.secondary_num_shadow = 100
        c.secondary_num_targets = 10
        c.dp_eps = (10.0,)
        c.kl_classifier_epochs = 0
        c.mia_num_models = 8
        c.mia_num_candidates = 1
        c.mia_fixed_sizes = (100,)
        c.grid_columns = 6
    elif variant == "paper":
        c.fixed_size = 10000
        c.num_shadow = 48000  # the embedded train split has 60K: 10K + 48K + 1K + 1K (paper: 59K of 70K)
        c.num_targets = 1000
        c.recon_epochs = 100
        c.chunk_size = 1024
        c.fewer_shadow_counts = (100, 1000, 8000, 20000)
        c.secondary_num_shadow = 48000
        c.secondary_num_targets = 1000
        c.dp_eps = (1.0, 10.0, 100.0, 1000.0, 10000.0)
        c.kl_classifier_epochs = 5
        c.mia_num_models = 1000
        c.mia_num_candidates = 10
        c.mia_fixed_sizes = (10000,)
    elif variant != "default":
        raise ValueError(f"unknown variant {variant!r}; choose smoke, default or paper")
    return c
