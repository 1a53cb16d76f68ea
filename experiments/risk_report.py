"""The reconstruction-risk report (``make demo``); the implementation is :mod:`recon_jax.report.app`.

python -m experiments.risk_report --config=experiments/configs/risk_report.py:default --workdir=runs/demo

The same program is installed with the package as the console script ``recon-jax-report``.
"""

from recon_jax.report import console_main, run, sampling, validate_config

__all__ = ["console_main", "run", "sampling", "validate_config"]

if __name__ == "__main__":
    console_main()
