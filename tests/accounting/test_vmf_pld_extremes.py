"""The VMF PLD at extreme concentrations: refused with a ValueError naming kappa where it cannot be represented, and
correct (against mpmath, never the code under test) where the privacy-loss range passes float64's exp range.

Reference: one release of the worst-case (antipodal) pair, s = cos(angle to mu1) with density proportional to
e^{+-kappa s} (1 - s^2)^{(p-3)/2} on [-1, 1]. At p = 3 the tail masses are closed forms; at p = 2 mpmath quadrature
in the angle. Remove direction at q = 1 (add is its mirror): delta(eps) = P_+[L > eps] - e^eps P_-[L > eps] with
L = 2 kappa s, and epsilon(delta) by mpmath root finding, at 50 digits (e^{-2 kappa} ~ 1e-869 at kappa = 1000).
"""

import importlib
import math

import mpmath
import numpy as np
import pytest

from recon_jax.accounting import _pld_memory, calibrate_vmf_kappa
from recon_jax.accounting.vmf_pld import vmf_pld, vmf_pld_epsilon

_VMF_PLD = importlib.import_module("recon_jax.accounting.vmf_pld")


def _exact_eps_one_step_q1(kappa, p, delta):
    """Exact epsilon of one q = 1 release at p in {2, 3} (mpmath, 50 digits)."""
    with mpmath.workdps(50):
        k = mpmath.mpf(kappa)
        if p == 3:  # P_+[s > t] = (e^k - e^{kt}) / (2 sinh k): delta = (1 - e^{k(t - 1)})^2 / (1 - e^{-2k})

            def delta_at(e):
                return (-mpmath.expm1(-(2 * k - e) / 2)) ** 2 / (-mpmath.expm1(-2 * k))

        else:  # p = 2: density e^{+-k cos(th)} / (pi I_0(k)) in the angle th
            z = mpmath.pi * mpmath.besseli(0, k)

            def delta_at(e):
                th = mpmath.acos(e / (2 * k))
                pts = [mpmath.mpf(0)] + [th * f for f in (0.001, 0.01, 0.1, 0.5)] + [th]
                up = mpmath.quad(lambda t: mpmath.exp(k * mpmath.cos(t)), pts) / z
                low = mpmath.quad(lambda t: mpmath.exp(-k * mpmath.cos(t)), pts) / z
                return up - mpmath.exp(e) * low

        # delta decreases from delta(0) > delta to 0 at 2 kappa: a bracketing root finder on [0, 2 kappa] (about 15
        # evaluations; 80 bisection steps took a minute at p = 2, and gave the same float).
        return float(mpmath.findroot(lambda e: delta_at(e) - delta, (mpmath.mpf(0), 2 * k), solver="anderson"))


@pytest.mark.parametrize("kappa", [1e6, 1e10, 1e20, 1e150, 1e300, 1.7e308])
@pytest.mark.parametrize("p", [2, 3, 100, 13700])
def test_huge_kappa_refused_naming_kappa_and_its_range(kappa, p):
    """Past ~2e3 (default grid) one step's loss grid (4 kappa / interval points) exceeds the memory budget: a
    ValueError (PLDTooLarge) naming kappa and the largest kappa that fits, in closed form. Before: a
    ZeroDivisionError in the mode window where cos(mode) rounds to 1 (kappa >~ 1e8 p; 1e20..1e150 here), or where
    kappa^2 overflows (p = 2, kappa >= 1e155), and an OverflowError where 2 kappa overflows (1.7e308)."""
    with pytest.raises(_pld_memory.PLDTooLarge, match=r"kappa = \S+ is too large .* kappa must be <= about (\S+)\)"):
        vmf_pld_epsilon(kappa, p, 0.1, 10, 1e-5)
    with pytest.raises(ValueError, match="kappa"):
        vmf_pld(kappa, p, 1.0)
    with pytest.raises(ValueError, match="kappa must be finite"):
        vmf_pld_epsilon(math.inf, p, 0.1, 10, 1e-5)


@pytest.mark.parametrize("p", [2, 3, 100, 13700])
def test_refusal_range_is_the_boundary(p):
    """The largest kappa the refusal names fits (and is computed: finite, no warning), 1.01 times it does not."""
    with pytest.raises(_pld_memory.PLDTooLarge) as info:
        vmf_pld(1e20, p, 0.1, value_discretization_interval=1e-3)
    kmax = float(str(info.value).split("must be <= about ")[1].split(")")[0])
    assert 1e3 < kmax < 1e4
    sizes = _VMF_PLD._step_bytes  # the closed-form size the guard compares with the budget
    assert sizes(kmax / 1.01, float(p), 0.1, 1e-3, 20.0, 2048) <= _pld_memory.BUDGET_BYTES
    assert sizes(kmax * 1.01, float(p), 0.1, 1e-3, 20.0, 2048) > _pld_memory.BUDGET_BYTES


