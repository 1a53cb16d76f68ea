"""The risk report's plain-language reading of its results: what the rows say to a model developer (can an
informed adversary reconstruct, and what do the theorems cap it at), the answer to the inverse question (the
noise a risk target needs, and the accuracy it costs), a bottom line per setting against that target, the terms
the tables use, and a note on audit bounds above the accountant's epsilon; :mod:`recon_jax.report.text` puts them
into report.md."""

from __future__ import annotations

from recon_jax.accounting import tightest_rero

__all__ = ["above_accountant_note", "bottom_line", "calibration_sentence", "chance_accuracy", "interpretation",
           "not_learned_note", "TERMS"]

TERMS = ("Terms. *ReRo bound*: an upper bound, from the DP guarantee, on the probability that any attack "
         "reconstructs the target, given kappa, the chance of doing so without the model (the prior). *eps_pld*: the "
         "epsilon of the training run by the tight privacy-loss-distribution accountant (quote this one; eps_rdp is a "
         "looser upper bound). *GDP* (mu-Gaussian DP) and *f-DP*: privacy stated as a trade-off curve between the "
         "errors of telling 'trained with the target' from 'without'; *zCDP*, *RDP*: other accountings, each a route "
         "to a ReRo bound. *Canary*: a record (or gradient) crafted to be as recognisable as the guarantee allows; "
         "a *Dirac* canary is one gradient coordinate at full clip norm, a *simplex* prior is k of them as far apart "
         "as possible. *Family-wise*: a confidence level shared by several statements at once (Bonferroni).")
"""The risk report's glossary, under "What was run": the words the tables use before the sections define them."""


def bottom_line(rows, cal) -> str:
    """One sentence per DP setting against the calibration target (any attack's success below ``cal["rero"]`` at
    a ``cal["kappa"]`` prior): the tightest ReRo bound at that prior, met or not; empty without a DP setting whose
    bounds include that prior. Reads the bounds, which hold against any attack, not the attack's own success.

    >>> row = {"setting": "DP sigma=16", "noise_multiplier": 16.0, "eps_pld": 2.56,
    ...        "bounds": {"rero": [{"kappa": 0.01, "rero_gdp": 0.0444, "rero_rdp": 0.0546}]}}
    >>> bottom_line([row], {"rero": 0.05, "kappa": 0.01})[89:144]
    'prior: DP sigma=16 (eps_pld 2.56): bound 4.44%, **met**'
    """
    if cal is None:
        return ""
    parts = []
    for r in rows:
        at = [b for b in (r.get("bounds") or {}).get("rero", []) if b["kappa"] == cal["kappa"]]
        if r["noise_multiplier"] > 0 and at:
            bound = tightest_rero(at[0])[0]
            parts.append(f"{r['setting']} (eps_pld {r['eps_pld']:.3g}): bound {100 * bound:.3g}%, "
                         + ("**met**" if bound <= cal["rero"] else "**not met**"))
    if not parts:
        return ""
    return (f"**In short.** Against the target of any attack succeeding at most {100 * cal['rero']:g}% of the time "
            f"at a {100 * cal['kappa']:g}% prior: " + "; ".join(parts) + ". These are ReRo bounds: they hold for "
            "any attack, even one that sees every update. The attacks below show what two concrete adversaries "
            "reach; a success of 0% means that attack failed, not that no attack can succeed.")


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


def chance_accuracy(labels) -> float:
    """The accuracy of always guessing the most common class of ``labels`` (integers, or one-hot rows).

    >>> chance_accuracy([0, 1, 1, 2]), chance_accuracy([[1, 0], [0, 1], [0, 1]])
    (0.5, 0.6666666666666666)
    """
    import numpy as np

    y = np.asarray(labels)
    y = y.argmax(-1) if y.ndim == 2 else y.reshape(-1)
    if y.size == 0:
        raise ValueError("labels must not be empty")
    return float(np.unique(y, return_counts=True)[1].max() / y.size)


def not_learned_note(rows, chance: float | None, n_eval: int | None) -> str:
    """A warning for the settings whose released models are no more accurate than always guessing the most
    common test class (empty if none, or if the run did not measure it): the attack and the bounds then describe
    a model that did not learn.

    >>> not_learned_note([{"setting": "non-private", "noise_multiplier": 0, "test_accuracy": 0.3}], 0.5, 5)[:60]
    '**Warning: no better than chance.** The released models of n'
    """
    if chance is None:
        return ""
    low = [r for r in rows if r.get("test_accuracy") is not None and r["test_accuracy"] <= chance]
    if not low:
        return ""
    listed = ", ".join(f"{r['setting']} ({100 * r['test_accuracy']:.1f}%)" for r in low)
    advice = ("" if all(r["noise_multiplier"] > 0 for r in low) else
              " Without noise that means the training itself failed: tune `--config.learning_rate` and "
              "`--config.epochs` (the defaults are tuned for Balle et al.'s MLP on MNIST) before reading the report.")
    return (f"**Warning: no better than chance.** The released models of {listed} reach at most the "
            f"{100 * chance:.1f}% of always guessing the most common class of the {n_eval} test images: the "
            f"attack results and the bounds describe models that did not learn the task.{advice}"
            + (f" ({n_eval} test images measure accuracy only roughly: raise `--config.eval_size` if the data "
               f"allow.)" if n_eval is not None and n_eval < 100 else ""))


