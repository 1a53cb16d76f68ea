"""Jittable analytic bounds on reconstruction success.

Modules: :mod:`~recon_jax.bounds.rero` (Balle et al.; Hayes et al. / Kaissis et al.) with the priors' baselines in
:mod:`~recon_jax.bounds.baselines`,
:mod:`~recon_jax.bounds.prior_free` (Ziller et al.; its NCC bounds in
:mod:`~recon_jax.bounds.prior_free_ncc`), :mod:`~recon_jax.bounds.bayes_capacity` (Biswas et al.),
:mod:`~recon_jax.bounds.hcr` (Tygert et al.: the HCR closed form and Algorithm 1) with
:mod:`~recon_jax.bounds.cramer_rao` (its small-perturbation limit), :mod:`~recon_jax.bounds.hcr_eval` (accuracy
under dither, the bound's visualisation) and the helpers :mod:`~recon_jax.bounds.dct` (coordinates) and
:mod:`~recon_jax.bounds.lsqr`. Every public name of those modules is re-exported here (the dithering mechanism
too, through :mod:`~recon_jax.bounds.hcr`; its home is :mod:`recon_jax.mechanisms.dithering`).
"""

from recon_jax.bounds.rero import *  # noqa: F401,F403
from recon_jax.bounds.prior_free import *  # noqa: F401,F403
from recon_jax.bounds.bayes_capacity import *  # noqa: F401,F403
from recon_jax.bounds.cramer_rao import *  # noqa: F401,F403
from recon_jax.bounds.hcr_eval import *  # noqa: F401,F403
from recon_jax.bounds.hcr import *  # noqa: F401,F403
