"""Reconstruction attack on dimensionality-reduction embeddings of MNIST (Lumbut & Ponnoprat).

    python -m experiments.lumbut_dimred --config=experiments/configs/lumbut_dimred.py:smoke --workdir=DIR

Reproduces, on the embedded MNIST: Figure 2 (test MSE vs |D-| per method, mean +- std over repeats), Table 4
(split encoder vs the Balle et al. MLP at |D-| = 199), Figure 3 (reconstruction grid), Figure 6 (additive
noise defence, networks trained on clean data) and adds known-seed vs fresh-seed results for the randomised
methods. Every grid point is saved atomically as it finishes (``points/``) and the shadow embeddings are stored
in resumable shadow stores (``shadow_stores/``, :func:`recon_jax.shadow.fill_store`): re-running the same command
resumes. (``shadows/`` directories of runs before the shared store are not read.)

Shadow splits: a random subset of the images is split into public train / validation / test points; the known
members D- are drawn from the remaining images (one draw per (|D-|, repeat), shared by all methods). The test
points play the victim's targets: their embeddings ``M(D- u {x})`` use the same seed policy as the shadows.

SRP runs at every density in ``srp_densities``: ``"paper"`` (1/d, the paper's eq. 2; label ``srp``) and
``"auto"`` (1/sqrt(d), scikit-learn's default, which the authors' published code would get from
``SparseRandomProjection()``; label ``srp_auto``). Which density produced the paper's numbers is not stated: the
text gives eq. 2, and the published code calls scikit-learn estimators with their defaults (it ships only the
Isomap case). At 1/d about one of the two columns of R is all zero on average on 784-pixel data, so the
embedding is often degenerate; the report gives the share of all-zero embedding columns.

t-SNE: ``tsne_init="random"`` (default) makes every fresh-seed run draw its own random initialisation, as the
paper describes t-SNE ("initialized with random states"); with scikit-learn's default ``"pca"`` init the only
randomness is a randomised SVD, which is effectively deterministic at small |D-|, so "fresh" seeds would not be
random there.

Data: ``dataset="mnist"`` (embedded), ``"synthetic"``, or ``"folder"``: a directory of PNG/JPEG images
(``folder_path``, resized to ``folder_image_size`` = 28 or 64, grayscale), e.g. the NIH Chest X-ray images at
64 x 64 with the paper's Table 5 decoder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import jax
import numpy as np

from experiments.common import (ConfigError, check_config, claim, comparison, config_to_dict, finish_run, keyed_dir,
                                launch, paired_comparison, require_finite, start_run)
from experiments.configs.lumbut_dimred import CHECKS
from recon_jax.attacks import dimred
from recon_jax.attacks.dimred_embed import METHODS
from recon_jax.attacks.reconn import reconstruct
from recon_jax.io import array_digest, atomic_save_npz, atomic_write_json


NETS = ("split", "mlp")  # the attack networks (config.nets); a network's key is fold_in(attack_key, its index)

# Paper values (Lumbut & Ponnoprat, Table 4, MNIST, |D-| = 199): (mean, std) of the test MSE.
PAPER_TABLE4 = {
    "mlp": {"pca": (0.056, 0.004), "srp": (0.079, 0.008), "mds": (0.075, 0.006), "isomap": (0.068, 0.003),
            "tsne": (0.077, 0.001), "umap": (0.079, 0.001)},
    "split": {"pca": (0.037, 0.004), "srp": (0.082, 0.003), "mds": (0.074, 0.001), "isomap": (0.055, 0.004),
              "tsne": (0.074, 0.004), "umap": (0.079, 0.017)},
}


def _srp_label(density) -> str:
    return "srp" if density == "paper" else f"srp_{density}"


def _expand(config, methods) -> list[str]:
    """Method labels: ``srp`` is run once per entry of ``srp_densities`` (``srp`` = 1/d, ``srp_auto`` = 1/sqrt(d))."""
    out = []
    for m in methods:
        out += [_srp_label(d) for d in config.srp_densities] if m == "srp" else [m]
    return out


def _base(label: str) -> str:
    return "srp" if label.startswith("srp") else label


def _method_opts(config, label):
    if label.startswith("srp"):
        d = next(d for d in config.srp_densities if _srp_label(d) == label)
        return {"density": d if isinstance(d, str) else float(d)}
    method = label
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
    elif config.dataset == "folder":
        if config.folder_image_size not in (28, 64):
            raise ValueError(f"folder_image_size must be 28 or 64 (the paper's decoders), got {config.folder_image_size}")
        images, _ = load_dataset("folder", "all", path=config.folder_path, image_size=config.folder_image_size,
                                 channels=1, labels=None, max_examples=config.folder_max_examples or None)
    else:
        raise ValueError(f"dataset must be 'mnist', 'synthetic' or 'folder', got {config.dataset!r}")
    return np.asarray(images, np.float32)


def _grid(config):
    """Grid points in priority order (so an interrupted run has a complete picture early)."""
    pts = []
    fast, slow = _expand(config, config.fast_methods), _expand(config, config.slow_methods)
    for rep in range(max(config.repeats, config.slow_repeats)):
        # Table-4 size first, then the others.
        for size in sorted(config.sizes, key=lambda s: (s != config.table4_size, s)):
            if rep < config.repeats:
                pts += [(m, "fresh", size, rep) for m in fast]
        if rep < config.slow_repeats:
            for size in config.slow_sizes:
                pts += [(m, "fresh", size, rep) for m in slow]
        for size in config.seed_sizes:
            for m in _expand(config, config.seed_methods):
                reps = config.repeats if m in fast else config.slow_repeats
                if rep < reps and m in fast + slow:
                    pts.append((m, "known", size, rep))
    return pts


_EXECUTION_FIELDS = ("progress", "n_jobs", "chunk_size", "time_budget_s")
_CLAIM_FIELDS = ("claim_alpha",)  # how the claims read the points, not what the points are


def run(config, workdir: str) -> dict:
    """Runs the experiment and writes report.md, metrics.json, config.json and figures to ``workdir``."""
    check_config(config, CHECKS)  # before anything is written to workdir
    t0 = time.time()
    n_pub = config.n_train + config.n_val + config.n_test
    max_size = max(list(config.sizes) + list(config.slow_sizes) + list(config.seed_sizes) + [config.noise_size])
    images = _load_images(config, n_pub + max_size + 100)
    if images.shape[0] < n_pub + max_size:
        raise ConfigError(f"config.n_train + n_val + n_test + the largest of sizes, slow_sizes, seed_sizes and "
                          f"noise_size: must be at most the {images.shape[0]} images of {config.dataset!r}, got "
                          f"{n_pub} + {max_size} = {n_pub + max_size}")
    run_info = start_run(workdir, config, seed=config.seed)
    workdir = run_info.workdir
    fast, slow = _expand(config, config.fast_methods), _expand(config, config.slow_methods)
    flat = images.reshape(images.shape[0], -1)
    rng = np.random.default_rng(config.seed)
    perm = rng.permutation(images.shape[0])
    tr_idx = perm[: config.n_train]
    va_idx = perm[config.n_train : config.n_train + config.n_val]
    te_idx = perm[config.n_train + config.n_val : n_pub]
    pool = perm[n_pub:]
    base_key = jax.random.key(config.seed)
    cfg = config_to_dict(config)
    # Every grid point and shadow store lives under a directory keyed by the config (execution-only fields
    # aside) and the images' digest (a folder is named in the config by its path only), so a run with another
    # config or other images never finds, and never reports, old results.
    key = {k: v for k, v in cfg.items() if k not in _EXECUTION_FIELDS + _CLAIM_FIELDS}
    cache = keyed_dir(workdir, "cache", {**key, "images": array_digest(images)})
    points_dir = os.path.join(cache, "points")
    os.makedirs(points_dir, exist_ok=True)
    mean_image = images[tr_idx].mean(axis=0)
    training = dimred.AttackTrainingSpec(width=config.width, learning_rate=config.learning_rate,
                                         batch_size=config.batch_size, max_epochs=config.max_epochs,
                                         patience=config.patience, l1_weight=config.l1_weight)

    def known_set(size, rep):
        r = np.random.default_rng([config.seed, size, rep])
        return flat[pool[r.choice(pool.shape[0], size, replace=False)]]

    results = []
    grid = _grid(config)
    skipped = 0
    restored = 0
    for gi, (method, policy, size, rep) in enumerate(grid):
        tag = f"{method}_{policy}_n{size}_r{rep}"
        path = os.path.join(points_dir, f"{tag}.json")
        if os.path.exists(path):
            with open(path) as f:
                results.append(json.load(f))
            restored += 1
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
        base = _base(method)
        key, attack_key, noise_key = point_keys(base_key, base, size, rep)
        embedding = dimred.EmbeddingSpec(method=base, method_opts=_method_opts(config, method), seed_policy=policy,
                                         data_scale=config.data_scale)
        common = dict(target_row=config.target_row, chunk_size=config.chunk_size, n_jobs=config.n_jobs,
                      progress=config.progress)
        sdir = os.path.join(cache, "shadow_stores", tag)
        emb = {}
        for name, idx, off in (("train", tr_idx[:ntr], 0), ("val", va_idx[:nva], ntr), ("test", te_idx[:nte], ntr + nva)):
            emb[name] = dimred.shadow_embeddings(
                embedding, known, flat[idx], key, index_offset=off, store_dir=os.path.join(sdir, name), **common
            )
            require_finite(emb[name], f"{method} shadow embeddings ({name})", "embedding solver diverged?")
        y = {"train": images[tr_idx[:ntr]], "val": images[va_idx[:nva]], "test": images[te_idx[:nte]]}
        t4 = config.slow_table4_size if is_slow else config.table4_size
        kinds = [k for k in config.nets if k == "split" or (size == t4 and policy == "fresh")]
        cols = np.asarray(emb["test"]).reshape(nte, size + 1, 2)
        rec = {"method": method, "policy": policy, "size": size, "rep": rep,
               "n_train": ntr, "n_val": nva, "n_test": nte,
               "mean_image_mse": float(np.mean((y["test"] - mean_image) ** 2)),
               # share of embedding columns that are identically zero over the n points (degenerate SRP at 1/d)
               "zero_column_share": float(np.mean(np.all(cols == 0.0, axis=1)))}
        recon_arrays = {}
        attacks = {}
        for kind in kinds:
            atk = dimred.fit_attack(
                kind, emb["train"], y["train"], emb["val"], y["val"],
                jax.random.fold_in(attack_key, NETS.index(kind)), spec=training, target_row=config.target_row,
                progress=config.progress,
            )
            require_finite(atk.eval_loss, f"{kind} network validation loss ({tag})", "learning rate too large?")
            rec_img = np.asarray(reconstruct(atk, emb["test"]))
            per_example = np.asarray(dimred.per_example_mse(rec_img, y["test"]), np.float64)
            rec[f"{kind}_mse"] = float(np.mean(per_example))
            rec[f"{kind}_per_example_mse"] = [float(v) for v in per_example]  # paired tests of the claims
            rec[f"{kind}_best_epoch"] = int(atk.best_epoch) - 1  # 0-based, as in points written before
            rec[f"{kind}_epochs"] = int(atk.epochs_run)
            recon_arrays[kind] = rec_img[: max(1, config.n_grid_images)]
            attacks[kind] = atk
        # Noise defence (Sec. 6): split network trained on clean shadows, victim data noised before embedding.
        if size == config.noise_size and policy == "fresh" and rep == 0 and "split" in attacks:
            nn_test = min(nte, config.slow_noise_n_test if is_slow else config.noise_n_test)
            noise = {}
            for sigma in config.noise_sigmas:
                noisy = dimred.shadow_embeddings(
                    dataclasses.replace(embedding, noise_sigma=float(sigma)), known, flat[te_idx[:nn_test]], key,
                    index_offset=ntr + nva, noise_key=noise_key,
                    store_dir=os.path.join(sdir, f"noise_{sigma:g}"), **common,
                )
                atk = attacks["split"]
                d_clean = float(np.mean(dimred.noise_defence_mse(atk, emb["test"][:nn_test], noisy)))
                d_true = float(np.mean(dimred.per_example_mse(reconstruct(atk, noisy), y["test"][:nn_test])))
                noise[f"{sigma:g}"] = {"mse_vs_clean_recon": d_clean, "mse_vs_true": d_true, "n_test": nn_test}
            rec["noise"] = noise
        rec["seconds"] = time.time() - tp
        atomic_save_npz(os.path.join(points_dir, f"{tag}_recon.npz"), truth=y["test"][: max(1, config.n_grid_images)],
                        **recon_arrays)
        atomic_write_json(path, rec)
        results.append(rec)
        if config.progress:
            print(f"[{gi + 1}/{len(grid)}] {tag}: " + ", ".join(
                f"{k}={rec[k]:.4f}" for k in rec if k.endswith("_mse") and isinstance(rec[k], float))
                + f" ({rec['seconds']:.0f}s)", flush=True)

    metrics = _aggregate(results, config)
    require_finite([s["mean"] for s in metrics["summary"]], "test MSE", "a network diverged?")
    metrics["seconds_total"] = time.time() - t0
    # a resumed run: points restored from the cache were computed in an earlier segment, so the wall time above
    # covers only this one; the summed per-point times cover every point
    metrics["grid_points_restored"] = restored
    metrics["seconds_grid_points"] = float(sum(r.get("seconds", 0.0) for r in results))
    metrics["grid_points"] = len(results)
    metrics["grid_points_total"] = len(grid)
    metrics["grid_points_skipped"] = skipped
    metrics["cache_dir"] = os.path.basename(cache)
    metrics["figures"] = _figures(results, metrics, config, workdir, points_dir)  # what publish() copies
    return finish_run(run_info, metrics, _report(metrics, config), _claims(metrics, config, results))


def point_keys(base_key, method: str, size: int, rep: int):
    """(embedding key, attack key, noise key) of one grid point: three independent streams.

    The embeddings' runs draw from children of ``key`` (:func:`recon_jax.attacks.dimred_embed.run_key`), so the
    networks' and the input noise's keys are split off beside it rather than folded out of it (they were
    ``fold_in(key, 5)``, ``fold_in(key, 3)`` and ``fold_in(key, 77)``: the keys of shadow runs 5, 3 and 77).
    """
    point = jax.random.fold_in(jax.random.fold_in(base_key, METHODS.index(method)), 1000 * size + rep)
    return tuple(jax.random.split(point, 3))


def _aggregate(results, config):
    groups = {}
    for r in results:
        for kind in NETS:
            if f"{kind}_mse" in r:
                groups.setdefault((r["method"], r["policy"], r["size"], kind), []).append(r[f"{kind}_mse"])
    summary = []
    for (m, p, s, k), v in sorted(groups.items()):
        summary.append({"method": m, "policy": p, "size": s, "net": k, "mean": float(np.mean(v)),
                        "std": float(np.std(v)), "repeats": len(v)})
    noise = {r["method"]: r["noise"] for r in results if "noise" in r}
    mean_img = float(np.mean([r["mean_image_mse"] for r in results])) if results else None
    zero_cols = {}
    for r in results:
        zero_cols.setdefault(r["method"], []).append(r.get("zero_column_share", 0.0))
    return {"summary": summary, "noise": noise, "mean_image_mse": mean_img, "paper_table4": PAPER_TABLE4,
            "zero_column_share": {m: float(np.mean(v)) for m, v in zero_cols.items()}}


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
    return PAPER_TABLE4[net][_base(label)]


def _t4(config, method):
    return config.slow_table4_size if method in _expand(config, config.slow_methods) else config.table4_size


def _report(metrics, config):
    methods = _expand(config, config.fast_methods) + _expand(config, config.slow_methods)
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
        for m in _expand(config, config.seed_methods):
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
    methods = _expand(config, config.fast_methods) + _expand(config, config.slow_methods)
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
        rnd = [m for m in mse if _base(m) in ("srp", "mds", "tsne", "umap")]
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


def _claims(metrics, config, results) -> list[dict]:
    """The paper's headline findings (split network, fresh seeds), each a comparison of methods or networks run at
    equal sizes, decided by paired t-tests over the test images at claim_alpha shared among the claim's
    comparisons (Bonferroni)."""
    methods = _expand(config, config.fast_methods) + _expand(config, config.slow_methods)
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


def _figures(results, metrics, config, workdir, points_dir) -> list[str]:
    """Draws the figures; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []

    def save(fig, name):
        fig.savefig(os.path.join(workdir, name), dpi=120)
        plt.close(fig)
        names.append(name)

    methods = _expand(config, config.fast_methods) + _expand(config, config.slow_methods)
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
    for m in _expand(config, config.seed_methods):
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


if __name__ == "__main__":
    launch(run, "experiments/configs/lumbut_dimred.py:default", "runs/lumbut_dimred")
