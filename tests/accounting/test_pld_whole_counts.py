"""The PLD routes compose an integer number of steps: a non-integer or infinite count is refused (ValueError naming
it), never rounded. Regression: calibrate_sigma(accountant="pld"), vmf_epsilon(approach="pld") and
calibrate_vmf_kappa(approach="pld") composed round(1.4) = 1 steps for steps/compositions = 1.4 (a sigma or epsilon
for fewer steps than asked) and raised OverflowError for inf; dpsgd_epsilon(accountant="pld") already refused.
pld_tradeoff, rero_dpsgd_tradeoff and privacy_bounds truncated: int(1.9) = 1 step, a ReRo bound for fewer steps."""

import numpy as np
import pytest

import jax

from recon_jax.accounting import (calibrate_sigma, calibrate_vmf_kappa, dpsgd_epsilon, pld_tradeoff, privacy_bounds,
                                  rero_dpsgd_tradeoff, vmf_epsilon)

ROUTES = {
    "dpsgd_epsilon": ("steps", lambda n: dpsgd_epsilon(1.0, 0.5, n, 1e-5, "pld")),
    "calibrate_sigma": ("steps", lambda n: calibrate_sigma(1.0, 0.5, n, 1e-5, "pld")),
    "vmf_epsilon": ("compositions", lambda n: vmf_epsilon(5.0, 10, 0.5, n, 1e-5, approach="pld")),
    "calibrate_vmf_kappa": ("compositions", lambda n: calibrate_vmf_kappa(1.0, 10, 0.5, n, 1e-5, approach="pld")),
    "pld_tradeoff": ("steps", lambda n: pld_tradeoff(1.0, 0.5, n, [0.1])),
    "rero_dpsgd_tradeoff": ("steps", lambda n: rero_dpsgd_tradeoff(0.01, 1.0, 0.5, n)),
    "privacy_bounds": ("steps", lambda n: privacy_bounds(1.0, 0.5, n, 1e-5, 1.0, 4, kappas=[0.1])),
}


@pytest.mark.parametrize("count", [1.4, 2.5, np.inf, np.array([2.0, 1.4])], ids=["1.4", "2.5", "inf", "array"])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_pld_refuses_non_integer_counts(x64, route, count):
    name, fn = ROUTES[route]
    with pytest.raises(ValueError, match=f"{name} must be finite whole numbers"):
        fn(count)


def test_the_trade_off_curve_refuses_traced_inputs_with_a_message():
    """pld_tradeoff runs on the host: under jax.jit it failed with JAX's ConcretizationTypeError from float()."""
    with pytest.raises(ValueError, match="pld_tradeoff runs on the host"):
        jax.jit(lambda s: rero_dpsgd_tradeoff(1e-3, s, 1.0, 100))(4.0)


def test_privacy_bounds_checks_kappa_at_eta_and_keeps_one_row_per_prior(x64):
    with pytest.raises(ValueError, match="kappa_at_eta must be in the open interval"):
        privacy_bounds(4.0, 1.0, 100, 1e-5, 1.0, 4, kappas=[0.1], kappa_at_eta=0.0)
    b = privacy_bounds(4.0, 1.0, 100, 1e-5, 1.0, 4, kappas=[0.1, 0.01], kappa_at_eta=0.01)
    assert [r.kappa for r in b.rero] == [0.1, 0.01] and b.kappa_at_eta == 0.01
    b = privacy_bounds(4.0, 1.0, 100, 1e-5, 1.0, 4, kappas=[0.1], kappa_at_eta=0.02)
    assert [r.kappa for r in b.rero] == [0.1, 0.02]


def test_a_batch_size_passed_for_q_is_named_as_such():
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\] \(the sampling rate: batch / dataset size\)"):
        dpsgd_epsilon(1.0, 256, 100, 1e-5)
