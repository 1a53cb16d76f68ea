"""The risk report's sizes fitted to the data (``sizes="auto"``) and the overrides a config carries: what the
report's header states (:mod:`recon_jax.report.text`) and :mod:`recon_jax.report.app` runs with."""

from __future__ import annotations

import copy
import dataclasses

from recon_jax.report.config import DESCRIPTIONS, SIZE_FIELDS, VARIANTS, get_config

__all__ = ["Split", "overrides", "fit_sizes"]

_TRAIN_FIELDS = ("fixed_size", "num_shadow", "num_targets")
_LEAST = {"fixed_size": 1, "num_shadow": 10, "num_targets": 1}


def _defaults(config):
    """The shipped variant's config that ``config`` started from, or None for a config of another origin."""
    return get_config(config.variant) if config.variant in VARIANTS else None


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return type(a) is type(b) and a == b


def overrides(config) -> dict:
    """The fields whose values differ from the shipped variant ``config.variant`` (all of them for a config of
    another origin), in the config's field order.

    >>> c = get_config("smoke")
    >>> with c.unlocked():
    ...     c.noise_multipliers = (1.0,)
    >>> overrides(c)
    {'noise_multipliers': (1.0,)}
    """
    base = _defaults(config)
    return {k: config[k] for k in DESCRIPTIONS if k in config and (base is None or not _same(config[k], base[k]))}


@dataclasses.dataclass(frozen=True)
class Split:
    """How the report uses the data: record counts, the sizes it runs with, which of them ``sizes="auto"`` fitted
    to the data, and why (:func:`fit_sizes`)."""

    num_train: int
    num_test: int
    sizes: dict
    fitted: tuple[str, ...]
    reason: str

    def sentence(self) -> str:
        """The split in words, for the report's header and the console."""
        s = self.sizes
        text = (f"{self.num_train} train records: fixed set D- {s['fixed_size']}, shadow targets {s['num_shadow']}, "
                f"evaluation targets {s['num_targets']}; {self.num_test} test records: {s['eval_size']} for the "
                f"released models' accuracy, prior candidates for k in {list(s['prior_sizes'])} and one record set "
                "aside")
        if self.fitted:
            text += f". Fitted to the data (sizes=auto): {', '.join(self.fitted)}; the variant's {self.reason}"
        return text


def _fit_train(s: dict, free: set, num_train: int) -> tuple[list[str], list[str]]:
    """Shrinks the free train-record sizes of ``s`` (in place) to ``num_train`` records: 10% evaluation targets,
    40% fixed set, the rest (at least 10) shadow targets. Returns (fields fitted, reasons)."""
    if not all(isinstance(s[f], int) for f in _TRAIN_FIELDS) or sum(s[f] for f in _TRAIN_FIELDS) <= num_train:
        return [], []
    todo = [f for f in _TRAIN_FIELDS if f in free]
    budget = num_train - sum(s[f] for f in _TRAIN_FIELDS if f not in free)
    new = {}
    if "num_targets" in free:
        new["num_targets"] = min(s["num_targets"], max(1, int(0.1 * num_train)))
    if "fixed_size" in free:
        new["fixed_size"] = min(s["fixed_size"], max(1, int(0.4 * num_train)))
    if "num_shadow" in free:  # the rest, at least 10 (taken from the fixed set if need be)
        short = 10 - (budget - sum(new.values()))
        if short > 0 and "fixed_size" in free:
            new["fixed_size"] = max(1, new["fixed_size"] - short)
        new["num_shadow"] = min(s["num_shadow"], budget - sum(new.values()))
    if not todo or sum(new.values()) > budget or any(v < _LEAST[f] for f, v in new.items()):
        return [], []  # nothing to fit, or it cannot fit (validate_config then says what does not)
    reason = (f"{' + '.join(f'{f} {s[f]}' for f in _TRAIN_FIELDS)} need {sum(s[f] for f in _TRAIN_FIELDS)} "
              "train records")
    s.update(new)
    return todo, [reason]


