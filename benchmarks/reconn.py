"""Reconstructor training throughput (Balle et al.'s 2 x 1000 MLP on 7,960 shadow parameters) as a fraction of
the machine's float32 matmul peak, and the cost of streaming the features from a memory-mapped store.

    python -m benchmarks.reconn [--rows 2048 --features 7960 --hidden 1000 --epochs 2 --batch 128
                                 --stream-rows 512]

FLOPs per training example: 6 x (multiply-adds of the MLP's dense layers) (forward 2, backward 4). The epoch
time is the median of ``ReconstructorFit.epoch_seconds`` after the first epoch (which compiles): gathering the
minibatches from the features, the jitted steps, nothing else. Lines:

- ``reconn_fraction_of_peak``: ours = training GFLOP/s (features memory-mapped, as from a shadow store),
  baseline = measured matmul peak, ratio = the fraction (goal >= 0.6). With ``--stream-rows 0`` the trainer
  picks its own placement (on an accelerator with room it copies memory-mapped features over once); both sides
  run at JAX's default matmul precision (TF32 on recent NVIDIA GPUs), so the fraction compares like with like.
- ``reconn_streamed_vs_device``: ours = streamed GFLOP/s, baseline = GFLOP/s with the features already on the
  device, ratio = ours / baseline (1.0: streaming costs nothing).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import jax
import numpy as np

from benchmarks.common import bench_line, matmul_peak_gflops
from recon_jax.attacks import reconn
from recon_jax.models.reconstructors import reconstructor_mlp


def _epoch_seconds(features, targets, hidden, epochs, batch, stream_rows):
    """Median wall time of the epochs after the first (which includes compilation)."""
    model = reconstructor_mlp(targets.shape[1:], (hidden, hidden))
    spec = reconn.ReconstructorSpec(model=model, epochs=epochs + 1, batch_size=batch)
    fit = reconn.train_reconstructor(features, targets, spec, jax.random.key(0), stream_rows=stream_rows or None,
                                     progress=False)
    return float(np.median(fit.epoch_seconds[1:]))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--features", type=int, default=7960)
    p.add_argument("--hidden", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--stream-rows", type=int, default=512,
                   help="rows per streamed block (several blocks per epoch, as at 59K shadow models); 0: the "
                        "library's default (on a GPU/TPU with room: features copied to the device once)")
    a = p.parse_args(argv)
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(a.rows, a.features)).astype(np.float32)
    targets = rng.uniform(size=(a.rows, 28, 28, 1)).astype(np.float32)
    out_dim = 784
    macs = a.features * a.hidden + a.hidden * a.hidden + a.hidden * out_dim
    flops_per_epoch = 6.0 * macs * (a.rows // a.batch) * a.batch
    sizes = (a.hidden, a.epochs, a.batch, a.stream_rows)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "params.npy")
        np.save(path, feats)
        mm = np.load(path, mmap_mode="r")
        streamed = flops_per_epoch / _epoch_seconds(mm, targets, *sizes) / 1e9
    device = flops_per_epoch / _epoch_seconds(jax.device_put(feats), targets, *sizes) / 1e9
    peak = matmul_peak_gflops()
    print(f"reconstructor training: {streamed:.1f} GFLOP/s streamed, {device:.1f} GFLOP/s device-resident, "
          f"matmul peak {peak:.1f} GFLOP/s ({a.rows} rows x {a.features} features, batch {a.batch})")
    bench_line("reconn_fraction_of_peak", streamed, peak, "GFLOP/s")
    bench_line("reconn_streamed_vs_device", streamed, device, "GFLOP/s")
    return {"streamed": streamed, "device": device, "peak": peak}


if __name__ == "__main__":
    main()
