"""Tests for recon_jax.attacks.reconn, recon_jax.attacks.features and recon_jax.models.reconstructors."""

import dataclasses
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from recon_jax.attacks import _reconn_steps, reconn
from recon_jax.attacks import features as F
from recon_jax.models import reconstructors
from recon_jax.models.losses import reconstruction_loss

_SPEC_FIELDS = {f.name for f in dataclasses.fields(reconn.ReconstructorSpec)}


def _train(model, features, targets, key, **kw):
    """``train_reconstructor`` with ``spec = ReconstructorSpec(model=model, <its fields among kw>)``."""
    spec = reconn.ReconstructorSpec(model=model, **{k: v for k, v in kw.items() if k in _SPEC_FIELDS})
    return reconn.train_reconstructor(features, targets, spec, key,
                                      **{k: v for k, v in kw.items() if k not in _SPEC_FIELDS})


# ---------------------------------------------------------------- architectures

def test_reconstructor_mlp_shapes_and_range():
    m = reconstructors.reconstructor_mlp((28, 28, 1))
    v = m.init(jax.random.key(0), jnp.zeros((1, 50)))
    out = m.apply(v, 10 * jax.random.normal(jax.random.key(1), (3, 50)))
    assert out.shape == (3, 28, 28, 1)
    assert bool(jnp.all((out >= 0) & (out <= 1)))
    kernels = [v["params"][f"Dense_{i}"]["kernel"].shape for i in range(3)]
    assert kernels == [(50, 1000), (1000, 1000), (1000, 784)]


def test_transposed_conv_decoder_table_vii():
    m = reconstructors.transposed_conv_decoder()
    v = m.init(jax.random.key(0), jnp.zeros((1, 100)))
    assert v["params"]["Dense_0"]["kernel"].shape == (100, 4096)  # Table VII: fully connected 4096 units
    assert v["params"]["ConvTranspose_0"]["kernel"].shape == (5, 5, 64, 32)
    assert v["params"]["ConvTranspose_1"]["kernel"].shape == (5, 5, 32, 3)
    out = m.apply(v, jnp.ones((2, 100)))
    assert out.shape == (2, 32, 32, 3) and bool(jnp.all((out > 0) & (out < 1)))


