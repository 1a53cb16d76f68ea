"""The risk report's configuration: validation of every field before any work starts, and the released model, data
and reconstructor network it names (:mod:`recon_jax.report.app` runs them; the sizes fitted to the data:
:mod:`recon_jax.report.sizes`).

Every error about the config or the data is a :class:`ConfigError` (a ``ValueError``; the experiments' one, from
:mod:`recon_jax.evidence.config_checks`) naming the config field (``config.<field>: ...``), what was given and what
is allowed: the console script prints it as one line. The fields' ranges are declared in :data:`CHECKS` and checked
by the experiments' mechanism (:func:`recon_jax.evidence.config_checks.check_config`), and the sizes the data must
meet by theirs too (:func:`recon_jax.evidence.config_checks.check_fits`, once the data's record counts are known);
what reads the filesystem (the image folder's layout) is code in :func:`validate_config`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import inspect
import os
import sys

import jax
import jax.extend.core as jex
import numpy as np

from recon_jax import data as rdata
from recon_jax import models, shadow, training
from recon_jax.attacks import reconn
from recon_jax.evidence.config_checks import (ConfigError, Rule, any_of, check_config, check_fits, computed, each,
                                              explained, integer, number, one_of, optional, satisfies, when)
from recon_jax.models.reconstructors import TransposedConvDecoder
from recon_jax.report.config import DESCRIPTIONS, FIELDS

__all__ = ["KNOWN_KEYS", "ZOO", "CHECKS", "SIZED_CHECKS", "validate_config", "with_image_size", "build_model",
           "check_model", "reconstructor_for", "load_data"]

KNOWN_KEYS = frozenset(DESCRIPTIONS)
"""The config's fields (declared once, in :data:`recon_jax.report.config.FIELDS`)."""

ZOO = ("balle_mnist_mlp", "lenet", "balle_cifar_cnn")


def _fail(field: str, message: str):
    raise ConfigError(f"config.{field}: {message}")


def _import_model(name: str):
    """The object ``module:attribute`` or ``path/to/file.py:attribute`` names, resolved from the current directory."""
    target, _, attr = name.rpartition(":")
    if not target or not attr:
        _fail("model", f"{name!r} must be one of {list(ZOO)}, 'module:attribute' or 'file.py:attribute'")
    if target.endswith(".py"):
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            _fail("model", f"{name!r}: there is no file {path} (file.py paths are relative to the current "
                           f"directory, {os.getcwd()})")
        module_name = "recon_jax_user_model_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses (flax modules) look their module up while being built
        try:
            spec.loader.exec_module(module)
        except ImportError as err:
            del sys.modules[module_name]
            _fail("model", f"{name!r}: importing {path} failed ({type(err).__name__}: {err})")
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.append(os.getcwd())  # module:attribute from the current directory, as python -m finds it
        try:
            module = importlib.import_module(target)
        except ImportError as err:
            missing = getattr(err, "name", None)
            where = (f"no module {target!r} on the path or in the current directory ({os.getcwd()})"
                     if missing and target.startswith(missing) else f"importing {target!r} failed ({type(err).__name__}: {err})")
            _fail("model", f"{name!r}: {where}")
    if not hasattr(module, attr):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        _fail("model", f"{name!r}: {target} has no attribute {attr!r} (it has: {', '.join(public[:20])})")
    return getattr(module, attr)


