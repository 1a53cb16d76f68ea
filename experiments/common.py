"""Helpers shared by the experiment entry points, re-exported from the package.

The evidence helpers (provenance, NaN refusal, keyed caches, publishing) live in :mod:`recon_jax.evidence.run`,
claims and their verdicts in :mod:`recon_jax.evidence.claims`, the config checks (``check_config``, ``check_fits``,
``ConfigError``) in :mod:`recon_jax.evidence.config_checks`, the command line (``--config`` / ``--workdir``,
:func:`~recon_jax.evidence.launcher.launch`) in :mod:`recon_jax.evidence.launcher`; every experiment imports them
from here. Every experiment's ``run(config, workdir)`` follows the same shape::

    check_config(config, CHECKS)                              # CHECKS: experiments/configs/<name>.py, field -> range
    images, labels = load_dataset(config.dataset, "train")
    check_fits(config, ("fixed_size", "num_targets"), len(images), "training records")  # sizes the data can meet
    run_info = start_run(workdir, config, seed=config.seed)   # config.json with commit, machine, versions
    ...                                                       # require_finite(...) on losses, models, metrics
    claims = [claim("attack beats the oracle", detail=f"mean MSE {mse:.4f} vs oracle {oracle:.4f}",
                    comparisons=[paired_comparison("MSE - oracle MSE", mse_per_target, oracle_per_target, "<=",
                                                   alpha=config.claim_alpha)])]  # holds / fails / undecided
    return finish_run(run_info, metrics, report_text, claims)  # report.md (+ Claims), metrics.json, wall time

and ends with the command line, written once in :func:`~recon_jax.evidence.launcher.launch`::

    if __name__ == "__main__":
        launch(run, "experiments/configs/<name>.py:default", "runs/<name>")
"""

from __future__ import annotations

import recon_jax.evidence.claims
import recon_jax.evidence.config_checks
import recon_jax.evidence.launcher
import recon_jax.evidence.run
from recon_jax.evidence.claims import (VERDICTS, check_claims, claim, claims_markdown, comparison, is_vacuous,
                                       paired_comparison, student_t_half_width)
from recon_jax.evidence.config_checks import (Computed, ConfigError, Rule, any_of, check_config, check_fits, computed,
                                              each, explained, field_value, integer, number, one_of, optional,
                                              satisfies, when)
from recon_jax.evidence.launcher import experiment_flags, forget_overrides, launch, run_app, run_summary
from recon_jax.evidence.run import (NonFiniteResult, ResumeAcrossCodeError, RunInfo, allow_resume_across_code,
                                    code_fingerprint, config_to_dict, finish_run, keyed_dir, prepare_workdir,
                                    provenance, publish, require_finite, start_run, stored_result, StoredResult,
                                    wall_time, write_run_info)

__all__ = [*recon_jax.evidence.run.__all__, *recon_jax.evidence.claims.__all__,
           *recon_jax.evidence.config_checks.__all__, *recon_jax.evidence.launcher.__all__]
