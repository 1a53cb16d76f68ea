"""Informed-adversary reconstruction on CIFAR-10 (Balle et al. 2022): Table VII decoder (+ PatchGAN) vs NN oracle.

python -m experiments.balle_cifar10 --config=experiments/configs/balle_cifar10.py:smoke --workdir=/tmp/balle_c10

The library pipeline of :mod:`recon_jax.attacks.informed` (as :mod:`experiments.balle_mnist`) with the Table VI
CNN as released model and the Table VII transposed-convolution decoder as reconstructor, optionally trained with
the least-squares PatchGAN loss of Table VIII. The paper also adds an LPIPS loss; no pretrained LPIPS network
ships with recon_jax, so that term is left out (``reconn.ReconstructorSpec(perceptual_fn=...)`` accepts one).
Data: train + test, evaluation targets apart and every other record in the adversary's pool
(:func:`recon_jax.data.pool_splits`; 59K with the paper's 60K CIFAR-10 records and 1K targets, Fig. 3b).
``dataset="tfds:cifar10"`` needs a prepared TFDS directory (nothing is downloaded); the smoke variant runs on
synthetic 32x32x3 blobs. Shadow sets and reconstructor checkpoints are keyed by a hash of what determines them.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from experiments.common import (check_config, check_fits, claim, finish_run, keyed_dir, launch, paired_comparison,
                                require_finite, start_run)
from experiments.configs.balle_cifar10 import CHECKS
import recon_jax
from recon_jax import models, training
from recon_jax.attacks import informed
from recon_jax.io import array_digest
from recon_jax.models.reconstructors import patchgan_discriminator, transposed_conv_decoder
from recon_jax.evidence import histogram_vs_reference, image_grid, markdown_table


# Table II, CIFAR-10 column: (mean MSE, ✓/✗); fixed set 5K.
PAPER = {"nn_oracle": 0.0291, "default": (0.0049, True), "layer_subset": (0.0257, True), "logits": (0.0198, True)}


def _load(config):
    if config.dataset == "synthetic":
        n = config.fixed_size + config.num_shadow + config.num_targets + config.eval_size
        return recon_jax.data.load_dataset("synthetic", "train", num_examples=n, shape=(32, 32, 3), seed=config.seed)
    kw = {"data_dir": config.data_dir} if config.data_dir else {}
    return recon_jax.data.load_dataset(config.dataset, "train+test", **kw)


def _features(config):
    if config.features in ("logits", "params"):
        return config.features
    return tuple(p.strip() for p in config.features.split(",") if p.strip())


def run(config, workdir: str) -> dict:
    """Runs the experiment; writes report.md, metrics.json, config.json and figures to ``workdir``."""
    check_config(config, CHECKS)  # before anything is written to workdir
    images, labels = _load(config)
    for fields in (("num_targets", "fixed_size", "num_shadow"), ("num_targets", "fixed_size", "eval_size")):
        check_fits(config, fields, len(images), f"records of {config.dataset!r} (train + test)")
    run_info = start_run(workdir, config, seed=config.seed)
    workdir = run_info.workdir
    key = jax.random.key(config.seed)
    sp = recon_jax.data.pool_splits(images, labels, fixed_size=config.fixed_size, num_shadow=config.num_shadow,
                                    num_targets=config.num_targets, eval_size=config.eval_size,
                                    key_or_seed=config.seed)
    data_digest = [array_digest(images), array_digest(labels)]  # the data itself, wherever data_dir found it
    del images, labels
    fns = models.from_flax(models.balle_cifar_cnn(**config.model))
    p0 = training.initial_params(fns, jax.random.fold_in(key, 0), sp.fixed_images)
    alg = training.full_batch_gd(**config.train)
    features = _features(config)
    # Every argument of the model (**: the whole model section), the algorithm, the data (by digest: another data_dir
    # with other files gets its own store), the data split and the probe set (logits features only).
    store = keyed_dir(os.path.join(workdir, "shadow"), "default", {
        "dataset": config.dataset, "data": data_digest, "seed": config.seed, "fixed_size": config.fixed_size,
        "num_shadow": config.num_shadow, "num_targets": config.num_targets, "eval_size": config.eval_size,
        "probe_size": config.probe_size if features == "logits" else 0, **config.model.to_dict(),
        "algorithm": alg.describe()})
    ms = informed.train_model_sets(
        fns, alg, sp, key, init_params=p0,
        sizes=informed.ModelSetSizes(probe_size=config.probe_size if features == "logits" else 0),
        run=informed.RunOptions(store=store, chunk_size=config.chunk_size))
    require_finite(ms.shadow.params, "shadow-model parameters", "released-model learning rate too large?")
    spec = informed.ReconstructorSpec(
        **config.reconstructor, model=transposed_conv_decoder(32, 3),
        discriminator=patchgan_discriminator() if config.use_discriminator else None)
    orc = informed.oracle_for(sp)
    res = informed.informed_attack(sp, ms, jax.random.fold_in(key, 3), oracle=orc, features=features,
                                   reconstructor=spec, checkpoint_dir=os.path.join(store, "reconstructor"))
    require_finite(res.train_loss, "reconstructor training loss", "reconstructor learning rate too large?")
    setting = {"logits": "logits", "params": "default"}.get(config.features, "layer_subset")
    paper_mse, paper_ok = PAPER[setting]
    row = res.summary()
    row.update(setting=setting, paper_mse=paper_mse, ours="✓" if res.row_success else "✗",
               paper="✓" if paper_ok else "✗", discriminator=bool(config.use_discriminator))
    ncol = min(config.grid_columns, config.num_targets)
    figs = [image_grid({"target": sp.target_images[:ncol], "RecoNN": res.reconstructions[:ncol],
                        "NN oracle": sp.pool_images[np.asarray(orc.nn_index[:ncol])]},
                       os.path.join(workdir, "reconstructions.png"), ncol,
                       title=f"Balle et al. RecoNN on CIFAR-10 ({setting}, {config.variant}): targets | "
                             "reconstructions | NN oracle"),
            histogram_vs_reference({"RecoNN": res.mse, "NN oracle": res.oracle_mse},
                                   os.path.join(workdir, "mse_histogram.png"), "MSE",
                                   f"per-target MSE, RecoNN vs NN oracle ({len(res.mse)} targets)", log_x=True)]
    metrics = {"variant": config.variant, "rows": [row], "mean_mse": res.mean_mse,
               "oracle": {"mean_nn_mse": res.mean_oracle_mse, "pool_size": int(len(sp.pool_images)),
                          "paper_nn_mse": PAPER["nn_oracle"]},
               "reconstructor_losses": res.train_loss.tolist(), "figures": [os.path.basename(f) for f in figs]}
    k = paired_comparison(f"{setting}: MSE - NN-oracle MSE", res.mse, res.oracle_mse, "<=" if paper_ok else ">=",
                          alpha=float(config.claim_alpha))
    lo, hi = k["interval"]
    claims = [claim(f"{setting}: {'✓' if paper_ok else '✗'} as in Table II (CIFAR-10)",
                    detail=f"mean MSE {res.mean_mse:.4f} vs mean oracle {res.mean_oracle_mse:.4f} (paper {paper_mse} vs "
                           f"{PAPER['nn_oracle']}); {res.num_shadow} shadow models, {len(res.mse)} targets; paired "
                           f"difference {k['value']:+.4f} " + ("too few targets" if lo is None else
                                                               f"[{lo:+.4f}, {hi:+.4f}]"),
                    comparisons=[k])]
    text = (f"# Balle et al. RecoNN on CIFAR-10 ({config.variant}, dataset {config.dataset})\n\n"
            f"Fixed set {config.fixed_size}, {config.num_shadow} shadow models, {config.num_targets} targets, "
            f"adversary pool {len(sp.pool_images)} records; features {config.features}; Table VII decoder"
            f"{' + PatchGAN' if config.use_discriminator else ''}, {res.epochs_run} epochs. ✓: mean MSE below the "
            "mean NN-oracle MSE.\n\n"
            + markdown_table([row], ["setting", "mean_mse", "paper_mse", "ours", "paper", "mean_oracle_mse",
                                     "success_rate", "mean_ssim", "released_test_accuracy", "num_shadow_models",
                                     "num_targets", "feature_dim", "discriminator"])
            + "\n\nNo LPIPS term (no pretrained LPIPS network).\n\n"
            + "".join(f"![{name}]({os.path.basename(f)})\n\n" for name, f in
                      zip(("targets, reconstructions and NN-oracle matches", "MSE histogram, RecoNN vs NN oracle"),
                          figs)))
    result = finish_run(run_info, metrics, text, claims)
    print(text)
    return result


if __name__ == "__main__":
    launch(run, "experiments/configs/balle_cifar10.py:default", "runs/balle_cifar10")