def build_model(config, num_classes: int):
    """The released model named by ``config.model``: a zoo name, or ``module:attribute`` / ``file.py:attribute``
    (resolved from the current directory) naming a flax module, a flax Module class (built with
    ``num_classes=num_classes`` if it has that field, otherwise from its defaults, and then checked like a module)
    or a function taking ``num_classes`` and returning a module."""
    import flax.linen as nn

    name = config.model
    if name == "balle_mnist_mlp":
        return models.balle_mnist_mlp(hidden=config.hidden, activation=config.activation, num_classes=num_classes)
    if name == "lenet":
        return models.lenet(num_classes=num_classes)
    if name == "balle_cifar_cnn":
        return models.balle_cifar_cnn(activation=config.activation, num_classes=num_classes)
    obj = _import_model(name)
    if isinstance(obj, nn.Module):
        return obj
    if isinstance(obj, type) and issubclass(obj, nn.Module):
        fields = {f.name: f for f in dataclasses.fields(obj) if f.init and f.name not in ("parent", "name")}
        kwargs = {"num_classes": num_classes} if "num_classes" in fields else {}
        required = [f for f, d in fields.items() if f not in kwargs and d.default is dataclasses.MISSING
                    and d.default_factory is dataclasses.MISSING]
        if required:
            _fail("model", f"{name!r} is a flax Module class whose field(s) {required} have no default: give them "
                           f"defaults, or name an instance or a function num_classes -> Module")
        return obj(**kwargs)
    if not callable(obj):
        _fail("model", f"{name!r} must be a flax.linen Module, a Module class or a function num_classes -> Module, "
                       f"got {type(obj).__name__}")
    try:
        inspect.signature(obj).bind(num_classes)
    except (TypeError, ValueError):
        _fail("model", f"{name!r} must be a flax.linen Module, a Module class or a function taking num_classes, "
                       f"and it cannot be called with one argument")
    module = obj(num_classes)
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
    if out.shape[1] > num_classes:  # allowed (a model made for more classes), but rarely what was meant
        print(f"note: {config.model!r} emits {out.shape[1]} logits and the data have {num_classes} classes: the "
              f"last {out.shape[1] - num_classes} never carry a label (a num_classes field is set from the data)",
              flush=True)
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
            raise ConfigError(f"config.model: {config.model!r}: {err}") from err


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
    """The adversary's reconstructor network (:func:`recon_jax.attacks.reconn.reconstructor_network`, from
    ``config.reconstructor``) and its description for the report."""
    try:
        net = reconn.reconstructor_network(image_shape, config.reconstructor)
    except ValueError as err:
        _fail("reconstructor", str(err))
    if isinstance(net, TransposedConvDecoder):
        return net, "transposed-conv decoder"
    return net, f"MLP {len(net.hidden)}x{net.hidden[0]}"


_LAYOUT = "expected DIR/train/<class>/*.png and DIR/test/<class>/*.png (PNG or JPEG, one sub-directory per class)"


def _loose(directory: str) -> str:
    """`` (N images lie directly in it)`` for a directory holding image files itself, else ``""``."""
    n = sum(f.lower().endswith((".png", ".jpg", ".jpeg")) for f in os.listdir(directory))
    return f" ({n} images lie directly in it)" if n else ""


def _folder_files(path: str) -> list[str]:
    """The image files of data_path/train and data_path/test (any depth), sorted."""
    out = []
    for split in ("train", "test"):
        for root, dirs, names in os.walk(os.path.join(path, split)):
            dirs.sort()
            out += [os.path.join(root, n) for n in sorted(names) if n.lower().endswith((".png", ".jpg", ".jpeg"))]
    return out


def with_image_size(config):
    """``config`` with ``image_size`` set to the images' own side where it is None (dataset ``folder``: every image
    of train/ and test/ must have the same square size; their headers are read, not their pixels).

    Raises:
      ConfigError: ``config.image_size`` when the images differ in size or are not square.
    """
    if config.dataset != "folder" or config.image_size is not None:
        return config
    from PIL import Image

    sizes = {}
    for f in _folder_files(config.data_path):
        try:
            with Image.open(f) as im:
                sizes.setdefault(im.size, f)
        except OSError as err:
            _fail("data_path", f"cannot read image {f!r} ({err})")
    if len(sizes) != 1:
        found = ", ".join(f"{w}x{h} ({os.path.relpath(f, config.data_path)})" for (w, h), f in list(sizes.items())[:3])
        _fail("image_size", f"None (the images' own size) needs every image of {config.data_path!r} to have one size, "
                            f"found {found}{' ...' if len(sizes) > 3 else ''}: set image_size (an integer >= 4) to "
                            f"resize them")
    (w, h), = sizes
    if w != h:
        _fail("image_size", f"None (the images' own size) needs square images, {config.data_path!r} has {w}x{h}: set "
                            f"image_size (an integer >= 4) to resize them to a square")
    import copy

    out = copy.deepcopy(config)
    out.image_size = int(w)
    return out


