"""The reconstruction-risk report: "if I train this model on my data with this DP-SGD configuration and release
it, how well could someone reconstruct a training record, and what do the theorems guarantee?"

python -m experiments.risk_report --config=experiments/configs/risk_report.py:default --workdir=runs/demo
or, from an installed wheel, ``recon-jax-report --workdir=runs/demo`` (the console script, :func:`console_main`;
its config is :mod:`recon_jax.report.risk_config`, which ``experiments/configs/risk_report.py`` re-exports);
``make demo`` runs the default config.

For the non-private setting and each noise multiplier of the sweep it: trains the released models (one per
evaluation target, on D- + target; reports test accuracy); trains shadow models and Balle et al.'s reconstructor
network; reconstructs every target and scores it (MSE, PSNR, SSIM, NCC, success against the nearest-neighbour
oracle); and, for DP settings, computes epsilon (RDP and PLD), ReRo bounds from every route, Ziller et al.'s
prior-free bounds and Bayes' capacity. For the "every update released" threat model it plays the prior-aware
reconstruction game of Hayes et al. (2023) at priors of k random records and a with/without-canary game for a 95%
lower bound on epsilon; it calibrates sigma to a reconstruction-risk target and measures the accuracy that costs.
Every DP setting draws its own noise. Writes report.md, metrics.json (with the claims it checks), config.json and
PNG figures.
"""

from __future__ import annotations

import importlib
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax import accounting
from recon_jax import data as rdata
from recon_jax import models, shadow, training
from recon_jax.attacks import audit, informed, prior_aware
from recon_jax.attacks import oracle as roracle
from recon_jax.models.reconstructors import TransposedConvDecoder
from recon_jax.accounting import privacy_bounds, tightest_rero
from recon_jax.report.cli import experiment_flags, run_app
from recon_jax.report.evidence import claim, config_to_dict, finish_run, keyed_dir, require_finite, start_run
from recon_jax.report.markdown import markdown_table
from recon_jax.report.plots import image_grid
from recon_jax.report.risk import plot_threat_models

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "risk_config.py") + ":default"
"""The console script's ``--config`` default: the config file shipped inside the package (found from a wheel)."""

KNOWN_KEYS = {
    "variant", "seed", "dataset", "fixed_size", "num_shadow", "num_targets", "eval_size", "hidden", "activation",
    "epochs", "learning_rate", "momentum", "batch_size", "shuffle", "include_non_private", "noise_multipliers",
    "clip_norm", "delta", "kappas", "reconstructor_epochs", "reconstructor_batch_size", "reconstructor_learning_rate",
    "chunk_size", "prior_sizes", "prior_aware_trials", "audit_runs", "confidence", "calibration_rero",
    "calibration_kappa", "calibration_models", "model", "data_path", "image_size", "channels", "reconstructor",
}

ZOO = ("balle_mnist_mlp", "lenet", "balle_cifar_cnn")


def _build_model(config, num_classes: int):
    """The released model named by ``config.model``: a zoo name or ``package.module:attribute`` (a flax module, or
    a callable taking ``num_classes`` and returning one)."""
    name = config.model
    if name == "balle_mnist_mlp":
        return models.balle_mnist_mlp(hidden=config.hidden, activation=config.activation, num_classes=num_classes)
    if name == "lenet":
        return models.lenet(num_classes=num_classes)
    if name == "balle_cifar_cnn":
        return models.balle_cifar_cnn(activation=config.activation, num_classes=num_classes)
    module_name, _, attr = name.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        _fail("model", f"cannot import {name!r} ({type(err).__name__}: {err})")
    import flax.linen as nn

    module = obj if isinstance(obj, nn.Module) else obj(num_classes)
    if not isinstance(module, nn.Module):
        _fail("model", f"{name!r} must be a flax.linen Module or a callable (num_classes) -> Module, got "
                       f"{type(module).__name__}")
    return module


def _check_model(config, fns, example, num_classes: int):
    """Runs the model on shapes only (no training): it must accept the data and emit >= num_classes logits."""
    try:
        params = jax.eval_shape(fns.init, jax.random.key(0), example[:1])
        out = jax.eval_shape(fns.apply, params, example[:2])
    except (TypeError, ValueError) as err:
        _fail("model", f"{config.model!r} cannot run on inputs of shape {example.shape[1:]} from dataset "
                       f"{config.dataset!r}: {err}")
    if out.ndim != 2 or out.shape[1] < num_classes:
        _fail("model", f"{config.model!r} must map inputs to [batch, >= {num_classes}] logits, got {out.shape}")


def _reconstructor(config, image_shape):
    """The adversary's reconstructor network (:func:`recon_jax.attacks.informed.reconstructor_network`, from
    ``config.reconstructor``) and its description for the report."""
    try:
        net = informed.reconstructor_network(image_shape, config.reconstructor)
    except ValueError as err:
        _fail("reconstructor", str(err))
    if isinstance(net, TransposedConvDecoder):
        return net, "transposed-conv decoder"
    return net, f"MLP {len(net.hidden)}x{net.hidden[0]}"


def _dataset_kwargs(config) -> dict:
    if config.dataset != "folder":
        return {}
    return {"path": config.data_path, "image_size": config.image_size, "channels": config.channels}


