"""recon_jax.testing: the emulated reduced-precision products round exactly what a GPU / TPU rounds at default
precision, and nothing else. References: the operands rounded by hand with lax.reduce_precision and multiplied at
full precision (not the interception under test)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from recon_jax import testing

HI = lax.Precision.HIGHEST


def _rounded(x, fmt):
    e, m = testing.FORMATS[fmt]
    return lax.reduce_precision(x, exponent_bits=e, mantissa_bits=m)


@pytest.mark.parametrize("fmt", ["tensorfloat32", "bfloat16"])
def test_rounds_default_precision_products_like_the_backend(own_precision_emulation, fmt):
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.normal(size=(5, 7)), jnp.float32)
    b = jnp.asarray(rng.normal(size=(7, 3)), jnp.float32)
    img = jnp.asarray(rng.normal(size=(2, 6, 6, 3)), jnp.float32)
    ker = jnp.asarray(rng.normal(size=(3, 3, 3, 4)), jnp.float32)
    conv = lambda u, v, **kw: lax.conv_general_dilated(u, v, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                                      **kw)
    matmul = jax.jit(lambda u, v: u @ v)
    before = np.asarray(matmul(a, b))  # traced and compiled outside the context: must not be reused inside
    ra, rb = _rounded(a, fmt), _rounded(b, fmt)
    loss = lambda u: jnp.sum(jnp.sin(u @ b))
    record = []
    with testing.emulate_matmul_precision(fmt, record=record):
        assert testing.active() == fmt and testing.default_matmul_eps() == 2.0 ** -(testing.FORMATS[fmt][1] + 1)
        inside = np.asarray(matmul(a, b))
        einsum = np.asarray(jnp.einsum("ij,jk->ik", a, b))
        batched = np.asarray(jax.vmap(lambda r: r @ b)(a))
        grad = np.asarray(jax.grad(loss)(a))
        convolved = np.asarray(conv(img, ker))
        pinned = np.asarray(jnp.matmul(a, b, precision=HI))
        with jax.default_matmul_precision("highest"):
            pinned_by_context = np.asarray(jax.jit(lambda u, v: u @ v)(a, b))
        with jax.enable_x64(True):
            a64 = jnp.asarray(rng.normal(size=(5, 7)))
            float64 = np.asarray(a64 @ a64.T)
            float64_ref = np.asarray(jnp.matmul(a64, a64.T, precision=HI))
        with pytest.raises(RuntimeError, match="do not nest"):
            with testing.emulate_matmul_precision(fmt):
                pass
    assert testing.active() is None
    expected = np.asarray(jnp.matmul(ra, rb, precision=HI))
    np.testing.assert_array_equal(inside, expected)
    np.testing.assert_array_equal(einsum, expected)
    np.testing.assert_array_equal(batched, expected)
    assert not np.array_equal(inside, before)  # the rounding is visible at these sizes
    # the backward product rounds its operands (the cotangent and b) too; float32 summation order aside (1e-6)
    ct = jnp.cos(jnp.matmul(ra, rb, precision=HI))
    np.testing.assert_allclose(grad, np.asarray(jnp.matmul(_rounded(ct, fmt), rb.T, precision=HI)), rtol=1e-6)
    np.testing.assert_array_equal(convolved, np.asarray(conv(_rounded(img, fmt), _rounded(ker, fmt), precision=HI)))
    np.testing.assert_array_equal(pinned, np.asarray(jnp.matmul(a, b, precision=HI)))
    np.testing.assert_array_equal(pinned_by_context, pinned)
    np.testing.assert_array_equal(float64, float64_ref)
    np.testing.assert_array_equal(np.asarray(matmul(a, b)), before)  # exact again after the context
    names = {r[0] for r in record}
    assert names == {"dot_general", "conv_general_dilated"}, names
    assert all(r[2].startswith(__file__) for r in record), [r[2] for r in record if not r[2].startswith(__file__)]


def test_exact_matrix_vector_option(own_precision_emulation):
    rng = np.random.default_rng(1)
    m = jnp.asarray(rng.normal(size=(6, 5)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(5,)), jnp.float32)
    row = v[None]  # [1, 5]: one example's forward pass
    with testing.emulate_matmul_precision("tensorfloat32", exact_matrix_vector=True):
        mv, rv, mm = np.asarray(m @ v), np.asarray(row @ m.T), np.asarray(m @ m.T)
    np.testing.assert_array_equal(mv, np.asarray(jnp.matmul(m, v, precision=HI)))
    np.testing.assert_array_equal(rv, np.asarray(jnp.matmul(row, m.T, precision=HI)))
    r = _rounded(m, "tensorfloat32")
    np.testing.assert_array_equal(mm, np.asarray(jnp.matmul(r, r.T, precision=HI)))


def test_rounds_at_and_eps_outside_the_context():
    assert testing.rounds_at(None) == (True, True)
    assert testing.rounds_at((HI, lax.Precision.DEFAULT)) == (False, True)
    assert testing.rounds_at(lax.DotAlgorithmPreset.F32_F32_F32) == (False, False)
    assert testing.rounds_at(lax.DotAlgorithmPreset.TF32_TF32_F32) == (True, True)
    expected = 2.0**-24 if jax.default_backend() == "cpu" else {"gpu": 2.0**-11}.get(jax.default_backend(), 2.0**-8)
    if testing.active() is None:
        assert testing.default_matmul_eps() == expected
    with jax.default_matmul_precision("highest"):
        assert testing.active() is not None or testing.default_matmul_eps() == 2.0**-24
    with pytest.raises(ValueError, match="fmt"):
        with testing.emulate_matmul_precision("float16"):
            pass
