"""The risk report's configuration: validation of every field before any work starts, and the released model,
data and reconstructor network it names (:mod:`recon_jax.report.risk_report` runs them).

Every error is a ``ValueError`` naming the config field (``config.<field>: ...``).
"""

from __future__ import annotations

import importlib
import math
import os

import jax
import jax.extend.core as jex
import numpy as np

from recon_jax import data as rdata
from recon_jax import models, shadow, training
from recon_jax.attacks import informed
from recon_jax.models.reconstructors import TransposedConvDecoder

__all__ = ["KNOWN_KEYS", "ZOO", "validate_config", "build_model", "check_model", "reconstructor_for", "load_data"]

KNOWN_KEYS = {
    "variant", "seed", "dataset", "fixed_size", "num_shadow", "num_targets", "eval_size", "hidden", "activation",
    "epochs", "learning_rate", "momentum", "batch_size", "shuffle", "include_non_private", "noise_multipliers",
    "clip_norm", "delta", "kappas", "reconstructor_epochs", "reconstructor_batch_size", "reconstructor_learning_rate",
    "chunk_size", "prior_sizes", "prior_aware_trials", "audit_runs", "confidence", "calibration_rero",
    "calibration_kappa", "calibration_models", "model", "data_path", "image_size", "channels", "reconstructor",
    "crafted_candidates", "crafted_precision", "crafted_trials", "one_run_canaries", "bound_tolerance",
    "crafted_reach", "audit_gdp_reach", "audit_one_run_reach",
}

ZOO = ("balle_mnist_mlp", "lenet", "balle_cifar_cnn")


def build_model(config, num_classes: int):
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


def check_model(config, fns, example, num_classes: int, labels=None, algorithms=()):
    """Checks the released model before any work starts.

    First on shapes only: it must accept the data and emit >= num_classes logits. Then, for each training algorithm
    of the report (``algorithms``; ``labels`` the labels of ``example``), one tiny shadow-engine job on the devices
    the report will use (:func:`recon_jax.shadow.preflight`: one epoch, one model per device, a couple of examples;
    compiled and run, cached per configuration), so that a model the engine cannot train with one of the settings
    (a model that cannot be vmapped, an XLA compilation error on the device) stops here, in seconds, and not after
    the settings before it have run.

    Raises:
      ValueError: ``config.model: ...`` naming the model and, for a failed tiny job, the algorithm, the devices and
        what to change (chained to the original error).
    """
    try:
        params = jax.eval_shape(fns.init, jax.random.key(0), example[:1])
        out = jax.eval_shape(fns.apply, params, example[:2])
    except (TypeError, ValueError, ZeroDivisionError) as err:
        hint = ("" if not isinstance(err, ZeroDivisionError) else
                " (a layer got an empty input, e.g. a convolution kernel larger than the image, and initialising "
                "the next layer divided by its zero fan-in: use a larger image_size or a model made for this size)")
        _fail("model", f"{config.model!r} cannot run on inputs of shape {example.shape[1:]} from dataset "
                       f"{config.dataset!r}: {type(err).__name__}: {err}{hint}")
    if out.ndim != 2 or out.shape[1] < num_classes:
        _fail("model", f"{config.model!r} must map inputs to [batch, >= {num_classes}] logits, got {out.shape}")
    empty = _empty_intermediate(fns.apply, params, example[:2])
    if empty is not None:
        # XLA's convolution gives an empty output where a kernel is larger than its (padded) input, and the model
        # then "runs" on nothing (the patch form raises instead): the inputs are too small for the model.
        _fail("model", f"{config.model!r} produces an empty intermediate on inputs of shape {example.shape[1:]} "
                       f"({empty}): the inputs are too small for it (a larger image_size, or a model for this size)")
    if not algorithms:
        return
    if labels is None:
        raise ValueError("labels are required to check training algorithms")
    init_params = training.initial_params(fns, jax.random.key(0), example)
    for algorithm in algorithms:
        try:
            shadow.preflight(fns, algorithm, (example, labels),
                             init_params=init_params if algorithm.init == "fixed" else None)
        except shadow.UnsupportedConfiguration as err:
            raise ValueError(f"config.model: {config.model!r}: {err}") from err


def _empty_intermediate(fn, *args) -> str | None:
    """The first operation of ``fn(*args)`` (traced, nothing computed) whose output has a zero-size dimension although
    its inputs have none, as ``"<primitive> -> <shape>"``; None if there is none."""
    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            ins = [v.aval for v in eqn.invars if hasattr(v.aval, "shape")]
            if all(0 not in a.shape for a in ins):
                for v in eqn.outvars:
                    if 0 in getattr(v.aval, "shape", ()):
                        return f"{eqn.primitive.name} -> {tuple(v.aval.shape)}"
            for sub in jex.jaxprs_in_params(eqn.params):
                found = walk(sub)
                if found:
                    return found
        return None

    return walk(jax.make_jaxpr(fn)(*args).jaxpr)


def reconstructor_for(config, image_shape):
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


def load_data(config):
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
    if config.crafted_candidates not in ("simplex", "orthogonal"):
        _fail("crafted_candidates", f"must be 'simplex' or 'orthogonal', got {config.crafted_candidates!r}")
    for field, lo in (("crafted_trials", 2), ("one_run_canaries", 10)):
        if not _is_int(config[field]) or config[field] < lo:
            _fail(field, f"must be an integer >= {lo}, got {config[field]!r}")
    if config.crafted_trials < max(config.prior_aware_trials, 2 * config.audit_runs):
        _fail("crafted_trials", f"must be at least prior_aware_trials and 2 x audit_runs (= "
                                f"{max(config.prior_aware_trials, 2 * config.audit_runs)}), got {config.crafted_trials}")
    for field in ("crafted_precision", "crafted_reach", "audit_gdp_reach", "audit_one_run_reach"):
        if not (_is_number(config[field]) and 0 < config[field] < 1):
            _fail(field, f"must be in (0, 1), got {config[field]!r}")
    if not (_is_number(config.bound_tolerance) and 0 <= config.bound_tolerance < 1):
        _fail("bound_tolerance", f"must be in [0, 1), got {config.bound_tolerance!r}")
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
