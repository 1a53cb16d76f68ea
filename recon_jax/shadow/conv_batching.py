"""Makes a single-model function vmappable inside the engine's ``shard_map`` when it contains XLA convolutions.

Why: the engine runs ``vmap(one)`` over each device's models inside ``shard_map`` over the ``"models"`` mesh axis
(:func:`recon_jax.shadow.engine._compiled`), so while it traces, every abstract value carries a sharding on that
mesh (its axis ``Manual``). JAX's transpose rule for a convolution's kernel (``_conv_general_dilated_transpose_rhs``
in ``jax/_src/lax/convolution.py``, jax 0.10.2) records the kernel's sharding as the ``out_sharding`` of the
convolution it emits. A grouped convolution arises from it (DP training's per-example ``vmap(grad)`` makes
``feature_group_count`` = examples per batch; a depthwise ``nn.Conv(feature_group_count=...)`` has groups anyway),
and when the vmap over models batches the training loop, the convolution's input (the shared fixed set) is not
batched but the kernel (a cotangent) is: JAX's batching rule (``_conv_general_dilated_batch_rule``, branch "rhs
batched, groups > 1") raises a bare ``NotImplementedError`` whenever ``out_sharding`` is set. The engine routes
around it for every model: it traces the single-model function to a jaxpr, drops the ``out_sharding`` of every
``conv_general_dilated`` (at any depth: scan, while, cond, pjit and custom-derivative bodies) whose mesh axes are all
``Manual``, and vmaps the evaluation of that jaxpr. Such an annotation constrains nothing: JAX lowers it to no
sharding op at all (``mlir.lower_with_sharding_in_types`` returns the operation unchanged when all mesh axes are
``Manual``), so the compiled program is the one the annotation would have given. Annotations on meshes with ``Auto``
or ``Explicit`` axes are kept: there the batching rule's error is the right answer (under XLA's automatic SPMD
partitioning the engine's convolutions gave wrong models on the second device, which is why it uses ``shard_map``).

A function without such convolutions is evaluated from its own, unmodified jaxpr: the same primitives bound with
the same parameters as tracing it directly (the engine's results are bitwise those of the direct trace).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.extend.core as jex

__all__ = ["strip_conv_out_sharding", "without_conv_out_sharding"]

_CONV = "conv_general_dilated"


def _constrains_nothing(sharding) -> bool:
    """Whether an ``out_sharding`` annotation is one the rewrite drops: an empty mesh, or a mesh whose axes are all
    ``Manual`` (inside ``shard_map``), for which ``mlir.lower_with_sharding_in_types`` emits nothing."""
    mesh = getattr(sharding, "mesh", None)
    if mesh is None:
        return False
    return bool(mesh.empty or getattr(mesh, "are_all_axes_manual", False))


def _strip_param(value):
    """A parameter value with the convolution annotations of the jaxprs it holds dropped (the same object when
    nothing changed)."""
    if isinstance(value, jex.ClosedJaxpr):
        inner = strip_conv_out_sharding(value.jaxpr)
        return value if inner is value.jaxpr else jex.ClosedJaxpr(inner, value.consts)
    if isinstance(value, jex.Jaxpr):
        return strip_conv_out_sharding(value)
    if isinstance(value, (tuple, list)) and any(isinstance(v, (jex.Jaxpr, jex.ClosedJaxpr)) for v in value):
        new = [_strip_param(v) for v in value]
        return value if all(a is b for a, b in zip(new, value)) else type(value)(new)
    return value


def strip_conv_out_sharding(jaxpr: jex.Jaxpr) -> jex.Jaxpr:
    """``jaxpr`` with ``out_sharding=None`` on every ``conv_general_dilated`` whose annotation constrains nothing
    (its mesh axes are all ``Manual``), recursively into the sub-jaxprs held in equation parameters. Returns
    ``jaxpr`` itself when there is nothing to drop.

    >>> import jax, jax.numpy as jnp
    >>> closed = jax.make_jaxpr(lambda x: jnp.sin(x))(1.0)
    >>> strip_conv_out_sharding(closed.jaxpr) is closed.jaxpr
    True
    """
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        params = {k: _strip_param(v) for k, v in eqn.params.items()}
        if eqn.primitive.name == _CONV and params.get("out_sharding") is not None and _constrains_nothing(
                params["out_sharding"]):
            params["out_sharding"] = None
        if any(params[k] is not eqn.params[k] for k in params):
            eqn = eqn.replace(params=params)
            changed = True
        eqns.append(eqn)
    return jaxpr.replace(eqns=eqns) if changed else jaxpr


def without_conv_out_sharding(fn: Callable) -> Callable:
    """``fn`` evaluated from its jaxpr with the convolutions' ``out_sharding`` dropped (module docstring), so that
    ``jax.vmap`` of it works inside the engine's ``shard_map``. Same values as ``fn``; ``fn`` must be pure and
    close over no tracers (its arguments are traced afresh at each call).

    >>> import jax, jax.numpy as jnp
    >>> f = without_conv_out_sharding(lambda x, d: {"y": x * d["a"]})
    >>> jax.vmap(f, in_axes=(0, None))(jnp.arange(3.0), {"a": 2.0})["y"].tolist()
    [0.0, 2.0, 4.0]
    """

    @functools.wraps(fn)
    def wrapped(*args):
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        jaxpr = strip_conv_out_sharding(closed.jaxpr)
        if jaxpr is not closed.jaxpr:
            closed = jex.ClosedJaxpr(jaxpr, closed.consts)
        out = jex.jaxpr_as_fun(closed)(*jax.tree_util.tree_leaves(args))
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), out)

    return wrapped
