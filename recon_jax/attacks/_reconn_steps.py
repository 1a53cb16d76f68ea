"""The compiled kernels of :func:`recon_jax.attacks.reconn.train_reconstructor`: the optimiser steps of an epoch
block (one ``lax.scan`` or a host loop), batched prediction, the validation metrics and host-to-device row gathers.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from recon_jax.models.losses import reconstruction_loss

__all__ = ["DROPOUT_STREAM", "trainable_part", "make_steps", "default_optimizer", "permutation", "gather", "batch_mse",
           "predict", "predict_jit", "batch_objective", "resident_on_accelerator", "RESIDENT_BLOCK_ROWS"]

# Rows per scanned block when the features live on the accelerator (the gather is a device-side take, so large
# blocks only cut dispatches; 16,384 rows of 79,510 float32 features are 5 GB).
RESIDENT_BLOCK_ROWS = 16384


# Reserved: ``fold_in(key, e + 2)`` shuffles epoch e, so this index is never an epoch's key (epochs < 2**32 - 3).
DROPOUT_STREAM = 2**32 - 1


def trainable_part(variables, train_flag):
    """The optimised part of a model's variables: all of them, or only ``"params"`` with ``train_flag``."""
    return variables["params"] if train_flag else variables


@functools.lru_cache(maxsize=16)
def make_steps(model, optimizer, mae_weight, mse_weight, discriminator, disc_optimizer, adversarial_weight,
               perceptual_fn, perceptual_weight, train_flag, step_loop):
    """``(state, x [S, B, F], t [S, B, ...], scaler, epoch_key, step0) -> (state, losses [S])``: S optimiser steps.

    ``step_loop="scan"``: one jitted ``lax.scan`` over the S steps; ``"host"``: a host loop calling one jitted
    step per minibatch. Cached on its (hashable) arguments, so repeated fits of one model with one optimizer object
    compile once. With ``train_flag`` the model runs in training mode: the optimiser updates ``"params"``, the
    other collections (BatchNorm ``"batch_stats"``) take the forward pass's updates, and step ``i`` of the epoch
    draws dropout from ``fold_in(epoch_key, i)``.
    """

    def gen_loss(trainable, variables, disc_params, x, t, rng):
        if train_flag:
            others = {k: v for k, v in variables.items() if k != "params"}
            out = model.apply({**others, "params": trainable}, x, train=True, rngs={"dropout": rng},
                              mutable=list(others) or False)
            out, updates = out if others else (out, {})
        else:
            out, updates = model.apply(trainable, x), None
        loss = reconstruction_loss(t, out, mae_weight, mse_weight)
        if perceptual_fn is not None:
            loss = loss + perceptual_weight * jnp.mean(perceptual_fn(t, out))
        if discriminator is not None:
            score = discriminator.apply(disc_params, out)
            loss = loss + adversarial_weight * jnp.mean((score - 1.0) ** 2)  # LSGAN generator loss
        return loss, (out, updates)

    def disc_loss(disc_params, real, fake):
        return jnp.mean((discriminator.apply(disc_params, real) - 1.0) ** 2) + jnp.mean(
            discriminator.apply(disc_params, fake) ** 2)

    def step(s, batch, scaler, epoch_key):
        params, opt_state, dparams, dopt_state = s
        x = (batch[0] - scaler.mean) / scaler.scale
        t = batch[1]
        rng = jax.random.fold_in(epoch_key, batch[2]) if train_flag else None
        trainable = trainable_part(params, train_flag)
        (loss, (out, updates)), g = jax.value_and_grad(gen_loss, has_aux=True)(trainable, params, dparams, x, t,
                                                                              rng)
        upd, opt_state = optimizer.update(g, opt_state, trainable)
        trainable = optax.apply_updates(trainable, upd)
        params = {**params, **updates, "params": trainable} if train_flag else trainable
        if discriminator is not None:
            dg = jax.grad(disc_loss)(dparams, t, jax.lax.stop_gradient(out))
            dupd, dopt_state = disc_optimizer.update(dg, dopt_state, dparams)
            dparams = optax.apply_updates(dparams, dupd)
        return (params, opt_state, dparams, dopt_state), loss

    if step_loop == "scan":
        def steps(state, xs, ts, scaler, epoch_key, step0):
            return jax.lax.scan(lambda s, b: step(s, b, scaler, epoch_key), state,
                                (xs, ts, step0 + jnp.arange(xs.shape[0], dtype=jnp.uint32)))

        return jax.jit(steps)

    one_step = jax.jit(lambda state, x, t, scaler, epoch_key, i: step(state, (x, t, i), scaler, epoch_key))

    def host_steps(state, xs, ts, scaler, epoch_key, step0):
        losses = []
        for j in range(xs.shape[0]):  # dispatch is asynchronous: the host runs ahead of the device
            state, loss = one_step(state, xs[j], ts[j], scaler, epoch_key, np.uint32(step0 + j))
            losses.append(loss)
        return state, jnp.stack(losses)

    return host_steps