def _fit_test(s: dict, free: set, num_test: int) -> tuple[list[str], list[str]]:
    """Shrinks the free test-record sizes of ``s`` (in place) to ``num_test`` records: half (at most the given
    ``eval_size``) for accuracy, and prior sizes that fit the rest beside the canary. Returns (fitted, reasons)."""
    priors = s["prior_sizes"]
    if not (isinstance(s["eval_size"], int) and priors and all(isinstance(k, int) for k in priors)):
        return [], []
    if s["eval_size"] + max(priors) + 1 <= num_test:
        return [], []
    reason = (f"eval_size {s['eval_size']} + prior {max(priors)} + canary need {s['eval_size'] + max(priors) + 1} "
              "test records")
    fitted = []
    if "eval_size" in free:  # half the test records, leaving at least a prior of 2 and the canary
        room = num_test - max(priors) - 1 if "prior_sizes" not in free else min(num_test // 2, num_test - 3)
        s["eval_size"] = max(1, min(s["eval_size"], room))
        fitted.append("eval_size")
    room = num_test - s["eval_size"] - 1
    if "prior_sizes" in free and room >= 2:
        s["prior_sizes"] = tuple(sorted({k for k in priors if k <= room} | {room}))
        fitted.append("prior_sizes")
    return fitted, [reason]


def fit_sizes(config, num_train: int, num_test: int):
    """The config with its sizes fitted to a dataset of ``num_train`` + ``num_test`` records, and the
    :class:`Split`.

    With ``config.sizes == "auto"``, every size field left at the shipped variant's value (:data:`SIZE_FIELDS`)
    follows the data: unchanged where the data holds the variant's sizes (the embedded MNIST runs every variant's
    sizes), otherwise 40% of the training records form the fixed set, 10% are evaluation targets and the rest
    (at least 10) shadow targets, none above the variant's value; half the test records (at most the variant's
    ``eval_size``) measure accuracy, and the prior sizes that do not fit the rest are replaced by the largest that
    does. Sizes you set, and every size with ``sizes == "fixed"``, are used as given (and
    :func:`recon_jax.report.setup.validate_config` says what does not fit).

    >>> c, split = fit_sizes(get_config("default"), 40, 10)
    >>> (c.fixed_size, c.num_shadow, c.num_targets, c.eval_size, tuple(c.prior_sizes), c.calibration_models)
    (16, 20, 4, 5, (2, 4), 4)
    >>> fit_sizes(get_config("default"), 60000, 10000)[1].fitted   # the embedded MNIST: the variant's sizes
    ()
    >>> fit_sizes(get_config("default"), -1, 10)
    Traceback (most recent call last):
    ValueError: num_train and num_test must be integers >= 0, got -1, 10
    """
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (num_train, num_test)):
        raise ValueError(f"num_train and num_test must be integers >= 0, got {num_train!r}, {num_test!r}")
    base = _defaults(config)
    free = {f for f in SIZE_FIELDS
            if config.sizes == "auto" and (base is None or _same(config[f], base[f]))}
    s = {f: config[f] for f in SIZE_FIELDS}
    s["prior_sizes"] = tuple(s["prior_sizes"])
    fitted, reasons = _fit_train(s, free, num_train)
    more, why = _fit_test(s, free, num_test)
    fitted, reasons = fitted + more, reasons + why
    if ("calibration_models" in free and isinstance(s["num_targets"], int)
            and isinstance(s["calibration_models"], int) and s["calibration_models"] > s["num_targets"]):
        s["calibration_models"] = max(1, s["num_targets"])
        fitted.append("calibration_models")
    out = copy.deepcopy(config)
    with out.unlocked():
        for f in SIZE_FIELDS:
            out[f] = s[f]
    out.lock()
    return out, Split(num_train, num_test, dict(s), tuple(fitted), "; ".join(reasons))
