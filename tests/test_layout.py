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
