"""CNN shadow models: convolutions as patches + matmul vs XLA's convolution, side by side in one process.

Workload: Balle et al.'s CIFAR-10 CNN (Table VI: conv 16@4x4/2, conv 32@4x4/1, dense 10, ELU, 55,098
parameters), full-batch GD with momentum, a fixed set of n random 32x32x3 images (the speed does not depend
on the pixel values), through :func:`recon_jax.shadow.generate_shadow_models` with the engine's default mesh
and chunking (on CPU one model per device per call for CNNs).
The two variants have the same parameters and compute the same models to rounding (``tests/models/test_conv.py``).

BENCH lines (ratios of models/s; > 1 means the patch form is faster):

- ``cnn_shadow_patches_vs_lax``: ours = ``balle_cifar_cnn(conv_impl="patches")`` (the CPU default),
  baseline = ``conv_impl="lax"`` (XLA's convolution, the GPU/TPU default);
- ``cnn_single_patches_vs_lax``: the same for ONE model trained by a jitted :func:`recon_jax.training.train`;
- ``decoder_patches_vs_lax``: training Balle et al.'s Table VII transposed-convolution reconstructor
  (:func:`recon_jax.attacks.reconn.train_reconstructor`, one epoch of minibatches in ``lax.scan``) on
  ``--decoder-examples`` random ``--decoder-features``-dimensional features (default 1,000, so that the dense
  input layer, 55,098 x 4,096 for the real CNN's parameters, does not hide the convolutions),
  ``conv_impl="patches"`` vs ``"lax"``.

Run: ``python -m benchmarks.conv_shadow [--models 8] [--fixed 200] [--epochs 3]``.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.common import bench_line


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=8)
    p.add_argument("--fixed", type=int, default=200)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--chunk", type=int, default=0, help="models per engine call; 0 = the engine's default")
    p.add_argument("--decoder-examples", type=int, default=512)
    p.add_argument("--decoder-features", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=2, help="timed repetitions per variant (best is kept)")
    args = p.parse_args(argv if argv is not None else [])

    import jax
    import numpy as np

    from recon_jax import models, shadow, training

    rng = np.random.default_rng(0)
    x = rng.uniform(size=(args.fixed + args.models, 32, 32, 3)).astype(np.float32)
    y = rng.integers(0, 10, args.fixed + args.models).astype(np.int32)
    fixed, targets = (x[: args.fixed], y[: args.fixed]), (x[args.fixed:], y[args.fixed:])
    alg = training.full_batch_gd(learning_rate=0.05, momentum=0.9, epochs=args.epochs)
    rates: dict[str, float] = {}

    def best_rate(fn, count):
        jax.block_until_ready(fn())  # compile
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            best = min(best, time.perf_counter() - t0)
        return count / best

    for impl in ("patches", "lax"):
        fns = models.from_flax(models.balle_cifar_cnn(conv_impl=impl))
        p0 = training.initial_params(fns, jax.random.key(0), fixed[0])

        def engine(fns=fns, p0=p0):
            return shadow.generate_shadow_models(fns, alg, fixed, targets, jax.random.key(1), init_params=p0,
                                                 chunk_size=args.chunk or None, progress=False).arrays["params"]

        single_fn = jax.jit(lambda tx, ty, fns=fns, p0=p0: training.train(
            fns, alg, fixed, (tx, ty), key=jax.random.key(1), init_params=p0).params)

        rates[f"engine_{impl}"] = best_rate(engine, args.models)
        rates[f"single_{impl}"] = best_rate(lambda f=single_fn: f(targets[0][0], targets[1][0]), 1)
        print(f"{impl}: engine {rates[f'engine_{impl}']:.3f} models/s ({args.models} models, "
              f"{jax.device_count()} device(s)); one jitted model {rates[f'single_{impl}']:.3f} models/s "
              f"(n = {args.fixed}, {args.epochs} epochs)", flush=True)
    from recon_jax.attacks import reconn
    from recon_jax.models.reconstructors import TransposedConvDecoder

    k = args.decoder_examples
    feats = rng.normal(size=(k, args.decoder_features)).astype(np.float32)
    imgs = rng.uniform(size=(k, 32, 32, 3)).astype(np.float32)
    for impl in ("patches", "lax"):
        def fit(impl=impl):
            spec = reconn.ReconstructorSpec(model=TransposedConvDecoder(conv_impl=impl), epochs=1,
                                            batch_size=min(64, k))
            return reconn.train_reconstructor(feats, imgs, spec, jax.random.key(2), progress=False).params
        rates[f"decoder_{impl}"] = best_rate(fit, k)
        print(f"{impl}: Table VII decoder {rates[f'decoder_{impl}']:.1f} examples/s ({k} examples, one epoch)",
              flush=True)
    bench_line("cnn_shadow_patches_vs_lax", rates["engine_patches"], rates["engine_lax"], "models/s")
    bench_line("cnn_single_patches_vs_lax", rates["single_patches"], rates["single_lax"], "models/s")
    bench_line("decoder_patches_vs_lax", rates["decoder_patches"], rates["decoder_lax"], "examples/s")
    return rates


if __name__ == "__main__":
    main(__import__("sys").argv[1:])
