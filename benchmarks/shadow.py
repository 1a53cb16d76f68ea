"""Shadow-model engine throughput vs a Python loop and vs the reference notebook's pattern, and vs matmul peak.

Workload (issue 5): Balle et al.'s MNIST MLP (784-10-10 ELU), full-batch GD + momentum (lr 0.2, 0.9),
100 epochs, fixed set n = 1,000, 1,024 targets (MNIST if the embedded copy loads, else synthetic images).

Measured side by side in ONE worker process per CPU configuration:

- ours: :func:`recon_jax.shadow.generate_shadow_models` (jit(vmap(train)) over chunks, sharded over devices;
  its default ``first_layer="auto"`` trains the first layer through the fixed set's Gram matrix,
  :mod:`recon_jax.training.gram`);
- ``shadow_gram_vs_direct`` (extra): ours vs the same engine with ``first_layer="direct"`` (each model trained
  with :func:`recon_jax.training.train`, like the loop), to show what the Gram formulation adds, and
  ``shadow_direct_vs_loop``: that direct engine vs the loop (jit + vmap + scan + sharding alone);
- (a) ``shadow_vs_loop``: a Python loop over a jitted single-model trainer (first few models, extrapolated);
- (b) ``shadow_vs_notebook``: the reference notebook's pattern (DeepMind's informed-adversary colab, read for this
  benchmark): each model trains on D- with its target concatenated, an un-jitted ``vmap`` over a chunk of 50
  models, a Python loop over epochs calling a jitted full-batch step;
- ``shadow_vs_notebook_separate_target`` (extra): the same loop but with our loss layout (fixed set unbatched,
  target a separate term), to show how much of the gain is the layout and how much jit + scan + sharding;
- ``shadow_fraction_of_peak``: our useful GFLOP/s (forward + backward of the model, no input gradient)
  divided by the float32 matmul GFLOP/s of all devices of the process, measured by this script. With the Gram
  formulation this is an *effective* rate: the engine executes fewer FLOPs than the model's forward + backward
  (``executed fraction`` in the printout counts what it runs); ``shadow_direct_fraction_of_peak`` is the same
  figure for ``first_layer="direct"``, where useful and executed FLOPs coincide.

CPU configurations (XLA start-up flags, so each runs in its own subprocess): ``2x1`` = two single-threaded host
devices, ``1x2`` = one host device using the default (multi-threaded) Eigen pool. The worker for the default
configuration prints the BENCH lines; the other prints its models/s for the ``shadow_cpu_devices`` line.

Run: ``python -m benchmarks.shadow [--targets 1024] [--configs 2x1,1x2]`` or via ``python -m benchmarks.run shadow``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

DEFAULT_CONFIG = "2x1"
CONFIG_FLAGS = {
    "2x1": "--xla_force_host_platform_device_count=2 --xla_cpu_multi_thread_eigen=false",
    "1x2": "--xla_force_host_platform_device_count=1",
}


def _useful_flops_per_model(n_train: int, epochs: int, d_in=784, hidden=10, classes=10) -> float:
    """Forward (2 matmuls) + backward (weight grads of both layers, input grad of layer 2 only) per model."""
    fwd = 2 * n_train * (d_in * hidden + hidden * classes)
    bwd = 2 * n_train * (d_in * hidden + hidden * classes) + 2 * n_train * hidden * classes
    return float(epochs * (fwd + bwd))


def _gram_flops_per_model(n_train: int, epochs: int, models: int, d_in=784, hidden=10, classes=10) -> float:
    """FLOPs the Gram formulation executes per model: the ``n x n`` product per step, the second layer's forward
    and backward, the final ``X^T A`` and the target's terms, plus its share of the Gram matrix."""
    n = n_train - 1
    step = 2 * n * n * hidden + 2 * n_train * hidden * classes * 3 + 4 * n * hidden
    once = 2 * n * d_in + 2 * n * d_in * hidden  # X_- x_t and the final X^T A
    return float(epochs * step + once + 2.0 * n * n * d_in / models)  # the Gram matrix, shared by all models


