import os
import shutil

import jax
import numpy as np
import pytest

from recon_jax import data
from recon_jax.data import embedded


def test_embedded_mnist_is_the_real_mnist():
    # Reference facts from shared/data/mnist/README.md (label counts, first labels, pixel statistics).
    x_train, y_train = data.load_dataset("mnist", "train")
    x_test, y_test = data.load_dataset("mnist", "test")
    assert x_train.shape == (60000, 28, 28, 1) and x_test.shape == (10000, 28, 28, 1)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    np.testing.assert_array_equal(np.bincount(y_train), [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949])
    np.testing.assert_array_equal(np.bincount(y_test), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])
    np.testing.assert_array_equal(y_train[:10], [5, 0, 4, 1, 9, 2, 1, 3, 1, 4])
    # README gives 4 decimals.
    assert abs(float(x_train.mean()) - 0.1307) < 5e-5
    assert abs(float(x_train.std()) - 0.3081) < 5e-5


def test_embedded_mnist_returns_fresh_arrays():
    a, _ = data.load_dataset("mnist", "test")
    a[0] = 5.0
    b, _ = data.load_dataset("mnist", "test")
    assert b.max() <= 1.0


@pytest.fixture
def mnist_copy(tmp_path):
    d = tmp_path / "mnist"
    shutil.copytree(embedded.MNIST_DIR, d)
    for f in d.iterdir():
        os.chmod(f, 0o644)
    embedded._load_uint8.cache_clear()
    yield d
    embedded._load_uint8.cache_clear()


def test_corrupt_file_is_detected(mnist_copy):
    path = mnist_copy / "t10k-labels.idx1-ubyte.gz"
    blob = bytearray(path.read_bytes())
    blob[100] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(data.DataIntegrityError, match="corrupt"):
        embedded.load_embedded_mnist("test", directory=str(mnist_copy))
    with pytest.raises(data.DataIntegrityError, match="corrupt"):
        embedded.verify_checksums(str(mnist_copy))


def test_missing_file_is_detected(mnist_copy):
    (mnist_copy / "t10k-images.idx3-ubyte.gz").unlink()
    with pytest.raises(data.DataIntegrityError, match="missing"):
        embedded.load_embedded_mnist("test", directory=str(mnist_copy))


def test_checksums_of_vendored_files_pass():
    embedded.verify_checksums()


def test_parse_idx_rejects_bad_input():
    with pytest.raises(data.DataIntegrityError):
        data.parse_idx(b"\x01\x00\x08\x01")
    header = bytes([0, 0, 0x08, 1]) + (5).to_bytes(4, "big")
    with pytest.raises(data.DataIntegrityError, match="payload"):
        data.parse_idx(header + bytes(3))
    big_endian = bytes([0, 0, 0x0C, 1]) + (2).to_bytes(4, "big") + (1).to_bytes(4, "big") + (258).to_bytes(4, "big")
    np.testing.assert_array_equal(data.parse_idx(big_endian), [1, 258])


@pytest.mark.parametrize(
    "name,split,kwargs,match",
    [
        ("imagenet", "train", {}, "name must be one of"),
        ("mnist", "validation", {}, "split must be one of"),
        ("mnist", "train", {"data_dir": "/x"}, "takes no options"),
        ("synthetic", "train", {"num_examples": 0}, "num_examples"),
        ("synthetic", "valid", {}, "split"),
        ("folder", "train", {"path": "/nonexistent/dir"}, "path must be an existing directory"),
        ("tfds:mnist", "validation", {}, "split must be"),
    ],
)
def test_bad_arguments_raise_value_error(name, split, kwargs, match):
    with pytest.raises(ValueError, match=match):
        data.load_dataset(name, split, **kwargs)


def test_synthetic_is_seeded_and_shaped():
    a = data.load_dataset("synthetic", "train", num_examples=50, shape=(8, 6, 3), num_classes=4, seed=3)
    b = data.load_dataset("synthetic", "train", num_examples=50, shape=(8, 6, 3), num_classes=4, seed=3)
    c = data.load_dataset("synthetic", "test", num_examples=50, shape=(8, 6, 3), num_classes=4, seed=3)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[0].shape == (50, 8, 6, 3) and set(np.unique(a[1])) <= set(range(4))
    assert not np.array_equal(a[0], c[0])
    assert a[0].min() >= 0 and a[0].max() <= 1


