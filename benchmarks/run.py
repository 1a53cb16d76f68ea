"""Runs benchmark scripts: ``python -m benchmarks.run [name ...] [-- benchmark args]`` (all when no name is given).

Each script is a module ``benchmarks/<name>.py`` with a ``main(argv)`` that parses only the list it is given
(``None`` or ``[]``: its defaults), never ``sys.argv``; the runner hands it the arguments after ``--``. The runner
first prints the machine's float32 matmul peak (``--no-peak`` skips it) so every other figure can be read as a
fraction of it.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks
from benchmarks.common import print_matmul_peak

_NOT_BENCHMARKS = {"run", "common"}


def available() -> list[str]:
    """Names of the benchmark scripts in this package."""
    return sorted(
        m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name not in _NOT_BENCHMARKS and not m.name.startswith("_")
    )


def main(argv: list[str] | None = None) -> int:
    """Runs the named benchmarks (all when none is named); ``argv`` defaults to ``sys.argv[1:]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, bench_args = argv[:cut], argv[cut + 1:]
    peak = "--no-peak" not in argv
    names = [a for a in argv if a != "--no-peak"]
    known = available()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; available: {known}")
    if peak:
        print_matmul_peak()
    for name in names or known:
        print(f"== benchmark {name} ==", flush=True)
        importlib.import_module(f"benchmarks.{name}").main(list(bench_args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
