"""Unsupported model / algorithm / device combinations, reported as a ``ValueError`` that says what to change.

The shadow engine traces and compiles the exact program it will run before it trains any model
(:func:`~recon_jax.shadow.generate_shadow_models`), and :func:`~recon_jax.shadow.preflight` runs one tiny training
job of a configuration on the requested devices; a failure of either (a missing batching rule, a model that cannot
run on the data, an XLA compilation error) stops there with :class:`UnsupportedConfiguration` (a ``ValueError``)
naming the model, the algorithm and the devices, and, where it can tell, what to change. The original exception is
chained (``raise ... from err``): nothing is retried or replaced by another answer.
"""

from __future__ import annotations

import traceback

import jax
import jax.extend.core as jex
import jax.numpy as jnp
import numpy as np

from flax.errors import FlaxError

from recon_jax.models.adapters import ModelFns
from recon_jax.training.algorithms import Algorithm

__all__ = ["FAILURES", "UnsupportedConfiguration", "describe_algorithm", "explain_failures"]

# What tracing, lowering or compiling an unsupported combination raises: a missing batching or transpose rule
# (NotImplementedError), a model that cannot take the inputs or a library check (TypeError, ValueError), an XLA
# compilation or runtime error on the device (JaxRuntimeError), flax's shape errors (FlaxError, neither of those).
# Anything else propagates unchanged.
FAILURES = (NotImplementedError, TypeError, ValueError, jax.errors.JaxRuntimeError, FlaxError)

_NAME_LIMIT = 160


class UnsupportedConfiguration(ValueError):
    """A model / algorithm / device combination the shadow engine cannot run (a ``ValueError``; the original error
    is its ``__cause__``)."""


def describe_algorithm(algorithm: Algorithm) -> str:
    """A one-line description of an algorithm for messages.

    >>> from recon_jax.training import dp_sgd
    >>> describe_algorithm(dp_sgd(8, 1.0, noise_multiplier=1.0, sampling="poisson"))
    "DP-SGD (batch_size=8, sampling='poisson', clip_norm=1.0, clipping='flat', per_example='auto')"
    """
    a = algorithm
    name = ("DP-" if a.private else "") + ("GD" if a.batch_size is None else "SGD")
    if not a.private and a.batch_size is None:
        name = "full-batch GD"
    parts = []
    if a.batch_size is not None:
        parts += [f"batch_size={a.batch_size}", f"sampling={a.sampling!r}"]
    if a.private:
        parts += [f"clip_norm={a.clip_norm}", f"clipping={a.clipping!r}", f"per_example={a.per_example!r}"]
        if a.microbatch_size is not None:
            parts.append(f"microbatch_size={a.microbatch_size}")
    return f"{name} ({', '.join(parts)})" if parts else name


def _model_name(model_fns: ModelFns) -> str:
    """The model's name on one line (a flax module's repr spans lines, with ``# attributes`` comments)."""
    name = " ".join(line.strip() for line in model_fns.name.splitlines() if not line.strip().startswith("#"))
    return repr(name if len(name) <= _NAME_LIMIT else name[:_NAME_LIMIT] + "...")


def _devices(mesh) -> str:
    devices = list(mesh.devices.flat)
    kinds = sorted({d.platform for d in devices})
    return f"{len(devices)} {'/'.join(kinds)} device{'s' if len(devices) > 1 else ''}"


def _count_primitive(jaxpr, name: str) -> int:
    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name == name
        for v in eqn.params.values():
            for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                if isinstance(sub, jex.ClosedJaxpr):
                    count += _count_primitive(sub.jaxpr, name)
                elif isinstance(sub, jex.Jaxpr):
                    count += _count_primitive(sub, name)
    return count


def _uses_xla_convolution(model_fns: ModelFns, example) -> bool:
    """Whether the model's forward pass calls ``lax.conv_general_dilated`` (XLA's convolution); False when the model
    cannot even be traced on ``example`` (the error being explained then says why)."""
    x = jax.ShapeDtypeStruct((1,) + tuple(np.shape(example)[1:]), jnp.asarray(example[:1]).dtype)
    try:
        params = jax.eval_shape(model_fns.init, jax.random.key(0), x)
        closed = jax.make_jaxpr(model_fns.apply)(params, x)
    except FAILURES:
        return False
    return _count_primitive(closed.jaxpr, "conv_general_dilated") > 0


