"""Biswas et al.: Gaussian vs von Mises-Fisher DP-SGD against Inverting Gradients, with Bayes' capacity.

    python -m experiments.biswas_gaussian_vs_vmf --config=experiments/configs/biswas_gaussian_vs_vmf.py:smoke --workdir=/tmp/b

The 13,700-parameter sigmoid MLP (256-50-15-10, no biases) on 16x16 centre-cropped MNIST is trained with DP-SGD
using the Gaussian mechanism (Alg. 1) and the VMF mechanism (Alg. 2) at matched epsilon, for several batch sizes;
test accuracy is recorded (Table V analogue). Inverting Gradients (Geiping et al.) attacks the released gradient of
the first DP-SGD step (adversary-known initial parameters, known labels), and MSE / SSIM of the reconstructions are
recorded per mechanism and epsilon (Fig. 1, Tables II and VI analogues). Bayes' capacities (Thms 5, 6) are
compared with epsilon as predictors of the MSE (Figs 4, 5).

Matching epsilon, two ways, both reported:

- ``tight`` (the fair comparison): for each target eps and each batch size B actually trained or attacked,
  both mechanisms are accounted per DP-SGD step over the run that is actually made (q = B / num_train,
  steps = epochs * (num_train // B), delta = 1 / num_train), each with its tightest accountant: the VMF
  mechanism's pessimistic privacy loss distribution (``vmf_epsilon(..., approach="pld")``) and the Gaussian's
  PLD (``dpsgd_epsilon(..., accountant="pld")``); kappa and sigma are calibrated to the same eps.
- ``paper``: Biswas et al.'s accounting at their reference setting (q = 128/60000, delta = 1/60000): the VMF
  composed over N = 3 *epochs* with their approaches 1/2, the Gaussian over N/q steps with RDP. For each of these
  pairs the report also gives the eps that the tight accountants assign on the run actually trained.

Training samples shuffled fixed-size batches; the accounting assumes Poisson sampling (see recon_jax.training).
"""

from __future__ import annotations

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from experiments import biswas_gaussian_vs_vmf_report
from experiments.common import check_config, check_fits, finish_run, keyed_dir, launch, require_finite, start_run
from experiments.configs.biswas_gaussian_vs_vmf import CHECKS
from recon_jax.io import atomic_write_json


# ----------------------------------------------------------------------------------------------------------------
# Accounting and Bayes' capacity.
# ----------------------------------------------------------------------------------------------------------------


