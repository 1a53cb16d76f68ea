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

from experiments import balle_figures
from experiments.common import (check_config, check_fits, claim, comparison, finish_run, is_vacuous, keyed_dir, launch,
                                paired_comparison, require_finite, start_run, student_t_half_width, wall_time)
from experiments.configs.balle_mnist import CHECKS
import recon_jax
from recon_jax import models, training
from recon_jax.attacks import informed, mia, oracle
from recon_jax.attacks.audit import clopper_pearson
from recon_jax.io import atomic_write_json, strict_json
from recon_jax.evidence import histogram_vs_reference, image_grid, markdown_table


PAPER_ORACLE_MSE = 0.0232  # Fig. 3a / Table II: mean NN-oracle MSE over 1K targets, 69K pool

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
                      "num_targets": int(c.num_targets), "paper_nn_mse": PAPER_ORACLE_MSE,
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
    figs = _figures(c, sp, orc, oracle_summary, results, rows, shadow_curve, dp_points, panels, workdir)

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
    report = _report(c, rows, oracle_summary, mia_summary, dp_points, classifier_acc, figs, total, peak_mb)
    result = finish_run(run_info, metrics, report, _claims(c, results, rows, oracle_summary,
                                                           np.asarray(orc.nn_mse), shadow_curve, dp_points))
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


def _vs_oracle(setting, res, success, alpha) -> dict:
    """Row ``setting`` against the NN oracle, like the paper's ✓ (mean MSE below the mean oracle MSE) or ✗
    (not below), decided by a one-sided paired t-test over the row's targets at ``alpha``."""
    return paired_comparison(f"{setting}: MSE - NN-oracle MSE", res.mse, res.oracle_mse, "<=" if success else ">=",
                             alpha=alpha)


def _interval_text(comp) -> str:
    lo, hi = comp["interval"]
    return "too few targets" if lo is None else f"[{lo:+.4f}, {hi:+.4f}]"


def _dp_comparisons(p, successes, alpha) -> list[dict]:
    """P[MSE <= eta] <= each ReRo bound that a success rate could exceed, by the Clopper-Pearson interval of the
    success count (two-sided 1 - 2 alpha); none when every bound is vacuous (>= 0.999) or beyond what the row's
    targets can refute (context, not a claim: see :func:`vacuous_dp_rows`)."""
    n = int(p["num_targets"])
    low, high = (float(v) for v in clopper_pearson(successes, n, 1.0 - 2.0 * alpha))
    comps = [comparison(f"P[MSE <= eta] vs the {route} ReRo bound", successes / n, "<=", p[key], interval=(low, high),
                        possible=(0.0, 1.0)) for route, key in (("GDP", "rero_bound_gdp"), ("RDP", "rero_bound_rdp"))]
    return [k for k in comps if not _cannot_fail(k["threshold"], n, alpha)]


def _cannot_fail(bound, n, alpha) -> bool:
    """Whether no success count over ``n`` targets can put its whole interval above ``bound``: the bound is vacuous
    (>= 0.999), or at least the interval's lower end with every target a success."""
    ceiling = float(clopper_pearson(n, n, 1.0 - 2.0 * alpha)[0])
    return is_vacuous(comparison("x", 0.0, "<=", bound, possible=(0.0, 1.0))) or bound >= ceiling


def vacuous_dp_rows(dp_points, alpha: float) -> list[str]:
    """DP rows whose ReRo bounds are all too close to 1 for a success rate over the row's targets to exceed, by its
    interval at two-sided 1 - 2 alpha (report context only)."""
    return [p["setting"] for p in dp_points
            if all(_cannot_fail(p[k], int(p["num_targets"]), alpha) for k in ("rero_bound_gdp", "rero_bound_rdp"))]


