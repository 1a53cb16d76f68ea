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

from experiments import lumbut_dimred_report
from experiments.common import (ConfigError, check_config, config_to_dict, finish_run, keyed_dir, launch,
                                require_finite, start_run)
from experiments.configs.lumbut_dimred import CHECKS
from experiments.lumbut_dimred_report import PAPER_TABLE4, base_method, expand, srp_label
from recon_jax.attacks import dimred
from recon_jax.attacks.dimred_embed import METHODS
from recon_jax.attacks.reconn import reconstruct
from recon_jax.io import array_digest, atomic_save_npz, atomic_write_json


NETS = ("split", "mlp")  # the attack networks (config.nets); a network's key is fold_in(attack_key, its index)


def _method_opts(config, label):
    if label.startswith("srp"):
        d = next(d for d in config.srp_densities if srp_label(d) == label)
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
    fast, slow = expand(config, config.fast_methods), expand(config, config.slow_methods)
    for rep in range(max(config.repeats, config.slow_repeats)):
        # Table-4 size first, then the others.
        for size in sorted(config.sizes, key=lambda s: (s != config.table4_size, s)):
            if rep < config.repeats:
                pts += [(m, "fresh", size, rep) for m in fast]
        if rep < config.slow_repeats:
            for size in config.slow_sizes:
                pts += [(m, "fresh", size, rep) for m in slow]
        for size in config.seed_sizes:
            for m in expand(config, config.seed_methods):
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
    fast, slow = expand(config, config.fast_methods), expand(config, config.slow_methods)
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
        base = base_method(method)
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
    # what publish() copies
    metrics["figures"] = lumbut_dimred_report.figures(results, metrics, config, workdir, points_dir)
    return finish_run(run_info, metrics, lumbut_dimred_report.report(metrics, config),
                      lumbut_dimred_report.claims(metrics, config, results))


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


if __name__ == "__main__":
    launch(run, "experiments/configs/lumbut_dimred.py:default", "runs/lumbut_dimred")
