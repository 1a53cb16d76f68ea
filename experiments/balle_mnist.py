"""Informed-adversary reconstruction on MNIST (Balle et al. 2022): RecoNN vs the NN oracle, the Table II MNIST column.

python -m experiments.balle_mnist --config=experiments/configs/balle_mnist.py:smoke --workdir=/tmp/balle
python -m experiments.balle_mnist --config=experiments/configs/balle_mnist.py:table2 --workdir=runs/balle_mnist

Every row runs the library pipeline (:mod:`recon_jax.attacks.informed`): MNIST train + test split into
evaluation targets and the adversary's pool (fixed set D-, shadow targets; :func:`recon_jax.data.pool_splits`);
one shadow model per shadow target and one released model per evaluation target on D- u {z}; the reconstructor
MLP on standardised shadow features; the NN oracle over the whole pool. Rows sharing a training setting share
one shadow set: default, black-box logits and fewer shadow models (Fig. 5c) the default set; width 100 (Table
IV) and its second layer (the paper's layer subset) the wide set. Every other row trains its own: 250 epochs,
ReLU, random initialisation, minibatch SGD with the batch order known / unknown to the adversary (Fig. 7),
DP-GD per eps (Fig. 9, independent noise per eps, with the ReRo bounds). Optional: the informed MIA with known
vs random initialisation (Fig. 11) and the classifier-KL metric.

Each row is shown next to the paper's value for the same setting and its ✓/✗ (✓: mean reconstruction MSE below
the mean NN-oracle MSE, Sec. V-B d); per target, success means MSE below that target's NN-oracle MSE. Shadow
sets and reconstructor checkpoints live under ``workdir`` in directories keyed by a hash of what determines
them, so a stopped run resumes and a changed config never reuses stale results. Writes report.md,
metrics.json (with the claims checked), config.json and figures.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import resource
import time

import jax
import numpy as np

from experiments import balle_mnist_report
from experiments.common import (check_config, check_fits, finish_run, keyed_dir, launch, require_finite, start_run,
                                wall_time)
from experiments.configs.balle_mnist import CHECKS
import recon_jax
from recon_jax import models, training
from recon_jax.attacks import informed, mia, oracle
from recon_jax.io import atomic_write_json, strict_json


# Paper row of the same setting: (mean MSE or None where the paper gives a figure only, its ✓/✗ or None, source).
# Rows other than "default" vary one factor of the paper's default (fixed set 10K); ours vary it from ours.
PAPER_ROWS = {
    "default@1000": (0.0094, True, "Table II, fixed set 1K"),
    "default@10000": (0.0089, True, "Table II, default (fixed set 10K)"),
    "logits": (0.0110, True, "Table II, model access (logits)"),
    "layer_subset": (0.0124, True, "Table II released layers = Table IV 100* (width 100, second layer)"),
    "width100": (0.0079, True, "Table II size & architecture = Table IV width 100"),
    "epochs250": (0.0121, True, "Table II, 250 epochs"),
    "relu": (0.0182, True, "Table II, ReLU"),
    "random_init": (0.0695, False, "Table II, random initialization"),
    "minibatch_known": (None, True, "Fig. 7 / Sec. VI-B d: successful with a known batch-order seed"),
    "minibatch_unknown": (None, None, "Fig. 7: success depends on learning rate and momentum"),
    "dp": (None, False, "Fig. 9 / Sec. VI-D: even a large eps mitigates the attack"),
    "fewer_shadow>=8000": (None, True, "Sec. VI-B a: below the oracle from 8K shadow models"),
    "fewer_shadow": (None, None, "Fig. 5c"),
}


def paper_row(setting: str, fixed_size: int, num_shadow: int = 0) -> tuple:
    """The paper's (mean MSE, ✓/✗, source) for a row of ours."""
    if setting == "default":
        return PAPER_ROWS.get(f"default@{fixed_size}", (None, True, "Table II (other fixed-set size)"))
    if setting.startswith("dp_eps"):
        return PAPER_ROWS["dp"]
    if setting.startswith("fewer_shadow"):
        return PAPER_ROWS["fewer_shadow>=8000" if num_shadow >= 8000 else "fewer_shadow"]
    return PAPER_ROWS[setting]


