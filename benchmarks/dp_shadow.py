"""DP-GD shadow models: ghost clipping vs materialised per-example gradients (``vmap(grad)``), side by side.

Workload: Balle et al.'s MNIST MLP (784-10-10 ELU), DP-GD (clip 1, Gaussian noise multiplier 1, lr 0.2,
momentum 0.9), 100 epochs, fixed set n = 1,000, through :func:`recon_jax.shadow.generate_shadow_models`
(the engine's default mesh and chunking), in one process. Both paths compute the same clipped sums (equal to
rounding; ``tests/test_ghost.py``). Also prints non-private GD on the same workload, the ceiling ghost
clipping approaches.

BENCH lines (ratios of models/s; > 1 means the ghost path is faster):

- ``dpgd_ghost_vs_vmap``: ours = ghost clipping (``per_example="auto"``), baseline = ``per_example="vmap"``;
- ``dpgd_ghost_vs_nonprivate``: ours = ghost DP-GD, baseline = full-batch GD without clipping (expected < 1).
- ``dpsgd_minibatch_vs_fullbatch_shadow``: ours = minibatch DP-SGD with a per-model (fresh) batch order, batch
  ``--batch`` (shuffled fixed-size batches), baseline = full-batch DP-GD, same epochs, same data, same clipping
  and noise (so the same FLOPs per epoch); goal >= 0.5.
- ``dpsgd_minibatch_poisson_vs_fullbatch_shadow``: the same with Poisson sampling (expected batch ``--batch``).

Also printed (not a BENCH line): the *noise-only ceiling* of the minibatch comparison, the models/s of drawing
nothing but the minibatch run's per-step Gaussian noise (one normal per parameter per step, the same keys and
sampler as training). Minibatch DP-SGD draws ``n / batch`` times the full-batch noise per epoch, so its ratio to
full batch can never exceed ``ceiling / fullbatch``.

Run: ``python -m benchmarks.dp_shadow [--ghost-models 128] [--vmap-models 8]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from benchmarks.common import bench_line


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ghost-models", type=int, default=128)
    p.add_argument("--vmap-models", type=int, default=8)
    p.add_argument("--fixed", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--batch", type=int, default=100, help="(expected) minibatch size of the DP-SGD comparison")
    p.add_argument("--minibatch-models", type=int, default=32)
    p.add_argument("--chunk", type=int, default=16,
                   help="models per compiled call and device (the vmap path: at most 2); 16 suits the CPU, a GPU "
                        "wants hundreds")
    p.add_argument("--repeats", type=int, default=3,
                   help="timed rounds, each running every configuration once (the best round of each counts)")
    args = p.parse_args(argv if argv is not None else [])

    import jax
    import numpy as np

    from recon_jax import models, shadow, training
    from recon_jax.data import load_dataset

    images, labels = load_dataset("mnist", "train")
    k = max(args.ghost_models, args.vmap_models, args.minibatch_models)
    x = np.asarray(images[: args.fixed + k], np.float32).reshape(args.fixed + k, -1)
    y = np.asarray(labels[: args.fixed + k], np.int32)
    fixed, targets = (x[: args.fixed], y[: args.fixed]), (x[args.fixed:], y[args.fixed:])
    fns = models.from_flax(models.balle_mnist_mlp())
    p0 = training.initial_params(fns, jax.random.key(0), fixed[0])
    dp = training.dp_gd(1.0, noise_multiplier=1.0, epochs=args.epochs)
    algs = {
        "ghost": dp,
        "vmap": dataclasses.replace(dp, per_example="vmap"),
        "nonprivate": training.full_batch_gd(epochs=args.epochs),
        "fullbatch_dp": dp,
        "minibatch_shuffle": training.dp_sgd(args.batch, 1.0, noise_multiplier=1.0, learning_rate=0.2, momentum=0.9,
                                             epochs=args.epochs, shuffle="fresh"),
        "minibatch_poisson": training.dp_sgd(args.batch, 1.0, noise_multiplier=1.0, learning_rate=0.2, momentum=0.9,
                                             epochs=args.epochs, shuffle="fresh", sampling="poisson"),
    }
    counts = {"ghost": args.ghost_models, "vmap": args.vmap_models, "nonprivate": args.ghost_models,
              "fullbatch_dp": args.minibatch_models, "minibatch_shuffle": args.minibatch_models,
              "minibatch_poisson": args.minibatch_models}
    runs, chunks = {}, {}
    for name, alg in algs.items():
        m = counts[name]
        per_device = args.chunk if name != "vmap" else min(args.chunk, 2)
        chunks[name] = chunk = min(m, per_device * jax.device_count())

        def run(m=m, alg=alg, chunk=chunk):
            return shadow.generate_shadow_models(fns, alg, fixed, (targets[0][:m], targets[1][:m]), jax.random.key(1),
                                                 init_params=p0, chunk_size=chunk, progress=False).arrays["params"]

        jax.block_until_ready(run())  # compile
        runs[name] = run
    # Timed rounds interleave the configurations (A B C ... A B C ...), so that a drift in the machine's speed
    # reaches every configuration alike; each keeps its best round.
    best = {name: float("inf") for name in runs}
    for _ in range(max(1, args.repeats)):
        for name, run in runs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(run())
            best[name] = min(best[name], time.perf_counter() - t0)
    rates = {name: counts[name] / best[name] for name in runs}
    for name in runs:
        print(f"{name}: {rates[name]:.2f} models/s ({counts[name]} models, chunk {chunks[name]}, "
              f"{jax.device_count()} device(s); best of {max(1, args.repeats)} interleaved rounds)", flush=True)
    ceiling = _noise_only_rate(algs["minibatch_shuffle"], p0, args)
    print(f"minibatch noise-only ceiling: {ceiling:.2f} models/s (bounds the minibatch/full-batch ratio at "
          f"{ceiling / rates['fullbatch_dp']:.3g})", flush=True)
    bench_line("dpgd_ghost_vs_vmap", rates["ghost"], rates["vmap"], "models/s")
    bench_line("dpgd_ghost_vs_nonprivate", rates["ghost"], rates["nonprivate"], "models/s")
    bench_line("dpsgd_minibatch_vs_fullbatch_shadow", rates["minibatch_shuffle"], rates["fullbatch_dp"], "models/s")
    bench_line("dpsgd_minibatch_poisson_vs_fullbatch_shadow", rates["minibatch_poisson"], rates["fullbatch_dp"],
               "models/s")
    return rates


def _best_seconds(run, repeats: int) -> float:
    """Best wall-clock seconds of ``run()`` over ``repeats`` timed calls, after one compiling call."""
    import jax

    jax.block_until_ready(run())
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        jax.block_until_ready(run())
        best = min(best, time.perf_counter() - t0)
    return best


def _noise_only_rate(alg, p0, args) -> float:
    """Models/s of drawing only the per-step mechanism noise of ``alg`` for ``--minibatch-models`` models (same
    keys as training: ``noise_key(fold_in(key, i), t)``; same sampler: the algorithm's mechanism)."""
    import jax
    import jax.numpy as jnp

    from recon_jax import models, training

    size = models.ravel(p0)[0].size
    steps = args.epochs * ((args.fixed + 1) // args.batch)
    m = args.minibatch_models
    chunk = min(m, args.chunk * jax.device_count())

    @jax.jit
    def noise(start):
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(1), i))(start + jnp.arange(chunk))

        def body(acc, t):
            draw = jax.vmap(lambda k: alg.mechanism.privatize(training.noise_key(k, t), jnp.zeros(size), 1.0,
                                                              args.batch))(keys)
            return acc + draw, None

        return jax.lax.scan(body, jnp.zeros((chunk, size)), jnp.arange(steps))[0]

    def run():
        return [noise(s) for s in range(0, m, chunk)]

    return m / _best_seconds(run, args.repeats)


if __name__ == "__main__":
    main(__import__("sys").argv[1:])
