"""Jittable privacy accounting: RDP curves, subsampling, conversions, composition, calibration; PLD bridge.

Modules:

- :mod:`recon_jax.accounting.rdp`: Gaussian and Poisson-subsampled Gaussian RDP (integer and fractional
  orders), Zhu-Wang subsampling for any mechanism, interpolation, composition.
- :mod:`recon_jax.accounting.conversions`: RDP -> (eps, delta) (Canonne et al.), subsampling amplification
  and Kairouz et al. composition for (eps, delta)-DP.
- :mod:`recon_jax.accounting.dpsgd`: DP-SGD epsilon (ours or dp_accounting's PLD), sigma calibration, the PLD
  trade-off curve and the Hayes et al. 2023 ReRo bound.
- :mod:`recon_jax.accounting.calibration`: the smallest noise multiplier for a ReRo target
  (:func:`calibrate_sigma_for_rero`).
- :mod:`recon_jax.accounting.risk`: every bound for one Gaussian DP-SGD configuration, typed
  (:func:`privacy_bounds` -> :class:`PrivacyBounds`), and :func:`tightest_rero`.
- :mod:`recon_jax.accounting.vmf`: von Mises-Fisher RDP (Biswas et al. Props 1-2), their two accounting
  approaches, kappa calibration.
- :mod:`recon_jax.accounting.vmf_pld`: the pessimistic privacy loss distribution of the Poisson-subsampled VMF
  mechanism (``vmf_epsilon(..., approach="pld")``), composed with ``dp_accounting``.
"""

from recon_jax.accounting.calibration import calibrate_sigma_for_rero
from recon_jax.accounting.conversions import amplify_dp_poisson, delta_from_rdp, eps_from_rdp, kov_composition
from recon_jax.accounting.dpsgd import calibrate_sigma, dpsgd_epsilon, pld_tradeoff, rero_dpsgd_tradeoff
from recon_jax.accounting.risk import PrivacyBounds, ReroBounds, privacy_bounds, tightest_rero
from recon_jax.accounting.rdp import (
    DEFAULT_ORDERS,
    compose_rdp,
    interpolate_rdp,
    rdp_gaussian,
    rdp_poisson_subsampled,
    rdp_subsampled_gaussian,
)
from recon_jax.accounting.vmf import calibrate_vmf_kappa, rdp_vmf, rdp_vmf_multi, vmf_epsilon
from recon_jax.accounting.vmf_pld import vmf_pld, vmf_pld_epsilon

__all__ = [
    "PrivacyBounds",
    "ReroBounds",
    "privacy_bounds",
    "tightest_rero",
    "DEFAULT_ORDERS",
    "rdp_gaussian",
    "rdp_subsampled_gaussian",
    "rdp_vmf",
    "rdp_vmf_multi",
    "rdp_poisson_subsampled",
    "interpolate_rdp",
    "compose_rdp",
    "eps_from_rdp",
    "delta_from_rdp",
    "amplify_dp_poisson",
    "kov_composition",
    "dpsgd_epsilon",
    "calibrate_sigma",
    "pld_tradeoff",
    "rero_dpsgd_tradeoff",
    "calibrate_sigma_for_rero",
    "vmf_epsilon",
    "calibrate_vmf_kappa",
    "vmf_pld",
    "vmf_pld_epsilon",
]
