"""Metrics on empty batches, empty aggregates and invalid data_range (reliability issue, item 5)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import metrics


@pytest.mark.parametrize("fn", [metrics.mse, metrics.mae, metrics.psnr, metrics.ncc, metrics.ssim])
def test_empty_batch_gives_empty_result(fn):
    out = fn(jnp.zeros((0, 12, 12)), jnp.zeros((0, 12, 12)))  # was ZeroDivisionError
    assert out.shape == (0,)


def test_psnr_of_mean_mse_empty_batch_is_an_error():
    with pytest.raises(ValueError, match="empty batch"):
        metrics.psnr_of_mean_mse(jnp.zeros((0, 4)), jnp.zeros((0, 4)))


def test_aggregate_empty_is_an_error():
    with pytest.raises(ValueError, match="values"):  # was IndexError
        metrics.aggregate([])


@pytest.mark.parametrize("fn", [metrics.psnr, metrics.ssim, metrics.psnr_of_mean_mse])
def test_data_range_invalid_eager_error_and_nan_under_jit(fn):
    x, y = jnp.zeros((2, 12, 12)), jnp.full((2, 12, 12), 0.1)
    for bad in (0.0, -1.0, np.nan):
        with pytest.raises(ValueError, match="data_range"):
            fn(x, y, data_range=bad)
        assert np.isnan(np.asarray(jax.jit(fn)(x, y, jnp.asarray(bad)))).all()
    assert np.isfinite(np.asarray(jax.jit(fn)(x, y, jnp.asarray(1.0)))).all()


def test_shape_mismatch_is_a_value_error_naming_shapes():
    with pytest.raises(ValueError, match=r"same shape.*\(2, 3\).*\(2, 4\)"):
        metrics.mse(jnp.zeros((2, 3)), jnp.zeros((2, 4)))


def test_ncc_of_identical_examples_is_at_most_one():
    x = jnp.linspace(0.0, 1.0, 144).reshape(1, 12, 12)  # found by tests/test_fuzz.py: 1.0000001 in float32
    assert float(metrics.ncc(x, x)[0]) == 1.0
