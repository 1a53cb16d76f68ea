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
from experiments.common import (check_config, check_fits, claim, comparison, finish_run, keyed_dir, launch,
                                require_finite, start_run)
from experiments.configs.biswas_gaussian_vs_vmf import (CHECKS, KAPPAS_V, PAPER_TABLE_V, PAPER_TABLE_VI_MNIST_MSE,
                                                       SIGMAS_V)
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

    findings, claims = _findings(config, results)
    results["findings"] = findings
    results["figures"] = _figures(config, results, workdir, plt)  # what publish() copies
    return finish_run(run_info, results, _report(config, results), claims)


def _agg(rows, **match):
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def _spearman(a, b):
    import scipy.stats

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(scipy.stats.spearmanr(a, b).correlation)


def _sign_test(wins: int, total: int) -> tuple[float, float]:
    """One-sided sign-test p-values (more wins than chance, fewer wins than chance) for ``wins`` of ``total``."""
    import scipy.stats

    return (float(scipy.stats.binom.sf(wins - 1, total, 0.5)), float(scipy.stats.binom.cdf(wins, total, 0.5)))


def _sign_claim(name: str, wins: int, total: int, alpha: float, what: str, precondition: str | None = None) -> dict:
    """A comparison across settings: holds / fails when a one-sided sign test decides at ``alpha``, else undecided
    (also undecided, whatever the counts, when ``precondition`` says why the comparison cannot mean anything)."""
    if total == 0:
        return claim(name, False, "no setting has both mechanisms", verdict="undecided")
    p_more, p_fewer = _sign_test(wins, total)
    detail = f"{what} in {wins} of {total} (eps, B) settings; sign test p = {p_more:.3g} (the reverse: {p_fewer:.3g})"
    if precondition:
        return claim(name, False, f"{detail}; {precondition}", verdict="undecided")
    verdict = "holds" if p_more < alpha else ("fails" if p_fewer < alpha else "undecided")
    return claim(name, verdict == "holds", detail, verdict=verdict)


def _spearman_claim(ds, pts, alpha, seed):
    """|Spearman(log capacity, MSE)| > |Spearman(eps, MSE)|, decided by a bootstrap interval over the attacked
    settings (resampled together), at 1 - alpha; None when either correlation is undefined."""
    eps = np.asarray([r["eps"] for r in pts], float)
    cap = np.asarray([r["log_cap"] for r in pts], float)
    mse = np.asarray([r["mse"] for r in pts], float)
    rho_eps, rho_cap = _spearman(eps, mse), _spearman(cap, mse)
    if rho_eps is None or rho_cap is None:
        return rho_eps, rho_cap, None
    rng = np.random.default_rng(seed)  # a NumPy seed (an int or a sequence of ints)
    diffs = []
    for _ in range(2000):
        i = rng.integers(0, len(pts), len(pts))
        a, b = _spearman(cap[i], mse[i]), _spearman(eps[i], mse[i])
        if a is not None and b is not None:
            diffs.append(abs(a) - abs(b))
    low, high = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    c = claim(f"{ds}: log Bayes' capacity orders the IG MSE better than eps (paper Fig. 4)",
              detail=f"|Spearman| with capacity {abs(rho_cap):.3f} vs with eps {abs(rho_eps):.3f}; bootstrap "
                     f"{100 * (1 - alpha):g}% interval of the difference [{low:.3f}, {high:.3f}] over {len(pts)} "
                     "attacked settings",
              comparisons=[comparison("|rho_cap| - |rho_eps|", abs(rho_cap) - abs(rho_eps), ">=", 0.0,
                                      interval=(float(low), float(high)), possible=(-1.0, 1.0))])
    return rho_eps, rho_cap, c


