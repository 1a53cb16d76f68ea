"""Property-based fuzzing of the public numerical API: bounds, accounting, special, metrics (hypothesis).

For every function, in float32 (the default dtype users get):

- random valid inputs (log-uniform over wide ranges, plus the edges of each range) give finite values inside the
  documented output range;
- ``jax.jit`` equals eager, and ``jax.vmap`` equals a per-item loop;
- one invalid argument (NaN, out of range) raises ``ValueError`` naming that argument eagerly and gives NaN for
  that item (only) under ``jit``.

Each function is jitted once on a fixed batch shape (``ROWS`` items per example), so compilation, not the
number of examples, sets the cost. Counters of the inputs tried are kept in ``COUNTS`` (printed with ``-s``).
Functions that take arrays of orders or images are wrapped into scalar-argument functions (``wrap``).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recon_jax import accounting as acc
from recon_jax import bounds, metrics, special

ROWS = 6  # items per example: one jit compile per function for this batch shape
EXAMPLES = 5  # hypothesis examples per function (valid inputs)
INVALID_EXAMPLES = 3  # hypothesis examples per (function, argument) pair (invalid inputs)
COUNTS: collections.Counter = collections.Counter()
NAN = float("nan")


# ---------------------------------------------------------------------------------------------------- arguments
@dataclasses.dataclass(frozen=True)
class Arg:
    """One scalar argument: how to draw valid values, and invalid values that must be refused."""

    name: str
    draw: st.SearchStrategy
    bad: tuple


def _log_uniform(lo: float, hi: float) -> st.SearchStrategy:
    return st.floats(math.log10(lo), math.log10(hi)).map(lambda e: float(np.float32(10.0**e)))


def positive(name, lo=1e-6, hi=1e6):
    return Arg(name, st.one_of(_log_uniform(lo, hi), st.sampled_from([lo, hi, 1.0])), (0.0, -1.0, NAN))


def nonneg(name, hi=1e3):
    return Arg(name, st.one_of(_log_uniform(1e-6, hi), st.sampled_from([0.0, hi])), (-1e-3, -1.0, NAN))


def open_unit(name):
    low = _log_uniform(1e-30, 0.5)
    high = _log_uniform(1e-7, 0.5).map(lambda t: float(np.float32(1.0 - t)))
    return Arg(name, st.one_of(low, high, st.sampled_from([1e-30, 0.5, float(np.float32(1 - 6e-8))])),
               (0.0, 1.0, 1.5, -0.1, NAN))


def half_open_unit(name):  # (0, 1]
    return Arg(name, st.one_of(_log_uniform(1e-6, 1.0), st.just(1.0)), (0.0, 1.5, -0.5, NAN))


def unit(name):  # [0, 1]
    return Arg(name, st.one_of(st.floats(0.0, 1.0, width=32), st.sampled_from([0.0, 1.0])), (-0.1, 1.5, NAN))


def unit_half_open(name):  # [0, 1)
    return Arg(name, st.one_of(st.floats(0.0, float(np.float32(0.99)), width=32), st.just(0.0)), (-0.1, 1.0, NAN))


def at_least(name, lower=1.0, hi=1e4):
    return Arg(name, st.one_of(_log_uniform(lower, hi), st.sampled_from([lower, hi])),
               (lower - 0.5, -1.0, NAN))


def real(name, lo=-200.0, hi=200.0):
    return Arg(name, st.floats(lo, hi, width=32), (NAN, float("inf")))


# ---------------------------------------------------------------------------------------------------- functions
@dataclasses.dataclass(frozen=True)
class Spec:
    """A function of scalar arguments (batched elementwise) and the documented range of each output."""

    name: str
    fn: Callable
    args: tuple
    lo: float = -np.inf
    hi: float = np.inf
    lo_open: bool = False  # output must be > lo (else >= lo)
    hi_open: bool = False
    eager_invalid: str = "raise"  # "nan": the function documents NaN (not ValueError) for invalid input
    rtol: float = 1e-5  # float32, same inputs: jit may fuse/reassociate (a few ulps, amplified by exp/log)
    atol: float = 1e-7
    allow_inf: bool = False  # +inf is a documented answer (e.g. no sigma reaches the target epsilon)


ORD = np.array([1.5, 2.0, 4.0, 8.0, 16.0, 32.0], np.float32)
IMG = np.linspace(0.0, 1.0, 12 * 12, dtype=np.float32).reshape(1, 12, 12)
IMG2 = np.cos(np.arange(12 * 12, dtype=np.float32)).reshape(1, 12, 12) * 0.5 + 0.5


def _pair(s):
    """Per-example batches ``x, y`` of 12 x 12 images: ``y`` moves from ``IMG`` towards ``IMG2`` as ``s`` grows."""
    s = jnp.atleast_1d(jnp.asarray(s))
    y = IMG[0] + s[:, None, None] * (IMG2[0] - IMG[0])
    return jnp.broadcast_to(IMG[0], y.shape), y


def _metric(fn, with_range=False):
    """``fn`` as a function of scalars (one example per item); the shape of ``s`` comes back."""
    if with_range:
        return lambda s, data_range: fn(*_pair(s), data_range=data_range).reshape(jnp.shape(s))
    return lambda s: fn(*_pair(s)).reshape(jnp.shape(s))


S_ARG = Arg("s", st.floats(float(np.float32(1e-3)), 1.0, width=32), ())  # the image offset (not validated: any real is valid)


SPECS = [
    # bounds.rero
    Spec("baseline_kappa_uniform_ball", bounds.baseline_kappa_uniform_ball,
         (positive("eta", 1e-3, 10.0), at_least("dim", 1.0, 1e4)), 0.0, 1.0, lo_open=True),
    Spec("baseline_kappa_gaussian", bounds.baseline_kappa_gaussian,
         (positive("eta", 1e-2, 1e2), positive("sigma", 1e-2, 1e2), at_least("dim", 1.0, 4000.0)), 0.0, 1.0,
         rtol=1e-4),
    Spec("baseline_kappa_gaussian_tail_bound", bounds.baseline_kappa_gaussian_tail_bound,
         (positive("eta"), positive("sigma"), at_least("dim", 1.0, 1e6)), 0.0, 1.0),
    Spec("rero_from_dp", bounds.rero_from_dp, (open_unit("kappa"), nonneg("eps", 100.0)), 0.0, 1.0, lo_open=True),
    Spec("rero_from_approx_dp", bounds.rero_from_approx_dp, (open_unit("kappa"), nonneg("eps", 100.0), unit("delta")),
         0.0, 1.0, lo_open=True),
    Spec("rero_from_rdp", bounds.rero_from_rdp,
         (open_unit("kappa"), nonneg("eps", 100.0), at_least("order", 1.0 + 1e-6, 1e4)), 0.0, 1.0, lo_open=True),
    Spec("rero_from_rdp_curve", lambda kappa, rdp: bounds.rero_from_rdp_curve(
        kappa, ORD, jnp.asarray(rdp)[..., None] * ORD), (open_unit("kappa"), nonneg("rdp", 100.0)),
         0.0, 1.0, lo_open=True),
    Spec("rero_from_zcdp", bounds.rero_from_zcdp, (open_unit("kappa"), nonneg("rho", 1e3)), 0.0, 1.0, lo_open=True),
    Spec("dp_from_rero", bounds.dp_from_rero, (nonneg("eps", 100.0), unit("gamma")), 0.0, 1.0),
    Spec("rero_gdp", bounds.rero_gdp, (open_unit("kappa"), nonneg("mu", 100.0)), 0.0, 1.0, lo_open=True,
         rtol=1e-4),
    # bounds.prior_free
    Spec("clip_factor", bounds.clip_factor, (nonneg("x_norm", 1e6), positive("clip_norm")), 0.0, 1.0, lo_open=True),
    Spec("effective_sigma", bounds.effective_sigma, (positive("sigma"), at_least("steps", 1.0, 1e6)), 0.0,
         lo_open=True),
    Spec("mse_lower_bound", bounds.mse_lower_bound,
         (positive("sigma", 1e-6, 1e6), positive("clip_norm", 1e-6, 1e6), at_least("steps", 1.0, 1e6)), 0.0,
         lo_open=True),
    Spec("expected_mse", bounds.expected_mse, (positive("sigma", 1e-3, 1e3), positive("clip_norm", 1e-3, 1e3),
                                               nonneg("mean_square", 1e3), half_open_unit("clip_factor"),
                                               at_least("steps", 1.0, 1e4)), 0.0),
    Spec("psnr_upper_bound", bounds.psnr_upper_bound,
         (positive("sigma"), positive("clip_norm"), positive("data_range", 1e-3, 1e3), at_least("steps", 1.0, 1e6)),
         atol=1e-4),  # dB: terms up to ~240 dB; eager takes the logs of concrete inputs in float64
    Spec("expected_ncc", bounds.expected_ncc, (nonneg("signal_variance", 1e3), half_open_unit("clip_factor"),
                                               positive("sigma", 1e-3, 1e3), positive("clip_norm", 1e-3, 1e3),
                                               at_least("steps", 1.0, 1e4)), 0.0, 1.0, rtol=1e-4),
    Spec("ncc_upper_bound", bounds.ncc_upper_bound,
         (positive("sigma", 1e-3, 1e3), at_least("dim", 1.0, 1e5), at_least("steps", 1.0, 1e4)), 0.0, 1.0,
         rtol=1e-4),
    Spec("ncc_upper_bound_dimension_free", bounds.ncc_upper_bound_dimension_free,
         (positive("sigma", 1e-3, 1e3), at_least("steps", 1.0, 1e4)), 0.0, 1.0, rtol=1e-4),
    Spec("rero_mse", bounds.rero_mse, (positive("eta", 1e-3, 1e3), positive("sigma", 1e-2, 1e2),
                                       positive("clip_norm", 1e-2, 1e2), at_least("dim", 1.0, 4000.0),
                                       at_least("steps", 1.0, 100.0)), 0.0, 1.0, rtol=1e-3, atol=1e-6),
    Spec("rero_psnr", bounds.rero_psnr, (real("eta", -50.0, 80.0), positive("sigma", 1e-2, 1e2),
                                         positive("clip_norm", 1e-2, 1e2), at_least("dim", 1.0, 4000.0),
                                         positive("data_range", 0.1, 10.0), at_least("steps", 1.0, 100.0)),
         0.0, 1.0, rtol=1e-3, atol=1e-6),
    Spec("worst_case_success", bounds.worst_case_success,
         (open_unit("kappa"), positive("sigma", 1e-2, 1e3), at_least("steps", 1.0, 1e4)), 0.0, 1.0, lo_open=True,
         rtol=1e-4),
    Spec("expected_ncc_at_clip", bounds.expected_ncc_at_clip,
         (positive("sigma", 1e-3, 1e3), at_least("dim", 2.0, 1e5), at_least("steps", 1.0, 1e4)), 0.0, 1.0,
         rtol=1e-4, atol=1e-6),
    Spec("expected_ncc_exact", bounds.expected_ncc_exact,
         (nonneg("signal_variance", 1e3), half_open_unit("clip_factor"), positive("sigma", 1e-3, 1e3),
          positive("clip_norm", 1e-3, 1e3), at_least("dim", 2.0, 1e5), at_least("steps", 1.0, 1e4)), 0.0, 1.0,
         rtol=1e-4, atol=1e-6),
    Spec("expected_psnr_exact", bounds.expected_psnr_exact,
         (positive("sigma", 1e-3, 1e3), positive("clip_norm", 1e-3, 1e3), at_least("dim", 1.0, 1e5),
          positive("data_range", 1e-2, 1e2), at_least("steps", 1.0, 1e4)), rtol=1e-4, atol=1e-4),
    # bounds.hcr (the scalar bounds; the matrix/model ones are listed in NOT_FUZZED)
    Spec("hcr_variance_bound", bounds.hcr_variance_bound,
         (real("input_shift", -10.0, 10.0), nonneg("feature_shift_sq_norm", 1e3), positive("noise_sigma", 1e-3, 1e3)),
         0.0, rtol=1e-4, atol=1e-7, allow_inf=True),  # no feature shift: no information, infinite variance
    Spec("log_hcr_variance_bound", bounds.log_hcr_variance_bound,
         (Arg("input_shift", st.floats(float(np.float32(1e-3)), 10.0, width=32), (NAN, float("inf"))),
          nonneg("feature_shift_sq_norm", 1e3), positive("noise_sigma", 1e-3, 1e3)), rtol=1e-4, atol=1e-5,
         allow_inf=True),
    # bounds.bayes_capacity
    Spec("log_bayes_capacity_gaussian", bounds.log_bayes_capacity_gaussian,
         (positive("sigma", 1e-2, 1e2), at_least("dim", 1.0, 1e4), positive("num_layers", 1e-2, 1e2)), 0.0,
         rtol=1e-4, atol=1e-5),
    Spec("log_bayes_capacity_vmf", bounds.log_bayes_capacity_vmf,
         (positive("kappa", 1e-3, 1e4), at_least("dim", 2.0, 1e4)), 0.0, rtol=1e-4, atol=5e-4),
    # ^ log C is a difference of terms of size ~p/2 log(1/kappa) (~500 here): float32 absolute error ~1e-4
    # special
    Spec("log_iv", special.log_iv, (nonneg("nu", 1e3), Arg("x", positive("x", 1e-3, 1e4).draw, (-1.0, NAN))),
         rtol=1e-4, atol=1e-5),  # x = 0 is valid but gives -inf for nu > 0: drawn from x > 0
    Spec("log_expm1", special.log_expm1, (Arg("x", positive("x", 1e-6, 1e3).draw, (-1.0, NAN)),), rtol=1e-5,
         atol=1e-6),  # x = 0 is valid but gives -inf: drawn from x > 0
    Spec("gammainc", special.gammainc, (positive("a", 1e-2, 1e6), nonneg("x", 1e6)), 0.0, 1.0, rtol=1e-4,
         atol=1e-6),
    Spec("gammaincc", special.gammaincc, (positive("a", 1e-2, 1e6), nonneg("x", 1e6)), 0.0, 1.0, rtol=1e-4,
         atol=1e-6),
    # accounting
    Spec("rdp_vmf", lambda kappa, dim: acc.rdp_vmf(kappa, dim, ORD), (positive("kappa", 1e-3, 1e3),
                                                                      at_least("dim", 2.0, 1e3)), 0.0,
         rtol=1e-3, atol=2e-3),  # documented: float32 loses ~1e-3 absolute (a difference of log-Bessel values)
    Spec("rdp_gaussian", lambda sigma: acc.rdp_gaussian(sigma, ORD), (positive("sigma", 1e-3, 1e3),), 0.0),
    Spec("rdp_subsampled_gaussian", lambda q, sigma: acc.rdp_subsampled_gaussian(q, sigma, ORD),
         (half_open_unit("q"), positive("sigma", 0.1, 1e3)), 0.0, rtol=1e-4, atol=1e-6),
    Spec("interpolate_rdp", lambda rdp: acc.interpolate_rdp([2, 3, 4], jnp.asarray(rdp)[..., None]
                                                             * jnp.asarray([2.0, 3.0, 4.0]), [1.5, 2.5, 4.0]),
         (nonneg("rdp_at_int_orders", 1e3),), 0.0),
    Spec("rdp_poisson_subsampled", lambda rdp, q: acc.rdp_poisson_subsampled(
        jnp.asarray(rdp)[..., None] * jnp.arange(2.0, 9.0), q, [1.5, 2.0, 8.0]),
         (nonneg("rdp_at_integer_orders", 10.0), half_open_unit("q")), 0.0, rtol=1e-4, atol=1e-6),
    Spec("compose_rdp", lambda rdp, count: acc.compose_rdp(jnp.asarray(rdp)[..., None] * ORD, count),
         (nonneg("rdp", 1e3), nonneg("count", 1e4)), 0.0),
    Spec("eps_from_rdp", lambda rdp, delta: acc.eps_from_rdp(ORD, jnp.asarray(rdp)[..., None] * ORD, delta),
         (nonneg("rdp", 1e2), open_unit("delta")), 0.0, rtol=1e-4, atol=1e-5),
    Spec("delta_from_rdp", lambda rdp, eps: acc.delta_from_rdp(ORD, jnp.asarray(rdp)[..., None] * ORD, eps),
         (nonneg("rdp", 1e2), nonneg("eps", 1e2)), 0.0, 1.0, rtol=1e-4, atol=1e-7),
    Spec("amplify_dp_poisson", acc.amplify_dp_poisson, (nonneg("eps", 50.0), unit("delta"), half_open_unit("q")),
         0.0, rtol=1e-4),
    Spec("kov_composition", acc.kov_composition, (nonneg("eps", 10.0), unit_half_open("delta"),
                                                  at_least("n", 1.0, 1e4), unit_half_open("delta_tilde")), 0.0,
         rtol=1e-4),
    Spec("dpsgd_epsilon", lambda sigma, q, steps, delta: acc.dpsgd_epsilon(sigma, q, steps, delta, orders=ORD),
         (positive("sigma", 0.3, 1e3), half_open_unit("q"), at_least("steps", 1.0, 1e4), open_unit("delta")), 0.0,
         rtol=1e-4, atol=1e-5),
    Spec("calibrate_sigma", lambda eps, q, steps, delta: acc.calibrate_sigma(eps, q, steps, delta, orders=ORD,
                                                                            iters=20),
         (positive("eps", 1e-2, 1e2), half_open_unit("q"), at_least("steps", 1.0, 1e3), open_unit("delta")), 0.0,
         lo_open=True, rtol=1e-4, allow_inf=True),
    # metrics (per-example values of a [1, 12, 12] image pair that moves apart as s grows)
    Spec("mse", _metric(metrics.mse), (S_ARG,), 0.0, 1.0, eager_invalid="skip"),
    Spec("mae", _metric(metrics.mae), (S_ARG,), 0.0, 1.0, eager_invalid="skip"),
    Spec("psnr", _metric(metrics.psnr, True), (S_ARG, positive("data_range", 1e-2, 1e2)), rtol=1e-4, atol=1e-4),
    Spec("ncc", _metric(metrics.ncc), (Arg("s", st.floats(0.0, float(np.float32(0.99)), width=32), ()),), -1.0, 1.0, rtol=1e-4,
         atol=1e-5, eager_invalid="skip"),
    Spec("ssim", _metric(metrics.ssim), (S_ARG,), -1.0, 1.0, rtol=1e-4, atol=1e-5, eager_invalid="skip"),
]
_SPEC = {s.name: s for s in SPECS}

# Public functions of the four modules that are not fuzzed here, and why (checked by test_every_public_function).
NOT_FUZZED = {
    "aggregate": "a dict of reductions (tests/test_metrics_edge.py)",
    "psnr_of_mean_mse": "reduces over the batch (tests/test_metrics_edge.py)",
    "classifier_kl": "takes a classifier function, no range to fuzz (against SciPy in tests/attacks/test_oracle.py)",
    "pld_tradeoff": "host-side dp_accounting bridge, not jittable",
    "rero_dpsgd_tradeoff": "host-side dp_accounting bridge, not jittable",
    "calibrate_sigma_for_rero": "host-side bisection over the PLD accountant",
    "vmf_pld": "host-side PLD construction",
    "vmf_pld_epsilon": "host-side PLD accountant",
    "vmf_epsilon": "float64-only by design (returns float64); seconds per call",
    "calibrate_vmf_kappa": "float64-only bisection over vmf_epsilon",
    "rdp_vmf_multi": "sum of rdp_vmf over blocks (rdp_vmf is fuzzed)",
    "dct_ii_matrix": "static size argument, no range to fuzz",
    "dctn_ortho": "linear map of an array (tests/bounds/test_hcr.py)",
    "idctn_ortho": "linear map of an array (tests/bounds/test_hcr.py)",
    "default_dct_axes": "static shape helper",
    "to_coordinates": "linear map of an array",
    "from_coordinates": "linear map of an array",
    "feature_rms": "array reduction",
    "dither": "random noise of an array (key-driven)",
    "dithered_accuracy": "model-level estimate (key-driven)",
    "rademacher_perturbation": "random signs (key-driven)",
    "hcr_bounds": "model-level (feature function + data)",
    "hcr_bounds_batch": "model-level (feature function + data)",
    "hcr_bounds_reference": "model-level (feature function + data)",
    "cramer_rao_bounds": "model-level (feature function + data)",
    "cramer_rao_variance_bound": "matrix input (Jacobian)",
    "jacobian_lsqr": "model-level iterative solver",
    "jacobian_rank": "model-level (feature function)",
    "lsqr": "iterative linear solver on operators",
    "ncc_samples": "Monte-Carlo draws (key-driven), static sample count",
    "ncc_cdf": "Monte-Carlo draws (key-driven), static sample count",
    "privacy_bounds": "host-side summary of fuzzed routes and the PLD accountant (tests/accounting/test_risk.py)",
    "tightest_rero": "minimum over a row of bounds (tests/accounting/test_risk.py)",
}


def _outputs(out) -> list[np.ndarray]:
    return [np.asarray(o, np.float64) for o in (out if isinstance(out, tuple) else (out,))]


@pytest.fixture(scope="module")
def compiled():
    cache = {}

    def get(spec):
        if spec.name not in cache:
            cache[spec.name] = (jax.jit(spec.fn), jax.jit(jax.vmap(spec.fn)))
        return cache[spec.name]

    return get


def _in_range(spec, o):
    lo_ok = o > spec.lo if spec.lo_open else o >= spec.lo
    hi_ok = o < spec.hi if spec.hi_open else o <= spec.hi
    return (np.isfinite(o) | (spec.allow_inf & (o == np.inf))) & lo_ok & hi_ok


def _rows(spec):
    return st.tuples(*[st.lists(a.draw, min_size=ROWS, max_size=ROWS) for a in spec.args])


@pytest.mark.parametrize("name", [s.name for s in SPECS])
def test_valid_inputs_finite_in_range_jit_vmap(name, compiled):
    spec = _SPEC[name]
    jitted, vmapped = compiled(spec)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
    @given(_rows(spec))
    def check(cols):
        args = [np.asarray(c, np.float32) for c in cols]
        COUNTS[name] += ROWS
        eager = _outputs(spec.fn(*args))
        for o in eager:
            bad = ~_in_range(spec, o)
            assert not bad.any(), (name, [a[bad.reshape(ROWS, -1).any(1)] for a in args], o[bad])
        for e, j in zip(eager, _outputs(jitted(*args))):
            np.testing.assert_allclose(j, e, rtol=spec.rtol, atol=spec.atol, err_msg=f"{name}: jit != eager")
        loop = [_outputs(spec.fn(*[a[i] for a in args])) for i in range(2)]  # the loop: 2 items, eagerly
        for k, v in enumerate(_outputs(vmapped(*args))):
            np.testing.assert_allclose(v[:2], np.stack([item[k] for item in loop]), rtol=spec.rtol,
                                       atol=spec.atol, err_msg=f"{name}: vmap != loop")

    check()


INVALID = [(s.name, i) for s in SPECS for i, a in enumerate(s.args) if a.bad]


@pytest.mark.parametrize("name,index", INVALID, ids=[f"{n}-{_SPEC[n].args[i].name}" for n, i in INVALID])
def test_invalid_input_value_error_eagerly_nan_under_jit(name, index, compiled):
    spec = _SPEC[name]
    arg = spec.args[index]
    jitted, _ = compiled(spec)

    @settings(max_examples=INVALID_EXAMPLES, deadline=None, derandomize=True)
    @given(_rows(spec), st.sampled_from(arg.bad), st.integers(0, ROWS - 1))
    def check(cols, bad_value, row):
        args = [np.asarray(c, np.float32) for c in cols]
        args[index] = args[index].copy()
        args[index][row] = bad_value
        COUNTS[f"{name}/invalid"] += 1
        if spec.eager_invalid == "raise":
            with pytest.raises(ValueError, match=arg.name):
                spec.fn(*args)
        elif spec.eager_invalid == "nan":
            for o in _outputs(spec.fn(*args)):
                assert np.isnan(o[row]).all()
        for o in _outputs(jitted(*args)):
            assert np.isnan(o[row]).all(), (name, arg.name, bad_value, o[row])
            others = np.delete(o, row, axis=0)
            assert _in_range(spec, others).all(), (name, "valid rows must stay valid", others)

    check()


@pytest.fixture(scope="module", autouse=True)
def _report_counts():
    """Prints the number of inputs tried when the file's tests are done (run with ``-s``): a report, not a test."""
    yield
    print("\nfuzz inputs tried:", sum(v for k, v in COUNTS.items() if "/" not in k), "valid,",
          sum(v for k, v in COUNTS.items() if "/" in k), "invalid,", len(SPECS), "functions")


def test_every_public_function_is_fuzzed_or_listed():
    import inspect

    public = {n for m in (acc, special, metrics) for n in m.__all__ if inspect.isfunction(getattr(m, n))}
    public |= {n for n in dir(bounds) if not n.startswith("_") and inspect.isfunction(getattr(bounds, n))}
    assert public - set(_SPEC) - set(NOT_FUZZED) == set(), "new public functions: fuzz them or list them"
    assert set(NOT_FUZZED) <= public, "NOT_FUZZED lists names that are no longer public"
