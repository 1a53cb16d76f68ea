"""DP-SGD epsilon and calibration against dp_accounting (RDP and PLD), and the PLD trade-off curve."""

import math
import time

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS
from scipy import stats

from recon_jax.accounting import DEFAULT_ORDERS, calibrate_sigma, dpsgd_epsilon, pld_tradeoff, rero_dpsgd_tradeoff

DP_ORDERS = np.asarray(DEFAULT_RDP_ORDERS, np.float64)


def _dp_rdp_eps(sigma, q, steps, delta, orders):
    acc = dp_accounting.rdp.RdpAccountant(orders=list(orders))
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    return acc.get_epsilon(delta)


def test_default_orders_contain_dp_accounting_grid():
    usual = np.concatenate([np.round(np.arange(1.1, 10.95, 0.1), 1), np.arange(12, 64)])
    assert np.all(np.isin(usual, DEFAULT_ORDERS))


# (sigma, q, steps, delta): includes Biswas's setting and q = 0.3, sigma = 0.6 (dp_accounting's fractional
# series fails there and drops those orders).
CASES = [(1.23, 128 / 60000, 1407, 1 / 60000), (0.6, 0.3, 10, 1e-5), (4.0, 0.01, 10000, 1e-6),
         (0.8, 1.0, 5, 1e-5), (20.0, 1e-4, 100000, 1e-5)]


def test_rdp_epsilon_never_above_dp_accounting(x64):
    sig, q, steps, delta = (np.array(v) for v in zip(*CASES))
    ours = np.asarray(dpsgd_epsilon(sig, q, steps, delta, orders=DP_ORDERS))
    for (s, qq, t, d), e in zip(CASES, ours):
        ref = _dp_rdp_eps(s, qq, t, d, DP_ORDERS)
        # Same orders: ours is exact at integer orders and tighter at fractional ones. The 1e-9 slack covers
        # float64 rounding of two independent log-space sums.
        assert e <= ref * (1 + 1e-9), (s, qq, t, d, e, ref)
        assert e >= ref * (1 - 1e-6), (s, qq, t, d, e, ref)  # never understated (measured within 2e-9 here)


def test_pld_bridge_is_tighter_than_rdp(x64):
    s, q, t, d = 1.0, 0.01, 1000, 1e-5
    e_pld = float(dpsgd_epsilon(s, q, t, d, accountant="pld", value_discretization_interval=1e-3))
    e_rdp = float(dpsgd_epsilon(s, q, t, d))
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, t))
    assert e_pld == pytest.approx(acc.get_epsilon(d), rel=1e-12)
    assert e_pld < e_rdp


def _dp_pld_eps(sigma, q, steps, delta, vdi):
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=vdi)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    return acc.get_epsilon(delta)


def test_pld_huge_and_infinite_sigma_give_zero(x64):
    """sigma = inf raised 'cannot convert float NaN to integer', 1e300 an OverflowError (sigma^2 in dp_accounting).
    Epsilon is exactly 0 where the composition's total variation (<= steps q erf(1 / (2 sqrt(2) sigma))) is <= delta:
    identical outputs for sigma = inf; dp_accounting itself returns 0 at 1e8 (the last sigma it handles, 1e154)."""
    got = np.asarray(dpsgd_epsilon(np.array([np.inf, 1e300, 1e154, 1e8]), 0.01, 1000, 1e-5, "pld"))
    assert got.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert _dp_pld_eps(1e8, 0.01, 1000, 1e-5, 1e-4) == 0.0 and _dp_pld_eps(1e154, 0.01, 1000, 1e-5, 1e-4) == 0.0
    # Beside the shortcut (TV bound above delta) the bridge still equals dp_accounting.
    assert float(dpsgd_epsilon(1e3, 1.0, 1, 1e-5, "pld")) == pytest.approx(_dp_pld_eps(1e3, 1.0, 1, 1e-5, 1e-4),
                                                                         rel=1e-12)  # same computation


