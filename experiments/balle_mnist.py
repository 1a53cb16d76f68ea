"""Informed-adversary reconstruction on MNIST (Balle et al. 2022): RecoNN vs the NN oracle, Table II rows.

python -m experiments.balle_mnist --config=experiments/configs/balle_mnist.py:smoke --workdir=/tmp/balle

Pipeline: split the embedded MNIST into D- (fixed set), the shadow pool and evaluation targets; train one
shadow model per shadow target and one released model per evaluation target on D- u {z} (Balle MLP 784-10-10,
full-batch GD + momentum, known initialisation); train the reconstructor MLP on standardised shadow parameters;
reconstruct every evaluation target from its released model and compare with the nearest-neighbour oracle over
D- u shadow pool. Further rows: random initialisation, ReLU released model, black-box logits, layer subset,
fewer shadow models, DP-GD at several eps (with the ReRo bound when recon_jax.bounds provides it); and the
informed MIA with known vs random initialisation (Fig. 11). Writes report.md, metrics.json, config.json and
figures to the workdir; shadow sets are stored under workdir/shadow and reused by a rerun.
"""

from __future__ import annotations

import functools
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
from recon_jax.attacks import mia, oracle, reconn
from recon_jax.io import atomic_write_json, atomic_write_text
from recon_jax.models.reconstructors import reconstructor_mlp
from recon_jax.report import balle as balle_plots
from recon_jax.report import histogram_vs_reference, image_grid, markdown_table

_CONFIG, _WORKDIR = experiment_flags("experiments/configs/balle_mnist.py:default", "runs/balle_mnist")

# Balle et al. Table II (MNIST) and Table IV (second layer only): mean reconstruction MSE.
PAPER_MSE = {"nn_oracle": 0.0232, "default": 0.0089, "random_init": 0.0695, "relu": 0.0182, "logits": 0.0110,
             "layer_subset": 0.0124}


def _shadow_sets(name, fns, alg, p0, data, n_shadow, n_targets, keys, workdir, config, probe=None):
    """Shadow models (params [+ probe logits]) and released models (params [+ probe logits], test accuracy)."""
    outs = ("params",) if probe is None else ("params", "probe_logits")
    common = dict(init_params=p0, chunk_size=config.chunk_size, probe_inputs=probe)
    s = shadow.generate_shadow_models(fns, alg, data["fixed"], (data["shadow_x"][:n_shadow],
                                      data["shadow_y"][:n_shadow]), keys["shadow"], outputs=outs,
                                      store=os.path.join(workdir, "shadow", name, "shadow"), **common)
    r = shadow.generate_shadow_models(fns, alg, data["fixed"], (data["target_x"][:n_targets],
                                      data["target_y"][:n_targets]), keys["released"],
                                      outputs=outs + ("eval_accuracy",), eval_set=data["eval"],
                                      store=os.path.join(workdir, "shadow", name, "released"), **common)
    return s, r


def _attack(train_features, train_targets, test_features, key, config):
    model = reconstructor_mlp(train_targets.shape[1:], tuple(config.recon_hidden))
    fit = reconn.train_reconstructor(model, train_features, train_targets, key, epochs=config.recon_epochs,
                                     batch_size=config.recon_batch_size, learning_rate=config.recon_learning_rate)
    return np.asarray(reconn.reconstruct(fit, test_features)), fit


