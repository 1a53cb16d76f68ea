"""recon_jax: training-data reconstruction attacks and the bounds that limit them, in JAX.

Sub-packages (each documented in its own module docstring):

- :mod:`recon_jax.data`: the embedded MNIST, TFDS and image-folder sources, synthetic data, informed splits.
- :mod:`recon_jax.metrics`: MSE, MAE, PSNR, SSIM, NCC.
- :mod:`recon_jax.special`: special functions JAX lacks (large-order log Bessel I).
- :mod:`recon_jax.bounds`: jittable reconstruction-robustness and prior-free bounds.
- :mod:`recon_jax.accounting`: jittable RDP accounting for Gaussian and von Mises-Fisher mechanisms.
- :mod:`recon_jax.models`, :mod:`recon_jax.training`, :mod:`recon_jax.mechanisms`, :mod:`recon_jax.shadow`:
  the model zoo, pure training algorithms, noise mechanisms and the shadow-model engine.
- :mod:`recon_jax.attacks`: GLM inversion, reconstructor networks, MIA, gradient and embedding attacks.
- :mod:`recon_jax.evidence`: the run harness of every experiment (provenance, claims, caches, tables, figures);
  :mod:`recon_jax.report`: the reconstruction-risk report (``recon-jax-report``). Neither is imported here.
"""

from recon_jax import data
from recon_jax import metrics
from recon_jax import special
from recon_jax import bounds
from recon_jax import accounting
from recon_jax import models
from recon_jax import mechanisms
from recon_jax import training
from recon_jax import shadow
from recon_jax import attacks

__version__ = "0.1.0"

__all__ = [
    "data",
    "metrics",
    "special",
    "bounds",
    "accounting",
    "models",
    "mechanisms",
    "training",
    "shadow",
    "attacks",
]
