"""Shadow engine: vmap == loop, sharded == unsharded, chunk-size and resume invariance, store behaviour."""

import json
import os

import haiku as hk
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import models, shadow, training

FNS = models.from_flax(models.MLP(features=(8, 4), activation="elu"))
ALG = training.full_batch_gd(learning_rate=0.3, momentum=0.9, epochs=5)
OUT = ("params", "probe_logits", "eval_accuracy", "target_loss", "final_loss")


def _data(n=20, k=7, d=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + k + 5, d)).astype(np.float32)
    y = (np.arange(n + k + 5) % 4).astype(np.int32)
    return (x[:n], y[:n]), (x[n:n + k], y[n:n + k]), x[n + k:]


def _gen(fixed, targets, probe, **kw):
    p0 = training.initial_params(FNS, jax.random.key(0), fixed[0])
    kw.setdefault("chunk_size", 4)
    return shadow.generate_shadow_models(FNS, kw.pop("alg", ALG), fixed, targets, jax.random.key(1),
                                         init_params=p0, probe_inputs=probe, eval_set=fixed, progress=False, **kw)


def test_vmapped_engine_equals_naive_loop():
    # At full-precision products: on a GPU at default precision XLA sends the vmapped products to TF32 kernels and
    # leaves small unbatched ones exact, ~1e-3 apart (seen on an H100); the engine's agreement with the loop at the
    # default precision is checked relative to training movement in test_engine_matrix.py.
    with jax.default_matmul_precision("highest"):
        _vmapped_engine_equals_naive_loop()


def _vmapped_engine_equals_naive_loop():
    fixed, targets, probe = _data(k=3)
    s = _gen(fixed, targets, probe, outputs=OUT, chunk_size=2)
    p0 = training.initial_params(FNS, jax.random.key(0), fixed[0])
    for i in range(3):
        res = training.train(FNS, ALG, fixed, (targets[0][i], targets[1][i]),
                             key=jax.random.fold_in(jax.random.key(1), i), init_params=p0)
        flat = np.asarray(models.ravel(res.params)[0])
        # vmapped vs unbatched float32 matmuls: same math, possibly different accumulation order
        np.testing.assert_allclose(s["params"][i], flat, rtol=1e-5, atol=1e-6)
        logits = np.asarray(FNS.apply(res.params, probe))
        np.testing.assert_allclose(s["probe_logits"][i], logits, rtol=1e-5, atol=1e-5)
        acc = np.mean(np.argmax(np.asarray(FNS.apply(res.params, fixed[0])), -1) == fixed[1])
        assert s["eval_accuracy"][i] == pytest.approx(acc)
        tl = -jax.nn.log_softmax(FNS.apply(res.params, targets[0][i:i + 1]))[0, targets[1][i]]
        assert s["target_loss"][i] == pytest.approx(float(tl), rel=1e-5, abs=1e-6)
        assert s["final_loss"][i] == pytest.approx(float(res.losses[-1]), rel=1e-5)
    assert s.layout == models.layout_of(p0)


@pytest.mark.parametrize("sampling", ["shuffle", "poisson"])
def test_minibatch_dp_sgd_engine_equals_per_model_train(sampling):
    # DP-SGD with a per-model (fresh) batch order / Poisson draws: the vmapped engine equals train() per model.
    fixed, targets, probe = _data(k=3)
    alg = training.dp_sgd(5, clip_norm=1.0, noise_multiplier=0.5, epochs=2, sampling=sampling, learning_rate=0.2,
                          momentum=0.9)
    s = _gen(fixed, targets, probe, alg=alg, chunk_size=2)
    p0 = training.initial_params(FNS, jax.random.key(0), fixed[0])
    for i in range(3):
        res = training.train(FNS, alg, fixed, (targets[0][i], targets[1][i]),
                             key=jax.random.fold_in(jax.random.key(1), i), init_params=p0)
        # vmapped vs unbatched float32 matmuls: same math, possibly different accumulation order
        np.testing.assert_allclose(s["params"][i], np.asarray(models.ravel(res.params)[0]), rtol=1e-5, atol=1e-6)


