"""recon_jax.report.setup.validate_config: the report's fields are checked by CHECKS and the sizes the data must
meet by check_fits (the experiments' mechanism, recon_jax.evidence.config_checks), the folder layout by code; every
refusal is a ConfigError naming the field, the allowed values and the value given."""

import re

import ml_collections
import pytest

from recon_jax import data as rdata
from recon_jax.evidence.config_checks import ConfigError
from recon_jax.report import setup
from recon_jax.report.config import DESCRIPTIONS, get_config
from recon_jax.report.setup import CHECKS, SIZED_CHECKS, validate_config


def _untyped(**changes):
    """The smoke config as a ConfigDict that takes values of any type (a config built in code, not from flags)."""
    config = ml_collections.ConfigDict(get_config("smoke").to_dict(), type_safe=False)
    for field, value in changes.items():
        config[field] = value
    return config


def test_checks_cover_every_field_but_the_variant():
    assert set(CHECKS) == set(DESCRIPTIONS) - {"variant"}
    assert set(SIZED_CHECKS) <= set(DESCRIPTIONS)


# (changes to the smoke config, the whole message)
MESSAGES = [
    (dict(crafted_trials=20),
     "config.crafted_trials: must be an integer >= max(prior_aware_trials, 2 x audit_runs) = 32, got 20"),
    (dict(calibration_rero=0.001),
     "config.calibration_rero: must be a number in (calibration_kappa = 0.01, 1) (no noise level pushes the bound "
     "below the prior), got 0.001"),
    (dict(batch_size=52),
     "config.batch_size: must be None or an integer in [1, fixed_size + 1 = 51] (None: full batch), got 52"),
    (dict(image_size=32), "config.image_size: must be None when dataset is 'mnist' (not 'folder'), got 32"),
    (dict(data_path="imgs"), "config.data_path: must be None when dataset is 'mnist' (not 'folder'), got 'imgs'"),
    (dict(noise_multipliers=(2.0, 2.0)),
     "config.noise_multipliers: must be a tuple of distinct entries, each entry a number > 0 when "
     "include_non_private is True, got (2.0, 2.0)"),
    (dict(include_non_private=False, noise_multipliers=()),
     "config.noise_multipliers: must be a non-empty tuple of distinct entries, each entry a number > 0 (else nothing "
     "runs) when include_non_private is False (not True), got ()"),
    (dict(prior_sizes=(1, 10)),
     "config.prior_sizes: must be a non-empty tuple of distinct entries, each entry an integer >= 2 (uniform priors "
     "of k candidates), got (1, 10)"),
    (dict(sizes="Auto"),
     "config.sizes: must be one of 'auto', 'fixed' (auto: sizes follow the data; fixed: as given), got 'Auto'"),
    (dict(model="lenet5"),
     "config.model: must be one of 'balle_mnist_mlp', 'lenet', 'balle_cifar_cnn' or a string 'module:attribute' or "
     "'file.py:attribute', got 'lenet5'"),
    (dict(dataset="folder", data_path=None, channels=2),
     "config.channels: must be one of 1, 3 when dataset is 'folder', got 2"),
    (dict(channels=3),
     "config.channels: must be 1 (only dataset 'folder' reads channels; 'mnist' images have 1) when dataset is "
     "'mnist' (not 'folder'), got 3"),
    (dict(dataset="tfds:cifar10", channels=2),
     "config.channels: must be 1 (the default) or 3 (only dataset 'folder' reads channels; 'tfds:cifar10' images "
     "have 3) when dataset is 'tfds:cifar10' (not 'folder'), got 2"),
    (dict(dataset="folder", data_path=None, image_size=2),
     "config.image_size: must be None or an integer >= 4 (None: the images' own size) when dataset is 'folder', "
     "got 2"),
]


@pytest.mark.parametrize("changes,message", MESSAGES, ids=["-".join(c) for c, _ in MESSAGES])
def test_messages_name_the_field_the_range_and_the_value(changes, message):
    with pytest.raises(ConfigError) as err:
        validate_config(_untyped(**changes))
    assert str(err.value) == message


@pytest.mark.parametrize("field,value,words", [
    ("momentum", "0.9", "a number in [0, 1)"),
    ("delta", "1e-5", "a number in (0, 1)"),
    ("batch_size", "8", "None or an integer in [1, fixed_size + 1 = 51]"),
    ("noise_multipliers", 2.0, "a tuple of distinct entries, each entry a number > 0"),
    ("kappas", 0.5, "a tuple, each entry a number in (0, 1)"),
    ("prior_sizes", 10, "a non-empty tuple of distinct entries, each entry an integer >= 2"),
    ("include_non_private", 1, "one of True, False"),
])
def test_values_of_the_wrong_type_are_config_errors(field, value, words):
    """A config built in code may hold any type: a string or a bare number where a number or a tuple belongs is
    refused with the field's words (it was a TypeError from a comparison or tuple() before, or, for
    include_non_private, not refused)."""
    message = f"config.{field}: must be {words}"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}.*, got {re.escape(repr(value))}$"):
        validate_config(_untyped(**{field: value}))


