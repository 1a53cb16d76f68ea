"""The reconstruction-risk report: "if I train this model on my data with this DP-SGD configuration and release
it, how well could someone reconstruct a training record, and what do the theorems guarantee?"

python -m experiments.risk_report --config=experiments/configs/risk_report.py:default --workdir=runs/demo
or, from an installed wheel, ``recon-jax-report --workdir=runs/demo`` (the console script, :func:`console_main`;
its config is :mod:`recon_jax.report.config`, which ``experiments/configs/risk_report.py`` re-exports);
``make demo`` runs the default config.

For the non-private setting and each noise multiplier of the sweep it: trains the released models (one per
evaluation target, on D- + target; reports test accuracy); trains shadow models and Balle et al.'s reconstructor
network; reconstructs every target and scores it (MSE, PSNR, SSIM, NCC, success against the nearest-neighbour
oracle), all through the library's informed-adversary pipeline (:mod:`recon_jax.attacks.informed`); and, for DP settings, computes epsilon (RDP and PLD), ReRo bounds from every route, Ziller et al.'s
prior-free bounds and Bayes' capacity. For the "every update released" threat model it plays the prior-aware
reconstruction game of Hayes et al. (2023) at priors of k random records and of k crafted gradient canaries, and
audits the mechanism (with/without-canary game read rigorously and as Gaussian DP, and a one-run audit with many
canaries; :mod:`recon_jax.report.updates`); it calibrates sigma to a reconstruction-risk target and measures
the accuracy that costs.
Every DP setting draws its own noise. Writes report.md, metrics.json (with the claims it checks), config.json and
PNG figures. Config validation, the sizes fitted to the data and the model, data and reconstructor it names:
:mod:`recon_jax.report.setup` and :mod:`recon_jax.report.sizes`; the command line: :mod:`recon_jax.report.command_line`; the report's text and
claims: :mod:`recon_jax.report.text`.

The workdir keeps what a rerun needs: each setting's ``models-<hash>`` folder ends with the attack's results
(``attack.npz``), which a rerun reads instead of training again; it is keyed by what its models and results depend
on (:func:`_model_store`: the config but the games', audits', calibration's, bounds' and claims' fields, the sweep
and ``keep_intermediates``, with the setting's index, name and noise multiplier), so changing, say, ``kappas`` or
``one_run_canaries``, or appending a noise multiplier, trains nothing again. Its shadow and released models and
reconstructor checkpoint are deleted once those results are saved (``keep_intermediates=True`` keeps them). Each DP
setting's privacy bounds (``bounds-<hash>``: :func:`recon_jax.accounting.privacy_bounds`, keyed by all its
arguments and the code), the games and audits (``updates-<hash>``) and the calibration (``calibration-<hash>``)
keep their results (:func:`recon_jax.evidence.run.stored_result`); the last two are keyed by the config fields they
read, digests of the arrays they read and the code (:func:`_phase_key`), so a rerun with nothing changed computes
none of them and a changed value recomputes. A finished run deletes the folders of other configs in the workdir.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import shutil
import sys
import time

import jax
import numpy as np

from recon_jax import accounting
from recon_jax import data as rdata
from recon_jax import models, shadow, training
from recon_jax.accounting import PrivacyBounds, privacy_bounds, tightest_rero
from recon_jax.attacks import audit, informed, reconn
from recon_jax.attacks import oracle as roracle
from recon_jax.evidence.markdown import markdown_table
from recon_jax.io import array_digest
from recon_jax.evidence.config_checks import ConfigError
from recon_jax.evidence.plots import image_grid
from recon_jax.evidence.progress import step
from recon_jax.evidence.run import (code_fingerprint, config_to_dict, finish_run, keyed_dir, require_finite,
                                    start_run, stored_result, wall_time)
from recon_jax.report import command_line
from recon_jax.report.figure import plot_threat_models
from recon_jax.report.reading import chance_accuracy, not_learned_note
from recon_jax.report.setup import (build_model, check_model, load_data, reconstructor_for, validate_config,
                                    with_image_size)
from recon_jax.report.sizes import fit_sizes, overrides
from recon_jax.report.text import claims as risk_claims
from recon_jax.report.text import report_markdown, shown_rows
from recon_jax.report.updates import every_update_released

__all__ = ["DEFAULT_CONFIG", "ConfigError", "validate_config", "sampling", "run", "console_main"]

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config.py") + ":default"
"""The console script's ``--config`` default: the config file shipped inside the package (found from a wheel)."""


