import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

from recon_jax.accounting import calibrate_sigma_for_rero, rero_dpsgd_tradeoff


def _gdp_root(rero, kappa, steps):
    """Independent reference: root of Phi(Phi^-1(kappa) + sqrt(T)/sigma) = rero in sigma (SciPy brentq)."""
    f = lambda s: stats.norm.cdf(stats.norm.ppf(kappa) + np.sqrt(steps) / s) - rero  # noqa: E731
    return optimize.brentq(f, 1e-3, 1e5, xtol=1e-12, rtol=1e-14)


@pytest.mark.parametrize("rero,kappa,steps", [(0.05, 0.01, 100), (0.5, 0.1, 1), (0.9, 0.5, 1000), (0.02, 0.01, 10)])
def test_gdp_route_matches_root_find(x64, rero, kappa, steps):
    got = float(calibrate_sigma_for_rero(rero, kappa, 1.0, steps))
    # closed form vs brentq in float64: both accurate to ~1e-12 relative.
    assert got == pytest.approx(_gdp_root(rero, kappa, steps), rel=1e-9)


def test_gdp_route_jit_vmap_and_limits(x64):
    rero = jnp.array([0.05, 0.2, 0.5])
    kappa = jnp.array([[0.01], [0.1]])
    eager = calibrate_sigma_for_rero(rero, kappa, 1.0, 100)
    jitted = jax.jit(lambda r, k: calibrate_sigma_for_rero(r, k, 1.0, 100, route="gdp"))(rero, kappa)
    np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), rtol=1e-12)  # same float64 ops
    assert eager.shape == (2, 3)
    ref = np.array([[_gdp_root(r, k, 100) if r > k else np.inf for r in (0.05, 0.2, 0.5)] for k in (0.01, 0.1)])
    np.testing.assert_allclose(np.asarray(eager), ref, rtol=1e-9)
    assert np.isinf(float(calibrate_sigma_for_rero(0.01, 0.01, 1.0, 10)))  # the bound never goes below the prior
    # Under jit invalid input gives NaN.
    assert np.isnan(float(jax.jit(lambda r: calibrate_sigma_for_rero(r, 0.1, 1.0, 10, route="gdp"))(1.5)))
    # Differentiable: d sigma / d rero < 0 (a looser target needs less noise).
    assert float(jax.grad(lambda r: calibrate_sigma_for_rero(r, 0.01, 1.0, 100, route="gdp"))(0.05)) < 0


def test_tradeoff_route_matches_root_find_of_the_bound():
    rero, kappa, q, steps = 0.2, 0.1, 0.2, 20

    def f(s):
        return float(rero_dpsgd_tradeoff([kappa], s, q, steps)[0]) - rero

    ref = optimize.brentq(f, 0.2, 20.0, xtol=1e-4)
    got = float(calibrate_sigma_for_rero(rero, kappa, q, steps, rtol=1e-3))
    # The bisection returns the upper end of a bracket of relative width 1e-3 around the root.
    assert ref * (1 - 1e-3) <= got <= ref * (1 + 2e-3)
    assert float(rero_dpsgd_tradeoff([kappa], got, q, steps)[0]) <= rero
    # Subsampling amplifies: less noise needed than for full batches with the same number of steps.
    assert got < float(calibrate_sigma_for_rero(rero, kappa, 1.0, steps))


def test_tradeoff_route_at_full_batch_agrees_with_gdp():
    gdp = float(calibrate_sigma_for_rero(0.3, 0.1, 1.0, 10))
    pld = float(calibrate_sigma_for_rero(0.3, 0.1, 1.0, 10, route="tradeoff"))
    # The PLD trade-off curve is pessimistically discretised (interval 1e-3): within 2% of the exact GDP answer,
    # never below it.
    assert gdp * (1 - 1e-3) <= pld <= gdp * 1.02


@pytest.mark.parametrize("kwargs,match", [
    (dict(rero=1.0), "rero"), (dict(kappa=0.0), "kappa"), (dict(q=0.0), "q"), (dict(steps=0), "steps"),
    (dict(route="rdp"), "route"), (dict(q=0.5, route="gdp"), "q = 1"), (dict(rtol=0.0), "rtol")])
def test_invalid_inputs(kwargs, match):
    args = dict(rero=0.1, kappa=0.01, q=1.0, steps=10)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        calibrate_sigma_for_rero(**args)


@pytest.mark.parametrize("route,q", [("tradeoff", 0.5), ("gdp", 1.0), ("auto", 0.5)])
def test_infinite_steps_are_refused(route, q):
    """steps = inf overflowed the tradeoff route (int(round(inf))) and gave sigma = inf on the GDP route."""
    with pytest.raises(ValueError, match="steps must be finite and >= 1"):
        calibrate_sigma_for_rero(0.3, 0.1, q, float("inf"), route=route)