def _peak_gflops_all_devices(n: int = 2048, repeats: int = 5) -> float:
    """float32 matmul GFLOP/s with one n x n product per device, run concurrently (sharded).

    Returns ``(per wall-clock second, per CPU-second of this process)``.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from recon_jax.shadow import default_mesh

    mesh = default_mesh()
    nd = len(jax.devices())
    sh = NamedSharding(mesh, P("models"))
    a = jax.device_put(jax.random.normal(jax.random.key(0), (nd, n, n), jnp.float32), sh)
    b = jax.device_put(jax.random.normal(jax.random.key(1), (nd, n, n), jnp.float32), sh)
    f = jax.jit(lambda x, y: jnp.einsum("bij,bjk->bik", x, y), out_shardings=sh)
    jax.block_until_ready(f(a, b))
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(f(a, b))
        best_wall, best_cpu = min(best_wall, time.perf_counter() - w), min(best_cpu, time.process_time() - c)
    return nd * 2.0 * n**3 / best_wall / 1e9, nd * 2.0 * n**3 / best_cpu / 1e9


def _problem(targets: int, fixed: int):
    import numpy as np

    from recon_jax.data import DataIntegrityError, load_dataset

    try:
        images, labels = load_dataset("mnist", "train")
        x = np.asarray(images[: fixed + targets], np.float32).reshape(fixed + targets, -1)
        y = np.asarray(labels[: fixed + targets], np.int32)
        source = "mnist"
    except DataIntegrityError as err:  # the embedded MNIST is damaged: time on synthetic images of the same shape
        print(f"embedded MNIST unusable ({err}); timing on synthetic images (source=synthetic)")
        rng = np.random.default_rng(0)
        x = rng.uniform(size=(fixed + targets, 784)).astype(np.float32)
        y = rng.integers(0, 10, fixed + targets).astype(np.int32)
        source = "synthetic"
    return (x[:fixed], y[:fixed]), (x[fixed:], y[fixed:]), source


def worker(config: str, targets: int, fixed: int, epochs: int, chunk: int, baselines: bool,
           loop_models: int, notebook_chunk: int, rounds: int, chunk_sweep: tuple[int, ...] = ()) -> dict:
    """Measures one CPU configuration in this process (XLA_FLAGS must already be set).

    The machine may be shared, so the work is split into ``rounds``; each round times ours on
    ``targets / rounds`` models, then (with ``baselines``) the loop, the notebook pattern and the matmul peak.
    Ratios are formed within a round (same load) and the median over rounds is reported, both for wall-clock
    time and for process CPU time (all threads), which is insensitive to other users' load. Each size in
    ``chunk_sweep`` is timed in every round too (ours at that ``chunk_size``), against ours at ``chunk``.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from recon_jax import models, shadow, training

    fns = models.from_flax(models.balle_mnist_mlp())
    alg = training.full_batch_gd(learning_rate=0.2, momentum=0.9, epochs=epochs)
    (fx, fy), (tx, ty), source = _problem(targets, fixed)
    p0 = training.initial_params(fns, jax.random.key(0), fx)
    key = jax.random.key(1)
    flops = _useful_flops_per_model(fixed + 1, epochs)
    per_round = max(1, targets // rounds)

    def timed(fn):
        w, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn())
        return time.perf_counter() - w, time.process_time() - c

    def ours(k, offset=0, first_layer="auto", chunk_size=chunk):
        return shadow.generate_shadow_models(fns, alg, (fx, fy), (tx[offset:offset + k], ty[offset:offset + k]),
                                             key, init_params=p0, chunk_size=chunk_size or None, progress=False,
                                             first_layer=first_layer).arrays["params"]

    ours(2, first_layer="gram")  # compile (cached for the timed calls: the chunk shape is the same)
    ours(2, first_layer="direct")
    for c in chunk_sweep:
        ours(min(c, per_round), chunk_size=c)
    if baselines:
        fxj, fyj = jnp.asarray(fx), jnp.asarray(fy)

        @jax.jit
        def single(txi, tyi, k):
            return training.train(fns, alg, (fxj, fyj), (txi, tyi), key=k, init_params=p0).params

        def loop():
            return [single(tx[i], ty[i], jax.random.fold_in(key, i)) for i in range(loop_models)]

        # The reference notebook's pattern (DeepMind's informed-adversary colab): each model's training set is
        # D- with the target CONCATENATED (so every model carries its own [n + 1, 784] batch), an un-jitted
        # vmap over a chunk of 50 targets, and a Python loop over epochs calling a jitted full-batch step.
        opt = alg.make_optimizer()
        m = notebook_chunk

        @jax.jit
        def step_concat(params, opt_state, xb, yb):
            def loss(p):
                return jnp.mean(training.softmax_cross_entropy(fns.apply(p, xb), yb))

            grads = jax.grad(loss)(params)
            updates, opt_state = opt.update(grads, opt_state, params)
            return jax.tree_util.tree_map(lambda p, u: p + u, params, updates), opt_state

        def train_one_concat(txi, tyi):
            xb = jnp.concatenate([fxj, txi[None]])
            yb = jnp.concatenate([fyj, tyi[None]])
            p, o = p0, opt.init(p0)
            for _ in range(epochs):
                p, o = step_concat(p, o, xb, yb)
            return p

        notebook_vmap = jax.vmap(train_one_concat)  # deliberately not jitted, as in the notebook
        btx, bty = jnp.asarray(tx[:m]), jnp.asarray(ty[:m])

        def notebook():
            return notebook_vmap(btx, bty)

        # The same loop with our loss layout (fixed set unbatched, target a separate term): isolates what the
        # concatenated batch costs, and what is left for jit + scan + sharding.
        @jax.jit
        def step_separate(params, opt_state, txi, tyi):
            def loss(p):
                total = jnp.sum(training.softmax_cross_entropy(fns.apply(p, fxj), fyj))
                total = total + training.softmax_cross_entropy(fns.apply(p, txi[None]), tyi[None])[0]
                return total / (fxj.shape[0] + 1)

            grads = jax.grad(loss)(params)
            updates, opt_state = opt.update(grads, opt_state, params)
            return jax.tree_util.tree_map(lambda p, u: p + u, params, updates), opt_state

        vstep = jax.vmap(step_separate)
        bparams = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (m,) + a.shape), p0)
        bopt = jax.vmap(opt.init)(bparams)

        def notebook_separate():
            p, o = bparams, bopt
            for _ in range(epochs):
                p, o = vstep(p, o, btx, bty)
            return p

        jax.block_until_ready(single(tx[0], ty[0], key))
        jax.block_until_ready(notebook())
        jax.block_until_ready(vstep(bparams, bopt, btx, bty))

    res = {"config": config, "devices": [str(d) for d in jax.devices()], "data": source, "targets": targets,
           "rounds": rounds, "chunk": chunk, "started_utc": time.strftime("%H:%M:%S", time.gmtime())}
    rows = []
    for r in range(rounds):
        row = {}
        w, c = timed(lambda: ours(per_round, r * per_round))
        row["ours"] = (per_round / w, per_round / c)
        w, c = timed(lambda: ours(per_round, r * per_round, "direct"))
        row["direct"] = (per_round / w, per_round / c)
        for size in chunk_sweep:
            w, c = timed(lambda: ours(per_round, r * per_round, chunk_size=size))
            row[f"chunk{size}"] = (per_round / w, per_round / c)
        row["peak"] = _peak_gflops_all_devices()
        if baselines:
            w, c = timed(loop)
            row["loop"] = (loop_models / w, loop_models / c)
            w, c = timed(notebook)
            row["notebook"] = (m / w, m / c)
            w, c = timed(notebook_separate)
            row["notebook_separate"] = (m / w, m / c)
        rows.append(row)
    med = lambda xs: float(np.median(xs))
    res["ours_models_per_s"] = med([r["ours"][0] for r in rows])
    res["ours_models_per_cpu_s"] = med([r["ours"][1] for r in rows])
    res["ours_gflops"] = res["ours_models_per_s"] * flops / 1e9
    res["peak_gflops"] = med([r["peak"][0] for r in rows])
    res["fraction_of_peak"] = med([r["ours"][0] * flops / 1e9 / r["peak"][0] for r in rows])
    res["peak_gflops_per_cpu_s"] = med([r["peak"][1] for r in rows])
    res["fraction_of_peak_cpu"] = med([r["ours"][1] * flops / 1e9 / r["peak"][1] for r in rows])
    executed = _gram_flops_per_model(fixed + 1, epochs, targets)
    res["executed_fraction_of_peak"] = med([r["ours"][0] * executed / 1e9 / r["peak"][0] for r in rows])
    res["direct_models_per_s"] = med([r["direct"][0] for r in rows])
    res["direct_fraction_of_peak"] = med([r["direct"][0] * flops / 1e9 / r["peak"][0] for r in rows])
    res["ratio_direct"] = med([r["ours"][0] / r["direct"][0] for r in rows])
    res["chunk_sweep"] = {size: {"models_per_s": med([r[f"chunk{size}"][0] for r in rows]),
                                 "ratio": med([r[f"chunk{size}"][0] / r["ours"][0] for r in rows])}
                          for size in chunk_sweep}
    if baselines:
        for name in ("loop", "notebook", "notebook_separate"):
            res[f"{name}_models_per_s"] = med([r[name][0] for r in rows])
            res[f"{name}_models_per_cpu_s"] = med([r[name][1] for r in rows])
            res[f"ratio_{name}"] = med([r["ours"][0] / r[name][0] for r in rows])
            res[f"cpu_ratio_{name}"] = med([r["ours"][1] / r[name][1] for r in rows])
        res["ratio_direct_vs_loop"] = med([r["direct"][0] / r["loop"][0] for r in rows])
    res["rows"] = rows
    res["finished_utc"] = time.strftime("%H:%M:%S", time.gmtime())
    return res


