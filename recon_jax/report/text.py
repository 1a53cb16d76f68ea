"""The risk report's text: report.md (what was run, bound vs attack per threat model, empirical epsilon, the
theorems' guarantees, calibration, interpretation) and the claims it checks, from the metrics of
:func:`recon_jax.report.app.run`."""

from __future__ import annotations

from recon_jax.attacks.audit import SELECTION_CONFIDENCE
from recon_jax.evidence.claims import claim, comparison, is_vacuous
from recon_jax.evidence.markdown import markdown_table
from recon_jax.report.reading import (TERMS, above_accountant_note, bottom_line, calibration_sentence, interpretation,
                                     not_learned_note)
from recon_jax.report.updates import VACUOUS_BOUND, reach_prior_sizes

__all__ = ["claims", "decidability_banner", "report_markdown", "header_lines", "NOT_PRIVATE", "shown_rows"]


def _separation_sentence(upd) -> str:
    """The measured separation behind the gap between the prior-aware attack and its bound (empty if absent)."""
    rows = [u for u in upd if u.get("separation_retained_p10") is not None]
    if not rows:
        return ""
    k = 10 if any(u["prior_size"] == 10 for u in rows) else rows[0]["prior_size"]
    parts = [f"{u['setting']}: {u['separation_retained_mean']:.2f} (10% of pairs below "
             f"{u['separation_retained_p10']:.2f})" for u in rows if u["prior_size"] == k]
    return ("Measured along the record games' trajectories: the squared distance between the target's and another "
            "candidate's clipped-gradient sequences, in noise units, is on average this fraction of orthogonal "
            "full-norm gradients' 2T/sigma^2 (the squared mu of that pair's likelihood-ratio test; a simplex of "
            f"canaries has k/(k-1)) at k = {k}: " + "; ".join(parts) + ". ")


def _vacuous_note(cells) -> str:
    """The cells left out of a within-bound claim because their bound cannot be missed (context, not claims)."""
    return (f". Context, not claimed (ReRo bound >= {VACUOUS_BOUND:g}, which no success can exceed): "
            + ", ".join(cells)) if cells else ""


def _cell(u) -> str:
    return f"{u['setting']} k={u['prior_size']}"


def _lowest_reachable(trials, confidence) -> float:
    """The largest lower end the Clopper-Pearson interval of a success rate over ``trials`` games can have (every
    game won): a bound at or above it cannot be failed by that many games, whatever the attack does."""
    from recon_jax.attacks.audit import clopper_pearson

    return float(clopper_pearson(int(trials), int(trials), confidence)[0])


def _too_few_note(cells) -> str:
    """The cells left out of a within-bound claim because their games are too few to fail it (context, not claims)."""
    return (". Context, not claimed (too few games: even winning every one, the interval's lower end would not "
            "exceed the bound): " + ", ".join(cells)) if cells else ""


def _above_bound(upd) -> list[str]:
    """Every (setting, k, candidates) cell whose measured success exceeds its bound, with its binomial p-value."""
    return [f"{_cell(u)} {u['candidates']}: {u['prior_aware_success']:.3f} vs bound {u['prior_aware_bound']:.3g} "
            f"(binomial p = {u['p_value_above_bound']:.2g})"
            for u in upd if u["prior_aware_success"] > u["prior_aware_bound"]]