def _claims(c, results, rows, oracle_summary, nn_mse, shadow_curve, dp_points) -> list:
    """The paper findings this run checks, each only where the variant has the rows; comparative ones by paired
    tests over the targets at ``c.claim_alpha`` (fixed in the config)."""
    out = []
    alpha = float(c.claim_alpha)
    if "default" in results:
        d = results["default"]
        k = _vs_oracle("default", d, True, alpha)
        out.append(claim("default attack beats the NN oracle (Table II ✓)",
                         detail=f"mean MSE {d.mean_mse:.4f} vs mean oracle {d.mean_oracle_mse:.4f}; "
                                f"{100 * float(np.mean(d.success)):.0f}% of {len(d.mse)} targets below their own "
                                f"oracle; paired difference {k['value']:+.4f} {_interval_text(k)}",
                         comparisons=[k]))
    if "random_init" in results:
        r = results["random_init"]
        k = _vs_oracle("random_init", r, False, alpha)
        out.append(claim("random initialisation defeats the attack (Table II ✗)",
                         detail=f"mean MSE {r.mean_mse:.4f} vs mean oracle {r.mean_oracle_mse:.4f}; paired "
                                f"difference {k['value']:+.4f} {_interval_text(k)}", comparisons=[k]))
    if all(k in results for k in ("default", "logits", "layer_subset")):
        out.append(_ordering_claim([results[k] for k in ("default", "logits", "layer_subset")], alpha))
    if len(shadow_curve) > 1:
        curve = sorted(shadow_curve)
        ends = [results.get(f"fewer_shadow_{n}", results.get("default")) for n, _ in (curve[0], curve[-1])]
        k = paired_comparison(f"MSE with {curve[-1][0]} - with {curve[0][0]} shadow models", ends[1].mse, ends[0].mse,
                              "<=", alpha=alpha)
        out.append(claim("more shadow models help (Fig. 5c)",
                         detail=", ".join(f"{n} shadows: {v:.4f}" for n, v in curve) + f"; paired difference of "
                                f"the ends {k['value']:+.4f} {_interval_text(k)} (shadow models in all, the held-out "
                                "validation ones included; the table's num_shadow_models counts the training ones)",
                         comparisons=[k]))
    if oracle_summary["pool_size"] == 69000 and oracle_summary["num_targets"] == 1000:
        orc, tol = oracle_summary["mean_nn_mse"], float(c.oracle_within)
        nn = np.asarray(nn_mse, np.float64)
        half = student_t_half_width(float(nn.std(ddof=1)) / np.sqrt(nn.size), nn.size, alpha)
        rel = abs(orc - PAPER_ORACLE_MSE) / PAPER_ORACLE_MSE
        out.append(claim(f"NN oracle over the 69K pool within {100 * tol:g}% of the paper's {PAPER_ORACLE_MSE}",
                         detail=f"{orc:.4f} ({100 * rel:.1f}% off); {100 * (1 - 2 * alpha):g}% interval over the "
                                f"{nn.size} targets [{orc - half:.4f}, {orc + half:.4f}] vs "
                                f"[{PAPER_ORACLE_MSE * (1 - tol):.4f}, {PAPER_ORACLE_MSE * (1 + tol):.4f}]",
                         comparisons=[comparison("mean NN-oracle MSE", orc, relation,
                                                 PAPER_ORACLE_MSE * (1 + side * tol), interval=(orc - half, orc + half),
                                                 possible=(0.0, None)) for relation, side in ((">=", -1), ("<=", 1))]))
    for row in rows:
        if row["agrees_with_paper"] is not None and row["setting"] not in ("default", "random_init"):
            mark = "✓" if row["paper_success"] else "✗"
            k = _vs_oracle(row["setting"], results[row["setting"]], row["paper_success"], alpha)
            out.append(claim(f"{row['setting']}: {mark} as in the paper ({row['paper_source']})",
                             detail=f"mean MSE {row['mean_mse']:.4f} vs oracle {row['mean_oracle_mse']:.4f} on "
                                    f"{row['num_shadow_models']} shadow models; paired difference {k['value']:+.4f} "
                                    f"{_interval_text(k)}", comparisons=[k]))
    for p in dp_points:
        successes = int(np.sum(results[p["setting"]].mse <= p["eta"]))
        comps = _dp_comparisons(p, successes, alpha)
        if not comps:  # every bound >= 0.999: no success rate can exceed it (the report gives it as context)
            continue
        out.append(claim(f"{p['setting']}: attack success P[MSE <= eta] within the ReRo bound (Thm 2 / GDP)",
                         detail=f"measured {p['success_at_eta']:.3f} on {p['num_targets']} targets (Clopper-Pearson "
                                f"{100 * (1 - 2 * alpha):g}% upper end {comps[0]['interval'][1]:.3f}), GDP bound "
                                f"{p['rero_bound_gdp']:.3f}, RDP bound {p['rero_bound_rdp']:.3f}",
                         comparisons=comps))
    return out