@pytest.mark.parametrize("sigma", [1e-3, 1e-4, 0.03])
def test_pld_refuses_tiny_sigma_before_allocating(sigma):
    """sigma = 1e-3 tried to allocate 38 GiB, 1e-4 3.65 TiB (MemoryError): below the one-step limit the PLD route
    refuses at once, naming sigma, the limit and the RDP accountant."""
    with pytest.raises(ValueError, match=r"sigma must be >= 0\.0439 for accountant='pld'.*accountant='rdp'"):
        dpsgd_epsilon(sigma, 0.01, 1000, 1e-5, "pld")


def test_pld_refuses_infinite_steps():
    with pytest.raises(ValueError, match="steps must be finite whole numbers"):
        dpsgd_epsilon(1.0, 0.01, np.inf, 1e-5, "pld")


def test_pld_refuses_a_composition_over_budget(monkeypatch):
    """Above the one-step limit, a composition whose FFT would exceed the budget is refused before it allocates
    (checked with the budget lowered to 64 MiB, so that the test stays small)."""
    from recon_jax.accounting import _pld_memory

    monkeypatch.setattr(_pld_memory, "BUDGET_BYTES", 2**26)
    with pytest.raises(ValueError, match=r"sigma = 0\.12 is too small for accountant='pld' at q = 0\.01, steps = 1000"):
        dpsgd_epsilon(0.12, 0.01, 1000, 1e-5, "pld", value_discretization_interval=1e-3)
    dpsgd_epsilon(0.12, 0.01, 3, 1e-5, "pld", value_discretization_interval=1e-3)  # few steps fit


