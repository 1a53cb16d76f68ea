"""``log(exp(t) - 1)`` without overflow or cancellation (re-exported by :mod:`recon_jax.special`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import NONNEGATIVE, Range, as_float, guard, nan_if

__all__ = ["log_expm1"]

# ---------------------------------------------------------------------------------------------------------
# log(exp(t) - 1).
# ---------------------------------------------------------------------------------------------------------

_LOG_EXPM1_SMALL = -40.0 * np.log(2.0)  # log t below this (t <= 2^-40): log t + t/2
_LOG_EXPM1_LARGE = 30.0  # t above this: t + log1p(-exp(-t))
_LOG_T = Range(lambda a: a <= np.inf, "a number (not NaN)")  # log t, log_input=True


def log_expm1(x: jax.typing.ArrayLike, *, log_input: bool = False, validate: bool = True) -> jax.Array:
    """``log(exp(t) - 1)`` for ``t >= 0``, without overflow or cancellation (``-inf`` at ``t = 0``).

    Three branches, each exact to rounding where it is used: ``t <= 2^-40``: ``log t + t / 2`` (the next term,
    ``t^2 / 24``, is below float64 resolution); ``t > 30``: ``t + log1p(-exp(-t))`` (``exp(t)`` would overflow
    for ``t > 709`` in float64, ``88`` in float32); otherwise ``log(expm1(t))``. Jittable, vmappable, and
    differentiable for ``t > 0`` (the derivative is ``exp(t) / expm1(t)``); at ``t = 0`` the value is ``-inf`` and
    the gradient is finite (the unused branches are evaluated at safe points).

    With ``log_input=True`` the argument is ``log t`` (any real, ``-inf`` for ``t = 0``, ``+inf`` for ``t = inf``),
    so ``t`` may lie below the floating-point range: the HCR bound (:mod:`recon_jax.bounds.hcr`) passes
    ``log ||delta||^2 - 2 log sigma`` and never forms the ratio.

    Args:
      x: ``t >= 0``; with ``log_input``, ``log t``.
      log_input: ``x`` is ``log t`` (keyword only).
      validate: if True (default) and ``x`` is concrete, an invalid value (``t < 0`` or NaN; NaN with
        ``log_input``) raises ``ValueError``; under ``jit``/``vmap`` (or with ``validate=False``) it gives NaN.

    Returns:
      ``log(exp(t) - 1)``, shaped like ``x``, in its floating dtype.

    Raises:
      ValueError: for an invalid concrete ``x`` (``validate=True``).

    Example:
      >>> import numpy as np
      >>> from recon_jax.special import log_expm1
      >>> bool(np.isclose(float(log_expm1(1.0)), np.log(np.e - 1.0), rtol=1e-6))
      True
      >>> float(log_expm1(1000.0))  # exp(1000) overflows; log(exp(1000) - 1) = 1000 to float precision
      1000.0
      >>> round(float(log_expm1(-1000.0, log_input=True)), 2)  # t = exp(-1000) underflows; log t + t/2 does not
      -1000.0
    """
    bad = guard(("x", x, _LOG_T if log_input else NONNEGATIVE), validate=validate, cast=(x,))
    x = as_float(x)
    if log_input:
        log_t = x
        t = jnp.exp(log_t)
        off = jnp.zeros(t.shape, bool)  # t = 0 (log t = -inf) takes the small branch
    else:
        t = x
        off = ~(t > 0)  # t <= 0 or NaN: answered below; every branch is evaluated at a safe point
        log_t = jnp.log(jnp.where(off, jnp.ones_like(t), t))
    small = log_t < _LOG_EXPM1_SMALL
    large = t > _LOG_EXPM1_LARGE
    t_mid = jnp.where(small | large | off, jnp.ones_like(t), t)
    t_large = jnp.where(large, t, jnp.full_like(t, _LOG_EXPM1_LARGE))
    mid = jnp.log(jnp.expm1(t_mid))
    big = t_large + jnp.log1p(-jnp.exp(-t_large))
    out = jnp.where(small, log_t + 0.5 * t, jnp.where(large, big, mid))
    if log_input:
        return out  # NaN (the only invalid log t) gives NaN
    return nan_if(bad, jnp.where(t > 0, out, -jnp.inf))