def _algorithm(config, sigma):
    common = dict(learning_rate=config.learning_rate, momentum=config.momentum, epochs=config.epochs)
    if config.batch_size is None:
        if sigma is None:
            return training.full_batch_gd(**common)
        return training.dp_gd(config.clip_norm, noise_multiplier=sigma, **common)
    if sigma is None:
        return training.minibatch_sgd(config.batch_size, shuffle=config.shuffle, **common)
    return training.dp_sgd(config.batch_size, config.clip_norm, noise_multiplier=sigma, shuffle=config.shuffle,
                           **common)


def sampling(config) -> tuple[float, int]:
    """(sampling rate q, number of steps) for the privacy accounting of one released model.

    Full batch: every step sees every record (q = 1, one step per epoch). Minibatches with a secret ("fresh")
    order: q = batch / (fixed_size + 1) per step, the usual DP-SGD analysis (it is proven for Poisson sampling;
    shuffled fixed-size batches are accounted the same way, as is common practice). Minibatches whose order the
    adversary knows ("known"): it knows which single step of each epoch used the target, so subsampling
    amplifies nothing and the accounting is one unamplified Gaussian step per epoch (q = 1, epochs steps).
    """
    n_total = config.fixed_size + 1
    if config.batch_size is None or config.shuffle == "known":
        return 1.0, int(config.epochs)
    return config.batch_size / n_total, int(config.epochs * (n_total // config.batch_size))


def _ci(successes: int, trials: int, confidence: float) -> list[float]:
    lo, hi = audit.clopper_pearson(successes, trials, confidence)
    return [float(lo), float(hi)]


# Config fields a setting's stored models and attack results never depend on: what is kept, the sweep (the setting
# enters the key by its noise multiplier and its index, from which its noise draws derive), and the fields only
# the privacy bounds, the games and audits, the calibration, the confidence intervals and the claims read (the row
# recomputes the success at eta and the intervals from the stored per-target results). A deny-list: a field added
# later is in the key until someone shows the models do not depend on it.
_NOT_IN_MODELS = ("keep_intermediates", "noise_multipliers", "include_non_private", "delta", "kappas",
                  "prior_sizes", "prior_aware_trials", "crafted_candidates", "crafted_precision", "crafted_trials",
                  "audit_runs", "one_run_canaries", "confidence", "bound_tolerance", "crafted_reach", "audit_gdp_reach",
                  "audit_one_run_reach", "calibration_rero", "calibration_kappa", "calibration_models")


# The config fields _algorithm builds the setting's training algorithm from: they enter the models' key through
# the algorithm's own description (Algorithm.describe), so a field the setting's algorithm does not read (the clip
# norm without DP, the order of full batches) is out of it by construction.
_ALGORITHM_FIELDS = ("learning_rate", "momentum", "epochs", "batch_size", "clip_norm", "shuffle")


def _model_store(workdir, config, setting, inputs):
    """The stored shadow and released models (and reconstructor checkpoint, then the attack's results) of one
    setting ``(index, name, noise multiplier)``: ``models-<hash>``, keyed by what they depend on.

    The key holds the setting's training algorithm (:func:`_algorithm`, as described by
    :meth:`~recon_jax.training.Algorithm.describe`), the rest of the config but the fields :data:`_NOT_IN_MODELS`
    names (every field that shapes the data split, the model, the reconstructor and the chunk size is in; the
    games', audits', calibration's, bounds' and claims' fields, ``keep_intermediates`` and the sweep are out, so
    changing one reuses every setting's models), the setting's index in the sweep (its models' noise draws fold it
    in: appending a noise multiplier keeps the earlier settings' folders, inserting one before them does not), its
    name and noise multiplier, and ``inputs``: what the config names only by path (the model a
    ``model=file.py:Name`` file defines, the images of a ``data_path`` folder), by identity and content digest."""
    index, name, sigma = setting
    fields = {k: v for k, v in config_to_dict(config).items() if k not in _NOT_IN_MODELS + _ALGORITHM_FIELDS}
    key = {"config": fields, "algorithm": _algorithm(config, sigma).describe(), "setting": name,
           "setting_index": index, "noise_multiplier": sigma, "inputs": inputs}
    return keyed_dir(workdir, "models", key)


def _inputs_identity(fns, train, evaluation) -> dict:
    """The model's identity (:func:`recon_jax.models.model_identity`) and digests of the training and evaluation
    arrays, for the stores' keys."""
    return {"model": models.model_identity(fns, train[0][:1]),
            "data": [array_digest(np.asarray(a)) for a in (*train, *evaluation)]}


# Config fields a phase never reads (the claims' thresholds, the final-model attack's sizes and reconstructor,
# what is kept): every other field is in the phase's key, with the arrays it reads (by digest) and the code.
_NOT_IN_PHASES = ("keep_intermediates", "reconstructor", "reconstructor_epochs", "reconstructor_batch_size",
                  "reconstructor_learning_rate", "num_shadow", "num_targets", "include_non_private",
                  "bound_tolerance", "crafted_reach", "audit_gdp_reach", "audit_one_run_reach")
_NOT_IN_UPDATES = _NOT_IN_PHASES + ("calibration_rero", "calibration_kappa", "calibration_models")
_NOT_IN_CALIBRATION = _NOT_IN_PHASES + ("noise_multipliers", "kappas", "prior_sizes", "prior_aware_trials",
                                        "crafted_candidates", "crafted_precision", "crafted_trials", "audit_runs",
                                        "one_run_canaries", "confidence", "delta")


def _phase_key(config, exclude, inputs, arrays, **values) -> dict:
    """The key of a phase's stored result (the games and audits, the calibration): the config but the fields
    ``exclude`` names, ``inputs`` (:func:`_inputs_identity`), digests of ``arrays`` (name -> array or pytree),
    ``values`` (the sampling rate, steps, the DP rows' bounds) and the code (:func:`code_fingerprint`)."""
    fields = {k: v for k, v in config_to_dict(config).items() if k not in exclude}
    digests = {name: [array_digest(np.asarray(x)) for x in jax.tree_util.tree_leaves(tree)]
               for name, tree in arrays.items()}
    return {"config": fields, "inputs": inputs, "arrays": digests, "code": code_fingerprint(), **values}


def _stored_bounds(workdir: str, args: dict) -> tuple[PrivacyBounds, str]:
    """``privacy_bounds(**args)`` of one DP setting, kept in ``bounds-<hash>`` (keyed by every argument and the
    code, :func:`recon_jax.evidence.run.stored_result`): a rerun reads it. A fresh and a resumed run continue from
    the same values (the JSON form read back; :meth:`~recon_jax.accounting.PrivacyBounds.from_dict`). Returns the
    bounds and the folder."""
    stored = stored_result(workdir, "bounds", {"arguments": args, "code": code_fingerprint()},
                           lambda: privacy_bounds(**args).to_dict())
    return PrivacyBounds.from_dict(stored.value), stored.path


_ATTACK = "attack.npz"
_INTERMEDIATES = ("shadow", "released", "reconstructor")


def _drop_intermediates(store: str) -> None:
    """Deletes a finished setting's shadow and released models and reconstructor checkpoint (the attack's results
    in ``attack.npz`` are what a rerun reads); their stores' lock files go with them."""
    for name in _INTERMEDIATES:
        shutil.rmtree(os.path.join(store, name), ignore_errors=True)
        lock = os.path.join(store, name + ".lock")
        if os.path.exists(lock):
            os.unlink(lock)


_STORES = ("models", "bounds", "updates", "calibration")


def _prune_other_stores(workdir: str, keep: list[str]) -> list[str]:
    """Deletes the ``models-<hash>``, ``bounds-<hash>``, ``updates-<hash>`` and ``calibration-<hash>`` folders of
    other configs (or code) in ``workdir`` (runs with earlier configs leave them; only a rerun of that config could
    use one, and it would overwrite this report). Returns their names."""
    keep = {os.path.abspath(k) for k in keep}
    gone = []
    for path in sorted(p for name in _STORES for p in glob.glob(os.path.join(workdir, f"{name}-*"))):
        if os.path.isdir(path) and os.path.abspath(path) not in keep:
            shutil.rmtree(path)
            gone.append(os.path.basename(path))
    return gone


def _prepare(config):
    """Loads the data, fits the sizes and validates them: (config as run, overrides, split, data)."""
    changed = overrides(config)
    config = with_image_size(config)
    data = load_data(config)
    config, split = fit_sizes(config, len(data[0]), len(data[2]))
    validate_config(config, num_train=len(data[0]), num_test=len(data[2]))
    return config, changed, split, data


def _calibrate(config, fns, p0, fixed, s, eval_set, q, steps, key, shuffle_key) -> dict:
    """The smallest sigma with ReRo <= calibration_rero at kappa calibration_kappa, and the test accuracy of
    calibration_models released models trained at it."""
    with step(f"calibration: the smallest sigma with ReRo <= {config.calibration_rero:g} at kappa "
              f"{config.calibration_kappa:g}"):
        sigma_cal = float(accounting.calibrate_sigma_for_rero(config.calibration_rero, config.calibration_kappa,
                                                              q, steps))
    calibration = {"rero": config.calibration_rero, "kappa": config.calibration_kappa, "sample_rate": q,
                   "steps": steps, "noise_multiplier": sigma_cal, "test_accuracy": None, "models": 0}
    if math.isfinite(sigma_cal):
        m_cal = config.calibration_models
        cal = shadow.generate_shadow_models(
            fns, _algorithm(config, sigma_cal), fixed, (s.target_images[:m_cal], s.target_labels[:m_cal]),
            key, init_params=p0, shuffle_key=shuffle_key, outputs=("eval_accuracy",), eval_set=eval_set,
            chunk_size=config.chunk_size, desc=f"calibration models (sigma={sigma_cal:.3g})")
        calibration["test_accuracy"] = float(np.mean(cal["eval_accuracy"]))
        calibration["models"] = m_cal
    return calibration


def run(config, workdir: str) -> dict:
    """Runs the report; returns the metrics dict (also written to ``workdir/metrics.json``).

    Raises:
      ConfigError: (a ``ValueError``) naming the config field, before anything is written, when a field, the data
        or the model it names cannot be used.
    """
    t0 = time.time()
    validate_config(config)  # every field, before anything is shown: a config error is the only line printed
    with step("loading the data, fitting the sizes"):
        config, changed, split, (train_x, train_y, test_x, test_y) = _prepare(config)
    print(f"data: {split.sentence()}", flush=True)
    num_classes = int(max(train_y.max(), test_y.max()) + 1)
    fns = models.from_flax(build_model(config, num_classes))
    # One tiny engine job per training algorithm of the run (the non-private setting, the DP settings, the
    # calibration's DP training), before anything is written: an unsupported combination stops here, not after the
    # settings before it have trained.
    sigmas = ([None] if config.include_non_private else []) + [float(sg) for sg in config.noise_multipliers]
    if config.calibration_models and 1.0 not in sigmas:
        sigmas.append(1.0)  # calibration trains DP models too (the noise multiplier does not change the program)
    with step(f"checking the model: one tiny training job per algorithm ({len(sigmas)})"):
        check_model(config, fns, train_x, num_classes, labels=train_y,
                    algorithms=[_algorithm(config, sg) for sg in sigmas])
    recon_net, recon_name = reconstructor_for(config, train_x.shape[1:])
    run_info = start_run(workdir, config, seed=config.seed,
                         extra={"overrides": changed, "split": dataclasses.asdict(split)})
    workdir = run_info.workdir

    s = rdata.informed_splits(train_x, train_y, config.fixed_size, config.num_shadow, config.num_targets,
                              key_or_seed=config.seed)
    eval_set = (test_x[: config.eval_size], test_y[: config.eval_size])
    chance = chance_accuracy(eval_set[1])  # always guessing the most common test class
    image_shape = train_x.shape[1:]
    data_dim = int(np.prod(image_shape))
    key = jax.random.key(config.seed)
    k_init, k_models, k_recon, k_game, k_audit, k_calib, k_one_run = (jax.random.fold_in(key, i)
                                                                       for i in (0, 1, 3, 5, 6, 7, 8))
    p0 = training.initial_params(fns, k_init, s.fixed_images)
    num_params = models.count_params(p0)
    if config.noise_multipliers and sum(config.prior_sizes) + 1 > num_params:
        raise ConfigError(f"config.prior_sizes: the crafted priors and the audit canary need sum(prior_sizes) + 1 = "
                         f"{sum(config.prior_sizes) + 1} parameter coordinates; the model has {num_params}")
    fixed = (s.fixed_images, s.fixed_labels)
    q, steps = sampling(config)
    shuffle_key = jax.random.fold_in(key, 4) if config.batch_size is not None and config.shuffle == "known" else None

    # The NN oracle: the closest record the adversary knows (D- and the shadow targets) to each evaluation target.
    with step(f"nearest-neighbour oracle and prior kappa over {len(s.pool_images)} records"):
        orc = informed.oracle_for(s)
        oracle_mse = np.asarray(orc.nn_mse)
        eta = float(np.median(oracle_mse))  # success threshold for the ReRo comparison: the median oracle MSE
        kappa_eta = float(roracle.estimate_kappa(s.pool_images, eta, s.pool_labels, max_pool=None))
    # The reconstructor trains on 90% of the shadow models; the last 10% give its validation MSE.
    spec = reconn.ReconstructorSpec(
        epochs=config.reconstructor_epochs, batch_size=config.reconstructor_batch_size,
        learning_rate=config.reconstructor_learning_rate,
        validation_size=config.num_shadow - int(round(0.9 * config.num_shadow)), model=recon_net)

    settings = ([("non-private", None)] if config.include_non_private else []) + [
        (f"DP sigma={sg:g}", float(sg)) for sg in config.noise_multipliers]
    dp_settings = [(n, sg) for n, sg in settings if sg is not None]
    rows, recon_images, stores = [], {}, []
    timings = {}
    inputs = _inputs_identity(fns, (train_x, train_y), eval_set)
    for si, (name, sigma) in enumerate(settings):
        print(f"== setting: {name} ==", flush=True)
        t_set = time.time()
        # Independent randomness per setting: its shadow and released models draw their noise (and fresh
        # shuffles) from fold_in(k_models, si) (the library pipeline folds in 1 for shadow, 2 for released models).
        store = _model_store(workdir, config, (si, name, sigma), inputs)
        stores.append(store)
        attack_file = os.path.join(store, _ATTACK)
        if os.path.exists(attack_file):  # finished by an earlier run with the same models key: its results, as saved
            print(f"{name}: results of an earlier run with these models ({attack_file})", flush=True)
            res = informed.load_attack_result(attack_file)
        else:
            ms = informed.train_model_sets(fns, _algorithm(config, sigma), s, jax.random.fold_in(k_models, si),
                                           init_params=p0, shuffle_key=shuffle_key, eval_set=eval_set,
                                           run=informed.RunOptions(store=store, chunk_size=config.chunk_size),
                                           desc=name)
            require_finite(ms.shadow.params, f"shadow model parameters ({name})",
                           "learning rate too large for this setting?")
            require_finite(ms.released.params, f"released model parameters ({name})", "learning rate too large?")
            res = informed.informed_attack(s, ms, k_recon, oracle=orc, reconstructor=spec, name=name,
                                           checkpoint_dir=os.path.join(store, "reconstructor"), desc=name)
            require_finite(res.reconstructions, f"reconstructions ({name})", "reconstructor learning rate too large?")
            informed.save_attack_result(attack_file, res)
            del ms
            if not config.keep_intermediates:
                _drop_intermediates(store)
        recon_images[name] = res.reconstructions
        n_t = int(config.num_targets)
        wins, at_eta = int(res.success.sum()), int(np.sum(res.mse <= eta))
        summary = res.summary()  # the attack's own statistics, under the report's names
        row = {
            "setting": name,
            "noise_multiplier": sigma if sigma is not None else 0.0,
            "test_accuracy": summary["released_test_accuracy"],
            "mean_mse": summary["mean_mse"],
            "mean_oracle_mse": summary["mean_oracle_mse"],
            "success_rate": wins / n_t,
            "success_rate_ci": _ci(wins, n_t, config.confidence),
            "success_at_eta": at_eta / n_t,
            "success_at_eta_ci": _ci(at_eta, n_t, config.confidence),
            "mean_psnr": summary["mean_psnr"],
            "mean_ssim": summary["mean_ssim"],
            "mean_ncc": summary["mean_ncc"],
            "reconstructor_val_mse": summary["final_validation_mse"],
            "num_shadow_models": int(config.num_shadow),
            "num_targets": n_t,
            "eps_rdp": float("inf"),
            "eps_pld": float("inf"),
        }
        if sigma is not None:
            kappas = sorted(set(config.kappas) | {1.0 / k for k in config.prior_sizes})
            with step(f"{name}: privacy accounting (RDP and PLD epsilon, ReRo bounds at {len(kappas) + 1} priors)"):
                b, bounds_dir = _stored_bounds(workdir, dict(
                    noise_multiplier=sigma, sample_rate=q, steps=steps, delta=config.delta,
                    clip_norm=config.clip_norm, data_dim=data_dim, kappas=kappas, eta_mse=eta,
                    kappa_at_eta=kappa_eta if 0 < kappa_eta < 1 else None, num_params=num_params))
            stores.append(bounds_dir)
            row["eps_rdp"], row["eps_pld"] = b.eps_rdp, b.eps_pld
            at = [r for r in b.rero if r.kappa == kappa_eta]
            if at:
                row.update(bound_rdp=at[0].rero_rdp, bound_zcdp=at[0].rero_zcdp, bound_at_eta=tightest_rero(at[0])[0],
                           **{k.replace("rero_", "bound_"): getattr(at[0], k) for k in ("rero_gdp", "rero_pld")
                              if getattr(at[0], k) is not None})
            row["bounds"] = b.to_dict()
        rows.append(row)
        warning = not_learned_note([row], chance, len(eval_set[1]))
        if warning:
            print(warning.replace("**", ""), flush=True)
        timings[name] = time.time() - t_set

    update_rows, geometry = [], None
    dp_rows = [r for r in rows if r["noise_multiplier"] > 0]
    if dp_settings:
        print("== every update released: prior-aware games (records, crafted canaries), audits ==", flush=True)
        before = [set(r) for r in dp_rows]

        def updates():
            optimizer = _algorithm(config, None).make_optimizer()  # one object: each game compiles once
            out = every_update_released(config, fns, p0, fixed, test_x, test_y, dp_rows, q, steps,
                                        (k_game, k_audit, k_one_run), optimizer, timings)
            return {"update_rows": out[0], "geometry": out[1],
                    "audits": [{k: r[k] for k in r if k not in b} for r, b in zip(dp_rows, before)]}

        t_upd = time.time()
        phase_key = _phase_key(config, _NOT_IN_UPDATES, inputs, {"p0": p0, "fixed": fixed, "test": (test_x, test_y)},
                               rows=[{k: r[k] for k in ("setting", "noise_multiplier", "bounds")} for r in dp_rows],
                               sample_rate=q, steps=steps)
        stored = stored_result(workdir, "updates", phase_key, updates)
        stores.append(stored.path)
        for row, audits in zip(dp_rows, stored.value["audits"]):
            row.update(audits)  # the games' audit keys, as stored (the same values a fresh run continues from)
        update_rows, geometry = stored.value["update_rows"], stored.value["geometry"]
        if stored.resumed:
            print(f"games and audits: results of an earlier run of this config ({stored.path})", flush=True)
            timings["prior_aware_and_audits_resumed"] = time.time() - t_upd

    calibration = None
    if dp_settings or config.calibration_models:
        t_cal = time.time()
        targets = (s.target_images[:config.calibration_models], s.target_labels[:config.calibration_models])
        phase_key = _phase_key(config, _NOT_IN_CALIBRATION, inputs, {"p0": p0, "fixed": fixed, "targets": targets},
                               sample_rate=q, steps=steps)
        stored = stored_result(workdir, "calibration", phase_key,
                               lambda: _calibrate(config, fns, p0, fixed, s, eval_set, q, steps, k_calib, shuffle_key))
        stores.append(stored.path)
        calibration = stored.value
        timings["calibration_resumed" if stored.resumed else "calibration"] = time.time() - t_cal

    figures = {}
    grid = {"target": s.target_images}
    grid.update({f"recon: {k}": v for k, v in recon_images.items()})
    grid["NN oracle"] = s.pool_images[np.asarray(orc.nn_index)]
    figures["reconstructions"] = image_grid(grid, os.path.join(workdir, "reconstructions.png"),
                                            title="Targets, attack reconstructions per setting, NN oracle")
    if dp_rows:
        figures["bounds_vs_attack"] = plot_threat_models(dp_rows, update_rows,
                                                         os.path.join(workdir, "bounds_vs_attack.png"),
                                                         confidence=config.confidence)
    elapsed = time.time() - t0
    total = wall_time(run_info)  # with the earlier segments' when this run resumed their stores
    result = {"rows": rows, "prior_aware": update_rows, "candidate_gradient_geometry": geometry,
              "calibration": calibration, "eta_mse": eta, "kappa_at_eta": kappa_eta, "sample_rate": q,
              "steps": steps, "num_params": num_params, "runtime_seconds": elapsed,
              "total_seconds": total.seconds, "total_segments": total.segments, "total_complete": total.complete,
              "timings_seconds": timings, "figures": {k: os.path.basename(v) for k, v in figures.items()},
              "overrides": changed, "split": {**dataclasses.asdict(split), "sentence": split.sentence()},
              "chance_accuracy": chance, "eval_size": int(len(eval_set[1]))}
    claims = risk_claims(config, result)
    report = report_markdown(config, result, s, num_params, q, steps, recon_name, claims=claims)
    metrics = finish_run(run_info, result, report, claims, smoke_banner=False)  # its own decidability banner
    gone = _prune_other_stores(workdir, stores)
    if gone:
        print(f"removed {len(gone)} cached folder(s) of other configs from {workdir}: {', '.join(gone)}")
    print(markdown_table(shown_rows(rows), ["setting", "test_accuracy", "eps_rdp", "empirical_eps", "mean_mse",
                                            "success_rate", "success_at_eta"]))
    if update_rows:
        print(markdown_table(update_rows, ["setting", "prior_size", "candidates", "prior_aware_success",
                                           "prior_aware_bound"]))
    print(f"report: {os.path.join(workdir, 'report.md')}  ({elapsed / 60:.1f} min)")
    return metrics


def console_main(argv: list[str] | None = None) -> None:
    """Entry point of the ``recon-jax-report`` console script and of ``python -m experiments.risk_report``:
    ``--config`` (a variant name ``smoke`` / ``default`` / ``paper``, or a config file path[:variant]; default
    :data:`DEFAULT_CONFIG`), ``--config.<field>=value`` overrides, ``--workdir`` (default ``runs/risk_report``),
    ``--help`` (every config field with its default and meaning) and ``--debug`` (tracebacks for config and data
    errors, which otherwise print one line and exit with status 2). See :mod:`recon_jax.report.command_line`."""
    command_line.console(run, DEFAULT_CONFIG, sys.argv if argv is None else argv)


if __name__ == "__main__":
    console_main()