def test_tfds_not_prepared_fails_fast_with_instructions(tmp_path):
    with pytest.raises(data.DatasetNotAvailableError) as info:
        data.load_dataset("tfds:fashion_mnist", "train", data_dir=str(tmp_path))
    msg = str(info.value)
    assert "fashion_mnist" in msg and str(tmp_path) in msg and "tfds build" in msg


def test_tfds_path_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=7, policy=tfds.testing.MockPolicy.USE_CODE):
        images, labels = data.load_dataset("tfds:cifar10", "train")
    assert images.shape == (7, 32, 32, 3) and images.dtype == np.float32
    assert images.min() >= 0 and images.max() <= 1
    assert labels.shape == (7,) and labels.dtype == np.int32


def test_image_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    originals = {}
    for cls in ("cat", "dog"):
        (tmp_path / "train" / cls).mkdir(parents=True)
        for i in range(3):
            arr = rng.integers(0, 256, (10, 12), dtype=np.uint8)
            Image.fromarray(arr).save(tmp_path / "train" / cls / f"{i}.png")
            originals[(cls, i)] = arr
    images, labels = data.load_dataset("folder", "train", path=str(tmp_path), image_size=(10, 12), channels=1)
    assert images.shape == (6, 10, 12, 1)
    np.testing.assert_array_equal(labels, [0, 0, 0, 1, 1, 1])
    # Same size: resizing is the identity, so pixels come back exactly (scaled to [0, 1]).
    np.testing.assert_allclose(images[4, ..., 0], originals[("dog", 1)] / 255.0, atol=1e-7)
    small, _ = data.load_dataset("folder", "train", path=str(tmp_path), image_size=5, channels=3)
    assert small.shape == (6, 5, 5, 3)
    with pytest.raises(ValueError, match="channels"):
        data.load_dataset("folder", "train", path=str(tmp_path), channels=2)


def test_informed_splits_disjoint_deterministic_and_validated():
    x = np.arange(100, dtype=np.float32)[:, None]
    y = np.arange(100)
    s1 = data.informed_splits(x, y, 40, 30, 20, 10, key_or_seed=7)
    s2 = data.informed_splits(x, y, 40, 30, 20, 10, key_or_seed=7)
    s3 = data.informed_splits(x, y, 40, 30, 20, 10, key_or_seed=8)
    all_idx = np.concatenate([s1.fixed_idx, s1.shadow_idx, s1.target_idx, s1.eval_idx])
    assert len(np.unique(all_idx)) == 100
    np.testing.assert_array_equal(s1.shadow_idx, s2.shadow_idx)
    assert not np.array_equal(s1.shadow_idx, s3.shadow_idx)
    np.testing.assert_array_equal(s1.target_images[:, 0], s1.target_idx)
    np.testing.assert_array_equal(s1.fixed_labels, s1.fixed_idx)
    s_key = data.informed_splits(x, y, 10, 10, 10, key_or_seed=jax.random.key(1))
    assert len(s_key.eval_idx) == 0
    with pytest.raises(ValueError, match="exceeds"):
        data.informed_splits(x, y, 60, 30, 20)
    with pytest.raises(ValueError, match="shadow_size"):
        data.informed_splits(x, y, 10, -1, 20)
    with pytest.raises(ValueError, match="same length"):
        data.informed_splits(x, y[:5], 1, 1, 1)


def test_pool_splits_paper_layout():
    x, y = np.arange(100, dtype=np.float32).reshape(100, 1), np.arange(100) % 10
    s = data.pool_splits(x, y, fixed_size=10, num_shadow=59, num_targets=1, eval_size=20, key_or_seed=3)
    # Balle et al. Table V in miniature: N = 100, 1 target, a 99-record pool, fixed 10 + shadow 59 from it.
    assert len(s.pool_idx) == 99 and not np.isin(s.target_idx, s.pool_idx).any()
    assert np.isin(s.fixed_idx, s.pool_idx).all() and np.isin(s.shadow_idx, s.pool_idx).all()
    assert not np.isin(s.fixed_idx, s.shadow_idx).any()
    assert not np.isin(s.eval_idx, s.fixed_idx).any() and not np.isin(s.eval_idx, s.target_idx).any()
    np.testing.assert_array_equal(s.pool_images[:, 0], x[s.pool_idx, 0])
    # A smaller fixed set is a subset of the larger one; the shadow targets do not depend on it.
    small = data.pool_splits(x, y, fixed_size=3, num_shadow=59, num_targets=1, key_or_seed=3)
    assert np.isin(small.fixed_idx, s.fixed_idx).all()
    np.testing.assert_array_equal(small.shadow_idx, s.shadow_idx)
    np.testing.assert_array_equal(small.target_idx, s.target_idx)
    with pytest.raises(ValueError, match="num_targets"):
        data.pool_splits(x, y, fixed_size=10, num_shadow=59, num_targets=41)
    with pytest.raises(ValueError, match="eval_size"):
        data.pool_splits(x, y, fixed_size=10, num_shadow=5, num_targets=1, eval_size=90)
    # informed_splits' pool is the fixed set plus the shadow targets.
    d = data.informed_splits(x, y, 10, 20, 5)
    np.testing.assert_array_equal(d.pool_idx, np.sort(np.concatenate([d.fixed_idx, d.shadow_idx])))


