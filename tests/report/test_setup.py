"""recon_jax.report.setup.validate_config: the report's fields are checked by CHECKS (the experiments' mechanism,
recon_jax.evidence.config_checks), the folder layout and the data sizes by code; every refusal is a ConfigError
naming the field, the allowed values and the value given."""

import re

import ml_collections
import pytest

from recon_jax.evidence.config_checks import ConfigError
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
