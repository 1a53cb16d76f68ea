"""Config for experiments.risk_report (``make demo``): the report's config, defined in the package
(:mod:`recon_jax.report.config`, where the ``recon-jax-report`` console script finds it from a wheel).

Variants: ``smoke`` (seconds, CI), ``default`` (``make demo``), ``paper``; see that module for the sizes. Override
any field: ``--config.noise_multipliers='(1.0, 4.0)'``.
"""

from recon_jax.report.config import get_config

__all__ = ["get_config"]
