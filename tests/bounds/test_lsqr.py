"""LSQR (recon_jax.bounds.lsqr) against scipy.sparse.linalg.lsqr on explicit matrices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse.linalg as spla

from recon_jax.bounds import jacobian_lsqr, lsqr


def _matrix(rng, m, n, cond):
    """Random m x n matrix with singular values log-spaced from 1 down to 1/cond."""
    u, _ = np.linalg.qr(rng.normal(size=(m, m)))
    v, _ = np.linalg.qr(rng.normal(size=(n, n)))
    k = min(m, n)
    s = np.logspace(0.0, -np.log10(cond), k)
    return u[:, :k] @ np.diag(s) @ v[:, :k].T


def _solve(a, b, **kw):
    a = jnp.asarray(a)
    # The operator's products at full precision: LSQR's own arithmetic is under test, and at default precision a
    # backend that rounds float32 products (TF32, bfloat16) would apply a different, rounded operator (the float32
    # test's solution moved by 2e-3 relative under TF32 emulation). Float64 products are exact everywhere anyway.
    hi = jax.lax.Precision.HIGHEST
    return lsqr(lambda v: jnp.matmul(a, v, precision=hi), lambda u: jnp.matmul(a.T, u, precision=hi), jnp.asarray(b),
                **kw)


@pytest.mark.parametrize(
    "m,n,cond,damp",
    [
        (40, 25, 10.0, 0.0),  # well conditioned, overdetermined
        (25, 40, 10.0, 0.0),  # underdetermined: minimum-norm solution
        (40, 25, 1e4, 0.0),  # ill conditioned
        (40, 25, 1e4, 0.3),  # ill conditioned, damped
        (30, 30, 1e3, 1e-2),  # square, lightly damped
    ],
)
def test_matches_scipy_float64(x64, m, n, cond, damp):
    rng = np.random.default_rng(int(cond) + m + n)
    a = _matrix(rng, m, n, cond)
    b = rng.normal(size=m)
    kw = dict(damp=damp, atol=1e-10, btol=1e-10, iter_lim=400)
    ref = spla.lsqr(a, b, **kw)
    res = jax.jit(lambda bb: _solve(a, bb, **kw))(b)
    x_ref, istop, itn, r1, r2, anorm, acond, arnorm, xnorm = ref[:9]
    # Same algorithm in the same precision; the iterates differ only by rounding (different summation
    # order in the matvecs), which the Krylov recurrences amplify by up to ~cond: observed ~1e-11 relative
    # at cond 10, so tolerance 1e-9 * cond relative to max|x|.
    tol = 1e-9 * cond
    np.testing.assert_allclose(np.asarray(res.x), x_ref, rtol=0, atol=tol * np.max(np.abs(x_ref)) + 1e-12)
    assert int(res.istop) == istop
    assert abs(int(res.itn) - itn) <= max(2, itn // 10)  # stopping test crossed within ~10% of itn
    np.testing.assert_allclose(float(res.r1norm), r1, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(float(res.r2norm), r2, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(float(res.xnorm), xnorm, rtol=1e-6)
    # ||A||_F and cond estimates accumulate over iterations: compare loosely.
    np.testing.assert_allclose(float(res.anorm), anorm, rtol=0.05)
    # And against the exact (damped) least-squares solution from a dense solver.
    aug = np.vstack([a, damp * np.eye(n)])
    x_exact = np.linalg.lstsq(aug, np.concatenate([b, np.zeros(n)]), rcond=None)[0]
    np.testing.assert_allclose(np.asarray(res.x), x_exact, atol=1e-6 * cond * np.max(np.abs(x_exact)))


def test_matches_scipy_severely_ill_conditioned_iteration_limit(x64):
    rng = np.random.default_rng(7)
    a = _matrix(rng, 30, 30, 1e10)
    b = rng.normal(size=30)
    kw = dict(atol=1e-14, btol=1e-14, conlim=1e12, iter_lim=15)
    ref = spla.lsqr(a, b, **kw)
    res = _solve(a, b, **kw)
    assert int(res.istop) == ref[1] == 7 and int(res.itn) == ref[2] == 15
    # cond 1e10: rounding differences are amplified strongly even after 15 iterations (observed ~1e-5).
    np.testing.assert_allclose(np.asarray(res.x), ref[0], rtol=0, atol=1e-4 * np.max(np.abs(ref[0])))
    np.testing.assert_allclose(float(res.r1norm), ref[3], rtol=1e-6)


def test_conlim_stop_matches_scipy(x64):
    rng = np.random.default_rng(3)
    a = _matrix(rng, 30, 20, 1e8)
    b = rng.normal(size=30)
    kw = dict(atol=1e-14, btol=1e-14, conlim=1e3, iter_lim=100)
    ref = spla.lsqr(a, b, **kw)
    res = _solve(a, b, **kw)
    assert int(res.istop) == ref[1] == 3
    # The condition estimate crosses conlim at SciPy's iteration or one off: which one depends on the summation
    # order of the matvecs (summing each float64 product in two halves moves it from 10 to 9; a GPU's BLAS sums
    # in its own order).
    assert abs(int(res.itn) - ref[2]) <= 1


def test_float32_usable():
    rng = np.random.default_rng(1)
    a = _matrix(rng, 50, 20, 10.0).astype(np.float32)
    b = rng.normal(size=50).astype(np.float32)
    res = _solve(a, b, atol=1e-6, btol=1e-6)
    assert res.x.dtype == jnp.float32
    x_exact = np.linalg.lstsq(a.astype(np.float64), b.astype(np.float64), rcond=None)[0]
    # float32 with cond 10: ~1e-5 relative is what single precision allows.
    np.testing.assert_allclose(np.asarray(res.x), x_exact, rtol=0, atol=1e-4 * np.max(np.abs(x_exact)))


def test_vmap_equals_loop_each_stops_on_its_own(x64):
    rng = np.random.default_rng(2)
    conds = [3.0, 1e2, 1e4, 1e6]
    mats = np.stack([_matrix(rng, 20, 12, c) for c in conds])
    bs = rng.normal(size=(4, 20))
    kw = dict(atol=1e-9, btol=1e-9, iter_lim=200)

    def one(a, b):
        hi = jax.lax.Precision.HIGHEST  # float64: exact everywhere; stated for symmetry with _solve
        return lsqr(lambda v: jnp.matmul(a, v, precision=hi), lambda u: jnp.matmul(a.T, u, precision=hi), b, **kw)

    batched = jax.jit(jax.vmap(one))(jnp.asarray(mats), jnp.asarray(bs))
    single_fn = jax.jit(one)
    itns = []
    for i in range(4):
        single = single_fn(jnp.asarray(mats[i]), jnp.asarray(bs[i]))
        scale = np.max(np.abs(np.asarray(single.x)))
        # Same stopping rule, so the same iteration up to one where the problem is well conditioned: the batched
        # and single matvecs sum in different orders on some backends (a GPU; on a CPU, summing the products in
        # two halves moved one lane from 18 to 17), which can move the step at which a stopping test is crossed
        # (and then which test fires first). At cond 1e6 rounding perturbs the Lanczos recurrence itself: on an
        # H100 that lane stopped at 44 iterations batched against 40 alone, both by a convergence test.
        if conds[i] <= 1e4:
            assert abs(int(batched.itn[i]) - int(single.itn)) <= 1
        assert int(batched.istop[i]) in (1, 2) and int(single.istop) in (1, 2)  # converged, not the iteration limit
        if int(batched.itn[i]) == int(single.itn):
            assert int(batched.istop[i]) == int(single.istop)
            # Batched and single matvecs round differently; amplified by up to cond (see above).
            np.testing.assert_allclose(np.asarray(batched.x[i]), np.asarray(single.x), rtol=0,
                                       atol=1e-9 * conds[i] * scale)
        # Either way, each lane solves its own problem to the stopping rule's accuracy (atol = btol = 1e-9, times
        # the condition number): against the dense least-squares solution, whichever iteration it stopped at.
        x_exact = np.linalg.lstsq(mats[i], bs[i], rcond=None)[0]
        for got in (np.asarray(batched.x[i]), np.asarray(single.x)):
            np.testing.assert_allclose(got, x_exact, rtol=0, atol=1e-8 * conds[i] * scale)
        itns.append(int(single.itn))
    assert len(set(itns)) > 1  # the lanes genuinely stopped at different iterations


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reorthogonalize_float32_follows_exact_arithmetic(seed):
    """float32, 64 x 16, cond 1e3: with reorthogonalization LSQR stops within n = 16 iterations, as in exact
    arithmetic, at the least-squares solution to what float32 determines (~cond u = 6e-5 relative; observed
    <= 2.1e-5; tolerance 2e-4). Without it the Golub-Kahan vectors lose orthogonality and the same solve runs
    past 2n iterations (observed 62-75), its solution up to 2e-2 off at seed 0."""
    rng = np.random.default_rng(seed)
    a = _matrix(rng, 64, 16, 1e3).astype(np.float32)
    b = rng.normal(size=64).astype(np.float32)
    kw = dict(atol=1e-6, btol=1e-6, iter_lim=200)
    ortho = jax.jit(lambda bb: _solve(a, bb, reorthogonalize=True, **kw))(b)
    plain = jax.jit(lambda bb: _solve(a, bb, **kw))(b)
    assert ortho.x.dtype == jnp.float32 and int(ortho.istop) in (1, 2)
    assert int(ortho.itn) <= 16 < 32 < int(plain.itn)
    x_exact = np.linalg.lstsq(a.astype(np.float64), b.astype(np.float64), rcond=None)[0]
    np.testing.assert_allclose(np.asarray(ortho.x), x_exact, rtol=0, atol=2e-4 * np.linalg.norm(x_exact))
    # vmapped (lanes stopping at their own iterations) equals one at a time
    bs = np.stack([b, rng.normal(size=64).astype(np.float32)])
    lanes = jax.jit(jax.vmap(lambda bb: _solve(a, bb, reorthogonalize=True, **kw)))(bs)
    np.testing.assert_allclose(np.asarray(lanes.x[0]), np.asarray(ortho.x), rtol=0,
                               atol=2e-4 * np.linalg.norm(x_exact))


def test_zero_rhs_and_zero_operator(x64):
    a = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)))
    res = _solve(a, jnp.zeros(5))
    assert int(res.istop) == 0 and int(res.itn) == 0
    np.testing.assert_array_equal(np.asarray(res.x), 0.0)
    res0 = _solve(jnp.zeros((5, 3)), jnp.ones(5))  # A^T b = 0
    assert int(res0.istop) == 0
    np.testing.assert_array_equal(np.asarray(res0.x), 0.0)


def test_jacobian_lsqr_matches_explicit_jacobian(x64):
    rng = np.random.default_rng(5)
    w1 = jnp.asarray(rng.normal(size=(8, 6)))
    w2 = jnp.asarray(rng.normal(size=(10, 8)))

    def fn(x):  # input [2, 3] -> features [10]
        return w2 @ jnp.tanh(w1 @ x.reshape(-1))

    x0 = jnp.asarray(rng.normal(size=(2, 3)))
    b = jnp.asarray(rng.normal(size=10))
    res = jacobian_lsqr(fn, x0, b, atol=1e-12, btol=1e-12)
    assert res.x.shape == (2, 3)
    jac = np.asarray(jax.jacfwd(fn)(x0)).reshape(10, 6)
    ref = spla.lsqr(jac, np.asarray(b), atol=1e-12, btol=1e-12)[0]
    np.testing.assert_allclose(np.asarray(res.x).ravel(), ref, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("x_dtype,b_dtype", [("float32", "float64"), ("float32", "float32"), ("float64", "float32")])
def test_jacobian_lsqr_promotes_to_the_common_dtype(x64, x_dtype, b_dtype):
    """A float32 point or right-hand side with a float64 ``fn`` (x64 on) solves in float64, as if both were
    float64 (before: "linearized function called on tangent values inconsistent with the original primal values",
    or a cotangent dtype TypeError). The float32 values are float64 values: the same float64 solve, so rtol 1e-12
    against the all-float64 solve; against SciPy on the explicit Jacobian, the tolerance of the float64 test above."""
    rng = np.random.default_rng(6)
    w1 = jnp.asarray(rng.normal(size=(8, 6)))
    w2 = jnp.asarray(rng.normal(size=(10, 8)))

    def fn(x):  # float64 weights: float64 output whatever x's dtype
        return w2 @ jnp.tanh(w1 @ x.reshape(-1))

    x0 = jnp.asarray(rng.normal(size=(2, 3))).astype(x_dtype)
    b = jnp.asarray(rng.normal(size=10)).astype(b_dtype)
    res = jacobian_lsqr(fn, x0, b, atol=1e-12, btol=1e-12)
    assert res.x.dtype == jnp.float64 and res.x.shape == (2, 3)
    x64_, b64 = x0.astype(jnp.float64), b.astype(jnp.float64)
    ref64 = jacobian_lsqr(fn, x64_, b64, atol=1e-12, btol=1e-12)
    np.testing.assert_allclose(np.asarray(res.x), np.asarray(ref64.x), rtol=1e-12, atol=0)
    jac = np.asarray(jax.jacfwd(fn)(x64_)).reshape(10, 6)
    ref = spla.lsqr(jac, np.asarray(b64), atol=1e-12, btol=1e-12)[0]
    np.testing.assert_allclose(np.asarray(res.x).ravel(), ref, rtol=1e-7, atol=1e-9)
    jitted = jax.jit(lambda v, r: jacobian_lsqr(fn, v, r, atol=1e-12, btol=1e-12).x)(x0, b)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(res.x), rtol=1e-10, atol=0)  # compiled: reassociated


@pytest.mark.parametrize(
    "kw,match",
    [({"damp": -1.0}, "damp"), ({"atol": -1e-3}, "atol"), ({"btol": float("nan")}, "btol"),
     ({"conlim": 0.0}, "conlim"), ({"iter_lim": -1}, "iter_lim")],
)
def test_invalid_arguments_raise(kw, match):
    a = jnp.eye(3)
    with pytest.raises(ValueError, match=match):
        _solve(a, jnp.ones(3), **kw)
