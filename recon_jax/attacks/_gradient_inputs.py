"""What the gradient-matching attacks (:mod:`recon_jax.attacks.gradient`) check and derive from their inputs before
the search: the released gradient as a flat vector, the number of classes, the last layer iDLG reads, the search's
arguments, and the starting inputs. Package-private: its callers are Inverting Gradients and DLG."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from flax.errors import FlaxError
from jax.flatten_util import ravel_pytree

from recon_jax._validation import FINITE, FINITE_POSITIVE, check, check_integer, is_concrete


def flat_release(tree_or_array, params) -> jax.Array:
    """The released gradient as a flat vector in ``ravel_pytree(params)`` order (given flat or as a pytree)."""
    flat_params, _ = ravel_pytree(params)
    if isinstance(tree_or_array, (jax.Array, np.ndarray)) and jnp.ndim(tree_or_array) == 1:
        flat = jnp.asarray(tree_or_array)
    else:
        flat, _ = ravel_pytree(tree_or_array)
    if flat.shape != flat_params.shape:
        raise ValueError(
            f"observed_grad must match params: {flat_params.shape[0]} entries in ravel_pytree order, got {flat.shape}"
        )
    return flat


def check_release(g_obs: jax.Array, zero_refused: str | None) -> None:
    """Refuses a concrete released gradient with NaN or inf entries (the search would return NaN, silently), and an
    all-zero one when ``zero_refused`` says why it cannot be used. Traced values pass: the NaN loss says it."""
    if not is_concrete(g_obs):
        return
    check("observed_grad", g_obs, FINITE)
    if zero_refused is not None and not bool(jnp.any(g_obs != 0)):
        raise ValueError(f"observed_grad is all zeros: {zero_refused}")


def num_classes_of(apply_fn, params, input_shape, num_classes: int | None) -> int:
    """``num_classes``, or the model's output width on a ``[1, *input_shape]`` batch when None; either way the shape
    is traced once (nothing runs). A shape the model cannot take is a ValueError naming input_shape, and a given
    ``num_classes`` other than the model's output width one naming num_classes."""
    shape = (1,) + tuple(input_shape)
    try:
        out = jax.eval_shape(apply_fn, params, jax.ShapeDtypeStruct(shape, jnp.float32))
    except (TypeError, ValueError, FlaxError) as e:  # flax's shape errors are neither
        raise ValueError(f"input_shape {tuple(input_shape)} does not fit the model: apply_fn on a batch of shape "
                         f"{shape} fails ({type(e).__name__}: {str(e).splitlines()[0]})") from e
    width = int(out.shape[-1])
    if num_classes is not None and num_classes != width:
        raise ValueError(f"num_classes must be the model's output width {width} (or None to read it), got "
                         f"{num_classes}")
    return width


def default_last_layer(grad_tree, num_classes: int) -> jax.Array:
    """The last 2-D leaf with ``num_classes`` columns, for iDLG. Layer numbers are compared as numbers (flax's
    ``Dense_10`` comes after ``Dense_9``; the tree's sorted names put it before ``Dense_2``), which orders the layers
    of one family (``Dense_<n>``; haiku's ``linear``, ``linear_<n>``). Leaves of differently named layers
    (``proj`` and ``head``) have no order the tree can give (their paths sort by name, not by call), so they are
    refused: pass ``last_layer_fn``."""
    found = [(jax.tree_util.keystr(path), leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(grad_tree)
             if leaf.ndim == 2 and leaf.shape[-1] == num_classes]
    if not found:
        raise ValueError("could not find a last-layer weight [fan_in, num_classes]; pass labels or last_layer_fn")
    families = {re.sub(r"_?\d+", "", path) for path, _ in found}  # one family: haiku's linear, linear_1, ... too
    if len(families) > 1:
        raise ValueError(f"the last layer is ambiguous: {[path for path, _ in found]} all have {num_classes} columns "
                         f"and their names do not say which is called last; pass labels, or last_layer_fn mapping "
                         f"the gradient tree to the last layer's weight gradient (e.g. lambda g: g['head']['kernel'])")
    # the split's odd positions are always the digits
    return max(found, key=lambda f: tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", f[0])))[1]


def validate_search(input_shape, batch_size, num_restarts, num_steps, lr, data_range, clip_norm) -> tuple:
    """Checks the arguments Inverting Gradients and DLG share; returns ``input_shape`` as a tuple."""
    if not isinstance(input_shape, (tuple, list)) or len(input_shape) < 1:
        raise ValueError(f"input_shape must be the shape of one sample, a tuple such as (28, 28, 1), got "
                         f"{input_shape!r}")
    for name, count in (("batch_size", batch_size), ("num_restarts", num_restarts), ("num_steps", num_steps)):
        check_integer(name, count, 1)
    check("lr", lr, FINITE_POSITIVE)
    if data_range is not None and not (isinstance(data_range, (tuple, list)) and len(data_range) == 2
                                       and np.all(np.isfinite(np.asarray(data_range, float)))
                                       and data_range[0] < data_range[1]):
        raise ValueError(f"data_range must be (low, high) with finite low < high, or None, got {data_range!r}")
    if clip_norm is not None:
        check("clip_norm", clip_norm, FINITE_POSITIVE)
    return tuple(int(d) for d in input_shape)


def init_inputs(key, shape, data_range, init, dtype):
    """Starting inputs in the release's float dtype, at least float32 (float64 releases are searched in float64):
    uniform in the box ``data_range``, or normal (centred in the box, a quarter of its width per standard
    deviation; standard normal without a box, which is also where ``"uniform"`` starts then)."""
    dtype = search_dtype(dtype)
    if init == "uniform" and data_range is not None:
        return jax.random.uniform(key, shape, dtype, data_range[0], data_range[1])
    if init in ("uniform", "normal"):
        x = jax.random.normal(key, shape, dtype)
        if data_range is not None:
            x = 0.5 * (data_range[0] + data_range[1]) + 0.25 * (data_range[1] - data_range[0]) * x
        return x
    raise ValueError(f"init must be 'uniform' or 'normal', got {init!r}")


def search_dtype(release_dtype):
    """The dtype the attacks search in: the release's, promoted to at least float32 (a bfloat16, float16 or integer
    release is searched in float32, as every release was before; a float64 one in float64)."""
    return jnp.promote_types(release_dtype, jnp.float32)
