"""The report of :mod:`experiments.balle_mnist`: report.md's text, the claims (paired tests over the targets, the
DP rows against their ReRo bounds) and the figures (drawn with :mod:`experiments.balle_figures` and
:mod:`recon_jax.evidence`); with the paper's mean NN-oracle MSE, which the run also writes to metrics.json.
"""

from __future__ import annotations

import os

import numpy as np

from experiments import balle_figures
from experiments.common import claim, comparison, is_vacuous, paired_comparison, student_t_half_width
from recon_jax.attacks.audit import clopper_pearson
from recon_jax.evidence import histogram_vs_reference, image_grid, markdown_table


PAPER_ORACLE_MSE = 0.0232  # Fig. 3a / Table II: mean NN-oracle MSE over 1K targets, 69K pool


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


def claims(c, results, rows, oracle_summary, nn_mse, shadow_curve, dp_points) -> list:
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


def figures(c, sp, orc, oracle_summary, results, rows, shadow_curve, dp_points, panels, workdir) -> dict:
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


def report(c, rows, oracle_summary, mia_summary, dp_points, classifier_acc, figs, total, peak_mb) -> str:
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
