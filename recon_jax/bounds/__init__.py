"""Jittable analytic bounds on reconstruction success.

Modules: :mod:`~recon_jax.bounds.rero` (Balle et al.; Hayes et al. / Kaissis et al.) with the priors' baselines in
:mod:`~recon_jax.bounds.baselines`,
:mod:`~recon_jax.bounds.prior_free` (Ziller et al.; its NCC bounds in
:mod:`~recon_jax.bounds.prior_free_ncc`), :mod:`~recon_jax.bounds.bayes_capacity` (Biswas et al.),
:mod:`~recon_jax.bounds.hcr` (Tygert et al.: the HCR closed form) and :mod:`~recon_jax.bounds.hcr_search` (its
Algorithm 1) with :mod:`~recon_jax.bounds.cramer_rao` (its small-perturbation limit), :mod:`~recon_jax.bounds.hcr_eval`
(accuracy under dither, the bound's visualisation) and the helpers :mod:`~recon_jax.bounds.dct` (coordinates) and
:mod:`~recon_jax.bounds.lsqr`. Every public name of those modules is importable from here, and so is the dithering
mechanism the HCR bounds are about (:func:`~recon_jax.mechanisms.dithering.dither`,
:func:`~recon_jax.mechanisms.dithering.feature_rms`; its home is :mod:`recon_jax.mechanisms.dithering`).
"""

import importlib as _importlib

from recon_jax.bounds.rero import *  # noqa: F401,F403
from recon_jax.bounds.prior_free import *  # noqa: F401,F403
from recon_jax.bounds.bayes_capacity import *  # noqa: F401,F403
from recon_jax.bounds.cramer_rao import *  # noqa: F401,F403
from recon_jax.bounds.hcr_eval import *  # noqa: F401,F403
from recon_jax.bounds.hcr import *  # noqa: F401,F403
from recon_jax.bounds.hcr_search import *  # noqa: F401,F403
from recon_jax.bounds.dct import *  # noqa: F401,F403
from recon_jax.bounds.lsqr import *  # noqa: F401,F403
from recon_jax.mechanisms import dithering as _dithering
from recon_jax.mechanisms.dithering import *  # noqa: F401,F403

# The public API: the names imported above, once each (rero's and prior_free's __all__ include the names of
# baselines and prior_free_ncc). Modules are looked up by name: ``lsqr`` here is the function, not its module.
_HOMES = ("rero", "prior_free", "bayes_capacity", "cramer_rao", "hcr_eval", "hcr", "hcr_search", "dct", "lsqr")
__all__ = list(dict.fromkeys(
    [name for home in _HOMES for name in _importlib.import_module(f"{__name__}.{home}").__all__] + _dithering.__all__))
