"""Model introspection: the *tap* of a model, which sees every dense-layer call of a forward pass.

A tap is a function ``tap(params, x, perturbations) -> (logits, calls)``: it runs the model on ``x``, adds
``perturbations[k]`` to the output of the k-th dense call (a shorter list, or ``None`` entries, leave the remaining
calls unchanged) and returns, per call, a :class:`DenseCall` (its input, the paths of its parameters, its output
shape). :func:`recon_jax.models.from_flax` and :func:`~recon_jax.models.from_haiku` attach one to every
:class:`~recon_jax.models.ModelFns`; ghost clipping (:mod:`recon_jax.training.ghost`) and the Gram formulation of
the first layer (:mod:`recon_jax.training.gram`) read it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax

__all__ = ["DenseCall", "TAP_FAILURES", "flax_tap", "haiku_tap", "leaf_paths", "static_calls", "tap_calls"]


@dataclasses.dataclass(frozen=True)
class DenseCall:
    """One dense-layer call seen by a tap: its input ``[B, ..., d_in]`` and its parameters' pytree paths."""

    inputs: Any
    kernel_path: tuple
    bias_path: tuple | None
    out_shape: tuple
    out_dtype: Any = None


def flax_tap(module, call_kwargs: dict | None = None) -> Callable:
    """The tap of a ``flax.linen`` module: intercepts every ``nn.Dense.__call__`` (``call_kwargs``: keyword
    arguments of every ``__call__``, as in :func:`~recon_jax.models.from_flax`).

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models.zoo import balle_mnist_mlp
    >>> m = balle_mnist_mlp()
    >>> params = m.init(jax.random.key(0), jnp.zeros((1, 784)))["params"]
    >>> _, calls = flax_tap(m)(params, jnp.zeros((2, 784)), None)
    >>> [c.kernel_path for c in calls]
    [('Dense_0', 'kernel'), ('Dense_1', 'kernel')]
    """
    import flax.linen as nn

    call_kw = dict(call_kwargs or {})

    def tap(params, x, perturbations):
        calls: list[DenseCall] = []

        def interceptor(next_fun, args, kwargs, context):
            if not (type(context.module) is nn.Dense and context.method_name == "__call__"):
                return next_fun(*args, **kwargs)
            inputs = args[0] if args else kwargs["inputs"]
            out = next_fun(*args, **kwargs)
            path = tuple(context.module.scope.path)
            bias = path + ("bias",) if context.module.use_bias else None
            k = len(calls)
            calls.append(DenseCall(inputs, path + ("kernel",), bias, tuple(out.shape), out.dtype))
            if perturbations is not None and k < len(perturbations) and perturbations[k] is not None:
                out = out + perturbations[k].astype(out.dtype)
            return out

        with nn.intercept_methods(interceptor):
            logits = module.apply({"params": params}, x, **call_kw)
        return logits, calls

    return tap


def haiku_tap(transformed, takes_rng: bool) -> Callable:
    """The tap of a ``haiku.transform``-ed function: intercepts every ``hk.Linear.__call__``."""
    import haiku as hk

    def tap(params, x, perturbations):
        calls: list[DenseCall] = []

        def interceptor(method, args, kwargs, context):
            if not (type(context.module) is hk.Linear and context.method_name == "__call__"):
                return method(*args, **kwargs)
            inputs = args[0] if args else kwargs["inputs"]
            out = method(*args, **kwargs)
            name = context.module.module_name
            bias = (name, "b") if context.module.with_bias else None
            k = len(calls)
            calls.append(DenseCall(inputs, (name, "w"), bias, tuple(out.shape), out.dtype))
            if perturbations is not None and k < len(perturbations) and perturbations[k] is not None:
                out = out + perturbations[k].astype(out.dtype)
            return out

        with hk.intercept_methods(interceptor):
            logits = transformed.apply(params, None, x) if takes_rng else transformed.apply(params, x)
        return logits, calls

    return tap


def leaf_paths(params) -> dict:
    """``{path tuple of dict keys: leaf}`` of a nested-dict parameter pytree."""
    out = {}
    for kp, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        keys = []
        for k in kp:
            if not isinstance(k, jax.tree_util.DictKey):
                return {}
            keys.append(k.key)
        out[tuple(keys)] = leaf
    return out


def static_calls(tap, params, x):
    """The dense calls of one forward pass, as shapes only (nothing enters the computation)."""
    box = []

    def run(p, xx):
        logits, calls = tap(p, xx, None)
        box.append([(c.kernel_path, c.bias_path, tuple(c.inputs.shape), c.out_shape, c.out_dtype) for c in calls])
        return logits

    jax.eval_shape(run, params, x)
    return box[0]


def _tap_failures() -> tuple[type[BaseException], ...]:
    import flax.errors

    return (TypeError, ValueError, KeyError, IndexError, AttributeError, flax.errors.FlaxError)


TAP_FAILURES = _tap_failures()
"""What a tap raises when it cannot run a model: a custom ``apply`` signature, parameters with other names or
shapes. Any other error (a bug, out of memory, an interrupt) propagates."""


def tap_calls(tap: Callable | None, params, x) -> list | None:
    """:func:`static_calls`, or ``None`` when there is no tap or the tap cannot run the model (:data:`TAP_FAILURES`).

    The fast paths that read a tap (ghost clipping, the Gram first layer) treat ``None`` as "not supported" and
    use the general path, which computes the same result.

    >>> import jax.numpy as jnp
    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> fns = from_flax(balle_mnist_mlp())
    >>> params = jax.eval_shape(fns.init, jax.random.key(0), jnp.zeros((1, 784)))
    >>> [c[0] for c in tap_calls(fns.tap, params, jnp.zeros((2, 784)))]
    [('Dense_0', 'kernel'), ('Dense_1', 'kernel')]
    >>> tap_calls(fns.tap, {"w": jnp.zeros((3, 3))}, jnp.zeros((2, 784))) is None  # parameters of another model
    True
    """
    if tap is None:
        return None
    try:
        return static_calls(tap, params, x)
    except TAP_FAILURES:
        return None
