"""The run harness of every experiment and of the risk report: what a run records, claims, prints and draws.

- :mod:`recon_jax.evidence.run`: provenance (``config.json``), NaN refusal, keyed caches and resume points, segments,
  ``finish_run`` (report.md, metrics.json) and ``publish``.
- :mod:`recon_jax.evidence.segments`: the processes that made a run (``segments.json``) and their total wall time.
- :mod:`recon_jax.evidence.claims`: claims and their verdicts (``VERDICTS``: holds, fails, undecided), comparisons.
- :mod:`recon_jax.evidence.launcher`: the ``--config`` / ``--workdir`` flags and ``run_app`` of the launchers, and
  ``launch``, every experiment's command line.
- :mod:`recon_jax.evidence.config_checks`: each config field's allowed range, declared per experiment (``CHECKS``)
  and checked by ``check_config`` before a run writes anything (``ConfigError``: one line on the command line);
  ``check_fits``, the sizes the data must meet.
- :mod:`recon_jax.evidence.markdown`, :mod:`recon_jax.evidence.plots`, :mod:`recon_jax.evidence.progress`: tables,
  the figures every run draws (image grids, histograms against a reference), progress lines.
- :mod:`recon_jax.evidence.hcr_figures`: the HCR bounds' figures (Tygert et al.), for ``experiments/tygert_hcr.py``
  and the ``colab/hcr`` notebook; imported from that module, not exported here.
"""

from recon_jax.evidence import claims, config_checks, launcher, markdown, plots, progress, run, segments
from recon_jax.evidence.claims import (VERDICTS, check_claims, claim, claims_markdown, comparison, is_vacuous,
                                       paired_comparison, student_t_half_width)
from recon_jax.evidence.config_checks import (Computed, ConfigError, Rule, any_of, check_config, check_fits, computed,
                                              each, explained, field_value, integer, number, one_of, optional,
                                              satisfies, when)
from recon_jax.evidence.launcher import experiment_flags, forget_overrides, launch, run_app, run_summary
from recon_jax.evidence.markdown import format_value, markdown_table
from recon_jax.evidence.plots import histogram_vs_reference, image_grid
from recon_jax.evidence.progress import step
from recon_jax.evidence.run import (NonFiniteResult, ResumeAcrossCodeError, RunInfo, allow_resume_across_code,
                                    code_fingerprint, config_to_dict, finish_run, keyed_dir, prepare_workdir,
                                    provenance, publish, require_finite, start_run, stored_result, StoredResult,
                                    wall_time, write_run_info)
from recon_jax.evidence.segments import WallTime, read_segments, total_wall_time

__all__ = [*run.__all__, *segments.__all__, *claims.__all__, *config_checks.__all__, *launcher.__all__,
           *markdown.__all__, *plots.__all__, *progress.__all__]
