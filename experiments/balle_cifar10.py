"""Informed-adversary reconstruction on CIFAR-10 (Balle et al. 2022): Table VII decoder (+ PatchGAN) vs NN oracle.

python -m experiments.balle_cifar10 --config=experiments/configs/balle_cifar10.py:smoke --workdir=/tmp/balle_c10

Same pipeline as :mod:`experiments.balle_mnist` with the Table VI CNN as released model and the Table VII
transposed-convolution decoder as reconstructor, optionally trained with the least-squares PatchGAN loss of
Table VIII. The paper also adds an LPIPS loss; no pretrained LPIPS network ships with recon_jax, so that term is
left out (``reconn.train_reconstructor(perceptual_fn=...)`` accepts one). ``dataset="tfds:cifar10"`` needs a
prepared TFDS directory (nothing is downloaded); the smoke variant runs on synthetic 32x32x3 blobs.
"""

from __future__ import annotations

import os
import time

from absl import app, flags
from ml_collections import config_flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import experiment_flags, prepare_workdir, run_app, write_run_info
import recon_jax
from recon_jax import models, shadow, training
from recon_jax.attacks import oracle, reconn
from recon_jax.io import atomic_write_json, atomic_write_text
from recon_jax.models.reconstructors import patchgan_discriminator, transposed_conv_decoder
from recon_jax.report import histogram_vs_reference, image_grid, markdown_table

_CONFIG, _WORKDIR = experiment_flags("experiments/configs/balle_cifar10.py:default", "runs/balle_cifar10")

PAPER = {"nn_oracle": 0.0291, "default": 0.0049, "layer_subset": 0.0257, "logits": 0.0198}  # Table II CIFAR-10


def _load(config, split):
    if config.dataset == "synthetic":
        n = config.fixed_size + config.num_shadow + config.num_targets + config.eval_size
        return recon_jax.data.load_dataset("synthetic", split, num_examples=n, shape=(32, 32, 3),
                                           seed=config.seed)
    kw = {"data_dir": config.data_dir} if config.data_dir else {}
    return recon_jax.data.load_dataset(config.dataset, split, **kw)


def _features(s, config):
    if config.features == "logits":
        return reconn.blackbox_features(np.asarray(s["probe_logits"]))
    if config.features == "params":
        return np.asarray(s.params)
    layers = tuple(p.strip() for p in config.features.split(",") if p.strip())
    return np.asarray(reconn.whitebox_features(np.asarray(s.params), s.layout, layers))


def run(config, workdir: str) -> dict:
    """Runs the experiment; writes report.md, metrics.json, config.json and figures to ``workdir``."""
    workdir = prepare_workdir(workdir)
    write_run_info(workdir, config, seed=config.seed)
    t_start = time.time()
    key = jax.random.key(config.seed)
    images, labels = _load(config, "train")
    sp = recon_jax.data.informed_splits(images, labels, config.fixed_size, config.num_shadow, config.num_targets,
                                        config.eval_size, key_or_seed=config.seed)
    eval_set = (sp.eval_images, sp.eval_labels) if config.eval_size > 0 else _load(config, "test")
    fns = models.from_flax(models.balle_cifar_cnn(config.activation))
    p0 = training.initial_params(fns, jax.random.fold_in(key, 0), sp.fixed_images)
    alg = training.full_batch_gd(learning_rate=config.learning_rate, momentum=config.momentum, epochs=config.epochs)
    logits = config.features == "logits"
    outs = ("params", "probe_logits") if logits else ("params",)
    common = dict(init_params=p0, chunk_size=config.chunk_size,
                  probe_inputs=sp.shadow_images[: config.probe_size] if logits else None)
    fixed = (sp.fixed_images, sp.fixed_labels)
    s = shadow.generate_shadow_models(fns, alg, fixed, (sp.shadow_images, sp.shadow_labels),
                                      jax.random.fold_in(key, 1), outputs=outs,
                                      store=os.path.join(workdir, "shadow", "shadow"), **common)
    r = shadow.generate_shadow_models(fns, alg, fixed, (sp.target_images, sp.target_labels),
                                      jax.random.fold_in(key, 2), outputs=outs + ("eval_accuracy",),
                                      eval_set=eval_set, store=os.path.join(workdir, "shadow", "released"), **common)
    f_train, f_test = _features(s, config), _features(r, config)
    fit = reconn.train_reconstructor(
        transposed_conv_decoder(32, 3), f_train, sp.shadow_images, jax.random.fold_in(key, 3),
        epochs=config.recon_epochs, batch_size=config.recon_batch_size, learning_rate=config.recon_learning_rate,
        discriminator=patchgan_discriminator() if config.use_discriminator else None,
        adversarial_weight=config.adversarial_weight, discriminator_learning_rate=config.discriminator_learning_rate)
    rec = np.asarray(reconn.reconstruct(fit, f_test))
    pool = np.concatenate([sp.fixed_images, sp.shadow_images])
    orc = oracle.nn_oracle(sp.target_images, pool, (1.0, 10.0, 50.0))
    m = oracle.reconstruction_metrics(sp.target_images, rec, orc.nn_mse)
    setting = {"logits": "logits", "params": "default"}.get(config.features, "layer_subset")
    row = {"setting": setting, "mean_mse": float(m["mse"].mean()), "paper_mse": PAPER.get(setting),
           "mean_oracle_mse": float(orc.nn_mse.mean()), "success_rate": float(m["success"].mean()),
           "mean_psnr": float(m["psnr"].mean()), "mean_ssim": float(m["ssim"].mean()),
           "released_test_accuracy": float(np.mean(r["eval_accuracy"])), "num_shadow_models": config.num_shadow,
           "num_targets": config.num_targets, "feature_dim": int(f_train.shape[1]),
           "discriminator": bool(config.use_discriminator)}
    ncol = min(config.grid_columns, config.num_targets)
    figs = [image_grid({"target": sp.target_images[:ncol], "RecoNN": rec[:ncol],
                        "NN oracle": pool[np.asarray(orc.nn_index[:ncol])]},
                       os.path.join(workdir, "reconstructions.png"), ncol),
            histogram_vs_reference({"RecoNN": np.asarray(m["mse"]), "NN oracle": np.asarray(orc.nn_mse)},
                                   os.path.join(workdir, "mse_histogram.png"), "MSE", log_x=True)]
    total = time.time() - t_start
    metrics = {"variant": config.variant, "rows": [row], "oracle": {"mean_nn_mse": float(orc.nn_mse.mean()),
               "paper_nn_mse": PAPER["nn_oracle"]}, "reconstructor_losses": fit.losses.tolist(),
               "figures": [os.path.basename(f) for f in figs], "total_seconds": round(total, 1)}
    atomic_write_json(os.path.join(workdir, "metrics.json"), metrics)
    text = (f"# Balle et al. RecoNN on CIFAR-10 ({config.variant}, dataset {config.dataset})\n\n"
            + markdown_table([row]) + f"\n\nNo LPIPS term (no pretrained LPIPS network). Total {total / 60:.1f} min.\n")
    atomic_write_text(os.path.join(workdir, "report.md"), text)
    print(text)
    return metrics


def main(argv):
    del argv
    run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    run_app(main)
