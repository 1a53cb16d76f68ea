"""Invalid accounting input: ValueError naming the argument when concrete, NaN (never a plausible number) under
jit. Each case is a reproduction from the reliability issue, where jit returned e.g. eps = 0 for sigma = NaN."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import accounting as acc

ORDERS = np.array([2.0, 4.0, 8.0, 16.0])

# (name, function of the varied arguments, valid arguments, argument index -> invalid values)
CASES = [
    ("dpsgd_epsilon", lambda s, q, t, d: acc.dpsgd_epsilon(s, q, t, d, orders=ORDERS), (1.0, 0.01, 100.0, 1e-5),
     {0: [np.nan, -1.0, 0.0], 1: [1.5, 0.0, np.nan], 2: [-5.0, 0.5], 3: [2.0, 0.0, np.nan]}),
    ("rdp_gaussian", lambda s: acc.rdp_gaussian(s, ORDERS), (1.0,), {0: [np.nan, -1.0, 0.0]}),
    ("rdp_subsampled_gaussian", lambda q, s: acc.rdp_subsampled_gaussian(q, s, ORDERS), (0.01, 1.0),
     {0: [np.nan, 1.5, 0.0], 1: [np.nan, -1.0]}),
    ("eps_from_rdp", lambda r, d: acc.eps_from_rdp(ORDERS, r, d), (np.array([0.1, 0.2, 0.4, 0.8]), 1e-5),
     {0: [np.array([0.1, -0.2, 0.4, 0.8]), np.array([0.1, np.nan, 0.4, 0.8])], 1: [2.0, 0.0, np.nan]}),
    ("delta_from_rdp", lambda r, e: acc.delta_from_rdp(ORDERS, r, e), (np.array([0.1, 0.2, 0.4, 0.8]), 1.0),
     {0: [np.array([0.1, -0.2, 0.4, 0.8])], 1: [-1.0, np.nan]}),
    ("compose_rdp", lambda r, c: acc.compose_rdp(r, c), (np.array([0.1, 0.2]), 3.0),
     {0: [np.array([0.1, -0.2])], 1: [-1.0, np.nan]}),
    ("rdp_poisson_subsampled", lambda r, q: acc.rdp_poisson_subsampled(r, q, [2.0, 3.0]),
     (np.array([0.5, 1.0]), 0.1), {0: [np.array([0.5, -1.0])], 1: [1.5, np.nan]}),
    ("amplify_dp_poisson", lambda e, d, q: acc.amplify_dp_poisson(e, d, q), (1.0, 1e-5, 0.01),
     {0: [-1.0, np.nan], 1: [1.5, np.nan], 2: [0.0, 1.5]}),
    ("kov_composition", lambda e, d, n, dt: acc.kov_composition(e, d, n, dt), (0.1, 1e-6, 10.0, 1e-5),
     {0: [-1.0, np.nan], 1: [1.0, np.nan], 2: [0.0, np.nan], 3: [1.0, -0.1]}),
]
PARAMS = [(name, fn, valid, i, bad) for name, fn, valid, table in CASES for i, bads in table.items() for bad in bads]
ARG_NAMES = {"dpsgd_epsilon": ["sigma", "q", "steps", "delta"], "rdp_gaussian": ["sigma"],
             "rdp_subsampled_gaussian": ["q", "sigma"], "eps_from_rdp": ["rdp", "delta"],
             "delta_from_rdp": ["rdp", "eps"], "compose_rdp": ["rdp", "count"],
             "rdp_poisson_subsampled": ["rdp_at_integer_orders", "q"], "amplify_dp_poisson": ["eps", "delta", "q"],
             "kov_composition": ["eps", "delta", "n", "delta_tilde"]}


def _leaves(out):
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("name,fn,valid,i,bad", PARAMS, ids=[f"{p[0]}-{p[3]}-{k}" for k, p in enumerate(PARAMS)])
def test_invalid_raises_eagerly_and_is_nan_under_jit(name, fn, valid, i, bad):
    args = list(valid)
    for leaf in _leaves(jax.jit(fn)(*args)):  # the valid point is finite under jit
        assert np.all(np.isfinite(leaf)), (name, leaf)
    args[i] = bad
    with pytest.raises(ValueError, match=ARG_NAMES[name][i]):
        fn(*args)
    for leaf in _leaves(jax.jit(fn)(*[jnp.asarray(a) for a in args])):
        assert np.all(np.isnan(leaf)), (name, i, bad, leaf)


def test_pld_accountant_refuses_fractional_steps():
    with pytest.raises(ValueError, match="steps must be finite whole numbers"):
        acc.dpsgd_epsilon(1.0, 0.01, 100.5, 1e-5, accountant="pld")


@pytest.mark.parametrize("iters", [0, -3, 2.5, True])
def test_calibrate_sigma_needs_positive_integer_iters(iters):
    with pytest.raises(ValueError, match="iters must be an integer >= 1"):
        acc.calibrate_sigma(1.0, 0.01, 100, 1e-5, orders=ORDERS, iters=iters)


def test_calibrate_sigma_invalid_traced_target_is_nan():
    f = jax.jit(lambda e: acc.calibrate_sigma(e, 0.01, 100, 1e-5, orders=ORDERS, iters=8))
    assert np.isnan(f(-1.0)) and np.isfinite(f(1.0))


@pytest.mark.parametrize(
    "call, names",
    [
        (lambda: acc.amplify_dp_poisson(np.ones(2), np.full(3, 0.1), np.full(3, 0.1)), "eps (2,), delta (3,)"),
        (lambda: acc.compose_rdp(np.ones((2, 3)), np.ones(4)), "count (4,), rdp batch (2,)"),
    ],
)
def test_shape_mismatch_is_a_value_error_naming_the_arguments(call, names):
    # Was JAX's TypeError ("incompatible shapes for broadcasting") with no argument names.
    with pytest.raises(ValueError, match=re.escape(names)):
        call()


@pytest.mark.parametrize("kappas,dims,order", [([-5.0, 5.0], [50.0, 50.0], 2.0), ([np.inf, 5.0], [50.0, 50.0], 2.0),
                                               ([5.0, 5.0], [1.0, 50.0], 2.0), ([5.0, np.nan], [50.0, 50.0], 2.0),
                                               ([5.0, 5.0], [50.0, 50.0], 0.5)])
def test_rdp_vmf_multi_invalid_block_is_nan_under_jit(x64, kappas, dims, order):
    """Regression: rdp_vmf_multi discarded its guard mask, so under jit kappas = [-5, 5] gave the RDP of [5, 5]
    (3.83 at order 2) where rdp_vmf(-5, ...) gives NaN. One invalid block (or order) makes the sum NaN; a valid
    batch row beside it keeps its value, the naive sum of the single-block RDPs."""
    f = jax.jit(lambda k, p, o: acc.rdp_vmf_multi(k, p, o))
    batch_k = jnp.array([[5.0, 5.0], kappas])  # [2, R]: a valid row, then the invalid one
    batch_p = jnp.array([[50.0, 50.0], dims])
    got = np.asarray(f(batch_k, batch_p, jnp.array([order])))  # [2, 1]
    assert np.isnan(got[1, 0])
    if order > 1:
        naive = sum(float(acc.rdp_vmf(5.0, 50.0, [order])[0]) for _ in range(2))
        np.testing.assert_allclose(got[0, 0], naive, rtol=1e-12)  # same float64 operations per block
    else:
        assert np.isnan(got[0, 0])  # the order is invalid for every row