def _load_data(config):
    """(train_x, train_y, test_x, test_y), validated: finite images in [0, 1] and labels >= 0."""
    kw = _dataset_kwargs(config)
    train_x, train_y = rdata.load_dataset(config.dataset, "train", **kw)
    test_x, test_y = rdata.load_dataset(config.dataset, "test", **kw)
    field = "data_path" if config.dataset == "folder" else "dataset"
    for x, y, split in ((train_x, train_y, "train"), (test_x, test_y, "test")):
        if np.any(y < 0):
            _fail(field, f"every {split} image needs a class label (one sub-directory per class)")
        if x.shape[1:] != train_x.shape[1:]:
            _fail(field, f"train and test images differ in shape: {train_x.shape[1:]} vs {x.shape[1:]}")
    return train_x, train_y, test_x, test_y


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fail(field: str, message: str):
    raise ValueError(f"config.{field}: {message}")


def validate_config(config, num_train: int | None = None, num_test: int | None = None) -> None:
    """Checks every field before any work starts; raises ValueError naming the field."""
    keys = set(config.keys())
    unknown = sorted(keys - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"config has unknown field(s) {unknown}; known fields: {sorted(KNOWN_KEYS)}")
    missing = sorted(KNOWN_KEYS - keys)
    if missing:
        raise ValueError(f"config is missing field(s) {missing}")
    if config.dataset not in rdata.DATASETS:
        _fail("dataset", f"must be one of {list(rdata.DATASETS)}, got {config.dataset!r}")
    if config.dataset == "folder":
        path = config.data_path
        if not (isinstance(path, str) and all(os.path.isdir(os.path.join(path, sp)) for sp in ("train", "test"))):
            _fail("data_path", f"dataset 'folder' needs a directory with train/ and test/ sub-directories (one "
                               f"sub-directory per class in each), got {path!r}")
        if not (_is_int(config.image_size) and config.image_size >= 4):
            _fail("image_size", f"dataset 'folder' needs an integer image_size >= 4, got {config.image_size!r}")
        if config.channels not in (1, 3):
            _fail("channels", f"must be 1 or 3, got {config.channels!r}")
    else:
        for field in ("data_path", "image_size"):
            if config[field] is not None:
                _fail(field, f"applies to dataset 'folder' only; leave it None for {config.dataset!r}")
    if not (isinstance(config.model, str) and (config.model in ZOO or ":" in config.model)):
        _fail("model", f"must be one of {list(ZOO)} or 'package.module:attribute', got {config.model!r}")
    if config.reconstructor not in informed.RECONSTRUCTOR_KINDS:
        _fail("reconstructor", f"must be one of {list(informed.RECONSTRUCTOR_KINDS)}, got {config.reconstructor!r}")
    for field, lo in (("seed", 0), ("fixed_size", 1), ("num_shadow", 10), ("num_targets", 1), ("eval_size", 1),
                      ("hidden", 1), ("epochs", 1), ("reconstructor_epochs", 1), ("reconstructor_batch_size", 1),
                      ("chunk_size", 1), ("prior_aware_trials", 2), ("audit_runs", 4), ("calibration_models", 1)):
        v = config[field]
        if not _is_int(v) or v < lo:
            _fail(field, f"must be an integer >= {lo}, got {v!r}")
    if config.activation not in ("elu", "relu", "tanh", "sigmoid"):
        _fail("activation", f"must be one of elu, relu, tanh, sigmoid, got {config.activation!r}")
    for field in ("learning_rate", "reconstructor_learning_rate", "clip_norm"):
        if not (_is_number(config[field]) and config[field] > 0):
            _fail(field, f"must be > 0, got {config[field]!r}")
    if not 0 <= config.momentum < 1:
        _fail("momentum", f"must be in [0, 1), got {config.momentum!r}")
    if not 0 < config.delta < 1:
        _fail("delta", f"must be in (0, 1), got {config.delta!r}")
    if not _is_number(config.momentum):
        _fail("momentum", f"must be a number in [0, 1), got {config.momentum!r}")
    sigmas = tuple(config.noise_multipliers)
    for s in sigmas:
        if not (_is_number(s) and s > 0):
            _fail("noise_multipliers", f"every noise multiplier must be a finite number > 0, got {s!r}")
    if len(set(sigmas)) != len(sigmas):
        _fail("noise_multipliers", f"must not repeat a value, got {sigmas}")
    if not sigmas and not config.include_non_private:
        _fail("noise_multipliers", "is empty and include_non_private is False: nothing to run")
    for k in config.kappas:
        if not (_is_number(k) and 0 < k < 1):
            _fail("kappas", f"every prior kappa must be in (0, 1), got {k!r}")
    sizes = tuple(config.prior_sizes)
    if not sizes or any(not _is_int(k) or k < 2 for k in sizes) or len(set(sizes)) != len(sizes):
        _fail("prior_sizes", f"must be distinct integers >= 2 (uniform priors of k candidates), got {sizes}")
    for field in ("confidence", "calibration_rero", "calibration_kappa"):
        if not (_is_number(config[field]) and 0 < config[field] < 1):
            _fail(field, f"must be in (0, 1), got {config[field]!r}")
    if not config.calibration_rero > config.calibration_kappa:
        _fail("calibration_rero", f"must exceed calibration_kappa = {config.calibration_kappa} (no noise level pushes "
                                  f"the bound below the prior), got {config.calibration_rero}")
    if config.batch_size is not None and not (1 <= config.batch_size <= config.fixed_size + 1):
        _fail("batch_size", f"must be None (full batch) or in [1, fixed_size + 1 = {config.fixed_size + 1}], "
                            f"got {config.batch_size!r}")
    if config.shuffle not in ("fresh", "known"):
        _fail("shuffle", f"must be 'fresh' (secret per-model batch order) or 'known' (the adversary knows it), "
                         f"got {config.shuffle!r}")
    if num_train is not None:
        need = config.fixed_size + config.num_shadow + config.num_targets
        if need > num_train:
            _fail("num_shadow", f"fixed_size + num_shadow + num_targets = {need} exceeds the {num_train} training "
                                f"examples of {config.dataset!r}")
    if num_test is not None and config.eval_size > num_test:
        _fail("eval_size", f"must be <= {num_test} (test examples of {config.dataset!r}), got {config.eval_size}")
    if num_test is not None and max(sizes) + 1 > num_test - config.eval_size:
        _fail("prior_sizes", f"the largest prior ({max(sizes)}) and the canary need {max(sizes) + 1} test records "
                             f"beyond eval_size; {config.dataset!r} has {num_test - config.eval_size}")
    if num_test is not None and config.calibration_models > config.num_targets:
        _fail("calibration_models", f"must be <= num_targets = {config.num_targets}, got {config.calibration_models}")


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


