"""HCR bounds (recon_jax.bounds.hcr, .cramer_rao, .dct, .hcr_eval; recon_jax.mechanisms.dithering): closed form
vs mpmath, DCT vs SciPy, Cramer-Rao limit, Alg. 1, dithering."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import scipy.fft

from recon_jax.bounds import (
    cramer_rao_bounds,
    cramer_rao_variance_bound,
    dct_ii_matrix,
    dctn_ortho,
    dithered_accuracy,
    from_coordinates,
    hcr_bounds,
    hcr_bounds_batch,
    hcr_bounds_reference,
    jacobian_rank,
    hcr_variance_bound,
    idctn_ortho,
    log_hcr_variance_bound,
    rademacher_perturbation,
    to_coordinates,
)
from recon_jax.mechanisms import dither, feature_rms

# ---------------------------------------------------------------------------------------------------------
# Closed form.

_SHIFTS = [1e-200, 1e-8, 0.37, 1.0, 1e100]
_RATIOS = [1e-300, 1e-30, 1e-8, 0.5, 1.0, 30.0, 700.0, 1e4]  # ||delta||^2 / sigma^2
_SIGMAS = [1e-6, 1.0, 1e6]


def _mp_log_bound(d, s, sigma):
    mpmath.mp.dps = 50
    d, s, sigma = mpmath.mpf(d), mpmath.mpf(s), mpmath.mpf(sigma)
    return mpmath.log(d**2 / mpmath.expm1(s / sigma**2))


@pytest.mark.parametrize("sigma", _SIGMAS)
def test_closed_form_matches_mpmath_float64(x64, sigma):
    d, r = np.meshgrid(_SHIFTS, _RATIOS, indexing="ij")
    s = r * sigma**2
    # XLA on CPU flushes subnormal inputs to zero; keep s a normal float64.
    keep_cols = np.all(s >= 1e-300, axis=0)
    d, s = d[:, keep_cols], s[:, keep_cols]
    got_log = np.asarray(log_hcr_variance_bound(d, s, sigma))
    ref_log = np.array([[float(_mp_log_bound(dd, ss, sigma)) for dd, ss in zip(row_d, row_s)] for row_d, row_s in zip(d, s)])
    # Log-space evaluation: absolute error in the log ~ a few ulps of its magnitude (values up to ~1e4).
    np.testing.assert_allclose(got_log, ref_log, rtol=1e-13, atol=1e-12)
    got = np.asarray(hcr_variance_bound(d, s, sigma))
    representable = np.abs(ref_log) < 700
    ref = np.exp(np.where(representable, ref_log, 0.0))
    np.testing.assert_allclose(got[representable], ref[representable], rtol=1e-11)
    assert np.all(np.isfinite(got_log))


def test_closed_form_float32_no_overflow_or_underflow():
    # Delta^2 = 1e40 and expm1(100) both overflow float32; the ratio 3.72e-4 does not.
    ref = float(mpmath.mpf(1e20) ** 2 / mpmath.expm1(100))
    # float32 log-space evaluation: relative error ~ |log value| x eps32 ~ 1e-5.
    np.testing.assert_allclose(float(hcr_variance_bound(1e20, 100.0, 1.0)), ref, rtol=5e-5)
    # Delta^2 = 1e-50 underflows float32; Delta^2 / expm1(1e-30) = 1e-20 does not.
    np.testing.assert_allclose(float(hcr_variance_bound(1e-25, 1e-30, 1.0)), 1e-20, rtol=5e-5)
    # Tiny ratio: the Cramer-Rao regime Delta^2 sigma^2 / s.
    np.testing.assert_allclose(float(hcr_variance_bound(1.0, 1e-30, 1.0)), 1e30, rtol=1e-5)


def test_closed_form_edge_cases(x64):
    assert float(hcr_variance_bound(0.0, 1.0, 1.0)) == 0.0  # no input shift: vacuous
    assert float(hcr_variance_bound(0.0, 0.0, 1.0)) == 0.0
    assert float(hcr_variance_bound(1.0, 0.0, 1.0)) == np.inf  # undetectable shift
    assert float(hcr_variance_bound(1.0, np.inf, 1.0)) == 0.0
    assert float(hcr_variance_bound(-2.0, 1.0, 1.0)) == float(hcr_variance_bound(2.0, 1.0, 1.0))


def test_closed_form_jit_vmap_grad(x64):
    d = jnp.array([0.1, 1.0, 3.0])
    s = jnp.array([1e-20, 0.3, 50.0])
    eager = hcr_variance_bound(d, s, 0.7)
    jitted = jax.jit(lambda a, b: hcr_variance_bound(a, b, 0.7))(d, s)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(jitted))
    vm = jax.vmap(lambda a, b: hcr_variance_bound(a, b, 0.7))(d, s)
    np.testing.assert_allclose(np.asarray(vm), np.asarray(eager), rtol=1e-14)
    grads = jax.grad(lambda a, b, g: jnp.sum(jnp.log(hcr_variance_bound(a, b, g))), argnums=(0, 1, 2))(d, s, 0.7)
    for g in grads:
        assert np.all(np.isfinite(np.asarray(g)))
    # d/dDelta log bound = 2 / Delta; d/ds log bound = -exp(t) / expm1(t) / sigma^2.
    np.testing.assert_allclose(np.asarray(grads[0]), 2.0 / np.asarray(d), rtol=1e-12)
    t = np.asarray(s) / 0.49
    np.testing.assert_allclose(np.asarray(grads[1]), -np.exp(t) / np.expm1(t) / 0.49, rtol=1e-8)


@pytest.mark.parametrize(
    "args,match",
    [((1.0, 1.0, 0.0), "noise_sigma"), ((1.0, 1.0, -1.0), "noise_sigma"), ((1.0, -1.0, 1.0), "feature_shift"),
     ((np.inf, 1.0, 1.0), "input_shift"), ((1.0, np.nan, 1.0), "feature_shift"), ((1.0, 1.0, np.inf), "noise_sigma")],
)
def test_closed_form_invalid_raises_and_nan_under_jit(args, match):
    with pytest.raises(ValueError, match=match):
        hcr_variance_bound(*args)
    out = jax.jit(hcr_variance_bound)(*[jnp.asarray(a, jnp.float32) for a in args])
    assert np.isnan(float(out))
    assert np.isnan(float(hcr_variance_bound(*args, validate=False)))


# ---------------------------------------------------------------------------------------------------------
# DCT.


@pytest.mark.parametrize("shape,axes", [((7,), None), ((5, 6), None), ((28, 28, 1), (0, 1)), ((4, 6, 3), (1,)), ((3, 4, 5), (-1, 0))])
def test_dct_matches_scipy(x64, shape, axes):
    x = np.random.default_rng(0).normal(size=shape)
    ref = scipy.fft.dctn(x, axes=axes, norm="ortho")
    got = np.asarray(dctn_ortho(x, axes))
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)  # float64 dense products: ~1e-15 error
    back = np.asarray(idctn_ortho(ref, axes))
    np.testing.assert_allclose(back, scipy.fft.idctn(ref, axes=axes, norm="ortho"), atol=1e-12)
    np.testing.assert_allclose(back, x, atol=1e-12)


def test_dct_matrix_orthogonal_and_float32():
    c = np.asarray(dct_ii_matrix(28), np.float64)
    np.testing.assert_allclose(c @ c.T, np.eye(28), atol=1e-6)  # float32 entries
    x = np.random.default_rng(1).normal(size=(28, 28)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(dctn_ortho(x)), scipy.fft.dctn(x.astype(np.float64), norm="ortho"), atol=1e-4)
    with pytest.raises(ValueError, match="axes"):
        dctn_ortho(x, (0, 2))
    with pytest.raises(ValueError, match="n must"):
        dct_ii_matrix(0)



def test_dct_float32_small_coefficients_keep_full_precision():
    """A smooth float32 image (DC 28, every other coefficient ~1e-3) keeps its small DCT coefficients to float32
    accuracy, under jit as inside the HCR bounds. On a GPU, JAX's default precision rounds float32 matmul
    operands to TF32 (2**-11), which puts ~1e-3 errors into exactly these coefficients; the transform runs at
    ``Precision.HIGHEST`` so that it does not (this test guards that wherever the suite runs on an accelerator)."""
    rng = np.random.default_rng(2)
    x = (1.0 + 1e-3 * rng.normal(size=(28, 28))).astype(np.float32)
    ref = scipy.fft.dctn(x.astype(np.float64), norm="ortho")
    got = np.asarray(jax.jit(dctn_ortho)(x))
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5)  # float32: ~2e-6 here; TF32 operands: ~1e-3
    q = np.linalg.qr(rng.normal(size=(16, 16)))[0].astype(np.float32)
    v = (1.0 + 1e-3 * rng.normal(size=16)).astype(np.float32)
    coords = np.asarray(jax.jit(lambda a: to_coordinates(a, q))(v))
    np.testing.assert_allclose(coords, q.astype(np.float64) @ v.astype(np.float64), rtol=0, atol=2e-5)
    back = np.asarray(jax.jit(lambda c: from_coordinates(c, q))(coords))
    np.testing.assert_allclose(back, v, rtol=0, atol=2e-5)

# ---------------------------------------------------------------------------------------------------------
# Cramer-Rao.


def test_cramer_rao_variance_matches_dense_inverse(x64):
    rng = np.random.default_rng(3)
    j = rng.normal(size=(12, 5))
    ref = 0.3**2 * np.diag(np.linalg.inv(j.T @ j))
    np.testing.assert_allclose(np.asarray(cramer_rao_variance_bound(j, 0.3)), ref, rtol=1e-10)
    jitted = jax.jit(cramer_rao_variance_bound)
    np.testing.assert_allclose(np.asarray(jitted(j, 0.3)), ref, rtol=1e-10)
    assert np.all(np.isnan(np.asarray(jitted(j, -1.0))))  # invalid sigma under jit: NaN, not a number


def test_cramer_rao_rank_deficient(x64):
    # Coordinate 2 never reaches the features: unidentifiable (inf); 0 and 1 are identifiable.
    j = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [1.0, 1.0, 0.0]])
    out = np.asarray(cramer_rao_variance_bound(j, 1.0))
    ref = np.diag(np.linalg.inv(j[:, :2].T @ j[:, :2]))
    np.testing.assert_allclose(out[:2], ref, rtol=1e-10)
    assert out[2] == np.inf
    # Only the sum of two coordinates is observed: neither coordinate alone is identifiable.
    out2 = np.asarray(cramer_rao_variance_bound(np.array([[1.0, 1.0]]), 1.0))
    assert np.all(np.isinf(out2))
    with pytest.raises(ValueError, match="noise_sigma"):
        cramer_rao_variance_bound(j, 0.0)
    with pytest.raises(ValueError, match="2-D"):
        cramer_rao_variance_bound(np.ones(3), 1.0)


def _tanh_net(seed=0, d_in=(3, 2), d_hidden=9, d_out=10):
    rng = np.random.default_rng(seed)
    n = int(np.prod(d_in))
    w1 = jnp.asarray(rng.normal(size=(d_hidden, n)) / np.sqrt(n))
    w2 = jnp.asarray(rng.normal(size=(d_out, d_hidden)) / np.sqrt(d_hidden))
    b1 = jnp.asarray(rng.normal(size=d_hidden) * 0.3)

    def f(x):
        return w2 @ jnp.tanh(w1 @ x.reshape(-1) + b1)

    x0 = jnp.asarray(rng.normal(size=d_in) * 0.5)
    return f, x0


def test_float32_bounds_do_not_depend_on_the_matmul_precision(own_precision_emulation):
    """HCR (Alg. 1 and the reference mode) and Cramer-Rao bounds in float32 are bitwise the same where a backend
    rounds float32 products (emulated TF32): no product in them, the feature map's included, is left at default
    precision (none is rounded, so the emulated format does not matter; bfloat16 would round the same products).
    At default precision an H100 had moved the median HCR bound from 0.285 to 0.104 (7b5334f). The same feature
    map outside the bounds does move under the emulation (the check can fail)."""
    from recon_jax import testing

    f, x0 = _tanh_net(seed=3)
    x0 = x0.astype(jnp.float32)
    xs = jnp.stack([x0, -x0])
    key = jax.random.key(4)

    def bounds():
        return [np.asarray(b) for b in (
            jax.jit(lambda x: hcr_bounds(f, x, 0.1, key, num_restarts=2, num_rounds=2, perturbation_size=1e-2))(x0),
            jax.jit(lambda v: hcr_bounds_reference(f, v, 0.1, key, 2, 2, 1e-2))(xs),
            cramer_rao_bounds(f, x0, 0.1))]

    exact = bounds()
    assert all(b.dtype == np.float32 and np.all(np.isfinite(b)) for b in exact)
    features = np.asarray(jax.jit(f)(x0))
    record = []
    with testing.emulate_matmul_precision("tensorfloat32", record=record):
        rounded = bounds()
        assert not record  # no product inside the bounds is left to the default precision
        assert not np.array_equal(np.asarray(jax.jit(f)(x0)), features)
    for a, b in zip(rounded, exact):
        np.testing.assert_array_equal(a, b)


def test_hcr_tends_to_cramer_rao_per_coordinate(x64):
    """Tygert eq. (18): with Delta = t (J^T J)^{-1} e_i and delta from an exact forward pass, the HCR bound
    for coordinate i tends to sigma^2 [(J^T J)^{-1}]_ii as t -> 0 (error O(t))."""
    f, x0 = _tanh_net()
    sigma = 0.05
    jac = np.asarray(jax.jacfwd(f)(x0)).reshape(10, -1)
    fisher_inv = np.linalg.inv(jac.T @ jac)
    cr = np.asarray(cramer_rao_variance_bound(jac, sigma))
    np.testing.assert_allclose(cr, sigma**2 * np.diag(fisher_inv), rtol=1e-10)
    errors = []
    for t in [1e-1, 1e-2, 1e-3, 1e-4]:
        deltas = t * fisher_inv  # column i: Delta for coordinate i
        hcr = []
        for i in range(6):
            shift = jnp.asarray(deltas[:, i]).reshape(x0.shape)
            s = jnp.sum((f(x0 + shift) - f(x0)) ** 2)
            hcr.append(float(hcr_variance_bound(deltas[i, i], s, sigma)))
        errors.append(np.max(np.abs(np.array(hcr) / cr - 1.0)))
    assert errors[-1] < 1e-3
    assert all(e2 < e1 for e1, e2 in zip(errors, errors[1:]))  # monotone approach


def test_alg1_tends_to_cramer_rao_along_least_informative_direction(x64):
    """Alg. 1 with inverse-iteration refinement, in the eigenbasis of the Fisher information: the bound for
    the least-informative coordinate tends to the Cramer-Rao value sigma / s_min as the size -> 0, and in
    the DCT basis no coordinate exceeds its Cramer-Rao bound in the limit (Cauchy-Schwarz)."""
    f, x0 = _tanh_net(seed=1)
    sigma = 0.05
    jac = np.asarray(jax.jacfwd(f)(x0)).reshape(10, -1)
    _, svals, vt = np.linalg.svd(jac)
    cr_min_dir = sigma / svals[-1]
    key = jax.random.key(0)
    search = jax.jit(lambda size: hcr_bounds(f, x0, sigma, key, num_restarts=2, num_rounds=12, perturbation_size=size,
                                             coordinates=vt, refine="inverse", atol=1e-12, btol=1e-12, iter_lim=50))
    errors = []
    for size in [1e-1, 1e-2, 1e-3]:
        b = np.asarray(search(size)).reshape(-1)
        errors.append(abs(b[-1] / cr_min_dir - 1.0))
    assert errors[-1] < 5e-3
    assert errors[-1] < errors[0]
    cr_dct = np.asarray(cramer_rao_bounds(f, x0, sigma, coordinates="dct"))
    b_dct = np.asarray(jax.jit(lambda: hcr_bounds(f, x0, sigma, key, num_restarts=4, num_rounds=3,
                                                  perturbation_size=1e-4, atol=1e-12, btol=1e-12))())
    assert np.all(b_dct <= cr_dct * (1 + 1e-3))
    assert np.max(b_dct / cr_dct) > 0.1  # and the search finds a non-trivial bound


# ---------------------------------------------------------------------------------------------------------
# Algorithm 1 against an independent dense implementation.


def _naive_alg1(w, x0, sigma, key, restarts, rounds, size):
    """Alg. 1 for a linear feature map a(x) = W x with dense least squares and SciPy's DCT."""
    m = w.shape[0]
    best = np.zeros(x0.shape)
    for r in range(restarts):
        g = np.asarray(jax.random.normal(jax.random.fold_in(key, r), (m,), jnp.float64))
        z = g * size * sigma / np.sqrt(m)
        target = np.linalg.norm(z)
        for _ in range(rounds):
            z = z * target / np.linalg.norm(z)
            eps = np.linalg.lstsq(w, z, rcond=None)[0].reshape(x0.shape)
            delta = w @ eps.ravel()
            s = np.sum(delta**2)
            coef = scipy.fft.dctn(eps, norm="ortho")
            best = np.maximum(best, np.sqrt(coef**2 / np.expm1(s / sigma**2)))
            z = delta
    return best