def test_the_folder_layout_is_checked_after_the_fields(tmp_path):
    validate_config(_untyped())
    with pytest.raises(ConfigError, match=r"^config\.data_path: '.*nothing' is not a directory; dataset 'folder'"):
        validate_config(_untyped(dataset="folder", data_path=str(tmp_path / "nothing")))


def test_calibration_models_is_checked_against_num_targets_only_with_the_data():
    """sizes='auto' fits num_targets and calibration_models to the data first: before the data, no refusal."""
    config = _untyped(calibration_models=9)
    validate_config(config)
    with pytest.raises(ConfigError, match=r"^config\.calibration_models: must be an integer in \[1, num_targets = 8\], "
                                          r"got 9$"):
        validate_config(config, num_train=60000, num_test=10000)


_HINT = "(sizes='auto' fits only the sizes left at the variant's values)"

# (changes to the smoke config, the data's train and test record counts, the whole message): every size the data
# must meet, in check_fits' words (the experiments' ones: config.<fields>: must be at most the <n> <records>, got ...)
SIZE_MESSAGES = [
    (dict(num_shadow=70000), 60000, 10000,
     f"config.fixed_size + num_shadow + num_targets: must be at most the 60000 training records of 'mnist' {_HINT}, "
     f"got 50 + 70000 + 8 = 70058"),
    (dict(fixed_size=60000), 60000, 10000,
     f"config.fixed_size + num_shadow + num_targets: must be at most the 60000 training records of 'mnist' {_HINT}, "
     f"got 60000 + 96 + 8 = 60104"),
    (dict(eval_size=20000), 60000, 10000,
     f"config.eval_size: must be at most the 10000 test records of 'mnist' {_HINT}, got 20000"),
    (dict(prior_sizes=(2, 20000)), 60000, 10000,
     f"config.eval_size + the largest of prior_sizes + one canary: must be at most the 10000 test records of 'mnist' "
     f"{_HINT}, got 200 + 20000 + 1 = 20201"),
    (dict(eval_size=9900, prior_sizes=(2, 99)), 60000, 9999,  # one record short (10,000 fit: below)
     f"config.eval_size + the largest of prior_sizes + one canary: must be at most the 9999 test records of 'mnist' "
     f"{_HINT}, got 9900 + 99 + 1 = 10000"),
    (dict(), 11, 10000,  # no sizes fit: the data is named, not a size field
     "config.dataset: 'mnist' has 11 training records; the report needs at least 12 (a fixed set of 1, 10 shadow "
     "targets, 1 evaluation target)"),
]


@pytest.mark.parametrize("changes,num_train,num_test,message", SIZE_MESSAGES,
                         ids=[f"{'-'.join(c) or 'tiny'}-{n}" for c, n, _, _ in SIZE_MESSAGES])
def test_sizes_the_data_cannot_meet_are_refused_in_check_fits_words(changes, num_train, num_test, message):
    config = _untyped(**changes)
    validate_config(config)  # no data yet: every field is in range
    with pytest.raises(ConfigError) as err:
        validate_config(config, num_train=num_train, num_test=num_test)
    assert str(err.value) == message


def test_sizes_that_fit_exactly_pass():
    validate_config(_untyped(fixed_size=60000 - 96 - 8), num_train=60000, num_test=10000)
    validate_config(_untyped(eval_size=9900, prior_sizes=(2, 99)), num_train=60000, num_test=10000)
    validate_config(_untyped(eval_size=10000, prior_sizes=(2, 10)), num_train=60000, num_test=10000 + 10 + 1)


def test_sizes_of_an_image_folder_name_the_folder(tmp_path):
    for split in ("train", "test"):
        (tmp_path / "imgs" / split / "a").mkdir(parents=True)
    config = _untyped(dataset="folder", data_path=str(tmp_path / "imgs"), image_size=None)
    with pytest.raises(ConfigError) as err:
        validate_config(config, num_train=100, num_test=1000)
    assert str(err.value) == (f"config.fixed_size + num_shadow + num_targets: must be at most the 100 training records "
                              f"of folder {str(tmp_path / 'imgs')!r} {_HINT}, got 50 + 96 + 8 = 154")