def _stable_id(name: str) -> int:
    return int(hashlib.sha256(name.encode()).hexdigest()[:7], 16)


def _rero_bounds(kappa, sigma, steps, delta, clip_norm, data_dim):
    """ReRo upper bounds for `steps` full-batch Gaussian steps with noise multiplier `sigma`, from
    :func:`recon_jax.accounting.privacy_bounds`: Balle et al. Thm 2 over the RDP curve, and the GDP
    (hypothesis-testing) bound with mu = sqrt(steps) / sigma."""
    row = recon_jax.accounting.privacy_bounds(sigma, 1.0, steps, delta, clip_norm, data_dim, kappas=[kappa]).at(kappa)
    return {"rero_bound_rdp": row.rero_rdp, "rero_bound_gdp": row.rero_gdp}


class _Sets:
    """The training settings of the run, their shadow/released model sets (trained once, stored, keyed)."""

    def __init__(self, config, splits, key, workdir):
        self.config, self.splits, self.key, self.workdir = config, splits, key, workdir
        self.cache = {}

    def spec(self, name):
        c = self.config
        gd = functools.partial(training.full_batch_gd, **c.train)
        arch, alg, extra = dict(c.model), gd(), {}
        primary = name in ("default",)
        if name == "wide":
            arch["hidden"] = c.wide_hidden
        elif name == "epochs250":
            alg = gd(epochs=c.long_epochs)
        elif name == "relu":
            arch["activation"] = "relu"
        elif name == "random_init":
            alg = gd(init="random")
        elif name in ("minibatch_known", "minibatch_unknown"):
            alg = training.minibatch_sgd(c.minibatch_size, learning_rate=c.minibatch_learning_rate,
                                         momentum=c.minibatch_momentum, epochs=c.train.epochs,
                                         shuffle="known" if name == "minibatch_known" else "fresh")
        elif name.startswith("dp_eps="):
            eps = float(name.split("=")[1])
            sigma = float(recon_jax.accounting.calibrate_sigma(eps, 1.0, c.train.epochs, c.dp_delta))
            alg = training.dp_gd(c.dp_clip_norm, noise_multiplier=sigma, **c.train)
            extra = {"eps": eps, "delta": c.dp_delta, "noise_multiplier": sigma, "clip_norm": c.dp_clip_norm}
        elif name != "default":
            raise ValueError(f"unknown model set {name!r}")
        fns = models.from_flax(models.balle_mnist_mlp(**arch))
        secondary = c.set_num_shadow.get(name, c.secondary_num_shadow)  # per-set override, else the common size
        num_shadow = c.num_shadow if primary else min(secondary, c.num_shadow)
        num_targets = c.num_targets if primary else min(c.secondary_num_targets, c.num_targets)
        probe = c.probe_size if primary and "logits" in c.settings else 0
        return fns, alg, arch, num_shadow, num_targets, probe, extra

    def get(self, name):
        if name in self.cache:
            return self.cache[name]
        c, sp = self.config, self.splits
        fns, alg, arch, num_shadow, num_targets, probe, extra = self.spec(name)
        set_key = jax.random.fold_in(self.key, _stable_id(name))  # independent draws (init, noise) per set
        p0 = None if alg.init == "random" else training.initial_params(fns, jax.random.fold_in(self.key, 0),
                                                                       sp.fixed_images)
        shuffle_key = jax.random.fold_in(set_key, 4) if alg.batch_size is not None and alg.shuffle == "known" \
            else None
        # Every argument of the model (**arch: the whole model section as this set uses it; hidden and activation
        # as before, so existing stores keep their names), the algorithm, the data split and the set's sizes.
        store = keyed_dir(self.config.store_dir or os.path.join(self.workdir, "shadow"), name.replace("=", "_"), {
            "set": name, "seed": c.seed, "dataset": c.dataset, "fixed_size": c.fixed_size,
            "pool_num_shadow": c.num_shadow, "pool_num_targets": c.num_targets, "eval_size": c.eval_size,
            "num_shadow": num_shadow, "num_targets": num_targets, "probe_size": probe, **arch,
            "algorithm": alg.describe()})
        ms = informed.train_model_sets(
            fns, alg, sp, set_key, init_params=p0, shuffle_key=shuffle_key,
            sizes=informed.ModelSetSizes(num_shadow=num_shadow, num_targets=num_targets, probe_size=probe),
            run=informed.RunOptions(store=store, chunk_size=c.chunk_size))
        for part in (ms.shadow.params, ms.released.params):
            for start in range(0, part.shape[0], 4096):  # in blocks: the store is memory-mapped
                require_finite(part[start:start + 4096], f"{name} shadow/released-model parameters",
                               "released-model learning rate too large for this setting?")
        self.cache[name] = (ms, store, extra)
        return self.cache[name]