@pytest.mark.parametrize("kappa", [1e-300, 1e-100, 1e-8, 1.0, 1e3, 1e8, 1e20, 1e150, 1e300, 1.7e308])
@pytest.mark.parametrize("p", [2, 2.5, 3, 100, 13700])
def test_mode_window_finite_for_every_kappa(kappa, p):
    """The integration window around g_+'s mode: finite, inside [0, pi], containing the mode (mpmath: the root of
    kappa c^2 + (p - 2) c - kappa) for every finite kappa > 0."""
    lo, hi = _VMF_PLD._mode_window(kappa, float(p), 20.0)
    with mpmath.workdps(700):  # 1 - c ~ 1e-308 / kappa: hundreds of digits
        k, m = mpmath.mpf(kappa), mpmath.mpf(p - 2)
        c = 2 * k / (m + mpmath.sqrt(m * m + 4 * k * k))
        mode = float(mpmath.acos(c))
    assert 0.0 <= lo <= mode <= hi <= math.pi
    assert math.isfinite(lo) and math.isfinite(hi)


@pytest.mark.parametrize("kappa,p", [(400.0, 3), (1000.0, 3), (400.0, 2), (1000.0, 2)])
def test_loss_range_past_709_against_mpmath(kappa, p):
    """kappa > ~355: the loss range 4 kappa passes 709, where e^eps overflows and g_-'s mass near the mode of g_+
    (~e^{-2 kappa}) underflows. Before: NaN (inf * 0), or at p = 2 a 'PMF' whose probabilities summed to 2.5 (deltas
    above 1). Now the products e^eps P_-[...] are taken in logs: epsilon at or above the exact one (mpmath, one q = 1
    release) by at most 3 grid steps (the pessimistic connect-the-dots discretisation; 1e-2 here), and delta <= 1."""
    step = 1e-2
    exact = _exact_eps_one_step_q1(kappa, p, 1e-5)
    got = vmf_pld_epsilon(kappa, p, 1.0, 1, 1e-5, value_discretization_interval=step)
    assert exact <= got <= exact + 3 * step, (got, exact)
    pld = vmf_pld(kappa, p, 0.1, value_discretization_interval=step)
    d = np.asarray(pld.get_delta_for_epsilon([0.0, 1.0, 100.0]))
    assert np.all(d <= 1.0) and np.all(np.isfinite(d))
    np.testing.assert_allclose(d, 0.1, rtol=1e-9)  # q: the mass of g_+ (loss ~ 2 kappa) sampled; 1e-9: tails


def test_calibrate_vmf_kappa_pld_past_709(monkeypatch):
    """A target epsilon of 2000 (one q = 1 release at p = 3: exact epsilon ~ 2 kappa, so kappa ~ 1000). Before, the
    PLD's NaN past kappa ~ 355 read as infeasible and the calibration stopped near 256-355. The budget is lowered to
    32 MiB and the grid is 0.1 so that the search stays quick; the refusal beyond ~1.9e3 is still infeasible."""
    monkeypatch.setattr(_pld_memory, "BUDGET_BYTES", 2**25)
    k = float(calibrate_vmf_kappa(2000.0, 3, 1.0, 1, 1e-5, approach="pld", value_discretization_interval=0.1,
                                  rtol=1e-3))
    assert 990.0 < k <= 1000.0, k
    assert _exact_eps_one_step_q1(k, 3, 1e-5) <= 2000.0


class _MpVMF:
    """Exact hockey-stick divergences of one release of the q-subsampled antipodal VMF pair, any p (mpmath).

    With s = kappa (1 - cos), the unnormalised density of the cosine under VMF(mu1) is e^kappa / kappa^{m+1} times
    e^{-s} s^m (2 - s / kappa)^m on s in [0, 2 kappa], m = (p - 3) / 2, so P_+[cos > t] and P_-[cos > t] = P_+[cos < -t]
    are ratios of integrals of that (constants cancel; e^{-2 kappa} ~ 1e-86859 at kappa = 1e5 is no trouble at 25
    digits). Remove: L = log(1 - q + q e^{2 kappa cos}) > eps <=> cos > t_eps, delta = q P_+ - (e^eps - 1 + q) P_-
    there; add: -L > eps <=> cos < u_eps (only where e^{-eps} > 1 - q), delta = (1 - e^eps (1 - q)) P_- - e^eps q P_+.
    """

    def __init__(self, kappa, p, q):
        self.k, self.m, self.q = mpmath.mpf(kappa), mpmath.mpf(p - 3) / 2, mpmath.mpf(q)
        with mpmath.workdps(25):
            self.norm = self._integral(0, 2 * self.k)

    def _integral(self, s0, s1):
        k, m = self.k, self.m
        s0, s1 = mpmath.mpf(s0), mpmath.mpf(s1)
        if s1 <= s0:
            return mpmath.mpf(0)
        d = [mpmath.mpf(10) ** e for e in range(-3, 7)]  # breakpoints: the integrand varies on every scale
        pts = {s0, s1} | {s0 + x for x in d if s0 + x < s1} | {s1 - x for x in d if s1 - x > s0}
        pts |= {x for x in (m, m + 10 * mpmath.sqrt(m + 1)) if s0 < x < s1}

        def f(s):
            return mpmath.exp(-s) * s**m * (2 - s / k) ** m

        return mpmath.quad(f, sorted(pts))

    def _above(self, t, sign):  # P_+[cos > t] (sign 1) or P_-[cos > t] (sign -1)
        t = min(max(t, mpmath.mpf(-1)), mpmath.mpf(1))
        s0, s1 = (0, self.k * (1 - t)) if sign > 0 else (self.k * (1 + t), 2 * self.k)
        return self._integral(s0, s1) / self.norm

    def delta(self, eps):
        with mpmath.workdps(25):
            e, q, k = mpmath.mpf(eps), self.q, self.k
            t = mpmath.log((mpmath.exp(e) - 1 + q) / q) / (2 * k)
            out = q * self._above(t, 1) - (mpmath.exp(e) - 1 + q) * self._above(t, -1)
            if mpmath.exp(-e) > 1 - q:
                u = mpmath.log((mpmath.exp(-e) - 1 + q) / q) / (2 * k)
                below_minus, below_plus = 1 - self._above(u, -1), 1 - self._above(u, 1)
                out = max(out, (1 - mpmath.exp(e) * (1 - q)) * below_minus - mpmath.exp(e) * q * below_plus)
            return float(max(out, 0))


