"""Prior-aware attack (Hayes et al. 2023): ghost-norm candidate scoring vs materialised per-example gradients.

Workload: Balle et al.'s MNIST MLP (784-10-10 ELU), full-batch DP-GD (clip 1, lr 0.2, momentum 0.9) on a fixed
set of n MNIST records, the risk report's game: every trial trains on D- plus its target and scores k candidate
records at every step, vmapped over three noise multipliers and the trials of one chunk
(:func:`recon_jax.attacks.prior_aware.prior_aware_game`). Both paths compute the same scores (to rounding;
``tests/attacks/test_prior_aware.py``).

BENCH line (ratio of trajectories/s; > 1 means the ghost path is faster):

- ``prior_aware_ghost_vs_per_example``: ours = the dense-layer path (D- by ghost clipping, candidates by ghost
  inner products, no ``[k, P]`` gradients), baseline = the same model without its tap (``vmap(grad)`` for D- and
  the candidates).

Run: ``python -m benchmarks.prior_aware [--trials 32] [--k 100] [--fixed 1000] [--steps 100]``.
"""

from __future__ import annotations

import argparse
import dataclasses

from benchmarks.common import bench_line, time_call


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--fixed", type=int, default=1000)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv if argv is not None else [])

    import jax
    import numpy as np
    import optax

    from recon_jax import models, training
    from recon_jax.attacks import prior_aware
    from recon_jax.attacks.canaries import GameTraining
    from recon_jax.data import load_dataset

    x, y = load_dataset("mnist", "train")
    n, k, trials = args.fixed, args.k, args.trials
    rng = np.random.default_rng(0)
    idx = np.stack([rng.choice(np.arange(n, len(x)), k, replace=False) for _ in range(trials)])
    fns = models.from_flax(models.balle_mnist_mlp())
    p0 = training.initial_params(fns, jax.random.key(0), x[:n])
    opt = optax.sgd(0.2, momentum=0.9)
    sigmas = [1.0, 4.0, 16.0]

    def game(f):
        return lambda: prior_aware.prior_aware_game(
            f, p0, (x[:n], y[:n]), (x[idx], y[idx]), np.zeros(trials, np.int32),
            GameTraining(noise_multipliers=sigmas, clip_norm=1.0, steps=args.steps, optimizer=opt),
            jax.random.key(1), chunk_size=trials).scores

    work = trials * len(sigmas)
    ours = work / time_call(game(fns), repeats=args.repeats)
    base = work / time_call(game(dataclasses.replace(fns, tap=None)), repeats=args.repeats)
    bench_line("prior_aware_ghost_vs_per_example", ours, base, "trajectories/s")
    return {"ghost": ours, "per_example": base}


if __name__ == "__main__":
    main()
