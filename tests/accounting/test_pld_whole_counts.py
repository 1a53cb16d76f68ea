"""The PLD routes compose an integer number of steps: a non-integer or infinite count is refused (ValueError naming
it), never rounded. Regression: calibrate_sigma(accountant="pld"), vmf_epsilon(approach="pld") and
calibrate_vmf_kappa(approach="pld") composed round(1.4) = 1 steps for steps/compositions = 1.4 (a sigma or epsilon
for fewer steps than asked) and raised OverflowError for inf; dpsgd_epsilon(accountant="pld") already refused."""

import numpy as np
import pytest

from recon_jax.accounting import calibrate_sigma, calibrate_vmf_kappa, dpsgd_epsilon, vmf_epsilon

ROUTES = {
    "dpsgd_epsilon": ("steps", lambda n: dpsgd_epsilon(1.0, 0.5, n, 1e-5, "pld")),
    "calibrate_sigma": ("steps", lambda n: calibrate_sigma(1.0, 0.5, n, 1e-5, "pld")),
    "vmf_epsilon": ("compositions", lambda n: vmf_epsilon(5.0, 10, 0.5, n, 1e-5, approach="pld")),
    "calibrate_vmf_kappa": ("compositions", lambda n: calibrate_vmf_kappa(1.0, 10, 0.5, n, 1e-5, approach="pld")),
}


@pytest.mark.parametrize("count", [1.4, 2.5, np.inf, np.array([2.0, 1.4])], ids=["1.4", "2.5", "inf", "array"])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_pld_refuses_non_integer_counts(x64, route, count):
    name, fn = ROUTES[route]
    with pytest.raises(ValueError, match=f"{name} must be finite whole numbers"):
        fn(count)