def _game_chunk(config) -> int:
    """Trials per compiled call: prior_aware_trials split evenly into chunks of at most chunk_size (no padding);
    the audit uses the same chunk, so both games share one compilation."""
    n = config.prior_aware_trials
    return math.ceil(n / math.ceil(n / config.chunk_size))


def _prior_aware(config, fns, p0, fixed, test_x, test_y, settings, q, steps, key, optimizer):
    """The prior-aware game at every DP setting (one vmapped call; noise level s uses fold_in(key, s)).

    Priors: for each trial, max(prior_sizes) distinct random test records beyond eval_size (not in D-); the target
    is the first, and the prior of size k is the first k (exchangeable, so the target is uniform over it).
    """
    rng = np.random.default_rng([config.seed, 1])
    pool = np.arange(config.eval_size + 1, len(test_x))  # index eval_size is the canary
    kmax = max(config.prior_sizes)
    idx = np.stack([rng.choice(pool, kmax, replace=False) for _ in range(config.prior_aware_trials)])
    sigmas = [sg for _, sg in settings]
    res = prior_aware.prior_aware_game(
        fns, p0, fixed, (test_x[idx], test_y[idx]), np.zeros(len(idx), np.int32), noise_multipliers=sigmas,
        clip_norm=config.clip_norm, steps=steps, optimizer=optimizer, key=key, sample_rate=q,
        include_target=np.ones(len(idx), np.float32), chunk_size=_game_chunk(config))
    scores = np.asarray(res.scores)
    require_finite(scores, "prior-aware attack scores", "noise multiplier too small for float32 likelihoods?")
    # Geometry of the candidates' clipped gradients at the initialisation (what limits the attack below the bound).
    g = training.clip_gradients(training.per_example_gradients(fns, p0, test_x[idx[0]], test_y[idx[0]]),
                                config.clip_norm)
    g = np.asarray(g, np.float64)
    norms = np.linalg.norm(g, axis=1)
    cos = (g @ g.T) / np.maximum(np.outer(norms, norms), 1e-30)
    off = cos[~np.eye(len(g), dtype=bool)]
    geometry = {"mean_abs_cosine": float(np.abs(off).mean()), "max_abs_cosine": float(np.abs(off).max()),
                "share_at_clip_norm": float(np.mean(norms >= 0.999 * config.clip_norm))}
    return scores, geometry


def _audit(config, fns, p0, fixed, test_x, test_y, settings, q, steps, key, num_classes, optimizer):
    """White-box with/without-canary game per DP setting -> empirical epsilon (attacks.audit).

    Canary: the test record at index eval_size with a wrong label ((y + 1) mod classes), whose gradient stays
    large through training. Runs alternate with / without it; its scores are the log-likelihood ratios. The
    candidate axis repeats the canary max(prior_sizes) times so that the game's compilation is shared with
    :func:`_prior_aware` (only the first column is used).
    """
    n = 2 * config.audit_runs
    kmax = max(config.prior_sizes)
    cx = np.broadcast_to(test_x[config.eval_size][None, None], (n, kmax) + test_x.shape[1:])
    cy = np.full((n, kmax), (int(test_y[config.eval_size]) + 1) % num_classes, np.int32)
    include = np.arange(n) % 2
    res = prior_aware.prior_aware_game(
        fns, p0, fixed, (cx, cy), np.zeros(n, np.int32), noise_multipliers=[sg for _, sg in settings],
        clip_norm=config.clip_norm, steps=steps, optimizer=optimizer, key=key, sample_rate=q,
        include_target=include.astype(np.float32), chunk_size=_game_chunk(config))
    scores = np.asarray(res.scores[..., 0])
    require_finite(scores, "canary log-likelihood ratios")
    out = []
    rng = np.random.default_rng([config.seed, 2])
    for i, (_, sigma) in enumerate(settings):
        a = audit.empirical_epsilon(scores[i][include == 1], scores[i][include == 0], config.delta,
                                    confidence=config.confidence)
        # What a perfect canary could certify with the same number of runs: the same audit on the exact
        # log-likelihood ratio of full-norm mu-GDP, N(mu, 1) vs N(0, 1) with mu = sqrt(T) / sigma (q = 1 only).
        ideal = None
        if q == 1.0:
            mu = math.sqrt(steps) / sigma
            ideal = audit.empirical_epsilon(rng.normal(mu, 1.0, config.audit_runs), rng.normal(0.0, 1.0, config.audit_runs),
                                            config.delta, confidence=config.confidence).eps_lower
        out.append({"empirical_eps": a.eps_lower, "audit_fpr": a.fpr, "audit_fnr": a.fnr,
                    "audit_fpr_upper": a.fpr_upper, "audit_fnr_upper": a.fnr_upper,
                    "audit_eval_runs_per_world": a.num_eval_with, "ideal_gaussian_audit_eps": ideal})
    return out


