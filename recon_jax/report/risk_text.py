"""The risk report's text: report.md (what was run, bound vs attack per threat model, empirical epsilon, the
theorems' guarantees, calibration, interpretation) and the claims it checks, from the metrics of
:func:`recon_jax.report.risk_report.run`."""

from __future__ import annotations

from recon_jax.report.evidence import claim
from recon_jax.report.markdown import markdown_table

__all__ = ["claims", "report_markdown", "header_lines", "calibration_sentence", "interpretation"]


def _separation_sentence(upd) -> str:
    """The measured separation behind the gap between the prior-aware attack and its bound (empty if absent)."""
    rows = [u for u in upd if u.get("separation_retained_mean") is not None]
    if not rows:
        return ""
    k = 10 if any(u["prior_size"] == 10 for u in rows) else rows[0]["prior_size"]
    parts = [f"{u['setting']}: {u['separation_retained_mean']:.2f} (10% of pairs below "
             f"{u['separation_retained_p10']:.2f})" for u in rows if u["prior_size"] == k]
    return ("Measured along the games' trajectories (column `separation kept`): the squared distance between the "
            "target's and another candidate's clipped-gradient sequences, in noise units, is on average this "
            "fraction of the worst case's 2T/sigma^2 (the squared mu of that pair's likelihood-ratio test; 1 for "
            f"orthogonal full-norm gradients) at k = {k}: " + "; ".join(parts) + ". ")


def claims(config, result) -> list[dict]:
    """The findings the report checks (:func:`recon_jax.report.evidence.claim`), each only where the run has its
    rows: the informed attack without DP, prior-aware success within its bound and its ratio to it at k = 10, the
    final-model success within its bound, and the empirical epsilon against the accountant's.

    >>> row = {"noise_multiplier": 0, "success_rate": 0.6, "success_rate_ci": [0.5, 0.7], "num_targets": 100}
    >>> [c["holds"] for c in claims(None, {"rows": [row], "prior_aware": []})]
    [True]
    """
    rows, upd = result["rows"], result["prior_aware"]
    out = []
    np_rows = [r for r in rows if r["noise_multiplier"] == 0]
    if np_rows:
        r = np_rows[0]
        out.append(claim("without DP the informed attack beats the NN oracle on most targets (Balle et al.)",
                         r["success_rate"] > 0.5,
                         f"success {r['success_rate']:.3f} (95% CI {r['success_rate_ci'][0]:.3f}-"
                         f"{r['success_rate_ci'][1]:.3f}) over {r['num_targets']} targets"))
    if upd:
        over = [u for u in upd if u["prior_aware_ci"][0] > u["prior_aware_bound"]]
        worst = max(upd, key=lambda u: u["prior_aware_ci"][0] - u["prior_aware_bound"])
        out.append(claim("every prior-aware success lies below its ReRo bound within its 95% interval (Hayes et al.)",
                         not over, f"{len(upd) - len(over)} of {len(upd)} (setting, k) pairs; closest: "
                                   f"{worst['setting']} k={worst['prior_size']}: CI low "
                                   f"{worst['prior_aware_ci'][0]:.3f} vs bound {worst['prior_aware_bound']:.3f}"))
        at10 = [u for u in upd if u["prior_size"] == 10]
        if at10:
            out.append(claim("the prior-aware attack reaches >= 0.75 of the ReRo bound at kappa = 1/10 (Hayes et al.)",
                             all(u["success_over_bound"] >= 0.75 for u in at10),
                             "; ".join(f"{u['setting']}: {u['prior_aware_success']:.3f} / {u['prior_aware_bound']:.3f}"
                                       f" = {u['success_over_bound']:.2f}" for u in at10)))
    fin = [r for r in rows if r.get("bound_at_eta") is not None]
    if fin:
        over = [r["setting"] for r in fin if r["success_at_eta_ci"][0] > r["bound_at_eta"]]
        out.append(claim("every final-model success P[MSE <= eta] lies below its ReRo bound within its 95% interval "
                         "(bound at the estimated kappa(eta), approximate)", not over,
                         "; ".join(f"{r['setting']}: CI [{r['success_at_eta_ci'][0]:.3f}, {r['success_at_eta_ci'][1]:.3f}]"
                                   f" vs bound {r['bound_at_eta']:.3f}" for r in fin)))
    dp = [r for r in rows if "empirical_eps" in r]
    if dp:
        out.append(claim("the empirical epsilon never exceeds the accountant's epsilon",
                         all(r["empirical_eps"] <= min(r["eps_rdp"], r["eps_pld"]) for r in dp),
                         "; ".join(f"{r['setting']}: {r['empirical_eps']:.3f} vs PLD {r['eps_pld']:.3g}" for r in dp)))
        low = [r for r in dp if r["eps_pld"] <= 10]
        if low:
            out.append(claim("the empirical epsilon reaches half the accountant's epsilon where eps <= 10",
                             all(r["empirical_eps"] >= 0.5 * r["eps_pld"] for r in low),
                             "; ".join(f"{r['setting']}: {r['empirical_eps']:.3f} vs PLD {r['eps_pld']:.3g} (perfect "
                                       f"canary, same runs: {_fmt(r.get('ideal_gaussian_audit_eps'))})" for r in low)))
    return out