def claims(config, result) -> list[dict]:
    """The findings the report checks, each with a verdict (holds / fails / undecided) from its comparisons
    (:func:`recon_jax.evidence.claims.comparison`), each only where the run has its rows and where it can fail
    (cells whose ReRo bound is >= 0.999, or at least the lower end of the success rate's interval with every game
    won, are context, not claims): the informed attack without DP; crafted-canary prior-aware success within its
    bound and reaching it; the final-model success within its bound; no audit above the accountant's epsilon; and
    the Gaussian-DP and one-run audits reaching their fractions of it where eps <= 10.
    Thresholds and tolerances come from the config, fixed before the run.

    >>> from recon_jax.report.config import get_config
    >>> row = {"noise_multiplier": 0, "success_rate": 0.6, "success_rate_ci": [0.5, 0.7], "num_targets": 100}
    >>> [c["verdict"] for c in claims(get_config("smoke"), {"rows": [row], "prior_aware": []})]
    ['holds']
    """
    rows, upd = result["rows"], result["prior_aware"]
    tol = config.bound_tolerance
    level = f"{100 * config.confidence:g}%"  # each interval's level, as computed (Clopper-Pearson, two-sided)
    out = []
    np_rows = [r for r in rows if r["noise_multiplier"] == 0]
    if np_rows:
        r = np_rows[0]
        out.append(claim("without DP the informed attack beats the NN oracle on most targets (Balle et al.)",
                         detail=f"success {r['success_rate']:.3f} ({level} CI {r['success_rate_ci'][0]:.3f}-"
                                f"{r['success_rate_ci'][1]:.3f}) over {r['num_targets']} targets vs 0.5",
                         comparisons=[comparison("non-private: share of targets where the attack beats the oracle",
                                                 r["success_rate"], ">=", 0.5, interval=r["success_rate_ci"],
                                                 possible=(0, 1))]))
    crafted = [u for u in upd if u["candidates"] != "records" and u["prior_aware_bound"] < VACUOUS_BOUND]
    # A cell whose games are too few for the interval's lower end to pass the bound cannot fail "within the bound"
    # (at a bound of 0.994, 512 games won out of 512 leave a lower end of 0.993): context, like a bound of ~1.
    within = [u for u in crafted if _lowest_reachable(u["trials"], config.confidence) > u["prior_aware_bound"]]
    if within:
        comps = [comparison(f"{_cell(u)}: success", u["prior_aware_success"], "<=", u["prior_aware_bound"],
                            interval=u["prior_aware_ci"], tolerance=tol * u["prior_aware_bound"], possible=(0, 1))
                 for u in within]
        above = _above_bound(upd)
        out.append(claim(
            f"every crafted-canary prior-aware success lies within its ReRo bound (Hayes et al.; holds: {level} "
            f"interval below {1 + tol:g} x the bound, fails: above the bound)", comparisons=comps,
            detail="; ".join(f"{_cell(u)}: {u['prior_aware_success']:.3f} [{u['prior_aware_ci'][0]:.3f}, "
                             f"{u['prior_aware_ci'][1]:.3f}] vs {u['prior_aware_bound']:.3g} ({c['verdict']})"
                             for u, c in zip(within, comps))
            + ". Cells above their bound: " + ("; ".join(above) if above else "none") + _vacuous_note(
                [_cell(u) for u in upd if u["candidates"] != "records" and u["prior_aware_bound"] >= VACUOUS_BOUND])
            + _too_few_note([f"{_cell(u)} ({u['trials']} games, lower end at most "
                             f"{_lowest_reachable(u['trials'], config.confidence):.4f} vs bound "
                             f"{u['prior_aware_bound']:.4f})" for u in crafted if u not in within])))
    if crafted:
        reach = [u for u in crafted if u["prior_size"] in reach_prior_sizes(config)]
        if reach:
            comps = [comparison(f"{_cell(u)}: success / bound", u["success_over_bound"], ">=", config.crafted_reach,
                                interval=u["success_over_bound_ci"], possible=(0, 1 / u["prior_aware_bound"]))
                     for u in reach]
            out.append(claim(
                f"crafted canaries reach the ReRo bound: the {level} interval of success / bound lies above "
                f"{config.crafted_reach:g} at k <= 10 (Hayes et al.)", comparisons=comps,
                detail="; ".join(f"{_cell(u)}: {u['success_over_bound']:.3f} [{u['success_over_bound_ci'][0]:.3f}, "
                                 f"{u['success_over_bound_ci'][1]:.3f}] over {u['trials']} games (exact optimum "
                                 f"{_fmt(u.get('exact_optimum_over_bound'))})" for u in reach)))
    fin = [r for r in rows if r.get("bound_at_eta") is not None and r["bound_at_eta"] < VACUOUS_BOUND]
    few = [r for r in fin if _lowest_reachable(r["num_targets"], config.confidence) <= r["bound_at_eta"]]
    fin = [r for r in fin if r not in few]
    if fin:
        out.append(claim(
            f"every final-model success P[MSE <= eta] lies within its ReRo bound (bound at the estimated kappa(eta), "
            f"approximate; holds: {level} interval below {1 + tol:g} x the bound)",
            comparisons=[comparison(f"{r['setting']}: P[MSE <= eta]", r["success_at_eta"], "<=", r["bound_at_eta"],
                                    interval=r["success_at_eta_ci"], tolerance=tol * r["bound_at_eta"],
                                    possible=(0, 1)) for r in fin],
            detail="; ".join(f"{r['setting']}: CI [{r['success_at_eta_ci'][0]:.3f}, {r['success_at_eta_ci'][1]:.3f}]"
                             f" vs bound {r['bound_at_eta']:.3f}" for r in fin) + _vacuous_note(
                [r["setting"] for r in rows if r.get("bound_at_eta") is not None
                 and r["bound_at_eta"] >= VACUOUS_BOUND])
            + _too_few_note([f"{r['setting']} ({r['num_targets']} targets)" for r in few])))
    dp = [r for r in rows if "audit_gdp_eps" in r]
    if dp:
        q = result.get("sample_rate", 1.0)
        comps, context = [], []
        for r in dp:
            eps = min(r["eps_rdp"], r["eps_pld"])
            # The family-wise bounds (Bonferroni over the run's audits): this claim errs with probability <= 5%.
            named = [("rigorous (eps, delta) bound", r["empirical_eps_familywise"],
                      r["audit_rigorous_ceiling_familywise"]),
                     ("one-run bound", r["audit_one_run_eps_familywise"], r["audit_one_run_eps_ceiling_familywise"])]
            if q == 1.0:  # a bound only under the Gaussian trade-off shape, which full-batch DP-GD has
                named.append(("Gaussian-DP reading", r["audit_gdp_eps_familywise"], None))
            for what, value, ceiling in named:
                c = comparison(f"{r['setting']}: {what}", value, "<=", eps, possible=(0, ceiling))
                (context if is_vacuous(c) else comps).append(c)
        if comps:
            out.append(claim(
                f"no audit certifies more than the accountant's epsilon (each number a lower bound at confidence "
                f"{dp[0]['audit_familywise_confidence']:.4g}, Bonferroni over the run's {dp[0]['audit_family_size']} "
                f"audits, so the claim errs with probability at most {1 - config.confidence:.2g}; an audit whose "
                f"statistical ceiling is below the accountant's epsilon cannot fail and is context)",
                comparisons=comps,
                detail="; ".join(f"{c['what']}: {c['value']:.3g} vs {c['threshold']:.3g}" for c in comps)
                + (". Context (ceiling below the accountant's epsilon): "
                   + "; ".join(f"{c['what']} {c['value']:.3g}" for c in context) if context else "")))
        low = [r for r in dp if r["eps_pld"] <= 10]
        if low and q == 1.0:
            out.append(claim(
                f"the Gaussian-DP audit reaches {config.audit_gdp_reach:g} of the accountant's epsilon where eps <= 10 "
                f"(Nasr et al. 2023; between its one-sided {level} lower and upper bounds, a "
                f"{100 * (2 * config.confidence - 1):.4g}% interval, under the Gaussian trade-off shape)",
                comparisons=[comparison(f"{r['setting']}: Gaussian-DP eps / eps_pld", r["audit_gdp_eps_hat"] /
                                        r["eps_pld"], ">=", config.audit_gdp_reach,
                                        interval=(r["audit_gdp_eps"] / r["eps_pld"],
                                                  r["audit_gdp_eps_upper"] / r["eps_pld"]), possible=(0, None))
                             for r in low],
                detail="; ".join(f"{r['setting']}: eps >= {r['audit_gdp_eps']:.3f} (mu >= {r['audit_gdp_mu_lower']:.3f}"
                                 f", {r['audit_runs_per_world']} runs per world) vs PLD {r['eps_pld']:.3g}: "
                                 f"{r['audit_gdp_eps'] / r['eps_pld']:.2f} of it" for r in low)))
        if low:
            out.append(claim(
                f"the one-run audit certifies {config.audit_one_run_reach:g} of the accountant's epsilon where eps <= "
                f"10 (Steinke et al. 2023; undecided when its canaries cannot certify that much)",
                comparisons=[comparison(f"{r['setting']}: one-run eps / eps_pld", r["audit_one_run_eps"] /
                                        r["eps_pld"], ">=", config.audit_one_run_reach,
                                        possible=(0, r["audit_one_run_eps_ceiling"] / r["eps_pld"])) for r in low],
                detail="; ".join(f"{r['setting']}: eps >= {r['audit_one_run_eps']:.3f} from "
                                 f"{r['audit_one_run_canaries']} canaries (ceiling {r['audit_one_run_eps_ceiling']:.3g}"
                                 f") vs PLD {r['eps_pld']:.3g}: {r['audit_one_run_eps'] / r['eps_pld']:.2f} of it"
                                 for r in low)))
    return out