def _forbid_pld_builders(monkeypatch, mechanism=True):
    """Make dp_accounting's PLD builders fail if called (and its Gaussian privacy loss too, where ``mechanism``): a
    refusal must come before any of them, so that a test can never allocate what the guard refuses."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.pld import privacy_loss_mechanism as plm

    def fail(*args, **kwargs):
        raise AssertionError("dp_accounting was asked to build a privacy-loss distribution")

    monkeypatch.setattr(pld_pmf, "create_pmf_pessimistic_connect_dots_fixed_gap", fail)
    monkeypatch.setattr(pld_lib, "from_gaussian_mechanism", fail)
    monkeypatch.setattr(pld_lib.PrivacyLossDistribution, "__init__", fail)
    monkeypatch.setattr(pld_lib.PrivacyLossDistribution, "self_compose", fail)
    if mechanism:
        monkeypatch.setattr(plm.GaussianPrivacyLoss, "__init__", fail)


@pytest.mark.parametrize("sigma", [1e-2, 1e-3, 1e-6])
def test_pld_tradeoff_refuses_tiny_sigma_before_building(monkeypatch, sigma):
    """pld_tradeoff and rero_dpsgd_tradeoff had no memory guard: sigma = 1e-3 at their default interval 1e-3 asked
    for a one-step grid of 1e9 points (8 GB for its divergences alone, then dp_accounting's PMF and FFT). Below the
    one-step limit they now refuse in closed form, naming sigma, the limit and the alternatives, before dp_accounting
    builds anything (its builders fail here if called): in well under 2 s."""
    _forbid_pld_builders(monkeypatch)
    for call in (lambda: pld_tradeoff(sigma, 0.01, 100, [0.1]), lambda: rero_dpsgd_tradeoff([0.1], sigma, 0.01, 100)):
        start = time.perf_counter()
        with pytest.raises(ValueError, match=r"sigma must be >= 0\.0112 for pld_tradeoff with value_discretization_"
                                             r"interval=0\.001 .*more than 2 GiB.*rero_from_rdp_curve"):
            call()
        assert time.perf_counter() - start < 2.0


def test_pld_tradeoff_refuses_a_composition_over_budget(x64, monkeypatch):
    """Above the one-step limit (one step of 2e4 points), 1e8 steps would need a ~360 GiB FFT: refused from the
    step's own probabilities, before dp_accounting builds its PMFs (which fail here if called). A composition that
    fits is unchanged: the dpsgd_epsilon bridge still equals dp_accounting's accountant exactly."""
    alphas = np.array([1e-3, 0.1])
    assert float(dpsgd_epsilon(1.0, 1.0, 100, 1e-5, "pld", value_discretization_interval=1e-3)) == \
        _dp_pld_eps(1.0, 1.0, 100, 1e-5, 1e-3)  # the same computation, bit for bit
    fits = pld_tradeoff(1.0, 1.0, 100, alphas)
    _forbid_pld_builders(monkeypatch, mechanism=False)
    for call in (lambda: pld_tradeoff(1.0, 1.0, 10**8, alphas), lambda: rero_dpsgd_tradeoff(alphas, 1.0, 1.0, 10**8)):
        with pytest.raises(ValueError, match=r"sigma = 1 is too small for pld_tradeoff at q = 1, steps = 100000000 "
                                             r"\(value_discretization_interval=0\.001\): composing the steps needs "
                                             r"about [0-9.]+ GiB \(limit 2 GiB\); use a larger sigma"):
            call()
    with pytest.raises(ValueError, match=r"sigma = 1 is too small for accountant='pld' at q = 1, steps = 100000000"):
        dpsgd_epsilon(1.0, 1.0, 10**8, 1e-5, "pld", value_discretization_interval=1e-3)
    monkeypatch.undo()
    np.testing.assert_array_equal(pld_tradeoff(1.0, 1.0, 100, alphas), fits)  # deterministic: same value again


@pytest.mark.parametrize("sigma,q,steps,vdi", [(1.0, 0.01, 1000, 1e-3), (0.5, 0.3, 10, 1e-3), (3.0, 1.0, 100, 1e-4),
                                               (0.2, 1.0, 2, 1e-3), (0.3, 0.001, 100000, 1e-3),
                                               (0.03, 1.0, 100, 1e-2)])
def test_pld_memory_guard_sizes_the_composition_as_dp_accounting(sigma, q, steps, vdi):
    """The guard reads no private field of dp_accounting's objects: it sizes the FFT from its own connect-the-dots
    probabilities (equal to those of dp_accounting's PMF up to the vectorised divergences' rounding, 1e-11) with
    dp_accounting's Chernoff truncation (the same bounds), and its closed-form grid bound holds. Here, and only
    here, the test reads dp_accounting's fields to compare."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from scipy import fft

    from recon_jax.accounting import _pld_memory
    from recon_jax.accounting.dpsgd import _gaussian_deltas

    ref = pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=vdi)
    points, top = _pld_memory.gaussian_grid(sigma, q, vdi)
    ffts = []
    for (lo, hi, deltas), pmf in zip(_gaussian_deltas(sigma, q, vdi), [ref._pmf_remove, ref._pmf_add]):
        dense = pmf.to_dense_pmf()
        probs = _pld_memory.connect_dots_probs(deltas, vdi)
        assert lo == dense._lower_loss and hi - lo + 1 == probs.size == dense._probs.size <= points and hi <= top
        np.testing.assert_allclose(probs, dense._probs, rtol=0, atol=1e-11)
        lo_t, hi_t = common.compute_self_convolve_bounds(dense._probs, steps, 1e-15)
        assert _pld_memory.composed_support(_pld_memory.summarise(lo, probs), steps) == (lo_t, hi_t)
        ffts.append(fft.next_fast_len(max(hi_t - lo_t + 1, probs.size)))
    directions = [_pld_memory.summarise(lo, _pld_memory.connect_dots_probs(d, vdi))
                  for lo, _, d in _gaussian_deltas(sigma, q, vdi)]
    size = _pld_memory.composed_size(directions, steps)
    assert size.fft_points == max(ffts)  # the FFT that dp_accounting's self_compose will take
    bound = _pld_memory.trivial_size(points, top, steps, len(directions))
    assert bound.fft_points >= size.fft_points and bound.kept_points >= size.kept_points and bound.top >= size.top


def test_calibrate_sigma_pld_never_trips_the_refusal(x64, monkeypatch):
    """A target so loose that the smallest sigma lies below the PLD route's limit: calibrate_sigma returns the
    smallest sigma it can certify (at the limit, within rtol), meeting the target under dp_accounting, instead of
    raising (its bracket halves towards 1e-4)."""
    from recon_jax.accounting import _pld_memory

    monkeypatch.setattr(_pld_memory, "BUDGET_BYTES", 2**26)  # limit 0.0988 at interval 1e-3: a small test
    floor = _pld_memory.gaussian_min_sigma(1e-3)
    s = float(calibrate_sigma(1e4, 1.0, 1, 1e-5, "pld", value_discretization_interval=1e-3, rtol=1e-2))
    assert floor <= s <= floor * 1.01 ** 2
    assert _dp_pld_eps(s, 1.0, 1, 1e-5, 1e-3) <= 1e4


def test_calibrate_sigma(x64):
    targets = np.array([0.5, 2.0, 8.0])
    sig = np.asarray(calibrate_sigma(targets, 0.01, 2000, 1e-5))
    e_at = np.asarray(dpsgd_epsilon(sig, 0.01, 2000, 1e-5))
    e_below = np.asarray(dpsgd_epsilon(sig * (1 - 1e-6), 0.01, 2000, 1e-5))
    # Feasible (up to float64 rounding between the jitted search and this eager call) and tight to 1e-6.
    assert np.all(e_at <= targets * (1 + 1e-12)) and np.all(e_below > targets)
    with pytest.raises(ValueError, match="eps"):
        calibrate_sigma(0.0, 0.01, 10, 1e-5)


def test_biswas_table_iv_gaussian_row(x64):
    """Biswas et al. Table IV: sigma -> eps for q = 128/60000, 3 epochs = ceil(3/q) steps, delta = 1/60000."""
    paper = {1.23: 0.49, 0.660: 2.48, 0.544: 4.59, 0.461: 7.97, 0.435: 9.72, 0.420: 10.9, 0.367: 17.25,
             0.321: 27.38, 0.287: 38.84, 0.282: 41.02, 0.245: 64.98, 0.229: 79.68, 0.214: 95.44, 0.204: 112.28,
             0.174: 173.0}
    q = 128 / 60000
    sig = np.array(list(paper))
    ours = np.asarray(dpsgd_epsilon(sig, q, int(np.ceil(3 / q)), 1 / 60000))
    np.testing.assert_allclose(ours, list(paper.values()), rtol=0.02)


def test_tradeoff_matches_gdp_without_subsampling(x64):
    # q = 1, T steps: exactly mu-GDP with mu = sqrt(T)/sigma, f(a) = Phi(Phi^{-1}(1 - a) - mu).
    sigma, steps = 2.0, 4
    alphas = np.array([1e-3, 0.01, 0.1, 0.5])
    f = pld_tradeoff(sigma, 1.0, steps, alphas, value_discretization_interval=1e-3)
    exact = stats.norm.cdf(stats.norm.ppf(1 - alphas) - np.sqrt(steps) / sigma)
    assert np.all(f <= exact + 1e-12)  # a sound (lower) bound on the trade-off curve
    np.testing.assert_allclose(f, exact, atol=1e-4)  # and close (PLD discretisation 1e-3)
    gamma = rero_dpsgd_tradeoff(alphas, sigma, 1.0, steps, value_discretization_interval=1e-3)
    np.testing.assert_allclose(gamma, 1 - f, rtol=1e-12)


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 100), (0.7, 0.05, 30), (3.0, 0.2, 10)])
def test_tradeoff_sound_and_tight_against_riskcal(sigma, q, steps):
    # riskcal (Kulynych et al. 2024, Alg. 1) computes the trade-off of the same connect-the-dots PLD exactly; ours is
    # the supremum of the profile's (eps, delta(eps)) lines, a lower bound of it: never above riskcal's (up to
    # float rounding), within 1e-5 of it, and non-increasing.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from riskcal.dpsgd import get_beta_for_dpsgd
    alphas = np.concatenate([np.geomspace(1e-7, 1e-2, 20, endpoint=False), np.linspace(1e-2, 1.0, 60)])
    ours = pld_tradeoff(sigma, q, steps, alphas, value_discretization_interval=1e-3)
    ref = np.asarray(get_beta_for_dpsgd(sigma, q, steps, alphas, grid_step=1e-3))
    assert np.all(ours <= ref + 1e-12)
    np.testing.assert_allclose(ours, ref, atol=1e-5)
    assert np.all(np.diff(ours) <= 0)


@pytest.mark.parametrize("sigma,q", [(1.0, 0.1), (0.8, 0.3)])
def test_tradeoff_of_one_subsampled_step_against_its_exact_curve(x64, sigma, q):
    """One Poisson-subsampled Gaussian step in closed form: P0 = N(0, sigma^2) (trained without the target), P1 =
    (1 - q) N(0, sigma^2) + q N(1, sigma^2) (with it). Their likelihood ratio grows with x, so threshold tests are
    optimal and T(P0, P1)(a) = P1(X <= t) at P0(X > t) = a (Neyman-Pearson; scipy's normal cdf). The ReRo bound
    needs exactly this direction (success under P1 against the prior's kappa under P0). The symmetric curve never
    exceeds it and equals it, up to the discretisation, where ReRo reads it (small alpha); near alpha = 1/2 and
    above it is the lower of the two directions, which the exact T(P1, P0) shows."""
    alphas = np.array([1e-5, 1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.3])
    t = stats.norm.isf(alphas) * sigma  # P0(X > t) = alpha
    exact_01 = (1 - q) * stats.norm.cdf(t / sigma) + q * stats.norm.cdf((t - 1) / sigma)
    ours = pld_tradeoff(sigma, q, 1, alphas, value_discretization_interval=1e-4)
    assert np.all(ours <= exact_01 + 1e-12)
    small = alphas <= 0.1  # at q = 0.3, alpha = 0.3 is already where the symmetric curve dips below (by 6e-4)
    np.testing.assert_allclose(ours[small], exact_01[small], atol=2e-5)
    # At alpha = 0.8 the two directions differ: the symmetric curve is the other direction's (lower) value there.
    a = np.array([0.8])
    t0 = stats.norm.isf(a) * sigma
    exact_01 = (1 - q) * stats.norm.cdf(t0 / sigma) + q * stats.norm.cdf((t0 - 1) / sigma)
    u = np.linspace(-15.0, 15.0, 600001) * sigma  # T(P1, P0)(a) = P0(X > u) at P1(X <= u) = a, on a fine grid
    exact_10 = np.interp(a, (1 - q) * stats.norm.cdf(u / sigma) + q * stats.norm.cdf((u - 1) / sigma),
                         stats.norm.sf(u / sigma))
    assert exact_10[0] < exact_01[0]
    np.testing.assert_allclose(pld_tradeoff(sigma, q, 1, a, value_discretization_interval=1e-4), exact_10, atol=1e-4)


def test_tradeoff_stable_at_a_fine_grid_and_exact_grid_is_tighter(x64):
    # A 1e-4 discretisation stays a sound bound (q = 1: exact GDP curve above it) and improves on 1e-3; the
    # supremum over every loss value is at least the one over the old 2,000-point eps grid.
    alphas = np.array([1e-6, 1e-4, 1e-2, 0.1, 0.5])
    exact = stats.norm.cdf(stats.norm.ppf(1 - alphas) - np.sqrt(9) / 2.0)
    fine = pld_tradeoff(2.0, 1.0, 9, alphas, value_discretization_interval=1e-4)
    coarse = pld_tradeoff(2.0, 1.0, 9, alphas, value_discretization_interval=1e-3)
    assert np.all(fine <= exact + 1e-12) and np.all(coarse <= fine + 1e-12)
    np.testing.assert_allclose(fine, exact, atol=2e-5)
    grid = np.concatenate([np.linspace(0.0, 10.0, 1500), np.linspace(10.0, 60.0, 501)[1:]])
    on_grid = pld_tradeoff(2.0, 1.0, 9, alphas, value_discretization_interval=1e-3, eps_grid=grid)
    assert np.all(on_grid <= coarse + 1e-15)


@pytest.mark.parametrize("sigma,q", [(1.0, 0.01), (0.5, 0.3), (3.0, 1.0)])
def test_vectorised_gaussian_pld_equals_dp_accounting(sigma, q):
    # The hockey-stick divergences are computed in closed form (vectorised) instead of dp_accounting's per-epsilon
    # inverse privacy loss; both must give the same divergences (1e-15 absolute: float64 rounding of O(1) terms)
    # and the same connect-the-dots PMFs (1e-11: the PMF takes second differences of the divergences / grid).
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.pld import privacy_loss_mechanism as plm

    from recon_jax.accounting.dpsgd import _dense_pmf, _gaussian_pld, _subsampled_gaussian_delta

    for adjacency in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD):
        loss = plm.GaussianPrivacyLoss(sigma, sampling_prob=q, adjacency_type=adjacency)
        b = loss.connect_dots_bounds()
        eps = np.linspace(b.epsilon_lower, b.epsilon_upper, 400)
        ours = _subsampled_gaussian_delta(sigma, q, adjacency == plm.AdjacencyType.REMOVE, eps)
        np.testing.assert_allclose(ours, loss.get_delta_for_epsilon(eps), rtol=0, atol=1e-15)
    ref = pld_lib.from_gaussian_mechanism(standard_deviation=sigma, sampling_prob=q, value_discretization_interval=1e-3,
                                          use_connect_dots=True)
    ours = _gaussian_pld(sigma, q, 1e-3)
    for name in ("_pmf_remove", "_pmf_add"):
        (lr, pr, ir), (lo, po, io) = _dense_pmf(getattr(ref, name)), _dense_pmf(getattr(ours, name))
        np.testing.assert_allclose(lo, lr, rtol=0, atol=1e-12)
        np.testing.assert_allclose(po, pr, rtol=0, atol=1e-11)
        np.testing.assert_allclose(io, ir, rtol=1e-12, atol=1e-30)


@pytest.mark.parametrize("sigma,q", [(0.02, 1.0), (0.03, 0.01), (0.02, 0.5)])
def test_vectorised_divergences_where_e_to_the_eps_overflows(sigma, q):
    """Below sigma ~ 0.035 the loss grid reaches |eps| > 709, where e^eps overflowed: x* became inf and the remove
    divergence 0 where it is ~1 (an unsound PMF for pld_tradeoff). Now equal to dp_accounting's over its whole
    connect-the-dots range (1e-15: float64 rounding of O(1) terms), without overflow warnings."""
    import warnings

    from dp_accounting.pld import privacy_loss_mechanism as plm

    from recon_jax.accounting.dpsgd import _subsampled_gaussian_delta

    for adjacency in [plm.AdjacencyType.REMOVE] + ([plm.AdjacencyType.ADD] if q < 1 else []):
        loss = plm.GaussianPrivacyLoss(sigma, sampling_prob=q, adjacency_type=adjacency)
        b = loss.connect_dots_bounds()
        assert max(abs(b.epsilon_lower), abs(b.epsilon_upper)) > 709  # the case at stake
        eps = np.linspace(b.epsilon_lower, b.epsilon_upper, 2001)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            ours = _subsampled_gaussian_delta(sigma, q, adjacency == plm.AdjacencyType.REMOVE, eps)
        np.testing.assert_allclose(ours, loss.get_delta_for_epsilon(eps), rtol=0, atol=1e-15)


def test_tradeoff_finite_where_the_loss_range_passes_709():
    """sigma = 0.03 without subsampling: the PLD's losses span +-880, where e^eps overflowed and the curve came out
    NaN (so did rero_dpsgd_tradeoff at sigma = 1, q = 1, 1000 steps). Now finite, never above the exact mu-GDP curve
    (mu = 1/sigma; f(a) = Phi(Phi^-1(1 - a) - mu), from SciPy), and close to it where the tests that matter sit
    (f ~ 1 at alpha 1e-290: the 1e-7 gap is the 0.01 discretisation)."""
    import warnings

    a = np.array([0.0, 1e-290, 1e-280, 1e-5, 0.01, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        f = pld_tradeoff(0.03, 1.0, 1, a, value_discretization_interval=1e-2)
    exact = stats.norm.cdf(stats.norm.isf(a) - 1 / 0.03)
    assert np.all(np.isfinite(f))
    assert np.all(f <= exact + 1e-12)
    np.testing.assert_allclose(f[1:3], exact[1:3], rtol=0, atol=1e-7)


def test_profile_in_logs_equals_the_naive_sum():
    """The privacy profile over a loss range past 709 (computed in logs there) against the definition, term by term:
    delta(eps) = inf_mass + sum_{l > eps} p (1 - e^(eps - l)), each term finite (l > eps)."""
    from recon_jax.accounting._tradeoff import profile_at_losses

    rng = np.random.default_rng(3)
    losses = np.linspace(-900.0, 900.0, 1801)
    probs = rng.dirichlet(np.ones(losses.size)) * (1 - 1e-6)
    eps = np.array([0.0, 0.5, 10.0, 300.0, 699.5, 899.0, 950.0])
    naive = [1e-6 + sum(p * -np.expm1(e - l) for l, p in zip(losses, probs) if l > e) for e in eps]
    np.testing.assert_allclose(profile_at_losses(losses, probs, 1e-6, eps), naive, rtol=1e-12, atol=1e-17)


def test_tradeoff_subsampling_helps(x64):
    a = np.array([0.01])
    sub = rero_dpsgd_tradeoff(a, 1.0, 0.01, 100, value_discretization_interval=1e-3)
    full = rero_dpsgd_tradeoff(a, 1.0, 1.0, 100, value_discretization_interval=1e-3)
    assert 0.01 <= sub[0] < full[0] <= 1.0


def test_dpsgd_validation():
    with pytest.raises(ValueError, match="accountant"):
        dpsgd_epsilon(1.0, 0.1, 10, 1e-5, accountant="moments")
    with pytest.raises(ValueError, match="steps"):
        dpsgd_epsilon(1.0, 0.1, 0, 1e-5)
    with pytest.raises(ValueError, match="q"):
        dpsgd_epsilon(1.0, 0.0, 10, 1e-5)


def test_calibrate_sigma_pld_matches_dp_accounting_root(x64, monkeypatch):
    """accountant="pld" agrees with a root-find (SciPy brentq) on dp_accounting's PLD epsilon within 0.5%, and its
    search (recon_jax.accounting._search) spends at most 7 PLD evaluations per target where a log-bisection from the
    same factor-2 bracket spends 2 + 13 (rtol 1e-4)."""
    import dp_accounting
    from scipy import optimize

    from recon_jax.accounting import dpsgd as dpsgd_module

    calls = []
    counted = dpsgd_module._pld_epsilon
    monkeypatch.setattr(dpsgd_module, "_pld_epsilon", lambda *a: calls.append(a) or counted(*a))
    q, steps, delta, vdi = 0.01, 1000, 1e-5, 1e-3

    def pld_eps(sigma):
        acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=vdi)
        acc.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
        return acc.get_epsilon(delta)

    targets = np.array([1.0, 3.0])
    got = np.asarray(calibrate_sigma(targets, q, steps, delta, accountant="pld", value_discretization_interval=vdi))
    rdp = np.asarray(calibrate_sigma(targets, q, steps, delta))
    for t, s, s_rdp in zip(targets, got, rdp):
        ref = optimize.brentq(lambda x: pld_eps(x) - t, 0.3, 20.0, xtol=1e-6)
        assert s == pytest.approx(ref, rel=5e-3)
        assert pld_eps(float(s)) <= t  # the returned sigma meets the target under the PLD accountant
        assert s < s_rdp  # and is smaller than the RDP-calibrated one
    assert len(calls) <= 7 * len(targets)


F32_ORDERS = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0])


def _rdp_eps_f64(sigma, q, steps, delta):
    """Epsilon at F32_ORDERS in mpmath (40 digits): the exact integer-order RDP by the binomial sum (MTZ Sec. 3.2),
    composed, converted by Canonne et al.'s Prop. 2.11 with the KL bound (eps = 0 where delta^2 > 1 - e^-rdp).
    dp_accounting's own float64 sum is no reference here: at q = 1e-30 it finds RDP -2.7e-44 and returns eps 0."""
    import mpmath as mp

    with mp.workdps(40):
        q, s, d = mp.mpf(q), mp.mpf(float(sigma)), mp.mpf(delta)
        best = mp.inf
        for a in F32_ORDERS.astype(int):
            tot = mp.fsum(mp.binomial(a, i) * q**i * (1 - q) ** (a - i) * mp.expm1((i * i - i) / (2 * s * s))
                          for i in range(2, a + 1))  # A - 1 (the i = 0, 1 terms of A sum to 1)
            rdp = steps * mp.log1p(tot) / (a - 1)
            if d * d > -mp.expm1(-rdp):
                return 0.0
            best = min(best, rdp + mp.log1p(-mp.mpf(1) / a) - (mp.log(d) + mp.log(a)) / (a - 1))
        return float(max(best, 0))


@pytest.mark.parametrize("eps,q,steps,delta", [(20.0, 0.01, 1000, 1e-300), (1.0, 0.01, 1000, 1 - 1e-9),
                                               (1.0, 1e-50, 1000, 1e-5), (2.0, 1e-40, 10, 1e-40),
                                               (2.0, 1e-30, 10, 1e-30)])
def test_calibrate_sigma_float32_arguments_float32_cannot_hold(eps, q, steps, delta):
    """Regression: in float32 calibrate_sigma gave a silent NaN for a valid delta that rounds to 0 or 1 (1e-300,
    1e-40, 1 - 1e-9) or a q that flushes to 0 (1e-50, 1e-40): they were cast before the jitted bisection. Reference:
    dp_accounting's RDP accountant in float64 at the returned sigma (meets the target) and 0.1% below it (misses it:
    the answer is tight, up to the float32 bisection's margin)."""
    s = calibrate_sigma(eps, q, steps, delta, orders=F32_ORDERS)
    assert np.asarray(s).dtype == np.float32 and np.isfinite(float(s))
    assert _rdp_eps_f64(s, q, steps, delta) <= eps
    assert _rdp_eps_f64(float(s) * (1 - 1e-3), q, steps, delta) > eps


def test_calibrate_sigma_float32_eps_below_float32_is_the_kl_threshold():
    """Regression: eps = 1e-50 (0 in float32) gave a silent NaN. Full batch (q = 1): the RDP curve is T alpha /
    (2 sigma^2) and epsilon is 0 only through the KL bound delta^2 > 1 - e^{-rdp} at the smallest order, so the
    smallest sigma is sqrt(T alpha_min / (2 (-log(1 - delta^2)))) (by hand; 3.2e5 here)."""
    steps, delta = 10, 1e-5
    want = math.sqrt(steps * 2.0 / (2.0 * -math.log1p(-delta**2)))
    got = float(calibrate_sigma(1e-50, 1.0, steps, delta, orders=[2.0, 4.0]))
    assert want <= got <= want * (1 + 1e-4)  # the bisection's float32 margin (1e-5) and bracket


@pytest.mark.parametrize("q,delta,sigma", [(1e-50, 1e-5, 0.05), (0.01, 1e-300, 1.0), (0.01, 1 - 1e-9, 1.0),
                                           (1e-30, 1e-30, 0.2)])
def test_dpsgd_epsilon_float32_arguments_float32_cannot_hold(q, delta, sigma):
    """Regression: dpsgd_epsilon with a q that float32 flushes to 0 raised a misleading "rdp must be >= 0" (its RDP
    was NaN). (1e-30, 1e-30, 0.2): the RDP at orders 2 and 4 (~1e-49) underflowed to 0 in float32 and the KL bound
    took it at its word: eps 0 instead of ~22, and calibrate_sigma (above: 1e-30, 1e-40) returned a sigma 5x too
    small. Reference: dp_accounting in float64."""
    got = dpsgd_epsilon(sigma, q, 1000, delta, orders=F32_ORDERS)
    assert np.asarray(got).dtype == np.float32
    assert float(got) == pytest.approx(_rdp_eps_f64(sigma, q, 1000, delta), rel=1e-4, abs=1e-6)