def _first_image_has_colour(path: str) -> bool:
    """Whether the first training image of a folder (sorted order, as read) is stored in colour."""
    from PIL import Image

    files = _folder_files(path)
    if not files:
        return False
    with Image.open(files[0]) as image:
        return image.mode in ("RGB", "RGBA", "CMYK", "YCbCr", "LAB", "HSV")


_TEST_ORDER_STREAM = 6  # default_rng([seed, 6]): a folder's test order (updates.py draws from 1, 3, 4 and 5)


def load_data(config):
    """(train_x, train_y, test_x, test_y), validated: finite images in [0, 1] and labels >= 0.

    A folder's test images are put in a seeded random order (``config.seed``): they are read class by class, and
    the report takes its accuracy set from the front of the test split and its priors from the rest, which would
    otherwise hold one class each. (The training split is drawn from at random by the splits already.)

    Raises:
      ConfigError: ``config.data_path`` (dataset ``folder``) or ``config.dataset`` when the data cannot be read as
        the report needs it (the loader's message, one line).
    """
    kw = {}
    if config.dataset == "folder":
        kw = {"path": config.data_path, "image_size": config.image_size, "channels": config.channels}
    field = "data_path" if config.dataset == "folder" else "dataset"
    try:
        train_x, train_y = rdata.load_dataset(config.dataset, "train", **kw)
        test_x, test_y = rdata.load_dataset(config.dataset, "test", **kw)
    except rdata.DatasetNotAvailableError as err:  # the report has no data_dir field: TFDS reads its variable
        _fail(field, f"{config[field]!r}: {err} Here: run the report with TFDS_DATA_DIR=DIR in the environment.")
    except ValueError as err:  # the loaders' input errors, said as config errors
        _fail(field, f"{config[field]!r}: {err}")
    for x, y, split in ((train_x, train_y, "train"), (test_x, test_y, "test")):
        if np.any(y < 0):
            _fail(field, f"every {split} image needs a class label (one sub-directory per class)")
        if x.shape[1:] != train_x.shape[1:]:
            _fail(field, f"train and test images differ in shape: {train_x.shape[1:]} vs {x.shape[1:]}")
    if config.dataset == "folder":
        if config.channels == 1 and _first_image_has_colour(config.data_path):
            print(f"note: the images in {config.data_path!r} are in colour and are read as grayscale (channels=1); "
                  f"pass --config.channels=3 to keep the colour", flush=True)
        order = np.random.default_rng([config.seed, _TEST_ORDER_STREAM]).permutation(len(test_y))
        test_x, test_y = test_x[order], test_y[order]
    return train_x, train_y, test_x, test_y


_FOLDER_ONLY = satisfies(lambda v: v is None, "None")  # data_path, image_size: for dataset 'folder' only
_UNIT = number(above=0, below=1)

_DEFAULT_CHANNELS = next(value for name, value, _ in FIELDS if name == "channels")
_DATASET_CHANNELS = {"mnist": 1, "synthetic": 1, "tfds:mnist": 1, "tfds:fashion_mnist": 1, "tfds:cifar10": 3,
                     "tfds:cifar100": 3}
"""The channels of each dataset's images as :func:`load_data` loads them (every dataset but ``folder``, which
converts its images to ``config.channels``; ``synthetic`` is loaded with its default shape, 28 x 28 x 1)."""


def _unread_channels() -> Rule:
    """``channels`` for a dataset other than ``folder``, which never reads it: the default, or the channels the
    dataset's images have (a value that states the data as it is); anything else would be silently ignored."""
    def allowed(config) -> tuple[int, ...]:
        return tuple(sorted({_DEFAULT_CHANNELS, _DATASET_CHANNELS[config.dataset]}))

    def describe(config) -> str:
        own = _DATASET_CHANNELS[config.dataset]
        why = f"only dataset 'folder' reads channels; {config.dataset!r} images have {own}"
        if own == _DEFAULT_CHANNELS:
            return f"{own} ({why})"
        return f"{_DEFAULT_CHANNELS} (the default) or {own} ({why})"

    return Rule(lambda v, config: one_of(*allowed(config)).accepts(v, config), describe)