def _spawn(config: str, args, baselines: bool) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = CONFIG_FLAGS[config]
    cmd = [sys.executable, "-m", "benchmarks.shadow", "--worker", config, "--targets", str(args.targets),
           "--fixed", str(args.fixed), "--epochs", str(args.epochs), "--chunk", str(args.chunk),
           "--loop-models", str(args.loop_models), "--notebook-chunk", str(args.notebook_chunk),
           "--rounds", str(args.rounds), "--chunk-sweep", args.chunk_sweep]
    if baselines:
        cmd.append("--baselines")
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return json.loads(out.stdout.strip().splitlines()[-1])


def _sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(int(x) for x in text.split(",") if x.strip())
    if any(x < 1 for x in sizes):
        raise SystemExit(f"--chunk-sweep sizes must be positive integers, got {text!r}")
    return sizes


def _parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", type=int, default=1024)
    p.add_argument("--fixed", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--chunk", type=int, default=0, help="models per call; 0 = the engine's default")
    p.add_argument("--loop-models", type=int, default=16)
    p.add_argument("--notebook-chunk", type=int, default=50)
    p.add_argument("--rounds", type=int, default=4, help="interleaved measurement rounds (median reported)")
    p.add_argument("--chunk-sweep", default="",
                   help="comma list of further chunk sizes, each timed beside --chunk in every round "
                        "(BENCH shadow_chunk<N>_vs_chunk: ours at N against ours at --chunk)")
    p.add_argument("--configs", default="2x1,1x2", help="CPU configurations to compare; the first prints BENCH")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--baselines", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> dict:
    """Runs the comparison in fresh subprocesses (one per CPU configuration) and prints the BENCH lines."""
    args = _parser().parse_args([] if argv is None else argv)
    from benchmarks.common import bench_line

    configs = [c for c in args.configs.split(",") if c]
    bad = [c for c in configs if c not in CONFIG_FLAGS]
    if bad or not configs:
        raise SystemExit(f"--configs must be a comma list of {sorted(CONFIG_FLAGS)}, got {args.configs}")
    _sizes(args.chunk_sweep)
    results = {}
    for i, c in enumerate(configs):
        results[c] = _spawn(c, args, baselines=(i == 0))
        r = results[c]
        print(f"[{c}] {r['started_utc']}-{r['finished_utc']} UTC, {len(r['devices'])} device(s), data={r['data']}, "
              f"{r['targets']} models in {r['rounds']} rounds: ours {r['ours_models_per_s']:.2f} models/s "
              f"({r['ours_gflops']:.1f} useful GFLOP/s; {r['ours_models_per_cpu_s']:.2f} models per CPU-second), "
              f"matmul peak {r['peak_gflops']:.1f} GFLOP/s ({r['peak_gflops_per_cpu_s']:.1f} per CPU-s); "
              f"fraction of peak: wall {r['fraction_of_peak']:.3f}, CPU-time {r['fraction_of_peak_cpu']:.3f}, "
              f"executed {r['executed_fraction_of_peak']:.3f}; first_layer='direct' {r['direct_models_per_s']:.2f} "
              f"models/s (fraction {r['direct_fraction_of_peak']:.3f})", flush=True)
    m = results[configs[0]]
    print(f"[{configs[0]}] loop {m['loop_models_per_s']:.2f} models/s ({m['loop_models_per_cpu_s']:.2f} per CPU-s), "
          f"notebook {m['notebook_models_per_s']:.2f} models/s ({m['notebook_models_per_cpu_s']:.2f} per CPU-s); "
          f"CPU-time ratios: vs loop {m['cpu_ratio_loop']:.2f}, vs notebook {m['cpu_ratio_notebook']:.2f}; "
          f"notebook loop with our separate-target loss {m['notebook_separate_models_per_s']:.2f} models/s "
          f"(ours / it = {m['ratio_notebook_separate']:.2f})", flush=True)
    # ours / baseline use the per-round medians; ratio = median over rounds of the within-round ratio
    bench_line("shadow_vs_loop", m["ours_models_per_s"], m["loop_models_per_s"], "models/s", ratio=m["ratio_loop"])
    bench_line("shadow_vs_notebook", m["ours_models_per_s"], m["notebook_models_per_s"], "models/s",
               ratio=m["ratio_notebook"])
    bench_line("shadow_vs_notebook_separate_target", m["ours_models_per_s"], m["notebook_separate_models_per_s"],
               "models/s", ratio=m["ratio_notebook_separate"])
    bench_line("shadow_fraction_of_peak", m["fraction_of_peak"], 0.75, "fraction", ratio=m["fraction_of_peak"] / 0.75)
    bench_line("shadow_gram_vs_direct", m["ours_models_per_s"], m["direct_models_per_s"], "models/s",
               ratio=m["ratio_direct"])
    bench_line("shadow_direct_vs_loop", m["direct_models_per_s"], m["loop_models_per_s"], "models/s",
               ratio=m["ratio_direct_vs_loop"])
    bench_line("shadow_direct_fraction_of_peak", m["direct_fraction_of_peak"], 0.75, "fraction",
               ratio=m["direct_fraction_of_peak"] / 0.75)
    for size, got in m["chunk_sweep"].items():
        bench_line(f"shadow_chunk{size}_vs_chunk", got["models_per_s"], m["ours_models_per_s"], "models/s",
                   ratio=got["ratio"])
    if len(configs) > 1:
        other = results[configs[1]]
        bench_line("shadow_cpu_devices", m["ours_models_per_s"], other["ours_models_per_s"], "models/s")
    return results


if __name__ == "__main__":
    ns = _parser().parse_args()
    if ns.worker:
        out = worker(ns.worker, ns.targets, ns.fixed, ns.epochs, ns.chunk, ns.baselines, ns.loop_models,
                     ns.notebook_chunk, ns.rounds, _sizes(ns.chunk_sweep))
        print(json.dumps(out), flush=True)
    else:
        main(sys.argv[1:])