def test_patchgan_table_viii():
    d = reconstructors.patchgan_discriminator()
    # Shapes only (abstract evaluation): the 512-filter layers are too costly to run in a unit test.
    v = jax.eval_shape(d.init, jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
    shapes = [v["params"][f"Conv_{i}"]["kernel"].shape for i in range(5)]
    assert shapes == [(4, 4, 3, 64), (4, 4, 64, 128), (4, 4, 128, 256), (4, 4, 256, 512), (4, 4, 512, 1)]
    assert jax.eval_shape(d.apply, v, jnp.zeros((2, 32, 32, 3))).shape == (2, 4, 4, 1)


def test_architecture_validation():
    with pytest.raises(ValueError, match="output_shape"):
        reconstructors.reconstructor_mlp(())
    with pytest.raises(ValueError, match="image_size"):
        reconstructors.transposed_conv_decoder(30)


# ---------------------------------------------------------------- features and standardisation

def test_standardizer_matches_numpy_and_uses_training_rows_only():
    rng = np.random.default_rng(0)
    train = rng.normal(3.0, 2.0, size=(5000, 7)).astype(np.float32)
    train[:, 4] = 1.5  # a constant coordinate: scale 1
    test = rng.normal(-50.0, 9.0, size=(40, 7)).astype(np.float32)
    s = F.fit_standardizer(train)
    # Host float64 accumulation over 1024-row blocks vs one-shot NumPy float64: agree to float32 rounding.
    np.testing.assert_allclose(s.mean, train.astype(np.float64).mean(0), rtol=1e-6)
    ref_std = train.astype(np.float64).std(0)
    ref_std[4] = 1.0
    np.testing.assert_allclose(s.scale, ref_std, rtol=1e-5)
    z = F.standardize(s, test)
    np.testing.assert_allclose(z, (test - s.mean) / s.scale, rtol=1e-6)
    # The held-out rows are far from standardised: they did not enter the statistics.
    assert float(jnp.abs(z.mean())) > 5


def test_train_reconstructor_standardises_with_training_shadows_only():
    rng = np.random.default_rng(1)
    f = rng.normal(size=(64, 6)).astype(np.float32)
    t = (1 / (1 + np.exp(-f[:, :3]))).astype(np.float32)
    ef = (f[:16] * 100 + 1000).astype(np.float32)  # wildly different held-out shadows
    fit = _train(reconstructors.reconstructor_mlp((3,), (8,)), f, t, jax.random.key(0),
                 epochs=2, batch_size=16, eval_set=(ef, t[:16]), progress=False)
    ref = F.fit_standardizer(f)
    np.testing.assert_array_equal(fit.standardizer.mean, ref.mean)
    np.testing.assert_array_equal(fit.standardizer.scale, ref.scale)
    assert fit.eval_mse.shape == (2,)


def test_whitebox_layer_subset_and_blackbox_features():
    from recon_jax.models import balle_mnist_mlp, ravel

    params = balle_mnist_mlp().init(jax.random.key(0), jnp.zeros((1, 784)))["params"]
    flat, layout = ravel(params)
    feats = F.whitebox_features(np.stack([np.asarray(flat)] * 3), layout, "Dense_1")
    assert feats.shape == (3, 110)
    expected = np.concatenate([np.asarray(params["Dense_1"]["bias"]), np.asarray(params["Dense_1"]["kernel"]).ravel()])
    np.testing.assert_array_equal(feats[0], expected)
    assert F.whitebox_features(flat[None]).shape == (1, 7960)
    with pytest.raises(ValueError, match="layout"):
        F.whitebox_features(flat[None], None, "Dense_1")
    logits = np.arange(2 * 5 * 10, dtype=np.float32).reshape(2, 5, 10)
    bb = F.blackbox_features(logits)
    assert bb.shape == (2, 50) and bb[1, 0] == logits[1, 0, 0] and bb[1, 49] == logits[1, 4, 9]


# ---------------------------------------------------------------- training

def _toy_task(n=256, d=10, out=6, seed=0):
    rng = np.random.default_rng(seed)
    f = rng.normal(size=(n, d)).astype(np.float32)
    w = rng.normal(size=(d, out)).astype(np.float32)
    return f, (1 / (1 + np.exp(-f @ w))).astype(np.float32)


def test_training_learns_and_is_seeded():
    f, t = _toy_task()
    model = reconstructors.reconstructor_mlp((6,), (64,))
    kw = dict(epochs=30, batch_size=32, eval_set=(f[200:], t[200:]), progress=False)
    fit = _train(model, f[:200], t[:200], jax.random.key(0), **kw)
    baseline = float(np.mean((t[200:] - t[:200].mean(0)) ** 2))  # predicting the mean shadow target
    assert fit.eval_mse[-1] < 0.3 * baseline
    assert fit.losses[-1] < fit.losses[0]
    again = _train(model, f[:200], t[:200], jax.random.key(0), **kw)
    np.testing.assert_array_equal(fit.losses, again.losses)  # same key: identical run
    other = _train(model, f[:200], t[:200], jax.random.key(1), **kw)
    assert not np.array_equal(fit.losses, other.losses)
    rec = reconn.reconstruct(fit, f[200:], batch_size=7)
    np.testing.assert_allclose(rec, model.apply(fit.params, F.standardize(fit.standardizer, f[200:])),
                               rtol=1e-5, atol=1e-6)


def test_loss_is_mae_plus_mse():
    t = jnp.array([[0.0, 1.0, 0.5]])
    o = jnp.array([[0.2, 0.5, 0.5]])
    ref = np.mean(np.abs(o - t)) + np.mean((o - t) ** 2)
    np.testing.assert_allclose(reconstruction_loss(t, o), ref, rtol=1e-6)
    np.testing.assert_allclose(reconstruction_loss(t, o, 2.0, 0.0), 2 * np.mean(np.abs(o - t)), rtol=1e-6)


def test_fine_tuning_starts_from_trained_params():
    f, t = _toy_task()
    fit = _train(reconstructors.reconstructor_mlp((6,), (16,)), f, t, jax.random.key(0),
                 epochs=3, batch_size=32, progress=False)
    # A zero-learning-rate fine-tune must return the trained parameters unchanged (it does not re-initialise).
    spec = reconn.ReconstructorSpec(epochs=1, batch_size=32, optimizer=optax.sgd(0.0))
    ft = reconn.fine_tune_reconstructor(fit, f + 1.0, t, spec, jax.random.key(5), progress=False)
    jax.tree_util.tree_map(np.testing.assert_array_equal, ft.params, fit.params)
    np.testing.assert_allclose(ft.standardizer.mean, fit.standardizer.mean + 1.0, rtol=1e-5)  # re-fitted
    kept = reconn.fine_tune_reconstructor(fit, f + 1.0, t, reconn.ReconstructorSpec(epochs=1, batch_size=32),
                                          jax.random.key(5), refit_standardizer=False, progress=False)
    np.testing.assert_array_equal(kept.standardizer.mean, fit.standardizer.mean)


@pytest.mark.slow  # ~18 s of compilation
def test_patchgan_adversarial_training_runs():
    rng = np.random.default_rng(3)
    f = rng.normal(size=(32, 12)).astype(np.float32)
    t = rng.uniform(size=(32, 8, 8, 3)).astype(np.float32)
    disc = reconstructors.PatchGANDiscriminator(features=(4, 1), strides=(2, 1))
    fit = _train(reconstructors.reconstructor_mlp((8, 8, 3), (16,)), f, t, jax.random.key(0),
                 epochs=2, batch_size=8, discriminator=disc, adversarial_weight=0.1,
                 discriminator_learning_rate=1e-2, progress=False)
    init = disc.init(jax.random.fold_in(jax.random.key(0), 1), jnp.asarray(t[:1]))
    changed = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda a, b: bool(jnp.any(a != b)), fit.disc_params,
                                                               init))
    assert all(changed) and np.all(np.isfinite(fit.losses))
    with pytest.raises(ValueError, match="image targets"):
        _train(reconstructors.reconstructor_mlp((6,), (8,)), *_toy_task(32), jax.random.key(0),
               epochs=1, discriminator=disc, progress=False)


