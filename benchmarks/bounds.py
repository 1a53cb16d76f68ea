"""Benchmark: one million jitted bound evaluations against the same computation in SciPy / NumPy.

- ``bounds_rero_mse_vs_scipy``: ``rero_mse`` over 1e6 (eta, sigma) pairs (dim = 1000), jitted, against
  ``scipy.special.gammainc`` on the same arrays (vectorised NumPy ufunc, i.e. SciPy's best case).
- ``bounds_rdp_curve_vs_numpy``: ``rero_from_rdp_curve(..., method="balle")`` (Balle et al. Thm. 2) for 1e6
  (kappa, sigma) pairs over 100 Renyi orders of the Gaussian mechanism, jitted, against the same formula in NumPy
  (chunked so both stay in memory).

Units are evaluations per second; ratio = ours / baseline (> 1: recon_jax faster). Timings are best-of-3 wall
clock on whatever CPU runs this (noisy on a shared machine).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special as sc

from benchmarks.common import bench_line, time_call
from recon_jax import bounds

N_EVAL = 1_000_000
N_ORDERS = 100


def bench_rero_mse(n: int = N_EVAL) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    eta = rng.uniform(0.1, 3.0, n)
    sigma = rng.uniform(0.5, 2.0, n)
    dim, clip = 1000.0, 1.0
    with jax.enable_x64(True):
        f = jax.jit(lambda e, s: bounds.rero_mse(e, s, clip, dim))
        e_j, s_j = jnp.asarray(eta), jnp.asarray(sigma)
        ours = time_call(lambda: f(e_j, s_j))
        got = np.asarray(f(e_j, s_j))

    def baseline():
        return sc.gammainc(dim / 2, dim * eta / (2 * clip**2 * sigma**2))

    base = time_call(baseline, warmup=0)
    np.testing.assert_allclose(got, baseline(), rtol=1e-9, atol=1e-300)  # same numbers, not just fast
    return n / ours, n / base


def bench_rdp_curve(n: int = N_EVAL, k: int = N_ORDERS, chunk: int = 100_000) -> tuple[float, float]:
    rng = np.random.default_rng(1)
    kappa = 10 ** rng.uniform(-9, -1, n)
    sigma = rng.uniform(0.5, 10.0, n)
    orders = np.geomspace(1.01, 256.0, k)
    with jax.enable_x64(True):
        f = jax.jit(
            lambda kap, s: bounds.rero_from_rdp_curve(kap, orders, orders / (2 * s[:, None] ** 2), method="balle",
                                                      validate=False)
        )
        k_j, s_j = jnp.asarray(kappa), jnp.asarray(sigma)
        ours = time_call(lambda: f(k_j, s_j))
        got = np.asarray(f(k_j, s_j))

    def baseline():
        out = np.empty(n)
        for i in range(0, n, chunk):
            kap, s = kappa[i : i + chunk, None], sigma[i : i + chunk, None]
            rdp = orders / (2 * s**2)
            log_g = (1 - 1 / orders) * (np.log(kap) + rdp)
            out[i : i + chunk] = np.exp(np.minimum(log_g.min(axis=1), 0.0))
        return out

    base = time_call(baseline, warmup=0)
    np.testing.assert_allclose(got, baseline(), rtol=1e-12)
    return n / ours, n / base


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=N_EVAL, help="evaluations per comparison")
    args = p.parse_args([] if argv is None else argv)
    ours, base = bench_rero_mse(args.n)
    bench_line("bounds_rero_mse_vs_scipy", ours, base, "eval/s")
    ours, base = bench_rdp_curve(args.n, chunk=min(100_000, args.n))
    bench_line("bounds_rdp_curve_vs_numpy", ours, base, "eval/s")


if __name__ == "__main__":
    main(__import__("sys").argv[1:])
