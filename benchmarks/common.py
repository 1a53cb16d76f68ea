"""Shared helpers for the benchmark scripts: timing, the machine's matmul peak, and BENCH lines.

Every benchmark prints, besides human-readable text, one machine-readable line per comparison:

    BENCH name=<id> ours=<float> baseline=<float> unit=<unit> ratio=<float>

where ``ratio > 1`` means recon_jax is better (faster, or higher throughput).
"""

from __future__ import annotations

import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["bench_line", "time_call", "matmul_peak_gflops", "print_matmul_peak"]


def bench_line(name: str, ours: float, baseline: float, unit: str, ratio: float | None = None) -> str:
    """Formats and prints one BENCH line. ``ratio`` defaults to ours/baseline for throughput units."""
    if ratio is None:
        ratio = ours / baseline if baseline else 0.0
    line = f"BENCH name={name} ours={ours:.6g} baseline={baseline:.6g} unit={unit} ratio={ratio:.6g}"
    print(line, flush=True)
    return line


def time_call(fn: Callable[[], object], repeats: int = 3, warmup: int = 1) -> float:
    """Best wall-clock seconds of ``fn()`` over ``repeats`` runs (results blocked until ready)."""
    for _ in range(warmup):
        jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_peak_gflops(n: int | None = None, repeats: int = 5) -> float:
    """Measures float32 matmul throughput (GFLOP/s) of the default device with an n x n product, at JAX's default
    matmul precision (on recent NVIDIA GPUs that rounds the operands to TF32).

    ``n`` defaults to 2,048 on the CPU and 8,192 on an accelerator (a 2,048 product takes ~0.1 ms on an H100,
    too short to time well, and does not fill the chip)."""
    if n is None:
        n = 2048 if jax.default_backend() == "cpu" else 8192
    key = jax.random.key(0)
    a = jax.random.normal(key, (n, n), jnp.float32)
    b = jax.random.normal(jax.random.fold_in(key, 1), (n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    seconds = time_call(lambda: f(a, b), repeats=repeats)
    return 2.0 * n**3 / seconds / 1e9


def print_matmul_peak() -> float:
    """Prints the ``matmul_peak`` BENCH line and returns the GFLOP/s."""
    peak = matmul_peak_gflops()
    bench_line("matmul_peak", peak, 0.0, "GFLOP/s", ratio=0.0)
    return float(np.asarray(peak))