@pytest.mark.parametrize("name, value", [("shadow_size", 3.0), ("shadow_size", True), ("eval_size", np.float64(2)),
                                         ("fixed_size", False)])
def test_informed_splits_sizes_must_be_integers(name, value):
    x, y = np.zeros((20, 1)), np.arange(20)
    sizes = {"fixed_size": 4, "shadow_size": 3, "target_size": 2, "eval_size": 1, name: value}
    with pytest.raises(ValueError, match=f"{name} must be an integer >= 0"):
        data.informed_splits(x, y, **sizes)
    sizes[name] = np.int64(2)  # NumPy integers are integers
    assert len(getattr(data.informed_splits(x, y, **sizes), name.replace("_size", "_idx"))) == 2


@pytest.mark.parametrize("name, value", [("fixed_size", 3.0), ("num_shadow", 2.0), ("num_targets", True),
                                         ("eval_size", True)])
def test_pool_splits_sizes_must_be_integers(name, value):
    x, y = np.zeros((20, 1)), np.arange(20)
    sizes = {"fixed_size": 4, "num_shadow": 3, "num_targets": 2, "eval_size": 0, name: value}
    low = 1 if name == "num_targets" else 0
    with pytest.raises(ValueError, match=f"{name} must be an integer >= {low}"):
        data.pool_splits(x, y, **sizes)
    sizes[name] = np.int32(1)
    data.pool_splits(x, y, **sizes)


def test_train_plus_test_is_seventy_thousand_mnist_records():
    x, y = data.load_dataset("mnist", "train+test")
    tx, _ = data.load_dataset("mnist", "test")
    assert x.shape == (70000, 28, 28, 1) and y.shape == (70000,)
    np.testing.assert_array_equal(x[60000:], tx)


def test_split_seeds_ints_unchanged_and_distinct_keys_distinct():
    """Int seeds are NumPy seeds as they are (experiments' splits never change); a key's seed is a draw from it."""
    from recon_jax.data.splits import _seed_from

    x, y = np.arange(50, dtype=np.float32)[:, None], np.arange(50)
    for seed in (0, 7, 2**40):
        s = data.informed_splits(x, y, 10, 10, 10, 5, key_or_seed=seed)
        perm = np.random.default_rng(seed).permutation(50)  # the documented rule, computed independently
        np.testing.assert_array_equal(s.fixed_idx, np.sort(perm[:10]))
        np.testing.assert_array_equal(s.eval_idx, np.sort(perm[30:35]))
        assert _seed_from(seed) == seed and _seed_from(np.int64(seed)) == seed
    # Keys whose words have the same sum (the old conversion's collisions) and many split keys: all distinct.
    swapped = [jax.random.wrap_key_data(np.array(w, np.uint32)) for w in ([0, 1], [1, 0], [2, 2**32 - 1])]
    keys = list(jax.random.split(jax.random.key(0), 2000)) + swapped
    seeds = [_seed_from(k) for k in keys]
    assert len(set(seeds)) == len(keys) and all(0 <= s < 2**31 for s in seeds)
    assert _seed_from(jax.random.key(3)) == _seed_from(jax.random.key_data(jax.random.key(3)))  # raw key, same seed
    a = data.informed_splits(x, y, 10, 10, 10, key_or_seed=swapped[0])
    b = data.informed_splits(x, y, 10, 10, 10, key_or_seed=swapped[1])
    assert not np.array_equal(a.fixed_idx, b.fixed_idx)
    with pytest.raises(ValueError, match="key_or_seed"):
        _seed_from(-1)