def test_alg1_matches_dense_reference_on_linear_map(x64):
    rng = np.random.default_rng(4)
    w = rng.normal(size=(20, 12)) * np.logspace(0, -1, 12)  # column scaling: mild conditioning
    x0 = np.zeros((3, 4))
    key = jax.random.key(5)
    got = jax.jit(lambda: hcr_bounds(lambda v: jnp.asarray(w) @ v.reshape(-1), jnp.asarray(x0), 0.2, key,
                                     num_restarts=3, num_rounds=2, perturbation_size=1e-2, atol=1e-13, btol=1e-13,
                                     coordinates="dct"))()
    ref = _naive_alg1(w, x0, 0.2, key, 3, 2, 1e-2)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-6)  # LSQR converged to 1e-13 vs dense lstsq


def test_batch_equals_loop_and_info(x64):
    f, _ = _tanh_net(seed=2)
    xs = jnp.asarray(np.random.default_rng(0).normal(size=(3, 3, 2)))
    key = jax.random.key(1)
    kw = dict(num_restarts=2, num_rounds=2, perturbation_size=1e-2, coordinates="pixel")
    batched, info = jax.jit(lambda v: hcr_bounds_batch(f, v, 0.1, key, example_ids=jnp.array([7, 8, 9]),
                                                       return_info=True, **kw))(xs)
    assert info.lsqr_itn.shape == (3, 2, 2) and info.best_input_shift.shape == (3, 3, 2)
    single_fn = jax.jit(lambda x, k: hcr_bounds(f, x, 0.1, k, **kw))
    for i in range(3):
        single = single_fn(xs[i], jax.random.fold_in(key, 7 + i))
        # float64; batched vs single matvecs round differently, amplified by the LSQR recurrences.
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(single), rtol=1e-8)
    # ||delta|| / sigma is close to the requested size (rounds after the first rescale z exactly).
    np.testing.assert_allclose(np.asarray(info.feature_shift_norm[:, :, -1]) / 0.1, 1e-2, rtol=0.5)


