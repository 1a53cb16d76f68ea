"""The risk report's threat model (b), every update released: the prior-aware game with random records (the
realistic prior) and with crafted gradient canaries (the prior that comes closest to the ReRo bound), and three
audits of the released mechanism: the rigorous (eps, delta) bound of the with/without game and its statistical
ceiling, the same game read as Gaussian DP (Nasr et al. 2023), and the one-run audit (Steinke, Nasr & Jagielski
2023) with its f-DP reading. :func:`every_update_released` runs them for :func:`recon_jax.report.app.run`.

Runs and what they carry:

- records: ``prior_aware_trials`` games per DP setting (one vmapped call over the settings); trial i's prior is
  ``max(prior_sizes)`` random test records beyond ``eval_size``, the target the first, the prior of size k the
  first k (nested, exchangeable);
- crafted: :func:`crafted_trials` runs per DP setting, each training D- plus, on disjoint blocks of parameter
  coordinates (:func:`recon_jax.attacks.canaries.canary_coordinates`), the target of one game per prior size (a
  ``crafted_candidates`` prior of k gradient canaries, target uniform) and, in every other run, the Dirac canary of
  the with/without audit. Canaries on disjoint coordinates do not see each other (module docstring of
  :mod:`recon_jax.attacks.canaries`; a test checks that a block's scores do not change when other blocks are
  added), so the games are independent and each is the one-target game, and the audit canary's inclusion is
  independent of everything else in the run;
- one-run audit: one run per DP setting with ``one_run_canaries`` Dirac canaries, each included with
  probability 1/2.
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np

from recon_jax import training
from recon_jax.accounting import tightest_rero
from recon_jax.attacks import audit, audit_gdp, audit_one_run, canaries, prior_aware
from recon_jax.evidence.run import require_finite
from recon_jax.evidence.progress import step

__all__ = ["VACUOUS_BOUND", "reach_prior_sizes", "crafted_trials", "every_update_released"]

VACUOUS_BOUND = 0.999
"""A ReRo bound at least this makes "success within the bound" impossible to fail: such cells are context only."""


def _ci(successes: int, trials: int, confidence: float) -> list[float]:
    lo, hi = audit.clopper_pearson(successes, trials, confidence)
    return [float(lo), float(hi)]


def reach_prior_sizes(config) -> list[int]:
    """The prior sizes of the "crafted canaries reach the bound" claim: k <= 10 (at kappa = 1/100 a success of a
    few percent needs tens of thousands of games to decide a ratio), or the smallest prior size if none is."""
    sizes = sorted(int(k) for k in config.prior_sizes)
    return [k for k in sizes if k <= 10] or sizes[:1]


def _bound(row, k):
    brow = next(r for r in row["bounds"]["rero"] if r["kappa"] == 1.0 / k)
    return tightest_rero(brow)


def crafted_trials(config, row, q: float, steps: int) -> int:
    """Runs of the crafted-canary games (and of the with/without audit they carry) at one DP setting.

    Fixed before the run from what is known in advance: with full batches, the exact optimum p of the crafted
    geometry and the ReRo bound b at each prior size of :func:`reach_prior_sizes` with b < ``VACUOUS_BOUND`` give
    the games needed for a 95% interval of success / bound of half-width ``crafted_precision``,
    ``z^2 p (1 - p) / (crafted_precision b)^2``; the largest of them, at least ``prior_aware_trials`` and
    ``2 audit_runs``, at most ``crafted_trials``, rounded up to whole chunks of ``chunk_size``. Under Poisson
    sampling (no exact optimum) it is ``crafted_trials``, rounded up likewise.
    """
    from scipy import stats

    z = float(stats.norm.ppf(1.0 - (1.0 - config.confidence) / 2.0))
    need = 0.0
    if q == 1.0:
        mu = math.sqrt(steps) / row["noise_multiplier"]
        for k in reach_prior_sizes(config):
            b = _bound(row, k)[0]
            if b < VACUOUS_BOUND:
                p = prior_aware.crafted_success_probability(config.crafted_candidates, k, mu)
                need = max(need, z * z * p * (1.0 - p) / (config.crafted_precision * b) ** 2)
        n = min(max(math.ceil(need), config.prior_aware_trials, 2 * config.audit_runs), config.crafted_trials)
    else:
        n = config.crafted_trials
    chunk = min(config.chunk_size, n)
    return chunk * math.ceil(n / chunk)


def _records_game(config, fns, p0, fixed, test_x, test_y, sigmas, q, steps, key, optimizer):
    """The prior-aware game with random test records at every DP setting (one vmapped call)."""
    rng = np.random.default_rng([config.seed, 1])
    pool = np.arange(config.eval_size + 1, len(test_x))  # index eval_size was the canary of earlier reports
    kmax = max(config.prior_sizes)
    idx = np.stack([rng.choice(pool, kmax, replace=False) for _ in range(config.prior_aware_trials)])
    n = config.prior_aware_trials
    chunk = math.ceil(n / math.ceil(n / config.chunk_size))
    run = canaries.GameTraining(noise_multipliers=sigmas, clip_norm=config.clip_norm, steps=steps,
                                optimizer=optimizer, sample_rate=q)
    res = prior_aware.prior_aware_game(
        fns, p0, fixed, (test_x[idx], test_y[idx]), np.zeros(len(idx), np.int32), run, key,
        include_target=np.ones(len(idx), np.float32), chunk_size=chunk)
    scores = np.asarray(res.scores)
    require_finite(scores, "prior-aware attack scores", "noise multiplier too small for float32 likelihoods?")
    separation = np.asarray(res.separation, np.float64)
    require_finite(separation, "prior-aware candidate separations")
    # Geometry of one trial's candidates' clipped gradients at the initialisation.
    g = training.clip_gradients(training.per_example_gradients(fns, p0, test_x[idx[0]], test_y[idx[0]]),
                                config.clip_norm)
    g = np.asarray(g, np.float64)
    norms = np.linalg.norm(g, axis=1)
    cos = (g @ g.T) / np.maximum(np.outer(norms, norms), 1e-30)
    off = cos[~np.eye(len(g), dtype=bool)]
    geometry = {"mean_abs_cosine": float(np.abs(off).mean()), "max_abs_cosine": float(np.abs(off).max()),
                "share_at_clip_norm": float(np.mean(norms >= 0.999 * config.clip_norm))}
    return scores, separation, geometry


def _blocks(config, coords):
    """One crafted prior per prior size on consecutive coordinates, then the audit's Dirac canary: (canaries,
    [(offset, k)] per prior size, audit column)."""
    sets, spans, o = [], [], 0
    for k in config.prior_sizes:
        sets.append(canaries.crafted_canaries(config.crafted_candidates, int(k), coords[o:o + k], config.clip_norm))
        spans.append((o, int(k)))
        o += int(k)
    sets.append(canaries.crafted_canaries("orthogonal", 1, coords[o:o + 1], config.clip_norm))
    return canaries.concat_canaries(*sets), spans, o


def _crafted_and_audit(config, fns, p0, fixed, si, sigma, n_runs, q, steps, key, optimizer, coords):
    """Crafted-canary games (one per prior size) and the with/without audit canary, in the same n_runs runs."""
    cans, spans, audit_col = _blocks(config, coords)
    rng = np.random.default_rng([config.seed, 3, si])
    included = np.zeros((n_runs, audit_col + 1), np.float32)
    targets = {}
    for o, k in spans:
        targets[k] = rng.integers(0, k, n_runs)
        included[np.arange(n_runs), o + targets[k]] = 1.0
    with_canary = np.arange(n_runs) % 2 == 0
    included[:, audit_col] = with_canary
    run = canaries.GameTraining(noise_multipliers=[sigma], clip_norm=config.clip_norm, steps=steps,
                                optimizer=optimizer, sample_rate=q)
    res = canaries.canary_game(fns, p0, fixed, cans, included, run, jax.random.fold_in(key, si),
                               chunk_size=min(config.chunk_size, n_runs))
    ll = np.asarray(res.log_likelihood[0], np.float64)
    require_finite(ll, "crafted-canary log-likelihoods", "noise multiplier too small for float32 likelihoods?")
    dense = canaries.dense_canaries(cans, int(cans.indices.max()) + 1)
    ties = rng.random(ll.shape)  # drawn after the targets, which stay as before
    games = {}
    for o, k in spans:
        wins = int(np.sum(prior_aware.guess_breaking_ties(ll[:, o:o + k], ties[:, o:o + k]) == targets[k]))
        block = dense[o:o + k]
        dist = np.sum((block - block[0]) ** 2, axis=1)  # ||c_0 - c_j||^2 (every target alike, by symmetry)
        games[k] = {"wins": wins, "separation": steps * dist / (sigma * config.clip_norm) ** 2}
    return games, ll[with_canary, audit_col], ll[~with_canary, audit_col]


def _audits(config, scores_with, scores_without, one_run_scores, one_run_included, family: int):
    """The three audits of one DP setting (metrics keys of its row).

    Besides each audit's bound at ``config.confidence``, the ``*_familywise`` keys hold the same bounds at
    ``1 - (1 - confidence) / family`` (Bonferroni over the ``family`` audits of the run): the claim that no audit
    certifies more than the accountant's epsilon reads those, so that it errs (a sound mechanism called leaky) with
    probability at most ``1 - confidence`` in all. Read one at a time, each 95% bound exceeds its true epsilon in 5%
    of runs, so a claim over several of them would fail by chance far more often.
    """
    conf, delta = config.confidence, config.delta
    g = audit_gdp.gaussian_dp_audit(scores_with, scores_without, delta, confidence=conf)
    # The other end of the exact noncentral-t interval: the "lower bound" at confidence 1 - conf is the upper
    # bound at conf (gdp_mu_lower_bound inverts P[T <= t] = confidence).
    mu_hi = audit_gdp.gdp_mu_lower_bound(scores_with, scores_without, confidence=1.0 - conf)[0]
    e = audit.empirical_epsilon(scores_with, scores_without, delta, confidence=conf)
    o = audit_one_run.one_run_audit(one_run_scores, one_run_included, delta, confidence=conf)
    fw = 1.0 - (1.0 - conf) / family
    g_fw = audit_gdp.gaussian_dp_audit(scores_with, scores_without, delta, confidence=fw)
    o_fw = audit_one_run.one_run_audit(one_run_scores, one_run_included, delta, confidence=fw)
    return {
        "audit_familywise_confidence": fw, "audit_family_size": int(family),
        "empirical_eps_familywise": g_fw.eps_rigorous,  # empirical_epsilon at confidence fw
        "audit_rigorous_ceiling_familywise": g_fw.eps_rigorous_ceiling,
        "audit_gdp_eps_familywise": g_fw.eps_lower, "audit_gdp_mu_lower_familywise": g_fw.mu_lower,
        "audit_one_run_eps_familywise": o_fw.eps_lower, "audit_one_run_eps_ceiling_familywise": o_fw.eps_ceiling,
        "empirical_eps": e.eps_lower, "audit_fpr": e.fpr, "audit_fnr": e.fnr, "audit_fpr_upper": e.fpr_upper,
        "audit_fnr_upper": e.fnr_upper, "audit_eval_runs_per_world": e.num_eval_with,
        "audit_rigorous_ceiling": g.eps_rigorous_ceiling, "audit_runs_per_world": int(scores_with.size),
        "audit_gdp_mu_lower": g.mu_lower, "audit_gdp_mu_hat": g.mu_hat, "audit_gdp_mu_upper": float(mu_hi),
        "audit_gdp_eps": g.eps_lower, "audit_gdp_eps_hat": g.eps_hat,
        "audit_gdp_eps_upper": float(audit_gdp.gdp_epsilon(mu_hi, delta)),
        "audit_gdp_std_with": g.std_with, "audit_gdp_std_without": g.std_without,
        "audit_one_run_eps": o.eps_lower, "audit_one_run_canaries": o.num_canaries,
        "audit_one_run_included": o.num_included, "audit_one_run_guesses": list(o.eps_guesses),
        "audit_one_run_correct": o.eps_correct, "audit_one_run_eps_ceiling": o.eps_ceiling,
        "audit_one_run_mu_lower": o.mu_lower, "audit_one_run_eps_fdp": o.eps_fdp,
        "audit_one_run_hypotheses": o.num_hypotheses,
    }


def _row(config, row, k, kind, wins, trials, q, steps, predicted, extra):
    from scipy import stats

    sigma = row["noise_multiplier"]
    bound, route = _bound(row, k)
    ci = _ci(wins, trials, config.confidence)
    rec = {"setting": row["setting"], "noise_multiplier": sigma, "prior_size": int(k), "kappa": 1.0 / k,
           "candidates": kind, "trials": int(trials), "prior_aware_success": wins / trials, "prior_aware_ci": ci,
           "prior_aware_bound": bound, "bound_route": route, "success_over_bound": (wins / trials) / bound,
           "success_over_bound_ci": [ci[0] / bound, ci[1] / bound],
           # one-sided binomial p-value of "success <= bound": P[Binomial(trials, bound) >= wins]
           "p_value_above_bound": float(stats.binom.sf(wins - 1, trials, min(bound, 1.0))),
           "predicted_success": predicted, **extra}
    if q == 1.0:
        mu = math.sqrt(steps) / sigma
        opt = prior_aware.crafted_success_probability(config.crafted_candidates, int(k), mu)
        orth = prior_aware.orthogonal_success_probability(int(k), mu)
        rec.update(exact_optimum=opt, exact_optimum_over_bound=opt / bound, orthogonal_optimum=orth,
                   orthogonal_optimum_over_bound=orth / bound)
    return rec


def every_update_released(config, fns, p0, fixed, test_x, test_y, dp_rows, q, steps, keys, optimizer, timings):
    """Threat model (b) at every DP setting: returns ``(update_rows, geometry)`` and adds the audits' keys to each
    row of ``dp_rows`` (the rows of the DP settings, with their ``bounds``). ``keys``: (records game, crafted runs,
    one-run audit) keys; ``timings`` gets the seconds of each part."""
    k_records, k_crafted, k_one_run = keys
    sigmas = [r["noise_multiplier"] for r in dp_rows]
    t0 = time.time()
    with step(f"prior-aware game, records: {config.prior_aware_trials} games x {len(sigmas)} noise level(s), "
              f"{steps} steps"):
        scores, separation, geometry = _records_game(config, fns, p0, fixed, test_x, test_y, sigmas, q, steps,
                                                     k_records, optimizer)
    timings["prior_aware_records"] = time.time() - t0

    t0 = time.time()
    need = sum(int(k) for k in config.prior_sizes) + 1
    num_params = int(sum(np.size(x) for x in jax.tree_util.tree_leaves(p0)))
    m = min(int(config.one_run_canaries), num_params)
    coords, free = canaries.canary_coordinates(fns, p0, fixed[0], max(need, m))
    crafted = []
    for si, row in enumerate(dp_rows):
        n = crafted_trials(config, row, q, steps)
        with step(f"{row['setting']}: crafted-canary games and audit canary, {n} runs, {steps} steps"):
            crafted.append((n,) + _crafted_and_audit(config, fns, p0, fixed, si, row["noise_multiplier"], n, q,
                                                     steps, k_crafted, optimizer, coords[:need]))
    timings["prior_aware_crafted_and_audit"] = time.time() - t0

    t0 = time.time()
    inc = np.random.default_rng([config.seed, 4]).random(m) < 0.5
    with step(f"one-run audit: {m} canaries in one run x {len(sigmas)} noise level(s), {steps} steps"):
        one = canaries.canary_game(fns, p0, fixed, canaries.crafted_canaries("orthogonal", m, coords[:m],
                                                                             config.clip_norm),
                                   inc[None].astype(np.float32),
                                   canaries.GameTraining(noise_multipliers=sigmas, clip_norm=config.clip_norm,
                                                         steps=steps, optimizer=optimizer, sample_rate=q),
                                   k_one_run)
    one_ll = np.asarray(one.log_likelihood[:, 0], np.float64)
    require_finite(one_ll, "one-run audit canary scores")
    timings["one_run_audit"] = time.time() - t0

    # Bonferroni family: the rigorous bound and the one-run bound of every DP setting, and the Gaussian-DP reading
    # where it is a bound (full batches); all of them, whichever the claim ends up naming.
    family = len(dp_rows) * (3 if q == 1.0 else 2)
    rows = []
    ties = np.random.default_rng([config.seed, 5]).random(scores.shape)  # the records games' tie-break draws
    for i, row in enumerate(dp_rows):
        n, games, s_with, s_without = crafted[i]
        row.update(_audits(config, s_with, s_without, one_ll[i], inc, family))
        row["canary_free_coordinates"] = free  # parameters D-'s gradients never touch (among those used)
        row["crafted_coordinates"] = need  # the crafted priors' and the audit canary's coordinates
        for k in config.prior_sizes:
            wins = int(np.sum(prior_aware.guess_breaking_ties(scores[i, :, :k], ties[i, :, :k]) == 0))
            retained = separation[i, :, 1:k] / (2.0 * steps / row["noise_multiplier"] ** 2)
            pred = (float(prior_aware.predicted_success(separation[i:i + 1], np.zeros(scores.shape[1], int), k)[0])
                    if q == 1.0 else None)
            rows.append(_row(config, row, k, "records", wins, scores.shape[1], q, steps, pred, {
                "separation_retained_mean": float(np.mean(retained)),
                "separation_retained_p10": float(np.percentile(retained, 10))}))
        for k in config.prior_sizes:
            game = games[int(k)]
            sep = game["separation"][None, None, :]
            pred = float(prior_aware.predicted_success(sep, [0])[0]) if q == 1.0 else None
            rows.append(_row(config, row, k, config.crafted_candidates, game["wins"], n, q, steps, pred, {
                "separation_retained_mean": float(np.mean(game["separation"][1:]) /
                                                  (2.0 * steps / row["noise_multiplier"] ** 2))}))
    return rows, geometry
