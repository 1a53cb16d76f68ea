"""Inverting Gradients: K restarts in one vmapped call vs K sequential calls of the same jitted attack.

    python -m benchmarks.run inverting_gradients

Setting: Biswas et al.'s 256-50-15-10 sigmoid MLP (13,700 parameters, no biases), one 16x16 input, cosine
gradient matching + TV, Adam on the signed gradient. ``ours`` = one call of
:func:`recon_jax.attacks.gradient.inverting_gradients` with ``num_restarts=K`` (restarts vmapped inside one jitted
program); ``baseline`` = K calls of the same function with ``num_restarts=1`` (the same jitted program, reused).
Both are timed after a warm-up call (compilation excluded), best of 3. The BENCH ratio is baseline / ours
(> 1: vmapped restarts are faster).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.common import bench_line, time_call
from recon_jax.attacks.gradient import InvertingGradientsOptions, inverting_gradients, model_gradient

NUM_RESTARTS = 8
NUM_STEPS = 200


def _setup():
    sizes = (256, 50, 15, 10)
    keys = jax.random.split(jax.random.key(0), 3)
    params = {f"w{i}": jax.random.uniform(keys[i], (a, b), minval=-1, maxval=1) / np.sqrt(a)
              for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))}

    def apply(p, x):
        h = jax.nn.sigmoid(x.reshape(x.shape[0], -1) @ p["w0"])
        h = jax.nn.sigmoid(h @ p["w1"])
        return h @ p["w2"]

    x = jax.random.uniform(jax.random.key(1), (1, 16, 16, 1))
    labels = jnp.array([3])
    g = model_gradient(apply, params, x, jax.nn.one_hot(labels, 10))
    return apply, params, g, labels


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--restarts", type=int, default=NUM_RESTARTS)
    p.add_argument("--steps", type=int, default=NUM_STEPS)
    args = p.parse_args([] if argv is None else argv)
    restarts = args.restarts
    apply, params, g, labels = _setup()
    opts = dict(num_steps=args.steps, tv_weight=1e-4)

    def vmapped():
        return inverting_gradients(jax.random.key(2), apply, params, g, (16, 16, 1),
                                   InvertingGradientsOptions(num_restarts=restarts, **opts),
                                   labels=labels).all_reconstructions

    def sequential():
        outs = [inverting_gradients(jax.random.fold_in(jax.random.key(2), k), apply, params, g, (16, 16, 1),
                                    InvertingGradientsOptions(num_restarts=1, **opts), labels=labels).reconstruction
                for k in range(restarts)]
        return jnp.stack(outs)

    t_ours = time_call(vmapped, repeats=3, warmup=1)
    t_base = time_call(sequential, repeats=3, warmup=1)
    print(f"IG K={restarts} restarts x {args.steps} steps: vmapped {t_ours:.3f} s, sequential {t_base:.3f} s "
          f"(devices: {jax.devices()}; shared CPU, timings noisy)")
    bench_line("ig_restarts_vmap_vs_sequential", t_ours, t_base, "s", ratio=t_base / t_ours)


if __name__ == "__main__":
    main(__import__("sys").argv[1:])