def decidability_banner(claims_list) -> str:
    """A line for the top of the report when claims are undecided (empty when every claim is decided).

    >>> decidability_banner([{"name": "a", "verdict": "undecided"}, {"name": "b", "verdict": "holds"}])[:40]
    '**This run is too small to decide its cl'
    """
    undecided = [c["name"] for c in claims_list if c.get("verdict") == "undecided"]
    if not undecided:
        return ""
    if 2 * len(undecided) >= len(claims_list):
        return (f"**This run is too small to decide its claims**: {len(undecided)} of {len(claims_list)} are "
                "undecided (their intervals straddle the thresholds, or the run cannot reach them). Read its "
                "numbers as an illustration of the method; the `default` variant is sized to decide them.")
    return (f"**{len(undecided)} of {len(claims_list)} claims are undecided** at this run's sample sizes (their "
            "intervals straddle the thresholds): " + "; ".join(undecided) + ".")


def _updates_section(config, result, upd, conf, q) -> list[str]:
    """Bound vs attack (b): records and crafted rows per (setting, k), exact optimum, per-pair prediction, cells
    above their bound."""
    urows = [{"setting": u["setting"], "k": u["prior_size"], "candidates": u["candidates"], "games": u["trials"],
              "success": u["prior_aware_success"],
              f"{conf} CI": f"[{u['prior_aware_ci'][0]:.3f}, {u['prior_aware_ci'][1]:.3f}]",
              "ReRo bound": u["prior_aware_bound"], "route": u["bound_route"].replace("rero_", ""),
              "success / bound": u["success_over_bound"],
              f"{config.crafted_candidates} optimum / bound": _na(u.get("exact_optimum_over_bound")),
              "orthogonal optimum / bound": _na(u.get("orthogonal_optimum_over_bound")),
              "per-pair prediction": _na(u.get("predicted_success"))} for u in upd]
    kind = config.crafted_candidates
    geometry = ("a centred regular simplex (pairwise cosine -1/(k-1), summing to zero; antipodal at k = 2)"
                if kind == "simplex" else "pairwise orthogonal (Dirac canaries)")
    row = next((r for r in result["rows"] if "canary_free_coordinates" in r), {})
    free, need = row.get("canary_free_coordinates", 0), row.get("crafted_coordinates", 1)
    where = (f"They sit on parameters D-'s gradients never touch ({free} in this model and D-: first-layer weights "
             f"of input features that are zero in every D- record)" if free >= need else
             f"The model has {free} parameters that D-'s gradients never touch (first-layer weights of input features "
             f"zero in every D- record) for the {need} canary coordinates, so some canaries sit on parameters D- also "
             f"trains; the adversary subtracts D-'s sum, so the games are the same")
    text = [markdown_table(urows), "",
            f"Candidates. `records`: random test records. `{kind}`: gradient canaries, candidates whose clipped gradient "
            f"the adversary chooses outright: k vectors of norm C forming {geometry}, fixed at every step, so they "
            f"stay at full norm and keep their geometry along training. {where}; "
            f"each crafted run carries one game per prior size on disjoint coordinates (independent games: the "
            f"Gaussian noise on disjoint coordinates is independent and the adversary subtracts D-'s sum) plus the "
            f"audit canary below. DP-SGD's accounting covers any contribution of norm at most C, so gradient "
            f"canaries are the adversary the bound speaks about; records are not.", ""]
    if q == 1.0:
        text += [f"`{kind} optimum / bound` (and `orthogonal optimum / bound`) is the exact Bayes-optimal success "
                 f"for {kind} (orthogonal) canaries (closed form, "
                 f"`crafted_success_probability`: the orthogonal formula P = int phi(x - m) Phi(x)^(k-1) dx at "
                 f"m = sqrt(T k / (k - 1)) / sigma for the simplex, at m = sqrt(T) / sigma for orthogonal canaries), "
                 "divided by the bound. At k = 2 antipodal canaries attain the GDP bound exactly (both are "
                 "Phi(sqrt(T) / sigma)); at larger k the simplex (the equal-norm geometry farthest apart) stays a few "
                 "percent below it: the bound holds for any k-ary guess through one binary test.", "",
                 "`per-pair prediction` explains each cell's success from the separations measured along its games' "
                 "trajectories: each other candidate is treated as an orthogonal full-norm one at its measured "
                 "distance d_j from the target (the squared mu of that pair's test), sharing the target's noise: "
                 "P = int phi(u) prod_j Phi(u + sqrt(d_j / 2)) du, averaged over the games (`predicted_success`). "
                 "It is exact for gradient canaries. " + _prediction_sentence(upd, conf), ""]
    geo = result["candidate_gradient_geometry"]
    text += ["Why records stay below the bound: at the initialisation the clipped gradients of one trial's candidates "
             f"have mean absolute pairwise cosine {geo['mean_abs_cosine']:.3f} (largest {geo['max_abs_cosine']:.3f}) "
             f"and {100 * geo['share_at_clip_norm']:.0f}% of them are at the clip norm; as training proceeds the "
             "gradients of records the model fits shrink below C and those of similar records align. "
             + _separation_sentence(upd), ""]
    above = _above_bound(upd)
    text += ["Cells whose measured success exceeds the ReRo bound (one-sided binomial p-value of a success at "
             "the bound giving at least as many wins): " + ("; ".join(above) if above else "none") + ".", "",
             "![bound vs attack per threat model](bounds_vs_attack.png)", ""]
    return text


