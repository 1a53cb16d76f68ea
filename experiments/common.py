"""Helpers shared by the experiment entry points, re-exported from the package.

The evidence helpers (provenance, claims, NaN refusal, keyed caches, publishing) live in
:mod:`recon_jax.report.evidence`, the ``--config`` / ``--workdir`` flags and ``run_app`` in
:mod:`recon_jax.report.cli`; every experiment imports them from here. Every experiment's ``run(config, workdir)``
follows the same shape::

    run_info = start_run(workdir, config, seed=config.seed)   # config.json with commit, machine, versions
    ...                                                       # require_finite(...) on losses, models, metrics
    claims = [claim("attack beats the oracle", mse < oracle, f"mean MSE {mse:.4f} vs oracle {oracle:.4f}")]
    return finish_run(run_info, metrics, report_text, claims)  # report.md (+ Claims), metrics.json, wall time
"""

from __future__ import annotations

from recon_jax.report import cli, evidence
from recon_jax.report.cli import experiment_flags, forget_overrides, run_app
from recon_jax.report.evidence import (VERDICTS, NonFiniteResult, ResumeAcrossCodeError, RunInfo,
                                       allow_resume_across_code, check_claims, claim, claims_markdown,
                                       code_fingerprint, comparison, config_to_dict, finish_run, is_vacuous,
                                       keyed_dir, paired_comparison, prepare_workdir, provenance, publish,
                                       require_finite, start_run, student_t_half_width, write_run_info)

__all__ = [*evidence.__all__, *cli.__all__]