def test_tradeoff_route_refuses_fractional_steps(x64):
    """The tradeoff route composes whole steps: 10.4 was silently rounded to 10, while the GDP route takes it as
    real (sqrt(10.4) / mu)."""
    with pytest.raises(ValueError, match=r"steps must be whole numbers for route='tradeoff'"):
        calibrate_sigma_for_rero(0.3, 0.1, 0.5, 10.4, route="tradeoff")
    # The GDP route keeps real steps: the closed form at 10.4 (SciPy root), not at 10.
    got = float(calibrate_sigma_for_rero(0.3, 0.1, 1.0, 10.4, route="gdp"))
    assert got == pytest.approx(_gdp_root(0.3, 0.1, 10.4), rel=1e-9)  # a closed form: float64 rounding only


def test_tradeoff_route_never_trips_the_memory_refusal(monkeypatch):
    """A target so loose that the smallest sigma lies below the PLD's memory limit: the tradeoff route returns the
    smallest sigma it can certify (at the limit, within rtol), meeting the target, instead of raising (its bracket
    halves towards 1e-6, where the PLD would ask for TiB). The budget is lowered to 64 MiB so that the limit is
    0.0988 at the interval 1e-3 and the test stays small."""
    from recon_jax.accounting import _pld_memory

    monkeypatch.setattr(_pld_memory, "BUDGET_BYTES", 2**26)
    floor = _pld_memory.gaussian_min_sigma(1e-3)
    s = float(calibrate_sigma_for_rero(0.99, 0.01, 0.01, 1, rtol=1e-2))
    assert floor <= s <= floor * 1.01 ** 2
    assert float(rero_dpsgd_tradeoff([0.01], s, 0.01, 1)[0]) <= 0.99


def _gdp_ref(rero, kappa, steps):
    """The GDP closed form in float64 SciPy (independent of the code under test's float32 path)."""
    from scipy import special as sps

    return math.sqrt(steps) / (sps.ndtri(rero) - sps.ndtri(kappa))


@pytest.mark.parametrize("rero,kappa,steps", [(1 - 1e-9, 0.01, 100), (0.05, 1e-40, 100), (0.05, 1e-300, 100),
                                              (1 - 1e-9, 1 - 2e-9, 10), (1e-30, 1e-40, 1), (0.05, 0.01, 1e50)])
def test_gdp_route_float32_arguments_float32_cannot_hold(rero, kappa, steps):
    """Regression: in float32 (the default dtype) valid targets that float32 cannot hold (rero = 1 - 1e-9 rounds to
    1, kappa = 1e-40 flushes to 0, steps = 1e50 overflows) gave a silent NaN. Now computed in float64 and rounded up:
    never below the exact sigma (SciPy's closed form, cross-checked by brentq where it brackets), and the bound
    Phi(Phi^-1(kappa) + sqrt(T) / sigma) at it, in float64 SciPy (its complement where rero is near 1), meets the
    target."""
    from scipy import special as sps

    got = calibrate_sigma_for_rero(rero, kappa, 1.0, steps)
    assert got.dtype == np.float32
    want = _gdp_ref(rero, kappa, steps)
    if 1e-3 < want < 1e5 and rero < 0.5:  # brentq on Phi - rero resolves no better than 1e-16 near 1
        assert want == pytest.approx(_gdp_root(rero, kappa, steps), rel=1e-9)
    assert want <= float(got) <= want * (1 + 2.0**-22)  # rounded up: at most one float32 ulp (plus 4 float64 ulp)
    z = sps.ndtri(kappa) + math.sqrt(steps) / float(got)
    assert sps.ndtr(-z) >= 1 - rero if rero > 0.5 else sps.ndtr(z) <= rero


def test_gdp_route_float32_overflow_is_refused():
    """A sigma beyond float32's range (sqrt(1e80) / 1.3 ~ 7.7e39) is refused, naming steps, rather than returned as
    inf (which means "no sigma meets the target")."""
    with pytest.raises(ValueError, match="steps.*overflows float32|overflows float32.*steps"):
        calibrate_sigma_for_rero(0.05, 0.01, 1.0, 1e80)


def test_tradeoff_route_float32_tiny_kappa():
    """Regression: the tradeoff route started its bracket from the float32 GDP answer, NaN at kappa = 1e-40. The
    result (float64 host bisection, rounded up) meets the target by the PLD bound itself."""
    got = calibrate_sigma_for_rero(0.05, 1e-40, 0.5, 10, rtol=1e-2)
    assert got.dtype == np.float32 and np.isfinite(float(got))
    assert float(rero_dpsgd_tradeoff([1e-40], float(got), 0.5, 10)[0]) <= 0.05