def _cpu_devices():
    """The suite's two host devices (conftest's XLA flags), on any backend: a GPU or TPU machine has them too, so
    the sharding tests run the same two-device mesh there (an H100 has one device of its own)."""
    cpu = jax.devices("cpu")
    assert len(cpu) == 2  # conftest: two fake CPU devices
    return cpu


def test_sharded_over_two_devices_equals_one_device_and_chunk_size_invariance():
    cpu = _cpu_devices()
    fixed, targets, probe = _data()
    two = _gen(fixed, targets, probe, outputs=("params",), chunk_size=4, mesh=shadow.default_mesh(cpu))
    one = _gen(fixed, targets, probe, outputs=("params",), chunk_size=3, mesh=shadow.default_mesh(cpu[:1]))
    big = _gen(fixed, targets, probe, outputs=("params",), chunk_size=16, mesh=shadow.default_mesh(cpu))
    # float32 tolerance of the issue (models must not depend on chunking or devices beyond rounding)
    np.testing.assert_allclose(two["params"], one["params"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(two["params"], big["params"], rtol=0, atol=1e-5)


def test_float64_identical_across_devices_and_resume_close_across_chunk_sizes(x64):
    fixed, targets, probe = _data()
    fixed = (fixed[0].astype(np.float64), fixed[1])
    targets = (targets[0].astype(np.float64), targets[1])
    cpu = _cpu_devices()
    two_dev = _gen(fixed, targets, probe, outputs=("params",), chunk_size=4,
                   mesh=shadow.default_mesh(cpu))  # 2 models per device per call
    one_dev = _gen(fixed, targets, probe, outputs=("params",), chunk_size=2,
                   mesh=shadow.default_mesh(cpu[:1]))  # 2 models per call
    assert two_dev["params"].dtype == np.float64
    # same per-device batch shape: bit-identical whatever the device count
    np.testing.assert_array_equal(two_dev["params"], one_dev["params"])
    # a different per-device batch shape may change XLA's matmul blocking, i.e. the summation order:
    # differences are then at the level of float64 rounding (a few ulps), not exactly zero
    big = _gen(fixed, targets, probe, outputs=("params",), chunk_size=16, mesh=shadow.default_mesh(cpu))
    np.testing.assert_allclose(two_dev["params"], big["params"], rtol=0, atol=1e-13)


def test_haiku_model_in_engine():
    fixed, targets, _ = _data(k=3)

    def f(x):
        return hk.nets.MLP([8, 4], activation=jax.nn.elu)(x)

    fns = models.from_haiku(hk.transform(f))
    p0 = training.initial_params(fns, jax.random.key(0), fixed[0])
    s = shadow.generate_shadow_models(fns, ALG, fixed, targets, jax.random.key(1), init_params=p0,
                                      outputs=("params", "final_loss"), chunk_size=2, progress=False)
    res = training.train(fns, ALG, fixed, (targets[0][2], targets[1][2]),
                         key=jax.random.fold_in(jax.random.key(1), 2), init_params=p0)
    np.testing.assert_allclose(s["params"][2], models.ravel(res.params)[0], rtol=1e-5, atol=1e-6)
    assert s.layout.paths[0].startswith("mlp/~/linear_0")


def test_random_init_minibatch_and_mia_out_models():
    fixed, targets, probe = _data()
    alg = training.minibatch_sgd(7, learning_rate=0.1, epochs=2, shuffle="fresh", init="random")
    s = shadow.generate_shadow_models(FNS, alg, fixed, targets, jax.random.key(1), chunk_size=4,
                                      outputs=("params",), progress=False)
    k3 = jax.random.fold_in(jax.random.key(1), 3)
    res = training.train(FNS, alg, fixed, (targets[0][3], targets[1][3]), key=k3)
    np.testing.assert_allclose(s["params"][3], models.ravel(res.params)[0], rtol=1e-5, atol=1e-6)
    # MIA: weight-0 ("out") models ignore their target: with known init they all coincide
    out = _gen(fixed, targets, probe, outputs=("params",), target_weights=np.zeros(7))
    np.testing.assert_allclose(out["params"], np.broadcast_to(out["params"][0], out["params"].shape), atol=1e-6)


def test_store_resume_after_interruption_equals_uninterrupted(tmp_path, monkeypatch):
    fixed, targets, probe = _data(k=11)
    ref = _gen(fixed, targets, probe, outputs=("params", "target_loss"), chunk_size=2)
    calls = {"n": 0}
    real_write = shadow.ShadowStore.write_chunk

    def failing_write(self, start, stop, arrays):
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated interruption")
        calls["n"] += 1
        real_write(self, start, stop, arrays)

    monkeypatch.setattr(shadow.ShadowStore, "write_chunk", failing_write)
    d = str(tmp_path / "store")
    with pytest.raises(KeyboardInterrupt):
        _gen(fixed, targets, probe, outputs=("params", "target_loss"), chunk_size=2, store=d)
    assert len(os.listdir(os.path.join(d, "chunks"))) == 2
    monkeypatch.setattr(shadow.ShadowStore, "write_chunk", real_write)
    # corrupt one finished chunk (truncate): it must be detected and recomputed
    first = sorted(os.listdir(os.path.join(d, "chunks")))[0]
    path = os.path.join(d, "chunks", first)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    s = _gen(fixed, targets, probe, outputs=("params", "target_loss"), chunk_size=3, store=d)
    assert isinstance(s["params"], np.memmap)
    np.testing.assert_allclose(s["params"], ref["params"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(s["target_loss"], ref["target_loss"], rtol=0, atol=1e-5)
    loaded = shadow.load_shadow_models(d)
    np.testing.assert_array_equal(loaded["params"], s["params"])
    assert loaded.layout == ref.layout and loaded.count == 11
    assert not os.listdir(os.path.join(d, "chunks"))  # consolidated
    # completed store: rerun returns it without recomputation; other config refused
    again = _gen(fixed, targets, probe, outputs=("params", "target_loss"), store=d)
    np.testing.assert_array_equal(again["params"], s["params"])
    with pytest.raises(shadow.ShadowStoreMismatchError, match=r"different configuration.*differs in [^;]*epochs"):
        _gen(fixed, targets, probe, outputs=("params", "target_loss"), store=d,
             alg=training.full_batch_gd(learning_rate=0.3, momentum=0.9, epochs=6))  # the field is named


def test_a_store_made_by_other_code_is_refused(tmp_path, monkeypatch):
    """The engine's store records the code below the attacks (what can train a shadow model) and refuses a resume
    under other code, naming what differs."""
    from recon_jax import io as recon_io
    from recon_jax.shadow import engine

    fixed, targets, probe = _data(k=3)
    d = str(tmp_path / "store")
    first = _gen(fixed, targets, probe, outputs=("params",), store=d)
    with open(os.path.join(d, "manifest.json")) as f:
        code = json.load(f)["code"]
    assert code == recon_io.library_code(without=("attacks", "evidence", "report"))
    assert code["scope"]["skip"] == ["recon_jax/attacks", "recon_jax/evidence", "recon_jax/report"]
    np.testing.assert_array_equal(_gen(fixed, targets, probe, outputs=("params",), store=d)["params"],
                                  first["params"])  # the same code: the finished store
    real = engine.library_code
    monkeypatch.setattr(engine, "library_code",
                        lambda without: dict(real(without=without), fingerprint="0" * 16, sources="1" * 16))
    with pytest.raises(shadow.ShadowStoreMismatchError,
                       match=r"other code than the code running now: the sources differ \(the \.py files of "
                             r"recon_jax/ without recon_jax/attacks, recon_jax/evidence, recon_jax/report: .* use a "
                             r"new directory, or delete this one to regenerate it"):
        _gen(fixed, targets, probe, outputs=("params",), store=d)


def test_store_tells_apart_losses_that_share_a_name(tmp_path):
    """Two closures of one loss factory (same qualname, different captured scale) describe differently, so the
    second is refused the first's store instead of silently receiving its models."""
    from recon_jax.models.losses import softmax_cross_entropy

    def scaled(c):
        def loss(logits, labels):
            return c * softmax_cross_entropy(logits, labels)
        return loss

    fixed, targets, probe = _data(k=3)
    d = str(tmp_path / "store")
    alg = lambda c: training.full_batch_gd(learning_rate=0.3, epochs=3, loss_fn=scaled(c))  # noqa: E731
    assert alg(1.0).describe() == alg(1.0).describe() != alg(0.0).describe()
    first = _gen(fixed, targets, probe, outputs=("params",), store=d, alg=alg(1.0))
    with pytest.raises(shadow.ShadowStoreMismatchError, match="different configuration"):
        _gen(fixed, targets, probe, outputs=("params",), store=d, alg=alg(0.0))
    again = _gen(fixed, targets, probe, outputs=("params",), store=d, alg=alg(1.0))  # an equal closure: accepted
    np.testing.assert_array_equal(again["params"], first["params"])


def test_a_store_begun_at_another_matmul_precision_or_backend_is_refused(tmp_path, monkeypatch):
    """The rows depend on where they were computed (a GPU's TF32 products against a CPU's float32): a store begun
    at one default matmul precision, or on one backend, is not resumed at another."""
    from recon_jax.shadow import engine

    fixed, targets, probe = _data(k=3)
    d = str(tmp_path / "store")
    first = _gen(fixed, targets, probe, outputs=("params",), store=d)
    with jax.default_matmul_precision("tensorfloat32"):
        with pytest.raises(shadow.ShadowStoreMismatchError, match="different configuration"):
            _gen(fixed, targets, probe, outputs=("params",), store=d)
    monkeypatch.setattr(engine.jax, "default_backend", lambda: "gpu")
    with pytest.raises(shadow.ShadowStoreMismatchError, match="different configuration"):
        _gen(fixed, targets, probe, outputs=("params",), store=d)
    monkeypatch.undo()
    np.testing.assert_array_equal(_gen(fixed, targets, probe, outputs=("params",), store=d)["params"],
                                  first["params"])  # the same backend and precision: the finished store


def test_invalid_arguments():
    fixed, targets, probe = _data(k=2)
    p0 = training.initial_params(FNS, jax.random.key(0), fixed[0])
    gen = lambda **kw: shadow.generate_shadow_models(FNS, kw.pop("alg", ALG), fixed, targets, jax.random.key(1),
                                                     progress=False, **kw)
    with pytest.raises(ValueError, match="outputs"):
        gen(init_params=p0, outputs=("weights",))
    with pytest.raises(ValueError, match="init_params"):
        gen()
    with pytest.raises(ValueError, match="probe_inputs"):
        gen(init_params=p0, outputs=("probe_logits",))
    with pytest.raises(ValueError, match="chunk_size"):
        gen(init_params=p0, chunk_size=0)
    with pytest.raises(ValueError, match="target_weights"):
        gen(init_params=p0, target_weights=np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="typed keys"):
        shadow.generate_shadow_models(FNS, ALG, fixed, targets, jax.random.PRNGKey(0), init_params=p0,
                                      progress=False)
    with pytest.raises(ValueError, match="num_devices"):
        shadow.cpu_xla_flags(0)
    # Labels beyond the model's 4 outputs were one-hot zero rows: models trained on nothing, silently (bitwise equal
    # for labels 3, 7, 100, -1); a NaN pixel trained NaN models; one-hot eval labels blamed the model's vmapping.
    for name, bad in (("targets", (targets[0], np.array([7, 1], np.int32))),
                      ("fixed_set", (fixed[0], np.where(np.arange(len(fixed[1])) == 3, -1, fixed[1])))):
        kw = {"targets" if name == "targets" else "fixed_set": bad}
        with pytest.raises(ValueError, match=rf"{name} labels must be in \[0, 4\)"):
            shadow.generate_shadow_models(FNS, ALG, kw.get("fixed_set", fixed), kw.get("targets", targets),
                                          jax.random.key(1), init_params=p0, progress=False)
    with pytest.raises(ValueError, match="fixed_set x must be finite"):
        shadow.generate_shadow_models(FNS, ALG, (np.where(fixed[0] > 2, np.nan, fixed[0]), fixed[1]), targets,
                                      jax.random.key(1), init_params=p0, progress=False)
    with pytest.raises(ValueError, match=r"eval_set must be \(x \[m, ...\], y \[m\]\)"):
        gen(init_params=p0, outputs=("eval_accuracy",), eval_set=(fixed[0], np.eye(4, dtype=np.int32)[fixed[1]]))
    with pytest.raises(ValueError, match="not one-hot"):  # a TypeError from a reshape in the Gram path
        shadow.generate_shadow_models(FNS, ALG, (fixed[0], np.eye(4, dtype=np.int32)[fixed[1]]), targets,
                                      jax.random.key(1), init_params=p0, progress=False)
    wide = training.initial_params(models.from_flax(models.MLP(features=(9, 4), activation="elu")),
                                   jax.random.key(0), fixed[0])
    with pytest.raises(ValueError, match="init_params must match the model's parameters"):  # flax's shape error
        gen(init_params=wide)
    with pytest.raises(ValueError, match="not legacy uint32 PRNGKey arrays or ints; got int"):
        shadow.generate_shadow_models(FNS, ALG, fixed, targets, 2, init_params=p0, progress=False)


@pytest.mark.parametrize("per_example", ["auto", "vmap"])
def test_dp_mia_in_and_out_models_differ_by_the_targets_clipped_gradient(x64, per_example):
    # One DP-GD step without noise from a known init: an "out" model (target weight 0) releases S_- / (n + 1) and
    # an "in" model (S_- + clip(g_target)) / (n + 1), the public normaliser, so the models differ by
    # lr clip(g_target) / (n + 1). (The realised normaliser n + t gave the out model S_- / n.)
    fixed, targets, _ = _data(n=10, k=3)
    fixed = (fixed[0].astype(np.float64), fixed[1])
    targets = (targets[0].astype(np.float64), targets[1])
    p0 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64),
                                training.initial_params(FNS, jax.random.key(0), fixed[0]))
    clip, lr = 0.05, 0.3
    alg = training.dp_gd(clip, noise_multiplier=0.0, epochs=1, learning_rate=lr, per_example=per_example)
    s = shadow.generate_shadow_models(FNS, alg, fixed, targets, jax.random.key(1), init_params=p0,
                                      target_weights=np.array([1.0, 0.0, 1.0]), outputs=("params",),
                                      chunk_size=3, progress=False)
    flat0, unravel = models.ravel(p0)[0], jax.flatten_util.ravel_pytree(p0)[1]

    def clipped(x, y):  # by hand: one example's gradient at p0, clipped
        g = np.asarray(jax.flatten_util.ravel_pytree(jax.grad(lambda p: training.softmax_cross_entropy(
            FNS.apply(p, x[None]), y[None])[0])(p0))[0])
        return g * min(1.0, clip / np.linalg.norm(g))

    s_minus = sum(clipped(fixed[0][i], fixed[1][i]) for i in range(10))
    np.testing.assert_allclose(s["params"][1], np.asarray(flat0) - lr * s_minus / 11, rtol=1e-10, atol=1e-13)
    for i in (0, 2):
        want = np.asarray(flat0) - lr * (s_minus + clipped(targets[0][i], targets[1][i])) / 11
        np.testing.assert_allclose(s["params"][i], want, rtol=1e-10, atol=1e-13)
