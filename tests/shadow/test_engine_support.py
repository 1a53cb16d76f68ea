"""Unsupported combinations of model, algorithm and devices stop in seconds with a ValueError that says what to change
(issue 33, item 2): the engine traces and compiles before training, and ``shadow.preflight`` runs a tiny job."""

import os
import time

import flax.linen as nn
import jax
import numpy as np
import pytest

from recon_jax import models, shadow, training
from recon_jax.shadow import engine

# Generous bound for "in seconds" on a loaded 2-core machine; the configurations below would train for much longer
# (10**6 epochs) if the engine started.
SECONDS = 60


class HostPreprocessed(nn.Module):
    """A model whose forward pass calls the host (``jax.pure_callback`` without a ``vmap_method``): it runs and
    traces on its own (the risk report's shape check passes it), but cannot be vmapped, and the engine vmaps training
    over models."""

    num_classes: int = 3

    @nn.compact
    def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        x = jax.pure_callback(lambda a: np.asarray(a), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return nn.Dense(self.num_classes)(x)


def _devices_phrase(devices) -> str:
    """How an error names the devices it ran on: "2 cpu devices" with this suite's host devices, "1 gpu device" on
    one GPU."""
    n = len(devices)
    return f"{n} {devices[0].platform} device{'s' if n > 1 else ''}"


def _data(n=64, shape=(4, 4, 1)):
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(n + 4,) + shape).astype(np.float32)
    y = (np.arange(n + 4) % 3).astype(np.int32)
    return (x[:n], y[:n]), (x[n:], y[n:])


def test_unvmappable_model_fails_in_seconds_before_any_chunk(tmp_path):
    fns = models.from_flax(HostPreprocessed(), name="host_preprocessed")
    fixed, targets = _data()
    p0 = training.initial_params(fns, jax.random.key(0), fixed[0])
    assert fns.apply(p0, fixed[0]).shape == (64, 3)  # the model itself runs
    store = str(tmp_path / "store")
    for alg, name in ((training.full_batch_gd(epochs=10**6), "full-batch GD"),
                      (training.dp_gd(1.0, noise_multiplier=1.0, epochs=10**6), "DP-GD")):
        start = time.perf_counter()
        with pytest.raises(ValueError) as info:
            shadow.generate_shadow_models(fns, alg, fixed, targets, jax.random.key(1), init_params=p0,
                                          chunk_size=2, store=store, progress=False)
        assert time.perf_counter() - start < SECONDS
        err = info.value
        assert isinstance(err, shadow.UnsupportedConfiguration)
        assert isinstance(err.__cause__, NotImplementedError)  # chained, not replaced
        msg = str(err)
        assert "model 'host_preprocessed'" in msg and name in msg and _devices_phrase(jax.devices()) in msg
        assert "What to change:" in msg and "vmappable" in msg
        chunks = os.path.join(store, "chunks")
        assert not os.path.isdir(chunks) or not os.listdir(chunks)  # stopped before training any model


def test_ghost_clipping_on_a_conv_model_says_what_to_change():
    fns = models.from_flax(models.ConvNet(conv_features=(2,), kernel_sizes=(3,), strides=(1,), dense_features=(3,),
                                          conv_impl="lax"), name="cnn")
    fixed, targets = _data(n=8, shape=(5, 5, 1))
    p0 = training.initial_params(fns, jax.random.key(0), fixed[0])
    alg = training.dp_sgd(4, 1.0, noise_multiplier=1.0, epochs=10**6, per_example="ghost")
    start = time.perf_counter()
    with pytest.raises(ValueError) as info:
        shadow.generate_shadow_models(fns, alg, fixed, targets, jax.random.key(1), init_params=p0, chunk_size=2,
                                      progress=False)
    assert time.perf_counter() - start < SECONDS
    msg = str(info.value)
    assert msg.startswith("model 'cnn' cannot be trained with DP-SGD (batch_size=4, sampling='shuffle'")
    assert "per_example='ghost'" in msg
    assert "use per_example='auto' (ghost clipping where the model allows it) or 'vmap'" in msg
    assert 'conv_impl="patches"' in msg  # the model uses XLA's convolution: the hint names the alternative
    assert isinstance(info.value.__cause__, ValueError)


def test_preflight_runs_a_tiny_job_once_per_configuration(monkeypatch):
    fns = models.from_flax(models.MLP(features=(5, 3)), name="preflight_mlp")
    fixed, _ = _data(n=10)
    p0 = training.initial_params(fns, jax.random.key(0), fixed[0])
    calls = []
    real = engine.generate_shadow_models

    def spy(model_fns, algorithm, fixed_set, targets, key, **kw):
        calls.append((algorithm, fixed_set[0].shape, targets[0].shape, kw["chunk_size"]))
        return real(model_fns, algorithm, fixed_set, targets, key, **kw)

    monkeypatch.setattr(engine, "generate_shadow_models", spy)
    noisy = training.dp_sgd(4, 1.0, noise_multiplier=3.0, epochs=50)
    shadow.preflight(fns, noisy, fixed, init_params=p0)
    assert len(calls) == 1
    tiny, fixed_shape, target_shape, chunk = calls[0]
    assert tiny.epochs == 1 and tiny.batch_size == 4  # one epoch of the requested algorithm
    n_dev = len(jax.devices())  # one model per device
    assert fixed_shape == (4, 4, 4, 1) and target_shape == (n_dev, 4, 4, 1) and chunk == n_dev
    # Another noise multiplier or epoch count compiles the same program: no second job.
    shadow.preflight(fns, training.dp_sgd(4, 1.0, noise_multiplier=0.5, epochs=3), fixed, init_params=p0)
    assert len(calls) == 1
    shadow.preflight(fns, training.dp_sgd(4, 1.0, noise_multiplier=3.0, epochs=50, sampling="poisson"), fixed,
                     init_params=p0)
    assert len(calls) == 2


def test_preflight_reports_an_unsupported_model():
    fns = models.from_flax(HostPreprocessed(), name="host_preprocessed_preflight")
    fixed, _ = _data(n=10)
    p0 = training.initial_params(fns, jax.random.key(0), fixed[0])
    start = time.perf_counter()
    with pytest.raises(shadow.UnsupportedConfiguration, match="cannot be trained with DP-GD") as info:
        shadow.preflight(fns, training.dp_gd(1.0, noise_multiplier=1.0, epochs=10**6), fixed, init_params=p0,
                         mesh=shadow.default_mesh(jax.devices()[:1]))
    assert time.perf_counter() - start < SECONDS
    assert f"on {_devices_phrase(jax.devices()[:1])}:" in str(info.value)
    assert isinstance(info.value.__cause__, NotImplementedError)


def test_other_errors_pass_unchanged():
    """Only the failures of an unsupported combination are converted; anything else (here a KeyboardInterrupt from
    inside the model) propagates as it is."""

    class Interrupting(nn.Module):
        @nn.compact
        def __call__(self, x):
            raise KeyboardInterrupt("stop")

    fns = models.from_flax(models.MLP(features=(3,)))
    broken = models.ModelFns(init=fns.init, apply=lambda p, x: Interrupting().apply({}, x), name="interrupting")
    fixed, targets = _data(n=4)
    p0 = training.initial_params(fns, jax.random.key(0), fixed[0])
    with pytest.raises(KeyboardInterrupt, match="stop"):
        shadow.generate_shadow_models(broken, training.full_batch_gd(epochs=1), fixed, targets, jax.random.key(1),
                                      init_params=p0, chunk_size=2, progress=False)
