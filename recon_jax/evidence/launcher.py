"""The launchers' command line, for the experiments and the risk report (:mod:`recon_jax.report.command_line`):
``--config`` / ``--workdir`` flags, ``run_app``, and :func:`launch`, the one command line every experiment shares."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from recon_jax.evidence.config_checks import ConfigError

__all__ = ["experiment_flags", "forget_overrides", "run_app", "launch", "run_summary"]


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
    try:  # ml_collections applies the --config.<field> overrides of sys.argv here, when the config file loads
        config = config_flags.DEFINE_config_file("config", default_config, "config file path[:variant]")
    except (AttributeError, KeyError) as err:
        _unknown_field(sys.argv, err)
    workdir = flags.DEFINE_string("workdir", default_workdir, "output directory")
    if "allow_resume_across_code" not in flags.FLAGS:
        flags.DEFINE_bool("allow_resume_across_code", False,
                          "resume from caches, shadow stores and reconstructor checkpoints written by other code "
                          "(refused by default; the report then lists which code made which part)")
    return config, workdir


def forget_overrides() -> None:
    """Removes the ``--config.<field>`` flags an earlier parse in this process registered (ml_collections defines
    one per override and refuses to define it twice), so that a second command line can be parsed in-process."""
    from absl import flags

    for name in [n for n in flags.FLAGS if n.startswith(("config.", "noconfig."))]:
        delattr(flags.FLAGS, name)


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with a clear message for ``--config.<field>`` overrides the config does not have."""
    from absl import flags

    try:
        rest = flags.FLAGS(argv)
        if "allow_resume_across_code" in flags.FLAGS and flags.FLAGS.allow_resume_across_code:
            from recon_jax.evidence.run import allow_resume_across_code

            allow_resume_across_code(True)
        return rest
    except flags.Error as err:
        print(f"{os.path.basename(argv[0])}: {_one_line(str(err))} (--helpfull lists the flags)", file=sys.stderr)
        sys.exit(2)
    except (AttributeError, KeyError) as err:  # ml_collections: an override names a field the config lacks
        _unknown_field(argv, err)


def _one_line(message: str) -> str:
    r"""absl's message for a flag, without the traceback ml_collections embeds when the config file itself raises
    (e.g. an unknown variant): its first line and the exception's last.

    >>> _one_line("flag --config=c.py:smok: Error whilst parsing config file:\n\nTraceback (most recent call "
    ...           "last):\n  File ...\nValueError: unknown variant 'smok'\n")
    "flag --config=c.py:smok: Error whilst parsing config file: ValueError: unknown variant 'smok'"
    """
    if "Traceback (most recent call last)" not in message:
        return message
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return f"{lines[0]} {lines[-1]}"


def _unknown_field(argv: list[str], err: Exception) -> None:
    """One line for an override naming a field the config lacks (ml_collections raises a KeyError or an
    AttributeError whose text is the field and a "Did you mean" line), then exit status 2."""
    while err.args and isinstance(err.args[0], BaseException):  # an AttributeError wrapping the KeyError
        err = err.args[0]
    text = str(err.args[0]) if err.args else str(err)
    field, _, hint = text.partition("\n")
    given = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")]
    print(f"{os.path.basename(argv[0])}: unknown config field {field.strip(chr(39))!r} in "
          f"{', '.join(given) or 'the --config overrides'}{'; ' + hint.strip() if hint else ''} (check the spelling "
          "against the experiment's config file, experiments/configs/<name>.py)", file=sys.stderr)
    sys.exit(2)


def run_app(main, argv: list[str] | None = None) -> None:
    """``absl.app.run(main)`` with one-line errors (exit status 2) for malformed ``--config.<field>`` overrides, a
    config file that raises (an unknown variant) and a ``--workdir`` that is a file.

    absl shows INFO logs on stderr; JAX's backend probe logs there that no TPU library was found on every
    machine without one, which only tells a user what they already know, so that one logger is kept at WARNING.
    """
    import logging

    from absl import app, flags

    from recon_jax.evidence.run import workdir_problem

    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)

    def checked(args):
        problem = workdir_problem(flags.FLAGS.workdir) if "workdir" in flags.FLAGS and flags.FLAGS.workdir else None
        if problem:
            print(f"{os.path.basename(sys.argv[0] if argv is None else argv[0])}: --workdir={problem} (give a new or "
                  "existing folder for the report, metrics and caches)", file=sys.stderr)
            sys.exit(2)
        return main(args)

    app.run(checked, argv=argv, flags_parser=_parse_flags)


