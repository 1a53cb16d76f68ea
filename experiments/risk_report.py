"""The reconstruction-risk report: "if I train this model on my data with this DP-SGD configuration and release
it, how well could someone reconstruct a training record, and what do the theorems guarantee?"

python -m experiments.risk_report --config=experiments/configs/risk_report.py:default --workdir=runs/demo
(also installed as the console script ``recon-jax-report``; ``make demo`` runs the default config).

For the non-private setting and each noise multiplier of the sweep it: trains the released models (one per
evaluation target, on D- + target; reports test accuracy); trains shadow models and Balle et al.'s reconstructor
network; reconstructs every target and scores it (MSE, PSNR, SSIM, NCC, success against the nearest-neighbour
oracle); and, for DP settings, computes epsilon (RDP and PLD), ReRo bounds from every route, Ziller et al.'s
prior-free bounds and Bayes' capacity. Writes report.md, metrics.json, config.json and PNG figures.
"""

from __future__ import annotations

import math
import os
import time

from absl import app, flags
from ml_collections import config_flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments.common import experiment_flags, prepare_workdir, run_app, write_run_info
from recon_jax import data as rdata
from recon_jax import models, shadow, training
from recon_jax.attacks import oracle as roracle
from recon_jax.attacks import reconn
from recon_jax.io import atomic_write_json, atomic_write_text
from recon_jax.models.reconstructors import reconstructor_mlp
from recon_jax.report import image_grid, markdown_table
from recon_jax.report.risk import plot_bounds_vs_success, privacy_bounds

_CONFIG, _WORKDIR = experiment_flags("experiments/configs/risk_report.py:default", "runs/risk_report")

KNOWN_KEYS = {
    "variant", "seed", "dataset", "fixed_size", "num_shadow", "num_targets", "eval_size", "hidden", "activation",
    "epochs", "learning_rate", "momentum", "batch_size", "shuffle", "include_non_private", "noise_multipliers",
    "clip_norm", "delta", "kappas", "reconstructor_epochs", "reconstructor_batch_size", "reconstructor_learning_rate",
    "chunk_size",
}


def _fail(field: str, message: str):
    raise ValueError(f"config.{field}: {message}")


def validate_config(config, num_train: int | None = None, num_test: int | None = None) -> None:
    """Checks every field before any work starts; raises ValueError naming the field."""
    keys = set(config.keys())
    unknown = sorted(keys - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"config has unknown field(s) {unknown}; known fields: {sorted(KNOWN_KEYS)}")
    missing = sorted(KNOWN_KEYS - keys)
    if missing:
        raise ValueError(f"config is missing field(s) {missing}")
    if config.dataset not in rdata.DATASETS or config.dataset == "folder":
        _fail("dataset", f"must be one of {[d for d in rdata.DATASETS if d != 'folder']}, got {config.dataset!r}")
    for field, lo in (("fixed_size", 1), ("num_shadow", 10), ("num_targets", 1), ("eval_size", 1), ("hidden", 1),
                      ("epochs", 1), ("reconstructor_epochs", 1), ("reconstructor_batch_size", 1),
                      ("chunk_size", 1)):
        v = config[field]
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            _fail(field, f"must be an integer >= {lo}, got {v!r}")
    if config.activation not in ("elu", "relu", "tanh", "sigmoid"):
        _fail("activation", f"must be one of elu, relu, tanh, sigmoid, got {config.activation!r}")
    for field in ("learning_rate", "reconstructor_learning_rate", "clip_norm"):
        if not (isinstance(config[field], (int, float)) and config[field] > 0):
            _fail(field, f"must be > 0, got {config[field]!r}")
    if not 0 <= config.momentum < 1:
        _fail("momentum", f"must be in [0, 1), got {config.momentum!r}")
    if not 0 < config.delta < 1:
        _fail("delta", f"must be in (0, 1), got {config.delta!r}")
    sigmas = tuple(config.noise_multipliers)
    for s in sigmas:
        if not (isinstance(s, (int, float)) and s > 0 and math.isfinite(s)):
            _fail("noise_multipliers", f"every noise multiplier must be a finite number > 0, got {s!r}")
    if not sigmas and not config.include_non_private:
        _fail("noise_multipliers", "is empty and include_non_private is False: nothing to run")
    for k in config.kappas:
        if not 0 < k < 1:
            _fail("kappas", f"every prior kappa must be in (0, 1), got {k!r}")
    if config.batch_size is not None and not (1 <= config.batch_size <= config.fixed_size + 1):
        _fail("batch_size", f"must be None (full batch) or in [1, fixed_size + 1 = {config.fixed_size + 1}], "
                            f"got {config.batch_size!r}")
    if config.shuffle not in ("fresh", "known"):
        _fail("shuffle", f"must be 'fresh' (secret per-model batch order) or 'known' (the adversary knows it), "
                         f"got {config.shuffle!r}")
    if num_train is not None:
        need = config.fixed_size + config.num_shadow + config.num_targets
        if need > num_train:
            _fail("num_shadow", f"fixed_size + num_shadow + num_targets = {need} exceeds the {num_train} training "
                                f"examples of {config.dataset!r}")
    if num_test is not None and config.eval_size > num_test:
        _fail("eval_size", f"must be <= {num_test} (test examples of {config.dataset!r}), got {config.eval_size}")


