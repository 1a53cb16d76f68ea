"""recon_jax._validation.guard: the one call that checks concrete input and returns the NaN mask of traced input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax._validation import HALF_OPEN_UNIT, NONNEGATIVE, OPEN_UNIT, POSITIVE, at_least, guard, nan_if


def test_concrete_invalid_values_raise_check_messages_in_order():
    with pytest.raises(ValueError, match=r"^sigma must be > 0; got -1.0$"):
        guard(("sigma", -1.0, POSITIVE), ("eps", -1.0, NONNEGATIVE))  # the first spec is reported
    with pytest.raises(ValueError, match=r"^eps must be >= 0; got 1 invalid value\(s\), e.g. \[nan\]$"):
        guard(("sigma", 1.0, POSITIVE), ("eps", [0.0, np.nan], NONNEGATIVE))
    with pytest.raises(ValueError, match="steps must be a number or array of numbers >= 1"):
        guard(("steps", "ten", at_least(1)))


def test_shapes_that_do_not_broadcast_raise_after_the_value_checks():
    with pytest.raises(ValueError, match=r"the arguments' shapes \[\(2,\), \(3,\)\] do not broadcast together"):
        guard(("q", np.full(2, 0.5), HALF_OPEN_UNIT), ("sigma", np.ones(3), POSITIVE))
    with pytest.raises(ValueError, match="q must be in"):  # a bad value is reported before a bad shape
        guard(("q", np.full(2, 2.0), HALF_OPEN_UNIT), ("sigma", np.ones(3), POSITIVE))


def test_mask_is_the_broadcast_union_of_the_ranges():
    bad = guard(("q", np.array([0.5, 1.5, np.nan]), HALF_OPEN_UNIT), ("sigma", np.array([[1.0], [0.0]]), POSITIVE),
                validate=False)
    assert bad.dtype == jnp.bool_ and bad.shape == (2, 3)
    np.testing.assert_array_equal(bad, [[False, True, True], [True, True, True]])
    assert not bool(guard(("sigma", 2.0, POSITIVE)))


def test_under_jit_nothing_raises_and_the_mask_gives_nan():
    def f(sigma, eps):
        return nan_if(guard(("sigma", sigma, POSITIVE), ("eps", eps, NONNEGATIVE)), eps / sigma)

    out = jax.jit(f)(jnp.array([2.0, -1.0, 2.0, jnp.nan]), jnp.array([1.0, 1.0, -1.0, 1.0]))
    np.testing.assert_array_equal(np.isnan(out), [False, True, True, True])
    assert float(out[0]) == 0.5


def test_cast_judges_the_values_in_the_working_precision():
    tiny = ("kappa", 1e-300, OPEN_UNIT)  # valid in float64, 0 in float32
    assert not bool(guard(tiny))  # default: as given (float64 on the host)
    assert bool(guard(tiny, cast=np.float32))  # a dtype
    assert bool(guard(tiny, cast=(1e-300, np.float32(1.0))))  # the dtype as_float gives the tuple
    with jax.enable_x64(True):
        assert not bool(guard(tiny, cast=(1e-300, 1.0)))  # float64 under x64


def test_cast_tuple_that_cannot_be_cast_falls_back_to_the_values_as_given():
    # "abc" is refused by a later check or cast of the caller; the mask of what was checked is still returned
    assert not bool(guard(("kappa", 1e-300, OPEN_UNIT), cast=(1e-300, "abc")))
