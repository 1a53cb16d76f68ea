"""recon_jax.attacks.informed: the pipeline's pieces against direct NumPy computations."""

import dataclasses
import re

import jax
import numpy as np
import pytest

from recon_jax import attacks, data, models, training
from recon_jax.attacks import informed, reconn


def test_evaluate_reconstructions_matches_numpy_and_the_papers_criterion():
    rng = np.random.default_rng(0)
    t = rng.uniform(size=(5, 12, 12, 1)).astype(np.float32)
    r = np.clip(t + rng.normal(scale=[[[[s]]] for s in (0.01, 0.05, 0.1, 0.2, 0.3)], size=t.shape), 0, 1)
    r = r.astype(np.float32)
    orc = np.full(5, 0.004, np.float32)
    res = informed.evaluate_reconstructions("x", t, r, orc)
    mse = ((t.astype(np.float64) - r) ** 2).reshape(5, -1).mean(1)
    np.testing.assert_allclose(res.mse, mse, rtol=1e-5)  # float32 metric vs float64 NumPy
    np.testing.assert_array_equal(res.success, mse < 0.004)  # Sec. V-B d: below the target's own oracle MSE
    assert res.row_success == (mse.mean() < 0.004) and res.ssim.shape == (5,)
    row = res.summary()
    assert row["success_rate"] == pytest.approx(np.mean(mse < 0.004)) and row["num_targets"] == 5
    with pytest.raises(ValueError, match="oracle_mse"):
        informed.evaluate_reconstructions("x", t, r, orc[:3])


def test_validation_shadows_are_the_last_ones_and_held_out():
    rng = np.random.default_rng(1)
    f = rng.normal(size=(60, 6)).astype(np.float32)
    t = (1 / (1 + np.exp(-f[:, :4]))).astype(np.float32)
    spec = reconn.ReconstructorSpec(hidden=(8,), epochs=2, batch_size=10, validation_size=12)
    fit = informed.fit_reconstructor(f, t, jax.random.key(0), spec, progress=False)
    # Standardised with the 48 training rows only, and the recorded validation MSE is that of rows 48..59.
    np.testing.assert_allclose(fit.standardizer.mean, f[:48].mean(0), rtol=1e-5, atol=1e-6)
    rec = np.asarray(reconn.reconstruct(fit, f[48:]))
    np.testing.assert_allclose(fit.eval_mse[-1], np.mean((rec - t[48:]) ** 2), rtol=1e-5)
    with pytest.raises(ValueError, match="validation_size"):
        informed.fit_reconstructor(f, t, jax.random.key(0), reconn.ReconstructorSpec(validation_size=59))


def test_shared_model_sets_and_argument_checks():
    x, y = data.load_dataset("synthetic", "train", num_examples=50, shape=(3, 3, 1), seed=1)
    sp = data.pool_splits(x, y, fixed_size=6, num_shadow=30, num_targets=3)
    fns = models.from_flax(models.MLP(features=(3, 10)))
    p0 = training.initial_params(fns, jax.random.key(0), sp.fixed_images)
    ms = informed.train_model_sets(fns, training.full_batch_gd(epochs=2), sp, jax.random.key(1), init_params=p0,
                                   sizes=informed.ModelSetSizes(num_shadow=20), run=informed.RunOptions(progress=False))
    assert ms.shadow.count == 20 and ms.released.count == 3 and "eval_accuracy" not in ms.released
    orc = informed.oracle_for(sp)
    spec = reconn.ReconstructorSpec(hidden=(4,), epochs=1, batch_size=5)
    fewer = informed.informed_attack(sp, ms, jax.random.key(2), oracle=orc, reconstructor=spec, num_shadow=10,
                                     progress=False)
    assert fewer.num_shadow == 10 and fewer.feature_dim == 9 * 3 + 3 + 3 * 10 + 10
    with pytest.raises(ValueError, match="logits"):
        informed.attack_features(ms.shadow, "logits")
    with pytest.raises(ValueError, match="num_shadow"):
        informed.informed_attack(sp, ms, jax.random.key(2), oracle=orc, reconstructor=spec, num_shadow=21)
    with pytest.raises(ValueError, match="oracle"):
        informed.informed_attack(sp, ms, jax.random.key(2), oracle=informed.oracle_for(sp, 2), reconstructor=spec)
    with pytest.raises(ValueError, match=re.escape("num_targets must be an integer in [1, 3]; got 4")):
        informed.train_model_sets(fns, training.full_batch_gd(epochs=2), sp, jax.random.key(1), init_params=p0,
                                  sizes=informed.ModelSetSizes(num_targets=4))
    with pytest.raises(ValueError, match=re.escape("probe_size must be an integer in [0, 30], got 31")):
        informed.train_model_sets(fns, training.full_batch_gd(epochs=2), sp, jax.random.key(1), init_params=p0,
                                  sizes=informed.ModelSetSizes(probe_size=31))


@pytest.mark.parametrize("field,bad", [("num_shadow", 0), ("num_targets", True), ("num_shadow", 2.0),
                                       ("probe_size", -1), ("probe_size", None)])
