"""Every experiment checks its config (experiments/configs/<name>.py's CHECKS; the risk report's validate_config)
before it writes anything: a value outside its range raises ConfigError naming the field and the allowed range, the
workdir stays unwritten, and every shipped variant passes its own checks."""

import importlib
import os
import subprocess
import sys

import pytest

from recon_jax.evidence.config_checks import ConfigError, check_config, field_value

EXPERIMENTS = ("glm_attack", "balle_mnist", "balle_cifar10", "biswas_gaussian_vs_vmf", "biswas_tables", "lumbut_dimred",
               "tygert_hcr", "ziller_empirical", "ziller_table1", "risk_report")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _variants():
    from recon_jax.report.config import VARIANTS as REPORT_VARIANTS

    out = []
    for name in EXPERIMENTS:
        variants = (REPORT_VARIANTS if name == "risk_report" else
                    importlib.import_module(f"experiments.configs.{name}").VARIANTS)
        out += [(name, v) for v in variants]
    return out


def _validate(name, config):
    if name == "risk_report":
        from recon_jax.report.setup import validate_config

        validate_config(config)
    else:
        check_config(config, importlib.import_module(f"experiments.configs.{name}").CHECKS)


@pytest.mark.parametrize("name,variant", _variants())
def test_every_shipped_variant_passes_its_checks(name, variant):
    config = importlib.import_module(f"experiments.configs.{name}").get_config(variant)
    _validate(name, config)


def test_every_experiment_declares_its_variants_and_checks():
    """VARIANTS lists what get_config takes (anything else is refused), and CHECKS names fields the config has."""
    for name in EXPERIMENTS[:-1]:
        module = importlib.import_module(f"experiments.configs.{name}")
        assert {"smoke", "default"} <= set(module.VARIANTS) and module.CHECKS, name
        with pytest.raises(ValueError, match="variant"):
            module.get_config("no-such-variant")
        config = module.get_config("default")
        for field in module.CHECKS:
            field_value(config, field)  # KeyError for a field the config lacks


