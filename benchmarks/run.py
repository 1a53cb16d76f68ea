"""Runs benchmark scripts: ``python -m benchmarks.run [name ...]`` (all when no name is given).

Each script is a module ``benchmarks/<name>.py`` with a ``main()``; this runner first prints the machine's
float32 matmul peak so every other figure can be read as a fraction of it.
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
    names = list(sys.argv[1:] if argv is None else argv)
    known = available()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; available: {known}")
    print_matmul_peak()
    for name in names or known:
        print(f"== benchmark {name} ==", flush=True)
        importlib.import_module(f"benchmarks.{name}").main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
