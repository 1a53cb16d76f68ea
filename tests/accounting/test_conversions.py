"""RDP -> DP conversions, subsampling amplification and KOV composition against independent references."""

import math

import jax
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rpa

from recon_jax.accounting import amplify_dp_poisson, delta_from_rdp, eps_from_rdp, kov_composition


def _random_curves(rng, n_curves, orders):
    # Plausible RDP curves: a zCDP-like part plus noise, always >= 0.
    rho = rng.uniform(1e-4, 2.0, size=(n_curves, 1))
    return rho * orders[None, :] * rng.uniform(0.8, 1.2, size=(n_curves, orders.size))


def test_eps_and_delta_match_dp_accounting(x64):
    rng = np.random.default_rng(0)
    orders = np.concatenate([np.arange(1.05, 11, 0.05), np.arange(11, 100)])
    curves = _random_curves(rng, 20, orders)
    deltas = rng.choice([1e-8, 1e-5, 1e-3], size=20)
    eps = np.asarray(eps_from_rdp(orders, curves, deltas))
    for c, d, e in zip(curves, deltas, eps):
        ref, _ = rpa.compute_epsilon(orders, c, d)
        # dp_accounting skips orders <= 1.01 for numerical stability; here all orders are > 1.01 so the
        # formulas coincide. rtol 1e-12: identical float64 arithmetic up to operation order.
        assert e == pytest.approx(ref, rel=1e-12)
    targets = rng.uniform(0.1, 10.0, size=20)
    dl = np.asarray(delta_from_rdp(orders, curves, targets))
    for c, t, d in zip(curves, targets, dl):
        ref, _ = rpa.compute_delta(orders, c, t)
        assert d == pytest.approx(ref, rel=1e-10, abs=1e-300)


def test_conversion_formula_and_roundtrip(x64):
    # Canonne et al. Prop. 2.11 written out by hand for one order.
    a, r, d = 3.0, 0.7, 1e-6
    want = r + math.log1p(-1 / a) - (math.log(d) + math.log(a)) / (a - 1)
    assert float(eps_from_rdp([a], [r], d)) == pytest.approx(want, rel=1e-13)
    orders = np.array([1.5, 2.0, 4.0, 16.0])
    rdp = 0.05 * orders
    e = eps_from_rdp(orders, rdp, 1e-5)
    assert float(delta_from_rdp(orders, rdp, e)) <= 1e-5 * (1 + 1e-9)
    e2, order = eps_from_rdp(orders, rdp, 1e-5, return_order=True)
    assert float(e2) == float(e) and float(order) in orders.tolist()
    # KL shortcut: a tiny curve with a huge delta gives eps = 0; delta_from_rdp is capped at 1.
    assert float(eps_from_rdp(orders, 1e-12 * orders, 0.5)) == 0.0
    assert float(delta_from_rdp(orders, 100 * orders, 0.0)) == 1.0


def test_conversions_jit_vmap(x64):
    orders = np.array([1.5, 2.0, 8.0])
    rdp = np.array([[0.1, 0.2, 0.9], [0.01, 0.02, 0.1]])
    f = jax.jit(lambda r, d: eps_from_rdp(orders, r, d))
    np.testing.assert_allclose(f(rdp, 1e-5), eps_from_rdp(orders, rdp, 1e-5), rtol=1e-12)
    g = jax.grad(lambda r: eps_from_rdp(orders, r, 1e-5))(rdp[0])
    assert np.all(np.isfinite(g))


def test_conversion_validation():
    with pytest.raises(ValueError, match="delta"):
        eps_from_rdp([2.0], [0.1], 0.0)
    with pytest.raises(ValueError, match="orders"):
        eps_from_rdp([1.0], [0.1], 1e-5)
    with pytest.raises(ValueError, match="rdp"):
        delta_from_rdp([2.0], [-0.1], 1.0)
    with pytest.raises(ValueError, match="eps"):
        delta_from_rdp([2.0], [0.1], -1.0)
    with pytest.raises(ValueError, match="match"):
        eps_from_rdp([2.0, 3.0], [0.1], 1e-5)


def _kov_naive(eps, delta, n, dt):
    """Kairouz et al. 2017 Thm 10 typed from the paper (with the corrected leading term n*eps*(e^eps-1)/(e^eps+1))."""
    lead = n * eps * (math.exp(eps) - 1) / (math.exp(eps) + 1)
    cands = [n * eps]
    if dt > 0:
        cands.append(lead + eps * math.sqrt(2 * n * math.log(math.e + math.sqrt(n * eps * eps) / dt)))
        cands.append(lead + eps * math.sqrt(2 * n * math.log(1 / dt)))
    return min(cands), 1 - (1 - delta) ** n * (1 - dt)


@pytest.mark.parametrize("eps,delta,n,dt", [(0.1, 0.0, 100, 1e-5), (1.0, 1e-6, 3, 1e-6), (0.01, 1e-7, 1000, 1e-3),
                                            (2.0, 0.0, 10, 0.0), (0.5, 1e-5, 50, 0.1)])
def test_kov_composition(x64, eps, delta, n, dt):
    e, d = kov_composition(eps, delta, n, dt)
    want_e, want_d = _kov_naive(eps, delta, n, dt)
    assert float(e) == pytest.approx(want_e, rel=1e-12)
    assert float(d) == pytest.approx(want_d, rel=1e-9, abs=1e-18)


