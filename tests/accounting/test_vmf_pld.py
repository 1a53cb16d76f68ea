"""PLD accounting of the Poisson-subsampled VMF mechanism against an independent exact composition.

The reference computes the hockey-stick divergence of the n-fold product of the worst-case (antipodal) pair
directly from the densities of s = cos(angle to mu1), without a PLD, a discretisation or a Bessel function:
delta_n(eps) = int u(s) delta_{n-1}(eps - L(s)) ds (conditioning on the last release), with delta_1 in closed
form at p = 3 (s has density proportional to e^{+-kappa s} on [-1, 1]) and by SciPy quadrature otherwise.
"""

import importlib
import math
import re
import time

import numpy as np
import pytest
from scipy import integrate, optimize

from recon_jax.accounting import calibrate_vmf_kappa, vmf_epsilon
from recon_jax.accounting.vmf_pld import vmf_pld, vmf_pld_epsilon


class _ExactVMF:
    """Exact hockey-stick divergences of n releases of the q-subsampled VMF pair at dimension p (add and remove)."""

    def __init__(self, kappa, p, q):
        self.k, self.p, self.q = kappa, p, q
        w = (p - 3) / 2.0
        self.raw = lambda s, sign: math.exp(sign * kappa * s) * (1.0 - s * s) ** w
        self.z = integrate.quad(lambda s: self.raw(s, 1.0), -1.0, 1.0, epsabs=0.0, epsrel=1e-13)[0]

    def g(self, s, sign):  # density of s under VMF(mu1) (sign +1) or VMF(mu0 = -mu1) (sign -1)
        return self.raw(s, sign) / self.z

    def mix(self, s):
        return (1.0 - self.q) * self.g(s, -1.0) + self.q * self.g(s, 1.0)

    def loss(self, s):  # remove direction: log(mix / g_-)
        return math.log1p(-self.q + self.q * math.exp(2.0 * self.k * s)) if self.q < 1 else 2.0 * self.k * s

    def _cut(self, e):
        """s at which log(1 - q + q e^{2 kappa s}) = e (clipped to [-1, 1]; -1 when e is below the loss range)."""
        arg = math.expm1(e) + self.q
        if arg <= 0:
            return -1.0
        return min(1.0, max(-1.0, (math.log(arg) - math.log(self.q)) / (2.0 * self.k)))

    def _mass(self, a, b, sign):
        if b <= a:
            return 0.0
        if self.p == 3:  # closed form: density kappa e^{sign kappa s} / (2 sinh kappa)
            k = self.k
            return (math.exp(sign * k * b) - math.exp(sign * k * a)) / (sign * 2.0 * math.sinh(k))
        return integrate.quad(lambda s: self.g(s, sign), a, b, epsabs=1e-15, epsrel=1e-12)[0]

    def delta1(self, e, remove):
        if remove:  # loss > e  <=>  s > cut(e); upper = mix, lower = g_-
            c = self._cut(e)
            up = (1 - self.q) * self._mass(c, 1.0, -1.0) + self.q * self._mass(c, 1.0, 1.0)
            return max(0.0, up - math.exp(e) * self._mass(c, 1.0, -1.0))
        # add: loss = -log(mix / g_-) > e  <=>  s < cut(-e); upper = g_-, lower = mix
        c = self._cut(-e)
        if c <= -1.0:
            return 0.0
        low = (1 - self.q) * self._mass(-1.0, c, -1.0) + self.q * self._mass(-1.0, c, 1.0)
        return max(0.0, self._mass(-1.0, c, -1.0) - math.exp(e) * low)

    def delta(self, e, n, remove):
        if n == 1:
            return self.delta1(e, remove)
        if remove:
            def f(s):
                return self.mix(s) * self.delta(e - self.loss(s), n - 1, True)
        else:
            def f(s):
                return self.g(s, -1.0) * self.delta(e + self.loss(s), n - 1, False)
        return integrate.quad(f, -1.0, 1.0, epsabs=1e-13, epsrel=1e-10, limit=200)[0]

    def delta_max(self, e, n):
        return max(self.delta(e, n, True), self.delta(e, n, False))


