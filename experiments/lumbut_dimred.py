"""Reconstruction attack on dimensionality-reduction embeddings of MNIST (Lumbut & Ponnoprat).

    python -m experiments.lumbut_dimred --config=experiments/configs/lumbut_dimred.py:smoke --workdir=DIR

Reproduces, on the embedded MNIST: Figure 2 (test MSE vs |D-| per method, mean +- std over repeats), Table 4
(split encoder vs the Balle et al. MLP at |D-| = 199), Figure 3 (reconstruction grid), Figure 6 (additive
noise defence, networks trained on clean data) and adds known-seed vs fresh-seed results for the randomised
methods. Every grid point is saved atomically as it finishes (``points/``) and the shadow embeddings are stored
in resumable chunk stores (``shadows/``): re-running the same command resumes.

Shadow splits: a random subset of the images is split into public train / validation / test points; the known
members D- are drawn from the remaining images (one draw per (|D-|, repeat), shared by all methods). The test
points play the victim's targets: their embeddings ``M(D- u {x})`` use the same seed policy as the shadows.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from experiments.common import config_to_dict, experiment_flags, prepare_workdir, run_app, write_run_info
from recon_jax.attacks import dimred
from recon_jax.io import atomic_save_npz, atomic_write_json, atomic_write_text

_CONFIG, _WORKDIR = experiment_flags("experiments/configs/lumbut_dimred.py", "runs/lumbut_dimred")

# Paper values (Lumbut & Ponnoprat, Table 4, MNIST, |D-| = 199): (mean, std) of the test MSE.
PAPER_TABLE4 = {
    "mlp": {"pca": (0.056, 0.004), "srp": (0.079, 0.008), "mds": (0.075, 0.006), "isomap": (0.068, 0.003),
            "tsne": (0.077, 0.001), "umap": (0.079, 0.001)},
    "split": {"pca": (0.037, 0.004), "srp": (0.082, 0.003), "mds": (0.074, 0.001), "isomap": (0.055, 0.004),
              "tsne": (0.074, 0.004), "umap": (0.079, 0.017)},
}


def _method_opts(config, method):
    if method == "srp":
        d = config.srp_density
        return {"density": d if isinstance(d, str) else float(d)}
    if method == "mds":
        return {"n_init": int(config.mds_n_init)}
    if method == "tsne":
        return {"init": str(config.tsne_init)}
    return {}


def _load_images(config, n_needed):
    from recon_jax.data import load_dataset

    if config.dataset == "mnist":
        images, _ = load_dataset("mnist", "train")
    elif config.dataset == "synthetic":
        images, _ = load_dataset("synthetic", "train", num_examples=n_needed, shape=(28, 28, 1), seed=config.seed)
    else:
        raise ValueError(f"dataset must be 'mnist' or 'synthetic', got {config.dataset!r}")
    return np.asarray(images, np.float32)


def _grid(config):
    """Grid points in priority order (so an interrupted run has a complete picture early)."""
    pts = []
    fast, slow = list(config.fast_methods), list(config.slow_methods)
    for rep in range(max(config.repeats, config.slow_repeats)):
        # Table-4 size first, then the others.
        for size in sorted(config.sizes, key=lambda s: (s != config.table4_size, s)):
            if rep < config.repeats:
                pts += [(m, "fresh", size, rep) for m in fast]
        if rep < config.slow_repeats:
            for size in config.slow_sizes:
                pts += [(m, "fresh", size, rep) for m in slow]
        for size in config.seed_sizes:
            for m in config.seed_methods:
                reps = config.repeats if m in fast else config.slow_repeats
                if rep < reps and m in fast + slow:
                    pts.append((m, "known", size, rep))
    return pts


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def run(config, workdir: str) -> dict:
    """Runs the experiment and writes report.md, metrics.json, config.json and figures to ``workdir``."""
    t0 = time.time()
    workdir = prepare_workdir(workdir)
    write_run_info(workdir, config, seed=config.seed)
    fast, slow = list(config.fast_methods), list(config.slow_methods)
    n_pub = config.n_train + config.n_val + config.n_test
    max_size = max(list(config.sizes) + list(config.slow_sizes) + list(config.seed_sizes) + [config.noise_size])
    images = _load_images(config, n_pub + max_size + 100)
    if images.shape[0] < n_pub + max_size:
        raise ValueError(f"dataset has {images.shape[0]} images, need {n_pub + max_size}")
    flat = images.reshape(images.shape[0], -1)
    rng = np.random.default_rng(config.seed)
    perm = rng.permutation(images.shape[0])
    tr_idx = perm[: config.n_train]
    va_idx = perm[config.n_train : config.n_train + config.n_val]
    te_idx = perm[config.n_train + config.n_val : n_pub]
    pool = perm[n_pub:]
    base_key = jax.random.key(config.seed)
    cfg = config_to_dict(config)
    run_hash = _hash({k: v for k, v in cfg.items() if k not in ("progress", "n_jobs", "chunk_size", "time_budget_s")})
    points_dir = os.path.join(workdir, "points")
    os.makedirs(points_dir, exist_ok=True)
    mean_image = images[tr_idx].mean(axis=0)

    def known_set(size, rep):
        r = np.random.default_rng([config.seed, size, rep])
        return flat[pool[r.choice(pool.shape[0], size, replace=False)]]

    results = []
    grid = _grid(config)
    skipped = 0
    for gi, (method, policy, size, rep) in enumerate(grid):
        tag = f"{method}_{policy}_n{size}_r{rep}"
        path = os.path.join(points_dir, f"{tag}.json")
        if os.path.exists(path):
            with open(path) as f:
                rec = json.load(f)
            if rec.get("run_hash") == run_hash:
                results.append(rec)
                continue
        if config.time_budget_s > 0 and time.time() - t0 > config.time_budget_s:
            skipped += 1  # out of time: report what is done (the report says PARTIAL)
            continue
        tp = time.time()
        is_slow = method in slow
        ntr, nva, nte = (
            (config.slow_n_train, config.slow_n_val, config.slow_n_test)
            if is_slow
            else (config.n_train, config.n_val, config.n_test)
        )
        known = known_set(size, rep)
        key = jax.random.fold_in(jax.random.fold_in(base_key, dimred.METHODS.index(method)), 1000 * size + rep)
        common = dict(
            seed_policy=policy,
            target_row=config.target_row,
            data_scale=config.data_scale,
            method_opts=_method_opts(config, method),
            chunk_size=config.chunk_size,
            n_jobs=config.n_jobs,
            progress=config.progress,
        )
        sdir = os.path.join(workdir, "shadows", tag)
        emb = {}
        for name, idx, off in (("train", tr_idx[:ntr], 0), ("val", va_idx[:nva], ntr), ("test", te_idx[:nte], ntr + nva)):
            emb[name] = dimred.shadow_embeddings(
                method, known, flat[idx], key, index_offset=off, store_dir=os.path.join(sdir, name), **common
            )
        y = {"train": images[tr_idx[:ntr]], "val": images[va_idx[:nva]], "test": images[te_idx[:nte]]}
        kinds = ["split"] + (["mlp"] if size == config.table4_size and policy == "fresh" else [])
        rec = {"run_hash": run_hash, "method": method, "policy": policy, "size": size, "rep": rep,
               "n_train": ntr, "n_val": nva, "n_test": nte,
               "mean_image_mse": float(np.mean((y["test"] - mean_image) ** 2))}
        recon_arrays = {}
        attacks = {}
        for kind in kinds:
            atk = dimred.fit_attack(
                kind, emb["train"], y["train"], emb["val"], y["val"], jax.random.fold_in(key, len(kind)),
                width=config.width, target_row=config.target_row, learning_rate=config.learning_rate,
                batch_size=config.batch_size, max_epochs=config.max_epochs, patience=config.patience,
                l1_weight=config.l1_weight, progress=config.progress,
            )
            rec_img = np.asarray(dimred.reconstruct(atk, emb["test"]))
            rec[f"{kind}_mse"] = float(np.mean(dimred.per_example_mse(rec_img, y["test"])))
            rec[f"{kind}_best_epoch"] = int(atk.fit.best_epoch)
            rec[f"{kind}_epochs"] = int(len(atk.fit.val_loss))
            recon_arrays[kind] = rec_img[: max(1, config.n_grid_images)]
            attacks[kind] = atk
        # Noise defence (Sec. 6): split network trained on clean shadows, victim data noised before embedding.
        if size == config.noise_size and policy == "fresh" and rep == 0:
            nn_test = min(nte, config.slow_noise_n_test if is_slow else config.noise_n_test)
            noise = {}
            for sigma in config.noise_sigmas:
                noisy = dimred.shadow_embeddings(
                    method, known, flat[te_idx[:nn_test]], key, index_offset=ntr + nva, noise_sigma=float(sigma),
                    noise_key=jax.random.fold_in(key, 77), store_dir=os.path.join(sdir, f"noise_{sigma:g}"), **common,
                )
                atk = attacks["split"]
                d_clean = float(np.mean(dimred.noise_defence_mse(atk, emb["test"][:nn_test], noisy)))
                d_true = float(np.mean(dimred.per_example_mse(dimred.reconstruct(atk, noisy), y["test"][:nn_test])))
                noise[f"{sigma:g}"] = {"mse_vs_clean_recon": d_clean, "mse_vs_true": d_true, "n_test": nn_test}
            rec["noise"] = noise
        rec["seconds"] = time.time() - tp
        atomic_save_npz(os.path.join(points_dir, f"{tag}_recon.npz"), truth=y["test"][: max(1, config.n_grid_images)],
                        **recon_arrays)
        atomic_write_json(path, rec)
        results.append(rec)
        if config.progress:
            print(f"[{gi + 1}/{len(grid)}] {tag}: " + ", ".join(
                f"{k}={rec[k]:.4f}" for k in rec if k.endswith("_mse")) + f" ({rec['seconds']:.0f}s)", flush=True)

    metrics = _aggregate(results, config)
    metrics["seconds_total"] = time.time() - t0
    metrics["grid_points"] = len(results)
    metrics["grid_points_total"] = len(grid)
    metrics["grid_points_skipped"] = skipped
    _figures(results, metrics, config, workdir)
    atomic_write_json(os.path.join(workdir, "metrics.json"), metrics)
    atomic_write_text(os.path.join(workdir, "report.md"), _report(metrics, config))
    return metrics


def _aggregate(results, config):
    groups = {}
    for r in results:
        for kind in ("split", "mlp"):
            if f"{kind}_mse" in r:
                groups.setdefault((r["method"], r["policy"], r["size"], kind), []).append(r[f"{kind}_mse"])
    summary = []
    for (m, p, s, k), v in sorted(groups.items()):
        summary.append({"method": m, "policy": p, "size": s, "net": k, "mean": float(np.mean(v)),
                        "std": float(np.std(v)), "repeats": len(v)})
    noise = {r["method"]: r["noise"] for r in results if "noise" in r}
    mean_img = float(np.mean([r["mean_image_mse"] for r in results])) if results else float("nan")
    return {"summary": summary, "noise": noise, "mean_image_mse": mean_img, "paper_table4": PAPER_TABLE4}


def _lookup(metrics, method, policy, size, net):
    for s in metrics["summary"]:
        if (s["method"], s["policy"], s["size"], s["net"]) == (method, policy, size, net):
            return s
    return None


def _fmt(s):
    return "—" if s is None else f"{s['mean']:.4f} ± {s['std']:.4f} (r={s['repeats']})"


def _report(metrics, config):
    methods = list(config.fast_methods) + list(config.slow_methods)
    lines = [f"# Lumbut & Ponnoprat: reconstruction from DR embeddings ({config.variant})", ""]
    lines += [f"Dataset: {config.dataset}; shadow splits {config.n_train}/{config.n_val}/{config.n_test} "
              f"({', '.join(config.fast_methods)}) and {config.slow_n_train}/{config.slow_n_val}/{config.slow_n_test} "
              f"({', '.join(config.slow_methods)}); decoder width {config.width} (paper 64), Adam lr "
              f"{config.learning_rate} (paper 1e-5), <= {config.max_epochs} epochs, patience {config.patience}, "
              f"early stopping keeps the best-validation model. Data embedded at scale {config.data_scale:g} "
              f"(8-bit pixels), so the noise sigma is on the 0-255 scale as in the paper. Runtime "
              f"{metrics['seconds_total']:.0f} s for {metrics['grid_points']} grid points.", ""]
    if metrics["grid_points_skipped"]:
        lines += [f"**PARTIAL RUN**: the time budget ran out; {metrics['grid_points']} of "
                  f"{metrics['grid_points_total']} grid points were computed (— marks missing cells).", ""]
    lines += [f"Method options: SRP density {config.srp_density!r} ('paper' = 1/d, eq. 2); MDS metric SMACOF, "
              f"random init, n_init={config.mds_n_init}; Isomap 5 neighbours (dense eigensolver); t-SNE "
              f"init={config.tsne_init!r} (scikit-learn default; with 'pca' the only randomness left is the "
              f"randomised SVD of the init), perplexity min(30, (n-1)/3); UMAP n_neighbors min(15, n-1). "
              f"Target in row {config.target_row}. Noise is added to every row of the dataset before embedding.", ""]
    lines += [f"Trivial baseline (predict the mean training image): MSE {metrics['mean_image_mse']:.4f}.", ""]
    sizes = sorted(set(list(config.sizes) + list(config.slow_sizes)))
    lines += ["## Figure 2 analogue: test MSE vs |D-| (split network, fresh seeds)", "",
              "| method | " + " | ".join(f"|D-|={s}" for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(_fmt(_lookup(metrics, m, "fresh", s, "split")) for s in sizes) + " |")
    t4 = config.table4_size
    lines += ["", f"## Table 4 analogue: split encoder vs Balle et al. MLP at |D-| = {t4}", "",
              "| method | ours: split | ours: MLP | paper: split | paper: MLP |", "|---|---|---|---|---|"]
    for m in methods:
        ps, pm = PAPER_TABLE4["split"][m], PAPER_TABLE4["mlp"][m]
        lines.append(f"| {m} | {_fmt(_lookup(metrics, m, 'fresh', t4, 'split'))} | "
                     f"{_fmt(_lookup(metrics, m, 'fresh', t4, 'mlp'))} | {ps[0]:.3f} ± {ps[1]:.3f} | "
                     f"{pm[0]:.3f} ± {pm[1]:.3f} |")
    lines += ["", "## Known vs fresh seeds (randomised methods)", "",
              "| method | |D-| | known seed | fresh seed |", "|---|---|---|---|"]
    for m in config.seed_methods:
        for s in config.seed_sizes:
            lines.append(f"| {m} | {s} | {_fmt(_lookup(metrics, m, 'known', s, 'split'))} | "
                         f"{_fmt(_lookup(metrics, m, 'fresh', s, 'split'))} |")
    lines += ["", f"## Figure 6 analogue: noise defence at |D-| = {config.noise_size}", "",
              "MSE between reconstructions from clean and from noisy-data embeddings (per pixel; paper eq. 12 / 784), "
              "and in brackets the MSE of the noisy-data reconstruction to the true image.", "",
              "| method | " + " | ".join(f"sigma={s:g}" for s in config.noise_sigmas) + " |",
              "|---" * (len(config.noise_sigmas) + 1) + "|"]
    for m, nz in metrics["noise"].items():
        lines.append(f"| {m} | " + " | ".join(
            f"{nz[f'{s:g}']['mse_vs_clean_recon']:.4f} ({nz[f'{s:g}']['mse_vs_true']:.4f})" if f"{s:g}" in nz else "—"
            for s in config.noise_sigmas) + " |")
    lines += ["", "## The paper's findings, checked on this run", ""] + _findings(metrics, config)
    lines += ["", "Figures: fig2_mse_vs_size.png, fig3_reconstructions.png, fig6_noise_defence.png, "
              "seed_policy.png.", ""]
    return "\n".join(lines)


def _findings(metrics, config) -> list[str]:
    """One line per finding of the paper: reproduced, not reproduced, or not testable with this grid.

    Methods are compared at the largest |D-| that every method of this run was evaluated at (split network,
    fresh seeds). The fast and slow methods may use different shadow-split sizes (see the first paragraph);
    the comparison says so when they do.
    """
    methods = list(config.fast_methods) + list(config.slow_methods)
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
        out.append(f"- PCA most vulnerable: {verdict(order[0] == 'pca')}." if "pca" in mse else
                   "- PCA most vulnerable: not testable (PCA not run).")
        det = [m for m in ("pca", "isomap") if m in mse]
        rnd = [m for m in ("srp", "mds", "tsne", "umap") if m in mse]
        if det and rnd:
            ok = max(mse[m] for m in det) < min(mse[m] for m in rnd)
            out.append(f"- Deterministic methods ({', '.join(det)}) easier than randomised ones ({', '.join(rnd)}) "
                       f"under fresh seeds: {verdict(ok)}.")
        if "srp" in mse:
            out.append(f"- SRP least vulnerable: {verdict(order[-1] == 'srp')}"
                       + ("" if order[-1] == "srp" else f" (least vulnerable here: {order[-1]})") + ".")
    else:
        out.append("- Method ranking: not testable (no |D-| common to all methods in this grid).")
    t4 = config.table4_size
    for m in ("pca", "isomap"):
        sp, ml = _lookup(metrics, m, "fresh", t4, "split"), _lookup(metrics, m, "fresh", t4, "mlp")
        if sp and ml:
            out.append(f"- Split encoder beats the MLP baseline on {m} at |D-| = {t4}: {verdict(sp['mean'] < ml['mean'])} "
                       f"({sp['mean']:.4f} vs {ml['mean']:.4f}; paper {PAPER_TABLE4['split'][m][0]:.3f} vs "
                       f"{PAPER_TABLE4['mlp'][m][0]:.3f}).")
    base = metrics["mean_image_mse"]
    worse = [m for m in methods if (_lookup(metrics, m, "fresh", common[-1], "split") or {}).get("mean", 0) > base] \
        if common else []
    if worse:
        out.append(f"- Methods whose reconstructions are no better than the mean training image (MSE {base:.4f}): "
                   f"{', '.join(worse)} (as in the paper, where the randomised methods sit near 0.075-0.08).")
    return out


def _figures(results, metrics, config, workdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(config.fast_methods) + list(config.slow_methods)
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
    fig.savefig(os.path.join(workdir, "fig2_mse_vs_size.png"), dpi=120)
    plt.close(fig)

    # Reconstruction grid: rows = methods, columns = original + sizes (rep 0, fresh, first test image).
    sizes = sorted(set(list(config.sizes) + list(config.slow_sizes)))
    fig, axes = plt.subplots(len(methods), len(sizes) + 1, figsize=(1.3 * (len(sizes) + 1), 1.3 * len(methods)),
                             squeeze=False)
    for i, m in enumerate(methods):
        for j in range(len(sizes) + 1):
            axes[i, j].axis("off")
        for j, s in enumerate(sizes):
            p = os.path.join(workdir, "points", f"{m}_fresh_n{s}_r0_recon.npz")
            if os.path.exists(p):
                with np.load(p) as f:
                    axes[i, 0].imshow(f["truth"][0, ..., 0], cmap="gray", vmin=0, vmax=1)
                    axes[i, j + 1].imshow(f["split"][0, ..., 0], cmap="gray", vmin=0, vmax=1)
            if i == 0:
                axes[i, j + 1].set_title(f"|D-|={s}", fontsize=7)
        axes[i, 0].set_title(m, fontsize=7, loc="left")
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "fig3_reconstructions.png"), dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, nz in metrics["noise"].items():
        xs = [s for s in config.noise_sigmas if f"{s:g}" in nz]
        ax.plot(xs, [nz[f"{s:g}"]["mse_vs_clean_recon"] for s in xs], marker="o", label=m)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("noise sigma (0-255 pixel scale)")
    ax.set_ylabel("MSE(clean recon, noisy recon)")
    ax.set_title(f"Additive-noise defence, |D-| = {config.noise_size}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "fig6_noise_defence.png"), dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    labels, known, fresh = [], [], []
    for m in config.seed_methods:
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
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "seed_policy.png"), dpi=120)
    plt.close(fig)


def main(argv):
    del argv
    metrics = run(_CONFIG.value, _WORKDIR.value)
    print(json.dumps({"seconds_total": metrics["seconds_total"], "grid_points": metrics["grid_points"]}))


if __name__ == "__main__":
    run_app(main)