def test_hcr_bounds_invalid_arguments():
    f = lambda v: 2.0 * v  # noqa: E731
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="noise_sigma"):
        hcr_bounds(f, jnp.zeros(2), 0.0, key)
    with pytest.raises(ValueError, match="num_restarts"):
        hcr_bounds(f, jnp.zeros(2), 1.0, key, num_restarts=0)
    with pytest.raises(ValueError, match="perturbation_size"):
        hcr_bounds(f, jnp.zeros(2), 1.0, key, perturbation_size=-1.0)
    with pytest.raises(ValueError, match="refine"):
        hcr_bounds(f, jnp.zeros(2), 1.0, key, refine="power")
    with pytest.raises(ValueError, match="coordinates"):
        hcr_bounds(f, jnp.zeros(2), 1.0, key, coordinates="wavelet")


def test_hcr_searches_give_nan_for_traced_invalid_arguments():
    """Under jit an invalid sigma or perturbation size is NaN everywhere, not the bound 0 that the scoring gives a
    round it cannot score (a traced negative sigma used to come back as a zero bound); valid traced values still give
    the eager bound."""
    f = lambda v: 2.0 * v  # noqa: E731
    key = jax.random.key(0)
    kw = dict(num_restarts=2, num_rounds=2, coordinates="pixel")

    def single(sigma, size):
        return hcr_bounds(f, jnp.zeros(3), sigma, key, perturbation_size=size, **kw)

    def reference(sigma, size):
        return hcr_bounds_reference(f, jnp.zeros((2, 3)), sigma, key, perturbation_size=size, **kw)

    bad_pairs = [(-1.0, 1e-2), (0.0, 1e-2), (np.inf, 1e-2), (np.nan, 1e-2), (1.0, -1e-2), (1.0, 0.0), (1.0, np.inf)]
    for fn in (single, reference):
        jitted = jax.jit(fn)
        eager = np.asarray(fn(1.0, 1e-2))
        assert np.all(np.isfinite(eager)) and np.all(eager > 0)
        np.testing.assert_allclose(np.asarray(jitted(1.0, 1e-2)), eager, rtol=1e-5)
        for sigma, size in bad_pairs:
            out = np.asarray(jitted(sigma, size))
            assert np.all(np.isnan(out)), (fn.__name__, sigma, size, out)