@pytest.mark.parametrize("connect_dots", [True, False])
@pytest.mark.parametrize("kappa,p,q,n", [(2.0, 3, 1.0, 1), (2.0, 3, 0.3, 1), (5.0, 6, 0.4, 1), (2.0, 3, 1.0, 2),
                                         (3.0, 5, 0.5, 2), (2.0, 3, 0.3, 3)])
def test_pld_delta_never_below_exact(kappa, p, q, n, connect_dots):
    exact = _ExactVMF(kappa, p, q)
    pld = vmf_pld(kappa, p, q, value_discretization_interval=1e-4, connect_dots=connect_dots)
    if n > 1:
        pld = pld.self_compose(n)
    for eps in (0.0, 0.25, 0.5, 1.0, 2.0):
        ref = exact.delta_max(eps, n)
        got = float(pld.get_delta_for_epsilon(eps))
        # Lower side: the reference quadrature is accurate to ~1e-12 absolute (epsabs 1e-13 per level).
        assert got >= ref - 1e-11, (eps, got, ref)
        # Upper side (tightness): rounding each loss up by at most 1e-4 per release changes delta by < 1%.
        assert got <= ref * 1.01 + 1e-9, (eps, got, ref)


def test_pld_epsilon_never_below_exact_epsilon():
    kappa, p, q, n, delta = 2.0, 3, 0.3, 2, 1e-3
    exact = _ExactVMF(kappa, p, q)
    eps_ref = optimize.brentq(lambda e: exact.delta_max(e, n) - delta, 0.0, 4 * kappa * n, xtol=1e-10)
    got = vmf_pld_epsilon(kappa, p, q, n, delta)  # connect-the-dots, grid 1e-3
    assert eps_ref <= got <= eps_ref + 1e-3  # within one grid step


def test_large_dim_normaliser_and_one_step_delta():
    """p = 13,700 (Biswas et al.): the cell masses integrate to 1 with the log_iv normaliser, and delta matches an
    independent quadrature in theta normalised numerically (no Bessel function)."""
    kappa, p, q = 150.0, 13700, 128 / 60000
    pld = vmf_pld(kappa, p, q)
    # Infinite-loss mass = uncovered mass + quadrature/normaliser error: tiny if log Z is right (1e-9: a log Z off
    # by 1e-9 would show here).
    assert pld._pmf_remove._infinity_mass < 1e-9 and pld._pmf_add._infinity_mass < 1e-9

    def logw(th, sign):
        return sign * kappa * math.cos(th) + (p - 2) * math.log(math.sin(th))

    c = max(logw(th, 1.0) for th in np.linspace(1.3, 1.8, 2001))
    z = integrate.quad(lambda th: math.exp(logw(th, 1.0) - c), 1.0, 2.1, epsabs=0, epsrel=1e-12, limit=400)[0]

    def g(th, sign):
        return math.exp(logw(th, sign) - c) / z

    for eps in (0.001, 0.003):
        # remove: L(theta) = log(1 - q + q e^{2 kappa cos theta}) > eps  <=>  theta < cut
        cut = math.acos((math.log(math.expm1(eps) + q) - math.log(q)) / (2 * kappa))
        ref = integrate.quad(lambda th: q * g(th, 1.0) + (1 - q - math.exp(eps)) * g(th, -1.0), 1.0, cut,
                             epsabs=1e-15, epsrel=1e-11, limit=400)[0]
        got = float(pld._pmf_remove.get_delta_for_epsilon(eps))
        assert ref <= got <= ref * 1.01 + 1e-12, (eps, got, ref)


def test_pld_tighter_than_rdp_at_table_iv():
    """Biswas et al.'s setting, composed over the 1,407 steps of 3 epochs: the PLD bound is below both RDP routes."""
    kappas = np.array([100.0, 300.0])
    steps = math.ceil(3 * 60000 / 128)
    e_pld = np.asarray(vmf_epsilon(kappas, 13700, 128 / 60000, steps, 1 / 60000, approach="pld",
                                   value_discretization_interval=1e-3))
    e_rdp = np.asarray(vmf_epsilon(kappas, 13700, 128 / 60000, steps, 1 / 60000, approach="best"))
    assert np.all(np.isfinite(e_pld)) and np.all(e_pld < e_rdp)
    assert e_rdp[1] / e_pld[1] > 10.0  # kappa = 300: RDP gives ~2e4, the PLD ~1e2