def _secondary_sets_sentence(c, rows) -> str:
    """The sizes of the shadow sets other than the default one, named only when a row uses one."""
    outside = sorted({r["shadow_set"] for r in rows} - {"default"})
    if not outside:
        return "Every row uses the default shadow set."
    sizes = "".join(f" ({k}: {min(v, c.num_shadow)})" for k, v in sorted(c.set_num_shadow.items()) if k in outside)
    return (f"Rows outside the default shadow set ({', '.join(outside)}) use "
            f"{min(c.secondary_num_shadow, c.num_shadow)} shadow models{sizes} and "
            f"{min(c.secondary_num_targets, c.num_targets)} targets (the paper: 59,000 and 1,000); the "
            "`num_shadow_models` column gives each row's count.")


def _ordering_claim(res, alpha) -> dict:
    """Table II's default < logits < layer subset, compared like with like: equal shadow-model counts and a one-sided
    paired t-test per neighbouring pair on the targets all rows share. Holds when every pair's test (A below B)
    rejects at ``alpha``; fails when a reverse test (A above B) rejects at ``alpha`` / number of pairs (Bonferroni:
    any one pair reversed fails the chain); undecided otherwise, and when the shadow-model counts differ."""
    from scipy import stats

    name = "default < logits < layer subset (Table II 0.0094/0.0089 < 0.0110 < 0.0124)"
    means = " < ".join(f"{r.mean_mse:.4f}" for r in res)
    counts = [r.num_shadow for r in res]
    if len(set(counts)) > 1:
        return claim(name, False, f"mean MSE {means} on {counts} training shadow models (unequal sizes compare the "
                                  "shadow-set size, not the feature)", verdict="undecided")
    n = min(len(r.mse) for r in res)
    pairs = list(zip(res, res[1:]))
    less = [float(stats.ttest_rel(a.mse[:n], b.mse[:n], alternative="less").pvalue) for a, b in pairs]
    greater = [float(stats.ttest_rel(a.mse[:n], b.mse[:n], alternative="greater").pvalue) for a, b in pairs]
    verdict = ("holds" if all(p < alpha for p in less) else
               "fails" if any(p < alpha / len(pairs) for p in greater) else "undecided")
    return claim(name, verdict == "holds", f"mean MSE {means} on {counts[0]} shadow models each; one-sided paired "
                                           f"t-tests on {n} common targets: p = " + ", ".join(f"{p:.2g}" for p in less)
                 + " (the reverse: " + ", ".join(f"{p:.2g}" for p in greater) + f"; alpha {alpha:g})",
                 verdict=verdict)


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