def _fmt(v, digits=3):
    return "n/a" if v is None else f"{v:.{digits}g}"


def _model_description(config, num_params) -> str:
    if config.model == "balle_mnist_mlp":
        return f"Balle et al.'s MLP (hidden {config.hidden}, {config.activation}, {num_params} parameters)"
    return f"`{config.model}` ({num_params} parameters)"


def report_markdown(config, result, s, num_params, q, steps, recon_name="MLP 2x1000") -> str:
    """report.md of a run: what was run, attack results (final model released), bound vs attack per threat
    model, empirical epsilon, the theorems' guarantees, calibration and interpretation (before the Claims
    section that :func:`recon_jax.report.evidence.finish_run` appends)."""
    rows = result["rows"]
    eta, kappa_eta = result["eta_mse"], result["kappa_at_eta"]
    conf = f"{100 * config.confidence:g}%"
    attack_cols = ["setting", "test_accuracy", "eps_rdp", "eps_pld", "mean_mse", "mean_oracle_mse", "success_rate",
                   "success_at_eta", "mean_psnr", "mean_ssim", "mean_ncc"]
    changed = result.get("overrides") or {}
    text = [f"# Reconstruction-risk report ({config.dataset}, variant `{config.variant}`"
            f"{f' with {len(changed)} override' + 's' * (len(changed) > 1) if changed else ''})", "",
            header_lines(config, changed, result.get("split")), ""]
    text += ["## What was run", "",
             f"- Released model: {_model_description(config, num_params)}, "
             f"{'full-batch gradient descent' if config.batch_size is None else f'minibatch SGD (batch {config.batch_size})'}"
             f" with momentum {config.momentum}, learning rate {config.learning_rate}, {config.epochs} epochs, "
             f"on a fixed set D- of {config.fixed_size} records plus one target. DP settings: clip norm "
             f"{config.clip_norm}, delta {config.delta}, accounted as {steps} Gaussian steps at sampling rate "
             f"q = {q:.4g} per model. Every setting draws its own noise (independent keys).",
             f"- Threat model (a), final model released (Balle et al. 2022, informed adversary): knows D-, the "
             f"training algorithm and the initialisation; trains {config.num_shadow} shadow models and a "
             f"reconstructor network ({recon_name}) on their parameters.",
             f"- Evaluation of (a): {config.num_targets} released models, one per target. Success = reconstruction "
             f"closer (MSE) to the target than the nearest record the adversary already knows (NN oracle). For the "
             f"bounds, success also means MSE <= eta = {eta:.4g} (the median oracle MSE); the prior's chance of that "
             f"is kappa = {kappa_eta:.4g} (`estimate_kappa`: best oblivious guess among the adversary's records, "
             f"their mean and class means; a lower estimate, so bounds at it are approximate).",
             f"- Threat model (b), every update released (Hayes, Mahloujifar & Balle 2023, prior-aware adversary): "
             f"knows D-, the initialisation and every noisy clipped gradient sum; the target is drawn uniformly from "
             f"k candidate records (random test records, not in D-; kappa = 1/k, k in {list(config.prior_sizes)}); it "
             f"guesses the candidate whose clipped gradients best explain the observed updates (Gaussian likelihood"
             f"{'' if q == 1.0 else ', mixture over the Poisson inclusion of the target'}; Bayes-optimal for this "
             f"prior). {config.prior_aware_trials} games per DP setting, the prior sizes sharing them. The game runs "
             f"the accounted mechanism: {steps} steps of the Gaussian mechanism at rate q = {q:.4g}"
             f"{'' if q == 1.0 else ' (Poisson sampling of D- and the target; the adversary knows which D- records were drawn)'}.",
             f"- Rates carry {conf} Clopper-Pearson intervals.", ""]
    if config.batch_size is not None:
        text.insert(-1, "- Batch order: " + (
            "secret and fresh for every model (the adversary's shadow models use their own random orders); the "
            "accounting treats each step as Poisson-subsampled at rate q, the usual DP-SGD analysis, which is "
            "proven for Poisson sampling and common practice for shuffled batches."
            if config.shuffle == "fresh" else
            "known to the adversary (shared by every model); it knows which step of each epoch used the target, "
            "so the accounting applies no subsampling amplification (q = 1, one step per epoch)."))
    text += ["## Attack results (final model released)", "", markdown_table(rows, attack_cols), "",
             "![targets, reconstructions and NN oracle](reconstructions.png)", ""]
    dp_rows = [r for r in rows if "bounds" in r]
    upd = result["prior_aware"]
    if dp_rows:
        text += ["## Bound vs attack, per threat model", "",
                 "Each bound applies to its own threat model and is in that attack's units (probability of a "
                 "successful reconstruction at the same prior). Bound = the tightest applicable route (trade-off "
                 "curve: GDP for full batches, PLD for q < 1; RDP curve; zCDP).", "",
                 "**(a) Final model released** (RecoNN; success = MSE <= eta; bound at kappa(eta), approximate):", ""]
        frows = [{"setting": r["setting"], "P[MSE<=eta]": r["success_at_eta"],
                  f"{conf} CI": f"[{r['success_at_eta_ci'][0]:.3f}, {r['success_at_eta_ci'][1]:.3f}]",
                  "beats oracle": r["success_rate"],
                  "ReRo bound": r.get("bound_at_eta")} for r in dp_rows]
        text += [markdown_table(frows), "",
                 "**(b) Every update released** (prior-aware attack; success = exact identification of the target "
                 "among k candidates):", ""]
        urows = [{"setting": u["setting"], "k": u["prior_size"], "success": u["prior_aware_success"],
                  f"{conf} CI": f"[{u['prior_aware_ci'][0]:.3f}, {u['prior_aware_ci'][1]:.3f}]",
                  "ReRo bound": u["prior_aware_bound"], "route": u["bound_route"].replace("rero_", ""),
                  "success / bound": u["success_over_bound"],
                  "orthogonal optimum / bound": u.get("orthogonal_optimum_over_bound"),
                  "separation kept": u.get("separation_retained_mean")} for u in upd]
        geo = result["candidate_gradient_geometry"]
        text += [markdown_table(urows), "",
                 "The bound is attained only by the worst-case prior: candidates whose clipped gradients are "
                 "orthogonal and at full norm C at every step; even then the optimal k-ary guess reaches the "
                 "fraction of the bound in the column `orthogonal optimum / bound` (full batch). Random records are "
                 "not that prior: at the "
                 f"initialisation the clipped gradients of one trial's candidates have mean absolute pairwise cosine "
                 f"{geo['mean_abs_cosine']:.3f} (largest {geo['max_abs_cosine']:.3f}) and "
                 f"{100 * geo['share_at_clip_norm']:.0f}% of them are at the clip norm; as training proceeds the "
                 "gradients of records the model fits shrink below C and those of similar records align, which "
                 "leaves less signal per step than the worst case, so the measured success sits further below the "
                 "bound. " + _separation_sentence(upd) + "Intervals from a few hundred games are wide: compare the "
                 "bound with the interval, not the point.", "",
                 "![bound vs attack per threat model](bounds_vs_attack.png)", ""]
        erows = [{"setting": r["setting"], "eps_rdp": r["eps_rdp"], "eps_pld": r["eps_pld"],
                  "empirical_eps": r["empirical_eps"], "FPR": r["audit_fpr"], "FNR": r["audit_fnr"],
                  "perfect canary, same runs": r.get("ideal_gaussian_audit_eps")} for r in dp_rows]
        text += ["## Empirical epsilon", "",
                 f"Method: a distinguishing game on the released mechanism (white-box: every update visible). "
                 f"{config.audit_runs} runs with a canary (a test record with a wrong label, whose gradient stays "
                 f"large) and {config.audit_runs} without; the adversary's score is the log-likelihood ratio of all "
                 f"updates. Half of each world's runs choose a threshold; on the other half, one-sided "
                 f"Clopper-Pearson upper bounds on FPR and FNR (union bound: jointly {conf}) give "
                 f"eps >= max(log((1 - delta - FPR)/FNR), log((1 - delta - FNR)/FPR)) at delta = {config.delta}. "
                 f"Assumptions: independent runs; canary and threshold fixed before the evaluation runs. A lower "
                 f"bound from n evaluation runs per world cannot exceed about log(n/3), whatever the mechanism: the "
                 f"last column is the same audit on the exact statistic of a perfect (orthogonal, full-norm) canary "
                 f"with the same number of runs.", "", markdown_table(erows), ""]
        text += ["## What the theorems guarantee", "",
                 "ReRo = upper bound on the probability that *any* attack reconstructs a record (here: MSE <= eta), "
                 "given a prior success probability kappa. Routes: RDP curve and zCDP (optimal RDP-to-trade-off "
                 "conversion, tighter than Balle et al. Thm 2 and Cor. 4), hypothesis testing (Hayes et al. 2023: "
                 "`rero_gdp`, the GDP closed form, for full batches; `rero_pld`, the trade-off curve of the "
                 "subsampled Gaussian's privacy-loss distribution, for q < 1), eps-DP (both branches of its "
                 "trade-off curve).", ""]
        brows = []
        for r in dp_rows:
            for rr in r["bounds"]["rero"]:
                brows.append({"setting": r["setting"], "eps_rdp": r["eps_rdp"], **rr})
        route = "rero_gdp" if result["sample_rate"] == 1.0 else "rero_pld"
        text += [markdown_table(brows, ["setting", "eps_rdp", "kappa", route, "rero_rdp", "rero_zcdp", "rero_dp"]),
                 ""]
        zrows = [{"setting": r["setting"],
                  "expected MSE >= (clip-norm units)": r["bounds"]["ziller_mse_lower_bound"],
                  "PSNR <= (dB, clip-norm range)": r["bounds"]["ziller_psnr_upper_bound"],
                  "NCC <=": r["bounds"]["ziller_ncc_upper_bound"],
                  "log Bayes capacity": r["bounds"]["log_bayes_capacity"]} for r in dp_rows]
        text += ["Prior-free bounds of Ziller et al. hold in *their* threat model only: the adversary observes the T "
                 "noisy clipped gradients of a linear layer, whose gradient is the (clipped) record itself. MSE and "
                 "PSNR are therefore in units of the clip norm (records scaled to norm <= C), not comparable with the "
                 "image-space MSEs above; NCC is scale-free. The log Bayes' capacity is that of one Gaussian release "
                 "at the effective noise sigma/sqrt(T) over the model's parameters (Biswas et al. Thm 5; larger "
                 "means more leakage, compare across settings).", "", markdown_table(zrows), ""]
        text += ["Accounting: add/remove-one adjacency with sensitivity C, as in the ReRo argument (training with "
                 "vs without the target).", ""]
    cal = result["calibration"]
    if cal is not None:
        text += ["## Calibration to a risk target", "", calibration_sentence(cal, rows), ""]
    text += ["## Interpretation", "", interpretation(rows, kappa_eta, config), "",
             f"Runtime: {result['runtime_seconds'] / 60:.1f} min "
             f"({', '.join(f'{k} {v:.0f} s' for k, v in result['timings_seconds'].items())}). "
             f"Config: `config.json`; numbers: `metrics.json`."]
    return "\n".join(text) + "\n"