def _run_shape(config, b: int) -> tuple[float, int, float]:
    """(q, steps, delta) of the DP-SGD run actually made with batch size b (fixed-size batches, epochs * n // b)."""
    n = int(config.num_train)
    return b / n, int(config.epochs) * (n // b), 1.0 / n


def _pairs(config) -> list[dict]:
    """(kappa, sigma) pairs at matched eps: per target eps and batch size ("tight") and the paper's ("paper")."""
    from recon_jax.accounting import calibrate_sigma, calibrate_vmf_kappa, dpsgd_epsilon, vmf_epsilon

    step = config.pld_discretization
    sizes = sorted(set(config.batch_sizes) | set(config.attack_batch_sizes))
    rows = []
    with jax.enable_x64(True):
        if "tight" in config.accountings:
            for e in config.eps_targets:
                for b in sizes:
                    q, steps, delta = _run_shape(config, b)
                    k = float(calibrate_vmf_kappa(e, config.param_dim, q, steps, delta, approach="pld",
                                                  value_discretization_interval=step, rtol=1e-3))
                    s = float(calibrate_sigma(e, q, steps, delta, accountant="pld",
                                              value_discretization_interval=step, rtol=1e-3))
                    rows.append({"accounting": "tight", "eps": float(e), "batch_size": b, "kappa": k, "sigma": s,
                                 "q": q, "steps": steps, "delta": delta, "eps_vmf_tight": float(e),
                                 "eps_gauss_tight": float(e)})
        if "paper" in config.accountings:
            q0 = config.accounting_batch_size / config.accounting_dataset_size
            steps0 = int(math.ceil(config.accounting_epochs / q0))
            kappas = np.asarray(config.kappas, np.float64)
            eps = np.asarray(vmf_epsilon(kappas, config.param_dim, q0, config.accounting_epochs, config.delta))
            sig = np.asarray(calibrate_sigma(eps, q0, steps0, config.delta))
            for k, e, s in zip(kappas, eps, sig):
                for b in sizes:
                    q, steps, delta = _run_shape(config, b)
                    # What the paper's "equal eps" pair is worth on this run, by the tight accountants.
                    ev = float(vmf_epsilon(k, config.param_dim, q, steps, delta, approach="pld",
                                           value_discretization_interval=step))
                    eg = float(dpsgd_epsilon(s, q, steps, delta, accountant="pld",
                                             value_discretization_interval=step))
                    rows.append({"accounting": "paper", "eps": float(e), "batch_size": b, "kappa": float(k),
                                 "sigma": float(s), "q": q, "steps": steps, "delta": delta, "eps_vmf_tight": ev,
                                 "eps_gauss_tight": eg})
    require_finite([[r["kappa"], r["sigma"], r["eps"]] for r in rows], "matched kappa / sigma / eps",
                   "a target eps outside what calibrate_vmf_kappa / calibrate_sigma can reach?")
    return rows


def _capacities(rows, dim) -> None:
    """Adds each pair's log Bayes' capacities and its signal per step: ``cos_vmf``, the expected cosine of the VMF's
    released direction with the batch's mean clipped gradient, A_p(kappa) = I_{p/2}(kappa) / I_{p/2-1}(kappa); and
    ``cos_gauss``, about the largest cosine of the Gaussian's noisy mean with it, 1 / sqrt(1 + p sigma^2 / B^2) (a
    mean clipped gradient of norm C against noise of norm about sigma C sqrt(p) / B)."""
    from recon_jax.bounds import log_bayes_capacity_gaussian, log_bayes_capacity_vmf
    from recon_jax.special import log_iv

    with jax.enable_x64(True):
        for r in rows:
            r["log_cap_vmf"] = float(log_bayes_capacity_vmf(r["kappa"], dim))
            r["log_cap_gauss"] = float(log_bayes_capacity_gaussian(r["sigma"], dim))
            r["cos_vmf"] = float(jnp.exp(log_iv(dim / 2, r["kappa"]) - log_iv(dim / 2 - 1, r["kappa"])))
            r["cos_gauss"] = 1.0 / math.sqrt(1.0 + dim * r["sigma"] ** 2 / r["batch_size"] ** 2)
    require_finite([[r["log_cap_vmf"], r["log_cap_gauss"], r["cos_vmf"]] for r in rows],
                   "log Bayes' capacities and the VMF's mean cosine")


# ----------------------------------------------------------------------------------------------------------------
# Data, training, attack.
# ----------------------------------------------------------------------------------------------------------------


def _load(config, name: str, split: str, rng) -> tuple[np.ndarray, np.ndarray]:
    """``config.num_train`` (``num_test``) records of ``name``'s ``split``, drawn without replacement by ``rng``,
    at ``config.image_size`` (MNIST cropped, others resized)."""
    from recon_jax.data import load_dataset

    x, y = load_dataset(name, split)
    field, size = f"num_{split}", config.image_size
    check_fits(config, (field,), x.shape[0], f"{split} records of {name!r}")
    idx = rng.choice(x.shape[0], size=config[field], replace=False)
    x, y = np.asarray(x[idx], np.float32), np.asarray(y[idx])
    if name == "mnist":
        lo = (x.shape[1] - size) // 2
        x = x[:, lo:lo + size, lo:lo + size, :]
    else:
        x = np.asarray(jax.image.resize(jnp.asarray(x), (x.shape[0], size, size, x.shape[3]), "bilinear"))
    return np.clip(x, 0, 1), y


def _optimizer(config):
    import optax

    # PyTorch Adam(weight_decay=wd): L2 added to the gradient, then Adam.
    return optax.chain(optax.add_decayed_weights(config.weight_decay), optax.adam(config.learning_rate))


def _accuracy(fns, params, x, y) -> float:
    logits = jax.jit(fns.apply)(params, jnp.asarray(x))
    return float(jnp.mean(jnp.argmax(logits, -1) == jnp.asarray(y)))


def _matched_metrics(x: np.ndarray, rec: np.ndarray) -> tuple[float, float]:
    """Mean MSE and SSIM after matching reconstructions to originals (Hungarian on MSE; batch order is unknown)."""
    from scipy.optimize import linear_sum_assignment

    from recon_jax import metrics

    b = x.shape[0]
    cost = ((x.reshape(b, 1, -1) - rec.reshape(1, b, -1)) ** 2).mean(-1)
    rows, cols = linear_sum_assignment(cost)
    rec = rec[cols[np.argsort(rows)]]
    mse = float(np.mean(np.asarray(metrics.mse(jnp.asarray(x), jnp.asarray(rec)))))
    ssim = float(np.mean(np.asarray(metrics.ssim(jnp.asarray(x), jnp.asarray(rec)))))
    return mse, ssim


class _Cache:
    """Per-item results in ``<workdir>/cache-<hash of the config>/cache.json``: an interrupted run resumes where it
    stopped, and a run with another config never sees these items (the directory name is the config's hash)."""

    def __init__(self, workdir: str, config):
        self.path = os.path.join(keyed_dir(workdir, "cache", config.to_dict()), "cache.json")
        self.items = {}
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.items = json.load(f)

    def get(self, name):
        return self.items.get(name)

    def put(self, name, value):
        self.items[name] = value
        atomic_write_json(self.path, self.items)


def _label(r: dict, mech: str) -> str:
    par = f"kappa={r['kappa']:.4g}" if mech == "vmf" else f"sigma={r['sigma']:.4g}"
    return f"{mech.upper() if mech == 'vmf' else 'Gauss'} {r['accounting']} eps={r['eps']:.3g} {par}"


def _item(r: dict | None, mech: str | None, label: str) -> str:
    """A cache item's name: the row's label and its parameters in full (two settings the rounded label shows alike,
    eps 8.0 and 8.0004, never share an item)."""
    return label if r is None else f"{label} [{r['eps']!r} {r['kappa']!r} {r['sigma']!r} {mech}]"


def run(config, workdir: str) -> dict:
    """Runs the study; writes report.md, metrics.json (with claims), config.json and figures to ``workdir``."""
    check_config(config, CHECKS)  # before anything is written to workdir
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tqdm import tqdm

    from recon_jax import models, training
    from recon_jax.attacks.gradient import DLGOptions, InvertingGradientsOptions, dlg, inverting_gradients
    from recon_jax.mechanisms import GaussianMechanism, NoNoise, VMFMechanism

    loaded = {}  # dataset -> (train, test) draws; before start_run, so a size the data cannot meet writes nothing
    for d_i, dataset in enumerate(config.datasets):
        short = dataset.split(":")[-1]
        rng = np.random.default_rng([config.seed, 1, d_i])  # three sibling streams: data, attacked batches, bootstrap
        loaded[dataset] = tuple(_load(config, short if short == "mnist" else dataset, split, rng)
                                for split in ("train", "test"))
    run_info = start_run(workdir, config, seed=config.seed)
    workdir = run_info.workdir
    key = jax.random.key(config.seed)
    cache = _Cache(workdir, config)
    pairs = _pairs(config)
    _capacities(pairs, config.param_dim)
    fns = models.from_flax(models.biswas_mlp())
    train_jit = jax.jit(training.train, static_argnums=(0, 1))
    ig_options = InvertingGradientsOptions(num_restarts=config.ig_restarts, num_steps=config.ig_steps,
                                           lr=config.ig_lr, tv_weight=config.ig_tv_weight)
    dlg_options = DLGOptions(num_restarts=1, num_steps=config.dlg_steps)

    def mechanism(r, mech):
        return VMFMechanism(kappa=r["kappa"]) if mech == "vmf" else GaussianMechanism(noise_multiplier=r["sigma"])

    results = {"pairs": pairs, "datasets": {}}
    for d_i, dataset in enumerate(config.datasets):
        short = dataset.split(":")[-1]
        (xtr, ytr), (xte, yte) = loaded[dataset]
        dkey = jax.random.fold_in(key, d_i)
        params0 = training.initial_params(fns, jax.random.fold_in(dkey, 0), jnp.asarray(xtr[:1]))
        if models.count_params(params0) != config.param_dim:
            raise ValueError(f"param_dim={config.param_dim} but the model has {models.count_params(params0)}")
        mean_image = xtr.mean(axis=0)

        # ---- utility: DP-SGD training per accounting, eps, batch size and mechanism ----
        base_alg = training.minibatch_sgd(min(128, xtr.shape[0]), epochs=config.epochs, shuffle="fresh",
                                          optimizer=_optimizer(config), optimizer_id="adam+l2")
        nonprivate_acc = cache.get(f"{short}/nonprivate")
        if nonprivate_acc is None:
            res = train_jit(fns, base_alg, (jnp.asarray(xtr), jnp.asarray(ytr)), key=jax.random.fold_in(dkey, 1),
                            init_params=params0)
            require_finite(res.params, f"{short}: non-private model parameters", "learning rate too large?")
            nonprivate_acc = _accuracy(fns, res.params, xte, yte)
            cache.put(f"{short}/nonprivate", nonprivate_acc)
        acc_rows = []
        grid = [(r, m) for r in pairs if r["batch_size"] in config.batch_sizes for m in ("gauss", "vmf")]
        for i, (r, mech) in enumerate(tqdm(grid, desc=f"{short}: DP-SGD training")):
            name = _label(r, mech)
            item = f"{short}/train/{_item(r, mech, name)}/B{r['batch_size']}"
            if cache.get(item) is None:
                alg = training.dp_sgd(r["batch_size"], config.clip_norm, mechanism=mechanism(r, mech),
                                      epochs=config.epochs, optimizer=_optimizer(config), optimizer_id="adam+l2")
                res = train_jit(fns, alg, (jnp.asarray(xtr), jnp.asarray(ytr)),
                                key=jax.random.fold_in(dkey, 100 + i), init_params=params0)
                require_finite(res.params, f"{short}: DP-SGD model ({name}, B={r['batch_size']})",
                               "learning rate too large for this noise level?")
                cache.put(item, {"setting": name, "mechanism": mech, "accounting": r["accounting"],
                                 "eps": r["eps"], "kappa": r["kappa"], "sigma": r["sigma"],
                                 "batch_size": r["batch_size"], "accuracy": _accuracy(fns, res.params, xte, yte)})
            acc_rows.append(cache.get(item))

        # ---- privacy: Inverting Gradients on the first released DP-SGD gradient ----
        att_rows = []
        grid = []
        for b in config.attack_batch_sizes:
            for j in range(config.attack_batches):
                grid += [("None", None, None, b, j), ("None Clip", None, None, b, j)]
                grid += [(_label(r, m), r, m, b, j) for r in pairs if r["batch_size"] == b for m in ("gauss", "vmf")]
        for i, (name, r, mech, b, j) in enumerate(tqdm(grid, desc=f"{short}: IG attacks")):
            item = f"{short}/attack/{_item(r, mech, name)}/B{b}/{j}"
            if cache.get(item) is not None:
                att_rows.append(cache.get(item))
                continue
            brng = np.random.default_rng([config.seed, 2, d_i, b, j])
            idx = brng.choice(xtr.shape[0], size=b, replace=False)
            xb, yb = jnp.asarray(xtr[idx]), jnp.asarray(ytr[idx])
            k = jax.random.fold_in(jax.random.fold_in(dkey, 10**6), i)
            clip = name != "None"
            if r is not None:
                g = training.privatized_gradient(fns, params0, xb, yb, jax.random.fold_in(k, 0),
                                                 clip_norm=config.clip_norm, mechanism=mechanism(r, mech))
            elif clip:
                g = training.privatized_gradient(fns, params0, xb, yb, jax.random.fold_in(k, 0),
                                                 clip_norm=config.clip_norm, mechanism=NoNoise())
            else:
                g = jnp.mean(training.per_example_gradients(fns, params0, xb, yb), axis=0)
            require_finite(g, f"{short}: released gradient ({name}, B={b})")
            ig = inverting_gradients(jax.random.fold_in(k, 1), fns.apply, params0, g, xb.shape[1:], ig_options,
                                     labels=yb, batch_size=b,
                                     clip_norm=config.clip_norm if (clip and config.ig_simulate_clipping) else None)
            require_finite(ig.reconstruction, f"{short}: Inverting Gradients reconstruction ({name}, B={b})",
                           "IG learning rate (ig_lr) too large?")
            mse, ssim = _matched_metrics(np.asarray(xb), np.asarray(ig.reconstruction))
            row = {"setting": name, "mechanism": mech if mech else name, "batch_size": b, "batch": j, "mse": mse,
                   "mse_normalised": mse / config.mnist_std**2, "ssim": ssim, "ig_loss": float(ig.loss),
                   "mse_mean_image": float(np.mean((np.asarray(xb) - mean_image[None]) ** 2))}
            if r is not None:
                row.update(accounting=r["accounting"], kappa=r["kappa"], sigma=r["sigma"], eps=r["eps"],
                           log_cap=r["log_cap_vmf"] if mech == "vmf" else r["log_cap_gauss"])
            if config.include_dlg:
                dl = dlg(jax.random.fold_in(k, 2), fns.apply, params0, g, xb.shape[1:], dlg_options, labels=yb,
                         batch_size=b, clip_norm=config.clip_norm if clip else None)
                row["dlg_mse"], row["dlg_ssim"] = _matched_metrics(np.asarray(xb), np.asarray(dl.reconstruction))
            require_finite({k_: v for k_, v in row.items() if isinstance(v, float)},
                           f"{short}: attack metrics ({name})")
            cache.put(item, row)
            att_rows.append(row)
        results["datasets"][short] = {"nonprivate_accuracy": nonprivate_acc, "accuracy": acc_rows,
                                      "attacks": att_rows}

    findings, claims = biswas_gaussian_vs_vmf_report.findings(config, results)
    results["findings"] = findings
    results["figures"] = biswas_gaussian_vs_vmf_report.figures(config, results, workdir, plt)  # what publish() copies
    return finish_run(run_info, results, biswas_gaussian_vs_vmf_report.report(config, results), claims)


if __name__ == "__main__":
    launch(run, "experiments/configs/biswas_gaussian_vs_vmf.py:default", "runs/biswas_gaussian_vs_vmf")
