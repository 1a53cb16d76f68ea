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

        lo, hi = mpmath.mpf(0), 2 * k  # delta decreases from delta(0) to 0 at 2 kappa: bisection
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if delta_at(mid) > delta else (lo, mid)
        return float(hi)


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