def _relu_net32(seed=1, n_in=16, width=64, cond=1e3):
    """A float32 ReLU net R^16 -> R^64, input [4, 4], whose first layer's columns are scaled from 1 down to 1/cond:
    at x0 the Jacobian has full column rank and condition number ~2e3 (seed 1), so the Cramer-Rao bounds are
    finite and the search has ill-conditioned least-squares problems to solve."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(width, n_in)) * np.logspace(0, -np.log10(cond), n_in) / np.sqrt(n_in)
    w1, w2 = jnp.asarray(w1, jnp.float32), jnp.asarray(rng.normal(size=(width, width)) / np.sqrt(width), jnp.float32)
    b1 = jnp.asarray(rng.normal(size=width) * 0.3, jnp.float32)

    def f(x):
        return jax.nn.relu(w2 @ jax.nn.relu(w1 @ x.reshape(-1) + b1))

    return f, jnp.asarray(rng.normal(size=(4, n_in // 4)), jnp.float32)


def test_alg1_float32_jit_equals_eager():
    """Eager and jitted Alg. 1 in float32 agree (STYLE: jit equals eager). They compile the search differently
    (eager runs the linearisation op by op and compiles the rounds on their own; jit fuses the whole program), so
    their products round differently. Before LSQR reorthogonalized, its float32 Golub-Kahan vectors lost
    orthogonality, each solve ran 29-46 iterations for 16 unknowns and stopped where the rounding led: the two
    returned bounds up to 75% apart (median 34%) here (float64: 13%, median 8e-4). Now float32 agrees to 7e-5
    (float64: 2e-12). Tolerance 2e-3: a float32 solve is determined to ~cond(J) u = 2e3 x 6e-8 ~ 1e-4, and each
    round's delta carries the forward passes' rounding, u ||a(x)|| against ||delta|| ~ 1e-3."""
    f, x0 = _relu_net32()
    jac = np.asarray(jax.jacfwd(f)(x0)).reshape(64, -1)
    assert np.linalg.matrix_rank(jac) == 16 and 1e3 < np.linalg.cond(jac) < 1e4
    key = jax.random.key(1)
    kw = dict(num_restarts=4, num_rounds=4, perturbation_size=1e-2, return_info=True)
    eager, info = hcr_bounds(f, x0, 0.1, key, **kw)
    jitted, info_jit = jax.jit(lambda x: hcr_bounds(f, x, 0.1, key, **kw))(x0)
    assert eager.dtype == jitted.dtype == jnp.float32 and np.all(np.asarray(eager) > 0)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=2e-3)
    assert np.max(np.asarray(info.lsqr_itn)) <= 16  # as in exact arithmetic: at most n iterations
    np.testing.assert_array_equal(np.asarray(info_jit.lsqr_itn), np.asarray(info.lsqr_itn))


def test_alg1_input_shift_is_the_perturbation_evaluated():
    """Delta is the shift the forward pass sees, (x + eps) - x, not LSQR's eps, which x + eps rounds: far from
    the origin (float32 spacing 6e-5 at 1000, shifts 3e-4 to 3e-3) the two differ by up to 10%. For the linear
    map a(v) = W (v - c) at x = c, a(x + Delta) = W Delta exactly, so each bound is the closed form at Delta
    (float64 reference; rtol 1e-5: float32 products W Delta)."""
    gen = np.random.default_rng(3)
    w = gen.normal(size=(8, 5))
    c = jnp.asarray(1000.0 + gen.uniform(size=5), jnp.float32)
    f = lambda v: jnp.asarray(w, jnp.float32) @ (v - c)  # noqa: E731
    sigma = 1.0
    got, info = jax.jit(lambda x: hcr_bounds(f, x, sigma, jax.random.key(2), num_restarts=1, num_rounds=1,
                                             perturbation_size=1e-2, coordinates="pixel", return_info=True))(c)
    shift = np.asarray(info.best_input_shift)
    x0 = np.asarray(c)
    np.testing.assert_array_equal((x0 + shift) - x0, shift)  # float32 arithmetic: the shift is representable at x
    assert np.min(np.abs(shift)) > 4 * np.spacing(np.float32(1000.0))  # a few spacings: x + eps rounds visibly
    s = np.sum((w @ shift.astype(np.float64)) ** 2)
    np.testing.assert_allclose(np.asarray(got), np.abs(shift) / np.sqrt(np.expm1(s / sigma**2)), rtol=1e-5)


def test_alg1_promotes_float32_input_to_the_feature_dtype(x64):
    """A float32 x through a float64 feature map (x64 on) is computed in float64, as if x were float64: x's
    values are float64 values and the map promotes them anyway. (The jvp was linearised at the float32 x and got
    float64 tangents from LSQR: "linearized function called on tangent values inconsistent with the original
    primal values".) Same float64 computation: rtol 1e-12."""
    f, x0 = _tanh_net(seed=2)
    assert x0.dtype == jnp.float64
    x32 = x0.astype(jnp.float32)
    key = jax.random.key(3)
    kw = dict(num_restarts=2, num_rounds=2, perturbation_size=1e-2, coordinates="pixel")
    got = hcr_bounds(f, x32, 0.1, key, **kw)
    ref = hcr_bounds(f, x32.astype(jnp.float64), 0.1, key, **kw)
    assert got.dtype == jnp.float64 and np.all(np.asarray(got) > 0)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-12)
    xs32 = jnp.stack([x32, -x32])
    batch = jax.jit(lambda v: hcr_bounds_batch(f, v, 0.1, key, **kw))(xs32)
    assert batch.dtype == jnp.float64 and batch.shape == xs32.shape
    ref_mode = hcr_bounds_reference(f, xs32, 0.1, key, 2, 2, 1e-2, coordinates="pixel")
    ref_mode64 = hcr_bounds_reference(f, xs32.astype(jnp.float64), 0.1, key, 2, 2, 1e-2, coordinates="pixel")
    assert ref_mode.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(ref_mode), np.asarray(ref_mode64), rtol=1e-12)


