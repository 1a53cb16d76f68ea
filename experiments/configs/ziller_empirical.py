"""Config for experiments.ziller_empirical (Ziller et al. Fig. 1 and Fig. 3 analogues on embedded MNIST).

Variants: ``smoke`` (seconds), ``default`` (CPU, a few minutes), ``paper`` (accelerator; 224x224 and 1024x1024).
"""

import ml_collections


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.dataset = "mnist"
    c.split = "test"
    # Fig. 1 analogue: many images at one resolution, grid of sigma x C (and steps T).
    c.num_images = 100
    c.resolution = 28  # images are resampled (bilinear) to resolution x resolution when != 28
    c.sigmas = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0)
    c.clip_norms = (1.0, 5.0, 10.0, 20.0, 50.0)
    c.steps = (1, 10)
    c.repeats = 1  # independent noise draws per image and setting
    c.chunk_size = 25  # images per simulated DP-SGD batch (per-sample parameter blocks)
    # Fig. 3 analogue: one image at several resolutions.
    c.fig3_resolutions = (16, 28, 64, 128)
    c.fig3_clip_norms = (1.0, 10.0, 100.0)
    c.fig3_repeats = 8
    c.mc_sigmas = 4.0  # a bound "holds" if the empirical mean is within mc_sigmas standard errors of its side
    if variant == "smoke":
        c.num_images = 6
        c.sigmas = (1e-2, 0.3, 3.0)
        c.clip_norms = (1.0, 50.0)
        c.steps = (1, 4)
        c.chunk_size = 6
        c.fig3_resolutions = (16, 28)
        c.fig3_clip_norms = (1.0, 100.0)
        c.fig3_repeats = 2
    elif variant == "paper":
        c.num_images = 100
        c.resolution = 224
        c.chunk_size = 4
        c.repeats = 4
        c.clip_norms = (1.0, 10.0, 50.0, 100.0, 500.0)
        c.fig3_resolutions = (32, 224, 1024)
        c.fig3_clip_norms = (1.0, 10.0, 100.0, 1000.0)
        c.fig3_repeats = 16
    elif variant != "default":
        raise ValueError(f"unknown variant {variant!r}; use smoke, default or paper")
    return c