def _origin(err: BaseException) -> str:
    """Where the failing operation was created in user or library code (JAX records it as the error's cause)."""
    cause = err.__cause__
    if cause is None or type(cause).__name__ != "JaxStackTraceBeforeTransformation":
        return ""
    frames = [f for f in traceback.extract_tb(cause.__traceback__) if "/jax/_src/" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" (raised while transforming the operation created at {f.filename}:{f.lineno}, in {f.name})"


def _hints(model_fns: ModelFns, algorithm: Algorithm, mesh, example, err: BaseException) -> list[str]:
    hints = []
    text = f"{type(err).__name__}: {err}"
    if algorithm.private and algorithm.per_example == "ghost" and "per_example='ghost'" in text:
        hints.append("use per_example='auto' (ghost clipping where the model allows it) or 'vmap'")
    if _uses_xla_convolution(model_fns, example):
        hints.append('the model uses XLA\'s convolution (lax.conv_general_dilated): use conv_impl="patches" (zoo '
                     'models) or nn.Conv(..., conv_general_dilated=recon_jax.models.conv.patch_conv_general_dilated)')
    if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
        hints.append("give a smaller chunk_size" + (" and a microbatch_size (per-example gradients a few at a time)"
                                                     if algorithm.private else ""))
    if hints:
        return hints
    if algorithm.private:
        hints.append("DP training vmaps the model over the examples of a batch (per-example gradients), and the engine "
                     "vmaps training over models: the model's forward pass must be vmappable; models made of dense "
                     "layers only take the ghost-clipping path instead")
    else:
        hints.append("the engine vmaps training over models: the model's forward pass and gradient must be vmappable")
    if len(list(mesh.devices.flat)) > 1:
        hints.append("to tell a sharding problem from a model problem, try one device "
                     "(mesh=recon_jax.shadow.default_mesh(jax.devices()[:1]))")
    return hints


def _unsupported(model_fns: ModelFns, algorithm: Algorithm, mesh, example, err: BaseException
                ) -> UnsupportedConfiguration:
    """The :class:`UnsupportedConfiguration` explaining ``err`` (raise it ``from err``)."""
    message = str(err).strip() or "(no message)"
    hints = _hints(model_fns, algorithm, mesh, example, err)
    return UnsupportedConfiguration(
        f"model {_model_name(model_fns)} cannot be trained with {describe_algorithm(algorithm)} on "
        f"{_devices(mesh)}: {type(err).__name__}: {message}{_origin(err)}."
        + (" What to change: " + "; ".join(hints) + "." if hints else ""))


class explain_failures:  # noqa: N801 (used as a context manager, like contextlib's)
    """A reusable context manager: a :data:`FAILURES` exception raised inside the block becomes
    :class:`UnsupportedConfiguration`, chained to it (``example``: a batch of inputs shaped like the data, used for
    the hints). Other exceptions, and an :class:`UnsupportedConfiguration` already raised, pass unchanged.

    >>> from recon_jax.models import from_flax, MLP
    >>> from recon_jax.shadow import default_mesh
    >>> from recon_jax.training import full_batch_gd
    >>> import jax
    >>> one = default_mesh(jax.devices()[:1])
    >>> with explain_failures(from_flax(MLP((2,)), name="mlp"), full_batch_gd(), one, np.zeros((1, 3))):
    ...     raise NotImplementedError  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    recon_jax.shadow.support.UnsupportedConfiguration: model 'mlp' cannot be trained with full-batch GD on 1 ... device: NotImplementedError: (no message). What to change: the engine vmaps training over models: the model's forward pass and gradient must be vmappable.
    """

    def __init__(self, model_fns: ModelFns, algorithm: Algorithm, mesh, example):
        self.args = (model_fns, algorithm, mesh, example)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, err, tb):
        if err is None or isinstance(err, UnsupportedConfiguration) or not isinstance(err, FAILURES):
            return False
        raise _unsupported(*self.args, err) from err
