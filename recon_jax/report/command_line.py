"""The ``recon-jax-report`` command line (also ``python -m experiments.risk_report``).

- ``--config=smoke|default|paper`` names a shipped variant (:data:`recon_jax.report.config.VARIANTS`); a
  config file ``path[:variant]`` works too. Without ``--config``: the default variant.
- ``--config.<field>=value`` overrides a field; a field the config does not have stops at once with one line that
  names it and the closest field.
- ``--help`` lists every config field with its default (in the variant named by ``--config``) and one line of
  meaning, from :data:`recon_jax.report.config.FIELDS`.
- Config and data errors (:class:`recon_jax.evidence.config_checks.ConfigError`: the field, the value, what is allowed),
  and a workdir holding results of other code (:class:`recon_jax.evidence.run.ResumeAcrossCodeError`: what to
  do), print one line and exit with status 2; ``--debug`` shows the traceback instead. Other errors keep theirs.
"""

from __future__ import annotations

import difflib
import os
import sys
from typing import Callable

from recon_jax.evidence.launcher import experiment_flags, forget_overrides, run_app
from recon_jax.evidence.config_checks import ConfigError
from recon_jax.evidence.run import ResumeAcrossCodeError
from recon_jax.report.config import DESCRIPTIONS, FIELDS, VARIANTS, get_config

__all__ = ["USAGE", "config_argument", "help_text", "unknown_fields", "console"]

USAGE = ("usage: {prog} [--config=smoke|default|paper|FILE.py[:variant]] [--config.FIELD=VALUE ...] "
         "[--workdir=DIR] [--allow_resume_across_code] [--debug] [--help]")


def config_argument(argv: list[str], default_config: str) -> tuple[list[str], str | None]:
    """``argv`` with its ``--config`` made explicit and first (a variant name becomes ``default_config``'s file with
    that variant), and the shipped variant it names (None for another config file).

    >>> config_argument(["prog", "--config.seed=1", "--config=smoke"], "/pkg/config.py:default")
    (['prog', '--config=/pkg/config.py:smoke', '--config.seed=1'], 'smoke')
    >>> config_argument(["prog"], "/pkg/config.py:default")
    (['prog', '--config=/pkg/config.py:default'], 'default')
    """
    path, _, default_variant = default_config.rpartition(":")
    value, rest, i = None, [], 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--config="):
            value = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(argv):
            value, i = argv[i + 1], i + 1
        else:
            rest.append(arg)
        i += 1
    if value is None:
        value = default_variant
    name = value[1:] if value.startswith(":") else value
    if name in VARIANTS:
        return [argv[0], f"--config={path}:{name}"] + rest, name
    file, _, variant = value.partition(":")
    shipped = os.path.abspath(file) == os.path.abspath(path) and (variant or default_variant) in VARIANTS
    return [argv[0], f"--config={value}"] + rest, (variant or default_variant) if shipped else None


def unknown_fields(argv: list[str]) -> list[str]:
    """The one-line messages for ``--config.<field>`` overrides naming fields the report's config lacks.

    >>> unknown_fields(["prog", "--config.noise_multiplier=1.0", "--config.seed=3"])
    ["unknown config field 'noise_multiplier' (--config.noise_multiplier=1.0); did you mean 'noise_multipliers'? \
--help lists the fields"]
    """
    out = []
    for arg in argv[1:]:
        if arg.startswith(("--config.", "--noconfig.")):
            name = arg.split("=", 1)[0].split(".", 1)[1]
            field = name.split(".")[0]
            if field not in DESCRIPTIONS:
                close = difflib.get_close_matches(field, DESCRIPTIONS, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                out.append(f"unknown config field {field!r} ({arg}){hint} --help lists the fields")
    return out


def _show(value) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value) if isinstance(value, str) else str(value)


def help_text(prog: str, variant: str = "default") -> str:
    """``--help``: usage, the variants, and every config field with its value in ``variant`` and its meaning."""
    config = get_config(variant)
    flags = {name: f"  --config.{name}={_show(config[name])}" for name in DESCRIPTIONS}
    width = min(46, max(len(f) for f in flags.values()))
    lines = [USAGE.format(prog=prog), "",
             "The reconstruction-risk report: how well could someone reconstruct a training record of your model, "
             "and what do the theorems guarantee?", "",
             f"--config         a shipped variant: {', '.join(VARIANTS)} (default: default), or a config file "
             "path[:variant]",
             "--workdir        output folder (default: runs/risk_report): report.md, metrics.json, config.json, "
             "figures",
             "--debug          show tracebacks for config and data errors (otherwise one line, exit status 2)",
             "--allow_resume_across_code",
             "                 reuse the workdir's stored models and results although the code changed since "
             "they were written",
             "--helpfull       absl's flags", "",
             f"Config fields (defaults of the {variant!r} variant; --config=NAME --help shows another's):"]
    for name, _, meaning in FIELDS:
        lines.append(flags[name].ljust(width) + f"  {meaning}")
    lines += ["", "Own model and images: " + prog + " --config.dataset=folder --config.data_path=DIR "
              "--config.model=model.py:Net --config.noise_multipliers='(1.0,)'"]
    return "\n".join(lines)


def _stop(prog: str, message: str) -> None:
    print(f"{prog}: {message}", file=sys.stderr)
    sys.exit(2)


def console(run: Callable[[object, str], dict], default_config: str, argv: list[str]) -> None:
    """Runs ``run(config, workdir)`` from the command line ``argv`` (see the module docstring)."""
    prog = os.path.basename(argv[0]) or "recon-jax-report"
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    argv, variant = config_argument(argv, default_config)
    if any(a in ("--help", "-h", "--helpshort", "-?") for a in argv[1:]):
        print(help_text(prog, variant or "default"))
        sys.exit(0)
    file = argv[1].split("=", 1)[1].partition(":")[0]
    if not os.path.isfile(file):
        _stop(prog, f"--config={file!r} is neither a shipped variant ({', '.join(VARIANTS)}) nor a config file")
    if variant is not None:
        for message in unknown_fields(argv):
            _stop(prog, message)
    sys.argv = argv  # ml_collections reads the overrides from sys.argv when it loads the config
    forget_overrides()  # a second command line in one process (tests, notebooks) starts from the config file
    config, workdir = experiment_flags(default_config, "runs/risk_report")

    def main(_):
        try:
            run(config.value, workdir.value)
        except (ConfigError, ResumeAcrossCodeError) as err:
            if debug:
                raise
            _stop(prog, " ".join(str(err).split()) + " (--debug shows the traceback)")

    run_app(main, argv)