def _model_store(workdir, config, name, sigma):
    """The stored shadow and released models (and reconstructor checkpoints) of one setting, keyed by the whole
    config and the setting."""
    key = {"config": config_to_dict(config), "setting": name, "noise_multiplier": sigma}
    return keyed_dir(workdir, "models", key)


def run(config, workdir: str) -> dict:
    """Runs the report; returns the metrics dict (also written to ``workdir/metrics.json``)."""
    t0 = time.time()
    validate_config(config)
    train_x, train_y, test_x, test_y = _load_data(config)
    validate_config(config, num_train=len(train_x), num_test=len(test_x))
    num_classes = int(max(train_y.max(), test_y.max()) + 1)
    fns = models.from_flax(_build_model(config, num_classes))
    _check_model(config, fns, train_x, num_classes)
    recon_net, recon_name = _reconstructor(config, train_x.shape[1:])
    run_info = start_run(workdir, config, seed=config.seed)
    workdir = run_info.workdir

    s = rdata.informed_splits(train_x, train_y, config.fixed_size, config.num_shadow, config.num_targets,
                              key_or_seed=config.seed)
    eval_set = (test_x[: config.eval_size], test_y[: config.eval_size])
    image_shape = train_x.shape[1:]
    data_dim = int(np.prod(image_shape))
    key = jax.random.key(config.seed)
    k_init, k_models, k_recon, k_game, k_audit, k_calib = (jax.random.fold_in(key, i) for i in (0, 1, 3, 5, 6, 7))
    p0 = training.initial_params(fns, k_init, s.fixed_images)
    num_params = models.count_params(p0)
    fixed = (s.fixed_images, s.fixed_labels)
    q, steps = sampling(config)
    shuffle_key = jax.random.fold_in(key, 4) if config.batch_size is not None and config.shuffle == "known" else None

    # The NN oracle: the closest record the adversary knows (D- and the shadow targets) to each evaluation target.
    orc = informed.oracle_for(s)
    oracle_mse = np.asarray(orc.nn_mse)
    eta = float(np.median(oracle_mse))  # success threshold for the ReRo comparison: the median oracle MSE
    kappa_eta = float(roracle.estimate_kappa(s.pool_images, eta, s.pool_labels, max_pool=None))
    # The reconstructor trains on 90% of the shadow models; the last 10% give its validation MSE.
    spec = informed.ReconstructorSpec(
        epochs=config.reconstructor_epochs, batch_size=config.reconstructor_batch_size,
        learning_rate=config.reconstructor_learning_rate,
        validation_size=config.num_shadow - int(round(0.9 * config.num_shadow)), model=recon_net)

    settings = ([("non-private", None)] if config.include_non_private else []) + [
        (f"DP sigma={sg:g}", float(sg)) for sg in config.noise_multipliers]
    dp_settings = [(n, sg) for n, sg in settings if sg is not None]
    rows, recon_images = [], {}
    timings = {}
    for si, (name, sigma) in enumerate(settings):
        print(f"== setting: {name} ==", flush=True)
        t_set = time.time()
        # Independent randomness per setting: its shadow and released models draw their noise (and fresh
        # shuffles) from fold_in(k_models, si) (the library pipeline folds in 1 for shadow, 2 for released models).
        store = _model_store(workdir, config, name, sigma)
        ms = informed.train_model_sets(fns, _algorithm(config, sigma), s, jax.random.fold_in(k_models, si),
                                       init_params=p0, shuffle_key=shuffle_key, eval_set=eval_set, store=store,
                                       chunk_size=config.chunk_size)
        require_finite(ms.shadow.params, f"shadow model parameters ({name})",
                       "learning rate too large for this setting?")
        require_finite(ms.released.params, f"released model parameters ({name})", "learning rate too large?")
        res = informed.informed_attack(s, ms, k_recon, oracle=orc, reconstructor=spec, name=name,
                                       checkpoint_dir=os.path.join(store, "reconstructor"))
        require_finite(res.reconstructions, f"reconstructions ({name})", "reconstructor learning rate too large?")
        recon_images[name] = res.reconstructions
        n_t = int(config.num_targets)
        wins, at_eta = int(res.success.sum()), int(np.sum(res.mse <= eta))
        row = {
            "setting": name,
            "noise_multiplier": sigma if sigma is not None else 0.0,
            "test_accuracy": float(np.mean(res.released_accuracy)),
            "mean_mse": res.mean_mse,
            "mean_oracle_mse": res.mean_oracle_mse,
            "success_rate": wins / n_t,
            "success_rate_ci": _ci(wins, n_t, config.confidence),
            "success_at_eta": at_eta / n_t,
            "success_at_eta_ci": _ci(at_eta, n_t, config.confidence),
            "mean_psnr": float(np.mean(np.minimum(res.psnr, 100.0))),
            "mean_ssim": None if res.ssim is None else float(res.ssim.mean()),
            "mean_ncc": float(np.nanmean(res.ncc)),
            "reconstructor_val_mse": float(res.validation_mse[-1]) if len(res.validation_mse) else None,
            "num_shadow_models": int(config.num_shadow),
            "num_targets": n_t,
            "eps_rdp": float("inf"),
            "eps_pld": float("inf"),
        }
        if sigma is not None:
            kappas = sorted(set(config.kappas) | {1.0 / k for k in config.prior_sizes})
            b = privacy_bounds(sigma, q, steps, config.delta, config.clip_norm, data_dim, kappas,
                               eta_mse=eta, kappa_at_eta=kappa_eta, num_params=num_params)
            row["eps_rdp"], row["eps_pld"] = b.eps_rdp, b.eps_pld
            at = [r for r in b.rero if r.kappa == kappa_eta]
            if at:
                row.update(bound_rdp=at[0].rero_rdp, bound_zcdp=at[0].rero_zcdp, bound_gdp=at[0].rero_gdp,
                           bound_at_eta=tightest_rero(at[0])[0])
            row["bounds"] = b.to_dict()
        rows.append(row)
        timings[name] = time.time() - t_set

    update_rows, geometry = [], None
    if dp_settings:
        print("== every update released: prior-aware game, canary audit ==", flush=True)
        t_game = time.time()
        optimizer = _algorithm(config, None).make_optimizer()  # one object: the game compiles once
        scores, geometry = _prior_aware(config, fns, p0, fixed, test_x, test_y, dp_settings, q, steps, k_game,
                                        optimizer)
        timings["prior_aware_game"] = time.time() - t_game
        t_aud = time.time()
        audits = _audit(config, fns, p0, fixed, test_x, test_y, dp_settings, q, steps, k_audit, num_classes,
                        optimizer)
        timings["canary_audit"] = time.time() - t_aud
        dp_rows = [r for r in rows if r["noise_multiplier"] > 0]
        for i, (name, sigma) in enumerate(dp_settings):
            row = dp_rows[i]
            row.update(audits[i])
            for k in config.prior_sizes:
                wins = int(np.sum(np.argmax(scores[i, :, :k], axis=-1) == 0))
                n_tr_game = scores.shape[1]
                brow = next(r for r in row["bounds"]["rero"] if r["kappa"] == 1.0 / k)
                bound, route = tightest_rero(brow)
                rec = {"setting": name, "noise_multiplier": sigma, "prior_size": int(k), "kappa": 1.0 / k,
                       "prior_aware_success": wins / n_tr_game,
                       "prior_aware_ci": _ci(wins, n_tr_game, config.confidence),
                       "prior_aware_bound": bound, "bound_route": route, "trials": n_tr_game,
                       "success_over_bound": (wins / n_tr_game) / bound}
                if q == 1.0:
                    opt = prior_aware.orthogonal_success_probability(int(k), math.sqrt(steps) / sigma)
                    rec["orthogonal_optimum"] = opt
                    rec["orthogonal_optimum_over_bound"] = opt / bound
                update_rows.append(rec)

    calibration = None
    if dp_settings or config.calibration_models:
        t_cal = time.time()
        sigma_cal = float(accounting.calibrate_sigma_for_rero(config.calibration_rero, config.calibration_kappa, q,
                                                              steps))
        calibration = {"rero": config.calibration_rero, "kappa": config.calibration_kappa, "sample_rate": q,
                       "steps": steps, "noise_multiplier": sigma_cal, "test_accuracy": None, "models": 0}
        if math.isfinite(sigma_cal):
            m_cal = config.calibration_models
            cal = shadow.generate_shadow_models(
                fns, _algorithm(config, sigma_cal), fixed, (s.target_images[:m_cal], s.target_labels[:m_cal]),
                k_calib, init_params=p0, shuffle_key=shuffle_key, outputs=("eval_accuracy",), eval_set=eval_set,
                chunk_size=config.chunk_size)
            calibration["test_accuracy"] = float(np.mean(cal["eval_accuracy"]))
            calibration["models"] = m_cal
        timings["calibration"] = time.time() - t_cal

    figures = {}
    grid = {"target": s.target_images}
    grid.update({f"recon: {k}": v for k, v in recon_images.items()})
    grid["NN oracle"] = s.pool_images[np.asarray(orc.nn_index)]
    figures["reconstructions"] = image_grid(grid, os.path.join(workdir, "reconstructions.png"),
                                            title="Targets, attack reconstructions per setting, NN oracle")
    dp_rows = [r for r in rows if r["noise_multiplier"] > 0]
    if dp_rows:
        figures["bounds_vs_attack"] = plot_threat_models(dp_rows, update_rows,
                                                         os.path.join(workdir, "bounds_vs_attack.png"))
    elapsed = time.time() - t0
    result = {"rows": rows, "prior_aware": update_rows, "candidate_gradient_geometry": geometry,
              "calibration": calibration, "eta_mse": eta, "kappa_at_eta": kappa_eta, "sample_rate": q,
              "steps": steps, "num_params": num_params, "runtime_seconds": elapsed,
              "timings_seconds": timings, "figures": {k: os.path.basename(v) for k, v in figures.items()}}
    report = _report_markdown(config, result, s, num_params, q, steps, recon_name)
    claims = _claims(config, result)
    metrics = finish_run(run_info, result, report, claims)
    print(markdown_table(rows, ["setting", "test_accuracy", "eps_rdp", "empirical_eps", "mean_mse", "success_rate",
                                "success_at_eta"]))
    if update_rows:
        print(markdown_table(update_rows, ["setting", "prior_size", "prior_aware_success", "prior_aware_bound"]))
    print(f"report: {os.path.join(workdir, 'report.md')}  ({elapsed / 60:.1f} min)")
    return metrics