def header_lines(config, changed: dict, split: dict | None) -> str:
    """The report's first lines: the variant and the overrides that made this run, and the data split.

    >>> print(header_lines(type("C", (), {"variant": "default"})(), {"noise_multipliers": [1.0]}, None))
    - Config: the `default` variant with overrides `noise_multipliers=(1.0,)`.
    """
    def show(v):
        if isinstance(v, (list, tuple)):
            return "(" + ", ".join(show(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        return repr(v) if isinstance(v, str) else str(v)

    over = ", ".join(f"`{k}={show(v)}`" for k, v in changed.items())
    lines = [f"- Config: the `{config.variant}` variant " + (f"with overrides {over}." if changed else
                                                             "as shipped (no overrides).")]
    if split is not None:
        lines.append(f"- Data: {split['sentence']}.")
    return "\n".join(lines)


def calibration_sentence(cal, rows) -> str:
    """The answer to the inverse question: the noise a risk target needs, and the accuracy it costs.

    >>> cal = {"rero": 0.05, "kappa": 0.01, "steps": 100, "sample_rate": 1.0, "noise_multiplier": 30.0,
    ...        "test_accuracy": None, "models": 0}
    >>> calibration_sentence(cal, [])[-42:]
    'No finite noise level reaches that target.'
    """
    head = (f"To keep any attacker's success below {100 * cal['rero']:g}% at a {100 * cal['kappa']:g}% prior "
            f"(ReRo bound, {cal['steps']} steps at q = {cal['sample_rate']:.4g}) you need sigma >= "
            f"{cal['noise_multiplier']:.4g} (`calibrate_sigma_for_rero`).")
    if cal["test_accuracy"] is None:
        return head + " No finite noise level reaches that target."
    base = [r for r in rows if r["noise_multiplier"] == 0]
    cost = (f" Without DP the released models reach {100 * base[0]['test_accuracy']:.1f}%." if base else "")
    return (head + f" Trained at that sigma, {cal['models']} released models reach a mean test accuracy of "
            f"{100 * cal['test_accuracy']:.1f}%." + cost)


def interpretation(rows, kappa_eta, config=None) -> str:
    """The report's plain-language reading of the rows (attack without DP, bound and attack under DP).

    >>> interpretation([{"noise_multiplier": 0, "success_rate": 0.8, "mean_mse": 0.02, "mean_oracle_mse": 0.03}],
    ...                0.1)[:56]
    'Without DP, an informed adversary can reconstruct traini'
    """
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
    dp = [r for r in rows if r["noise_multiplier"] > 0 and r.get("bound_at_eta") is not None]
    if dp:
        best = max(dp, key=lambda r: r["noise_multiplier"])
        lines.append(f"With DP (sigma={best['noise_multiplier']:g}, eps={best['eps_rdp']:.3g}, test accuracy "
                     f"{100 * best['test_accuracy']:.1f}%), the attack on the final model beats the oracle on "
                     f"{100 * best['success_rate']:.0f}% of targets, and theory caps any attack's chance of an MSE "
                     f"below eta at {100 * best['bound_at_eta']:.1f}% (prior {100 * kappa_eta:.1f}%).")
        over = [r["setting"] for r in dp if r["success_at_eta_ci"][0] > r["bound_at_eta"]]
        if over:
            lines.append(f"Measured success exceeds the bound beyond its interval in {', '.join(over)}: kappa is "
                         f"underestimated there (the best oblivious guess lies outside the guesses tried); treat that "
                         f"bound as approximate.")
        lines.append("The final-model attack sees far less than the bounds allow (one model, not every update); the "
                     "prior-aware attack on every update shows how close to the bound an adversary of the bounds' "
                     "own threat model gets.")
    return " ".join(lines) if lines else "No settings were run."