def test_model_set_sizes_are_integer_counts_checked_when_built(field, bad):
    # Whether they fit the splits is checked when the sets train (above); type and sign here, before any training.
    with pytest.raises(ValueError, match=f"{field} must be an integer >= {0 if field == 'probe_size' else 1}; got"):
        informed.ModelSetSizes(**{field: bad})


def test_sizes_and_run_options_are_frozen_keyword_only_hashable_and_public():
    sizes = informed.ModelSetSizes(num_shadow=20, probe_size=np.int64(5))
    run = informed.RunOptions(store="runs/x", chunk_size=8, progress=False)
    assert sizes == informed.ModelSetSizes(num_shadow=20, probe_size=5)
    assert hash(sizes) == hash(informed.ModelSetSizes(num_shadow=20, probe_size=5)) and isinstance(hash(run), int)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sizes.num_shadow = 3
    with pytest.raises(TypeError):
        informed.ModelSetSizes(20)
    with pytest.raises(ValueError, match="chunk_size must be None or an integer >= 1, got 0"):
        informed.RunOptions(chunk_size=0)  # the engine's message, now before any model trains
    assert attacks.ModelSetSizes is informed.ModelSetSizes and attacks.RunOptions is informed.RunOptions
    assert {"ModelSetSizes", "RunOptions"} <= set(attacks.__all__) & set(informed.__all__)


def test_pipeline_passes_sizes_and_run_options_to_the_model_sets(monkeypatch):
    x, y = data.load_dataset("synthetic", "train", num_examples=50, shape=(3, 3, 1), seed=1)
    sp = data.pool_splits(x, y, fixed_size=6, num_shadow=30, num_targets=3)
    fns, alg = models.from_flax(models.MLP(features=(3, 10))), training.full_batch_gd(epochs=1, init="random")
    seen = []

    def stop(*args, **kwargs):
        seen.append(kwargs)
        raise RuntimeError("stop before training")

    monkeypatch.setattr(informed, "train_model_sets", stop)
    sizes, run = informed.ModelSetSizes(num_shadow=10, probe_size=5), informed.RunOptions(progress=False)
    for features in ("params", "logits"):
        with pytest.raises(RuntimeError, match="stop before training"):
            informed.run_informed_pipeline(sp, fns, alg, jax.random.key(0), features=features, sizes=sizes, run=run)
    # Probe logits only for the black-box features; the same run options either way.
    assert [k["sizes"] for k in seen] == [informed.ModelSetSizes(num_shadow=10), sizes]
    assert [k["run"] for k in seen] == [run, run]
    with pytest.raises(ValueError, match="probe_size > 0"):  # refused before any model trains
        informed.run_informed_pipeline(sp, fns, alg, jax.random.key(0), features="logits",
                                       sizes=informed.ModelSetSizes(num_shadow=10))
    assert len(seen) == 2


@pytest.mark.parametrize("shape,kind,expected", [
    ((28, 28, 1), "mlp", "ReconstructorMLP"),
    ((28, 28, 1), "auto", "ReconstructorMLP"),  # grey images: the MLP (Table V)
    ((32, 32, 3), "auto", "TransposedConvDecoder"),  # square RGB, side a multiple of 4: the decoder (Table VII)
    ((30, 30, 3), "auto", "ReconstructorMLP"),  # side not a multiple of 4: the decoder cannot emit it
    ((16, 16, 1), "conv", "TransposedConvDecoder"),
])
def test_reconstructor_network_choice(shape, kind, expected):
    net = reconn.reconstructor_network(shape, kind)
    assert type(net).__name__ == expected
    variables = jax.eval_shape(net.init, jax.random.key(0), np.zeros((1, 7), np.float32))
    assert jax.eval_shape(net.apply, variables, np.zeros((2, 7), np.float32)).shape == (2,) + shape


def test_reconstructor_network_refuses_what_it_cannot_build():
    with pytest.raises(ValueError, match="kind 'conv'"):
        reconn.reconstructor_network((18, 18, 1), "conv")
    with pytest.raises(ValueError, match="kind must be one of"):
        reconn.reconstructor_network((28, 28, 1), "gan")


def test_spec_kind_selects_the_network_when_no_model_is_given():
    f = np.random.default_rng(2).normal(size=(20, 5)).astype(np.float32)
    t = np.random.default_rng(3).uniform(size=(20, 8, 8, 3)).astype(np.float32)
    spec = reconn.ReconstructorSpec(epochs=1, batch_size=10, kind="conv")
    fit = informed.fit_reconstructor(f, t, jax.random.key(0), spec, progress=False)
    assert type(fit.model).__name__ == "TransposedConvDecoder"


@pytest.mark.parametrize("bad", [True, 0, 6, 2.0, np.int64(7)])
def test_counts_are_integers_in_range_bools_refused(bad):
    # num_shadow / num_targets: an integer in [1, available]; True is not a count (it used to pass as 1)
    from recon_jax.attacks.informed import _check_count

    assert _check_count("num_targets", None, 5) == 5 and _check_count("num_targets", np.int32(3), 5) == 3
    with pytest.raises(ValueError, match=r"num_targets must be an integer in \[1, 5\]; got"):
        _check_count("num_targets", bad, 5)