def _claims(config, result) -> list[dict]:
    rows, upd = result["rows"], result["prior_aware"]
    out = []
    np_rows = [r for r in rows if r["noise_multiplier"] == 0]
    if np_rows:
        r = np_rows[0]
        out.append(claim("without DP the informed attack beats the NN oracle on most targets (Balle et al.)",
                         r["success_rate"] > 0.5,
                         f"success {r['success_rate']:.3f} (95% CI {r['success_rate_ci'][0]:.3f}-"
                         f"{r['success_rate_ci'][1]:.3f}) over {r['num_targets']} targets"))
    if upd:
        over = [u for u in upd if u["prior_aware_ci"][0] > u["prior_aware_bound"]]
        worst = max(upd, key=lambda u: u["prior_aware_ci"][0] - u["prior_aware_bound"])
        out.append(claim("every prior-aware success lies below its ReRo bound within its 95% interval (Hayes et al.)",
                         not over, f"{len(upd) - len(over)} of {len(upd)} (setting, k) pairs; closest: "
                                   f"{worst['setting']} k={worst['prior_size']}: CI low "
                                   f"{worst['prior_aware_ci'][0]:.3f} vs bound {worst['prior_aware_bound']:.3f}"))
        at10 = [u for u in upd if u["prior_size"] == 10]
        if at10:
            out.append(claim("the prior-aware attack reaches >= 0.75 of the ReRo bound at kappa = 1/10 (Hayes et al.)",
                             all(u["success_over_bound"] >= 0.75 for u in at10),
                             "; ".join(f"{u['setting']}: {u['prior_aware_success']:.3f} / {u['prior_aware_bound']:.3f}"
                                       f" = {u['success_over_bound']:.2f}" for u in at10)))
    fin = [r for r in rows if r.get("bound_at_eta") is not None]
    if fin:
        over = [r["setting"] for r in fin if r["success_at_eta_ci"][0] > r["bound_at_eta"]]
        out.append(claim("every final-model success P[MSE <= eta] lies below its ReRo bound within its 95% interval "
                         "(bound at the estimated kappa(eta), approximate)", not over,
                         "; ".join(f"{r['setting']}: CI [{r['success_at_eta_ci'][0]:.3f}, {r['success_at_eta_ci'][1]:.3f}]"
                                   f" vs bound {r['bound_at_eta']:.3f}" for r in fin)))
    dp = [r for r in rows if "empirical_eps" in r]
    if dp:
        out.append(claim("the empirical epsilon never exceeds the accountant's epsilon",
                         all(r["empirical_eps"] <= min(r["eps_rdp"], r["eps_pld"]) for r in dp),
                         "; ".join(f"{r['setting']}: {r['empirical_eps']:.3f} vs PLD {r['eps_pld']:.3g}" for r in dp)))
        low = [r for r in dp if r["eps_pld"] <= 10]
        if low:
            out.append(claim("the empirical epsilon reaches half the accountant's epsilon where eps <= 10",
                             all(r["empirical_eps"] >= 0.5 * r["eps_pld"] for r in low),
                             "; ".join(f"{r['setting']}: {r['empirical_eps']:.3f} vs PLD {r['eps_pld']:.3g} (perfect "
                                       f"canary, same runs: {_fmt(r.get('ideal_gaussian_audit_eps'))})" for r in low)))
    return out


