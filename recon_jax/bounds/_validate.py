"""Input validation shared by the bound functions (private helpers; import them, do not re-export them).

Convention of every public bound in :mod:`recon_jax.bounds`:

- When an argument is *concrete* (a Python number, a NumPy array, or a JAX array outside any trace) and
  ``validate=True`` (the default), an invalid value raises ``ValueError`` naming the argument and the
  allowed range.
- Under ``jax.jit`` / ``jax.vmap`` / ``jax.grad`` the values are not known when the function is traced, so
  no exception can be raised: the bound returns NaN wherever an argument is invalid (see :func:`nan_if`).
  With ``validate=False`` the same NaN convention applies to concrete inputs.

Example:
  >>> from recon_jax.bounds._validate import check
  >>> check("sigma", -1.0, lambda s: s > 0, "> 0")
  Traceback (most recent call last):
  ...
  ValueError: sigma must be > 0; got -1.0
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "is_concrete",
    "check",
    "check_positive",
    "check_nonnegative",
    "check_open_unit",
    "check_at_least",
    "nan_if",
    "as_float",
]


def is_concrete(value) -> bool:
    """True when ``value`` holds known numbers (not a tracer inside jit/vmap/grad)."""
    if isinstance(value, jax.core.Tracer):
        return False
    try:
        np.asarray(value)
    except Exception:  # pragma: no cover - defensive: unknown array-likes are treated as abstract
        return False
    return True


def _describe(arr: np.ndarray, bad: np.ndarray) -> str:
    if arr.ndim == 0:
        return repr(arr.item())
    first = arr[bad].ravel()[:3].tolist()
    return f"{int(bad.sum())} invalid value(s), e.g. {first}"


def check(name: str, value, predicate: Callable[[np.ndarray], np.ndarray], allowed: str, validate: bool = True):
    """Raises ``ValueError("<name> must be <allowed>; got ...")`` if ``value`` is concrete and fails ``predicate``.

    NaN always fails (``predicate`` comparisons are False for NaN). Tracers pass through unchecked.
    Returns ``value`` unchanged.
    """
    if not validate or not is_concrete(value):
        return value
    arr = np.asarray(value, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.asarray(predicate(arr), dtype=bool)
    ok = np.broadcast_to(ok, arr.shape)
    if not ok.all():
        raise ValueError(f"{name} must be {allowed}; got {_describe(arr, ~ok)}")
    return value


def check_positive(name: str, value, validate: bool = True):
    """``value > 0`` (finite or +inf allowed by the caller's math; NaN rejected)."""
    return check(name, value, lambda v: v > 0, "> 0", validate)


def check_nonnegative(name: str, value, validate: bool = True):
    """``value >= 0``."""
    return check(name, value, lambda v: v >= 0, ">= 0", validate)


def check_open_unit(name: str, value, validate: bool = True):
    """``0 < value < 1``."""
    return check(name, value, lambda v: (v > 0) & (v < 1), "in the open interval (0, 1)", validate)


def check_at_least(name: str, value, lower: float, validate: bool = True):
    """``value >= lower``."""
    return check(name, value, lambda v: v >= lower, f">= {lower:g}", validate)


def as_float(*values):
    """Converts array-likes to JAX arrays of one common floating dtype (float64 under x64, else float32)."""
    arrays = [jnp.asarray(v) for v in values]
    dtype = jnp.result_type(*arrays, float)
    if not jnp.issubdtype(dtype, jnp.floating):  # pragma: no cover - result_type with float is always floating
        dtype = jnp.result_type(float)
    out = tuple(a.astype(dtype) for a in arrays)
    return out if len(out) > 1 else out[0]


def nan_if(invalid: jax.Array, out: jax.Array) -> jax.Array:
    """``out`` with NaN wherever ``invalid`` is True (broadcast). The traced-input counterpart of ``check``."""
    return jnp.where(invalid, jnp.nan, out)