# ---------------------------------------------------------------------------------------------------------
# Dithering utilities.


def test_dither_statistics_and_accuracy():
    key = jax.random.key(0)
    feats = jnp.asarray(np.random.default_rng(0).normal(size=(2000, 16)) * 3.0, jnp.float32)
    np.testing.assert_allclose(float(feature_rms(feats)), np.sqrt(np.mean(np.asarray(feats) ** 2)), rtol=1e-5)
    noise = np.asarray(dither(key, feats, 0.5) - feats)
    # n = 32,000 N(0, 0.5^2) draws: the sample std has SE 0.5 / sqrt(2 n) = 0.002 and the sample mean 0.5 / sqrt(n)
    # = 0.0028; each within 5 SE (the fixed 0.01 used before was 5 SE for the std but 3.6 SE for the mean).
    n = noise.size
    assert abs(noise.std() - 0.5) < 5 * 0.5 / np.sqrt(2 * n) and abs(noise.mean()) < 5 * 0.5 / np.sqrt(n)
    labels = jnp.argmax(feats[:, :4], axis=1)
    clf = lambda a: a[:, :4]  # noqa: E731
    clean, noisy0 = dithered_accuracy(clf, feats, labels, 0.0, key, num_draws=2)
    assert float(clean) == 1.0 and float(noisy0) == 1.0
    _, noisy = dithered_accuracy(clf, feats, labels, 3.0, key, num_draws=3)
    assert 0.25 < float(noisy) < 0.95  # heavy noise hurts, but above chance (4 classes)
    with pytest.raises(ValueError, match="noise_sigma"):
        dither(key, feats, -1.0)
    with pytest.raises(ValueError, match="num_draws"):
        dithered_accuracy(clf, feats, labels, 1.0, key, num_draws=0)


@pytest.mark.parametrize("sigma", [-1.0, float("inf"), float("nan")])
def test_dither_traced_invalid_sigma_gives_nan(sigma):
    out = jax.jit(lambda s: dither(jax.random.key(0), jnp.ones(3), s))(sigma)
    assert np.isnan(np.asarray(out)).all()


def test_feature_rms_of_no_entries_raises():
    with pytest.raises(ValueError, match="features"):
        feature_rms(jnp.zeros((0, 3)))


@pytest.mark.parametrize("value", [1e30, 1e-30, 3e38, 1e-37])  # not subnormals: XLA CPU flushes them to 0
def test_feature_rms_neither_overflows_nor_underflows_in_float32(value):
    feats = jnp.full((2, 3), value, jnp.float32)
    ref = np.sqrt(np.mean(np.asarray(feats, np.float64) ** 2))  # float64 NumPy: no overflow or underflow
    np.testing.assert_allclose(float(feature_rms(feats)), ref, rtol=1e-6)  # a few float32 roundings
    mixed = jnp.asarray([1e30, -2e30, 0.0, 5e29], jnp.float32)
    np.testing.assert_allclose(float(jax.jit(feature_rms)(mixed)),
                               np.sqrt(np.mean(np.asarray(mixed, np.float64) ** 2)), rtol=1e-6)