def _prediction_sentence(upd, conf) -> str:
    """Prediction vs measurement for the record games: the largest gap, in standard errors."""
    rec = [u for u in upd if u["candidates"] == "records" and u.get("predicted_success") is not None]
    if not rec:
        return ""
    inside = sum(u["prior_aware_ci"][0] <= u["predicted_success"] <= u["prior_aware_ci"][1] for u in rec)

    def z(u):
        p = u["predicted_success"]
        return (u["prior_aware_success"] - p) / max((p * (1 - p) / u["trials"]) ** 0.5, 1e-12)

    worst = max(rec, key=lambda u: abs(z(u)))
    return (f"For the records it predicts {inside} of {len(rec)} cells inside the {conf} interval of the measured "
            f"success; the largest gap is {_cell(worst)} ({worst['predicted_success']:.3f} predicted vs "
            f"{worst['prior_aware_success']:.3f} measured, {z(worst):+.1f} binomial standard errors).")


def _audits_section(config, dp_rows, conf, q, steps) -> list[str]:
    """The three audits per DP setting, with their assumptions."""
    erows = [{"setting": r["setting"], "eps_pld": r["eps_pld"],
              "(eps, delta) >=": r["empirical_eps"], "its ceiling": r["audit_rigorous_ceiling"],
              "runs per world": r["audit_runs_per_world"],
              "GDP mu >=": r["audit_gdp_mu_lower"], "GDP mu (estimate)": r["audit_gdp_mu_hat"],
              "GDP eps >=": r["audit_gdp_eps"],
              "one-run eps >=": r["audit_one_run_eps"], "canaries": r["audit_one_run_canaries"],
              "one-run ceiling": r["audit_one_run_eps_ceiling"],
              "one-run f-DP eps >=": r["audit_one_run_eps_fdp"]} for r in dp_rows]
    stds = ", ".join(f"{r['audit_gdp_std_with']:.3f}/{r['audit_gdp_std_without']:.3f}" for r in dp_rows)
    shape = ("full-batch DP-GD with a full-norm gradient canary has exactly this shape"
             if q == 1.0 else "Poisson-subsampled DP-SGD does not have it, so here the reading is an approximation, "
                              "not a bound")
    return ["## Audits: empirical epsilon", "",
            f"Every number is a {conf} lower bound on the mechanism's epsilon at delta = {config.delta}, from the "
            "white-box scores of every released update (the log-likelihood ratio of a canary's presence; the "
            "auditor subtracts D-'s clipped sum, which it recomputes). Assumptions common to all: independent "
            "noise draws per run, canaries fixed before the runs.", "",
            f"- (eps, delta) bound (rigorous, no shape assumption): a Dirac gradient canary (norm C) in every other "
            f"crafted run; half of each world's runs choose a threshold (the one whose Clopper-Pearson bound on them, "
            f"at a fixed {SELECTION_CONFIDENCE:.0%}, is largest), the other half bound FPR and FNR from above "
            f"(Clopper-Pearson, jointly {conf}): eps >= max(log((1 - delta - FPR)/FNR), log((1 - delta - FNR)/FPR)). "
            "With n evaluation runs per world (half of `runs per world`) it cannot exceed about log(n/3) whatever "
            "the mechanism: `its ceiling`.",
            f"- Gaussian-DP reading (Nasr et al. 2023): the same scores read as mu-GDP: an exact {conf} lower bound "
            "on mu (noncentral t, assuming normal scores of equal variance in both worlds; "
            + f"sample standard deviations with/without the canary {stds}) " +
            f"converted exactly to eps at delta. A bound on epsilon only if the mechanism's trade-off curve is "
            f"Gaussian: {shape}. Not capped by the run count.",
            "- One-run audit (Steinke, Nasr & Jagielski 2023): m Dirac canaries, each included with probability 1/2 "
            "(independent fair coins drawn before training), in ONE training run of the released model's algorithm "
            "per setting; guesses on the most and least confident canaries (guess counts fixed in advance, "
            "Bonferroni over them); no assumption on the trade-off shape, DP with respect to adding or removing one "
            "canary. The f-DP column reads the same guesses as Gaussian DP (Mahloujifar et al. 2024; assumes the "
            "Gaussian shape).", "", markdown_table(erows), ""] + above_accountant_note(
                dp_rows, config.confidence, steps if q == 1.0 else None)