def _findings(config, results) -> tuple[dict, list[dict]]:
    out, claims = {}, []
    alpha = float(config.claim_alpha)
    pairs = results["pairs"]
    paper_pairs = [r for r in pairs if r["accounting"] == "paper"]
    if paper_pairs:
        ratios = [r["eps_vmf_tight"] / r["eps_gauss_tight"] for r in paper_pairs]
        worst = max(ratios, key=lambda x: abs(math.log(x)))
        claims.append(claim(
            "the paper's matched (kappa, sigma) pairs have equal eps (Table IV), re-checked per step with the tight "
            "accountants on the run trained",
            detail=f"tight eps(VMF) / eps(Gauss) over {len(ratios)} pairs x batch sizes: {min(ratios):.3g} to "
                   f"{max(ratios):.3g} (worst {worst:.3g})",
            comparisons=[comparison("max |log ratio|", max(abs(math.log(x)) for x in ratios), "<=", math.log(1.1))]))
    for d_i, (ds, d) in enumerate(results["datasets"].items()):
        att, acc = d["attacks"], d["accuracy"]
        none = _agg(att, mechanism="None")
        ig, base = float(np.mean([r["mse"] for r in none])), float(np.mean([r["mse_mean_image"] for r in none]))
        f = {"ig_mse_no_noise": ig, "mean_image_mse": base}
        claims.append(claim(f"{ds}: Inverting Gradients on the non-private gradient beats the mean-image guess",
                            detail=f"MSE {ig:.4f} vs {base:.4f} (pixels in [0, 1])",
                            comparisons=[comparison("IG MSE - mean-image MSE", ig - base, "<=", 0.0)]))
        dp = [r for r in att if r.get("mechanism") in ("vmf", "gauss")]
        beaten = sum(r["mse"] < r["mse_mean_image"] for r in dp)
        f["dp_attacks_beating_mean_image"] = f"{beaten}/{len(dp)}"
        attack_fails = None if beaten else (
            f"the attack fails in every DP setting (IG MSE above the mean-image guess's in all {len(dp)} attacked "
            "batches), so a difference in its MSE says nothing about protection")
        for accounting in config.accountings:
            wins = total = a_wins = a_total = 0
            for r in [p for p in pairs if p["accounting"] == accounting]:
                v = _agg(att, mechanism="vmf", accounting=accounting, eps=r["eps"], batch_size=r["batch_size"])
                g = _agg(att, mechanism="gauss", accounting=accounting, eps=r["eps"], batch_size=r["batch_size"])
                if v and g:
                    total += 1
                    wins += int(np.mean([x["mse"] for x in v]) > np.mean([x["mse"] for x in g]))
                va = _agg(acc, mechanism="vmf", accounting=accounting, eps=r["eps"], batch_size=r["batch_size"])
                ga = _agg(acc, mechanism="gauss", accounting=accounting, eps=r["eps"], batch_size=r["batch_size"])
                if va and ga:
                    a_total += 1
                    a_wins += int(ga[0]["accuracy"] > va[0]["accuracy"])
            f[f"{accounting}_vmf_higher_mse"] = f"{wins}/{total}"
            f[f"{accounting}_gauss_more_accurate"] = f"{a_wins}/{a_total}"
            label = "the paper's accounting" if accounting == "paper" else "tight per-step accounting"
            claims.append(_sign_claim(f"{ds}: VMF protects better than Gaussian against IG at equal eps ({label}; "
                                      "paper Fig. 1, Tables II, VI)", wins, total, alpha, "VMF has the higher IG MSE",
                                      attack_fails))
            claims.append(_sign_claim(f"{ds}: Gaussian DP-SGD is more accurate than VMF at equal eps ({label}; "
                                      "paper Table V)", a_wins, a_total, alpha, "Gaussian accuracy higher"))
        rho_eps, rho_cap, c = _spearman_claim(ds, [r for r in att if r.get("eps") is not None], alpha,
                                              seed=[config.seed, 3, d_i])
        f.update(spearman_mse_vs_eps=rho_eps, spearman_mse_vs_log_bayes_capacity=rho_cap)
        if c is not None:
            claims.append(c)
        out[ds] = f
    return out, claims


def _figures(config, results, workdir, plt) -> list[str]:
    """Draws one figure per dataset; returns their file names."""
    names = []
    for ds, d in results["datasets"].items():
        att = d["attacks"]
        b = max(config.attack_batch_sizes)
        fig, axes = plt.subplots(1, len(config.accountings) + 1, figsize=(6 * (len(config.accountings) + 1), 3.8))
        for ax, accounting in zip(axes, config.accountings):
            for mech, color in (("gauss", "C0"), ("vmf", "C1")):
                pts = sorted(_agg(att, mechanism=mech, accounting=accounting, batch_size=b), key=lambda r: r["eps"])
                ax.plot([r["eps"] for r in pts], [r["mse"] for r in pts], "o-", color=color, label=mech)
            for i, r in enumerate(_agg(att, mechanism="None", batch_size=b)):
                ax.axhline(r["mse"], color="gray", ls=":", lw=0.8, label=None if i else "IG without noise")
            base = [r["mse_mean_image"] for r in _agg(att, batch_size=b) if "mse_mean_image" in r]
            if base:  # what guessing the training set's mean image scores: the level an attack must beat
                ax.axhline(float(np.mean(base)), color="black", ls="--", lw=0.8, label="mean-image guess")
            ax.set(xscale="log", xlabel=f"epsilon ({accounting} accounting)", ylabel="IG MSE (pixels in [0,1])",
                   title=f"Fig. 1a analogue, B={b}, {accounting}")
            ax.legend(fontsize=8)
        for mech, color in (("gauss", "C0"), ("vmf", "C1")):
            allp = _agg(att, mechanism=mech)
            axes[-1].scatter([r["log_cap"] for r in allp], [r["mse"] for r in allp], color=color, label=mech)
        axes[-1].set(xlabel="log Bayes' capacity", ylabel="MSE", title="Fig. 4: MSE vs Bayes' capacity")
        axes[-1].legend(fontsize=8)
        fig.suptitle(f"Biswas et al. analogue on {ds}")
        fig.tight_layout()
        fig.savefig(os.path.join(workdir, f"fig_{ds}.png"), dpi=80)
        plt.close(fig)
        names.append(f"fig_{ds}.png")
    return names