@pytest.mark.parametrize("features", [jnp.array([1, 2, 3]), np.array([1, 2, 3]), jnp.array([True, False])])
def test_dither_refuses_non_floating_features(features):
    with pytest.raises(ValueError, match="features must be floating-point"):
        dither(jax.random.key(0), features, 0.5)


def test_rademacher_perturbation_moves_each_mode_by_its_bound(x64):
    x = np.random.default_rng(2).normal(size=(6, 5, 1))
    bound = np.random.default_rng(3).uniform(size=(6, 5, 1))
    out = np.asarray(rademacher_perturbation(jax.random.key(0), x, bound))
    diff = scipy.fft.dctn(out, axes=(0, 1), norm="ortho") - scipy.fft.dctn(x, axes=(0, 1), norm="ortho")
    np.testing.assert_allclose(np.abs(diff), bound, atol=1e-12)
    assert 0 < np.sum(diff > 0) < diff.size  # both signs occur


# ---------------------------------------------------------------------------------------------------------
# Algorithm 1 as the reference implementation runs it.


def _stop_margin(jac, rhs, k, atol, btol):
    """How near SciPy's LSQR stopping tests 1 and 2 are to their thresholds after ``k`` iterations: the smaller
    |log(test / threshold)| of the two (0 on a threshold). Its own formulas, from the norms SciPy returns."""
    import scipy.sparse.linalg

    out = scipy.sparse.linalg.lsqr(jac, rhs, atol=0.0, btol=0.0, iter_lim=k)
    rnorm, anorm, arnorm, xnorm = out[3], out[5], out[7], out[8]
    bnorm = np.linalg.norm(rhs)
    test1, rtol = rnorm / bnorm, btol + atol * anorm * xnorm / bnorm
    test2 = arnorm / (anorm * rnorm)
    return min(abs(np.log(test1 / rtol)), abs(np.log(test2 / atol)))


def _library_start(key, restart, batch, features, size, sigma):
    """The reference mode's starting feature perturbations of one restart (its documented key scheme:
    ``fold_in(fold_in(key, item), restart)``), scaled to norm about ``size * sigma``."""
    g = np.stack([np.asarray(jax.random.normal(jax.random.fold_in(jax.random.fold_in(key, i), restart), (features,)))
                  for i in range(batch)])
    return g * size * sigma / np.sqrt(features)


def _naive_reference(w, c, xs, z0, sigma, num_rounds, atol_factor=2e-2, btol=1e-8, iters=None):
    """An independent NumPy/SciPy transcription of the reference loop for a(x) = tanh(W x + c).

    Explicit block-diagonal Jacobian at the perturbed inputs, one scipy.sparse.linalg.lsqr over the batch with
    atol = atol_factor * min ||z_b||, perturbation measured from x, last round scored (pixel coordinates). With
    ``iters`` (one count per round), each LSQR runs exactly that many iterations instead (atol = btol = 0), and the
    second return holds, per round, SciPy's own stopping count on that same system and how near its stopping tests
    were to their thresholds at the earlier of the two counts (:func:`_stop_margin`).
    """
    import scipy.linalg
    import scipy.sparse.linalg

    def feats(v):
        return np.tanh(v @ w.T + c)

    a0 = feats(xs)
    target = np.linalg.norm(z0, axis=1)
    pert, z = xs.copy(), z0.copy()
    itns = []
    for _ in range(num_rounds):
        z = z / np.linalg.norm(z, axis=1)[:, None] * target[:, None]
        jac = scipy.linalg.block_diag(*[(1 - np.tanh(w @ p + c) ** 2)[:, None] * w for p in pert])
        atol = atol_factor * target.min()
        if iters is None:
            delta, _, itn = scipy.sparse.linalg.lsqr(jac, z.ravel(), atol=atol, btol=btol)[:3]
            itns.append(itn)
        else:
            k = int(iters[len(itns)])
            delta = scipy.sparse.linalg.lsqr(jac, z.ravel(), atol=0.0, btol=0.0, iter_lim=k)[0]
            own = scipy.sparse.linalg.lsqr(jac, z.ravel(), atol=atol, btol=btol)[2]
            itns.append((own, _stop_margin(jac, z.ravel(), min(own, k), atol, btol)))
        pert = xs + delta.reshape(xs.shape)
        z = feats(pert) - a0
    eps = pert - xs
    return np.abs(eps) / np.sqrt(np.expm1(np.sum(z**2, axis=1) / sigma**2))[:, None], itns


@pytest.mark.parametrize("atol_factor", [2e-2, 1e-9])
def test_reference_mode_matches_naive_transcription(x64, atol_factor):
    gen = np.random.default_rng(0)
    w, c = gen.normal(size=(7, 5)), gen.normal(size=7) * 0.3
    xs = gen.normal(size=(3, 5))
    sigma, size, rounds, restarts = 0.7, 0.05, 4, 3
    key = jax.random.key(5)
    got, info = hcr_bounds_reference(lambda v: jnp.tanh(jnp.asarray(w) @ v + jnp.asarray(c)), jnp.asarray(xs), sigma,
                                     key, restarts, rounds, size, coordinates="pixel", atol_factor=atol_factor,
                                     return_info=True)
    # Same starting draws as the library (its documented key scheme), then the independent loop per restart.
    ref, itns = np.zeros_like(xs), []
    for r in range(restarts):
        z0 = _library_start(key, r, 3, 7, size, sigma)
        if atol_factor > 1e-6:  # the values below at the library's iteration counts: its stopping is checked apart
            bound, itn = _naive_reference(w, c, xs, z0, sigma, rounds, atol_factor, iters=np.asarray(info.lsqr_itn)[r])
        else:
            bound, itn = _naive_reference(w, c, xs, z0, sigma, rounds, atol_factor=atol_factor)
        ref = np.maximum(ref, bound)
        itns.append(itn)
    if atol_factor > 1e-6:  # SciPy's stopping decision on each system the library solved (its path, round by round)
        # These solves stop at 14-18 iterations of a 21 x 15 system, past the point where LSQR's test quantities are
        # roundoff (they jump by factors from one iteration to the next), so which decisions differ by one depends on
        # the CPU (8 to 9 of the 12 agreed on the EPYC machines seen). One iteration more or less moves a bound by
        # ~1%, so the values are compared at equal counts; the stopping rule itself is checked where the solves stop
        # well before that (test_reference_mode_stops_where_scipy_does).
        own, lib = np.array([[o for o, _ in per_restart] for per_restart in itns]), np.asarray(info.lsqr_itn)
        assert np.abs(lib - own).max() <= 1 and np.mean(lib == own) >= 0.5, (lib, own)
    # Converged solves (tiny atol) agree to roundoff; with the reference's loose atol both stop at the same
    # iteration of a 21 x 15 system whose unconverged iterate carries ~1e-5 relative roundoff (the two apply the
    # operator in different orders), compounded over 4 rounds.
    rtol = 1e-7 if atol_factor < 1e-6 else 3e-3
    np.testing.assert_allclose(np.asarray(got), ref, rtol=rtol, atol=1e-12)
    assert info.lsqr_itn.shape == (restarts, rounds) and info.lsqr_istop.shape == (restarts, rounds)
    assert info.feature_shift_norm.shape == (restarts, 3)
    if atol_factor > 1e-6:
        assert np.all(np.isin(np.asarray(info.lsqr_istop), (1, 2)))  # converged (btol / atol test), not the limit
        # 21 equations, 15 unknowns: z is not in the range of J, the least-squares residual stays below ||z||.
        assert np.all((np.asarray(info.lsqr_rel_residual) >= 0) & (np.asarray(info.lsqr_rel_residual) <= 1))