def _fmt(v, digits=3):
    return "n/a" if v is None else f"{v:.{digits}g}"


def _model_description(config, num_params) -> str:
    if config.model == "balle_mnist_mlp":
        return f"Balle et al.'s MLP (hidden {config.hidden}, {config.activation}, {num_params} parameters)"
    return f"`{config.model}` ({num_params} parameters)"


def _report_markdown(config, result, s, num_params, q, steps, recon_name="MLP 2x1000") -> str:
    rows = result["rows"]
    eta, kappa_eta = result["eta_mse"], result["kappa_at_eta"]
    conf = f"{100 * config.confidence:g}%"
    attack_cols = ["setting", "test_accuracy", "eps_rdp", "eps_pld", "mean_mse", "mean_oracle_mse", "success_rate",
                   "success_at_eta", "mean_psnr", "mean_ssim", "mean_ncc"]
    text = [f"# Reconstruction-risk report ({config.dataset}, variant `{config.variant}`)", ""]
    text += ["## What was run", "",
             f"- Released model: {_model_description(config, num_params)}, "
             f"{'full-batch gradient descent' if config.batch_size is None else f'minibatch SGD (batch {config.batch_size})'}"
             f" with momentum {config.momentum}, learning rate {config.learning_rate}, {config.epochs} epochs, "
             f"on a fixed set D- of {config.fixed_size} records plus one target. DP settings: clip norm "
             f"{config.clip_norm}, delta {config.delta}, accounted as {steps} Gaussian steps at sampling rate "
             f"q = {q:.4g} per model. Every setting draws its own noise (independent keys).",
             f"- Threat model (a), final model released (Balle et al. 2022, informed adversary): knows D-, the "
             f"training algorithm and the initialisation; trains {config.num_shadow} shadow models and a "
             f"reconstructor network ({recon_name}) on their parameters.",
             f"- Evaluation of (a): {config.num_targets} released models, one per target. Success = reconstruction "
             f"closer (MSE) to the target than the nearest record the adversary already knows (NN oracle). For the "
             f"bounds, success also means MSE <= eta = {eta:.4g} (the median oracle MSE); the prior's chance of that "
             f"is kappa = {kappa_eta:.4g} (`estimate_kappa`: best oblivious guess among the adversary's records, "
             f"their mean and class means; a lower estimate, so bounds at it are approximate).",
             f"- Threat model (b), every update released (Hayes, Mahloujifar & Balle 2023, prior-aware adversary): "
             f"knows D-, the initialisation and every noisy clipped gradient sum; the target is drawn uniformly from "
             f"k candidate records (random test records, not in D-; kappa = 1/k, k in {list(config.prior_sizes)}); it "
             f"guesses the candidate whose clipped gradients best explain the observed updates (Gaussian likelihood"
             f"{'' if q == 1.0 else ', mixture over the Poisson inclusion of the target'}; Bayes-optimal for this "
             f"prior). {config.prior_aware_trials} games per DP setting, the prior sizes sharing them. The game runs "
             f"the accounted mechanism: {steps} steps of the Gaussian mechanism at rate q = {q:.4g}"
             f"{'' if q == 1.0 else ' (Poisson sampling of D- and the target; the adversary knows which D- records were drawn)'}.",
             f"- Rates carry {conf} Clopper-Pearson intervals.", ""]
    if config.batch_size is not None:
        text.insert(-1, "- Batch order: " + (
            "secret and fresh for every model (the adversary's shadow models use their own random orders); the "
            "accounting treats each step as Poisson-subsampled at rate q, the usual DP-SGD analysis, which is "
            "proven for Poisson sampling and common practice for shuffled batches."
            if config.shuffle == "fresh" else
            "known to the adversary (shared by every model); it knows which step of each epoch used the target, "
            "so the accounting applies no subsampling amplification (q = 1, one step per epoch)."))
    text += ["## Attack results (final model released)", "", markdown_table(rows, attack_cols), "",
             "![targets, reconstructions and NN oracle](reconstructions.png)", ""]
    dp_rows = [r for r in rows if "bounds" in r]
    upd = result["prior_aware"]
    if dp_rows:
        text += ["## Bound vs attack, per threat model", "",
                 "Each bound applies to its own threat model and is in that attack's units (probability of a "
                 "successful reconstruction at the same prior). Bound = the tightest applicable route (GDP/f-DP "
                 "trade-off, RDP curve, zCDP).", "",
                 "**(a) Final model released** (RecoNN; success = MSE <= eta; bound at kappa(eta), approximate):", ""]
        frows = [{"setting": r["setting"], "P[MSE<=eta]": r["success_at_eta"],
                  f"{conf} CI": f"[{r['success_at_eta_ci'][0]:.3f}, {r['success_at_eta_ci'][1]:.3f}]",
                  "beats oracle": r["success_rate"],
                  "ReRo bound": r.get("bound_at_eta")} for r in dp_rows]
        text += [markdown_table(frows), "",
                 "**(b) Every update released** (prior-aware attack; success = exact identification of the target "
                 "among k candidates):", ""]
        urows = [{"setting": u["setting"], "k": u["prior_size"], "success": u["prior_aware_success"],
                  f"{conf} CI": f"[{u['prior_aware_ci'][0]:.3f}, {u['prior_aware_ci'][1]:.3f}]",
                  "ReRo bound": u["prior_aware_bound"], "route": u["bound_route"].replace("rero_", ""),
                  "success / bound": u["success_over_bound"],
                  "orthogonal optimum / bound": u.get("orthogonal_optimum_over_bound")} for u in upd]
        geo = result["candidate_gradient_geometry"]
        text += [markdown_table(urows), "",
                 "The bound is attained only by the worst-case prior: candidates whose clipped gradients are "
                 "orthogonal and at full norm C at every step; even then the optimal k-ary guess reaches the "
                 "fraction of the bound in the last column (full batch). Random records are not that prior: at the "
                 f"initialisation the clipped gradients of one trial's candidates have mean absolute pairwise cosine "
                 f"{geo['mean_abs_cosine']:.3f} (largest {geo['max_abs_cosine']:.3f}) and "
                 f"{100 * geo['share_at_clip_norm']:.0f}% of them are at the clip norm; as training proceeds the "
                 "gradients of records the model fits shrink below C and those of similar records align, which "
                 "leaves less signal per step than the worst case, so the measured success sits further below the "
                 "bound. Intervals from a few hundred games are wide: compare the bound with the interval, not "
                 "the point.", "",
                 "![bound vs attack per threat model](bounds_vs_attack.png)", ""]
        erows = [{"setting": r["setting"], "eps_rdp": r["eps_rdp"], "eps_pld": r["eps_pld"],
                  "empirical_eps": r["empirical_eps"], "FPR": r["audit_fpr"], "FNR": r["audit_fnr"],
                  "perfect canary, same runs": r.get("ideal_gaussian_audit_eps")} for r in dp_rows]
        text += ["## Empirical epsilon", "",
                 f"Method: a distinguishing game on the released mechanism (white-box: every update visible). "
                 f"{config.audit_runs} runs with a canary (a test record with a wrong label, whose gradient stays "
                 f"large) and {config.audit_runs} without; the adversary's score is the log-likelihood ratio of all "
                 f"updates. Half of each world's runs choose a threshold; on the other half, one-sided "
                 f"Clopper-Pearson upper bounds on FPR and FNR (union bound: jointly {conf}) give "
                 f"eps >= max(log((1 - delta - FPR)/FNR), log((1 - delta - FNR)/FPR)) at delta = {config.delta}. "
                 f"Assumptions: independent runs; canary and threshold fixed before the evaluation runs. A lower "
                 f"bound from n evaluation runs per world cannot exceed about log(n/3), whatever the mechanism: the "
                 f"last column is the same audit on the exact statistic of a perfect (orthogonal, full-norm) canary "
                 f"with the same number of runs.", "", markdown_table(erows), ""]
        text += ["## What the theorems guarantee", "",
                 "ReRo = upper bound on the probability that *any* attack reconstructs a record (here: MSE <= eta), "
                 "given a prior success probability kappa. Routes: RDP curve and zCDP (optimal RDP-to-trade-off "
                 "conversion, tighter than Balle et al. Thm 2 and Cor. 4), hypothesis testing / GDP (Hayes et al. 2023), "
                 "eps-DP (both branches of its trade-off curve).", ""]
        brows = []
        for r in dp_rows:
            for rr in r["bounds"]["rero"]:
                brows.append({"setting": r["setting"], "eps_rdp": r["eps_rdp"], **rr})
        text += [markdown_table(brows, ["setting", "eps_rdp", "kappa", "rero_gdp", "rero_rdp", "rero_zcdp", "rero_dp"]),
                 ""]
        zrows = [{"setting": r["setting"],
                  "expected MSE >= (clip-norm units)": r["bounds"]["ziller_mse_lower_bound"],
                  "PSNR <= (dB, clip-norm range)": r["bounds"]["ziller_psnr_upper_bound"],
                  "NCC <=": r["bounds"]["ziller_ncc_upper_bound"],
                  "log Bayes capacity": r["bounds"]["log_bayes_capacity"]} for r in dp_rows]
        text += ["Prior-free bounds of Ziller et al. hold in *their* threat model only: the adversary observes the T "
                 "noisy clipped gradients of a linear layer, whose gradient is the (clipped) record itself. MSE and "
                 "PSNR are therefore in units of the clip norm (records scaled to norm <= C), not comparable with the "
                 "image-space MSEs above; NCC is scale-free. The log Bayes' capacity is that of one Gaussian release "
                 "at the effective noise sigma/sqrt(T) over the model's parameters (Biswas et al. Thm 5; larger "
                 "means more leakage, compare across settings).", "", markdown_table(zrows), ""]
        text += ["Accounting: add/remove-one adjacency with sensitivity C, as in the ReRo argument (training with "
                 "vs without the target).", ""]
    cal = result["calibration"]
    if cal is not None:
        text += ["## Calibration to a risk target", "", _calibration_sentence(cal, rows), ""]
    text += ["## Interpretation", "", _interpretation(rows, kappa_eta, config), "",
             f"Runtime: {result['runtime_seconds'] / 60:.1f} min "
             f"({', '.join(f'{k} {v:.0f} s' for k, v in result['timings_seconds'].items())}). "
             f"Config: `config.json`; numbers: `metrics.json`."]
    return "\n".join(text) + "\n"


