"""Helpers shared by the experiment entry points (run metadata, workdirs). Not part of the library API."""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

import jax

from recon_jax.io import atomic_write_json

__all__ = ["prepare_workdir", "config_to_dict", "write_run_info", "experiment_flags"]


def config_to_dict(config: Any) -> dict:
    """Converts an ml_collections ConfigDict (or a dict) to plain JSON-able Python objects."""
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    return dict(config)


def prepare_workdir(workdir: str) -> str:
    """Creates ``workdir`` (and parents) and returns its absolute path."""
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    return workdir


def write_run_info(workdir: str, config: Any, seed: int | None = None, extra: dict | None = None) -> dict:
    """Writes ``config.json`` with the resolved config, seed, versions and device list. Returns what it wrote."""
    info = {
        "config": config_to_dict(config),
        "seed": seed,
        "jax_version": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": sys.argv,
    }
    if extra:
        info.update(extra)
    atomic_write_json(os.path.join(workdir, "config.json"), info)
    return info


def experiment_flags(default_config: str | None, default_workdir: str | None):
    """Defines the ``--config`` / ``--workdir`` flags once per process and returns their holders.

    Experiment modules call this at import time. Several experiments imported into one process (the test
    suite) share the same two flags instead of failing with absl's DuplicateFlagError; ``run(config, workdir)``
    never reads them.
    """
    from absl import flags
    from ml_collections import config_flags

    if "config" in flags.FLAGS and "workdir" in flags.FLAGS:
        return (flags.FlagHolder(flags.FLAGS, flags.FLAGS["config"]),
                flags.FlagHolder(flags.FLAGS, flags.FLAGS["workdir"]))
    config = config_flags.DEFINE_config_file("config", default_config, "config file path[:variant]")
    workdir = flags.DEFINE_string("workdir", default_workdir, "output directory")
    return config, workdir
