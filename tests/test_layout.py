"""Moves of issue 22 ("one house"): the old validation shims are gone, and names that moved keep their old import
paths as re-exports of the same objects (not copies). The layer and private-name rules are in test_layers.py."""

import pathlib

import pytest

import recon_jax

ROOT = pathlib.Path(recon_jax.__file__).parent


def test_the_old_validation_shims_are_gone():
    assert not (ROOT / "bounds" / "_validate.py").exists()
    assert not (ROOT / "accounting" / "_checks.py").exists()


@pytest.mark.parametrize("name,home", [
    ("dither", "recon_jax.mechanisms.dithering"),
    ("feature_rms", "recon_jax.mechanisms.dithering"),
    ("dithered_accuracy", "recon_jax.bounds.hcr_eval"),
    ("rademacher_perturbation", "recon_jax.bounds.hcr_eval"),
    ("cramer_rao_variance_bound", "recon_jax.bounds.cramer_rao"),
    ("cramer_rao_bounds", "recon_jax.bounds.cramer_rao"),
    ("jacobian_rank", "recon_jax.bounds.cramer_rao"),
    ("to_coordinates", "recon_jax.bounds.dct"),
    ("from_coordinates", "recon_jax.bounds.dct"),
    ("default_dct_axes", "recon_jax.bounds.dct"),
])
def test_moved_names_are_reexported_not_copied(name, home):
    import importlib

    from recon_jax import bounds
    from recon_jax.bounds import hcr

    obj = getattr(importlib.import_module(home), name)
    assert obj.__module__ == home
    assert getattr(hcr, name) is obj and getattr(bounds, name) is obj and name in hcr.__all__


def test_the_wheel_holds_only_recon_jax_and_its_console_script():
    """pyproject's package discovery finds recon_jax and its subpackages only (no top-level experiments or
    benchmarks), and the console script and its default config live in the package."""
    import importlib
    import os
    import tomllib

    import setuptools

    root = ROOT.parent
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    found = setuptools.find_packages(where=str(root), include=meta["tool"]["setuptools"]["packages"]["find"]["include"])
    assert "recon_jax" in found and {p.split(".")[0] for p in found} == {"recon_jax"}, found
    module, _, attr = meta["project"]["scripts"]["recon-jax-report"].partition(":")
    assert module.split(".")[0] == "recon_jax"
    report = importlib.import_module(module)
    assert callable(getattr(report, attr))
    config_file = report.DEFAULT_CONFIG.rpartition(":")[0]
    assert os.path.isfile(config_file) and pathlib.Path(config_file).resolve().is_relative_to(ROOT.resolve())


def test_experiment_entry_points_are_the_package_report():
    from experiments import risk_report
    from experiments.configs import risk_report as config

    from recon_jax.report import risk_config
    from recon_jax.report import risk_report as home

    assert risk_report.run is home.run and risk_report.console_main is home.console_main
    assert config.get_config is risk_config.get_config
