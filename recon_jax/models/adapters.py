"""``ModelFns(init, apply)``: the framework-agnostic model interface used by training and the shadow engine.

Everything downstream of a model takes a :class:`ModelFns` over *plain parameter pytrees*:

- ``init(key, example_inputs) -> params``
- ``apply(params, inputs) -> logits``

:func:`from_flax` wraps a ``flax.linen`` module (the ``"params"`` collection only, so the flattened layout reads
``Dense_0/kernel``); :func:`from_haiku` wraps a ``haiku.transform``-ed function (the reference notebook of Balle
et al. used Haiku). Both are pure and can be jitted and vmapped.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import jax

__all__ = ["ModelFns", "from_flax", "from_haiku"]

Params = Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelFns:
    """A pair of pure functions over plain parameter pytrees (hashable: usable as a static argument).

    Attributes:
      init: ``init(key, example_inputs) -> params``.
      apply: ``apply(params, inputs) -> logits``; inputs carry a leading batch axis.
      name: a stable description of the architecture, used in the shadow store's configuration hash.
      tap: optional ``tap(params, inputs, perturbations) -> (logits, dense_calls)`` exposing the dense layers
        (set by :func:`from_flax` / :func:`from_haiku`); DP training uses it for ghost clipping
        (:mod:`recon_jax.training.ghost`) when every parameter is in a dense layer. ``None``: no fast path.
    """

    init: Callable[[jax.Array, jax.Array], Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    name: str = "model"
    tap: Callable | None = dataclasses.field(default=None, compare=False)


def from_flax(module, name: str | None = None) -> ModelFns:
    """Adapts a ``flax.linen`` module (``params`` collection only; no mutable state such as batch norm).

    Args:
      module: a flax.linen module whose ``__call__(x)`` returns logits.
      name: description for configuration hashes; defaults to ``repr(module)`` (its dataclass fields).

    Returns:
      The :class:`ModelFns` of the module.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models.zoo import balle_mnist_mlp
    >>> fns = from_flax(balle_mnist_mlp())
    >>> params = fns.init(jax.random.key(0), jnp.zeros((1, 784)))
    >>> sorted(params), fns.apply(params, jnp.zeros((3, 784))).shape
    (['Dense_0', 'Dense_1'], (3, 10))
    """
    if not hasattr(module, "init") or not hasattr(module, "apply"):
        raise ValueError(f"module must be a flax.linen Module, got {type(module).__name__}")

    def init(key: jax.Array, x: jax.Array) -> Params:
        variables = module.init(key, x)
        extra = set(variables) - {"params"}
        if extra:
            raise ValueError(f"module has non-parameter collections {sorted(extra)}; only 'params' is supported")
        return variables["params"]

    def apply(params: Params, x: jax.Array) -> jax.Array:
        return module.apply({"params": params}, x)

    from recon_jax.training.ghost import flax_tap

    return ModelFns(init=init, apply=apply, name=name if name is not None else repr(module), tap=flax_tap(module))


def from_haiku(transformed, name: str | None = None) -> ModelFns:
    """Adapts a ``haiku.transform``-ed function ``f(x) -> logits`` (no state, no apply-time randomness).

    Args:
      transformed: the result of ``hk.transform(f)`` or ``hk.without_apply_rng(hk.transform(f))``.
      name: description for configuration hashes; defaults to ``"haiku:" + the function's qualified name``.

    Returns:
      The :class:`ModelFns` of the transformed function.

    >>> import haiku as hk, jax, jax.numpy as jnp
    >>> fns = from_haiku(hk.transform(lambda x: hk.nets.MLP([10, 10], activation=jax.nn.elu)(x)))
    >>> params = fns.init(jax.random.key(0), jnp.zeros((1, 784)))
    >>> fns.apply(params, jnp.zeros((2, 784))).shape
    (2, 10)
    """
    if not hasattr(transformed, "init") or not hasattr(transformed, "apply"):
        raise ValueError(f"transformed must be a haiku Transformed, got {type(transformed).__name__}")
    if name is None:
        fn = getattr(transformed.init, "__wrapped__", None) or transformed.init
        name = "haiku:" + getattr(fn, "__qualname__", type(fn).__name__)

    def init(key: jax.Array, x: jax.Array) -> Params:
        return transformed.init(key, x)

    takes_rng = "rng" in inspect.signature(transformed.apply).parameters  # False after hk.without_apply_rng

    def apply(params: Params, x: jax.Array) -> jax.Array:
        if takes_rng:
            return transformed.apply(params, None, x)
        return transformed.apply(params, x)

    from recon_jax.training.ghost import haiku_tap

    return ModelFns(init=init, apply=apply, name=name, tap=haiku_tap(transformed, takes_rng))