def _calibration_sentence(cal, rows) -> str:
    head = (f"To keep any attacker's success below {100 * cal['rero']:g}% at a {100 * cal['kappa']:g}% prior "
            f"(ReRo bound, {cal['steps']} steps at q = {cal['sample_rate']:.4g}) you need sigma >= "
            f"{cal['noise_multiplier']:.4g} (`calibrate_sigma_for_rero`).")
    if cal["test_accuracy"] is None:
        return head + " No finite noise level reaches that target."
    base = [r for r in rows if r["noise_multiplier"] == 0]
    cost = (f" Without DP the released models reach {100 * base[0]['test_accuracy']:.1f}%." if base else "")
    return (head + f" Trained at that sigma, {cal['models']} released models reach a mean test accuracy of "
            f"{100 * cal['test_accuracy']:.1f}%." + cost)


def _interpretation(rows, kappa_eta, config=None) -> str:
    lines = []
    np_rows = [r for r in rows if r["noise_multiplier"] == 0]
    if np_rows:
        r = np_rows[0]
        verdict = "can" if r["success_rate"] >= 0.5 else "mostly cannot"
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
        lines.append(f"With DP (sigma={best['noise_multiplier']:g}, eps={best['eps_rdp']:.3g}, test accuracy "
                     f"{100 * best['test_accuracy']:.1f}%), the attack on the final model beats the oracle on "
                     f"{100 * best['success_rate']:.0f}% of targets, and theory caps any attack's chance of an MSE "
                     f"below eta at {100 * best['bound_at_eta']:.1f}% (prior {100 * kappa_eta:.1f}%).")
        over = [r["setting"] for r in dp if r["success_at_eta_ci"][0] > r["bound_at_eta"]]
        if over:
            lines.append(f"Measured success exceeds the bound beyond its interval in {', '.join(over)}: kappa is "
                         f"underestimated there (the best oblivious guess lies outside the guesses tried); treat that "
                         f"bound as approximate.")
        lines.append("The final-model attack sees far less than the bounds allow (one model, not every update); the "
                     "prior-aware attack on every update shows how close to the bound an adversary of the bounds' "
                     "own threat model gets.")
    return " ".join(lines) if lines else "No settings were run."


def console_main() -> None:
    """Entry point of the ``recon-jax-report`` console script and of ``python -m experiments.risk_report``:
    ``--config`` (default :data:`DEFAULT_CONFIG`, variant ``default``) and ``--workdir`` (default
    ``runs/risk_report``)."""
    config, workdir = experiment_flags(DEFAULT_CONFIG, "runs/risk_report")

    def main(argv):
        del argv
        run(config.value, workdir.value)

    run_app(main)


if __name__ == "__main__":
    console_main()