NOT_PRIVATE = "∞ (no DP)"
"""The non-private setting's epsilon in report.md and the printed summary (metrics.json keeps ``"inf"``)."""


def shown_rows(rows: list[dict]) -> list[dict]:
    """``rows`` for a table people read: the non-private setting's epsilon columns (infinite: no DP guarantee) as
    :data:`NOT_PRIVATE`, not ``inf``.

    >>> shown_rows([{"noise_multiplier": 0.0, "eps_rdp": float("inf"), "eps_pld": float("inf")}])[0]["eps_rdp"]
    '∞ (no DP)'
    """
    eps = ("eps_rdp", "eps_pld")
    return [{**r, **{k: NOT_PRIVATE for k in eps if k in r}} if r.get("noise_multiplier") == 0 else r for r in rows]


def _na(v):
    """A value for a table cell: "n/a" where the quantity does not exist (Poisson sampling has no closed form)."""
    return "n/a" if v is None else v


def _fmt(v, digits=3):
    return "n/a" if v is None else f"{v:.{digits}g}"


def _model_description(config, num_params) -> str:
    if config.model == "balle_mnist_mlp":
        return f"Balle et al.'s MLP (hidden {config.hidden}, {config.activation}, {num_params} parameters)"
    return f"`{config.model}` ({num_params} parameters)"


