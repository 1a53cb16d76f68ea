"""The host search behind the PLD and trade-off calibrations (recon_jax.accounting._search.feasible_edge): the edge
it returns against closed-form edges, its contract (feasible, and one tolerance step further is not) on smooth,
steep, refusing and discontinuous values, and how many evaluations it spends."""

import math

import pytest

from recon_jax.accounting._search import feasible_edge

LIMITS = (1e-6, 1e8)


class Counted:
    """A value function that counts its calls and records the points it was asked for."""

    def __init__(self, fn):
        self.fn, self.xs = fn, []

    def __call__(self, x):
        self.xs.append(x)
        return self.fn(x)


def _bisection_probes(rtol):
    """Probes a plain log-bisection would spend after bracketing within a factor 2: log2(log 2 / log(1 + rtol))."""
    return math.ceil(math.log2(math.log(2.0) / math.log1p(rtol)))


@pytest.mark.parametrize("power", [0.5, 1.0, 2.0, 6.0])
@pytest.mark.parametrize("increasing", [False, True])
def test_power_law_edge_matches_the_closed_form(power, increasing):
    """value = 3 x^(+-power): the edge is (target/3)^(+-1/power); found within rtol on the feasible side."""
    sign = 1.0 if increasing else -1.0
    target, rtol = 0.7, 1e-6
    value = Counted(lambda x: 3.0 * x ** (sign * power))
    edge = (target / 3.0) ** (sign / power)
    found = feasible_edge(value, target, 1.0, increasing=increasing, limits=LIMITS, rtol=rtol)
    assert found.kind == "edge"
    assert value.fn(found.x) <= target
    if increasing:
        assert edge * (1 - rtol) <= found.x <= edge
    else:
        assert edge <= found.x <= edge * (1 + rtol)
    # A power law is a line in log-log: the secant lands on it at once.
    assert len(value.xs) <= 8


def _assert_edge_contract(found, fn, target, rtol, increasing):
    assert found.kind == "edge"
    assert fn(found.x) is not None and fn(found.x) <= target
    beyond = found.x * (1 + rtol) if increasing else found.x / (1 + rtol)
    v = fn(beyond)
    assert v is None or v > target


@pytest.mark.parametrize("target", [1e-3, 0.5, 20.0])
def test_steep_value_meets_the_contract_with_fewer_probes_than_bisection(target):
    """A value far from a power law (eps = exp(1/x^2) - 1, convex and steep in log-log): the edge is feasible, the
    next point towards infeasibility is not, and the search spends fewer probes than bisection would."""
    rtol = 1e-4
    fn = Counted(lambda x: math.expm1(min(1.0 / x**2, 700.0)))
    edge = 1.0 / math.sqrt(math.log1p(target))  # the closed form: exp(1/x^2) - 1 = target
    found = feasible_edge(fn, target, 3.0, increasing=False, limits=LIMITS, rtol=rtol)
    _assert_edge_contract(found, fn.fn, target, rtol, increasing=False)
    assert edge <= found.x <= edge * (1 + rtol)
    assert len(fn.xs) - _walk_length(fn.xs) < _bisection_probes(rtol)


def _walk_length(xs):
    """How many of the first probes were the factor-2 bracket walk (consecutive ratios of exactly 2 or 1/2)."""
    n = 1
    while n < len(xs) and math.isclose(max(xs[n], xs[n - 1]) / min(xs[n], xs[n - 1]), 2.0, rel_tol=1e-12):
        n += 1
    return n


def test_refused_values_count_as_infeasible():
    """Below x = 0.3 the value cannot be evaluated (None), though it would meet the target there: the edge is the
    refusal boundary, found to rtol by bisection (no values to interpolate across it)."""
    rtol = 1e-3
    fn = Counted(lambda x: None if x < 0.3 else 1.0 / x)
    found = feasible_edge(fn, 100.0, 1.0, increasing=False, limits=LIMITS, rtol=rtol)
    _assert_edge_contract(found, fn.fn, 100.0, rtol, increasing=False)
    assert 0.3 <= found.x <= 0.3 * (1 + rtol)


def test_discontinuous_value_meets_the_contract():
    """A staircase (the value jumps at x = 2^(k/3)): interpolation is useless across a jump; the bisection safeguard
    keeps the probes within a small multiple of bisection's."""
    rtol = 1e-5
    fn = Counted(lambda x: 10.0 ** -math.floor(3.0 * math.log2(x)))
    target = 10.0 ** -4.5  # met from the step at x = 2^(5/3) on
    found = feasible_edge(fn, target, 1.0, increasing=False, limits=LIMITS, rtol=rtol)
    _assert_edge_contract(found, fn.fn, target, rtol, increasing=False)
    assert 2 ** (5 / 3) <= found.x <= 2 ** (5 / 3) * (1 + rtol)
    assert len(fn.xs) - _walk_length(fn.xs) <= 3 * _bisection_probes(rtol)


def test_nothing_feasible_and_feasible_to_the_limit():
    never = feasible_edge(lambda x: 5.0, 1.0, 1.0, increasing=False, limits=(1e-3, 1e3), rtol=1e-3)
    assert never.kind == "none" and math.isnan(never.x)
    always = Counted(lambda x: 0.5)
    found = feasible_edge(always, 1.0, 1.0, increasing=False, limits=(1e-3, 1e3), rtol=1e-3)
    assert found.kind == "limit" and 1e-3 <= found.x < 2e-3
    assert min(always.xs) >= 1e-3  # no probe below the lowest point allowed
    up = feasible_edge(lambda x: 0.5, 1.0, 1.0, increasing=True, limits=(1e-3, 1e3), rtol=1e-3)
    assert up.kind == "limit" and 5e2 < up.x <= 1e3


@pytest.mark.parametrize("bad", [{"rtol": 0.0}, {"rtol": math.nan}, {"target": 0.0}, {"target": -1.0},
                                 {"start": 0.0}, {"start": math.inf}, {"start": math.nan}])
def test_bad_arguments_name_themselves(bad):
    kwargs = {"rtol": 1e-3, "target": 1.0, "start": 1.0} | bad
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        feasible_edge(lambda x: x, kwargs["target"], kwargs["start"], increasing=True, limits=LIMITS,
                      rtol=kwargs["rtol"])


def test_a_nan_value_stops_the_search():
    """NaN is not a verdict on feasibility: the search stops with a message instead of counting it as infeasible."""
    with pytest.raises(ValueError, match="NaN at 0.5"):
        feasible_edge(lambda x: math.nan if x < 0.7 else 1.0 / x, 1.5, 1.0, increasing=False, limits=LIMITS,
                      rtol=1e-3)
