"""Shadow store integrity: checksummed consolidated files, leftovers cleaned, chunks of another configuration
rejected, and model identities that tell models apart (issue: relu/tanh and hidden-8/32 Haiku models shared a
store)."""

import json
import os
import shutil

import haiku as hk
import jax
import numpy as np
import pytest

from recon_jax import models, shadow, training

ALG = training.full_batch_gd(learning_rate=0.3, epochs=3)


def _problem(k=6):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12 + k, 5)).astype(np.float32)
    y = (np.arange(12 + k) % 3).astype(np.int32)
    return (x[:12], y[:12]), (x[12:], y[12:])


def _gen(store, fns=None, alg=ALG, **kw):
    fixed, targets = _problem()
    fns = fns or models.from_flax(models.MLP(features=(8, 3)))
    p0 = training.initial_params(fns, jax.random.key(0), fixed[0])
    return shadow.generate_shadow_models(fns, alg, fixed, targets, jax.random.key(1), init_params=p0,
                                         outputs=("params", "target_loss"), chunk_size=2, store=store,
                                         progress=False, **kw)


@pytest.fixture(scope="module")
def complete_store(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("complete") / "store")
    ref = _gen(d)
    return d, np.array(ref["params"])


def _copy(src, tmp_path):
    dst = str(tmp_path / "store")
    shutil.copytree(src, dst)
    return dst


def test_bit_flip_in_consolidated_params_is_detected_naming_the_file(complete_store, tmp_path):
    d = _copy(complete_store[0], tmp_path)
    path = os.path.join(d, "params.npy")
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 7)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x10]))  # one bit, in the data (not the header)
    with pytest.raises(shadow.ShadowStoreCorruptError, match=r"params\.npy.*checksum"):
        shadow.load_shadow_models(d)
    with pytest.raises(shadow.ShadowStoreCorruptError, match=r"params\.npy"):
        _gen(d)  # the engine refuses it too, instead of returning silently corrupted models


def test_truncated_consolidated_file_names_the_file(complete_store, tmp_path):
    d = _copy(complete_store[0], tmp_path)
    path = os.path.join(d, "target_loss.npy")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 4)
    with pytest.raises(shadow.ShadowStoreCorruptError, match=r"target_loss\.npy has \d+ bytes.*truncated"):
        shadow.load_shadow_models(d)


def test_chunks_left_after_completion_are_cleaned_by_the_next_run(complete_store, tmp_path):
    d = _copy(complete_store[0], tmp_path)
    # a crash after the manifest was marked complete, before the chunks were deleted: put chunks back
    leftover = [os.path.join(d, "chunks", "chunk-000000000-000000002.npz"), os.path.join(d, ".tmp-params.npy")]
    for p in leftover:
        with open(p, "wb") as f:
            f.write(b"left over")
    again = _gen(d)
    np.testing.assert_array_equal(again["params"], complete_store[1])
    assert not any(os.path.exists(p) for p in leftover)


def test_chunk_of_another_configuration_is_not_used(tmp_path):
    """A chunk written under another configuration (e.g. by a writer whose directory was replaced) is recomputed."""
    other = str(tmp_path / "other")
    d = str(tmp_path / "store")
    calls = {"n": 0}
    real = shadow.ShadowStore.write_chunk

    def stop_after_one(self, start, stop, arrays):
        if calls["n"] == 1:
            raise KeyboardInterrupt("simulated interruption")
        calls["n"] += 1
        real(self, start, stop, arrays)

    shadow.ShadowStore.write_chunk = stop_after_one
    try:
        for store, alg in ((other, training.full_batch_gd(learning_rate=0.3, epochs=4)), (d, ALG)):
            calls["n"] = 0
            with pytest.raises(KeyboardInterrupt):
                _gen(store, alg=alg)
    finally:
        shadow.ShadowStore.write_chunk = real
    name = "chunk-000000000-000000002.npz"
    shutil.copy(os.path.join(other, "chunks", name), os.path.join(d, "chunks", name))  # same indices, shapes
    s = _gen(d)
    np.testing.assert_array_equal(s["params"], _gen(None)["params"])


def _haiku(hidden, activation):
    return models.from_haiku(hk.transform(lambda x: hk.nets.MLP([hidden, 3], activation=activation)(x)))


def test_haiku_models_with_other_activation_or_width_get_other_stores(tmp_path):
    d = str(tmp_path / "store")
    relu = _gen(d, fns=_haiku(8, jax.nn.relu))
    assert relu["params"].shape[1] == 5 * 8 + 8 + 8 * 3 + 3
    for fns in (_haiku(8, jax.numpy.tanh), _haiku(32, jax.nn.relu)):
        with pytest.raises(shadow.ShadowStoreMismatchError):
            _gen(d, fns=fns)


def test_model_identity_flax_and_haiku():
    x = np.zeros((2, 5), np.float32)
    ident = models.model_identity
    assert ident(_haiku(8, jax.nn.relu), x) == ident(_haiku(8, jax.nn.relu), x)  # deterministic
    assert ident(_haiku(8, jax.nn.relu), x) != ident(_haiku(8, jax.numpy.tanh), x)
    assert ident(_haiku(8, jax.nn.relu), x) != ident(_haiku(32, jax.nn.relu), x)
    flax = lambda h, a: models.from_flax(models.MLP(features=(h, 3), activation=a), name="same name")  # noqa: E731
    assert ident(flax(8, "relu"), x) == ident(flax(8, "relu"), x)
    assert ident(flax(8, "relu"), x) != ident(flax(8, "tanh"), x)  # the name alone would not tell them apart
    assert ident(flax(8, "relu"), x) != ident(flax(32, "relu"), x)
    assert ident(flax(8, "relu"), x)["params"] == [["Dense_0/bias", [8], "float32"],
                                                   ["Dense_0/kernel", [5, 8], "float32"],
                                                   ["Dense_1/bias", [3], "float32"],
                                                   ["Dense_1/kernel", [8, 3], "float32"]]
    json.dumps(ident(flax(8, "relu"), x))  # JSON-compatible: it goes into the store's configuration hash