def report_markdown(config, result, s, num_params, q, steps, recon_name="MLP 2x1000", claims=None) -> str:
    """report.md of a run: what was run, attack results (final model released), bound vs attack per threat
    model, the audits, the theorems' guarantees, calibration and interpretation (before the Claims section that
    :func:`recon_jax.evidence.run.finish_run` appends); ``claims`` (the run's) put a line at the top when some
    of them are undecided."""
    rows = result["rows"]
    eta, kappa_eta = result["eta_mse"], result["kappa_at_eta"]
    conf = f"{100 * config.confidence:g}%"
    attack_cols = ["setting", "test_accuracy", "eps_rdp", "eps_pld", "mean_mse", "mean_oracle_mse", "success_rate",
                   "success_at_eta", "mean_psnr", "mean_ssim", "mean_ncc"]
    changed = result.get("overrides") or {}
    text = [f"# Reconstruction-risk report ({config.dataset}, variant `{config.variant}`"
            f"{f' with {len(changed)} override' + 's' * (len(changed) > 1) if changed else ''})", "",
            header_lines(config, changed, result.get("split")), ""]
    banner = decidability_banner(claims or [])
    if banner:  # at the top, before anything is read as a finding
        text += [banner, ""]
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
             f"a prior of k candidates (kappa = 1/k, k in {list(config.prior_sizes)}); it guesses the candidate whose "
             f"clipped gradients best explain the observed updates (Gaussian likelihood"
             f"{'' if q == 1.0 else ', mixture over the Poisson inclusion of the target'}; Bayes-optimal for the "
             f"prior). Two priors: `records`, random test records not in D- ({config.prior_aware_trials} games per "
             f"DP setting, the prior sizes sharing them: what a plausible adversary does), and "
             f"`{config.crafted_candidates}`, gradient canaries (below: what the strongest adversary of the bound's "
             f"threat model reaches). The games run the accounted mechanism: {steps} steps of the Gaussian mechanism "
             f"at rate q = {q:.4g}"
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
    short = bottom_line(rows, result["calibration"])  # the glossary after the list (a batch-order item joins it)
    text += [TERMS, ""] + ([short, ""] if short else []) + ["## Attack results (final model released)", "",
                                              markdown_table(shown_rows(rows), attack_cols), ""]
    note = not_learned_note(rows, result.get("chance_accuracy"), result.get("eval_size"))
    text += [note, ""] if note else []
    text += ["![targets, reconstructions and NN oracle](reconstructions.png)", ""]
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
        text += _updates_section(config, result, upd, conf, q)
        text += _audits_section(config, dp_rows, conf, q, steps)
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
                 "image-space MSEs above; NCC is scale-free. They bound an adversary without a data prior: a fixed "
                 "guess, such as the all-zero record, is a prior and can do better. The log Bayes' capacity (nats) "
                 "is that of one Gaussian release at the effective noise sigma/sqrt(T) over the model's parameters "
                 "(Biswas et al. Thm 5; larger means more leakage, compare across settings).", "",
                 markdown_table(zrows), ""]
        text += ["Accounting: add/remove-one adjacency with sensitivity C, as in the ReRo argument (training with "
                 "vs without the target).", ""]
    cal = result["calibration"]
    if cal is not None:
        text += ["## Calibration to a risk target", "", calibration_sentence(cal, rows), ""]
    text += ["## Interpretation", "", interpretation(rows, kappa_eta, config), "",
             f"Runtime: {_runtime(result)} "
             f"({', '.join(f'{k} {v:.0f} s' for k, v in result['timings_seconds'].items())}). "
             f"Config: `config.json`; numbers: `metrics.json`."]
    return "\n".join(text) + "\n"


def _runtime(result) -> str:
    """``"1.2 min"``; for a run that resumed what earlier processes stored, their total and this process's share."""
    here = f"{result['runtime_seconds'] / 60:.1f} min"
    n = result.get("total_segments", 1)
    if n < 2:
        return here
    return (f"{'' if result.get('total_complete', True) else 'at least '}{result['total_seconds'] / 60:.1f} min in "
            f"{n} segments (see Segments), this process {here}")


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
