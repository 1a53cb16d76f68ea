"""RDP orders just above 1 that the working float dtype cannot tell from 1 (1 + 1e-9 in float32).

Every RDP formula divides by alpha - 1, and at alpha = 1 they gave 0 or NaN, not the KL divergence; an RDP of 0 then
converted to epsilon 0 (dpsgd_epsilon with orders=[1 + 1e-9, 2] returned 0.0 in float32: no privacy claim at all
could be weaker). Every public function that takes concrete orders now refuses them with a ValueError naming the
argument, the precision and the remedy; in float64 the same call is computed, and agrees with the order-2 answer
that order is the better of the two.
"""

import jax
import numpy as np
import pytest

from recon_jax.accounting import (calibrate_sigma, delta_from_rdp, dpsgd_epsilon, eps_from_rdp, interpolate_rdp,
                                  rdp_gaussian, rdp_subsampled_gaussian, rdp_vmf, rdp_vmf_multi)
from recon_jax.bounds.rero import rero_from_rdp_curve

NEAR = 1.0 + 1e-9  # > 1 in float64, 1.0 in float32


def _calls(orders):
    o = np.asarray(orders)
    return {
        "dpsgd_epsilon": lambda: dpsgd_epsilon(1.0, 0.01, 100, 1e-5, orders=o),
        "calibrate_sigma": lambda: calibrate_sigma(10.0, 0.01, 100, 1e-5, orders=o),
        "rdp_gaussian": lambda: rdp_gaussian(1.0, o),
        "rdp_subsampled_gaussian": lambda: rdp_subsampled_gaussian(0.01, 1.0, o),
        "eps_from_rdp": lambda: eps_from_rdp(o, 0.5 * o, 1e-5),
        "delta_from_rdp": lambda: delta_from_rdp(o, 0.5 * o, 1.0),
        "rdp_vmf": lambda: rdp_vmf(1.0, 3, o),
        "rdp_vmf_multi": lambda: rdp_vmf_multi([1.0, 1.0], [3, 3], o),
        "interpolate_rdp": lambda: interpolate_rdp([2, 3], np.array([1.0, 2.0]), o),
        "rero_from_rdp_curve": lambda: rero_from_rdp_curve(0.01, o, 0.5 * o),
    }


@pytest.mark.parametrize("name", sorted(_calls([2.0])))
def test_float32_refuses_an_order_that_rounds_to_one(name):
    assert jax.numpy.result_type(float) == jax.numpy.float32  # the suite's default precision
    with pytest.raises(ValueError, match=r"orders must be > 1 in float32 .*1\.000000001.* enable float64"):
        _calls([NEAR, 2.0])[name]()


@pytest.mark.parametrize("name", sorted(_calls([2.0])))
def test_the_smallest_float32_order_above_one_is_accepted_and_finite(name):
    """The remedy the message gives works: 1 + 2^-23 is a float32 order > 1, computed, and never below the float64
    answer at the same orders (every one of these quantities errs safe upward: RDP, epsilon, delta, sigma, ReRo);
    the original bug gave 0 here. Up to 1e-5 below: float32 rounding of the float64 value (measured <= 7e-7)."""
    smallest = float(np.nextafter(np.float32(1.0), np.float32(2.0)))
    out = np.asarray(_calls([smallest, 2.0])[name](), np.float64)
    with jax.enable_x64(True):
        ref = np.asarray(_calls([smallest, 2.0])[name](), np.float64)
    assert np.all(np.isfinite(out)) and np.all(out > 0), out
    assert np.all(out >= ref * (1 - 1e-5)), (out, ref)


def test_float64_computes_the_same_call(x64):
    """With x64 the order 1 + 1e-9 is representable and the call computes: epsilon is the order-2 one (an order that
    close to 1 pays log(1/delta) / (alpha - 1) in the conversion, so it is never the better one here)."""
    both = float(dpsgd_epsilon(1.0, 0.01, 100, 1e-5, orders=[NEAR, 2.0]))
    two = float(dpsgd_epsilon(1.0, 0.01, 100, 1e-5, orders=[2.0]))
    assert both == pytest.approx(two, rel=1e-12) and both > 0.0
    assert np.all(np.isfinite(np.asarray(rdp_subsampled_gaussian(0.01, 1.0, [NEAR, 2.0]))))


def test_traced_orders_still_get_nan_not_an_error():
    """Traced orders cannot be judged on the host: eps_from_rdp masks the one that rounds to 1 as NaN under jit."""
    out = jax.jit(lambda o: eps_from_rdp(o, 0.5 * o, 1e-5))(np.array([NEAR, 2.0], np.float32))
    assert np.isnan(float(out))
