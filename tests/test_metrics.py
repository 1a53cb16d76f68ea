import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import metrics


@pytest.fixture
def pair():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(5, 16, 16, 1)).astype(np.float32)
    y = np.clip(x + 0.1 * rng.standard_normal(x.shape), 0, 1).astype(np.float32)
    return x, y


def test_mse_mae_psnr_against_numpy(pair):
    x, y = pair
    ref_mse = ((x - y) ** 2).reshape(5, -1).mean(1)
    ref_mae = np.abs(x - y).reshape(5, -1).mean(1)
    # float32 accumulations over 256 entries: 1e-6 relative is ample.
    np.testing.assert_allclose(metrics.mse(x, y), ref_mse, rtol=1e-5)
    np.testing.assert_allclose(metrics.mae(x, y), ref_mae, rtol=1e-5)
    np.testing.assert_allclose(metrics.psnr(x, y), 10 * np.log10(1.0 / ref_mse), rtol=1e-5)
    np.testing.assert_allclose(metrics.psnr(x * 255, y * 255, data_range=255.0), 10 * np.log10(1.0 / ref_mse), rtol=1e-4)
    np.testing.assert_allclose(metrics.psnr_of_mean_mse(x, y), 10 * np.log10(1 / ref_mse.mean()), rtol=1e-5)
    assert np.isinf(metrics.psnr(x, x)).all()


def test_ncc_is_pearson_correlation(pair):
    x, y = pair
    ref = [np.corrcoef(a.ravel(), b.ravel())[0, 1] for a, b in zip(x, y)]
    np.testing.assert_allclose(metrics.ncc(x, y), ref, rtol=1e-5)
    np.testing.assert_allclose(metrics.ncc(x, -x), -1.0, rtol=1e-6)


def test_ssim_against_skimage(pair):
    skm = pytest.importorskip("skimage.metrics")
    x, y = pair
    ref = [
        skm.structural_similarity(a[..., 0], b[..., 0], data_range=1.0, gaussian_weights=True, sigma=1.5,
                                  use_sample_covariance=False)
        for a, b in zip(x.astype(np.float64), y.astype(np.float64))
    ]
    # dm_pix filters 'valid'; skimage filters with 'reflect' and then crops (win_size - 1) / 2 = 5 pixels, which
    # leaves the same 6x6 valid windows: the two agree to float32 rounding (observed 2.4e-7). A tolerance of 1e-5
    # still tells a wrong constant apart (K2 = 0.05, sigma = 2 or max_val = 2 move these values by 1e-3 to 3e-3).
    np.testing.assert_allclose(metrics.ssim(x, y), ref, rtol=0, atol=1e-5)
    np.testing.assert_allclose(metrics.ssim(x, x), 1.0, atol=1e-5)
    # data_range reaches the constants C1 = (K1 L)^2, C2 = (K2 L)^2: 8-bit pixels against skimage at L = 255.
    ref255 = [skm.structural_similarity(a[..., 0], b[..., 0], data_range=255.0, gaussian_weights=True, sigma=1.5,
                                        use_sample_covariance=False)
              for a, b in zip(255.0 * x.astype(np.float64), 255.0 * y.astype(np.float64))]
    np.testing.assert_allclose(metrics.ssim(255.0 * x, 255.0 * y, data_range=255.0), ref255, rtol=0, atol=1e-5)


def test_metrics_jit_vmap_and_validation(pair):
    x, y = pair
    np.testing.assert_allclose(jax.jit(metrics.mse)(x, y), metrics.mse(x, y))
    stacked = jax.vmap(metrics.mse)(jnp.stack([x, y]), jnp.stack([y, x]))
    naive = np.mean((np.asarray(x, np.float64) - np.asarray(y, np.float64)) ** 2, axis=tuple(range(1, np.ndim(x))))
    np.testing.assert_allclose(stacked, [naive, naive], rtol=1e-5)  # per-example MSE, each direction
    with pytest.raises(ValueError, match="same shape"):
        metrics.mse(x, y[:2])
    with pytest.raises(ValueError, match="batched"):
        metrics.mse(jnp.ones(3), jnp.ones(3))
    with pytest.raises(ValueError, match="data_range"):
        metrics.psnr(x, y, data_range=0.0)
    agg = metrics.aggregate(jnp.array([1.0, 2.0, jnp.nan, 3.0]))
    assert float(agg["mean"]) == 2.0 and float(agg["median"]) == 2.0


def test_ssim_refuses_images_smaller_than_its_window():
    """skimage refuses a 10 x 10 image with this window ("win_size exceeds image extent"); dm_pix returned 0.97."""
    x = np.random.default_rng(0).random((1, 10, 10)).astype(np.float32)
    with pytest.raises(ValueError, match="at least 11 x 11"):
        metrics.ssim(x, x)
    assert metrics.ssim(np.zeros((2, 11, 11)), np.zeros((2, 11, 11))).shape == (2,)