def _algorithm(config, sigma):
    common = dict(learning_rate=config.learning_rate, momentum=config.momentum, epochs=config.epochs)
    if config.batch_size is None:
        if sigma is None:
            return training.full_batch_gd(**common)
        return training.dp_gd(config.clip_norm, noise_multiplier=sigma, **common)
    if sigma is None:
        return training.minibatch_sgd(config.batch_size, shuffle=config.shuffle, **common)
    return training.dp_sgd(config.batch_size, config.clip_norm, noise_multiplier=sigma, shuffle=config.shuffle,
                           **common)


def sampling(config) -> tuple[float, int]:
    """(sampling rate q, number of steps) for the privacy accounting of one released model.

    Full batch: every step sees every record (q = 1, one step per epoch). Minibatches with a secret ("fresh")
    order: q = batch / (fixed_size + 1) per step, the usual DP-SGD analysis (it is proven for Poisson sampling;
    shuffled fixed-size batches are accounted the same way, as is common practice). Minibatches whose order the
    adversary knows ("known"): it knows which single step of each epoch used the target, so subsampling
    amplifies nothing and the accounting is one unamplified Gaussian step per epoch (q = 1, epochs steps).
    """
    n_total = config.fixed_size + 1
    if config.batch_size is None or config.shuffle == "known":
        return 1.0, int(config.epochs)
    return config.batch_size / n_total, int(config.epochs * (n_total // config.batch_size))


def run(config, workdir: str) -> dict:
    """Runs the report; returns the metrics dict (also written to ``workdir/metrics.json``)."""
    t0 = time.time()
    workdir = prepare_workdir(workdir)
    validate_config(config)
    train_x, train_y = rdata.load_dataset(config.dataset, "train")
    test_x, test_y = rdata.load_dataset(config.dataset, "test")
    validate_config(config, num_train=len(train_x), num_test=len(test_x))
    write_run_info(workdir, config, seed=config.seed)

    s = rdata.informed_splits(train_x, train_y, config.fixed_size, config.num_shadow, config.num_targets,
                              key_or_seed=config.seed)
    eval_set = (test_x[: config.eval_size], test_y[: config.eval_size])
    image_shape = train_x.shape[1:]
    data_dim = int(np.prod(image_shape))
    num_classes = int(max(train_y.max(), test_y.max()) + 1)
    fns = models.from_flax(models.balle_mnist_mlp(hidden=config.hidden, activation=config.activation,
                                                  num_classes=num_classes))
    key = jax.random.key(config.seed)
    k_init, k_shadow, k_released, k_recon = (jax.random.fold_in(key, i) for i in range(4))
    p0 = training.initial_params(fns, k_init, s.fixed_images)
    num_params = models.count_params(p0)
    fixed = (s.fixed_images, s.fixed_labels)
    q, steps = sampling(config)
    shuffle_key = jax.random.fold_in(key, 4) if config.batch_size is not None and config.shuffle == "known" else None

    # The NN oracle: the closest point the adversary knows (D- and the shadow pool) to each evaluation target.
    pool = np.concatenate([s.fixed_images, s.shadow_images])
    orc = roracle.nn_oracle(s.target_images, pool)
    oracle_mse = np.asarray(orc.nn_mse)
    eta = float(np.median(oracle_mse))  # success threshold for the ReRo comparison: the median oracle MSE
    # kappa(eta) = sup_z0 P_{Z ~ prior}[MSE(Z, z0) <= eta], estimated from below over candidate guesses z0: every
    # pool record, every class mean and the global mean (blurry averages are often the best oblivious guesses).
    pool_labels = np.concatenate([s.fixed_labels, s.shadow_labels])
    means = [pool.mean(0)] + [pool[pool_labels == c].mean(0) for c in np.unique(pool_labels)]
    candidates = np.concatenate([pool, np.stack(means)])
    kappa_eta = float(roracle.empirical_kappa(pool, eta, candidates=candidates))

    settings = ([("non-private", None)] if config.include_non_private else []) + [
        (f"DP sigma={sg:g}", float(sg)) for sg in config.noise_multipliers]
    rows, recon_images = [], {}
    n_tr = int(round(0.9 * config.num_shadow))
    for name, sigma in settings:
        print(f"== setting: {name} ==", flush=True)
        alg = _algorithm(config, sigma)
        store = os.path.join(workdir, "shadow_stores", name.replace(" ", "_").replace("=", "_"))
        shadows = shadow.generate_shadow_models(
            fns, alg, fixed, (s.shadow_images, s.shadow_labels), k_shadow, init_params=p0, shuffle_key=shuffle_key,
            outputs=("params",), chunk_size=config.chunk_size, store=os.path.join(store, "shadow"))
        released = shadow.generate_shadow_models(
            fns, alg, fixed, (s.target_images, s.target_labels), k_released, init_params=p0,
            shuffle_key=shuffle_key, outputs=("params", "eval_accuracy"), eval_set=eval_set,
            chunk_size=config.chunk_size, store=os.path.join(store, "released"))
        feats = np.asarray(shadows["params"])
        fit = reconn.train_reconstructor(
            reconstructor_mlp(image_shape), feats[:n_tr], s.shadow_images[:n_tr], k_recon,
            epochs=config.reconstructor_epochs, batch_size=config.reconstructor_batch_size,
            learning_rate=config.reconstructor_learning_rate,
            eval_set=(feats[n_tr:], s.shadow_images[n_tr:]))
        recon = np.asarray(reconn.reconstruct(fit, np.asarray(released["params"])))
        recon_images[name] = recon
        m = {k: np.asarray(v) for k, v in roracle.reconstruction_metrics(s.target_images, recon, oracle_mse).items()}
        row = {
            "setting": name,
            "noise_multiplier": sigma if sigma is not None else 0.0,
            "test_accuracy": float(np.mean(released["eval_accuracy"])),
            "mean_mse": float(m["mse"].mean()),
            "mean_oracle_mse": float(oracle_mse.mean()),
            "success_rate": float(m["success"].mean()),
            "success_at_eta": float(np.mean(m["mse"] <= eta)),
            "mean_psnr": float(np.mean(np.minimum(m["psnr"], 100.0))),
            "mean_ssim": float(m["ssim"].mean()) if "ssim" in m else float("nan"),
            "mean_ncc": float(np.nanmean(m["ncc"])),
            "reconstructor_val_mse": float(fit.eval_mse[-1]) if len(fit.eval_mse) else float("nan"),
            "num_shadow_models": int(config.num_shadow),
            "num_targets": int(config.num_targets),
            "eps_rdp": float("inf"),
            "eps_pld": float("inf"),
        }
        if sigma is not None:
            b = privacy_bounds(sigma, q, steps, config.delta, config.clip_norm, data_dim, config.kappas,
                               eta_mse=eta, kappa_at_eta=kappa_eta, num_params=num_params)
            row["eps_rdp"], row["eps_pld"] = b["eps_rdp"], b["eps_pld"]
            at_eta = [r for r in b["rero"] if r["kappa"] == kappa_eta]
            if at_eta:
                row.update(bound_rdp=at_eta[0]["rero_rdp"], bound_zcdp=at_eta[0]["rero_zcdp"],
                           bound_gdp=at_eta[0]["rero_gdp"])
            row["bounds"] = b
        rows.append(row)

    figures = {}
    grid = {"target": s.target_images}
    grid.update({f"recon: {k}": v for k, v in recon_images.items()})
    grid["NN oracle"] = pool[np.asarray(orc.nn_index)]
    figures["reconstructions"] = image_grid(grid, os.path.join(workdir, "reconstructions.png"),
                                            title="Targets, attack reconstructions per setting, NN oracle")
    dp_rows = [r for r in rows if r["noise_multiplier"] > 0]
    if dp_rows:
        figures["bounds_vs_attack"] = plot_bounds_vs_success(dp_rows, os.path.join(workdir, "bounds_vs_attack.png"))
    elapsed = time.time() - t0
    result = {"rows": rows, "eta_mse": eta, "kappa_at_eta": kappa_eta, "sample_rate": q, "steps": steps,
              "num_params": num_params, "runtime_seconds": elapsed,
              "figures": {k: os.path.basename(v) for k, v in figures.items()}}
    atomic_write_json(os.path.join(workdir, "metrics.json"), result)
    report = _report_markdown(config, result, s, num_params, q, steps)
    atomic_write_text(os.path.join(workdir, "report.md"), report)
    print(markdown_table(rows, ["setting", "test_accuracy", "eps_rdp", "mean_mse", "mean_oracle_mse", "success_rate",
                                "success_at_eta", "mean_psnr", "mean_ssim"]))
    print(f"report: {os.path.join(workdir, 'report.md')}  ({elapsed / 60:.1f} min)")
    return result


def _report_markdown(config, result, s, num_params, q, steps) -> str:
    rows = result["rows"]
    eta, kappa_eta = result["eta_mse"], result["kappa_at_eta"]
    attack_cols = ["setting", "test_accuracy", "eps_rdp", "eps_pld", "mean_mse", "mean_oracle_mse", "success_rate",
                   "success_at_eta", "mean_psnr", "mean_ssim", "mean_ncc"]
    text = [f"# Reconstruction-risk report ({config.dataset}, variant `{config.variant}`)", ""]
    text += ["## What was run", "",
             f"- Released model: MLP 784-{config.hidden}-10 ({config.activation}, {num_params} parameters), "
             f"{'full-batch gradient descent' if config.batch_size is None else f'minibatch SGD (batch {config.batch_size})'}"
             f" with momentum {config.momentum}, learning rate {config.learning_rate}, {config.epochs} epochs, "
             f"on a fixed set D- of {config.fixed_size} records plus one target. DP settings: clip norm "
             f"{config.clip_norm}, delta {config.delta}, accounted as {steps} Gaussian steps at sampling rate "
             f"q = {q:.4g} per model.",
             f"- Adversary (Balle et al. 2022, informed): knows D-, the training algorithm and the initialisation; "
             f"trains {config.num_shadow} shadow models and a reconstructor network (MLP 2x1000) on their parameters.",
             f"- Evaluation: {config.num_targets} released models, one per target. Success = reconstruction closer "
             f"(MSE) to the target than the nearest record the adversary already knows (NN oracle). For the bounds, "
             f"success also means MSE <= eta = {eta:.4g} (the median oracle MSE); the prior's chance of that is "
             f"kappa = {kappa_eta:.4g} (best guess from the adversary's pool).", ""]
    if config.batch_size is not None:
        text.insert(-1, "- Batch order: " + (
            "secret and fresh for every model (the adversary's shadow models use their own random orders); the "
            "accounting treats each step as Poisson-subsampled at rate q, the usual DP-SGD analysis, which is "
            "proven for Poisson sampling and common practice for shuffled batches."
            if config.shuffle == "fresh" else
            "known to the adversary (shared by every model); it knows which step of each epoch used the target, "
            "so the accounting applies no subsampling amplification (q = 1, one step per epoch)."))
    text += ["## Attack results", "", markdown_table(rows, attack_cols), "",
             "![targets, reconstructions and NN oracle](reconstructions.png)", ""]
    dp_rows = [r for r in rows if "bounds" in r]
    if dp_rows:
        text += ["## What the theorems guarantee", "",
                 "ReRo = upper bound on the probability that *any* attack reconstructs a record (here: MSE <= eta), "
                 "given a prior success probability kappa. Routes: RDP curve and zCDP (optimal RDP-to-trade-off "
                 "conversion, tighter than Balle et al. Thm 2 and Cor. 4), hypothesis testing / GDP (Hayes et al. 2023), "
                 "eps-DP (both branches of its trade-off curve).", ""]
        brows = []
        for r in dp_rows:
            for rr in r["bounds"]["rero"]:
                brows.append({"setting": r["setting"], "eps_rdp": r["eps_rdp"], **rr})
        text += [markdown_table(brows, ["setting", "eps_rdp", "kappa", "rero_gdp", "rero_rdp", "rero_zcdp", "rero_dp"]),
                 ""]
        zrows = [{"setting": r["setting"],
                  "expected MSE >=": r["bounds"]["ziller_mse_lower_bound"],
                  "PSNR <= (dB)": r["bounds"]["ziller_psnr_upper_bound"],
                  "NCC <=": r["bounds"]["ziller_ncc_upper_bound"],
                  "log Bayes capacity": r["bounds"]["log_bayes_capacity"]} for r in dp_rows]
        text += ["Prior-free bounds of Ziller et al. hold in *their* threat model: the adversary observes the T "
                 "noisy clipped gradients of a linear layer, whose gradient is the (clipped) record itself, so "
                 "they are in units of the clip norm (records scaled to norm <= C) and bound the best possible "
                 "gradient-inversion attack, not the parameter-based attack above. The log Bayes' capacity is "
                 "that of one Gaussian release at the effective noise sigma/sqrt(T) over the model's parameters "
                 "(Biswas et al. Thm 5; larger means more leakage, compare across settings).", "",
                 markdown_table(zrows), ""]
        if "bounds_vs_attack" in result["figures"]:
            text += ["![bounds vs attack success](bounds_vs_attack.png)", ""]
        text += ["Accounting: add/remove-one adjacency with sensitivity C, as in the ReRo argument (training with "
                 "vs without the target). kappa is estimated from below (the best of the candidate guesses), so "
                 "the bounds at kappa(eta) are approximate; the table's fixed kappas are exact.", ""]
    text += ["## Interpretation", "", _interpretation(rows, kappa_eta, config), "",
             f"Runtime: {result['runtime_seconds'] / 60:.1f} min. Config: `config.json`; numbers: `metrics.json`."]
    return "\n".join(text) + "\n"


def _interpretation(rows, kappa_eta, config=None) -> str:
    lines = []
    np_rows = [r for r in rows if r["noise_multiplier"] == 0]
    if np_rows:
        r = np_rows[0]
        verdict = "can" if r["success_rate"] >= 0.5 else "mostly cannot"
        lines.append(f"Without DP, an informed adversary {verdict} reconstruct training records: "
                     f"{100 * r['success_rate']:.0f}% of reconstructions beat the nearest known record "
                     f"(mean MSE {r['mean_mse']:.4f} vs oracle {r['mean_oracle_mse']:.4f}).")
        if (config is not None and config.batch_size is not None and config.shuffle == "fresh"
                and r["success_rate"] < 0.5):
            lines.append("The batch order is secret here, randomness the adversary's shadow models cannot "
                         "replicate; rerun with --config.shuffle=known to see the attack when it is known.")
    dp = [r for r in rows if r["noise_multiplier"] > 0 and "bound_gdp" in r]
    if dp:
        best = max(dp, key=lambda r: r["noise_multiplier"])
        lines.append(f"With DP (sigma={best['noise_multiplier']:g}, eps={best['eps_rdp']:.3g}, test accuracy "
                     f"{100 * best['test_accuracy']:.1f}%), the attack beats the oracle on "
                     f"{100 * best['success_rate']:.0f}% of targets, and theory caps any attack's chance of an MSE "
                     f"below eta at {100 * best['bound_gdp']:.1f}% (prior {100 * kappa_eta:.1f}%).")
        over = [r["setting"] for r in dp if r["success_at_eta"] > r["bound_gdp"] + 1e-12]
        if over:
            lines.append(f"Measured success exceeds the bound in {', '.join(over)}: kappa is underestimated there "
                         f"(the best oblivious guess lies outside the candidates tried) or the number of targets "
                         f"is too small for a precise rate; treat that bound as approximate.")
    return " ".join(lines) if lines else "No settings were run."


def main(argv):
    del argv
    run(_CONFIG.value, _WORKDIR.value)


def console_main():
    """Entry point of the ``recon-jax-report`` console script."""
    run_app(main)


if __name__ == "__main__":
    run_app(main)