def test_amplification(x64):
    e, d = amplify_dp_poisson(np.array([0.5, 3.0]), 1e-4, 0.01)
    np.testing.assert_allclose(e, np.log(1 + 0.01 * (np.exp([0.5, 3.0]) - 1)), rtol=1e-13)
    np.testing.assert_allclose(d, 1e-6, rtol=1e-13)
    e1, d1 = amplify_dp_poisson(0.7, 1e-3, 1.0)
    assert float(e1) == pytest.approx(0.7) and float(d1) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="q"):
        amplify_dp_poisson(1.0, 1e-5, 0.0)
    with pytest.raises(ValueError, match="delta_tilde"):
        kov_composition(1.0, 1e-5, 3, 1.0)


@pytest.mark.parametrize("delta", [1e-300, 1e-40, 1 - 1e-9])
def test_eps_from_rdp_float32_at_deltas_float32_cannot_hold(delta):
    """Regression: in float32 (the default dtype) a valid delta that rounds to 0 (1e-300, 1e-40) or to 1 (1 - 1e-9) gave
    a silent NaN; log(delta) is representable, so the answer is. Reference: Prop. 2.11 and the KL bound by hand in
    float64 NumPy."""
    orders, rdp = np.array([2.0, 8.0, 32.0]), np.array([0.1, 0.4, 1.6])
    with np.errstate(divide="ignore"):
        ref = rdp + np.log1p(-1 / orders) - (np.log(delta) + np.log(orders)) / (orders - 1)
    ref = np.where(delta**2 + np.expm1(-rdp) > 0, 0.0, ref)
    got = eps_from_rdp(orders, rdp, delta)
    assert got.dtype == np.float32
    assert float(got) == pytest.approx(max(float(np.min(ref)), 0.0), rel=1e-6, abs=0.0)


def test_eps_from_rdp_kl_bound_at_tiny_delta(x64):
    """Regression: the KL bound was tested as delta^2 + expm1(-rdp) > 0, and delta^2 underflows to 0 below 1e-154, so a
    zero RDP curve (identical outputs: eps = 0 for every delta) gave eps = 0.45 at delta = 1e-200."""
    orders = np.array([2.0, 64.0, 1024.0])
    assert float(eps_from_rdp(orders, np.zeros(3), 1e-200)) == 0.0


@pytest.mark.parametrize("eps,q", [(100.0, 1e-3), (800.0, 0.5), (1e4, 1e-8), (1.5, 0.3)])
def test_amplification_where_e_to_the_eps_overflows(x64, eps, q):
    """Regression: log1p(q expm1(eps)) overflowed to inf from eps ~ 710 (float64; ~89 in float32) although the
    amplified epsilon is finite. Reference: mpmath."""
    import mpmath as mp

    with mp.workdps(40):
        want = float(mp.log(1 - mp.mpf(q) + mp.mpf(q) * mp.exp(eps)))
    assert float(amplify_dp_poisson(eps, 1e-6, q)[0]) == pytest.approx(want, rel=1e-13)
    with jax.enable_x64(False):
        assert float(amplify_dp_poisson(np.float32(eps), 1e-6, q)[0]) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("q,eps", [(1e-50, 100.0), (1e-50, 200.0), (1e-300, 800.0), (1e-40, 0.5)])
def test_amplification_float32_q_below_float32(q, eps):
    """Regression: in float32 a valid q that float32 flushes to 0 gave a silent NaN for both outputs. Reference:
    mpmath (eps_s = log(1 - q + q e^eps): 2.7e-7 at (1e-50, 100), 84.9 at (1e-50, 200); delta_s = q delta, 0 in
    float32)."""
    import mpmath as mp

    with mp.workdps(40):
        want = float(mp.log(1 - mp.mpf(q) + mp.mpf(q) * mp.exp(eps)))
    e, d = amplify_dp_poisson(eps, 1e-6, q)
    assert e.dtype == np.float32
    assert float(e) == pytest.approx(want, rel=1e-5, abs=float(np.finfo(np.float32).tiny))
    assert float(d) == 0.0


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # n = 1e50 as float32, on purpose
@pytest.mark.parametrize("eps,delta,n,dtl", [(0.1, 0.0, 100, 1 - 1e-9), (0.1, 1 - 1e-9, 100, 1e-5),
                                             (0.1, 0.0, 100, 1e-50), (0.1, 0.0, 1e50, 1e-5), (0.0, 0.0, 1e50, 1e-5),
                                             (0.1, 1e-50, 100, 1e-300)])
def test_kov_float32_arguments_float32_cannot_hold(eps, delta, n, dtl):
    """Regression: in float32 delta or delta_tilde = 1 - 1e-9 (rounds to 1) gave NaN for both outputs, and n = 1e50
    (overflows to inf) a NaN delta_tot (0 * inf). Reference: the theorem's formulas in mpmath; eps_tot = n eps = 1e49
    overflows float32 (inf is its correctly rounded value)."""
    import mpmath as mp

    with mp.workdps(50):
        e, d, nn, t = (mp.mpf(v) for v in (eps, delta, n, dtl))
        lead = nn * e * mp.tanh(e / 2)
        cands = [nn * e, lead + e * mp.sqrt(2 * nn * mp.log(mp.e + mp.sqrt(nn) * e / t)),
                 lead + e * mp.sqrt(2 * nn * mp.log(1 / t))]
        want_e, want_d = float(min(cands)), float(1 - (1 - d) ** nn * (1 - t))
    got_e, got_d = kov_composition(eps, delta, n, dtl)
    assert got_e.dtype == np.float32
    f32max = float(np.finfo(np.float32).max)
    if want_e > f32max:
        assert float(got_e) == np.inf
    else:
        assert float(got_e) == pytest.approx(want_e, rel=1e-5, abs=0)
    assert float(got_d) == pytest.approx(want_d, rel=1e-6, abs=float(np.finfo(np.float32).tiny))  # 1e-50: 0 in float32