# (experiment, variant, {field: bad value}, the message: the field, the allowed range, the value given)
BAD = [
    ("glm_attack", "smoke", {"num_targets": 0}, "config.num_targets: must be an integer >= 1, got 0"),
    ("balle_mnist", "smoke", {"settings": ("default", "logit")},
     "config.settings: must be a non-empty tuple, each entry one of 'default', 'logits',"),
    ("balle_mnist", "smoke", {"train.momentum": 1.0}, "config.train.momentum: must be a number in [0, 1), got 1.0"),
    ("balle_cifar10", "smoke", {"reconstructor.validation_size": 48},
     "config.reconstructor.validation_size: must be an integer in [0, num_shadow = 48), got 48"),
    ("biswas_gaussian_vs_vmf", "smoke", {"accountings": ("tigth",)},
     "config.accountings: must be a non-empty tuple, each entry one of 'tight', 'paper', got ('tigth',)"),
    ("biswas_gaussian_vs_vmf", "smoke", {"image_size": 20},
     "config.param_dim: must be 50 x image_size^2 + 900 = 20900"),
    ("biswas_tables", "smoke", {"batch_size": 0},
     "config.batch_size: must be an integer in [1, dataset_size = 60000], got 0"),
    ("lumbut_dimred", "smoke", {"srp_densities": ("paper", 1.5)},
     "config.srp_densities: must be a non-empty tuple, each entry one of 'paper', 'auto' or a number in (0, 1]"),
    ("tygert_hcr", "smoke", {"noise_scale": 0.0}, "config.noise_scale: must be a number > 0, got 0.0"),
    ("ziller_empirical", "smoke", {"fig2.sigma": -1.0}, "config.fig2.sigma: must be a number > 0, got -1.0"),
    # SSIM's 11 x 11 window: a smaller resolution used to pass the checks and stop the run at its first SSIM
    ("ziller_empirical", "smoke", {"resolution": 10}, "config.resolution: must be an integer >= 11, got 10"),
    ("ziller_table1", "smoke", {"route_kappas": (0.1, 1.0)},
     "config.route_kappas: must be a non-empty tuple, each entry a number in (0, 1), got (0.1, 1.0)"),
    ("risk_report", "smoke", {"num_targets": 0}, "config.num_targets: must be an integer >= 1, got 0"),
    ("risk_report", "smoke", {"channels": 3},
     "config.channels: must be 1 (only dataset 'folder' reads channels; 'mnist' images have 1) when dataset is "
     "'mnist' (not 'folder'), got 3"),
    # Sizes the data cannot meet (known once the data is found, still before anything is written).
    ("glm_attack", "smoke", {"fixed_size": 59999},
     "config.fixed_size + num_targets: must be at most the 60000 training records of 'mnist', got 59999 + 4 = 60003"),
    ("balle_mnist", "smoke", {"num_shadow": 69950},
     "config.num_targets + fixed_size + num_shadow: must be at most the 70000 records of 'mnist' (train + test), got "
     "16 + 50 + 69950 = 70016"),
    ("balle_mnist", "smoke", {"eval_size": 69940},
     "config.num_targets + fixed_size + eval_size: must be at most the 70000 records of 'mnist' (train + test), got "
     "16 + 50 + 69940 = 70006"),
    ("biswas_gaussian_vs_vmf", "smoke", {"num_test": 10001},
     "config.num_test: must be at most the 10000 test records of 'mnist', got 10001"),
    ("lumbut_dimred", "smoke", {"dataset": "mnist", "n_train": 60000},
     "config.n_train + n_val + n_test + the largest of sizes, slow_sizes, seed_sizes and noise_size: must be at most "
     "the 60000 images of 'mnist', got 60016 + "),
    ("tygert_hcr", "smoke", {"num_test": 10001}, "config.num_test: must be at most the 10000 test records of 'mnist', "
                                                 "got 10001"),
    ("tygert_hcr", "smoke", {"num_hcr_examples": 257},
     "config.num_hcr_examples: must be at most the 256 test records the run reads (num_test), got 257"),
    ("ziller_empirical", "smoke", {"num_images": 10001},
     "config.num_images: must be at most the 10000 test records of 'mnist', got 10001"),
    ("risk_report", "smoke", {"num_shadow": 59943},
     "config.fixed_size + num_shadow + num_targets: must be at most the 60000 training records of 'mnist' "
     "(sizes='auto' fits only the sizes left at the variant's values), got 50 + 59943 + 8 = 60001"),
    ("risk_report", "smoke", {"eval_size": 10001},
     "config.eval_size: must be at most the 10000 test records of 'mnist' (sizes='auto' fits only the sizes left at "
     "the variant's values), got 10001"),
    ("risk_report", "smoke", {"eval_size": 9900, "prior_sizes": (2, 100)},
     "config.eval_size + the largest of prior_sizes + one canary: must be at most the 10000 test records of 'mnist' "
     "(sizes='auto' fits only the sizes left at the variant's values), got 9900 + 100 + 1 = 10001"),
]


class _Started(Exception):
    """The run got past its checks (start_run was called)."""


def _never_start(*args, **kwargs):
    raise _Started


@pytest.mark.parametrize("name,variant,bad,message", BAD, ids=[f"{b[0]}-{'-'.join(b[2])}" for b in BAD])
def test_a_bad_value_stops_the_run_before_anything_is_written(tmp_path, monkeypatch, name, variant, bad, message):
    experiment = importlib.import_module(f"experiments.{name}")
    config = importlib.import_module(f"experiments.configs.{name}").get_config(variant)
    for field, value in bad.items():
        *section, last = field.split(".")
        holder = config
        for part in section:
            holder = holder[part]
        holder[last] = value
    # A run that gets as far as start_run (config.json, segments.json) has not checked its config: stop it there.
    if name == "risk_report":
        monkeypatch.setattr(importlib.import_module("recon_jax.report.app"), "start_run", _never_start)
    else:
        monkeypatch.setattr(experiment, "start_run", _never_start)
    workdir = tmp_path / "w"
    with pytest.raises(ConfigError) as err:
        experiment.run(config, str(workdir))
    assert str(err.value).startswith(message), str(err.value)
    assert not workdir.exists()


def test_the_command_line_prints_one_line_and_writes_nothing(tmp_path):
    """The example of the issue: num_targets=0 ended in a reshape traceback after config.json was written."""
    workdir = tmp_path / "x"
    out = subprocess.run([sys.executable, "-m", "experiments.glm_attack",
                          "--config=experiments/configs/glm_attack.py:smoke", "--config.num_targets=0",
                          f"--workdir={workdir}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip() == "glm_attack.py: config.num_targets: must be an integer >= 1, got 0", out.stderr
    assert not workdir.exists()
