"""``ModelFns(init, apply)``: the framework-agnostic model interface used by training and the shadow engine.

Everything downstream of a model takes a :class:`ModelFns` over *plain parameter pytrees*:

- ``init(key, example_inputs) -> params``
- ``apply(params, inputs) -> logits``

:func:`from_flax` wraps a ``flax.linen`` module (the ``"params"`` collection only, so the flattened layout reads
``Dense_0/kernel``); :func:`from_haiku` wraps a ``haiku.transform``-ed function (the reference notebook of Balle
et al. used Haiku). Both are pure and can be jitted and vmapped. :func:`model_identity` describes what a model
computes (parameter tree and a fingerprint of its ``init`` and ``apply`` programs) for cache keys such as the
shadow store's configuration hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from typing import Any, Callable

import jax
import numpy as np

from recon_jax.models.taps import flax_tap, haiku_tap

__all__ = ["ModelFns", "from_flax", "from_haiku", "model_identity"]

Params = Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelFns:
    """A pair of pure functions over plain parameter pytrees (hashable: usable as a static argument).

    Attributes:
      init: ``init(key, example_inputs) -> params``.
      apply: ``apply(params, inputs) -> logits``; inputs carry a leading batch axis.
      name: a readable description of the architecture; part of :func:`model_identity`, which also
        fingerprints the computation (two models with the same name still get different identities).
      tap: optional ``tap(params, inputs, perturbations) -> (logits, dense_calls)`` exposing the dense layers
        (set by :func:`from_flax` / :func:`from_haiku`); DP training uses it for ghost clipping
        (:mod:`recon_jax.training.ghost`) when every parameter is in a dense layer. ``None``: no fast path.
    """

    init: Callable[[jax.Array, jax.Array], Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    name: str = "model"
    tap: Callable | None = dataclasses.field(default=None, compare=False)


def from_flax(module, name: str | None = None, call_kwargs: dict | None = None) -> ModelFns:
    """Adapts a ``flax.linen`` module (``params`` collection only; no mutable state such as batch norm).

    recon_jax trains and attacks deterministic functions: a module that draws a random stream when called (dropout)
    is refused with a ``ValueError``; ``call_kwargs`` switches it off where ``__call__`` has a flag for it.

    Args:
      module: a flax.linen module whose ``__call__(x, **call_kwargs)`` returns logits.
      name: description for configuration hashes; defaults to ``repr(module)`` (its dataclass fields), followed by
        ``call_kwargs`` when given.
      call_kwargs: keyword arguments for every call of ``__call__`` (``init``, ``apply`` and the dense-layer tap),
        e.g. ``{"train": False}`` for a module with dropout behind a ``train`` flag: its models are then trained
        and attacked without dropout.

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
    if call_kwargs is not None and not isinstance(call_kwargs, dict):
        raise ValueError(f"call_kwargs must be a dict of keyword arguments or None, got {type(call_kwargs).__name__}")
    kwargs = dict(call_kwargs or {})

    def init(key: jax.Array, x: jax.Array) -> Params:
        variables = _deterministic_call(module.init, key, x, kwargs)
        extra = set(variables) - {"params"}
        if extra:
            hint = (" (batch norm's running statistics are state that this training does not carry, and per-example "
                    "DP clipping needs examples that do not share batch statistics: nn.GroupNorm or nn.LayerNorm "
                    "keep only parameters)" if "batch_stats" in extra else "")
            raise ValueError(f"module has non-parameter collections {sorted(extra)}; only 'params' is supported{hint}")
        return variables["params"]

    def apply(params: Params, x: jax.Array) -> jax.Array:
        return _deterministic_call(module.apply, {"params": params}, x, kwargs)

    if name is None:
        name = repr(module) + (f" called with {kwargs!r}" if kwargs else "")
    return ModelFns(init=init, apply=apply, name=name, tap=flax_tap(module, kwargs))


def _deterministic_call(method, first, x, kwargs: dict):
    """``method(first, x, **kwargs)`` of a flax module, with flax's missing-random-stream error made actionable."""
    from flax.errors import InvalidRngError

    try:
        return method(first, x, **kwargs)
    except InvalidRngError as e:
        raise ValueError(
            f"module draws a random stream when called ({e}); recon_jax trains and attacks deterministic models, "
            f"so switch it off: from_flax(module, call_kwargs={{'train': False}}) (or whatever flag its __call__ "
            f"takes; now {kwargs!r}), or build the module with dropout off (e.g. nn.Dropout(rate, "
            f"deterministic=True))") from e