def interpretation(rows, kappa_eta, config=None) -> str:
    """The report's plain-language reading of the rows (attack without DP, bound and attack under DP).

    The sentence without DP follows the interval of the success share, as its claim does: "can" when the whole
    interval is at least 0.5, "mostly cannot" when it is below, and says that the run cannot tell otherwise.

    >>> interpretation([{"noise_multiplier": 0, "success_rate": 0.8, "mean_mse": 0.02, "mean_oracle_mse": 0.03}],
    ...                0.1)[:56]
    'Without DP, an informed adversary can reconstruct traini'
    >>> interpretation([{"noise_multiplier": 0, "success_rate": 0.25, "success_rate_ci": [0.03, 0.65],
    ...                  "mean_mse": 0.04, "mean_oracle_mse": 0.03}], 0.1)[:70]
    'Without DP, an informed adversary may or may not (too few targets to t'
    """
    lines = []
    np_rows = [r for r in rows if r["noise_multiplier"] == 0]
    if np_rows:
        r = np_rows[0]
        low, high = r.get("success_rate_ci") or (r["success_rate"], r["success_rate"])
        verdict = ("can" if low >= 0.5 else "mostly cannot" if high < 0.5 else
                   f"may or may not (too few targets to tell: the interval of the share is {low:.2f}-{high:.2f})")
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
        eps = min(best["eps_rdp"], best.get("eps_pld", best["eps_rdp"]))  # the accountant's, as the claims read it
        lines.append(f"With DP (sigma={best['noise_multiplier']:g}, eps={eps:.3g}, test accuracy "
                     f"{100 * best['test_accuracy']:.1f}%), the attack on the final model beats the oracle on "
                     f"{100 * best['success_rate']:.0f}% of targets, and the ReRo bound puts any attack's chance of an "
                     f"MSE below eta at about {100 * best['bound_at_eta']:.1f}% (prior {100 * kappa_eta:.1f}%; "
                     "approximate: the prior's kappa is a lower estimate, so the exact bound may be somewhat higher; "
                     "an average over targets drawn like these, not a guarantee for each record).")
        over = [r["setting"] for r in dp if r["success_at_eta_ci"][0] > r["bound_at_eta"]]
        if over:
            lines.append(f"Measured success exceeds the bound beyond its interval in {', '.join(over)}: kappa is "
                         f"underestimated there (the best oblivious guess lies outside the guesses tried); treat that "
                         f"bound as approximate.")
        lines.append("The gap between the final-model attack and the bound is the threat model's (one model, not "
                     "every update) or the attack's (a reconstructor trained on shadow models), and this run cannot "
                     "tell them apart; the prior-aware attack on every update shows how close to the bound an "
                     "adversary of the bounds' own threat model gets.")
    return " ".join(lines) if lines else "No settings were run."


def above_accountant_note(dp_rows, confidence: float, full_batch_steps: int | None = None) -> list[str]:
    """A note under the audit table naming each per-setting lower bound above the accountant's epsilon.

    Each column is a bound at ``confidence`` on its own, so a sound mechanism still puts one above its epsilon now
    and then (each with probability up to 1 - ``confidence``); the claim "no audit certifies more" reads the family-wise
    bounds, which the note gives beside them. With ``full_batch_steps`` (q = 1) a Gaussian-DP row also names the
    true mu of its canary, sqrt(T) / sigma.
    """
    columns = (("(eps, delta)", "empirical_eps", "empirical_eps_familywise"),
               ("GDP", "audit_gdp_eps", "audit_gdp_eps_familywise"),
               ("one-run", "audit_one_run_eps", "audit_one_run_eps_familywise"),
               ("one-run f-DP", "audit_one_run_eps_fdp", None))
    above = []
    for r in dp_rows:
        for name, key, familywise in columns:
            if r.get(key) is not None and r[key] > r["eps_pld"]:
                fw = (f"; family-wise {r[familywise]:.4g}" if familywise and r.get(familywise) is not None
                      else "; not in the claim's family")
                truth = (f"; the canary's true mu is sqrt(T) / sigma = "
                         f"{full_batch_steps ** 0.5 / r['noise_multiplier']:.4g} against mu >= "
                         f"{r['audit_gdp_mu_lower']:.4g}" if name == "GDP" and full_batch_steps else "")
                above.append(f"{r['setting']}, {name} eps >= {r[key]:.4g} vs eps_pld {r['eps_pld']:.4g}{fw}{truth}")
    if not above:
        return []
    r = dp_rows[0]
    return [f"Above the accountant's epsilon: {'; '.join(above)}. Each number in the table is a "
            f"{100 * confidence:g}% lower bound on its own, so even for a mechanism that meets its accounting each "
            f"can exceed the true epsilon by chance (with probability up to {1 - confidence:.2g}), and with "
            f"{len(dp_rows) * len(columns)} such numbers one above it is no surprise. The claim that no audit "
            f"certifies more than the accountant reads the family-wise bounds of the (eps, delta), one-run and "
            f"Gaussian-DP audits (confidence {r['audit_familywise_confidence']:.4g}, Bonferroni over the run's "
            f"{r['audit_family_size']} audits; the one-run f-DP column is outside that family); a family-wise bound "
            "above the accountant's epsilon would fail it.", ""]
