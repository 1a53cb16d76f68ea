"""Biswas et al. Table I (VMF: approach 1 vs 2) and Table IV (eps <-> kappa <-> sigma), computed by recon_jax.

python -m experiments.biswas_tables --config=experiments/configs/biswas_tables.py:smoke --workdir=/tmp/biswas_tables

Everything is computed by ``recon_jax.accounting`` in float64 and printed next to the paper's values, with a note
on every cell that differs. See experiments/biswas_tables.md for the explanation of each discrepancy.
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np

from experiments.common import check_config, claim, comparison, finish_run, launch, require_finite, start_run
from experiments.configs.biswas_tables import CHECKS
from recon_jax import accounting
from recon_jax.evidence import markdown_table


_NOTES_I = {
    25: "approach 1 with the exact root of the leftover delta; the paper searched a coarse grid",
    50: "as above",
    75: "as above",
    100: "paper lists approach 2 (2.5, reproduced); our exact approach 1 is slightly better",
    150: "paper's 7.97 = approach 2 with tau interpolated linearly between integer orders (not sound); "
         "the convexity chord gives the value shown",
    300: "paper's 41.02 = the same unsound interpolation at alpha = 1.5; not reproducible with a sound bound",
}


def _pct(ours, paper):
    return 100.0 * (ours / paper - 1.0)


def _figure(path, kappas, e1, e2, e2p, paper_k, paper_e):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.semilogy(kappas, e1, label="approach 1 (exact optimiser)")
    ax.semilogy(kappas, e2, label="approach 2 (cumulant chord, sound)")
    ax.semilogy(kappas, e2p, "--", label="approach 2 (paper's eps interpolation)")
    ax.semilogy(paper_k, paper_e, "ko", label="paper (Tables I, IV)")
    ax.set_xlabel("kappa")
    ax.set_ylabel("epsilon (N = 3 epochs)")
    ax.set_title("VMF mechanism, p = 13,700, q = 128/60000, delta = 1/60000")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _paper_as_printed(rows):
    """The table rows with the paper's epsilons as printed (112.28, not 4 significant digits)."""
    return [dict(r, **{"paper eps": f"{r['paper eps']:g}"}) for r in rows]