@functools.lru_cache(maxsize=16)
def default_optimizer(learning_rate: float) -> optax.GradientTransformation:
    """RMSProp (Balle et al. Table V); one object per learning rate, so :func:`make_steps` hits its cache."""
    return optax.rmsprop(learning_rate)


@functools.partial(jax.jit, static_argnums=1)
def permutation(key, n):
    return jax.random.permutation(key, n)


BLOCK_BYTES = 256 << 20  # host rows copied to the device at a time by resident_on_accelerator


def resident_on_accelerator(a, dtype, max_fraction: float = 0.5):
    """``a`` as a device array of ``dtype`` when the default device is an accelerator with room for it, else ``a``.

    On a GPU or TPU, gathering each block of minibatches on the host and copying it over costs more than the
    training steps themselves (an H100 reached 4.4 TFLOP/s streaming vs 2.5x that resident, ``benchmarks/reconn``);
    features that take at most ``max_fraction`` of the device's free memory are copied once instead (in row
    blocks, so a memory-mapped store is never converted whole on the host). On the CPU, the host *is* the device:
    the features stay where they are and are streamed (no second copy in host memory). The values are the same
    either way, so the training result does not depend on this choice.
    """
    if isinstance(a, jax.Array):
        return a
    device = jax.devices()[0]
    if device.platform == "cpu":
        return a
    stats = device.memory_stats() or {}
    free = stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0)
    nbytes = int(np.prod(a.shape)) * np.dtype(dtype).itemsize
    if nbytes > max_fraction * free:
        return a
    rows = max(1, BLOCK_BYTES // max(1, nbytes // max(1, a.shape[0])))  # host rows per copy
    # Written block by block into one preallocated (donated) array: the device holds the result and one block at a
    # time, never the blocks and their concatenation together (twice the features, all of the allowed memory).
    out = jnp.zeros(a.shape, dtype)
    for s in range(0, a.shape[0], rows):
        out = _write_rows(out, jnp.asarray(np.asarray(a[s:s + rows], dtype=dtype)), s)
    return out


@functools.partial(jax.jit, donate_argnums=0)
def _write_rows(out, block, start):
    return jax.lax.dynamic_update_slice_in_dim(out, block, start, axis=0)


def gather(a, idx, dtype):
    """Rows ``idx`` of a host (NumPy / memory-mapped) or device array, as a device array of ``dtype``.

    Host arrays are read row by row through NumPy fancy indexing, so a memory-mapped store is paged in one
    chunk at a time and never copied whole."""
    if isinstance(a, jax.Array):
        return jnp.take(a, jnp.asarray(idx), axis=0).astype(dtype)
    return jnp.asarray(np.asarray(a[idx], dtype=dtype))


@jax.jit
def batch_mse(params_and_model_out, targets):
    return jnp.mean((params_and_model_out - targets) ** 2)


def predict(model, params, scaler, features, batch_size, train_flag=False):
    """Applies the standardiser and the model (evaluation mode) in batches (``lax.map``), ``[K, ...]``."""
    f = jnp.asarray(features)
    n = f.shape[0]
    pad = (-n) % batch_size
    if pad:
        f = jnp.concatenate([f, jnp.zeros((pad, f.shape[1]), f.dtype)])
    blocks = f.reshape(-1, batch_size, f.shape[1])
    kw = {"train": False} if train_flag else {}
    out = jax.lax.map(lambda b: model.apply(params, (b - scaler.mean) / scaler.scale, **kw), blocks)
    return out.reshape((-1, *out.shape[2:]))[:n]


predict_jit = jax.jit(predict, static_argnums=(0, 4, 5))


@functools.partial(jax.jit, static_argnums=(2, 3))
def batch_objective(outputs, targets, mae_weight, mse_weight):
    """The validation objective ``mae_weight * MAE + mse_weight * MSE``."""
    return reconstruction_loss(targets, outputs, mae_weight, mse_weight)