def test_validation():
    f, t = _toy_task(16)
    m = reconstructors.reconstructor_mlp((6,), (8,))
    with pytest.raises(ValueError, match="epochs"):
        _train(m, f, t, jax.random.key(0), epochs=0)
    with pytest.raises(ValueError, match="same length"):
        _train(m, f, t[:3], jax.random.key(0))
    with pytest.raises(ValueError, match="features"):
        F.fit_standardizer(np.zeros(5))
    with pytest.raises(TypeError, match="ReconstructorSpec"):
        reconn.train_reconstructor(f, t, m, jax.random.key(0))  # the network goes in the spec


def test_the_spec_builds_the_network_it_names():
    """Without ``spec.model`` the network is ``reconstructor_network(target shape, kind, hidden)``."""
    f, t = _toy_task(64)
    spec = reconn.ReconstructorSpec(hidden=(8,), epochs=2, batch_size=16)
    by_kind = reconn.train_reconstructor(f, t, spec, jax.random.key(0), progress=False)
    explicit = reconn.train_reconstructor(
        f, t, dataclasses.replace(spec, model=reconn.reconstructor_network((6,), "mlp", (8,))), jax.random.key(0),
        progress=False)
    _same_fit(by_kind, explicit)


# ---------------------------------------------------------------- streaming, checkpoints, early stopping

def _fit(f, t, **kw):
    base = dict(epochs=4, batch_size=16, progress=False, eval_set=(f[160:], t[160:]))
    base.update(kw)
    return _train(reconstructors.reconstructor_mlp((6,), (16,)), f[:160], t[:160],
                  jax.random.key(3), **base)


def _same_fit(a, b):
    np.testing.assert_array_equal(a.losses, b.losses)
    np.testing.assert_array_equal(a.eval_mse, b.eval_mse)
    jax.tree_util.tree_map(np.testing.assert_array_equal, a.params, b.params)