def run(config, workdir: str) -> dict:
    """Computes both tables and writes report.md, metrics.json, config.json and eps_vs_kappa.png."""
    check_config(config, CHECKS)  # before anything is written to workdir
    run_info = start_run(workdir, config, seed=None)
    workdir = run_info.workdir
    t0 = time.time()
    p, d = config.dim, config.delta
    q = config.batch_size / config.dataset_size
    steps = int(np.ceil(config.epochs / q))
    n_ep = config.epochs
    with jax.enable_x64(True):
        t1_k = np.array([r[0] for r in config.table_i], np.float64)
        kappas = np.unique(np.concatenate([t1_k, np.asarray(config.table_iv_kappa, np.float64)]))
        e1 = np.asarray(accounting.vmf_epsilon(kappas, p, q, n_ep, d, approach=1))
        e2 = np.asarray(accounting.vmf_epsilon(kappas, p, q, n_ep, d, approach=2))
        e2p = np.asarray(accounting.vmf_epsilon(kappas, p, q, n_ep, d, approach=2, interpolation="paper"))
        by_k = {float(k): (a, b, c) for k, a, b, c in zip(kappas, e1, e2, e2p)}
        sig = np.asarray(config.table_iv_sigma, np.float64)
        eps_sigma = np.asarray(accounting.dpsgd_epsilon(sig, q, steps, d))
        steps_col = {}
        if config.step_composition:
            s1 = np.asarray(accounting.vmf_epsilon(kappas, p, q, steps, d, approach=1))
            s2 = np.asarray(accounting.vmf_epsilon(kappas, p, q, steps, d, approach=2))
            steps_col = {float(k): float(min(a, b)) for k, a, b in zip(kappas, s1, s2)}
        pld_col = gauss_pld = {}
        if config.pld:
            # The tight accountants over the same steps: the VMF PLD and dp_accounting's Gaussian PLD.
            iv_k = np.asarray(config.table_iv_kappa, np.float64)
            e_pld = np.asarray(accounting.vmf_epsilon(iv_k, p, q, steps, d, approach="pld",
                                                      value_discretization_interval=config.pld_discretization))
            e_gp = np.asarray(accounting.dpsgd_epsilon(np.asarray(config.table_iv_sigma, np.float64), q, steps, d,
                                                       accountant="pld",
                                                       value_discretization_interval=config.pld_discretization))
            require_finite([e_pld, e_gp], "PLD epsilons")
            pld_col = {float(k): float(e) for k, e in zip(iv_k, e_pld)}
            gauss_pld = {float(k): float(e) for k, e in zip(iv_k, e_gp)}
        cal_k = cal_s = None
        if config.calibrate:
            targets = np.asarray(config.table_iv_eps, np.float64)
            cal_k = np.asarray(accounting.calibrate_vmf_kappa(targets, p, q, n_ep, d))
            cal_s = np.asarray(accounting.calibrate_sigma(targets, q, steps, d))
        grid = np.linspace(20.0, 520.0, config.curve_points)
        g1 = np.asarray(accounting.vmf_epsilon(grid, p, q, n_ep, d, approach=1))
        g2 = np.asarray(accounting.vmf_epsilon(grid, p, q, n_ep, d, approach=2))
        g2p = np.asarray(accounting.vmf_epsilon(grid, p, q, n_ep, d, approach=2, interpolation="paper"))
        require_finite([e1, e2, e2p, eps_sigma, g1, g2, g2p], "Table I / IV epsilons")

    rows_i = []
    for k, e_paper, ap_paper in config.table_i:
        a1, a2, a2p = by_k[float(k)]
        best, ap = (a1, 1) if a1 <= a2 else (a2, 2)
        ours_paper_ap = a1 if ap_paper == 1 else a2
        rows_i.append({"kappa": k, "paper eps": e_paper, "paper approach": ap_paper, "ours approach 1": a1,
                       "ours approach 2": a2, "ours best": best, "best approach": ap,
                       "diff % (paper's approach)": _pct(ours_paper_ap, e_paper),
                       "approach 2, paper interp.": a2p, "note": _NOTES_I.get(int(k), "reproduced")})
    rows_iv = []
    for i, (e_paper, k, s) in enumerate(zip(config.table_iv_eps, config.table_iv_kappa, config.table_iv_sigma)):
        a1, a2, a2p = by_k[float(k)]
        best = min(a1, a2)
        row = {"paper eps": e_paper, "kappa": k, "ours eps(kappa)": best, "diff %": _pct(best, e_paper),
               "paper interp.": a2p, "sigma": s, "ours eps(sigma)": float(eps_sigma[i]),
               "diff % (sigma)": _pct(float(eps_sigma[i]), e_paper)}
        if steps_col:
            row["VMF eps over steps"] = steps_col[float(k)]
        if pld_col:
            row["VMF eps over steps (PLD)"] = pld_col[float(k)]
            if steps_col:
                row["approaches 1/2 / PLD"] = steps_col[float(k)] / pld_col[float(k)]
            row["Gauss eps(sigma) (PLD)"] = gauss_pld[float(k)]
        if cal_k is not None:
            row["kappa(paper eps)"] = float(cal_k[i])
            row["sigma(paper eps)"] = float(cal_s[i])
        row["note"] = ("reproduced" if abs(_pct(best, e_paper)) <= 2.0 else
                       "only with the paper's unsound interpolation" if abs(_pct(a2p, e_paper)) <= 0.5 else
                       "approach 1 exact optimiser (paper: grid)" if best < e_paper else "differs")
        rows_iv.append(row)
    fig = _figure(os.path.join(workdir, "eps_vs_kappa.png"), grid, g1, g2, g2p,
                  [r[0] for r in config.table_i] + list(config.table_iv_kappa),
                  [r[1] for r in config.table_i] + list(config.table_iv_eps))
    elapsed = time.time() - t0

    gauss_dev = max(abs(r["diff % (sigma)"]) for r in rows_iv)
    key = "diff % (paper's approach)"
    t1_main = [r for r in rows_i if r["kappa"] in (100, 125, 200)]
    t1_low = [r for r in rows_i if r["kappa"] in (25, 50, 75)]
    table_i = markdown_table(_paper_as_printed(rows_i), list(rows_i[0].keys()))
    table_iv = markdown_table(_paper_as_printed(rows_iv), list(rows_iv[0].keys()))
    report = f"""# Biswas et al.: Table I and Table IV recomputed by recon_jax.accounting

**Setting.** p = {p}, q = {config.batch_size}/{config.dataset_size}, delta = 1/{config.dataset_size}. VMF epsilons
compose over N = {n_ep} *epochs* as in the paper (``compositions={n_ep}``); the Gaussian row is DP-SGD composed
over {steps} *steps* (= ceil(epochs / q)), which is what reproduces the paper's sigma -> eps row. Float64.

## Table I (kappa -> eps, approach 1 vs 2)

{table_i}

## Table IV (eps <-> kappa <-> sigma)

{table_iv}

![eps vs kappa](eps_vs_kappa.png)

**Summary.** Table I approach 2 at kappa in {{100, 125, 200}}: max deviation
{max(abs(r[key]) for r in t1_main):.2f}%. Approach 1 at kappa in {{25, 50, 75}}: our
exact optimiser is {min(r[key] for r in t1_low):.2f}% to {max(r[key] for r in t1_low):.2f}% relative to the
paper's grid search. Gaussian
sigma -> eps row: max deviation {gauss_dev:.2f}%. The paper's kappa = 150 and kappa = 300 cells are reproduced only by
interpolating the subsampled RDP itself (not its cumulant) between integer orders, which Wang et al.'s Cor. 10
does not justify, and which the paper did not apply to its other cells. Composing the VMF mechanism over steps
(the count a DP-SGD guarantee needs; column "VMF eps over steps" when enabled) gives much larger epsilons with the
paper's two approaches than its 3-epoch count; column "VMF eps over steps (PLD)" is the tight bound over the
same steps (the VMF privacy loss distribution, composed), and "Gauss eps(sigma) (PLD)" the Gaussian's.
Details: experiments/biswas_tables.md. Runtime {elapsed:.1f} s.
"""
    result = {"table_i": rows_i, "table_iv": rows_iv, "gaussian_max_abs_diff_pct": gauss_dev,
              "table_i_approach2_max_abs_diff_pct": max(abs(r["diff % (paper's approach)"]) for r in t1_main),
              "table_i_approach1_diff_pct": [r["diff % (paper's approach)"] for r in t1_low],
              "steps": steps, "figures": [os.path.basename(fig)], "runtime_seconds": elapsed}
    tol = float(config.reproduce_within_pct)
    approach1 = result["table_i_approach1_diff_pct"]
    vmf_off = [r for r in rows_iv if abs(r["diff %"]) > tol]
    claims = [
        claim(f"Table I, approach 2 at kappa 100, 125, 200 reproduced within {tol:g}%",
              detail=f"max |diff| {result['table_i_approach2_max_abs_diff_pct']:.2f}%",
              comparisons=[comparison("max |diff| %", result["table_i_approach2_max_abs_diff_pct"], "<=", tol)]),
        claim("Table I, approach 1 at kappa 25, 50, 75: our exact optimiser never above the paper's grid search",
              detail="diffs " + ", ".join(f"{x:.2f}%" for x in approach1),
              comparisons=[comparison("max diff %", max(approach1), "<=", 0.0)]),
        claim(f"Table IV, Gaussian sigma -> eps row reproduced within {tol:g}% (composed over steps)",
              detail=f"max |diff| {gauss_dev:.2f}%", comparisons=[comparison("max |diff| %", gauss_dev, "<=", tol)]),
        claim(f"Table IV, every VMF kappa -> eps cell reproduced within {tol:g}% by a sound bound",
              detail=f"cells off by more than {tol:g}%: " + (", ".join(f"kappa {r['kappa']} ({r['diff %']:+.1f}%)"
                                                                   for r in vmf_off) or "none"),
              comparisons=[comparison("max |diff| %", max(abs(r["diff %"]) for r in rows_iv), "<=", tol)]),
    ]
    if pld_col:
        worse = [r for r in rows_iv if r["VMF eps over steps (PLD)"] > r["paper eps"]]
        claims.append(claim(
            "Table IV's VMF eps (3 epochs) is a valid DP-SGD guarantee, i.e. not below the tight per-step eps",
            detail=f"tight PLD eps over {steps} steps exceeds the paper's eps at {len(worse)} of {len(rows_iv)} "
            "kappas" + (f" (e.g. kappa {worse[0]['kappa']}: {worse[0]['VMF eps over steps (PLD)']:.4g} vs "
                        f"{worse[0]['paper eps']})" if worse else ""),
            comparisons=[comparison("kappas where the tight eps exceeds the paper's", len(worse), "<=", 0)]))
    print(report)
    return finish_run(run_info, result, report, claims)


if __name__ == "__main__":
    launch(run, "experiments/configs/biswas_tables.py:default", "runs/biswas_tables")
