"""Command-line plumbing of the report and the experiments: ``--config`` / ``--workdir`` flags and ``run_app``."""

from __future__ import annotations

import os
import sys

__all__ = ["experiment_flags", "run_app"]


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
    if "allow_resume_across_code" not in flags.FLAGS:
        flags.DEFINE_bool("allow_resume_across_code", False,
                          "resume from caches written by other code (refused by default; the report then lists "
                          "which code made which part)")
    return config, workdir


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with a clear message for ``--config.<field>`` overrides the config does not have."""
    from absl import flags

    try:
        rest = flags.FLAGS(argv)
        if "allow_resume_across_code" in flags.FLAGS and flags.FLAGS.allow_resume_across_code:
            from recon_jax.report.evidence import allow_resume_across_code

            allow_resume_across_code(True)
        return rest
    except flags.Error as err:
        sys.exit(f"{os.path.basename(argv[0])}: {err}\nPass --helpfull to see the flags.")
    except (AttributeError, KeyError) as err:  # ml_collections: an override names a field the config lacks
        field = str(err).strip("\"'")
        given = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")]
        sys.exit(f"unknown config field {field!r} in {', '.join(given) or 'the --config overrides'}: "
                 "check the spelling against the experiment's config file (experiments/configs/<name>.py)")


def run_app(main) -> None:
    """``absl.app.run(main)`` with readable errors for malformed ``--config.<field>`` overrides.

    absl shows INFO logs on stderr; JAX's backend probe logs there that no TPU library was found on every
    machine without one, which only tells a user what they already know, so that one logger is kept at WARNING.
    """
    import logging

    from absl import app

    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    app.run(main, flags_parser=_parse_flags)
