"""recon_jax.evidence.config_checks: the rules' ranges and words, and check_config's message."""

import ml_collections
import pytest

from recon_jax.evidence.config_checks import (ConfigError, Rule, any_of, check_config, each, integer, number, one_of,
                                              optional)


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