def test_streaming_from_a_memory_map_equals_one_block(tmp_path):
    f, t = _toy_task(200)
    path = str(tmp_path / "features.npy")
    np.save(path, f[:160])
    mm = np.load(path, mmap_mode="r")
    whole = _fit(f, t, stream_rows=160)
    streamed = _train(reconstructors.reconstructor_mlp((6,), (16,)), mm, t[:160],
                      jax.random.key(3), epochs=4, batch_size=16, progress=False,
                      eval_set=(f[160:], t[160:]), stream_rows=48)  # 3 batches a block
    _same_fit(whole, streamed)


class _FakeAccelerator:
    """A stand-in for a GPU in jax.devices(): the placement rule reads only ``platform`` and ``memory_stats``."""

    platform = "gpu"

    def __init__(self, free_bytes):
        self.free = free_bytes

    def memory_stats(self):
        return {"bytes_limit": self.free + 100, "bytes_in_use": 100}


def test_features_resident_on_an_accelerator_with_room(monkeypatch):
    from recon_jax.attacks import _reconn_steps

    f = np.arange(12, dtype=np.float64).reshape(4, 3)
    monkeypatch.setattr(_reconn_steps.jax, "devices", lambda: [_FakeAccelerator(10**9)])
    got = _reconn_steps.resident_on_accelerator(f, np.float32)
    assert isinstance(got, jax.Array) and got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), f.astype(np.float32))
    # Copied in blocks of 24 bytes (two rows, the last block one row): the same array.
    f5 = np.arange(15, dtype=np.float64).reshape(5, 3)
    monkeypatch.setattr(_reconn_steps, "BLOCK_BYTES", 24)
    np.testing.assert_array_equal(np.asarray(_reconn_steps.resident_on_accelerator(f5, np.float32)),
                                  f5.astype(np.float32))
    # 4 x 3 float32 = 48 bytes: more than half of 90 bytes free stays on the host (streamed).
    monkeypatch.setattr(_reconn_steps.jax, "devices", lambda: [_FakeAccelerator(90)])
    assert _reconn_steps.resident_on_accelerator(f, np.float32) is f


def test_training_with_resident_features_equals_streaming(monkeypatch, tmp_path):
    f, t = _toy_task(200)
    path = str(tmp_path / "features.npy")
    np.save(path, f[:160])
    streamed = _fit(f, t, stream_rows=48)
    from recon_jax.attacks import _reconn_steps

    real = jax.devices()
    monkeypatch.setattr(_reconn_steps.jax, "devices", lambda *a: [_FakeAccelerator(10**9)] if not a else real)
    placed = []
    monkeypatch.setattr(reconn, "resident_on_accelerator",
                        lambda a, dtype: placed.append(_reconn_steps.resident_on_accelerator(a, dtype)) or placed[-1])
    resident = _train(reconstructors.reconstructor_mlp((6,), (16,)),
                      np.load(path, mmap_mode="r"), t[:160], jax.random.key(3), epochs=4,
                      batch_size=16, progress=False, eval_set=(f[160:], t[160:]))
    assert len(placed) == 2 and all(isinstance(a, jax.Array) for a in placed)  # features and targets moved
    _same_fit(streamed, resident)


def test_checkpoints_are_written_at_most_every_interval(monkeypatch, tmp_path):
    """Between saves at most CHECKPOINT_SECONDS pass; the last epoch of a call is always saved."""
    saves = []
    from recon_jax.attacks import _reconn_checkpoint

    real_save = _reconn_checkpoint.EpochCheckpoint.save
    monkeypatch.setattr(_reconn_checkpoint.EpochCheckpoint, "save",
                        lambda self, state, best, losses, *a: saves.append(len(losses)) or
                        real_save(self, state, best, losses, *a))
    f, t = _toy_task(200)
    monkeypatch.setattr(reconn, "CHECKPOINT_SECONDS", 1e9)
    _fit(f, t, epochs=4, checkpoint_dir=str(tmp_path / "a"))
    assert saves == [4]
    saves.clear()
    monkeypatch.setattr(reconn, "CHECKPOINT_SECONDS", 0.0)
    _fit(f, t, epochs=4, checkpoint_dir=str(tmp_path / "b"))
    assert saves == [1, 2, 3, 4]