@pytest.mark.parametrize("atol_factor", [0.2, 0.5])
def test_reference_mode_stops_where_scipy_does(x64, atol_factor):
    """LSQR's stopping rule in the reference mode against SciPy's on the same systems (the library's path): a
    tanh map with 60 unknowns per solve (3 x 20 pixels, 3 x 30 features) whose solves stop after 8-20 iterations,
    where the test quantities are accurate. Every count equals SciPy's, except where SciPy's stopping test sat
    within 0.1% of its threshold (on this machine the nearest sat 4-5% from it, and all 18 counts agreed)."""
    gen = np.random.default_rng(0)
    w, c = gen.normal(size=(30, 20)) / np.sqrt(20), gen.normal(size=30) * 0.3
    xs = gen.normal(size=(3, 20))
    sigma, size, rounds, restarts, key = 0.7, 0.05, 3, 3, jax.random.key(5)
    _, info = hcr_bounds_reference(lambda v: jnp.tanh(jnp.asarray(w) @ v + jnp.asarray(c)), jnp.asarray(xs), sigma,
                                   key, restarts, rounds, size, coordinates="pixel", atol_factor=atol_factor,
                                   return_info=True)
    lib, own, margin = np.asarray(info.lsqr_itn), np.zeros((restarts, rounds), int), np.zeros((restarts, rounds))
    for r in range(restarts):
        z0 = _library_start(key, r, 3, 30, size, sigma)
        _, itn = _naive_reference(w, c, xs, z0, sigma, rounds, atol_factor, iters=lib[r])
        own[r], margin[r] = zip(*itn)
    assert np.all(np.isin(np.asarray(info.lsqr_istop), (1, 2))) and lib.max() <= 30  # converged, well before 60
    assert np.all((lib == own) | (margin < 1e-3)), (lib, own, margin)


def test_reference_mode_below_cramer_rao_for_linear_map(x64):
    # For a linear map expm1(t) >= t and Cauchy-Schwarz give HCR <= Cramer-Rao in every coordinate.
    gen = np.random.default_rng(1)
    w = jnp.asarray(gen.normal(size=(8, 6)))
    xs = jnp.asarray(gen.normal(size=(4, 6)))
    b = hcr_bounds_reference(lambda v: w @ v, xs, 0.5, jax.random.key(0), 6, 3, 1e-3, coordinates="pixel")
    cr = cramer_rao_bounds(lambda v: w @ v, xs[0], 0.5, coordinates="pixel")
    assert np.all(np.asarray(b) > 0) and np.all(np.asarray(b) <= np.asarray(cr)[None] * (1 + 1e-6))


def test_reference_mode_invalid_arguments():
    f = lambda v: v  # noqa: E731
    with pytest.raises(ValueError, match="batch axis"):
        hcr_bounds_reference(f, jnp.zeros(3), 1.0, jax.random.key(0))
    with pytest.raises(ValueError, match="atol_factor"):
        hcr_bounds_reference(f, jnp.zeros((2, 3)), 1.0, jax.random.key(0), atol_factor=-1.0)
    with pytest.raises(ValueError, match="noise_sigma"):
        hcr_bounds_reference(f, jnp.zeros((2, 3)), 0.0, jax.random.key(0))


def test_jacobian_rank_matches_numpy(x64):
    gen = np.random.default_rng(2)
    w = gen.normal(size=(10, 6))
    x = gen.normal(size=6)
    f = lambda v: jax.nn.relu(jnp.asarray(w) @ v)  # noqa: E731
    dense = (w @ x > 0)[:, None] * w  # the ReLU Jacobian: dead units zero their rows
    assert int(jacobian_rank(f, jnp.asarray(x))) == np.linalg.matrix_rank(dense)
    low = jnp.asarray(gen.normal(size=(10, 2)) @ gen.normal(size=(2, 6)))
    assert int(jacobian_rank(lambda v: low @ v, jnp.asarray(x))) == 2


# ---------------------------------------------------------------------------------------------------------
# rcond (audit t15).