@pytest.mark.parametrize("dataset", [d for d in rdata.DATASETS if d != "folder"])
def test_channels_of_other_datasets_is_the_default_or_their_own(dataset):
    """Only dataset 'folder' reads channels: elsewhere a value is refused unless it is the default (1) or the
    channels the dataset's images have (it was accepted and ignored before)."""
    own = setup._DATASET_CHANNELS[dataset]
    for ok in {1, own}:
        validate_config(_untyped(dataset=dataset, channels=ok))
    for bad in sorted({1, 2, 3, 4} - {1, own}) + [True, 3.0 if own == 3 else 1.0]:
        with pytest.raises(ConfigError, match=r"^config\.channels: must be 1 "):
            validate_config(_untyped(dataset=dataset, channels=bad))


@pytest.mark.parametrize("dataset", [d for d in rdata.DATASETS if d != "folder"])
def test_the_datasets_channels_are_those_their_images_have(dataset):
    """setup._DATASET_CHANNELS (what the channels check allows) is what load_data gives: TFDS from its mock data."""
    config = _untyped(dataset=dataset)
    if dataset.startswith("tfds:"):
        tfds = pytest.importorskip("tensorflow_datasets")
        with tfds.testing.mock_data(num_examples=2, policy=tfds.testing.MockPolicy.USE_CODE):
            train_x, _, test_x, _ = setup.load_data(config)
    else:
        train_x, _, test_x, _ = setup.load_data(config)
    assert train_x.shape[-1] == test_x.shape[-1] == setup._DATASET_CHANNELS[dataset]


def test_a_folders_test_images_are_shuffled_with_the_seed(tmp_path):
    """A folder is read class by class; the report takes its accuracy set from the front of the test split and its
    priors from the rest, so load_data puts the test images in a seeded order (each class once made up a whole
    end: the accuracy of a model that always said class 0 was 100%)."""
    import numpy as np
    from PIL import Image

    for split, n in (("train", 6), ("test", 40)):
        for c in range(2):
            d = tmp_path / "imgs" / split / f"class{c}"
            d.mkdir(parents=True)
            for i in range(n // 2):
                Image.fromarray(np.full((8, 8), 40 * c + i, np.uint8)).save(d / f"{i:03d}.png")
    config = _untyped(dataset="folder", data_path=str(tmp_path / "imgs"), image_size=8)
    train_x, train_y, test_x, test_y = setup.load_data(config)
    raw_x, raw_y = rdata.load_dataset("folder", "test", path=str(tmp_path / "imgs"), image_size=8)
    assert raw_y.tolist() == [0] * 20 + [1] * 20  # as read
    half = test_y[:20]
    assert 5 <= int(np.sum(half == 0)) <= 15  # both classes at the front (P[outside] < 0.05 under a permutation)
    order = np.random.default_rng([config.seed, 6]).permutation(40)  # the documented stream
    np.testing.assert_array_equal(test_x, raw_x[order])
    np.testing.assert_array_equal(test_y, raw_y[order])
    again = setup.load_data(config)
    np.testing.assert_array_equal(again[2], test_x)
    as_read = rdata.load_dataset("folder", "train", path=str(tmp_path / "imgs"), image_size=8)[1]
    assert train_y.tolist() == as_read.tolist()  # the training split is left as read (the splits draw from it)


@pytest.mark.parametrize("mode,channels,noted", [("RGB", 1, True), ("RGB", 3, False), ("L", 1, False)])
def test_colour_images_read_as_grayscale_are_noted(tmp_path, capsys, mode, channels, noted):
    """channels defaults to 1: colour images were turned grey without a word."""
    import numpy as np
    from PIL import Image

    for split in ("train", "test"):
        for c in range(2):
            d = tmp_path / "imgs" / split / f"c{c}"
            d.mkdir(parents=True)
            pixels = np.random.default_rng(c).integers(0, 255, (8, 8, 3) if mode == "RGB" else (8, 8), np.uint8)
            Image.fromarray(pixels).save(d / "0.png")  # RGB from [8, 8, 3], L from [8, 8]
    config = _untyped(dataset="folder", data_path=str(tmp_path / "imgs"), image_size=8, channels=channels)
    x = setup.load_data(config)[0]
    assert x.shape[-1] == channels
    assert ("read as grayscale" in capsys.readouterr().out) == noted


def test_tfds_data_not_prepared_says_how_the_report_finds_it(monkeypatch):
    def not_there(*args, **kwargs):
        raise rdata.DatasetNotAvailableError("TFDS dataset 'cifar10' is not prepared in '/x'.")

    monkeypatch.setattr(rdata, "load_dataset", not_there)
    with pytest.raises(ConfigError, match=r"^config\.dataset: .*TFDS_DATA_DIR=DIR in the environment"):
        setup.load_data(_untyped(dataset="tfds:cifar10", channels=3))
