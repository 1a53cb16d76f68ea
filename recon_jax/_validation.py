"""The one validation module of recon_jax: input checks and input preparation shared by every package
(:mod:`recon_jax.bounds`, :mod:`recon_jax.accounting`, :mod:`recon_jax.special`, :mod:`recon_jax.metrics`,
:mod:`recon_jax.mechanisms`, :mod:`recon_jax.attacks`). Package-private: import from it, never re-export it. It
sits in the bottom layer (it imports only JAX and NumPy), so every module may import it.

The convention of every public numerical function:

- When an argument is *concrete* (a Python number, a NumPy array, or a JAX array outside any trace) and
  validation is on (the default), an invalid value raises ``ValueError`` naming the argument and the allowed
  range (:func:`check`).
- Under ``jax.jit`` / ``jax.vmap`` / ``jax.grad`` the values are unknown when the function is traced, so no
  exception can be raised: the result is NaN wherever an argument is invalid. NaN inputs are invalid (every
  comparison with NaN is False), so they never turn into a plausible number.

Both come from one call, :func:`guard`: it checks each ``(name, value, Range)`` (:func:`check`) and returns the mask
of the invalid entries, built from the same ranges (:func:`invalid`), which :func:`nan_if` applies. The condition
is written once; no function writes a NaN mask of its own beside its checks. The mask judges a concrete value in
float64 on the host, as the check does; a function that substitutes safe points into its arguments cast to float32
passes ``cast=`` so that the mask judges those cast values instead (see :func:`guard`).

Example:
  >>> import jax, jax.numpy as jnp
  >>> def scaled_inverse(sigma, eps):
  ...     bad = guard(("sigma", sigma, POSITIVE), ("eps", eps, NONNEGATIVE))
  ...     return nan_if(bad, jnp.exp(jnp.asarray(eps)) / jnp.asarray(sigma))
  >>> scaled_inverse(-1.0, 0.0)
  Traceback (most recent call last):
  ...
  ValueError: sigma must be > 0; got -1.0
  >>> scaled_inverse(2.0, [0.0, -1.0])
  Traceback (most recent call last):
  ...
  ValueError: eps must be >= 0; got 1 invalid value(s), e.g. [-1.0]
  >>> jax.jit(scaled_inverse)(2.0, jnp.array([0.0, -1.0, jnp.nan])).tolist()
  [0.5, nan, nan]

Sizes and counts (static Python integers, such as iteration counts or a dimension that fixes a shape) are
checked by :func:`check_integer`. Besides the checks the module holds the input preparation that goes with them:
one floating dtype for several arguments (:func:`float_dtype`, :func:`as_float`), host-side logarithms of
concrete inputs (:func:`log_positive`), static RDP orders (:func:`static_orders`) and the power-of-two batch
padding of the jitted accounting kernels (:func:`pad_batch`).

Notes on merged helpers (each had a private copy in a module before): "concrete" is :func:`is_concrete`
everywhere (not a tracer *and* convertible to a NumPy array; the copies that only ruled out tracers accepted
containers of tracers, then failed in ``np.asarray``); counts are Python/NumPy integers (:func:`check_integer`;
the copies written ``int(n) != n`` also let integral floats such as ``3.0`` through, which no caller passes and
``lax.scan`` lengths refuse anyway).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "Range",
    "POSITIVE",
    "NONNEGATIVE",
    "OPEN_UNIT",
    "UNIT",
    "HALF_OPEN_UNIT",
    "UNIT_HALF_OPEN",
    "FINITE",
    "FINITE_POSITIVE",
    "FINITE_NONNEGATIVE",
    "at_least",
    "finite_at_least",
    "greater_than",
    "is_concrete",
    "concrete_or_none",
    "check",
    "check_integer",
    "check_shapes",
    "guard",
    "invalid",
    "log_positive",
    "log_one_minus",
    "floor_tiny",
    "nan_if",
    "float_dtype",
    "as_float",
    "static_orders",
    "check_orders",
    "guard_orders",
    "pad_batch",
]


class Range(NamedTuple):
    """A predicate over arrays (NumPy or JAX; NaN must fail it) and its wording in error messages."""

    predicate: Callable
    allowed: str


POSITIVE = Range(lambda v: v > 0, "> 0")
NONNEGATIVE = Range(lambda v: v >= 0, ">= 0")
OPEN_UNIT = Range(lambda v: (v > 0) & (v < 1), "in the open interval (0, 1)")
UNIT = Range(lambda v: (v >= 0) & (v <= 1), "in [0, 1]")
HALF_OPEN_UNIT = Range(lambda v: (v > 0) & (v <= 1), "in (0, 1]")
UNIT_HALF_OPEN = Range(lambda v: (v >= 0) & (v < 1), "in [0, 1)")
FINITE = Range(lambda v: abs(v) < np.inf, "finite")
FINITE_POSITIVE = Range(lambda v: (v > 0) & (v < np.inf), "finite and > 0")
FINITE_NONNEGATIVE = Range(lambda v: (v >= 0) & (v < np.inf), "finite and >= 0")


def at_least(lower: float) -> Range:
    """``value >= lower``."""
    return Range(lambda v: v >= lower, f">= {lower:g}")


def finite_at_least(lower: float) -> Range:
    """``lower <= value < inf``: a count or dimension taken as a real number, where ``inf`` has no meaning."""
    return Range(lambda v: (v >= lower) & (v < np.inf), f"finite and >= {lower:g}")


def greater_than(lower: float) -> Range:
    """``value > lower``."""
    return Range(lambda v: v > lower, f"> {lower:g}")


def is_concrete(value) -> bool:
    """True when ``value`` holds known numbers (not a tracer inside jit/vmap/grad)."""
    if isinstance(value, jax.core.Tracer):
        return False
    try:
        np.asarray(value)
    except (TypeError, jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return False
    return True


def concrete_or_none(x) -> np.ndarray | None:
    """``x`` as a float64 NumPy array if it is concrete, ``None`` if it is a tracer."""
    if not is_concrete(x):
        return None
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        return None


def _describe(arr: np.ndarray, bad: np.ndarray) -> str:
    if arr.ndim == 0:
        return repr(arr.item())
    first = arr[bad].ravel()[:3].tolist()
    return f"{int(bad.sum())} invalid value(s), e.g. {first}"


def check(name: str, value, rng: Range | Callable, allowed: str | None = None, validate: bool = True):
    """Raises ``ValueError("<name> must be <allowed>; got ...")`` if ``value`` is concrete and out of range.

    ``rng`` is a :class:`Range`, or a predicate with ``allowed`` its wording. NaN always fails. Tracers pass
    unchecked (a numerical function calls :func:`guard`, which checks and returns the NaN mask). A value that is
    not numeric at all raises ``ValueError`` naming the argument too. Returns ``value`` unchanged.
    """
    predicate, allowed = (rng.predicate, rng.allowed) if isinstance(rng, Range) else (rng, allowed)
    if not validate or not is_concrete(value):
        return value
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a number or array of numbers {allowed}; got {value!r}") from e
    with np.errstate(invalid="ignore"):
        ok = np.asarray(predicate(arr), dtype=bool)
    ok = np.broadcast_to(ok, arr.shape)
    if not ok.all():
        raise ValueError(f"{name} must be {allowed}; got {_describe(arr, ~ok)}")
    return value


def check_integer(name: str, value, lower: int | None = None, upper: int | None = None) -> int:
    """A Python or NumPy integer (bools refused) in ``[lower, upper]`` (either end may be open), returned as
    ``int``: static sizes and counts.

    >>> check_integer("num_rounds", 0, 1)
    Traceback (most recent call last):
    ...
    ValueError: num_rounds must be an integer >= 1; got 0
    >>> check_integer("num_targets", 7, 1, 5)
    Traceback (most recent call last):
    ...
    ValueError: num_targets must be an integer in [1, 5]; got 7
    """
    allowed = {(True, True): f" in [{lower}, {upper}]", (True, False): f" >= {lower}",
               (False, True): f" <= {upper}", (False, False): ""}[lower is not None, upper is not None]
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))
            or (lower is not None and value < lower) or (upper is not None and value > upper)):
        raise ValueError(f"{name} must be an integer{allowed}; got {value!r}")
    return int(value)


def invalid(value, rng: Range | Callable) -> jax.Array:
    """Boolean mask of the entries of ``value`` outside ``rng`` (NaN included); traceable.

    A concrete ``value`` is judged in float64 on the host, before any cast to float32 (where e.g. ``1e-40``
    flushes to 0 and ``1 - 1e-9`` rounds to 1, which would turn valid input into NaN).
    """
    predicate = rng.predicate if isinstance(rng, Range) else rng
    host = concrete_or_none(value)
    if host is not None:
        with np.errstate(invalid="ignore"):
            return jnp.asarray(np.logical_not(np.asarray(predicate(host), dtype=bool)))
    return jnp.logical_not(predicate(jnp.asarray(value)))


def check_shapes(**named) -> None:
    """Raises ``ValueError`` naming the arguments when their shapes do not broadcast together.

    >>> check_shapes(eps=(2,), q=(3,))
    Traceback (most recent call last):
    ...
    ValueError: shapes do not broadcast together: eps (2,), q (3,)
    """
    shapes = {k: tuple(v) for k, v in named.items()}
    try:
        np.broadcast_shapes(*shapes.values())
    except ValueError as e:
        raise ValueError("shapes do not broadcast together: " + ", ".join(f"{k} {v}" for k, v in shapes.items())) from e


def guard(*specs: tuple[str, object, Range], validate: bool = True, cast=None) -> jax.Array:
    """Checks each ``(name, value, rng)`` and returns the mask of the invalid entries: the one validation call of a
    public numerical function, ``bad = guard(...)`` then ``nan_if(bad, out)``.

    In the order of ``specs``, a concrete value outside its :class:`Range` raises :func:`check`'s ``ValueError``
    (unless ``validate`` is False); then shapes that do not broadcast together raise ``ValueError`` naming them
    (not JAX's error from deep inside the computation). The mask is True where any value is outside its range
    (NaN included), judged by the same predicates, broadcast over all the values; for values that live on
    different axes (a batch and an RDP curve, say) call ``guard`` once per group.

    Args:
      *specs: ``(name, value, rng)`` triples; ``rng`` a :class:`Range` (its wording is the message's).
      validate: raise for invalid concrete values; False returns the mask only.
      cast: what the mask judges. ``None`` (default): the values as given, as :func:`invalid` does (concrete values
        in float64 on the host, before any float32 cast). A tuple of array-likes: the values cast to the floating
        dtype :func:`as_float` gives that tuple together (the function's own ``as_float`` arguments), so that the
        mask agrees with the cast values a function substitutes safe points into; if ``as_float`` cannot cast the
        tuple (a value that is not a number, which a later check or cast refuses; an int beyond int32 without
        x64), the values are judged as given. A dtype: the values cast to it (``jnp.asarray(value, dtype)``).

    Returns:
      Boolean mask of the broadcast shape of the values, True where an entry is invalid.

    >>> guard(("q", [0.5, 2.0], HALF_OPEN_UNIT), ("sigma", 1.0, POSITIVE), validate=False).tolist()
    [False, True]
    >>> guard(("q", np.ones(2), HALF_OPEN_UNIT), ("sigma", np.ones(3), POSITIVE))
    Traceback (most recent call last):
    ...
    ValueError: the arguments' shapes [(2,), (3,)] do not broadcast together
    >>> tiny = ("kappa", 1e-300, OPEN_UNIT)  # valid, but 0 in float32
    >>> bool(guard(tiny)), bool(guard(tiny, cast=np.float32))
    (False, True)
    """
    for name, value, rng in specs:
        check(name, value, rng, validate=validate)
    shapes = [np.shape(value) for _, value, _ in specs]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError as e:
        raise ValueError(f"the arguments' shapes {shapes} do not broadcast together") from e
    masks = None
    if isinstance(cast, tuple):
        try:  # cast as as_float casts: asarray, then astype the common floating dtype
            dtype = float_dtype(*(jnp.asarray(v) for v in cast))
            masks = [jnp.logical_not(rng.predicate(jnp.asarray(value).astype(dtype))) for _, value, rng in specs]
        except (TypeError, ValueError, OverflowError):  # as_float cannot cast it: judged as given
            pass
    elif cast is not None:
        masks = [jnp.logical_not(rng.predicate(jnp.asarray(value, cast))) for _, value, rng in specs]
    if masks is None:
        masks = [invalid(value, rng) for _, value, rng in specs]
    out = masks[0]
    for mask in masks[1:]:
        out = out | mask
    return out


def log_positive(value, dtype) -> jax.Array:
    """``log(value)`` in ``dtype``, taken in float64 on the host when ``value`` is concrete.

    For positive inputs that float32 cannot hold (``1e-300``, ``1e300``) whose logarithm it can; traced inputs
    use ``jnp.log``. Non-positive entries give ``log(1) = 0``: mask them with :func:`nan_if`.
    """
    host = concrete_or_none(value)
    if host is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            return jnp.asarray(np.log(np.where(host > 0, host, 1.0)), dtype)
    value = jnp.asarray(value, dtype)
    return jnp.log(jnp.where(value > 0, value, 1.0))


def log_one_minus(value, dtype) -> jax.Array:
    """``log(1 - value)`` in ``dtype``, taken in float64 on the host (``log1p(-value)``) when ``value`` is concrete.

    For values below 1 that float32 rounds to 1 (``1 - 1e-9``: its ``log(1 - value)``, -20.7, is representable) and
    tiny values it flushes to 0 (exact to rounding either way). Traced inputs use ``jnp.log1p(-value)``. Entries
    ``>= 1`` give ``-inf`` (at 1) or NaN: substitute or mask them.
    """
    host = concrete_or_none(value)
    if host is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            return jnp.asarray(np.log1p(-host), dtype)
    return jnp.log1p(-jnp.asarray(value, dtype))


def floor_tiny(out: jax.Array) -> jax.Array:
    """``max(out, smallest normal float)``: keeps an upper bound on a probability in (0, 1] when it underflows.

    Raising an upper bound is conservative; the result is the exact value whenever that is representable.
    """
    return jnp.maximum(out, jnp.finfo(out.dtype).tiny)


def nan_if(bad: jax.Array, out: jax.Array) -> jax.Array:
    """``out`` with NaN wherever ``bad`` is True (broadcast). The traced-input counterpart of :func:`check`."""
    return jnp.where(bad, jnp.nan, out)


def float_dtype(*values):
    """The floating dtype the arguments promote to: ``jnp.result_type(*values, float)``, integers and bools giving
    the default float (float64 under x64, else float32); weakly typed Python scalars do not widen an array.

    >>> float_dtype(np.ones(2, np.float32), 2.0), float_dtype(np.arange(3, dtype=np.int32)) == jnp.result_type(float)
    (dtype('float32'), True)
    """
    dtype = jnp.result_type(*values, float)
    if not jnp.issubdtype(dtype, jnp.floating):  # pragma: no cover - result_type with float is always floating
        dtype = jnp.result_type(float)
    return dtype


def as_float(*values, broadcast: bool = True):
    """Converts array-likes to JAX arrays of one common floating dtype (float64 under x64, else float32).

    With ``broadcast`` (elementwise functions), shapes that do not broadcast together raise ``ValueError``
    naming them, instead of JAX's ``TypeError`` from deep inside the computation.
    """
    arrays = [jnp.asarray(v) for v in values]
    if broadcast:
        try:
            np.broadcast_shapes(*(a.shape for a in arrays))
        except ValueError as e:
            raise ValueError(f"the arguments' shapes {[a.shape for a in arrays]} do not broadcast together") from e
    dtype = float_dtype(*arrays)
    out = tuple(a.astype(dtype) for a in arrays)
    return out if len(out) > 1 else out[0]


def static_orders(orders, name: str = "orders") -> np.ndarray:
    """Validates concrete RDP orders (> 1, finite, and > 1 in the working precision: :func:`check_orders`) and
    returns them as a float64 array of shape [n] or []."""
    arr = concrete_or_none(orders)
    if arr is None:
        raise ValueError(
            f"{name} must be concrete (a Python/NumPy array, not a traced value): the RDP orders fix the "
            "static shape of the series; jit over the mechanism parameters instead"
        )
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a scalar or a 1-D array; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or not np.all(arr > 1.0):
        bad = np.ravel(arr)[np.ravel(~(arr > 1.0) | ~np.isfinite(arr))]
        raise ValueError(f"{name} must be finite and > 1; got {bad[:4].tolist()}")
    _check_orders_representable(arr, name)
    return arr


def check_orders(orders, name: str = "orders") -> None:
    """Raises ``ValueError`` naming ``name`` where a concrete RDP order is not > 1, or is > 1 but rounds to 1 in the
    working float dtype (``1 + 1e-9`` in float32). Every RDP formula divides by ``alpha - 1``; at alpha = 1 they give
    0 or NaN, not the KL divergence, and an RDP of 0 converts to epsilon 0 (not a bound). Traced orders pass (the
    callers' :func:`guard` masks them in the working dtype).

    >>> check_orders([1.5, 1 + 1e-9])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: orders must be > 1 in float32 (the working precision): [1.000000001] round to 1.0 there; pass ...
    """
    check(name, orders, greater_than(1))
    arr = concrete_or_none(orders)
    if arr is not None:
        _check_orders_representable(arr, name)


def guard_orders(orders, dtype, name: str = "orders") -> jax.Array:
    """:func:`check_orders`, then the mask of the orders that are not > 1 in ``dtype`` (traced ones: NaN there)."""
    check_orders(orders, name)
    return guard((name, orders, greater_than(1)), validate=False, cast=dtype)


def _check_orders_representable(arr: np.ndarray, name: str) -> None:
    """The working-precision half of :func:`check_orders`, on concrete float64 orders already known to be > 1."""
    dtype = np.dtype(jnp.result_type(float))
    lost = ~(arr.astype(dtype) > 1.0)
    if np.any(lost):
        smallest = np.nextafter(dtype.type(1.0), dtype.type(2.0))
        raise ValueError(f"{name} must be > 1 in {dtype.name} (the working precision): "
                         f"{np.ravel(arr)[np.ravel(lost)][:4].tolist()} round to 1.0 there; pass orders >= "
                         f"{float(smallest):.9g} or enable float64 (jax.config.update(\"jax_enable_x64\", True))")


def pad_batch(*arrays):
    """Flattens equally-shaped arrays and pads them (repeating the last item) to a power-of-two length >= 4.

    Jitted kernels are compiled per input shape; bucketing batch sizes keeps the number of compilations small
    when callers pass grids of varying size. Returns (padded flat arrays, original size).

    >>> (flat,), n = pad_batch(jnp.arange(5.0))
    >>> flat.tolist(), n
    ([0.0, 1.0, 2.0, 3.0, 4.0, 4.0, 4.0, 4.0], 5)
    """
    n = int(np.prod(arrays[0].shape)) if arrays[0].shape else 1
    size = max(4, 1 << (max(n, 1) - 1).bit_length())
    out = []
    for a in arrays:
        flat = jnp.reshape(a, (-1,))
        if size > n and n:
            flat = jnp.concatenate([flat, jnp.broadcast_to(flat[-1:], (size - n,))])
        elif size > n:
            flat = jnp.zeros((size,), flat.dtype)
        out.append(flat)
    return out, n