@pytest.mark.parametrize("kappa,p,q,step", [(1e3, 3, 0.01, 1e-2), (1e4, 10, 0.1, 0.1), (1e5, 3, 1.0, 1.0),
                                            (1e5, 100, 0.01, 1.0)])
def test_privacy_buckets_underflow_is_pessimistic(kappa, p, q, step):
    """connect_dots=False takes g_-'s cell masses without logs. In g_+'s window (cos ~ 1) they are ~e^{-2 kappa}
    and underflow to 0: checked here, with their total (from the logs the connect-dots path uses) below 1e-300.
    That mass leaves the PMF's probabilities (so, in exact arithmetic, it goes to the infinite loss); in float64 its
    effect on any delta is below 1e-300, and nothing multiplies it by e^eps (the connect-dots path's NaN past 2 kappa
    ~ 709). The buckets' delta of one release stays at or above the exact one (mpmath, :class:`_MpVMF`) and the
    connect-the-dots one at eps = 0, 0.005 (the add direction, q < 1) and where g_+'s loss cut leaves s = 0.05 and
    s = m + 5 (delta from ~1e-133 to ~q), and over 10 releases epsilon is finite and at or above connect-the-dots.
    """
    m = (p - 3) / 2
    buckets = vmf_pld(kappa, p, q, value_discretization_interval=step, connect_dots=False)
    dots = vmf_pld(kappa, p, q, value_discretization_interval=step, connect_dots=True)
    lo, hi = _VMF_PLD._windows(kappa, float(p), _VMF_PLD._WIDTH)[0]
    edges = _VMF_PLD._cell_edges(lo, hi, kappa, q, step, _VMF_PLD._CELLS)
    log_z = _VMF_PLD._log_normaliser(kappa, float(p))
    log_minus = _VMF_PLD._cell_masses(edges, kappa, float(p), log_z, True)[2]
    linear = _VMF_PLD._cell_masses(edges, kappa, float(p), log_z)[1]  # as connect_dots=False takes them
    assert np.all(linear == 0.0) and np.all(np.isfinite(log_minus))  # the regime: every cell underflows
    assert np.logaddexp.reduce(log_minus) < math.log(1e-300)

    exact = _MpVMF(kappa, p, q)
    # Remove loss at cos = 1 - s / kappa (in logs: e^{2 kappa} overflows), and eps = 0, 0.005 (the add direction).
    cuts = [float(np.logaddexp(math.log1p(-q), math.log(q) + 2 * kappa - 2 * s)) if q < 1 else 2 * kappa - 2 * s
            for s in (0.05, m + 5.0)]
    for eps in cuts + [0.0, 0.005]:
        ref = exact.delta(eps)
        got, tight = float(buckets.get_delta_for_epsilon(eps)), float(dots.get_delta_for_epsilon(eps))
        # 1e-11 relative: float64 rounding of sums over <= 3e4 cells (3e4 * 2^-53 = 3e-12), where delta ~ 1.
        assert math.isfinite(got) and got >= ref * (1 - 1e-11) and got >= tight * (1 - 1e-11), (eps, got, ref, tight)
    e_buckets = buckets.self_compose(10).get_epsilon_for_delta(1e-5)
    e_dots = dots.self_compose(10).get_epsilon_for_delta(1e-5)
    assert math.isfinite(e_buckets) and e_buckets >= e_dots, (e_buckets, e_dots)
