"""Jittable analytic bounds on reconstruction success.

Modules: :mod:`~recon_jax.bounds.rero` (Balle et al.; Hayes et al. / Kaissis et al.),
:mod:`~recon_jax.bounds.prior_free` (Ziller et al.), :mod:`~recon_jax.bounds.bayes_capacity` (Biswas et al.),
:mod:`~recon_jax.bounds.hcr` (Tygert et al.). Every public name of those modules is re-exported here.
"""

from recon_jax.bounds.rero import *  # noqa: F401,F403
from recon_jax.bounds.prior_free import *  # noqa: F401,F403
from recon_jax.bounds.bayes_capacity import *  # noqa: F401,F403
from recon_jax.bounds.hcr import *  # noqa: F401,F403
