"""The bounds' view of :mod:`recon_jax._validation` (one validation layer for bounds, accounting, special and
metrics; see its docstring for the convention: ``ValueError`` for concrete invalid input, NaN under ``jit``)."""

from recon_jax._validation import (  # noqa: F401
    all_valid,
    as_float,
    check,
    check_at_least,
    check_nonnegative,
    check_open_unit,
    check_positive,
    concrete_or_none,
    floor_tiny,
    invalid,
    log_positive,
    is_concrete,
    nan_if,
    valid,
)
from recon_jax._validation import HALF_OPEN_UNIT, NONNEGATIVE, OPEN_UNIT, POSITIVE, UNIT, at_least, greater_than  # noqa: F401