def _figures(c, sp, orc, oracle_summary, results, rows, shadow_curve, dp_points, panels, workdir) -> dict:
    figs = {}
    if results:
        ncol = min(c.grid_columns, min(len(r.mse) for r in results.values()))
        grid = {"target": sp.target_images[:ncol]}
        grid.update({name: r.reconstructions[:ncol] for name, r in results.items()
                     if not name.startswith("fewer_shadow")})
        grid["NN oracle"] = sp.pool_images[np.asarray(orc.nn_index[:ncol])]
        figs["reconstructions"] = image_grid(
            grid, os.path.join(workdir, "reconstructions.png"), ncol,
            title="Balle et al. RecoNN on MNIST: targets | reconstructions | NN oracle")
    if "default" in results:
        d = results["default"]
        hist = {"RecoNN (default)": d.mse, "NN oracle": d.oracle_mse}
        if "random_init" in results:
            hist["random init"] = results["random_init"].mse
        figs["mse_histogram"] = histogram_vs_reference(hist, os.path.join(workdir, "mse_histogram.png"), "MSE",
                                                       "per-target MSE", log_x=True)
    markers = {"NN oracle (mean)": oracle_summary["mean_nn_mse"],
               **{f"{k} pct (mean)": v for k, v in oracle_summary["mean_percentile_mse"].items()}}
    if "default" in results:
        markers["RecoNN default (mean)"] = results["default"].mean_mse
    figs["oracle_histogram"] = balle_figures.oracle_histogram(orc.histogram, orc.bin_edges, markers,
                                                              os.path.join(workdir, "oracle_histogram.png"),
                                                              "Fig. 3: MSE of a target to the adversary's pool")
    if len(shadow_curve) > 1:
        k, m = zip(*sorted(shadow_curve))
        figs["mse_vs_shadow_models"] = balle_figures.mse_vs_shadow_models(
            k, m, os.path.join(workdir, "mse_vs_shadow_models.png"), {"NN oracle": oracle_summary["mean_nn_mse"]},
            "Fig. 5c: MSE vs number of shadow models")
    if dp_points:
        figs["dp_curve"] = balle_figures.dp_curve(
            [p["eps"] for p in dp_points], [p["mean_mse"] for p in dp_points],
            [p["released_test_accuracy"] for p in dp_points], os.path.join(workdir, "dp_curve.png"),
            oracle_mse=oracle_summary["mean_nn_mse"],
            nonprivate_mse=results["default"].mean_mse if "default" in results else None,
            success_rate=[p["success_at_eta"] for p in dp_points],
            rero_bound=[p["rero_bound_gdp"] for p in dp_points], title="Fig. 9: DP-GD")
    if panels:
        figs["mia_losses"] = balle_figures.mia_loss_histograms(panels, os.path.join(workdir, "mia_losses.png"))
    return figs


def _mark(v):
    return "—" if v is None else ("✓" if v else "✗")