CHECKS = {
    # Fields bounded by others come after them. The folder layout of data_path reads the filesystem: validate_config
    # checks it after these.
    "dataset": one_of(*rdata.DATASETS),
    "data_path": when("dataset", "folder", None, otherwise=_FOLDER_ONLY),
    "image_size": when("dataset", "folder", explained(optional(integer(at_least=4)), "None: the images' own size"),
                       otherwise=_FOLDER_ONLY),
    "channels": when("dataset", "folder", one_of(1, 3), otherwise=_unread_channels()),
    "model": any_of(one_of(*ZOO), satisfies(lambda v: isinstance(v, str) and ":" in v,
                                            "a string 'module:attribute' or 'file.py:attribute'")),
    "sizes": explained(one_of("auto", "fixed"), "auto: sizes follow the data; fixed: as given"),
    "keep_intermediates": one_of(True, False),
    "reconstructor": one_of(*reconn.RECONSTRUCTOR_KINDS),
    **{field: integer(at_least=lo) for field, lo in (
        ("seed", 0), ("fixed_size", 1), ("num_shadow", 10), ("num_targets", 1), ("eval_size", 1), ("hidden", 1),
        ("epochs", 1), ("reconstructor_epochs", 1), ("reconstructor_batch_size", 1), ("chunk_size", 1),
        ("prior_aware_trials", 2), ("audit_runs", 4), ("calibration_models", 1), ("one_run_canaries", 10))},
    "activation": one_of("elu", "relu", "tanh", "sigmoid"),
    "learning_rate": number(above=0),
    "reconstructor_learning_rate": number(above=0),
    "clip_norm": number(above=0),
    "momentum": number(at_least=0, below=1),
    "delta": _UNIT,
    "include_non_private": one_of(True, False),
    "noise_multipliers": when("include_non_private", True, each(number(above=0), min_len=0, distinct=True),
                              otherwise=explained(each(number(above=0), distinct=True), "else nothing runs")),
    "kappas": each(_UNIT, min_len=0),
    "prior_sizes": explained(each(integer(at_least=2), distinct=True), "uniform priors of k candidates"),
    "crafted_candidates": one_of("simplex", "orthogonal"),
    "crafted_trials": integer(at_least=computed("max(prior_aware_trials, 2 x audit_runs)",
                                                lambda c: max(c.prior_aware_trials, 2 * c.audit_runs))),
    "crafted_precision": _UNIT,
    "crafted_reach": _UNIT,
    "audit_gdp_reach": _UNIT,
    "audit_one_run_reach": _UNIT,
    "bound_tolerance": number(at_least=0, below=1),
    "confidence": _UNIT,
    "calibration_kappa": _UNIT,
    "calibration_rero": explained(number(above="calibration_kappa", below=1),
                                  "no noise level pushes the bound below the prior"),
    "batch_size": explained(optional(integer(at_least=1, at_most=computed("fixed_size + 1",
                                                                          lambda c: c.fixed_size + 1))),
                            "None: full batch"),
    "shuffle": explained(one_of("fresh", "known"), "fresh: a secret per-model batch order; known: the adversary "
                                                   "knows it"),
}
"""The report's fields (each but ``variant``) -> their allowed values, in the order
:func:`recon_jax.evidence.config_checks.check_config` checks them."""

SIZED_CHECKS = {"calibration_models": integer(at_least=1, at_most="num_targets")}
"""Checks of sizes that ``sizes="auto"`` fits to the data (:func:`recon_jax.report.sizes.fit_sizes`): checked once
the data's record counts are known."""


