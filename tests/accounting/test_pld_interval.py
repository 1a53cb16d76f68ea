"""Every PLD route refuses a value_discretization_interval that is not a finite number > 0 with a ValueError naming
it (an infinite one ended in an IndexError, zero in a ZeroDivisionError, NaN in "cannot convert float NaN")."""

import math

import pytest

from recon_jax.accounting import (calibrate_sigma, calibrate_sigma_for_rero, calibrate_vmf_kappa, dpsgd_epsilon,
                                  pld_tradeoff, rero_dpsgd_tradeoff, vmf_epsilon, vmf_pld, vmf_pld_epsilon)

ROUTES = {
    "dpsgd_epsilon": lambda v: dpsgd_epsilon(1.0, 0.01, 100, 1e-5, "pld", value_discretization_interval=v),
    "calibrate_sigma": lambda v: calibrate_sigma(1.0, 0.01, 100, 1e-5, "pld", value_discretization_interval=v),
    "pld_tradeoff": lambda v: pld_tradeoff(1.0, 0.01, 100, [0.1], value_discretization_interval=v),
    "rero_dpsgd_tradeoff": lambda v: rero_dpsgd_tradeoff([0.1], 1.0, 0.01, 100, value_discretization_interval=v),
    "calibrate_sigma_for_rero": lambda v: calibrate_sigma_for_rero(0.5, 0.1, 0.01, 100, route="tradeoff",
                                                                   value_discretization_interval=v),
    "vmf_pld": lambda v: vmf_pld(10.0, 3, 0.01, value_discretization_interval=v),
    "vmf_pld_epsilon": lambda v: vmf_pld_epsilon(10.0, 3, 0.01, 10, 1e-5, value_discretization_interval=v),
    "vmf_epsilon": lambda v: vmf_epsilon(10.0, 3, 0.01, 10, 1e-5, approach="pld", value_discretization_interval=v),
    "calibrate_vmf_kappa": lambda v: calibrate_vmf_kappa(1.0, 3, 0.01, 10, 1e-5, approach="pld",
                                                         value_discretization_interval=v),
}


@pytest.mark.parametrize("value", [math.inf, math.nan, 0.0, -1e-3])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_bad_interval_is_refused_by_name(route, value):
    with pytest.raises(ValueError, match="value_discretization_interval must be finite and > 0"):
        ROUTES[route](value)