@pytest.mark.parametrize("rcond", [1.0, 2.0, float("nan"), -1.0, float("inf")])
def test_cramer_rao_rcond_outside_unit_interval_raises(rcond):
    """rcond >= 1 or NaN counted every singular value as zero: every bound +inf (an 'unidentifiable' claim)."""
    j = jnp.array([[2.0, 0.0], [0.0, 0.5]])  # exact Cramer-Rao variances 1 / s^2: [0.25, 4.0]
    with pytest.raises(ValueError, match="rcond must be"):
        cramer_rao_variance_bound(j, 1.0, rcond=rcond)
    with pytest.raises(ValueError, match="rcond must be"):
        cramer_rao_bounds(lambda v: j @ v, jnp.zeros(2), 1.0, coordinates="pixel", rcond=rcond)
    with pytest.raises(ValueError, match="rcond must be"):
        jacobian_rank(lambda v: j @ v, jnp.zeros(2), rcond=rcond)
    assert np.isnan(np.asarray(jax.jit(lambda r: cramer_rao_variance_bound(j, 1.0, rcond=r))(rcond))).all()
    np.testing.assert_allclose(np.asarray(cramer_rao_variance_bound(j, 1.0, rcond=0.0)), [0.25, 4.0], rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# coordinates=<matrix> must be orthogonal (audit t13).


@pytest.mark.parametrize("q", [2.0 * np.eye(3), np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
                               np.where(np.eye(3) > 0, np.nan, 0.0)])
def test_non_orthogonal_coordinates_raise(q):
    """Q = 2 I gave Cramer-Rao 0.5 (should be 1 = sigma for the identity map) and HCR values doubled."""
    f, x = (lambda v: v), jnp.zeros(3)
    with pytest.raises(ValueError, match="coordinates must be an orthogonal matrix"):
        to_coordinates(x, q)
    with pytest.raises(ValueError, match="coordinates must be an orthogonal matrix"):
        from_coordinates(x, q)
    with pytest.raises(ValueError, match="coordinates must be an orthogonal matrix"):
        cramer_rao_bounds(f, x, 1.0, coordinates=q)
    with pytest.raises(ValueError, match="coordinates must be an orthogonal matrix"):
        hcr_bounds(f, x, 1.0, jax.random.key(0), num_restarts=1, num_rounds=1, coordinates=q)
    with pytest.raises(ValueError, match="coordinates must be an orthogonal matrix"):
        hcr_bounds_reference(f, x[None], 1.0, jax.random.key(0), num_restarts=1, num_rounds=1, coordinates=q)


def test_orthogonal_coordinates_accepted_float32_and_float64():
    # A float32 QR factor (max |Q Q^T - I| ~ 4e-7 measured) and an integer permutation pass; for the identity map
    # every orthonormal basis gives the Cramer-Rao std bound sigma (NumPy: (Q Q^T)^-1 = I).
    q32, _ = jnp.linalg.qr(jax.random.normal(jax.random.key(1), (64, 64)))
    assert q32.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(cramer_rao_bounds(lambda v: v, jnp.zeros(64), 0.5, coordinates=q32)), 0.5,
                               rtol=1e-4)  # float32 SVD of a rotated identity
    perm = np.eye(4, dtype=np.int32)[[2, 0, 3, 1]]
    assert to_coordinates(jnp.arange(4.0), perm).tolist() == [2.0, 0.0, 3.0, 1.0]
    with jax.enable_x64(True):
        q64 = np.linalg.qr(np.random.default_rng(0).normal(size=(16, 16)))[0]
        np.testing.assert_allclose(np.asarray(cramer_rao_bounds(lambda v: 3.0 * v, jnp.zeros(16), 1.0,
                                                                coordinates=q64)), 1 / 3, rtol=1e-12)
        # float64 tolerance 100 sqrt(16) eps = 9e-13: a float32-rounded Q (deviation ~1e-7) is refused there
        with pytest.raises(ValueError, match="coordinates must be an orthogonal matrix"):
            to_coordinates(jnp.zeros(16), q64 * (1 + 1e-7))


# ---------------------------------------------------------------------------------------------------------
# Feature shifts rounded away (audit t8).

_SHIFTED = (lambda v: v + 1000.0)  # J = I: the Cramer-Rao std bound is sigma in every coordinate
_ERASED = dict(num_restarts=2, num_rounds=2, perturbation_size=1e-2, coordinates="pixel")  # ||delta|| ~ 1e-5 < ulp(1000)


def test_alg1_erased_feature_shift_is_not_an_infinite_bound():
    """float32 rounded a(x + Delta) - a(x) to exactly 0 (||Delta|| ~ 1e-5 against ulp(1000) = 6e-5) and the closed
    form turned that into +inf for every coordinate, where the true (Cramer-Rao) limit is sigma = 1e-3."""
    x, sigma = jnp.zeros(4), 1e-3
    with pytest.raises(ValueError, match="perturbation_size too small for float32"):
        hcr_bounds(_SHIFTED, x, sigma, jax.random.key(0), **_ERASED)
    with pytest.raises(ValueError, match="perturbation_size too small for float32"):
        hcr_bounds_reference(_SHIFTED, x[None], sigma, jax.random.key(0), **_ERASED)
    with pytest.raises(ValueError, match="perturbation_size too small for float32"):
        hcr_bounds_reference(_SHIFTED, x[None], sigma, jax.random.key(0), **{**_ERASED, "num_rounds": 1})
    traced = jax.jit(lambda v: hcr_bounds(_SHIFTED, v, sigma, jax.random.key(0), **_ERASED))(x)
    assert np.isnan(np.asarray(traced)).all()  # no bound obtained: NaN, never inf
    batch = hcr_bounds_batch(_SHIFTED, jnp.zeros((2, 4)), sigma, jax.random.key(0), **_ERASED)
    assert np.isnan(np.asarray(batch)).all()
    ref = jax.jit(lambda v: hcr_bounds_reference(_SHIFTED, v, sigma, jax.random.key(0), **{**_ERASED,
                                                                                           "num_rounds": 1}))(x[None])
    assert np.isnan(np.asarray(ref)).all()


def test_alg1_resolvable_shift_same_setting_float64_below_cramer_rao(x64):
    # The same search in float64 resolves the shift: finite positive bounds at most the Cramer-Rao value sigma
    # (HCR <= Cramer-Rao for a linear map: Delta_i^2 / expm1(||J Delta||^2 / sigma^2) <= sigma^2 Delta_i^2 / ||Delta||^2).
    x, sigma = jnp.zeros(4, jnp.float64), 1e-3
    for out in (hcr_bounds(_SHIFTED, x, sigma, jax.random.key(0), **_ERASED),
                hcr_bounds_reference(_SHIFTED, x[None], sigma, jax.random.key(0), **{**_ERASED, "num_rounds": 1})[0]):
        out = np.asarray(out)
        assert np.all(np.isfinite(out)) and np.all(out > 0) and np.all(out <= sigma * (1 + 1e-9)), out