def _row(setting, recon, data, orc, n_shadow, accuracy, seconds, classifier, feature_dim, **extra):
    n = recon.shape[0]
    targets = data["target_x"][:n]
    m = oracle.reconstruction_metrics(targets, recon, orc.nn_mse[:n], classifier)
    row = {
        "setting": setting,
        "mean_mse": float(jnp.mean(m["mse"])),
        "median_mse": float(jnp.median(m["mse"])),
        "mean_oracle_mse": float(jnp.mean(m["oracle_mse"])),
        "success_rate": float(jnp.mean(m["success"])),
        "mean_psnr": float(jnp.mean(m["psnr"])),
        "mean_ssim": float(jnp.mean(m["ssim"])),
        "mean_ncc": float(jnp.nanmean(m["ncc"])),
        "mean_kl": float(jnp.mean(m["kl"])) if "kl" in m else None,
        "released_test_accuracy": float(np.mean(accuracy)),
        "num_shadow_models": int(n_shadow),
        "num_targets": int(n),
        "feature_dim": int(feature_dim),
        "paper_mse": PAPER_MSE.get(setting),
        "seconds": round(seconds, 1),
    }
    row.update(extra)
    return row, np.asarray(m["mse"])


def _rero_bounds(kappa, sigma, steps):
    """ReRo upper bounds for `steps` full-batch Gaussian steps with noise multiplier `sigma`: Balle et al. Thm 2
    over the RDP curve, and the GDP (hypothesis-testing) bound with mu = sqrt(steps) / sigma. None if
    recon_jax.bounds does not provide them."""
    out = {"rero_bound_rdp": None, "rero_bound_gdp": None}
    if hasattr(recon_jax.bounds, "rero_from_rdp_curve"):
        orders = np.asarray(recon_jax.accounting.DEFAULT_ORDERS)
        rdp = steps * recon_jax.accounting.rdp_gaussian(sigma, orders)
        out["rero_bound_rdp"] = float(recon_jax.bounds.rero_from_rdp_curve(kappa, orders, rdp))
    if hasattr(recon_jax.bounds, "rero_gdp"):
        out["rero_bound_gdp"] = float(recon_jax.bounds.rero_gdp(kappa, np.sqrt(steps) / sigma))
    return out