def _report(c, rows, oracle_summary, mia_summary, dp_points, classifier_acc, figs, total, peak_mb) -> str:
    table_rows = [{"setting": "NN oracle", "mean_mse": oracle_summary["mean_nn_mse"],
                   "paper_mse": PAPER_ORACLE_MSE, "num_targets": oracle_summary["num_targets"]}]
    for r in rows:
        table_rows.append({**r, "ours": _mark(r["row_success"]), "paper": _mark(r["paper_success"])})
    cols = ["setting", "mean_mse", "paper_mse", "ours", "paper", "mean_oracle_mse", "success_rate", "mean_ssim",
            "mean_kl", "released_test_accuracy", "num_shadow_models", "num_targets", "feature_dim",
            "reconstructor_epochs", "seconds"]
    m, t, rec = c.model, c.train, c.reconstructor
    lines = [
        f"# Balle et al. informed-adversary reconstruction on MNIST ({c.variant})", "",
        f"MNIST train + test (70,000 records): {c.num_targets} evaluation targets, the other "
        f"{oracle_summary['pool_size']} records form the adversary's pool (NN oracle); fixed set {c.fixed_size}, "
        f"up to {c.num_shadow} shadow targets. Released model 784-{m.hidden}-10 ({m.activation}), full-batch GD "
        f"lr {t.learning_rate} momentum {t.momentum}, {t.epochs} epochs, known initialisation unless stated. "
        f"Reconstructor MLP {tuple(rec.hidden)}, MAE+MSE, RMSProp {rec.learning_rate}, batch {rec.batch_size}, at "
        f"most {rec.epochs} epochs" + (f", early stopping (patience {rec.patience})" if rec.patience else "")
        + f" on the validation MSE of the last {rec.validation_size} shadow models of each row (held out; "
        "a tenth of them for rows with fewer shadow models). " + _secondary_sets_sentence(c, rows), "",
        "Table II, MNIST column. `ours`/`paper`: ✓ when the mean reconstruction MSE is below the mean NN-oracle "
        "MSE (the paper's criterion, Sec. V-B d); `success_rate`: fraction of targets whose reconstruction is "
        "closer than their own nearest pool record. Paper values are for the same setting (fixed set 10K "
        "except the default row at 1K); `—`: the paper gives a figure, no number or mark.", "",
        markdown_table(table_rows, cols), "",
        "Sources of the paper values: " + "; ".join(f"{r['setting']}: {r['paper_source']}" for r in rows) + ".", "",
        f"NN oracle over the pool ({oracle_summary['pool_size']} records): mean NN MSE "
        f"{oracle_summary['mean_nn_mse']:.4f} (paper {PAPER_ORACLE_MSE} with a 69K pool); mean percentiles "
        + ", ".join(f"{k} {v:.4f}" for k, v in oracle_summary["mean_percentile_mse"].items()) + ".",
    ]
    if classifier_acc is not None:
        lines.append(f"KL metric classifier: LeNet trained on up to {c.kl_classifier_size} pool records outside "
                     f"the fixed set, accuracy {classifier_acc:.3f} on the evaluation targets.")
    if mia_summary:
        lines += ["", f"Informed MIA (App. A, Fig. 11): loss threshold fitted on {c.mia_num_models} shadow models, "
                  f"scored on {c.mia_num_models} released models, first {c.mia_num_candidates} evaluation targets as "
                  f"candidates, fixed sets of {', '.join(str(n) for n in c.mia_fixed_sizes)}:", "",
                  markdown_table(list(mia_summary.values()), ["fixed_size", "initialisation", "mean_auc", "min_auc",
                                                              "mean_accuracy", "num_candidates",
                                                              "num_models_per_phase"])]
    if dp_points:
        lines += ["", f"DP-GD rows: clip {c.dp_clip_norm}, noise multiplier calibrated with "
                  f"`recon_jax.accounting.calibrate_sigma` (q = 1, {t.epochs} steps, delta {c.dp_delta}), "
                  "independent noise per eps. ReRo: empirical prior = uniform over 4,000 random pool records, kappa from "
                  "`oracle.estimate_kappa` (guesses: the records, their mean and class means), "
                  f"eta = mean NN-oracle MSE {dp_points[0]['eta']:.4f}, kappa = {dp_points[0]['kappa']:.4g}; "
                  "bounds on P[MSE <= eta] from Thm 2 over the RDP curve and from mu-GDP (mu = sqrt(T)/sigma):", "",
                  markdown_table(dp_points, ["setting", "eps", "noise_multiplier", "mean_mse", "success_at_eta",
                                             "rero_bound_rdp", "rero_bound_gdp", "released_test_accuracy"])]
        vacuous = vacuous_dp_rows(dp_points, float(c.claim_alpha))
        if vacuous:
            lines += ["", f"Context, not claimed: at {', '.join(vacuous)} both ReRo bounds are >= 0.999 or too close "
                          "to 1 for the targets to refute (even all of them below eta), so 'within the bound' cannot "
                          "fail there."]
    lines += ["", "Figures: " + ", ".join(f"`{os.path.basename(v)}`" for v in figs.values()), "",
              f"Total time {total.text()}; peak resident memory {peak_mb:.0f} MB"
              f"{' (last segment)' if total.segments > 1 else ''} (includes memory-mapped shadow-store pages, which "
              "the OS can reclaim)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    launch(run, "experiments/configs/balle_mnist.py:default", "runs/balle_mnist")