def _report(config, results) -> str:
    L = ["# Biswas et al.: Gaussian vs VMF DP-SGD against Inverting Gradients", "",
         f"Variant `{config.variant}`. Accountings: {', '.join(config.accountings)} (see the module docstring). "
         f"Tight accounting: PLD for both mechanisms (grid {config.pld_discretization:g}), per step, "
         f"q = B / {config.num_train}, steps = {config.epochs} epochs x ({config.num_train} // B), "
         f"delta = 1/{config.num_train}. Training draws shuffled fixed-size batches, accounted as Poisson sampling.",
         "", "## Matched privacy parameters", "",
         "eps(VMF) and eps(Gauss) tight: what the tight accountants give each mechanism of the pair on the run "
         "actually trained with batch size B (equal to eps for the tight pairs by construction). Signal per step: "
         "cos VMF is the expected cosine of the VMF's released direction with the batch's mean clipped gradient, "
         f"A_p(kappa) (p = {config.param_dim}); cos Gauss is about the largest cosine of the Gaussian's noisy mean "
         "with it, 1 / sqrt(1 + p sigma^2 / B^2).", "",
         "| accounting | eps | B | kappa | sigma | eps(VMF) tight | eps(Gauss) tight | log C_Bayes VMF | "
         "log C_Bayes Gauss | cos VMF | cos Gauss |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["pairs"]:
        L.append(f"| {r['accounting']} | {r['eps']:.4g} | {r['batch_size']} | {r['kappa']:.4g} | {r['sigma']:.4g} | "
                 f"{r['eps_vmf_tight']:.4g} | {r['eps_gauss_tight']:.4g} | {r['log_cap_vmf']:.4g} | "
                 f"{r['log_cap_gauss']:.4g} | {r['cos_vmf']:.2g} | {r['cos_gauss']:.2g} |")
    for ds, d in results["datasets"].items():
        f = results["findings"][ds]
        L += ["", f"## {ds}", "", "### Findings", ""]
        for accounting in config.accountings:
            L.append(f"- {accounting} accounting: VMF has the higher IG MSE in **{f[accounting + '_vmf_higher_mse']}** "
                     f"(eps, B) settings; Gaussian is more accurate in **{f[accounting + '_gauss_more_accurate']}**.")
        rho = {k_: "n/a" if f[k_] is None else f"{f[k_]:.3f}"
               for k_ in ("spearman_mse_vs_eps", "spearman_mse_vs_log_bayes_capacity")}
        L += [f"- Spearman correlation of IG MSE with eps: {rho['spearman_mse_vs_eps']}; with log Bayes' capacity: "
              f"{rho['spearman_mse_vs_log_bayes_capacity']}.",
              f"- IG without noise: MSE {f['ig_mse_no_noise']:.4f}; mean-image guess: {f['mean_image_mse']:.4f}.",
              f"- Non-private accuracy: {d['nonprivate_accuracy']:.4f} (paper, full data, 3 epochs: "
              f"{'0.9399' if ds == 'mnist' else '0.8471'}).", _signal_sentence(results["pairs"], d["accuracy"]), "",
              "### Test accuracy (Table V analogue)", "",
              "Paper: Table V's accuracy at the pair's kappa and B (60,000 images, 3 epochs); a Gaussian cell is the "
              "one beside that kappa, at the sigma shown where it is not the pair's.", "",
              "| setting | B | accuracy | paper |", "|---|---|---|---|"]
        for r in d["accuracy"]:
            paper = _paper_cell(PAPER_TABLE_V.get(ds, {}), r, r["mechanism"], r["batch_size"])
            L.append(f"| {r['setting']} | {r['batch_size']} | {r['accuracy']:.4f} | {paper} |")
        L += ["", "### IG reconstruction (Tables II / VI analogue): mean over attacked batches", "",
              "MSE is reported on [0, 1] pixels and on normalised pixels (/ 0.3081^2, the space of the paper's MSE). "
              f"Paper: Table VI's MSE at the pair's kappa and B, as in the accuracy table ({config.ig_steps} IG "
              "iterations here against the paper's 10,000).",
              "", "| setting | B | MSE | MSE (normalised) | paper | SSIM |"
              + (" DLG MSE | DLG SSIM |" if config.include_dlg else ""),
              "|---|---|---|---|---|---|" + ("---|---|" if config.include_dlg else "")]
        for name in dict.fromkeys(r["setting"] for r in d["attacks"]):
            for b in config.attack_batch_sizes:
                rows = [r for r in d["attacks"] if r["setting"] == name and r["batch_size"] == b]
                if not rows:
                    continue
                paper = _paper_cell(PAPER_TABLE_VI_MNIST_MSE if ds == "mnist" else {}, rows[0],
                                    rows[0]["mechanism"], b)
                line = (f"| {name} | {b} | {np.mean([r['mse'] for r in rows]):.4f} | "
                        f"{np.mean([r['mse_normalised'] for r in rows]):.3f} | {paper} | "
                        f"{np.mean([r['ssim'] for r in rows]):.4f} |")
                if config.include_dlg:
                    line += f" {np.mean([r['dlg_mse'] for r in rows]):.4f} | {np.mean([r['dlg_ssim'] for r in rows]):.4f} |"
                L.append(line)
        L += ["", f"Figure: `fig_{ds}.png` (IG MSE vs eps per accounting; MSE vs log Bayes' capacity)."]
    L += ["", "The paper's values (Tables II, V, VI) are kept in the config module "
          "(`experiments/configs/biswas_gaussian_vs_vmf.py`, PAPER_TABLE_*). The paper trained on 60,000 images for "
          "3 epochs and accounted the VMF over 3 epochs, so its cells are beside ours for scale, not to be matched "
          "one to one."]
    return "\n".join(L) + "\n"


def _paper_cell(table: dict, r: dict, mech: str, b: int) -> str:
    """The paper's cell (Table V or VI) for a paper-accounting pair's row ``r``: the column of ``mech`` at batch
    ``b`` and the row of the pair's kappa; a Gaussian cell names the paper's sigma where it is not the pair's.
    An em dash where the paper has no such cell (tight pairs, kappa 500, other batch sizes)."""
    if r.get("accounting") != "paper" or b not in table.get(mech, {}):
        return "—"
    i = next((i for i, k in enumerate(KAPPAS_V) if abs(k - r["kappa"]) < 1e-6), None)
    if i is None:
        return "—"
    cell = f"{table[mech][b][i]:.4g}"
    return cell + (f" (sigma {SIGMAS_V[i]:g})" if mech == "gauss" and abs(SIGMAS_V[i] / r["sigma"] - 1) > 0.005
                   else "")


def _signal_sentence(pairs: list[dict], accuracy: list[dict]) -> str:
    """Why VMF DP-SGD learns so little at these kappas: its signal per step beside the Gaussian's."""
    trained = {r["batch_size"] for r in accuracy}
    rows = [r for r in pairs if r["batch_size"] in trained]
    if not rows:
        return ""
    vmf = [r["cos_vmf"] for r in rows]
    gauss = [r["cos_gauss"] for r in rows]
    acc = {m: [r["accuracy"] for r in accuracy if r["mechanism"] == m] for m in ("vmf", "gauss")}
    return (f"- Signal per step (table above): the VMF's released direction has expected cosine {min(vmf):.2g} to "
            f"{max(vmf):.2g} with the batch's mean clipped gradient, the Gaussian's noisy mean up to about "
            f"{min(gauss):.2g} to {max(gauss):.2g}. At kappa far below p the VMF's direction is nearly uniform, so its "
            f"models learn far less (accuracy {min(acc['vmf']):.3f} to {max(acc['vmf']):.3f} against the "
            f"Gaussian's {min(acc['gauss']):.3f} to {max(acc['gauss']):.3f}; 10 classes). Table V of the paper shows "
            "the same gap at small kappa, with many more steps.")


if __name__ == "__main__":
    launch(run, "experiments/configs/biswas_gaussian_vs_vmf.py:default", "runs/biswas_gaussian_vs_vmf")
