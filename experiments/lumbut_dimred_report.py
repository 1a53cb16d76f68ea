"""The report of :mod:`experiments.lumbut_dimred`: report.md's text, the paper's findings checked on the run, the
claims (paired tests over the test images) and the figures.

It also holds what the run shares with them: the method labels (``srp`` is run once per SRP density, ``srp`` /
``srp_auto``; :func:`expand`, :func:`srp_label`, :func:`base_method`) and the paper's Table 4 (``PAPER_TABLE4``, copied
into metrics.json).
"""

from __future__ import annotations

import os

import numpy as np

from experiments.common import claim, comparison, paired_comparison



# Paper values (Lumbut & Ponnoprat, Table 4, MNIST, |D-| = 199): (mean, std) of the test MSE.
PAPER_TABLE4 = {
    "mlp": {"pca": (0.056, 0.004), "srp": (0.079, 0.008), "mds": (0.075, 0.006), "isomap": (0.068, 0.003),
            "tsne": (0.077, 0.001), "umap": (0.079, 0.001)},
    "split": {"pca": (0.037, 0.004), "srp": (0.082, 0.003), "mds": (0.074, 0.001), "isomap": (0.055, 0.004),
              "tsne": (0.074, 0.004), "umap": (0.079, 0.017)},
}


def srp_label(density) -> str:
    return "srp" if density == "paper" else f"srp_{density}"


def expand(config, methods) -> list[str]:
    """Method labels: ``srp`` is run once per entry of ``srp_densities`` (``srp`` = 1/d, ``srp_auto`` = 1/sqrt(d))."""
    out = []
    for m in methods:
        out += [srp_label(d) for d in config.srp_densities] if m == "srp" else [m]
    return out


def base_method(label: str) -> str:
    return "srp" if label.startswith("srp") else label


def _lookup(metrics, method, policy, size, net):
    for s in metrics["summary"]:
        if (s["method"], s["policy"], s["size"], s["net"]) == (method, policy, size, net):
            return s
    return None


def _fmt(s):
    """A cell: mean ± spread over the repeats (one repeat has no spread to show)."""
    if s is None:
        return "—"
    return f"{s['mean']:.4f} (r=1)" if s["repeats"] < 2 else f"{s['mean']:.4f} ± {s['std']:.4f} (r={s['repeats']})"


def _paper(net, label):
    return PAPER_TABLE4[net][base_method(label)]


def _t4(config, method):
    return config.slow_table4_size if method in expand(config, config.slow_methods) else config.table4_size


