"""Tygert et al.: HCR confidentiality bounds for dithered features of an MNIST (or CIFAR-10) classifier.

    python -m experiments.tygert_hcr --config=experiments/configs/tygert_hcr.py:smoke --workdir=/tmp/hcr

Trains the paper's feature network + classifier (AdamW 1e-3, batch 32), dithers the features with
N(0, (noise_scale x RMS)^2), reports the accuracy without/with dithering, computes HCR lower bounds on the
standard deviation of every DCT-II mode for test examples (Algorithm 1, 25 restarts), and writes the
Fig. 1 analogue (histograms over all modes and the lowest-frequency modes) and the Fig. 2 analogue
(Rademacher visualisation). Resumable: the trained parameters and every chunk of bounds are saved in the
workdir and reused.
"""

from __future__ import annotations

import os
import pickle
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags
from tqdm import tqdm

from experiments.common import experiment_flags, prepare_workdir, run_app, write_run_info
from recon_jax import data
from recon_jax.bounds import hcr as hcr_lib
from recon_jax.io import atomic_save_npz, atomic_write_bytes, atomic_write_json, atomic_write_text
from recon_jax.models import tygert
from recon_jax.report import hcr as hcr_plots

PAPER = {"mnist": {"clean": 0.979, "dithered": 0.951}, "cifar10": {"clean": 0.70, "dithered": 0.50}}

_CONFIG, _WORKDIR = experiment_flags(None, None)


def _load(config, split):
    kwargs = {"data_dir": config.data_dir} if config.dataset.startswith("tfds:") and config.data_dir else {}
    images, labels = data.load_dataset(config.dataset, split, **kwargs)
    n = config.num_train if split == "train" else config.num_test
    if n:
        images, labels = images[:n], labels[:n]
    return images, labels


def _model_and_norm(config):
    if config.model == "mnist":
        return tygert.MNISTFeatureNet(width=config.width), tygert.normalize_mnist, tygert.denormalize_mnist
    if config.model == "cifar10":
        return tygert.CIFAR10FeatureNet(), tygert.normalize_cifar10, tygert.denormalize_cifar10
    raise ValueError(f"model must be 'mnist' or 'cifar10'; got {config.model!r}")