def test_calibrate_vmf_kappa_pld():
    eps, p, q, n, delta = 1.0, 50, 0.05, 20, 1e-5
    k = float(calibrate_vmf_kappa(eps, p, q, n, delta, approach="pld", value_discretization_interval=1e-3,
                                  rtol=1e-3))
    assert float(vmf_epsilon(k, p, q, n, delta, approach="pld", value_discretization_interval=1e-3)) <= eps
    assert float(vmf_epsilon(k * 1.002, p, q, n, delta, approach="pld", value_discretization_interval=1e-3)) > eps
    # The PLD allows a larger kappa than the RDP routes at the same epsilon.
    assert k > float(calibrate_vmf_kappa(eps, p, q, n, delta))


def test_vmf_pld_validation():
    with pytest.raises(ValueError, match="kappa"):
        vmf_pld(0.0, 10, 0.5)
    with pytest.raises(ValueError, match="dim"):
        vmf_pld(1.0, 1.5, 0.5)
    with pytest.raises(ValueError, match="q"):
        vmf_pld(1.0, 10, 0.0)
    with pytest.raises(ValueError, match="steps"):
        vmf_pld_epsilon(1.0, 10, 0.5, 0, 1e-5)
    with pytest.raises(ValueError, match="value_discretization_interval"):
        vmf_pld(1e6, 10, 1.0, value_discretization_interval=1e-6)


_VMF_PLD = importlib.import_module("recon_jax.accounting.vmf_pld")  # the module (the package exports the function)