def run_summary(metrics: Mapping[str, Any], workdir: str) -> str:
    """One line after a run: where its report is and how its claims came out, e.g.
    ``report: runs/x/report.md; claims: holds 3, fails 1, undecided 1``.

    >>> run_summary({"claims": [{"verdict": "holds"}, {"verdict": "undecided"}, {"holds": False}]}, "w")
    'report: w/report.md; claims: holds 1, fails 1, undecided 1'
    """
    counts = {"holds": 0, "fails": 0, "undecided": 0}
    for c in metrics.get("claims", []):
        counts[c.get("verdict") or ("holds" if c.get("holds") else "fails")] += 1
    return f"report: {os.path.join(workdir, 'report.md')}; claims: " + ", ".join(f"{k} {n}" for k, n in counts.items())


def _config_paths(argv: list[str], default_config: str, repo: str) -> tuple[list[str], str]:
    """``argv`` and ``default_config`` with the config file found from anywhere: ``--config=smoke`` (a bare variant
    name) means the experiment's own config file with that variant, and a relative path that does not exist from
    the current directory is read from ``repo`` (``experiments/configs/...`` from outside the repository). A file
    found nowhere prints one line and exits with status 2 (it was a traceback from the config loader).
    """
    def found(value: str) -> str:
        path, colon, variant = value.partition(":")
        if path and not os.path.isfile(path) and os.path.isfile(os.path.join(repo, path)):
            return os.path.join(repo, path) + colon + variant
        return value

    default_file = default_config.partition(":")[0]
    out = list(argv[:1])
    for arg in argv[1:]:
        if arg.startswith("--config="):
            value = arg.split("=", 1)[1]
            if value and not os.path.exists(value) and not value.endswith(".py") and not {"/", ":", "."} & set(value):
                value = f"{default_file}:{value}"  # a variant name
            value = found(value)
            path = value.partition(":")[0]
            if not os.path.isfile(path):
                print(f"{os.path.basename(argv[0])}: --config={arg.split('=', 1)[1]}: no config file {path!r} here "
                      f"or under {repo} (give experiments/configs/<name>.py[:variant] or a variant name)",
                      file=sys.stderr)
                sys.exit(2)
            arg = f"--config={value}"
        out.append(arg)
    return out, found(default_config)


def launch(run: Callable[[Any, str], Mapping[str, Any]], default_config: str, default_workdir: str) -> None:
    """An experiment's command line, written once (the ``train_and_evaluate(config, workdir)`` pattern of the flax
    examples): ``python -m experiments.<name> --config=experiments/configs/<name>.py:<variant> --workdir=DIR``
    runs ``run(config, workdir)`` and prints :func:`run_summary`. The command line is ``sys.argv`` (ml_collections
    reads the ``--config.<field>`` overrides from there). A config value outside its allowed range
    (:class:`~recon_jax.evidence.config_checks.ConfigError`, raised by ``run`` before it writes anything) prints
    one line and exits with status 2.

    An experiment module ends with::

        if __name__ == "__main__":
            launch(run, "experiments/configs/<name>.py:default", "runs/<name>")
    """
    import inspect

    repo = os.path.dirname(os.path.dirname(os.path.abspath(inspect.getfile(run))))  # experiments/<name>.py's root
    sys.argv[:], default_config = _config_paths(sys.argv, default_config, repo)
    config, workdir = experiment_flags(default_config, default_workdir)

    def main(args):
        del args
        try:
            metrics = run(config.value, workdir.value)
        except ConfigError as err:
            print(f"{os.path.basename(sys.argv[0])}: {' '.join(str(err).split())}", file=sys.stderr)
            sys.exit(2)
        print(run_summary(metrics, workdir.value))

    run_app(main)
