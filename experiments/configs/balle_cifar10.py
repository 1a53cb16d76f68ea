"""Config for experiments.balle_cifar10: Balle et al. (2022) RecoNN attack on CIFAR-10 (Table II, VI-IX).

Variants: ``smoke`` (synthetic 32x32x3 blobs, logits features, CI), ``default`` (TFDS CIFAR-10 if prepared,
reduced sizes, conv-layer features; CPU hours, really meant for an accelerator), ``paper`` (Table V/VI/VII
sizes: fixed set 5,000, 44,000 shadow models, all 55K parameters into the Table VII decoder, PatchGAN loss).
"""

import ml_collections


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

    # Released model (Table VI): conv 16@4x4/2, conv 32@4x4/1, dense 10, ELU; full-batch GD + momentum.
    c.activation = "elu"
    c.learning_rate = 0.2
    c.momentum = 0.9
    c.epochs = 100
    c.chunk_size = 64

    # Features: "params" (all 55K), "logits" (probe logits) or comma-separated layer paths (App. F / Table II
    # "released layers": the convolutions).
    c.features = "Conv_0,Conv_1"
    # Reconstructor (Table VII decoder) and optional PatchGAN (Table VIII).
    c.recon_epochs = 30
    c.recon_batch_size = 128
    c.recon_learning_rate = 1e-3
    c.use_discriminator = False
    c.adversarial_weight = 0.01
    c.discriminator_learning_rate = 1e-5
    c.grid_columns = 10

    if variant == "smoke":
        c.dataset = "synthetic"
        c.fixed_size = 16
        c.num_shadow = 48
        c.num_targets = 4
        c.eval_size = 16
        c.probe_size = 8
        c.epochs = 2
        c.chunk_size = 16
        c.features = "logits"
        c.recon_epochs = 2
        c.recon_batch_size = 16
        c.use_discriminator = True
        c.grid_columns = 6
    elif variant == "paper":
        c.fixed_size = 5000
        c.num_shadow = 44000  # 50K train split: 5K fixed + 44K shadow + 1K targets (test split for accuracy)
        c.num_targets = 1000
        c.eval_size = 0
        c.chunk_size = 512
        c.features = "params"
        c.recon_epochs = 100
        c.use_discriminator = True
    elif variant != "default":
        raise ValueError(f"unknown variant {variant!r}; choose smoke, default or paper")
    return c