def test_resume_after_stop_equals_uninterrupted_run(tmp_path):
    f, t = _toy_task(200)
    full = _fit(f, t, epochs=5)
    first = _fit(f, t, epochs=2, checkpoint_dir=str(tmp_path))  # "stopped" after epoch 2
    assert first.epochs_run == 2 and first.resumed_from == 0
    resumed = _fit(f, t, epochs=5, checkpoint_dir=str(tmp_path))
    assert resumed.resumed_from == 2 and resumed.epochs_run == 5
    _same_fit(full, resumed)
    # A different configuration (batch size) never picks up that checkpoint.
    other = _fit(f, t, epochs=1, batch_size=32, checkpoint_dir=str(tmp_path))
    assert other.resumed_from == 0 and len(list(tmp_path.iterdir())) == 2


def _same_repr_reconstructor(activation):
    """A user's reconstructor class whose __call__ changes while its name and fields (its repr) stay the same."""

    class MyRec(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(6)(activation(nn.Dense(16)(x)))

    return MyRec()


def test_a_reconstructor_edited_under_the_same_repr_does_not_resume_the_old_checkpoint(tmp_path):
    """The checkpoint was keyed by repr(model): a relu -> sin edit of __call__ resumed the relu run's losses and
    weights through the sin network."""
    f, t = _toy_task(200)
    relu, sin = _same_repr_reconstructor(jax.nn.relu), _same_repr_reconstructor(jnp.sin)
    assert repr(relu) == repr(sin)
    kw = dict(epochs=2, batch_size=16, progress=False, checkpoint_dir=str(tmp_path))
    first = _train(relu, f[:160], t[:160], jax.random.key(3), **kw)
    edited = _train(sin, f[:160], t[:160], jax.random.key(3), **kw)
    assert edited.resumed_from == 0 and len(list(tmp_path.iterdir())) == 2
    fresh = _train(sin, f[:160], t[:160], jax.random.key(3), epochs=2, batch_size=16, progress=False)
    _same_fit(fresh, edited)
    assert not np.array_equal(first.losses, edited.losses)
    assert _train(relu, f[:160], t[:160], jax.random.key(3), **kw).resumed_from == 2  # unchanged: resumes


def _checkpoint_code(path):
    with np.load(path) as z:
        return json.loads(z["__code__"].tobytes().decode()), {k: z[k] for k in z.files}


def test_a_checkpoint_saved_by_other_code_is_refused_naming_what_differs(tmp_path, monkeypatch):
    from recon_jax import io as recon_io
    from recon_jax.attacks import _reconn_checkpoint

    f, t = _toy_task(200)
    _fit(f, t, epochs=2, checkpoint_dir=str(tmp_path))
    (path,) = tmp_path.iterdir()
    here = recon_io.library_code()
    assert _checkpoint_code(path)[0] == here  # recon_jax but evidence/ and report/, Python, numeric versions
    assert _fit(f, t, epochs=3, checkpoint_dir=str(tmp_path)).resumed_from == 2  # the same code resumes
    upgraded = dict(here, fingerprint="0" * 16, versions=dict(here["versions"], flax="0.0.1"))
    monkeypatch.setattr(_reconn_checkpoint, "library_code", lambda: upgraded)
    with pytest.raises(reconn.CheckpointMismatchError,
                       match=rf"checkpoint .*reconstructor-.*\.npz was saved by other code than the code running now: "
                             rf"flax {here['versions']['flax']} then, 0\.0\.1 now\. .*delete the file to train from "
                             r"the start, or use another checkpoint_dir"):
        _fit(f, t, epochs=4, checkpoint_dir=str(tmp_path))
    # Asked to (--allow_resume_across_code): it resumes, and the file then names both codes.
    monkeypatch.setattr(recon_io, "_ACROSS_CODE", [True])
    assert _fit(f, t, epochs=4, checkpoint_dir=str(tmp_path)).resumed_from == 3
    code, _ = _checkpoint_code(path)
    assert code["fingerprint"] == "0" * 16 and code["resumed_from_code"] == [here]


def test_a_checkpoint_from_before_the_code_record_is_refused(tmp_path):
    f, t = _toy_task(200)
    _fit(f, t, epochs=2, checkpoint_dir=str(tmp_path))
    (path,) = tmp_path.iterdir()
    _, arrays = _checkpoint_code(path)
    del arrays["__code__"]  # what the previous recon_jax saved
    np.savez(path, **arrays)
    with pytest.raises(reconn.CheckpointMismatchError,
                       match=r"saved by other code than the code running now: it records no code fingerprint "
                             r"\(written by a recon_jax from before stores recorded their code\)"):
        _fit(f, t, epochs=3, checkpoint_dir=str(tmp_path))
    assert issubclass(reconn.CheckpointMismatchError, ValueError)  # what the shape check raised before


def test_checkpoint_past_this_calls_stop_is_not_used(tmp_path):
    """A checkpoint that ran further than a later call would (fewer epochs, or a patience that stops sooner) cannot
    be rolled back: the call equals a fresh run of its own settings, never the longer run's state."""
    f, t = _toy_task(200)
    t_noise = np.random.default_rng(1).uniform(size=t.shape).astype(np.float32)
    long = _fit(f, t, epochs=4, checkpoint_dir=str(tmp_path / "a"))
    assert long.epochs_run == 4
    short = _fit(f, t, epochs=2, checkpoint_dir=str(tmp_path / "a"))
    assert short.epochs_run == 2 and short.resumed_from == 0
    _same_fit(_fit(f, t, epochs=2), short)
    assert _fit(f, t, epochs=2, checkpoint_dir=str(tmp_path / "a")).resumed_from == 2  # its saves replaced the file
    # Patience: 12 epochs without early stopping, then patience 1, which stops at the first epoch without improvement.
    opt = optax.adam(3e-2)
    ran = _fit(f, t_noise, epochs=12, optimizer=opt, checkpoint_dir=str(tmp_path / "b"), checkpoint_key={"o": 1})
    stops = _fit(f, t_noise, epochs=12, patience=1, optimizer=opt)
    assert stops.stopped_early and stops.epochs_run < ran.epochs_run
    again = _fit(f, t_noise, epochs=12, patience=1, optimizer=opt, checkpoint_dir=str(tmp_path / "b"),
                 checkpoint_key={"o": 1})
    assert again.resumed_from == 0 and again.epochs_run == stops.epochs_run
    _same_fit(stops, again)


def test_checkpoint_of_another_min_delta_is_not_resumed(tmp_path):
    """min_delta picks the saved best epoch, so it is part of the checkpoint's name: a call with another one trains
    afresh and returns its own best epoch's parameters."""
    f, t = _toy_task(200)
    first = _fit(f, t, epochs=5, patience=100, checkpoint_dir=str(tmp_path))
    fresh = _fit(f, t, epochs=5, patience=100, min_delta=1e9)  # nothing improves by 1e9: the best epoch is the first
    again = _fit(f, t, epochs=5, patience=100, min_delta=1e9, checkpoint_dir=str(tmp_path))
    assert first.best_epoch > 1 and fresh.best_epoch == 1
    assert again.resumed_from == 0 and again.best_epoch == 1
    _same_fit(fresh, again)


def test_early_stopping_returns_best_epoch():
    f, t = _toy_task(200)
    # Noise targets: the held-out MSE cannot keep improving, so patience 2 stops the run early.
    t_noise = np.random.default_rng(1).uniform(size=t.shape).astype(np.float32)
    fit = _fit(f, t_noise, epochs=60, patience=2, optimizer=optax.adam(3e-2))
    assert fit.stopped_early and fit.epochs_run < 60
    assert fit.epochs_run == fit.best_epoch + 2
    assert fit.eval_mse[fit.best_epoch - 1] == fit.eval_mse.min()
    # The returned parameters are the best epoch's: a rerun stopped at that epoch has the same ones.
    at_best = _fit(f, t_noise, epochs=fit.best_epoch, optimizer=optax.adam(3e-2))
    jax.tree_util.tree_map(np.testing.assert_array_equal, fit.params, at_best.params)
    with pytest.raises(ValueError, match="eval_set"):
        _train(reconstructors.reconstructor_mlp((6,), (8,)), f, t, jax.random.key(0),
               patience=3, progress=False)


def test_a_checkpoint_is_keyed_by_the_optimizer_it_was_trained_with(tmp_path):
    """spec.optimizer with a checkpoint directory needed a checkpoint_key that the informed pipeline could not pass
    (an error after every shadow model had trained); it is keyed by the optimizer's identity now."""
    f, t = _toy_task(200)
    first = _fit(f, t, epochs=2, optimizer=optax.adam(1e-2), checkpoint_dir=str(tmp_path))
    again = _fit(f, t, epochs=3, optimizer=optax.adam(1e-2), checkpoint_dir=str(tmp_path))
    assert first.resumed_from == 0 and again.resumed_from == 2
    other = _fit(f, t, epochs=2, optimizer=optax.adam(2e-2), checkpoint_dir=str(tmp_path))
    assert other.resumed_from == 0 and len(list(tmp_path.iterdir())) == 2


# ---------------------------------------------------------------- options of the DR attack (Lumbut & Ponnoprat)

def test_fit_minmax_and_the_scaling_option():
    rng = np.random.default_rng(4)
    f = rng.normal(size=(3000, 5)).astype(np.float32)
    f[:, 2] = 7.0  # constant: span 1
    s = F.fit_minmax(f)
    np.testing.assert_array_equal(s.mean, f.min(0))  # min and max are exact in any block order
    np.testing.assert_array_equal(s.scale, np.where(np.ptp(f, 0) > 0, np.ptp(f, 0), 1))
    z = np.asarray(F.standardize(s, f))
    # (f - min) / span: 0 exactly, and span / span = 1 exactly in IEEE division. XLA on a GPU divides float32 with
    # PTX div.full (up to 1 ulp: span / span = 0.99999994 for about 16% of values, openxla/xla#37181), so 1 ulp there.
    one_ulp = 0.0 if jax.default_backend() == "cpu" else 2.0**-23
    assert z.min() == 0.0 and abs(z.max() - 1.0) <= one_ulp
    t = f[:, :2]
    fit = _train(reconstructors.reconstructor_mlp((2,), (8,)), f[:64], t[:64], jax.random.key(0),
                 epochs=1, batch_size=16, scaling="minmax", progress=False)
    np.testing.assert_array_equal(fit.standardizer.mean, f[:64].min(0))
    with pytest.raises(ValueError, match="scaling"):
        _train(reconstructors.reconstructor_mlp((2,), (8,)), f, t, jax.random.key(0),
               scaling="robust", progress=False)


def test_early_stopping_rule():
    assert reconn.early_stopping([], patience=2) == (0, False)
    assert reconn.early_stopping([1.0, 0.95, 0.94], patience=2, min_delta=0.1) == (1, True)  # too small to count
    assert reconn.early_stopping([float("nan"), 2.0, float("nan"), 3.0], patience=2) == (2, True)
    assert reconn.early_stopping([3.0, 2.0, 1.0], patience=None) == (3, False)


def test_monitor_loss_keeps_the_best_objective_and_the_final_params():
    f, t = _toy_task(200)
    t_noise = np.random.default_rng(1).uniform(size=t.shape).astype(np.float32)
    kw = dict(optimizer=optax.adam(3e-2), mae_weight=0.5, monitor="loss")
    fit = _fit(f, t_noise, epochs=60, patience=2, **kw)
    assert fit.stopped_early and fit.best_epoch == int(np.argmin(fit.eval_loss)) + 1
    out = reconn.reconstruct(fit, f[160:])
    np.testing.assert_allclose(reconstruction_loss(t_noise[160:], out, 0.5, 1.0), fit.eval_loss.min(),
                               rtol=1e-5)  # float32 recomputation of the same quantity
    np.testing.assert_allclose(np.mean((np.asarray(out) - t_noise[160:]) ** 2), fit.eval_mse[fit.best_epoch - 1],
                               rtol=1e-5)
    # final_params are the last epoch's: a run of that many epochs without early stopping ends with them.
    last = _fit(f, t_noise, epochs=fit.epochs_run, **kw)
    jax.tree_util.tree_map(np.testing.assert_array_equal, fit.final_params, last.params)
    with pytest.raises(ValueError, match="monitor"):
        _fit(f, t, monitor="mae")


def _bn_dropout_model():
    import flax.linen as nn

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            h = nn.Dense(16)(x)
            h = nn.BatchNorm(use_running_average=not train, momentum=0.9)(h)
            h = nn.Dropout(0.3, deterministic=not train)(nn.relu(h))
            return nn.sigmoid(nn.Dense(6)(h))

    return Net()


def test_train_flag_trains_batchnorm_and_dropout_models():
    f, t = _toy_task(200)
    model = _bn_dropout_model()
    kw = dict(epochs=3, batch_size=16, progress=False, eval_set=(f[160:], t[160:]), train_flag=True)
    fit = _train(model, f[:160], t[:160], jax.random.key(3), **kw)
    init = model.init(jax.random.fold_in(jax.random.key(3), 0), jnp.zeros((1, 10)), train=False)
    assert set(fit.params) == {"params", "batch_stats"}
    assert not np.allclose(fit.params["batch_stats"]["BatchNorm_0"]["mean"], init["batch_stats"]["BatchNorm_0"]["mean"])
    # Evaluation mode (running statistics, no dropout): deterministic, and what the recorded eval MSE measured.
    out = reconn.reconstruct(fit, f[160:])
    np.testing.assert_array_equal(out, reconn.reconstruct(fit, f[160:]))
    np.testing.assert_allclose(np.mean((np.asarray(out) - t[160:]) ** 2), fit.eval_mse[-1], rtol=1e-5)
    # Dropout keys come from the step index: the result does not depend on the streaming block size, and the host
    # loop of jitted steps agrees with the scan up to float rounding.
    streamed = _train(model, f[:160], t[:160], jax.random.key(3), stream_rows=48, **kw)
    np.testing.assert_array_equal(streamed.losses, fit.losses)
    host = _train(model, f[:160], t[:160], jax.random.key(3), step_loop="host", **kw)
    np.testing.assert_allclose(host.losses, fit.losses, rtol=1e-4)
    np.testing.assert_allclose(host.eval_mse, fit.eval_mse, rtol=1e-4)
    with pytest.raises(ValueError, match="step_loop"):
        _train(model, f, t, jax.random.key(3), step_loop="python", progress=False)


def test_train_flag_resumes_from_a_checkpoint(tmp_path):
    f, t = _toy_task(200)
    model = _bn_dropout_model()
    kw = dict(batch_size=16, progress=False, eval_set=(f[160:], t[160:]), train_flag=True, monitor="loss")
    full = _train(model, f[:160], t[:160], jax.random.key(3), epochs=4, **kw)
    _train(model, f[:160], t[:160], jax.random.key(3), epochs=2, checkpoint_dir=str(tmp_path),
           **kw)
    resumed = _train(model, f[:160], t[:160], jax.random.key(3), epochs=4,
                     checkpoint_dir=str(tmp_path), **kw)
    assert resumed.resumed_from == 2
    _same_fit(full, resumed)
    np.testing.assert_array_equal(full.eval_loss, resumed.eval_loss)


def test_repeated_fits_with_one_optimizer_compile_once():
    f, t = _toy_task(64)
    model = reconstructors.reconstructor_mlp((6,), (8,))
    opt = optax.adam(1e-2)
    _train(model, f, t, jax.random.key(0), epochs=1, batch_size=16, optimizer=opt, progress=False)
    before = _reconn_steps.make_steps.cache_info()
    _train(model, f, t, jax.random.key(1), epochs=1, batch_size=16, optimizer=opt, progress=False)
    after = _reconn_steps.make_steps.cache_info()
    assert after.hits == before.hits + 1 and after.misses == before.misses
