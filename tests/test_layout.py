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


def test_long_modules_say_why_they_are_one_concern():
    """A module above ~500 lines is split by concern or says in its docstring why it is one (issue 22)."""
    import ast

    long = []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 520 and "one concern" not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not long, f"modules above ~500 lines without a 'one concern' justification: {long}"


@pytest.mark.parametrize("name,home,old", [
    ("Standardizer", "recon_jax.attacks.features", "recon_jax.attacks.reconn"),
    ("fit_standardizer", "recon_jax.attacks.features", "recon_jax.attacks.reconn"),
    ("fit_minmax", "recon_jax.attacks.features", "recon_jax.attacks.reconn"),
    ("standardize", "recon_jax.attacks.features", "recon_jax.attacks.reconn"),
    ("whitebox_features", "recon_jax.attacks.features", "recon_jax.attacks.reconn"),
    ("blackbox_features", "recon_jax.attacks.features", "recon_jax.attacks.reconn"),
    ("reconstruction_loss", "recon_jax.models.losses", "recon_jax.attacks.reconn"),
    ("linear_layer_observations", "recon_jax.attacks.linear_layer", "recon_jax.attacks.gradient"),
    ("linear_layer_attack", "recon_jax.attacks.linear_layer", "recon_jax.attacks.gradient"),
    ("expected_ncc", "recon_jax.bounds.prior_free_ncc", "recon_jax.bounds.prior_free"),
    ("ncc_upper_bound", "recon_jax.bounds.prior_free_ncc", "recon_jax.bounds.prior_free"),
    ("ncc_upper_bound_dimension_free", "recon_jax.bounds.prior_free_ncc", "recon_jax.bounds.prior_free"),
    ("expected_ncc_exact", "recon_jax.bounds.prior_free_ncc", "recon_jax.bounds.prior_free"),
    ("expected_ncc_at_clip", "recon_jax.bounds.prior_free_ncc", "recon_jax.bounds.prior_free"),
    ("ncc_samples", "recon_jax.bounds.prior_free_ncc", "recon_jax.bounds.prior_free"),
    ("ncc_cdf", "recon_jax.bounds.prior_free_ncc", "recon_jax.bounds.prior_free"),
    ("baseline_kappa_uniform_ball", "recon_jax.bounds.baselines", "recon_jax.bounds.rero"),
    ("baseline_kappa_gaussian", "recon_jax.bounds.baselines", "recon_jax.bounds.rero"),
    ("baseline_kappa_gaussian_tail_bound", "recon_jax.bounds.baselines", "recon_jax.bounds.rero"),
])
def test_split_modules_reexport_the_same_objects(name, home, old):
    """Names moved out of a long module stay importable from it (and from its package) as the same object."""
    import importlib

    obj = getattr(importlib.import_module(home), name)
    module = importlib.import_module(old)
    package = importlib.import_module(old.rpartition(".")[0])
    assert obj.__module__ == home and getattr(module, name) is obj and name in module.__all__
    if old.startswith("recon_jax.bounds"):
        assert getattr(package, name) is obj


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
