"""The arguments of :func:`recon_jax.shadow.generate_shadow_models`: their checks, and the output request as one group.

:func:`check_shadow_args` validates every argument that does not need the device mesh and returns the host arrays
the engine trains on (:class:`ShadowArgs`); bad input raises ``ValueError`` naming the argument and what it allows.
:class:`ShadowOutputs` groups the outputs with the inputs they need (probe inputs, evaluation set); it can be
passed as ``outputs=`` instead of the names plus ``probe_inputs=`` / ``eval_set=``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import FINITE, Range, check
from recon_jax.training.algorithms import Algorithm
from recon_jax.training.gram import FIRST_LAYER_MODES

__all__ = ["OUTPUTS", "ShadowOutputs", "ShadowArgs", "check_shadow_args", "check_label_range"]

#: What :func:`~recon_jax.shadow.generate_shadow_models` can output per model.
OUTPUTS = ("params", "probe_logits", "eval_accuracy", "target_loss", "final_loss")


@dataclasses.dataclass(frozen=True, eq=False)
class ShadowOutputs:
    """What to return for every shadow model, with the inputs those outputs need.

    Attributes:
      names: any of :data:`OUTPUTS` (see :func:`~recon_jax.shadow.generate_shadow_models`).
      probe_inputs: ``[m, ...]`` inputs for ``"probe_logits"``.
      eval_set: ``(x, y)`` for ``"eval_accuracy"``.

    >>> import numpy as np
    >>> out = ShadowOutputs(("params", "probe_logits"), probe_inputs=np.zeros((3, 4)))
    >>> out.names, out.probe_inputs.shape
    (('params', 'probe_logits'), (3, 4))
    """

    names: Sequence[str] = ("params",)
    probe_inputs: Any = None
    eval_set: Any = None


class ShadowArgs(NamedTuple):
    """The checked arguments of a shadow run, as host arrays in the run's dtype (labels ``int32``).

    Attributes:
      fixed_x: ``[n, ...]`` fixed-set inputs.
      fixed_y: ``[n]`` fixed-set labels.
      target_x: ``[K, ...]`` one target per model.
      target_y: ``[K]`` their labels.
      target_weights: ``[K]`` 0/1 weights of the targets.
      dtype: the float dtype of the run (``np.dtype``).
      outputs: the output names, in the order given.
      shuffle_key: the shared shuffling key, or None where the algorithm does not use one.
      probe: ``[m, ...]`` probe inputs, or None without ``"probe_logits"``.
      eval_x: evaluation inputs, or None without ``"eval_accuracy"``.
      eval_y: evaluation labels, or None without ``"eval_accuracy"``.
    """

    fixed_x: np.ndarray
    fixed_y: np.ndarray
    target_x: np.ndarray
    target_y: np.ndarray
    target_weights: np.ndarray
    dtype: np.dtype
    outputs: tuple[str, ...]
    shuffle_key: jax.Array | None
    probe: np.ndarray | None
    eval_x: np.ndarray | None
    eval_y: np.ndarray | None


def check_shadow_args(algorithm: Algorithm, fixed_set, targets, *, init_params=None,
                      shuffle_key: jax.Array | None = None, target_weights=None, probe_inputs=None, eval_set=None,
                      outputs: Sequence[str] | ShadowOutputs = ("params",), chunk_size: int | None = None,
                      dtype=None, first_layer: str = "auto") -> ShadowArgs:
    """Checks the arguments of :func:`~recon_jax.shadow.generate_shadow_models` (all but the model, key and mesh).

    Args:
      algorithm: the training :class:`~recon_jax.training.Algorithm`.
      fixed_set: ``(x [n, ...], y [n])`` with integer labels.
      targets: ``(x [K, ...], y [K])``, K >= 1, examples shaped like the fixed set's.
      init_params: required iff ``algorithm.init == "fixed"``.
      shuffle_key: required iff minibatch training with ``algorithm.shuffle == "known"`` (dropped otherwise).
      target_weights: optional ``[K]`` of 0/1.
      probe_inputs: required with the ``"probe_logits"`` output.
      eval_set: ``(x, y)``, required with the ``"eval_accuracy"`` output.
      outputs: a non-empty subset of :data:`OUTPUTS` without duplicates, or a :class:`ShadowOutputs` (then
        ``probe_inputs`` and ``eval_set`` come from it and must not be given as well).
      chunk_size: None or an integer >= 1.
      dtype: the float dtype (default: the fixed set's float dtype, float32 for integers; float64 only under
        ``jax_enable_x64``).
      first_layer: one of ``FIRST_LAYER_MODES``.

    Returns:
      The :class:`ShadowArgs`.

    Raises:
      ValueError: naming the argument and what it allows.

    >>> import numpy as np
    >>> from recon_jax.training import full_batch_gd
    >>> alg = full_batch_gd(epochs=1, init="random")
    >>> fixed, targets = (np.zeros((4, 2), np.float32), np.zeros(4, int)), (np.ones((3, 2), np.float32), np.zeros(3, int))
    >>> a = check_shadow_args(alg, fixed, targets)
    >>> a.target_x.shape, a.target_weights.tolist(), a.outputs
    ((3, 2), [1.0, 1.0, 1.0], ('params',))
    >>> check_shadow_args(alg, fixed, targets, outputs=("logits",))
    Traceback (most recent call last):
    ...
    ValueError: outputs must be a non-empty subset of ('params', 'probe_logits', 'eval_accuracy', 'target_loss', 'final_loss'), got ('logits',)
    """
    if isinstance(outputs, ShadowOutputs):
        if probe_inputs is not None or eval_set is not None:
            raise ValueError("probe_inputs and eval_set go either into outputs (a ShadowOutputs) or in the call, "
                             "not both")
        outputs, probe_inputs, eval_set = outputs.names, outputs.probe_inputs, outputs.eval_set
    outputs = tuple(outputs)
    bad = [o for o in outputs if o not in OUTPUTS]
    if bad or not outputs:
        raise ValueError(f"outputs must be a non-empty subset of {OUTPUTS}, got {outputs}")
    if len(set(outputs)) != len(outputs):
        raise ValueError(f"outputs has duplicates: {outputs}")
    if first_layer not in FIRST_LAYER_MODES:
        raise ValueError(f"first_layer must be one of {FIRST_LAYER_MODES}, got {first_layer!r}")
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be None or an integer >= 1, got {chunk_size!r}")
    if not (isinstance(fixed_set, (tuple, list)) and len(fixed_set) == 2):
        raise ValueError("fixed_set must be a pair (x [n, ...], y [n])")
    if not (isinstance(targets, (tuple, list)) and len(targets) == 2):
        raise ValueError("targets must be a pair (x [K, ...], y [K])")
    fx, fy = np.asarray(fixed_set[0]), np.asarray(fixed_set[1])
    tx, ty = np.asarray(targets[0]), np.asarray(targets[1])
    if dtype is None:
        dtype = fx.dtype if np.issubdtype(fx.dtype, np.floating) else np.float32
    dtype = np.dtype(jnp.zeros((), dtype).dtype)  # respects jax_enable_x64
    fx, tx = fx.astype(dtype), tx.astype(dtype)
    if not (np.issubdtype(fy.dtype, np.integer) and np.issubdtype(ty.dtype, np.integer)):
        raise ValueError(f"labels must be integers, got fixed_set y {fy.dtype} and targets y {ty.dtype}")
    if fy.ndim != 1 or ty.ndim != 1:
        raise ValueError(f"labels must be integer class indices [n], not one-hot; got fixed_set y {fy.shape} and "
                         f"targets y {ty.shape}")
    fy, ty = fy.astype(np.int32), ty.astype(np.int32)
    if fx.shape[0] != fy.shape[0]:
        raise ValueError(f"fixed_set x and y must have the same length, got {fx.shape[0]} and {fy.shape[0]}")
    if tx.shape[0] != ty.shape[0] or tx.shape[0] < 1:
        raise ValueError(f"targets x and y must have the same length >= 1, got {tx.shape[0]} and {ty.shape[0]}")
    if tx.shape[1:] != fx.shape[1:]:
        raise ValueError(f"targets x must have example shape {fx.shape[1:]}, got {tx.shape[1:]}")
    check("fixed_set x", fx, FINITE)
    check("targets x", tx, FINITE)
    count = tx.shape[0]
    tw = np.ones(count, dtype) if target_weights is None else np.asarray(target_weights, dtype)
    if tw.shape != (count,) or not np.all((tw == 0) | (tw == 1)):
        raise ValueError(f"target_weights must be a [{count}] array of 0/1, got shape {tw.shape}")
    if algorithm.init == "fixed" and init_params is None:
        raise ValueError("init_params is required when algorithm.init == 'fixed' (the adversary-known init)")
    if algorithm.init == "random" and init_params is not None:
        raise ValueError("init_params must be None when algorithm.init == 'random'")
    needs_shuffle = algorithm.batch_size is not None and algorithm.shuffle == "known"
    if needs_shuffle and shuffle_key is None:
        raise ValueError("shuffle_key is required for minibatch training with shuffle='known'")
    if not needs_shuffle:
        shuffle_key = None
    if "probe_logits" in outputs and probe_inputs is None:
        raise ValueError("probe_inputs is required for the 'probe_logits' output")
    if "eval_accuracy" in outputs and eval_set is None:
        raise ValueError("eval_set is required for the 'eval_accuracy' output")
    probe = None if "probe_logits" not in outputs else np.asarray(probe_inputs, dtype)
    ex = ey = None
    if "eval_accuracy" in outputs:
        ex, ey = np.asarray(eval_set[0], dtype), np.asarray(eval_set[1])
        if ey.ndim != 1 or ey.shape[0] != ex.shape[0] or not np.issubdtype(ey.dtype, np.integer):
            raise ValueError(f"eval_set must be (x [m, ...], y [m]) with integer labels y, got x {ex.shape} and y "
                             f"{ey.shape} {ey.dtype}")
    return ShadowArgs(fx, fy, tx, ty, tw, dtype, outputs, shuffle_key, probe, ex, ey)


def check_label_range(num_classes: int, **labels) -> None:
    """Refuses integer labels outside ``[0, num_classes)`` (the model's output width) for softmax cross-entropy,
    whose one-hot targets are zero rows for them: a model trained on nothing, silently. ``labels``: name -> array
    or None."""
    outputs = Range(lambda v: (v >= 0) & (v < num_classes), f"in [0, {num_classes}) (the model's outputs)")
    for name, y in labels.items():
        if y is not None:
            check(f"{name} labels", y, outputs)
