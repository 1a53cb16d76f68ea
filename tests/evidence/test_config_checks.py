"""recon_jax.evidence.config_checks: the rules' ranges and words, and check_config's message."""

import ml_collections
import pytest

from recon_jax.evidence.config_checks import (ConfigError, Rule, any_of, check_config, computed, each, explained,
                                              integer, number, one_of, optional, satisfies, when)


@pytest.mark.parametrize("rule,good,bad", [
    (integer(at_least=1), [1, 7], [0, -1, 1.0, True, "1", None]),
    (integer(at_least=0, below=3), [0, 2], [3, -1]),
    (number(above=0), [1e-9, 2, 3.5], [0, 0.0, -1.0, float("inf"), float("nan"), True, "1"]),
    (number(at_least=0, below=1), [0.0, 0.999], [1.0, -0.1]),
    (one_of("fresh", "known"), ["fresh", "known"], ["Fresh", "", None]),
    (one_of(28, 64), [28, 64], [28.5, True, "28"]),
    (each(integer(at_least=1)), [(1,), [2, 3]], [(), (1, 0), 1, "ab"]),
    (each(number(above=0), min_len=0), [(), (0.5,)], [(0.0,), None]),
    (optional(integer(at_least=1)), [None, 5], [0]),
    (any_of(one_of("paper", "auto"), number(above=0, at_most=1)), ["auto", 1.0, 0.25], ["Auto", 0.0, 1.5]),
    (each(integer(at_least=2), distinct=True), [(2,), (2, 10, 100)], [(2, 2), (), (2, 1)]),
    (each(number(above=0), min_len=0, distinct=True), [(), (1.0, 2.0)], [(2.0, 2.0), (1, 1.0)]),  # 1 == 1.0
    (each(each(integer(), min_len=0), distinct=True), [([1], [2])], [([1], [1])]),  # unhashable entries: pairwise
    (satisfies(lambda v: isinstance(v, str) and ":" in v, "a 'module:attribute'"), ["m:a", ":"], ["ma", None, 1]),
    (explained(one_of("auto", "fixed"), "what they mean"), ["auto", "fixed"], ["Auto", None]),
    (optional(explained(integer(at_least=4), "a side")), [None, 4], [3, 4.0]),
])
def test_rules_accept_their_range_only(rule, good, bad):
    assert all(rule.accepts(v, {}) for v in good), good
    assert not any(rule.accepts(v, {}) for v in bad), [v for v in bad if rule.accepts(v, {})]


def test_bounds_may_name_other_fields_and_the_message_shows_their_values():
    config = ml_collections.ConfigDict({"num_shadow": 48, "reconstructor": {"validation_size": 48}})
    checks = {"num_shadow": integer(at_least=2),
              "reconstructor.validation_size": integer(at_least=0, below="num_shadow")}
    with pytest.raises(ConfigError, match=r"^config\.reconstructor\.validation_size: must be an integer in "
                                          r"\[0, num_shadow = 48\), got 48$"):
        check_config(config, checks)
    config.reconstructor.validation_size = 47
    check_config(config, checks)
    # The bounding field is checked first (the mapping's order): its own message, not a comparison error.
    config.num_shadow = 1
    with pytest.raises(ConfigError, match=r"^config\.num_shadow: must be an integer >= 2, got 1$"):
        check_config(config, checks)


def test_a_custom_rule_and_the_error_type():
    rule = Rule(lambda v, c: v == c["a"] ** 2, lambda c: f"a^2 = {c['a'] ** 2}")
    with pytest.raises(ValueError, match=r"^config\.b: must be a\^2 = 9, got 8$"):  # a ConfigError is a ValueError
        check_config({"a": 3, "b": 8}, {"a": integer(at_least=1), "b": rule})
    with pytest.raises(KeyError):  # a check naming a field the config lacks is a mistake in the checks
        check_config({"a": 3}, {"c": integer()})
    with pytest.raises(ValueError, match="one lower bound"):
        number(above=0, at_least=0)


def test_words_of_the_new_rules():
    assert each(integer(at_least=2), distinct=True).describe({}) == (
        "a non-empty tuple of distinct entries, each entry an integer >= 2")
    assert each(number(above=0), min_len=0, distinct=True).describe({}) == (
        "a tuple of distinct entries, each entry a number > 0")
    assert explained(optional(integer(at_least=4)), "None: their own size").describe({}) == (
        "None or an integer >= 4 (None: their own size)")
    assert satisfies(bool, "anything true").describe({}) == "anything true"


def test_computed_bounds_show_their_words_and_value():
    config = {"prior_aware_trials": 32, "audit_runs": 20, "trials": 39, "fixed_size": 50, "batch_size": 52}
    checks = {"prior_aware_trials": integer(at_least=2), "audit_runs": integer(at_least=4),
              "trials": integer(at_least=computed("max(prior_aware_trials, 2 x audit_runs)",
                                                  lambda c: max(c["prior_aware_trials"], 2 * c["audit_runs"])))}
    with pytest.raises(ConfigError, match=r"^config\.trials: must be an integer >= max\(prior_aware_trials, "
                                          r"2 x audit_runs\) = 40, got 39$"):
        check_config(config, checks)
    config["trials"] = 40
    check_config(config, checks)
    half_open = number(above=computed("kappa / 2", lambda c: c["kappa"] / 2), below=1)
    assert half_open.describe({"kappa": 0.5}) == "a number in (kappa / 2 = 0.25, 1)"
    assert not half_open.accepts(0.25, {"kappa": 0.5}) and half_open.accepts(0.26, {"kappa": 0.5})
    batch = optional(integer(at_least=1, at_most=computed("fixed_size + 1", lambda c: c["fixed_size"] + 1)))
    with pytest.raises(ConfigError, match=r"^config\.batch_size: must be None or an integer in "
                                          r"\[1, fixed_size \+ 1 = 51\], got 52$"):
        check_config(config, {"batch_size": batch})


def test_when_picks_the_rule_by_another_field_and_says_which():
    checks = {"dataset": one_of("mnist", "folder"),
              "image_size": when("dataset", "folder", optional(integer(at_least=4)),
                                 otherwise=satisfies(lambda v: v is None, "None")),
              "channels": when("dataset", "folder", one_of(1, 3))}
    check_config({"dataset": "folder", "image_size": 8, "channels": 3}, checks)
    check_config({"dataset": "mnist", "image_size": None, "channels": 2}, checks)  # no otherwise: any
    with pytest.raises(ConfigError, match=r"^config\.image_size: must be None when dataset is 'mnist' "
                                          r"\(not 'folder'\), got 32$"):
        check_config({"dataset": "mnist", "image_size": 32, "channels": 1}, checks)
    with pytest.raises(ConfigError, match=r"^config\.channels: must be one of 1, 3 when dataset is 'folder', got 2$"):
        check_config({"dataset": "folder", "image_size": None, "channels": 2}, checks)
    # The case compares with the type (True is not 1), as one_of does.
    flag = when("on", True, each(number(above=0), min_len=0), otherwise=each(number(above=0)))
    assert flag.accepts((), {"on": True}) and not flag.accepts((), {"on": 1})
    assert flag.describe({"on": 1}) == "a non-empty tuple, each entry a number > 0 when on is 1 (not True)"