def run(config, workdir: str) -> dict:
    """Runs the experiment; writes report.md, metrics.json, config.json and figures; returns the metrics."""
    import matplotlib

    matplotlib.use("Agg")
    workdir = prepare_workdir(workdir)
    write_run_info(workdir, config, seed=config.seed)
    t_start = time.time()
    key = jax.random.key(config.seed)
    train_key, dither_key, hcr_key, vis_key = (jax.random.fold_in(key, i) for i in range(4))
    model, normalize, denormalize = _model_and_norm(config)

    x_test_raw, y_test = _load(config, "test")
    x_test = np.asarray(normalize(x_test_raw))

    # 1. Train (or reuse) the model.
    params_path = os.path.join(workdir, "params.pkl")
    if os.path.exists(params_path):
        with open(params_path, "rb") as fh:
            params = pickle.load(fh)
    else:
        x_train_raw, y_train = _load(config, "train")
        x_train = normalize(x_train_raw)
        bar = tqdm(total=config.epochs, desc="train epochs")

        def on_epoch(epoch, p, loss):
            bar.update(1)
            bar.set_postfix(loss=float(loss))

        params = tygert.train_classifier(
            model,
            x_train,
            y_train,
            train_key,
            epochs=config.epochs,
            batch_size=config.batch_size,
            learning_rate=config.learning_rate,
            weight_decay=config.weight_decay,
            epoch_callback=on_epoch,
        )
        bar.close()
        params = jax.device_get(params)
        atomic_write_bytes(params_path, pickle.dumps(params))
    t_train = time.time() - t_start

    feature_fn, classifier_fn = tygert.feature_and_classifier_fns(model, params)

    # 2. Features, dither scale, accuracies.
    feats = jax.jit(jax.vmap(feature_fn))(x_test)
    rms = float(hcr_lib.feature_rms(feats))
    sigma = config.noise_scale * rms
    clean, noisy = hcr_lib.dithered_accuracy(
        jax.jit(classifier_fn), feats, y_test, sigma, dither_key, num_draws=config.num_dither_draws
    )
    clean, noisy = float(clean), float(noisy)

    # 3. HCR bounds, chunk by chunk (resumable; key of example i is fold_in(hcr_key, i)).
    n_hcr = min(config.num_hcr_examples, x_test.shape[0])
    results = {}
    for size in config.perturbation_sizes:
        tag = f"size_{size:.6g}"

        @jax.jit
        def bounds_fn(xs, ids, size=size):
            return hcr_lib.hcr_bounds_batch(
                feature_fn,
                xs,
                sigma,
                hcr_key,
                example_ids=ids,
                num_restarts=config.num_restarts,
                num_rounds=config.num_rounds,
                perturbation_size=size,
                atol=config.lsqr_atol,
                btol=config.lsqr_btol,
                iter_lim=config.lsqr_iter_lim,
                refine=config.refine,
                return_info=True,
            )

        chunks, itns, fnorms = [], [], []
        for start in tqdm(range(0, n_hcr, config.hcr_chunk), desc=f"HCR bounds {tag}"):
            stop = min(start + config.hcr_chunk, n_hcr)
            path = os.path.join(workdir, f"bounds_{tag}_{start:06d}_{stop:06d}.npz")
            if os.path.exists(path):
                with np.load(path) as z:
                    b, itn, fn = z["bounds"], z["itn"], z["fnorm"]
            else:
                b, info = bounds_fn(jnp.asarray(x_test[start:stop]), jnp.arange(start, stop))
                b, itn, fn = np.asarray(b), np.asarray(info.lsqr_itn), np.asarray(info.feature_shift_norm)
                atomic_save_npz(path, bounds=b, itn=itn, fnorm=fn)
            chunks.append(b)
            itns.append(itn)
            fnorms.append(fn)
        bounds = np.concatenate(chunks)
        itn = np.concatenate(itns)
        fnorm = np.concatenate(fnorms)
        low = bounds[:, : config.low_freq, : config.low_freq]
        hcr_plots.plot_bound_histograms(
            bounds,
            low_freq=config.low_freq,
            title=f"{config.model} size {size:.4g}",
            path=os.path.join(workdir, f"histograms_{tag}.png"),
        )
        results[tag] = {
            "perturbation_size": size,
            "num_examples": int(n_hcr),
            "median_all": float(np.median(bounds)),
            "mean_all": float(np.mean(bounds)),
            "p10_all": float(np.percentile(bounds, 10)),
            "p90_all": float(np.percentile(bounds, 90)),
            "median_low_freq": float(np.median(low)),
            "mean_low_freq": float(np.mean(low)),
            "lsqr_mean_iterations": float(itn.mean()),
            "mean_feature_shift_over_sigma": float(fnorm.mean() / sigma),
        }
        last_bounds, last_tag = bounds, tag

    # 4. Rademacher visualisation (Fig. 2 analogue) with the bounds of the first size.
    k = min(config.num_visualise, n_hcr)
    first_tag = f"size_{config.perturbation_sizes[0]:.6g}"
    first = np.concatenate(
        [np.load(os.path.join(workdir, f))["bounds"] for f in sorted(os.listdir(workdir)) if f.startswith(f"bounds_{first_tag}_")]
    )
    perturbed = np.stack(
        [
            np.asarray(hcr_lib.rademacher_perturbation(jax.random.fold_in(vis_key, i), x_test[i], first[i]))
            for i in range(k)
        ]
    )
    hcr_plots.plot_rademacher_grid(
        np.asarray(denormalize(x_test[:k])),
        np.asarray(denormalize(perturbed)),
        titles=[f"test #{i}, label {int(y_test[i])}" for i in range(k)],
        path=os.path.join(workdir, "rademacher.png"),
    )
    del last_bounds, last_tag

    paper = PAPER.get(config.model, {})
    metrics = {
        "variant": config.variant,
        "num_test_accuracy": int(x_test.shape[0]),
        "accuracy_clean": clean,
        "accuracy_dithered": noisy,
        "paper_accuracy_clean": paper.get("clean"),
        "paper_accuracy_dithered": paper.get("dithered"),
        "feature_rms": rms,
        "noise_sigma": sigma,
        "hcr": results,
        "train_seconds": t_train,
        "total_seconds": time.time() - t_start,
    }
    atomic_write_json(os.path.join(workdir, "metrics.json"), metrics)

    lines = [
        f"# Tygert et al. HCR bounds ({config.model}, variant `{config.variant}`)",
        "",
        f"Dither: sigma = {config.noise_scale} x RMS(features) = {sigma:.4g} (RMS {rms:.4g}).",
        "",
        "| accuracy | recon_jax | paper |",
        "|---|---|---|",
        f"| without dithering | {100 * clean:.2f}% | {100 * paper['clean']:.1f}% |" if paper else "",
        f"| with dithering ({config.num_dither_draws} draws) | {100 * noisy:.2f}% | {100 * paper['dithered']:.1f}% |"
        if paper
        else "",
        "",
        f"Accuracy over {x_test.shape[0]} test examples. HCR bounds (Alg. 1, {config.num_restarts} restarts x "
        f"{config.num_rounds} rounds, refine={config.refine}) on the first {n_hcr} test examples, "
        "standard-deviation lower bounds per orthonormal DCT-II mode of the normalised image:",
        "",
        "| perturbation size | median (all) | 10%-90% (all) | median (lowest "
        f"{config.low_freq}x{config.low_freq}) | mean LSQR its | mean norm(delta)/sigma |",
        "|---|---|---|---|---|---|",
    ]
    for tag, r in results.items():
        lines.append(
            f"| {r['perturbation_size']:.4g} | {r['median_all']:.3f} | {r['p10_all']:.3f}-{r['p90_all']:.3f} | "
            f"{r['median_low_freq']:.3f} | {r['lsqr_mean_iterations']:.1f} | {r['mean_feature_shift_over_sigma']:.4g} |"
        )
    lines += [
        "",
        "Figures: `histograms_size_*.png` (Fig. 1 analogue: all modes / lowest-frequency modes), "
        "`rademacher.png` (Fig. 2 analogue: each DCT mode moved by +- its bound, inverted, clipped to [0, 1]).",
        "",
        f"Train {t_train:.0f} s, total {time.time() - t_start:.0f} s.",
    ]
    atomic_write_text(os.path.join(workdir, "report.md"), "\n".join(l for l in lines if l is not None) + "\n")
    return metrics


def main(argv):
    del argv
    metrics = run(_CONFIG.value, _WORKDIR.value)
    print(
        f"accuracy clean {metrics['accuracy_clean']:.4f} dithered {metrics['accuracy_dithered']:.4f}; "
        f"report in {_WORKDIR.value}/report.md"
    )


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "workdir"])
    run_app(main)