def report(metrics, config):
    methods = expand(config, config.fast_methods) + expand(config, config.slow_methods)
    lines = [f"# Lumbut & Ponnoprat: reconstruction from DR embeddings ({config.variant})", ""]
    lines += [f"Dataset: {config.dataset}; shadow splits {config.n_train}/{config.n_val}/{config.n_test} "
              f"({', '.join(config.fast_methods)}) and {config.slow_n_train}/{config.slow_n_val}/{config.slow_n_test} "
              f"({', '.join(config.slow_methods)}); decoder width {config.width} (paper 64), Adam lr "
              f"{config.learning_rate} (paper 1e-5), <= {config.max_epochs} epochs, patience {config.patience}, "
              f"early stopping keeps the best-validation model. Data embedded at scale {config.data_scale:g} "
              f"(8-bit pixels), so the noise sigma is on the 0-255 scale as in the paper. Runtime "
              f"{metrics['seconds_total']:.0f} s for {metrics['grid_points']} grid points"
              + (f" ({metrics['grid_points_restored']} restored from an earlier segment's cache; the grid points "
                 f"took {metrics['seconds_grid_points']:.0f} s in all)" if metrics.get("grid_points_restored") else "")
              + ".", ""]
    if metrics["grid_points_skipped"]:
        lines += [f"**PARTIAL RUN**: the time budget ran out; {metrics['grid_points']} of "
                  f"{metrics['grid_points_total']} grid points were computed (— marks missing cells).", ""]
    zc = metrics["zero_column_share"]
    lines += [f"Method options: SRP at densities {list(config.srp_densities)} ('paper' = 1/d as in eq. 2, label "
              "`srp`; 'auto' = 1/sqrt(d), scikit-learn's default, label `srp_auto`; the paper does not say which its "
              "numbers used); share of all-zero embedding columns: "
              + ", ".join(f"{m} {100 * zc[m]:.1f}%" for m in zc if m.startswith("srp"))
              + f". MDS metric SMACOF, random init, n_init={config.mds_n_init}; Isomap 5 neighbours (dense "
              f"eigensolver); t-SNE init={config.tsne_init!r} ('random': every fresh seed draws its own "
              "initialisation; scikit-learn's default 'pca' is effectively deterministic at small |D-|), perplexity "
              f"min(30, (n-1)/3); UMAP n_neighbors min(15, n-1). Target in row {config.target_row}. Noise is added "
              "to every row of the dataset before embedding.", ""]
    base = metrics["mean_image_mse"]
    lines += [f"Trivial baseline (predict the mean training image): MSE {base:.4f}." if base is not None else "", ""]
    sizes = sorted(set(list(config.sizes) + list(config.slow_sizes)))
    lines += ["## Figure 2 analogue: test MSE vs |D-| (split network, fresh seeds)", ""]
    if "split" in config.nets:
        lines += ["| method | " + " | ".join(f"|D-|={s}" for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
        for m in methods:
            lines.append(f"| {m} | " + " | ".join(_fmt(_lookup(metrics, m, "fresh", s, "split")) for s in sizes)
                         + " |")
    else:
        lines.append(_not_run(config, "the split network", "nets"))
    lines += ["", "## Table 4 analogue: split encoder vs Balle et al. MLP (paper: |D-| = 199)", "",
              "| method | |D-| | ours: split | ours: MLP | paper: split | paper: MLP |", "|---|---|---|---|---|---|"]
    for m in methods:
        ps, pm, t4 = _paper("split", m), _paper("mlp", m), _t4(config, m)
        lines.append(f"| {m} | {t4} | {_fmt(_lookup(metrics, m, 'fresh', t4, 'split'))} | "
                     f"{_fmt(_lookup(metrics, m, 'fresh', t4, 'mlp'))} | {ps[0]:.3f} ± {ps[1]:.3f} | "
                     f"{pm[0]:.3f} ± {pm[1]:.3f} |")
    lines += ["", "## Known vs fresh seeds (randomised methods)", ""]
    if config.seed_methods and config.seed_sizes and "split" in config.nets:
        lines += ["| method | |D-| | known seed | fresh seed |", "|---|---|---|---|"]
        for m in expand(config, config.seed_methods):
            for s in config.seed_sizes:
                lines.append(f"| {m} | {s} | {_fmt(_lookup(metrics, m, 'known', s, 'split'))} | "
                             f"{_fmt(_lookup(metrics, m, 'fresh', s, 'split'))} |")
    else:
        lines.append(_not_run(config, "the seed comparison", "seed_methods, seed_sizes and nets"))
    lines += ["", f"## Figure 6 analogue: noise defence at |D-| = {config.noise_size}", ""]
    if metrics["noise"]:
        lines += ["MSE between reconstructions from clean and from noisy-data embeddings (per pixel; paper eq. 12 / "
                  "784), and in brackets the MSE of the noisy-data reconstruction to the true image.", "",
                  "| method | " + " | ".join(f"sigma={s:g}" for s in config.noise_sigmas) + " |",
                  "|---" * (len(config.noise_sigmas) + 1) + "|"]
    else:  # the defence is measured with the split network at noise_size, fresh seeds, first repeat
        lines.append(_not_run(config, "the noise defence, measured with the split network", "noise_size, "
                              "noise_sigmas and nets"))
    for m, nz in metrics["noise"].items():
        lines.append(f"| {m} | " + " | ".join(
            f"{nz[f'{s:g}']['mse_vs_clean_recon']:.4f} ({nz[f'{s:g}']['mse_vs_true']:.4f})" if f"{s:g}" in nz else "—"
            for s in config.noise_sigmas) + " |")
    lines += ["", "## The paper's findings, checked on this run", "",
              "Point estimates (mean MSEs); the Claims section below decides the two headline findings with paired "
              "tests over the test images.", ""] + _findings(metrics, config)
    lines += ["", "Figures: fig2_mse_vs_size.png, fig3_reconstructions.png, fig6_noise_defence.png, "
              "seed_policy.png.", ""]
    return "\n".join(lines)


def _not_run(config, what: str, fields: str) -> str:
    """The line a section shows when this variant does not run it (rather than a table of dashes)."""
    return f"Not run in the `{config.variant}` variant ({what}; see the config's {fields})."


def _findings(metrics, config) -> list[str]:
    """One line per finding of the paper: reproduced, not reproduced, or not testable with this grid.

    Methods are compared at the largest |D-| that every method of this run was evaluated at (split network,
    fresh seeds). The fast and slow methods may use different shadow-split sizes (see the first paragraph);
    the comparison says so when they do.
    """
    methods = expand(config, config.fast_methods) + expand(config, config.slow_methods)
    common = [s for s in sorted(set(config.sizes) | set(config.slow_sizes))
              if all(_lookup(metrics, m, "fresh", s, "split") for m in methods)]
    out = []

    def verdict(ok):
        return "**reproduced**" if ok else "**not reproduced**"

    if common and len(methods) > 1:
        size = common[-1]
        mse = {m: _lookup(metrics, m, "fresh", size, "split")["mean"] for m in methods}
        order = sorted(mse, key=mse.get)
        unequal = (config.slow_methods and (config.n_train, config.n_val, config.n_test)
                   != (config.slow_n_train, config.slow_n_val, config.slow_n_test))
        note = " (fast and slow methods trained on different shadow-split sizes: compare with care)" if unequal else ""
        out.append(f"- Vulnerability order at |D-| = {size} (lowest MSE first): "
                   + ", ".join(f"{m} {mse[m]:.4f}" for m in order) + note + ".")
        pca_first = "pca" in mse and all(mse["pca"] < v for m, v in mse.items() if m != "pca")  # a tie is not
        out.append(f"- PCA most vulnerable: {verdict(pca_first)}." if "pca" in mse else
                   "- PCA most vulnerable: not testable (PCA not run).")
        det = [m for m in ("pca", "isomap") if m in mse]
        rnd = [m for m in mse if base_method(m) in ("srp", "mds", "tsne", "umap")]
        if det and rnd:
            ok = max(mse[m] for m in det) < min(mse[m] for m in rnd)
            out.append(f"- Deterministic methods ({', '.join(det)}) easier than randomised ones ({', '.join(rnd)}) "
                       f"under fresh seeds: {verdict(ok)}.")
        for srp in [m for m in mse if m.startswith("srp")]:
            rest = [m for m in order if not m.startswith("srp")]
            last = all(mse[srp] > mse[m] for m in rest)  # strictly: a tie (a collapsed decoder) is not a finding
            out.append(f"- SRP least vulnerable ({srp}, against the non-SRP methods): {verdict(last)}"
                       + ("" if last or not rest else f" (least vulnerable here: {rest[-1]}, MSE {mse[rest[-1]]:.4f} "
                                                     f"against {mse[srp]:.4f})") + ".")
    else:
        out.append("- Method ranking: not testable (no |D-| common to all methods in this grid).")
    for m in ("pca", "isomap"):
        t4 = _t4(config, m)
        sp, ml = _lookup(metrics, m, "fresh", t4, "split"), _lookup(metrics, m, "fresh", t4, "mlp")
        if sp and ml:
            out.append(f"- Split encoder beats the MLP baseline on {m} at |D-| = {t4}: {verdict(sp['mean'] < ml['mean'])} "
                       f"({sp['mean']:.4f} vs {ml['mean']:.4f}; paper {PAPER_TABLE4['split'][m][0]:.3f} vs "
                       f"{PAPER_TABLE4['mlp'][m][0]:.3f}).")
    base = metrics["mean_image_mse"]
    if base is None:
        return out
    worse = [m for m in methods if (_lookup(metrics, m, "fresh", common[-1], "split") or {}).get("mean", 0) > base] \
        if common else []
    if worse:
        out.append(f"- Methods whose reconstructions are no better than the mean training image (MSE {base:.4f}): "
                   f"{', '.join(worse)} (as in the paper, where the randomised methods sit near 0.075-0.08).")
    return out


def _paired(results, a, b, size, what, relation, alpha) -> tuple[dict, str]:
    """``mean MSE(a) - mean MSE(b) <relation> 0`` on the same test images, as a paired t-test over them (the
    per-image differences averaged over the repeats both have: same |D-| and known set per repeat, same test
    images). ``a`` and ``b`` are ``(method, net)``. Undecided (no interval) unless both sides ran on equal shadow
    splits and kept their per-image MSEs. Returns the comparison and a note on what it rests on."""
    def points(method, net):
        return {r["rep"]: r for r in results if r["method"] == method and r["policy"] == "fresh"
                and r["size"] == size and f"{net}_mse" in r}

    pa, pb = points(*a), points(*b)
    reps = sorted(set(pa) & set(pb))
    mean_a = float(np.mean([pa[r][f"{a[1]}_mse"] for r in reps])) if reps else float("nan")
    mean_b = float(np.mean([pb[r][f"{b[1]}_mse"] for r in reps])) if reps else float("nan")
    shape = lambda r: (r["n_train"], r["n_val"], r["n_test"])  # noqa: E731
    why = None
    if not reps:
        why = "no repeat has both"
    elif any(shape(pa[r]) != shape(pb[r]) for r in reps):
        why = f"unequal shadow splits ({shape(pa[reps[0]])} vs {shape(pb[reps[0]])})"
    elif any(f"{a[1]}_per_example_mse" not in pa[r] or f"{b[1]}_per_example_mse" not in pb[r] for r in reps):
        why = "per-image MSEs not kept (points from before they were)"
    if why is not None:
        value = mean_a - mean_b if reps else 0.0
        return comparison(what, value, relation, 0.0, interval=(None, None)), f"{what}: undecided, {why}"
    per_a = np.mean([pa[r][f"{a[1]}_per_example_mse"] for r in reps], axis=0)
    per_b = np.mean([pb[r][f"{b[1]}_per_example_mse"] for r in reps], axis=0)
    c = paired_comparison(what, per_a, per_b, relation, alpha=alpha)
    lo, hi = c["interval"]
    span = "too few images" if lo is None else f"[{lo:+.4f}, {hi:+.4f}]"
    return c, f"{what} {c['value']:+.4f} {span} over {per_a.size} images x {len(reps)} repeats"


def claims(metrics, config, results) -> list[dict]:
    """The paper's headline findings (split network, fresh seeds), each a comparison of methods or networks run at
    equal sizes, decided by paired t-tests over the test images at claim_alpha shared among the claim's
    comparisons (Bonferroni)."""
    methods = expand(config, config.fast_methods) + expand(config, config.slow_methods)
    common = [s for s in sorted(set(config.sizes) | set(config.slow_sizes))
              if all(_lookup(metrics, m, "fresh", s, "split") for m in methods)]
    alpha = float(config.claim_alpha)
    claims = []
    if common and "pca" in methods and len(methods) > 1:
        size = common[-1]
        mse = {m: _lookup(metrics, m, "fresh", size, "split")["mean"] for m in methods}
        others = [m for m in methods if m != "pca"]
        comps, notes = zip(*(_paired(results, (m, "split"), ("pca", "split"), size, f"{m} - pca MSE", ">=",
                                     alpha / len(others)) for m in others))
        claims.append(claim(
            f"Lumbut & Ponnoprat Sec. 5: PCA is the most vulnerable method (lowest MSE, |D-| = {size})",
            detail=", ".join(f"{m} {v:.4f}" for m, v in sorted(mse.items(), key=lambda t: t[1]))
            + f"; paired differences (interval of a one-sided t-test at {alpha / len(others):.3g} each): "
            + "; ".join(notes), comparisons=list(comps)))
    pairs = []
    for m in ("pca", "isomap"):
        t4 = _t4(config, m)
        sp, ml = _lookup(metrics, m, "fresh", t4, "split"), _lookup(metrics, m, "fresh", t4, "mlp")
        if sp and ml:
            pairs.append((m, t4, sp["mean"], ml["mean"]))
    if pairs:
        comps, notes = zip(*(_paired(results, (m, "split"), (m, "mlp"), t, f"{m}: split - MLP MSE", "<=",
                                     alpha / len(pairs)) for m, t, _, _ in pairs))
        claims.append(claim(
            "Lumbut & Ponnoprat Table 4: the split network beats the Balle et al. MLP on PCA and Isomap",
            detail="; ".join(f"{m} at |D-| = {t}: split {sp:.4f} vs MLP {ml:.4f}" for m, t, sp, ml in pairs)
            + f"; paired differences (interval of a one-sided t-test at {alpha / len(pairs):.3g} each): "
            + "; ".join(notes), comparisons=list(comps)))
    return claims


def figures(results, metrics, config, workdir, points_dir) -> list[str]:
    """Draws the figures; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []

    def save(fig, name):
        fig.savefig(os.path.join(workdir, name), dpi=120)
        plt.close(fig)
        names.append(name)

    methods = expand(config, config.fast_methods) + expand(config, config.slow_methods)
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in methods:
        pts = sorted((s["size"], s["mean"], s["std"]) for s in metrics["summary"]
                     if s["method"] == m and s["policy"] == "fresh" and s["net"] == "split")
        if pts:
            x, y, e = zip(*pts)
            ax.errorbar(x, y, yerr=e, marker="o", capsize=3, label=m)
    ax.axhline(metrics["mean_image_mse"], color="gray", ls=":", label="mean image")
    ax.set_xscale("log")
    ax.set_xlabel("|D-|")
    ax.set_ylabel("test MSE")
    ax.set_title("Reconstruction MSE vs known-member set size")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, "fig2_mse_vs_size.png")

    # Reconstruction grid: rows = methods, columns = original + sizes (rep 0, fresh, first test image).
    sizes = sorted(set(list(config.sizes) + list(config.slow_sizes)))
    fig, axes = plt.subplots(len(methods), len(sizes) + 1, figsize=(1.3 * (len(sizes) + 1), 1.3 * len(methods)),
                             squeeze=False)
    for i, m in enumerate(methods):
        for j in range(len(sizes) + 1):
            axes[i, j].axis("off")
        for j, s in enumerate(sizes):
            p = os.path.join(points_dir, f"{m}_fresh_n{s}_r0_recon.npz")
            if os.path.exists(p):
                with np.load(p) as f:
                    axes[i, 0].imshow(f["truth"][0, ..., 0], cmap="gray", vmin=0, vmax=1)
                    net = "split" if "split" in f else "mlp"
                    axes[i, j + 1].imshow(f[net][0, ..., 0], cmap="gray", vmin=0, vmax=1)
            if i == 0:
                axes[i, j + 1].set_title(f"|D-|={s}", fontsize=7)
        axes[i, 0].set_title(m, fontsize=7, loc="left")
    fig.tight_layout()
    save(fig, "fig3_reconstructions.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, nz in metrics["noise"].items():
        xs = [s for s in config.noise_sigmas if f"{s:g}" in nz]
        ax.plot(xs, [nz[f"{s:g}"]["mse_vs_clean_recon"] for s in xs], marker="o", label=m)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("noise sigma (0-255 pixel scale)")
    ax.set_ylabel("MSE(clean recon, noisy recon)")
    ax.set_title(f"Additive-noise defence, |D-| = {config.noise_size}")
    _legend_or_note(ax, bool(metrics["noise"]), "no noise-defence points in this run")
    fig.tight_layout()
    save(fig, "fig6_noise_defence.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    labels, known, fresh = [], [], []
    for m in expand(config, config.seed_methods):
        for s in config.seed_sizes:
            k, f = _lookup(metrics, m, "known", s, "split"), _lookup(metrics, m, "fresh", s, "split")
            if k and f:
                labels.append(f"{m}\n|D-|={s}")
                known.append((k["mean"], k["std"]))
                fresh.append((f["mean"], f["std"]))
    if labels:
        x = np.arange(len(labels))
        ax.bar(x - 0.2, [v[0] for v in known], 0.4, yerr=[v[1] for v in known], label="known seed")
        ax.bar(x + 0.2, [v[0] for v in fresh], 0.4, yerr=[v[1] for v in fresh], label="fresh seed")
        ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("test MSE")
    ax.set_title("Known vs fresh randomness")
    _legend_or_note(ax, bool(labels), "no point has both seed policies in this run")
    fig.tight_layout()
    save(fig, "seed_policy.png")
    return names


def _legend_or_note(ax, plotted: bool, note: str) -> None:
    """A legend for a plot with data; a note in the middle of an empty one (small configs)."""
    if plotted:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, fontsize=8)