def _check_known_fields(config) -> None:
    """The config has every field of :data:`KNOWN_KEYS` and no other."""
    keys = set(config.keys())
    unknown = sorted(keys - KNOWN_KEYS)
    if unknown:
        close = {u: difflib.get_close_matches(u, KNOWN_KEYS, n=1) for u in unknown}
        hint = "; ".join(f"did you mean {c[0]!r} for {u!r}?" for u, c in close.items() if c)
        raise ConfigError(f"config has unknown field(s) {unknown}{'; ' + hint if hint else ''} (known fields: "
                          f"{', '.join(sorted(KNOWN_KEYS))})")
    missing = sorted(KNOWN_KEYS - keys)
    if missing:
        raise ConfigError(f"config is missing field(s) {missing}")


def _check_folder_layout(path) -> None:
    """``path`` is a directory with train/<class>/ and test/<class>/ sub-directories and no loose images."""
    if not isinstance(path, str) or not os.path.isdir(path):
        _fail("data_path", f"{path!r} is not a directory; dataset 'folder' needs one: {_LAYOUT}")
    lacking = [sp for sp in ("train", "test") if not os.path.isdir(os.path.join(path, sp))]
    if lacking:
        _fail("data_path", f"{path!r} has no {' and no '.join(sp + '/' for sp in lacking)} sub-directory"
                           f"{_loose(path)}: {_LAYOUT}")
    for sp in ("train", "test"):
        split_dir = os.path.join(path, sp)
        classes = [d for d in sorted(os.listdir(split_dir)) if os.path.isdir(os.path.join(split_dir, d))]
        if not classes or _loose(split_dir):
            what = "no class sub-directories" if not classes else f"images beside its classes {classes[:5]}"
            _fail("data_path", f"{split_dir!r} has {what}{_loose(split_dir)}: {_LAYOUT}")


def validate_config(config, num_train: int | None = None, num_test: int | None = None) -> None:
    """Checks every field before any work starts; raises :class:`ConfigError` naming the field, the value and what
    is allowed: the fields' names, their values (:data:`CHECKS`), and for dataset ``folder`` the directory layout.
    With ``num_train`` / ``num_test`` (the data's record counts) it also checks the sizes fit
    (:func:`recon_jax.evidence.config_checks.check_fits`: ``config.<field> + <field>: must be at most the <n>
    training records of <data> ..., got <sum>``) and :data:`SIZED_CHECKS`.

    >>> from recon_jax.report.config import get_config
    >>> config = get_config("smoke")
    >>> validate_config(config)
    >>> with config.unlocked():
    ...     config.crafted_trials = 20
    >>> try:
    ...     validate_config(config)
    ... except ConfigError as err:
    ...     print(err)
    config.crafted_trials: must be an integer >= max(prior_aware_trials, 2 x audit_runs) = 32, got 20
    """
    _check_known_fields(config)
    check_config(config, CHECKS)
    if config.dataset == "folder":
        _check_folder_layout(config.data_path)
    # Sizes the data must meet (sizes="auto" has fitted the sizes it may first), in the experiments' words.
    data_field = "data_path" if config.dataset == "folder" else "dataset"
    data = f"folder {config.data_path!r}" if config.dataset == "folder" else repr(config.dataset)
    hint = "(sizes='auto' fits only the sizes left at the variant's values)"
    if num_train is not None:
        if num_train < 12:  # no sizes fit: the data is what to change, not a size field
            _fail(data_field, f"{config[data_field]!r} has {num_train} training records; the report needs at least 12 "
                              "(a fixed set of 1, 10 shadow targets, 1 evaluation target)")
        check_fits(config, ("fixed_size", "num_shadow", "num_targets"), num_train, f"training records of {data} {hint}")
    if num_test is not None:
        check_fits(config, ("eval_size",), num_test, f"test records of {data} {hint}")
        # Beyond eval_size the test records hold the candidates of the largest prior and the audit's canary.
        test_use = {"eval_size": config.eval_size, "the largest of prior_sizes": max(config.prior_sizes),
                    "one canary": 1}
        check_fits(test_use, tuple(test_use), num_test, f"test records of {data} {hint}")
        check_config(config, SIZED_CHECKS)
