"""Declarative checks of an experiment's config: each field's allowed range, checked before anything is written.

An experiment's config file (``experiments/configs/<name>.py``) declares ``CHECKS``, a mapping from a field
(dotted for sections: ``"train.learning_rate"``) to a :class:`Rule` made by :func:`integer`, :func:`number`,
:func:`one_of`, :func:`each`, :func:`optional`, :func:`any_of`, :func:`when`, :func:`satisfies` or :func:`explained`,
and ``run(config, workdir)`` calls :func:`check_config` before it writes anything. A bound may name another field
(``integer(at_most="num_shadow")``) or be computed from other fields (:func:`computed`), read from the config being
checked (list those fields first); :func:`when` picks a field's rule by another field's value. The risk report's
fields are checked the same way (:data:`recon_jax.report.setup.CHECKS`). The first value outside its range raises
:class:`ConfigError` (a ``ValueError``), ``config.<field>: must be <what is allowed>, got <value>``, which the command
line (:func:`recon_jax.evidence.launcher.launch`, the risk report's console script) prints as one line, exit status 2.
Sizes the data must meet (known once it is found) are checked by :func:`check_fits`, with the same error, after
the data is loaded and still before the run writes anything.

>>> checks = {"num_targets": integer(at_least=1), "probe_size": integer(at_least=0, at_most="num_targets"),
...           "alpha": number(above=0, below=1), "modes": each(one_of("a", "b"))}
>>> check_config({"num_targets": 4, "probe_size": 2, "alpha": 0.05, "modes": ("a",)}, checks)
>>> check_config({"num_targets": 4, "probe_size": 9, "alpha": 0.05, "modes": ("a",)}, checks)
Traceback (most recent call last):
  ...
recon_jax.evidence.config_checks.ConfigError: config.probe_size: must be an integer in [0, num_targets = 4], got 9
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ConfigError", "Rule", "Computed", "computed", "integer", "number", "one_of", "each", "optional", "any_of",
           "when", "satisfies", "explained", "field_value", "check_config", "check_fits"]


class ConfigError(ValueError):
    """A config field holds a value its experiment cannot use: ``config.<field>: <what is allowed>, got <value>``."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """The allowed values of one config field: ``accepts(value, config)`` and, for the message, ``describe(config)``
    (words that follow "must be", e.g. ``"an integer >= 1"``)."""

    accepts: Callable[[Any, Any], bool]
    describe: Callable[[Any], str]


@dataclasses.dataclass(frozen=True)
class Computed:
    """A bound computed from other fields of the config: ``of(config)``, named ``words`` in messages."""

    words: str
    of: Callable[[Any], Any]


def computed(words: str, of: Callable[[Any], Any]) -> Computed:
    """A bound for :func:`integer` / :func:`number` computed from other fields (check those fields first); the message
    shows ``words = <value>``.

    >>> rule = integer(at_least=1, at_most=computed("fixed_size + 1", lambda c: c["fixed_size"] + 1))
    >>> rule.accepts(51, {"fixed_size": 50}), rule.accepts(52, {"fixed_size": 50}), rule.describe({"fixed_size": 50})
    (True, False, 'an integer in [1, fixed_size + 1 = 51]')
    """
    return Computed(words, of)


def field_value(config: Any, field: str) -> Any:
    """The value of ``field`` (dotted for a section: ``"train.epochs"``) in a ConfigDict or a dict."""
    value = config
    for part in field.split("."):
        value = value[part]
    return value


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _show(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _range(kind: str, is_kind: Callable[[Any], bool], low, low_open: bool, high, high_open: bool) -> Rule:
    """Values of ``kind`` between ``low`` and ``high`` (numbers, field names or None; ``*_open``: strict)."""
    def bound(b, config):
        if b is None:
            return None, None
        if isinstance(b, str):  # another field's value
            b = Computed(b, lambda c, name=b: field_value(c, name))
        if isinstance(b, Computed):
            value = b.of(config)
            return (value if _is_real(value) else None), f"{b.words} = {_show(value)}"
        return b, _show(b)

    def accepts(v, config) -> bool:
        if not is_kind(v):
            return False
        lo, hi = bound(low, config)[0], bound(high, config)[0]
        return ((lo is None or (v > lo if low_open else v >= lo))
                and (hi is None or (v < hi if high_open else v <= hi)))

    def describe(config) -> str:
        (_, lo), (_, hi) = bound(low, config), bound(high, config)
        if lo is not None and hi is not None:
            return f"{kind} in {'(' if low_open else '['}{lo}, {hi}{')' if high_open else ']'}"
        if lo is not None:
            return f"{kind} {'>' if low_open else '>='} {lo}"
        if hi is not None:
            return f"{kind} {'<' if high_open else '<='} {hi}"
        return kind

    return Rule(accepts, describe)


def _one_bound(name: str, above, at_least) -> tuple[Any, bool]:
    if above is not None and at_least is not None:
        raise ValueError(f"give at most one lower bound for {name}, got above={above!r} and at_least={at_least!r}")
    return (above, True) if above is not None else (at_least, False)


def integer(*, at_least=None, at_most=None, below=None) -> Rule:
    """An integer (not a bool) within the bounds given: numbers, names of other fields, or :func:`computed` bounds.

    >>> integer(at_least=1).describe({})
    'an integer >= 1'
    """
    high, high_open = _one_bound("integer", below, at_most)
    return _range("an integer", _is_int, at_least, False, high, high_open)


def number(*, above=None, at_least=None, below=None, at_most=None) -> Rule:
    """A finite real number (an int or a float, not a bool) within the bounds given: numbers, names of other
    fields, or :func:`computed` bounds (``above`` / ``below`` are strict, ``at_least`` / ``at_most`` not).

    >>> number(above=0, below=1).describe({}), number(at_least=0, below=1).accepts(0.0, {})
    ('a number in (0, 1)', True)
    """
    low, low_open = _one_bound("number", above, at_least)
    high, high_open = _one_bound("number", below, at_most)
    return _range("a number", _is_real, low, low_open, high, high_open)


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


def one_of(*choices) -> Rule:
    """One of ``choices`` (compared with their type: ``True`` is not ``1``).

    >>> one_of("fresh", "known").describe({})
    "one of 'fresh', 'known'"
    """
    return Rule(lambda v, config: any(_same(v, c) for c in choices),
                lambda config: "one of " + ", ".join(repr(c) for c in choices))


def _distinct(v) -> bool:
    """No two entries of ``v`` are equal (``==``, so ``1`` and ``1.0`` are one value)."""
    try:
        return len(set(v)) == len(v)
    except TypeError:  # unhashable entries: compare them pairwise
        return all(a != b for i, a in enumerate(v) for b in v[i + 1:])


def each(rule: Rule, *, min_len: int = 1, distinct: bool = False) -> Rule:
    """A tuple or list of at least ``min_len`` entries, each allowed by ``rule`` (and, with ``distinct``, no two
    equal).

    >>> each(integer(at_least=1)).describe({}), each(number(above=0), min_len=0).accepts((), {})
    ('a non-empty tuple, each entry an integer >= 1', True)
    >>> rule = each(integer(at_least=2), distinct=True)
    >>> rule.describe({}), rule.accepts((2, 10), {}), rule.accepts((2, 2), {})
    ('a non-empty tuple of distinct entries, each entry an integer >= 2', True, False)
    """
    size = "a non-empty tuple" if min_len == 1 else "a tuple" if min_len == 0 else f"a tuple of >= {min_len} entries"
    size += " of distinct entries" if distinct else ""
    return Rule(lambda v, config: (isinstance(v, (tuple, list)) and len(v) >= min_len
                                   and all(rule.accepts(x, config) for x in v) and (not distinct or _distinct(v))),
                lambda config: f"{size}, each entry {rule.describe(config)}")


def optional(rule: Rule) -> Rule:
    """None, or a value ``rule`` allows.

    >>> optional(integer(at_least=1)).describe({})
    'None or an integer >= 1'
    """
    return Rule(lambda v, config: v is None or rule.accepts(v, config),
                lambda config: f"None or {rule.describe(config)}")


def any_of(*rules: Rule) -> Rule:
    """A value one of ``rules`` allows.

    >>> any_of(one_of("auto"), number(above=0, at_most=1)).describe({})
    "one of 'auto' or a number in (0, 1]"
    """
    return Rule(lambda v, config: any(r.accepts(v, config) for r in rules),
                lambda config: " or ".join(r.describe(config) for r in rules))


def when(field: str, value: Any, rule: Rule | None, otherwise: Rule | None = None) -> Rule:
    """``rule`` where the config's ``field`` is ``value`` (compared with its type), ``otherwise`` where it is not
    (None: any value); check ``field`` first. The words name the case that applies.

    >>> rule = when("dataset", "folder", one_of(1, 3), otherwise=satisfies(lambda v: v is None, "None"))
    >>> rule.accepts(3, {"dataset": "folder"}), rule.accepts(3, {"dataset": "mnist"})
    (True, False)
    >>> rule.describe({"dataset": "folder"}), rule.describe({"dataset": "mnist"})
    ("one of 1, 3 when dataset is 'folder'", "None when dataset is 'mnist' (not 'folder')")
    """
    def pick(config) -> tuple[Rule | None, str]:
        actual = field_value(config, field)
        if _same(actual, value):
            return rule, f"when {field} is {actual!r}"
        return otherwise, f"when {field} is {actual!r} (not {value!r})"

    def accepts(v, config) -> bool:
        chosen, _ = pick(config)
        return chosen is None or chosen.accepts(v, config)

    def describe(config) -> str:
        chosen, case = pick(config)
        return f"{'any value' if chosen is None else chosen.describe(config)} {case}"

    return Rule(accepts, describe)


def satisfies(test: Callable[[Any], bool], words: str) -> Rule:
    """A value ``test`` accepts (a predicate of the value alone), described by ``words``.

    >>> rule = satisfies(lambda v: isinstance(v, str) and ":" in v, "a string 'module:attribute'")
    >>> rule.accepts("pkg.mod:net", {}), rule.accepts("net", {}), rule.describe({})
    (True, False, "a string 'module:attribute'")
    """
    return Rule(lambda v, config: bool(test(v)), lambda config: words)


def explained(rule: Rule, why: str) -> Rule:
    """The values ``rule`` allows, its words followed by ``(why)``: what the values mean, or why the range.

    >>> explained(one_of("auto", "fixed"), "auto: sizes follow the data; fixed: as given").describe({})
    "one of 'auto', 'fixed' (auto: sizes follow the data; fixed: as given)"
    """
    return Rule(rule.accepts, lambda config: f"{rule.describe(config)} ({why})")


def check_config(config: Any, checks: Mapping[str, Rule]) -> None:
    """Checks ``config`` (a ConfigDict or a dict) against ``checks`` (field -> :class:`Rule`, in order).

    Raises:
      ConfigError: ``config.<field>: must be <what is allowed>, got <value>`` for the first field outside its range.
      KeyError: a field of ``checks`` that ``config`` lacks (a mistake in the checks, not in the config).
    """
    for field, rule in checks.items():
        value = field_value(config, field)
        if not rule.accepts(value, config):
            raise ConfigError(f"config.{field}: must be {rule.describe(config)}, got {value!r}")


def check_fits(config: Any, fields: tuple[str, ...] | list[str], available: int, records: str) -> None:
    """Checks that the records ``fields`` ask for, summed, fit in the ``available`` records the data holds: a limit
    no :class:`Rule` can state, since it is known only once the data is found (call it before the run writes
    anything). ``records`` names them for the message (e.g. ``"training records of 'mnist'"``).

    >>> check_fits({"fixed": 900, "targets": 100}, ("fixed", "targets"), 1000, "records")
    >>> check_fits({"fixed": 990, "targets": 100}, ("fixed", "targets"), 1000, "records")
    Traceback (most recent call last):
      ...
    recon_jax.evidence.config_checks.ConfigError: config.fixed + targets: must be at most the 1000 records, got 990 + 100 = 1090

    Raises:
      ConfigError: ``config.<field> + <field>: must be at most the <available> <records>, got <sum>``.
    """
    values = [field_value(config, f) for f in fields]
    if sum(values) > available:
        got = " + ".join(_show(v) for v in values) + (f" = {_show(sum(values))}" if len(values) > 1 else "")
        raise ConfigError(f"config.{' + '.join(fields)}: must be at most the {available} {records}, got {got}")