def run(config, workdir: str) -> dict:
    """Runs the experiment; writes report.md, metrics.json, config.json and figures to ``workdir``."""
    check_config(config, CHECKS)  # before anything is written to workdir
    images, labels = recon_jax.data.load_dataset(config.dataset, "train+test")
    for fields in (("num_targets", "fixed_size", "num_shadow"), ("num_targets", "fixed_size", "eval_size")):
        check_fits(config, fields, len(images), f"records of {config.dataset!r} (train + test)")
    run_info = start_run(workdir, config, seed=config.seed)
    workdir = run_info.workdir
    t_start = time.time()
    c = config
    key = jax.random.key(c.seed)
    sp = recon_jax.data.pool_splits(images, labels, fixed_size=c.fixed_size, num_shadow=c.num_shadow,
                                    num_targets=c.num_targets, eval_size=c.eval_size, key_or_seed=c.seed)
    del images, labels
    settings = tuple(c.settings)
    sets = _Sets(c, sp, key, workdir)
    if c.sets_only:
        return _train_sets_only(c, sets, run_info)
    spec = informed.ReconstructorSpec(**c.reconstructor)

    # NN oracle over everything the adversary has (the pool), Fig. 3 order statistics.
    orc = informed.oracle_for(sp, c.num_targets, bins=80, max_mse=0.3)
    require_finite(orc.nn_mse, "NN-oracle MSEs")
    oracle_summary = {"mean_nn_mse": float(np.mean(orc.nn_mse)), "pool_size": int(len(sp.pool_images)),
                      "num_targets": int(c.num_targets), "paper_nn_mse": balle_mnist_report.PAPER_ORACLE_MSE,
                      "mean_percentile_mse": {f"p{int(q)}": float(v) for q, v in
                                              zip(np.asarray(orc.percentiles), np.asarray(orc.percentile_mse.mean(0)))}}

    classifier, classifier_acc = None, None
    if c.kl_classifier_epochs > 0:
        # Trained on pool records outside the fixed set (never an evaluation target).
        cx = sp.pool_images[np.isin(sp.pool_idx, sp.fixed_idx, invert=True)][: c.kl_classifier_size]
        cy = sp.pool_labels[np.isin(sp.pool_idx, sp.fixed_idx, invert=True)][: c.kl_classifier_size]
        net = models.lenet()
        variables = training.train_classifier(net, cx, cy, jax.random.fold_in(key, 5), epochs=c.kl_classifier_epochs,
                                     batch_size=128)
        classifier = jax.jit(functools.partial(net.apply, variables))
        classifier_acc = float(np.mean(np.argmax(np.asarray(classifier(sp.target_images)), -1) == sp.target_labels))

    def sub_oracle(n):
        return orc._replace(nn_mse=orc.nn_mse[:n], nn_index=orc.nn_index[:n], percentile_mse=orc.percentile_mse[:n])

    rows, results = [], {}

    def attack(setting, set_name, features="params", num_shadow=None, **extra):
        ms, store, set_extra = sets.get(set_name)
        n_targets = ms.released.count
        n = ms.shadow.count if num_shadow is None else num_shadow
        row_spec = dataclasses.replace(spec, validation_size=min(spec.validation_size, n // 10))
        ckpt = os.path.join(store, "reconstructor")
        res = informed.informed_attack(
            sp, ms, jax.random.fold_in(jax.random.fold_in(key, 3), _stable_id(setting)), oracle=sub_oracle(n_targets),
            features=features, reconstructor=row_spec, num_shadow=num_shadow, classifier_apply=classifier,
            checkpoint_dir=ckpt, name=setting)
        require_finite(res.mse, f"{setting} reconstruction MSEs", "reconstructor learning rate too large?")
        row = res.summary()
        p_mse, p_ok, p_src = paper_row(setting, c.fixed_size, res.num_shadow + res.num_validation)
        row.update(paper_mse=p_mse, paper_success=p_ok, paper_source=p_src,
                   agrees_with_paper=None if p_ok is None else bool(p_ok == res.row_success),
                   shadow_set=set_name, shadow_set_seconds=round(ms.seconds, 1), **set_extra, **extra)
        rows.append(row)
        results[setting] = res
        # Rows so far, rewritten after each one: a long run (the `gpu` variant) can be followed, and a run cut off
        # by a time limit still shows what it finished (never published as a result: publish() needs the end).
        atomic_write_json(os.path.join(workdir, "rows_partial.json"),
                          strict_json({"rows": rows, "elapsed_s": round(time.time() - t_start, 1)}))
        return res, row

    if "default" in settings:
        attack("default", "default")
    if "logits" in settings:
        attack("logits", "default", features="logits")
    if "width100" in settings:
        attack("width100", "wide")
    if "layer_subset" in settings:
        attack("layer_subset", "wide", features=tuple(c.layer_subset), layers=list(c.layer_subset),
               released_hidden=c.wide_hidden)
    shadow_curve = []
    if "default" in settings:
        d = results["default"]
        shadow_curve.append((d.num_shadow + d.num_validation, d.mean_mse))
    if "fewer_shadow" in settings:
        for k in (k for k in c.fewer_shadow_counts if k < c.num_shadow):
            res, _ = attack(f"fewer_shadow_{k}", "default", num_shadow=int(k))
            shadow_curve.append((int(k), res.mean_mse))
    for name in ("epochs250", "relu", "random_init", "minibatch_known", "minibatch_unknown"):
        if name in settings:
            attack(name, name)
    dp_points = []
    if "dp" in settings:
        eta = oracle_summary["mean_nn_mse"]
        prior = np.random.default_rng(c.seed).permutation(len(sp.pool_images))[:4000]  # random pool records
        kappa = float(oracle.estimate_kappa(sp.pool_images[prior], eta, sp.pool_labels[prior]))
        for eps in c.dp_eps:
            name = f"dp_eps={eps:g}"
            _, _, set_extra = sets.get(name)
            _, row = attack(name, name, kappa=kappa, eta=eta,
                            **_rero_bounds(kappa, set_extra["noise_multiplier"], c.train.epochs, c.dp_delta,
                                           c.dp_clip_norm, int(np.prod(sp.pool_images.shape[1:]))))
            row["success_at_eta"] = float(np.mean(results[name].mse <= eta))
            dp_points.append(row)

    mia_summary, mia_rows, panels = _informed_mia(c, sp, key) if c.mia_num_models > 0 else (None, [], {})
    figs = balle_mnist_report.figures(c, sp, orc, oracle_summary, results, rows, shadow_curve, dp_points, panels,
                                      workdir)

    total = wall_time(run_info)  # every segment's, when this run resumed what earlier processes stored
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss = {}
    if os.path.exists("/proc/self/status"):  # Linux: resident memory now, anonymous vs file-backed (memory maps)
        with open("/proc/self/status") as f:
            rss = {k: round(int(v.split()[0]) / 1024, 1) for k, v in (line.split(":", 1) for line in f)
                   if k in ("RssAnon", "RssFile")}
    metrics = {"variant": c.variant, "rows": rows, "oracle": oracle_summary, "mia": mia_summary,
               "mia_rows": mia_rows,
               "shadow_curve": [{"num_shadow_models": int(k), "mean_mse": float(m)} for k, m in shadow_curve],
               "classifier_accuracy": classifier_acc, "figures": {k: os.path.basename(v) for k, v in figs.items()},
               "peak_rss_mb": round(peak_mb, 1), "rss_at_end_mb": rss, "total_seconds": total.seconds,
               "total_segments": total.segments}
    if rows and rows[0]["setting"] == "default":
        metrics["mean_mse"] = rows[0]["mean_mse"]
        metrics["success_rate"] = rows[0]["success_rate"]
    report = balle_mnist_report.report(c, rows, oracle_summary, mia_summary, dp_points, classifier_acc, figs, total,
                                       peak_mb)
    result = finish_run(run_info, metrics, report,
                        balle_mnist_report.claims(c, results, rows, oracle_summary, np.asarray(orc.nn_mse),
                                                  shadow_curve, dp_points))
    print(report)
    return result


def set_names(c) -> list[str]:
    """The model sets the run's rows use, in the order the rows need them."""
    by_setting = {"default": "default", "logits": "default", "fewer_shadow": "default", "width100": "wide",
                  "layer_subset": "wide", "epochs250": "epochs250", "relu": "relu", "random_init": "random_init",
                  "minibatch_known": "minibatch_known", "minibatch_unknown": "minibatch_unknown"}
    order = ("default", "logits", "width100", "layer_subset", "fewer_shadow", "epochs250", "relu", "random_init",
             "minibatch_known", "minibatch_unknown")
    names = [by_setting[s] for s in order if s in c.settings]
    if "dp" in c.settings:
        names += [f"dp_eps={eps:g}" for eps in c.dp_eps]
    return list(dict.fromkeys(names))


def _train_sets_only(c, sets, run_info) -> dict:
    """``sets_only``: trains and stores every model set (in the order the rows need them) and stops. Run beside
    the full experiment with the same ``store_dir``, it trains the sets ahead while the other process trains
    reconstructors; the stores' writer lock makes whichever process comes second wait and load, never retrain."""
    seconds = {}
    for name in set_names(c):
        t0 = time.time()
        sets.get(name)
        seconds[name] = round(time.time() - t0, 1)
        print(f"model set {name}: {seconds[name]} s", flush=True)
    atomic_write_json(os.path.join(run_info.workdir, "sets_only.json"), {"set_seconds": seconds})
    return {"set_seconds": seconds}


def _informed_mia(c, sp, key):
    """Informed MIA, known vs random initialisation (App. A, Fig. 11), per fixed-set size and candidate."""
    mia_pool, mia_pool_y = sp.pool_images, sp.pool_labels  # D- = the first n pool records
    fns = models.from_flax(models.balle_mnist_mlp(**c.model))
    gd = functools.partial(training.full_batch_gd, **c.train)
    summary, rows, panels = {}, [], {}
    for n_fixed in c.mia_fixed_sizes:
        if n_fixed > len(mia_pool):
            raise ValueError(f"mia_fixed_sizes entry {n_fixed} exceeds the adversary pool ({len(mia_pool)} images)")
        fixed_m = (mia_pool[:n_fixed], mia_pool_y[:n_fixed])
        p0 = training.initial_params(fns, jax.random.fold_in(key, 0), fixed_m[0])
        for name, alg, init in (("known_init", gd(), p0), ("random_init", gd(init="random"), None)):
            aucs, accs = [], []
            for j in range(c.mia_num_candidates):
                cand = (sp.target_images[j], sp.target_labels[j])
                res = mia.informed_mia(fns, alg, fixed_m, cand, jax.random.fold_in(jax.random.fold_in(key, 7), j),
                                       num_shadow=c.mia_num_models, num_eval=c.mia_num_models, init_params=init,
                                       chunk_size=c.chunk_size)
                rows.append({"fixed_size": int(n_fixed), "initialisation": name, "candidate": j,
                             "accuracy": res.accuracy, "auc": res.auc, "shadow_accuracy": res.shadow_accuracy,
                             "num_models_per_phase": c.mia_num_models})
                aucs.append(res.auc)
                accs.append(res.accuracy)
                if j == 0:
                    sc = np.concatenate([res.shadow_scores, res.eval_scores])
                    lab = np.concatenate([res.shadow_labels, res.eval_labels])
                    panels[f"n={n_fixed}, {name} (AUC {res.auc:.3f})"] = (-sc[lab], -sc[~lab])
            summary[f"n={n_fixed}/{name}"] = {"fixed_size": int(n_fixed), "initialisation": name,
                                              "mean_auc": float(np.mean(aucs)), "min_auc": float(np.min(aucs)),
                                              "mean_accuracy": float(np.mean(accs)),
                                              "num_candidates": c.mia_num_candidates,
                                              "num_models_per_phase": c.mia_num_models}
    return summary, rows, panels


if __name__ == "__main__":
    launch(run, "experiments/configs/balle_mnist.py:default", "runs/balle_mnist")