def from_haiku(transformed, name: str | None = None) -> ModelFns:
    """Adapts a ``haiku.transform``-ed function ``f(x) -> logits`` (no state, no apply-time randomness).

    A ``hk.transform_with_state`` result is refused, and a function that draws ``hk.next_rng_key()`` when applied
    (dropout) raises a ``ValueError`` that says how to switch it off.

    Args:
      transformed: the result of ``hk.transform(f)`` or ``hk.without_apply_rng(hk.transform(f))``.
      name: a readable description; defaults to ``"haiku"`` (the transformed function's own name is not
        recoverable: Haiku wraps it). Cache keys use :func:`model_identity`, which fingerprints the computation.

    Returns:
      The :class:`ModelFns` of the transformed function.

    >>> import haiku as hk, jax, jax.numpy as jnp
    >>> fns = from_haiku(hk.transform(lambda x: hk.nets.MLP([10, 10], activation=jax.nn.elu)(x)))
    >>> params = fns.init(jax.random.key(0), jnp.zeros((1, 784)))
    >>> fns.apply(params, jnp.zeros((2, 784))).shape
    (2, 10)
    """
    import haiku as hk

    if not hasattr(transformed, "init") or not hasattr(transformed, "apply"):
        raise ValueError(f"transformed must be a haiku Transformed, got {type(transformed).__name__}")
    if isinstance(transformed, (hk.TransformedWithState, hk.MultiTransformedWithState)):
        raise ValueError("transformed carries state (hk.transform_with_state: batch norm's statistics or other "
                         "state), which this training does not carry: transform a stateless function with "
                         "hk.transform (hk.GroupNorm or hk.LayerNorm keep only parameters)")
    if name is None:
        name = "haiku"

    def init(key: jax.Array, x: jax.Array) -> Params:
        return transformed.init(key, x)

    takes_rng = "rng" in inspect.signature(transformed.apply).parameters  # False after hk.without_apply_rng

    def apply(params: Params, x: jax.Array) -> jax.Array:
        try:
            return transformed.apply(params, None, x) if takes_rng else transformed.apply(params, x)
        except ValueError as e:  # haiku's MissingRNGError (a ValueError; haiku does not export the class)
            if type(e).__name__ != "MissingRNGError":
                raise
            raise ValueError("the function draws random numbers when applied (hk.next_rng_key, e.g. dropout); "
                             "recon_jax trains and attacks deterministic models: transform it with that switched "
                             "off, e.g. hk.transform(lambda x: f(x, is_training=False))") from e

    return ModelFns(init=init, apply=apply, name=name, tap=haiku_tap(transformed, takes_rng))


def _program_digest(closed_jaxpr) -> str:
    """SHA-256 of a traced program: its printed jaxpr plus the bytes of the constants it closes over."""
    h = hashlib.sha256(str(closed_jaxpr.jaxpr).encode())
    for c in closed_jaxpr.consts:
        c = np.asarray(c)
        h.update(f"{c.dtype.str}{c.shape}".encode())
        h.update(np.ascontiguousarray(c).tobytes())
    return h.hexdigest()


def model_identity(model_fns: ModelFns, example_inputs) -> dict:
    """A JSON description of what a model computes, for cache keys (the shadow store's configuration hash).

    Traces ``init`` on a batch of one example shaped like ``example_inputs[0]`` and ``apply`` on the resulting
    (abstract) parameters; nothing runs. Two models differ in identity when their parameter trees (paths,
    shapes, dtypes), their initialisation programs or their forward programs differ: a ReLU and a tanh MLP,
    or hidden width 8 and 32, get different identities under flax and Haiku alike, whatever their ``name``.

    Args:
      model_fns: the model.
      example_inputs: ``[batch, ...]`` inputs (only the shape and dtype of one example are used).

    Returns:
      ``{"name", "params": [[path, shape, dtype], ...], "init": sha256, "apply": sha256}``.

    >>> import jax.numpy as jnp
    >>> from recon_jax.models.zoo import MLP
    >>> a = model_identity(from_flax(MLP(features=(8, 3))), jnp.zeros((5, 4)))
    >>> b = model_identity(from_flax(MLP(features=(32, 3))), jnp.zeros((5, 4)))
    >>> a["params"][:2], a == b
    ([['Dense_0/bias', [8], 'float32'], ['Dense_0/kernel', [4, 8], 'float32']], False)
    """
    shape, dtype = np.shape(example_inputs), jax.numpy.asarray(example_inputs[:1]).dtype
    if len(shape) < 1 or shape[0] < 1:
        raise ValueError(f"example_inputs must have a leading batch axis of size >= 1, got shape {shape}")
    x = jax.ShapeDtypeStruct((1, *shape[1:]), dtype)
    key = jax.random.key(0)
    init_program, params = jax.make_jaxpr(model_fns.init, return_shape=True)(key, x)
    apply_program = jax.make_jaxpr(model_fns.apply)(params, x)
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    tree = [["/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path), list(leaf.shape),
             np.dtype(leaf.dtype).name] for path, leaf in leaves]
    return {"name": model_fns.name, "params": tree, "init": _program_digest(init_program),
            "apply": _program_digest(apply_program)}
