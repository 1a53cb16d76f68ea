"""The linear-layer attack of Ziller et al., "Bounding Reconstruction Attack Success of Adversaries Without Data
Priors", Sec. 2.1 (re-exported by :mod:`recon_jax.attacks.gradient`).

The adversary replaces the model by ``L(W, X) = W^T X``; the gradient with respect to ``W`` *is* the input, so the
observed (clipped, noised) gradient is the reconstruction ``X_hat = X / max(1, ||X||/C) + xi`` (their eq. 3).
Averaging ``T`` observed steps divides the noise variance by ``T`` (Prop. 4). A batch of ``B`` samples uses
per-sample parameter blocks (one ``N``-vector of ``W`` per sample), so each block carries one sample, clipped on
its own. :func:`linear_layer_observations` runs the DP-SGD step on that model with any mechanism;
:func:`linear_layer_attack` turns observed gradients into reconstructions.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax._validation import FINITE_POSITIVE, guard, nan_if

__all__ = ["linear_layer_observations", "linear_layer_attack"]


def linear_layer_observations(
    key: jax.Array, inputs: jax.Array, mechanism, clip_norm: float, steps: int = 1
) -> jax.Array:
    """Released gradients of ``steps`` DP-SGD steps on the adversary's linear model ``L(W, X) = W^T X``.

    ``W`` has one block of ``N = prod(inputs.shape[1:])`` parameters per sample (``B * N`` in all; sample ``b``'s
    loss is ``W_b^T X_b`` so its gradient is ``X_b`` in block ``b`` and zero elsewhere). Each step computes the
    per-example gradients with ``jax.grad``, clips each to ``clip_norm``, sums them and releases
    ``mechanism.privatize(fold_in(key, t), clipped_sum, clip_norm, B)`` (Ziller et al. Sec. 2.1, eq. 3). The
    batch is the same at every step (Prop. 4: the adversary matches ``T`` queries of the same data).

    Args:
      key: typed PRNG key; step ``t`` uses ``fold_in(key, t)``.
      inputs: the private batch, shape ``[B, ...]``.
      mechanism: any :class:`recon_jax.mechanisms.Mechanism` (Gaussian, VMF, NoNoise).
      clip_norm: per-example clipping norm C > 0.
      steps: number of observed steps T >= 1.

    Returns:
      The released (noisy mean) gradients, shape ``[T, B * N]``; all NaN under ``jit`` when ``clip_norm`` is not
      finite and > 0.

    Raises:
      ValueError: if ``inputs`` has no batch axis, a concrete ``clip_norm`` is not finite and > 0, or ``steps < 1``.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.mechanisms import NoNoise
    >>> obs = linear_layer_observations(jax.random.key(0), jnp.ones((2, 3)), NoNoise(), clip_norm=10.0)
    >>> obs.shape, [round(float(v), 3) for v in obs[0]]
    ((1, 6), [0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    """
    inputs = jnp.asarray(inputs)
    if inputs.ndim < 2:
        raise ValueError(f"inputs must have shape [B, ...] with a batch axis, got {inputs.shape}")
    bad = guard(("clip_norm", clip_norm, FINITE_POSITIVE))  # traced: -1 left X unclipped, 0 zeroed it; now NaN
    if isinstance(steps, bool) or not (isinstance(steps, (int, np.integer)) and steps >= 1):
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    batch = inputs.shape[0]
    if batch < 1:  # the mean over the batch divided by 0
        raise ValueError(f"inputs must hold at least one record, got shape {inputs.shape}")
    x = inputs.reshape(batch, -1).astype(jnp.result_type(inputs.dtype, jnp.float32))
    w = jnp.zeros_like(x)  # [B, N]: the adversary's weights (any value: the loss is linear in W)

    def example_loss(w, xb, b):
        # L(W, X_b) = W_b^T X_b; at full float32 precision, so that its gradient is X_b itself on every backend
        # (at default precision a GPU's TF32 or a TPU's bfloat16 product would hand back a rounded X_b).
        return jnp.vdot(w[b], xb, precision=jax.lax.Precision.HIGHEST)

    per_example = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(w, x, jnp.arange(batch))  # [B, B, N]
    norms = jnp.sqrt(jnp.sum(per_example**2, axis=(1, 2)))
    factors = 1.0 / jnp.maximum(1.0, norms / clip_norm)  # beta_b of Ziller et al.
    # Full float32 on every backend: a TF32 or bfloat16 product could lengthen a clipped block beyond C.
    clipped_sum = jnp.einsum("b,bkn->kn", factors, per_example, precision=jax.lax.Precision.HIGHEST).reshape(-1)

    def release(t):
        return mechanism.privatize(jax.random.fold_in(key, t), clipped_sum, clip_norm, batch)

    return nan_if(bad, jax.lax.map(release, jnp.arange(steps)))


def linear_layer_attack(observed: jax.Array, batch_size: int, input_shape: tuple[int, ...]) -> jax.Array:
    """Ziller et al.'s reconstruction: the observed gradient itself, averaged over the ``T`` observed steps.

    The released update is the *mean* over the batch, so block ``b`` holds ``(beta_b X_b + xi) / B``; multiplying by
    ``B`` gives ``X_hat_b = beta_b X_b + xi`` with ``xi ~ N(0, C^2 sigma^2 / T)`` under the Gaussian mechanism
    (eq. 3 and Prop. 4). No rescaling or prior is used (the adversary has no data prior).

    Args:
      observed: released gradients, shape ``[T, B * N]`` or ``[B * N]``.
      batch_size: B >= 1.
      input_shape: shape of one sample (prod = N).

    Returns:
      Reconstructions of shape ``[B, *input_shape]``.

    Raises:
      ValueError: if the sizes do not match.

    >>> import jax.numpy as jnp
    >>> linear_layer_attack(jnp.array([[0.5, 1.0], [1.5, 1.0]]), batch_size=1, input_shape=(2,))
    Array([[1., 1.]], dtype=float32)
    """
    observed = jnp.asarray(observed)
    if observed.ndim == 1:
        observed = observed[None]
    n = int(math.prod(input_shape))
    if not (isinstance(batch_size, (int, np.integer)) and batch_size >= 1):
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if observed.ndim != 2 or observed.shape[1] != batch_size * n:
        raise ValueError(
            f"observed must have shape [T, batch_size * prod(input_shape)] = [T, {batch_size * n}], got {observed.shape}"
        )
    return (batch_size * jnp.mean(observed, axis=0)).reshape((batch_size,) + tuple(input_shape))
