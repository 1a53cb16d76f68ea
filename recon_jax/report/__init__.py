"""The reconstruction-risk report: "if I train this model on my data with this DP-SGD configuration and release it,
how well could someone reconstruct a training record, and what do the theorems guarantee?" (the
``recon-jax-report`` console script; ``make demo``).

- :mod:`recon_jax.report.app`: the run (``run``, ``console_main``; ``DEFAULT_CONFIG``, the config file shipped in the
  package, which the console script reads from a wheel).
- :mod:`recon_jax.report.config`: the config, its variants and every field's meaning (``get_config``).
- :mod:`recon_jax.report.setup`: validation (``validate_config``: the fields' ranges are its ``CHECKS``, checked by the
  experiments' mechanism, :mod:`recon_jax.evidence.config_checks`, whose ``ConfigError`` it raises) and the model, data and reconstructor the config names;
  :mod:`recon_jax.report.sizes`: the sizes fitted to the data.
- :mod:`recon_jax.report.updates`: the "every update released" threat model (prior-aware games, audits).
- :mod:`recon_jax.report.text`, :mod:`recon_jax.report.figure`: the report's text, claims and figure;
  :mod:`recon_jax.report.reading`: its plain-language reading (interpretation, calibration).
- :mod:`recon_jax.report.command_line`: the console script's command line.

The harness it runs on (provenance, claims, caches, tables, figures) is :mod:`recon_jax.evidence`.
"""

from recon_jax.evidence.config_checks import ConfigError
from recon_jax.report.app import DEFAULT_CONFIG, console_main, run, sampling
from recon_jax.report.config import get_config
from recon_jax.report.setup import validate_config

__all__ = ["run", "console_main", "sampling", "DEFAULT_CONFIG", "get_config", "validate_config", "ConfigError"]