def _forbid_building(monkeypatch, one_step=True):
    """Make the step's construction (its normaliser and cells, and dp_accounting's PMFs) and the composition fail if
    called: a refusal must come before them, so that a test never allocates what the guard refuses."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    def fail(*args, **kwargs):
        raise AssertionError("the privacy-loss distribution was built")

    if one_step:
        for name in ("_log_normaliser", "_cell_edges"):
            monkeypatch.setattr(_VMF_PLD, name, fail)
        monkeypatch.setattr(pld_pmf, "create_pmf_pessimistic_connect_dots_fixed_gap", fail)
    monkeypatch.setattr(pld_lib.PrivacyLossDistribution, "self_compose", fail)


@pytest.mark.parametrize("kappa,p,q,steps,step,gib", [(1e6, 10, 1.0, 1, 1e-3, "931.3"),
                                                      (1e5, 13700, 0.01, 1000, 1e-3, "44.5"),
                                                      (50.0, 100, 0.1, 10, 1e-7, "327.9")])
def test_vmf_pld_refuses_large_kappa_before_building(monkeypatch, kappa, p, q, steps, step, gib):
    """A large kappa (the loss spans 4 kappa) or a fine grid asked for billions of loss bins (kappa = 1e6: 4e9 grid
    points, ~930 GiB). Refused in closed form, naming kappa, the estimate and the alternatives, before any array of
    the step is built (the construction fails here if called): in well under 2 s."""
    _forbid_building(monkeypatch)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=re.escape(
            f"kappa = {kappa:g} is too large for the VMF PLD at dim = {p}, q = {q:g} (value_discretization_"
            f"interval={step:g}): one step's privacy-loss distribution needs about {gib} GiB (limit 2 GiB); use a "
            "smaller kappa")):
        vmf_pld_epsilon(kappa, p, q, steps, 1e-5, value_discretization_interval=step)
    with pytest.raises(ValueError, match=re.escape(f"kappa = {kappa:g} is too large")):
        vmf_pld(kappa, p, q, value_discretization_interval=step)
    assert time.perf_counter() - start < 2.0


def test_vmf_pld_epsilon_refuses_a_composition_over_budget(monkeypatch):
    """One step fits (8,001 grid points) but 1e9 steps would need a ~26,000 GiB FFT: refused from the step's own
    probabilities before dp_accounting composes (its self_compose fails here if called). Fewer steps are unchanged."""
    few = vmf_pld_epsilon(2.0, 3, 1.0, 10, 1e-5)
    _forbid_building(monkeypatch, one_step=False)
    with pytest.raises(ValueError, match=r"kappa = 2 is too large for the VMF PLD at dim = 3, q = 1, steps = "
                                         r"1000000000 \(value_discretization_interval=0\.001\): composing the steps "
                                         r"needs about [0-9.]+ GiB \(limit 2 GiB\); use fewer steps"):
        vmf_pld_epsilon(2.0, 3, 1.0, 10**9, 1e-5)
    monkeypatch.undo()
    composed = vmf_pld(2.0, 3, 1.0).self_compose(10)
    assert vmf_pld_epsilon(2.0, 3, 1.0, 10, 1e-5) == few == composed.get_epsilon_for_delta(1e-5)  # as before


def test_calibrate_vmf_kappa_pld_never_trips_the_refusal(monkeypatch):
    """A target so loose that the largest kappa lies beyond the PLD's memory limit: calibrate_vmf_kappa returns the
    largest kappa it can certify (at the limit, within rtol), meeting the target, instead of raising. The budget is
    lowered to 16 MiB so that the limit is a small kappa (~11 at p = 3)."""
    from recon_jax.accounting import _pld_memory

    monkeypatch.setattr(_pld_memory, "BUDGET_BYTES", 2**24)
    k = float(calibrate_vmf_kappa(1e3, 3, 1.0, 1, 1e-5, approach="pld", rtol=1e-2))
    assert 5.0 < k < 20.0 and vmf_pld_epsilon(k, 3, 1.0, 1, 1e-5) <= 1e3
    with pytest.raises(ValueError, match="too large for the VMF PLD"):
        vmf_pld_epsilon(k * 1.01 ** 2, 3, 1.0, 1, 1e-5)


def _delta_pair_p3(phi, kappa, q, eps, n=800):
    """Hockey-stick divergence (max of add and remove) of the q-subsampled VMF pair with mean directions at angle
    phi on S^2, by the midpoint rule over the sphere in polar coordinates (error ~ (pi/n)^2)."""
    t = (np.arange(n) + 0.5) * math.pi / n
    s = (np.arange(2 * n) + 0.5) * math.pi / n
    tt, ss = np.meshgrid(t, s, indexing="ij")
    y = np.stack([np.cos(tt), np.sin(tt) * np.cos(ss), np.sin(tt) * np.sin(ss)])
    a = np.array([math.cos(phi / 2), math.sin(phi / 2), 0.0])
    b = np.array([math.cos(phi / 2), -math.sin(phi / 2), 0.0])
    c = kappa / (4 * math.pi * math.sinh(kappa))
    pa, pb = c * np.exp(kappa * np.tensordot(a, y, 1)), c * np.exp(kappa * np.tensordot(b, y, 1))
    w = np.sin(tt) * (math.pi / n) ** 2
    up = (1 - q) * pb + q * pa
    return max(np.sum(np.maximum(up - math.exp(eps) * pb, 0) * w), np.sum(np.maximum(pb - math.exp(eps) * up, 0) * w))


@pytest.mark.parametrize("q", [1.0, 0.3])
def test_antipodal_pair_is_the_worst_case_p3(q):
    """The PLD accounts for antipodal mean directions; on S^2 every other angle gives a smaller divergence."""
    kappa = 2.0
    exact = _ExactVMF(kappa, 3, q)
    for eps in (0.0, 0.5, 1.0):
        vals = [_delta_pair_p3(phi, kappa, q, eps) for phi in (math.pi / 3, 2 * math.pi / 3, 0.9 * math.pi)]
        worst = exact.delta_max(eps, 1)
        assert _delta_pair_p3(math.pi, kappa, q, eps) == pytest.approx(worst, abs=1e-4)  # the grid is accurate
        assert vals[0] <= vals[1] <= vals[2] <= worst + 1e-4, (eps, vals, worst)