def run(config, workdir: str) -> dict:
    """Runs the experiment; writes report.md, metrics.json, config.json and figures to ``workdir``."""
    workdir = prepare_workdir(workdir)
    write_run_info(workdir, config, seed=config.seed)
    t_start = time.time()
    key = jax.random.key(config.seed)
    images, labels = recon_jax.data.load_dataset(config.dataset, "train")
    sp = recon_jax.data.informed_splits(images, labels, config.fixed_size, config.num_shadow, config.num_targets,
                                        config.eval_size, key_or_seed=config.seed)
    data = {"fixed": (sp.fixed_images, sp.fixed_labels), "shadow_x": sp.shadow_images, "shadow_y": sp.shadow_labels,
            "target_x": sp.target_images, "target_y": sp.target_labels, "eval": (sp.eval_images, sp.eval_labels)}
    keys = {"shadow": jax.random.fold_in(key, 1), "released": jax.random.fold_in(key, 2)}
    probe = sp.shadow_images[: config.probe_size]
    settings = tuple(config.settings)

    # NN oracle over everything the adversary has (D- u shadow pool), Fig. 3 order statistics.
    pool = np.concatenate([sp.fixed_images, sp.shadow_images])
    orc = oracle.nn_oracle(sp.target_images, pool, (1.0, 10.0, 50.0), bins=80, max_mse=0.3)
    oracle_summary = {"mean_nn_mse": float(orc.nn_mse.mean()), "pool_size": int(pool.shape[0]),
                      "mean_percentile_mse": {f"p{int(q)}": float(v) for q, v in
                                              zip(np.asarray(orc.percentiles), np.asarray(orc.percentile_mse.mean(0)))},
                      "paper_nn_mse": PAPER_MSE["nn_oracle"]}

    classifier, classifier_acc = None, None
    if config.kl_classifier_epochs > 0:
        tx, ty = recon_jax.data.load_dataset(config.dataset, "test")
        net = models.lenet()
        variables = oracle.train_classifier(net, tx, ty, jax.random.fold_in(key, 5),
                                            epochs=config.kl_classifier_epochs)
        classifier = jax.jit(functools.partial(net.apply, variables))
        classifier_acc = float(np.mean(np.argmax(np.asarray(classifier(sp.eval_images)), -1) == sp.eval_labels))

    def released(activation="elu"):
        return models.from_flax(models.balle_mnist_mlp(config.hidden, activation))

    fns = released(config.activation)
    p0 = training.initial_params(fns, jax.random.fold_in(key, 0), sp.fixed_images)
    gd = functools.partial(training.full_batch_gd, learning_rate=config.learning_rate, momentum=config.momentum,
                           epochs=config.epochs)
    rows, recons, mses = [], {}, {}
    rkey = jax.random.fold_in(key, 3)  # reconstructor keys: fold_in(rkey, setting index)

    # ---- default shadow set (shared by default, logits, layer subset, fewer shadow models)
    t0 = time.time()
    s, r = _shadow_sets("default", fns, gd(), p0, data, config.num_shadow, config.num_targets, keys, workdir,
                        config, probe=probe if "logits" in settings else None)
    shadow_time = time.time() - t0
    s_params, r_params = np.asarray(s.params), np.asarray(r.params)
    acc = np.asarray(r["eval_accuracy"])
    strain = sp.shadow_images[: config.num_shadow]
    t0 = time.time()
    rec, _ = _attack(s_params, strain, r_params, jax.random.fold_in(rkey, 0), config)
    row, mse_default = _row("default", rec, data, orc, config.num_shadow, acc, time.time() - t0 + shadow_time,
                            classifier, s_params.shape[1])
    rows.append(row)
    recons["default"], mses["default"] = rec, mse_default

    if "logits" in settings:
        t0 = time.time()
        rec, _ = _attack(reconn.blackbox_features(np.asarray(s["probe_logits"])), strain,
                         reconn.blackbox_features(np.asarray(r["probe_logits"])), jax.random.fold_in(rkey, 1), config)
        row, mses["logits"] = _row("logits", rec, data, orc, config.num_shadow, acc, time.time() - t0, classifier,
                                   config.probe_size * 10)
        rows.append(row)
        recons["logits"] = rec
    if "layer_subset" in settings:
        t0 = time.time()
        inc = tuple(config.layer_subset)
        f_tr = reconn.whitebox_features(s_params, s.layout, inc)
        rec, _ = _attack(f_tr, strain, reconn.whitebox_features(r_params, r.layout, inc),
                         jax.random.fold_in(rkey, 2), config)
        row, mses["layer_subset"] = _row("layer_subset", rec, data, orc, config.num_shadow, acc, time.time() - t0,
                                         classifier, f_tr.shape[1], layers=list(inc))
        rows.append(row)
        recons["layer_subset"] = rec
    shadow_curve = [(config.num_shadow, rows[0]["mean_mse"])]
    if "fewer_shadow" in settings:
        for j, k in enumerate(c for c in config.fewer_shadow_counts if c < config.num_shadow):
            t0 = time.time()
            rec, _ = _attack(s_params[:k], strain[:k], r_params, jax.random.fold_in(rkey, 10 + j), config)
            row, _ = _row(f"fewer_shadow_{k}", rec, data, orc, k, acc, time.time() - t0, classifier,
                          s_params.shape[1])
            rows.append(row)
            shadow_curve.append((k, row["mean_mse"]))
    del s_params

    # ---- settings with their own (smaller) shadow sets
    n_sh, n_tg = min(config.secondary_num_shadow, config.num_shadow), min(config.secondary_num_targets,
                                                                          config.num_targets)
    secondary = []
    if "random_init" in settings:
        secondary.append(("random_init", fns, gd(init="random"), None, {}))
    if "relu" in settings:
        fr = released("relu")
        secondary.append(("relu", fr, gd(), training.initial_params(fr, jax.random.fold_in(key, 0), sp.fixed_images),
                          {}))
    dp_points = []
    if "dp" in settings:
        kappa_pool = pool[: min(len(pool), 4000)]
        eta = oracle_summary["mean_nn_mse"]
        kappa = float(oracle.empirical_kappa(kappa_pool, eta))
        for eps in config.dp_eps:
            sigma = float(recon_jax.accounting.calibrate_sigma(eps, 1.0, config.epochs, config.dp_delta))
            alg = training.dp_gd(config.dp_clip_norm, noise_multiplier=sigma, learning_rate=config.learning_rate,
                                 momentum=config.momentum, epochs=config.epochs)
            extra = {"eps": float(eps), "delta": config.dp_delta, "noise_multiplier": sigma,
                     "clip_norm": config.dp_clip_norm, "kappa": kappa, "eta": eta,
                     **_rero_bounds(kappa, sigma, config.epochs)}
            secondary.append((f"dp_eps={eps:g}", fns, alg, p0, extra))
    for i, (name, f, alg, init, extra) in enumerate(secondary):
        t0 = time.time()
        s2, r2 = _shadow_sets(name.replace("=", "_"), f, alg, init, data, n_sh, n_tg, keys, workdir, config)
        rec, _ = _attack(np.asarray(s2.params), strain[:n_sh], np.asarray(r2.params),
                         jax.random.fold_in(rkey, 100 + i), config)
        row, mses[name] = _row(name, rec, data, orc, n_sh, np.asarray(r2["eval_accuracy"]), time.time() - t0,
                               classifier, s2.layout.size, **extra)
        if "eps" in extra:
            row["success_at_eta"] = float(np.mean(mses[name] <= extra["eta"]))
            dp_points.append(row)
        rows.append(row)
        recons[name] = rec

    # ---- informed MIA, known vs random initialisation (App. A, Fig. 11), per fixed-set size and candidate
    mia_summary, mia_rows, panels = None, [], {}
    if config.mia_num_models > 0:
        mia_pool = np.concatenate([sp.fixed_images, sp.shadow_images])  # D- for the larger fixed sets
        mia_pool_y = np.concatenate([sp.fixed_labels, sp.shadow_labels])
        mia_summary = {}
        for n_fixed in config.mia_fixed_sizes:
            if n_fixed > len(mia_pool):
                raise ValueError(f"mia_fixed_sizes entry {n_fixed} exceeds the fixed set + shadow pool "
                                 f"({len(mia_pool)} images)")
            fixed_m = (mia_pool[:n_fixed], mia_pool_y[:n_fixed])
            for name, alg, init in (("known_init", gd(), p0), ("random_init", gd(init="random"), None)):
                aucs, accs = [], []
                for c in range(config.mia_num_candidates):
                    cand = (sp.target_images[c], sp.target_labels[c])
                    res = mia.informed_mia(fns, alg, fixed_m, cand, jax.random.fold_in(jax.random.fold_in(key, 7), c),
                                           num_shadow=config.mia_num_models, num_eval=config.mia_num_models,
                                           init_params=init, chunk_size=config.chunk_size)
                    mia_rows.append({"fixed_size": int(n_fixed), "initialisation": name, "candidate": c,
                                     "accuracy": res.accuracy, "auc": res.auc,
                                     "shadow_accuracy": res.shadow_accuracy,
                                     "num_models_per_phase": config.mia_num_models})
                    aucs.append(res.auc)
                    accs.append(res.accuracy)
                    if c == 0:
                        sc = np.concatenate([res.shadow_scores, res.eval_scores])
                        lab = np.concatenate([res.shadow_labels, res.eval_labels])
                        panels[f"n={n_fixed}, {name} (AUC {res.auc:.3f})"] = (-sc[lab], -sc[~lab])
                mia_summary[f"n={n_fixed}/{name}"] = {"fixed_size": int(n_fixed), "initialisation": name,
                                                      "mean_auc": float(np.mean(aucs)), "min_auc": float(np.min(aucs)),
                                                      "mean_accuracy": float(np.mean(accs)),
                                                      "num_candidates": config.mia_num_candidates,
                                                      "num_models_per_phase": config.mia_num_models}

    # ---- figures
    figs = {}
    ncol = min(config.grid_columns, len(recons["default"]), min(len(v) for v in recons.values()))
    grid_rows = {"target": sp.target_images[:ncol]}
    for name in ("default", "logits", "layer_subset", "relu", "random_init"):
        if name in recons:
            grid_rows[name] = recons[name][:ncol]
    for name in recons:
        if name.startswith("dp_eps"):
            grid_rows[name] = recons[name][:ncol]
    grid_rows["NN oracle"] = pool[np.asarray(orc.nn_index[:ncol])]
    figs["reconstructions"] = image_grid(grid_rows, os.path.join(workdir, "reconstructions.png"), ncol,
                                         title="Balle et al. RecoNN on MNIST: targets | reconstructions | NN oracle")
    figs["mse_histogram"] = histogram_vs_reference(
        {"RecoNN (default)": mses["default"], "NN oracle": np.asarray(orc.nn_mse[: len(mses["default"])]),
         **({"random init": mses["random_init"]} if "random_init" in mses else {})},
        os.path.join(workdir, "mse_histogram.png"), "MSE", "per-target MSE", log_x=True)
    markers = {"NN oracle (mean)": oracle_summary["mean_nn_mse"],
               **{f"{k} pct (mean)": v for k, v in oracle_summary["mean_percentile_mse"].items()},
               "RecoNN default (mean)": rows[0]["mean_mse"]}
    figs["oracle_histogram"] = balle_plots.oracle_histogram(orc.histogram, orc.bin_edges, markers,
                                                            os.path.join(workdir, "oracle_histogram.png"),
                                                            "Fig. 3: MSE of a target to the adversary's pool")
    if len(shadow_curve) > 1:
        c, m = zip(*shadow_curve)
        figs["mse_vs_shadow_models"] = balle_plots.mse_vs_shadow_models(
            c, m, os.path.join(workdir, "mse_vs_shadow_models.png"),
            {"NN oracle": oracle_summary["mean_nn_mse"]}, "Fig. 5c: MSE vs number of shadow models")
    if dp_points:
        bounds = [p["rero_bound_gdp"] for p in dp_points]
        figs["dp_curve"] = balle_plots.dp_curve(
            [p["eps"] for p in dp_points], [p["mean_mse"] for p in dp_points],
            [p["released_test_accuracy"] for p in dp_points], os.path.join(workdir, "dp_curve.png"),
            oracle_mse=oracle_summary["mean_nn_mse"], nonprivate_mse=rows[0]["mean_mse"],
            success_rate=[p["success_at_eta"] for p in dp_points],
            rero_bound=None if any(b is None for b in bounds) else bounds, title="Fig. 9: DP-GD")
    if mia_summary:
        figs["mia_losses"] = balle_plots.mia_loss_histograms(panels, os.path.join(workdir, "mia_losses.png"))

    # ---- report
    total = time.time() - t_start
    cols = ["setting", "mean_mse", "paper_mse", "mean_oracle_mse", "success_rate", "mean_psnr", "mean_ssim",
            "mean_kl", "released_test_accuracy", "num_shadow_models", "num_targets", "feature_dim", "seconds"]
    table = markdown_table([{"setting": "nn_oracle", "mean_mse": oracle_summary["mean_nn_mse"],
                             "paper_mse": PAPER_MSE["nn_oracle"], "num_targets": config.num_targets}] + rows, cols)
    metrics = {"variant": config.variant, "rows": rows, "oracle": oracle_summary, "mia": mia_summary,
               "mia_rows": mia_rows,
               "shadow_curve": [{"num_shadow_models": int(c), "mean_mse": float(m)} for c, m in shadow_curve],
               "classifier_accuracy": classifier_acc, "figures": {k: os.path.basename(v) for k, v in figs.items()},
               "total_seconds": round(total, 1)}
    atomic_write_json(os.path.join(workdir, "metrics.json"), metrics)
    lines = [
        f"# Balle et al. informed-adversary reconstruction on MNIST ({config.variant})", "",
        f"Fixed set {config.fixed_size}, shadow pool {config.num_shadow}, evaluation targets {config.num_targets}; "
        f"released model 784-{config.hidden}-10 ({config.activation}), full-batch GD lr {config.learning_rate} "
        f"momentum {config.momentum}, {config.epochs} epochs, known initialisation unless stated. Reconstructor "
        f"MLP {tuple(config.recon_hidden)}, MAE+MSE, RMSProp {config.recon_learning_rate}, {config.recon_epochs} "
        f"epochs. Secondary settings (random_init, relu, dp) use {n_sh} shadow models and {n_tg} targets.", "",
        "Table II-style summary (`paper_mse`: Balle et al. Table II / IV, fixed set 10K, 59K shadow models; "
        "success = reconstruction MSE below the target's NN-oracle MSE):", "", table, "",
        f"NN oracle over D- u shadow pool ({oracle_summary['pool_size']} images): mean NN MSE "
        f"{oracle_summary['mean_nn_mse']:.4f} (paper 0.0232 with a 69K pool); mean percentiles "
        + ", ".join(f"{k} {v:.4f}" for k, v in oracle_summary["mean_percentile_mse"].items()) + ".",
    ]
    if classifier_acc is not None:
        lines.append(f"KL metric classifier: LeNet trained on the MNIST test split, accuracy {classifier_acc:.3f} "
                     "on the held-out split.")
    if mia_summary:
        lines += ["", f"Informed MIA (App. A, Fig. 11): loss threshold fitted on {config.mia_num_models} shadow models, "
                  f"scored on {config.mia_num_models} released models (each trained with the candidate with "
                  f"probability 1/2), for the first {config.mia_num_candidates} evaluation targets as candidates and "
                  f"fixed sets of size {', '.join(str(n) for n in config.mia_fixed_sizes)} (the paper's is 10,000; "
                  "one point weighs more in a smaller fixed set):", "",
                  markdown_table(list(mia_summary.values()), ["fixed_size", "initialisation", "mean_auc", "min_auc",
                                                              "mean_accuracy", "num_candidates",
                                                              "num_models_per_phase"])]
    if dp_points:
        lines += ["", f"DP-GD rows: clip {config.dp_clip_norm}, noise multiplier calibrated with "
                  f"`recon_jax.accounting.calibrate_sigma` (q = 1, {config.epochs} steps, delta {config.dp_delta}). "
                  f"ReRo: empirical prior = uniform over {min(len(pool), 4000)} pool images, eta = mean NN-oracle MSE "
                  f"{dp_points[0]['eta']:.4f}, kappa = {dp_points[0]['kappa']:.4g}; bounds on P[MSE <= eta] from "
                  "Thm 2 over the RDP curve and from mu-GDP (mu = sqrt(T)/sigma; add/remove adjacency, clipped-sum "
                  "sensitivity C), next to the attack's empirical P[MSE <= eta]:", "",
                  markdown_table(dp_points, ["setting", "eps", "noise_multiplier", "mean_mse", "success_at_eta",
                                             "rero_bound_rdp", "rero_bound_gdp", "released_test_accuracy"])]
        if dp_points[0]["rero_bound_rdp"] is None:
            lines.append("(`recon_jax.bounds` did not provide the ReRo bounds when this ran.)")
    lines += ["", "Figures: " + ", ".join(f"`{os.path.basename(v)}`" for v in figs.values()),
              f"", f"Total time {total / 60:.1f} min."]
    atomic_write_text(os.path.join(workdir, "report.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return metrics


def main(argv):
    del argv
    run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    run_app(main)
