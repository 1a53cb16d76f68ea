"""The store protocol for any generator of fixed-shape rows (recon_jax.shadow.fill_store), the configuration hash
(recon_jax.io.stable_hash; a store keyed by the older digest is refused with a message to regenerate it) and how
keys enter a config."""

import json
import os

import jax
import numpy as np
import pytest

from recon_jax import shadow
from recon_jax.io import stable_hash

SPECS = {"x": ((3,), "float32"), "i": ((), "int64")}


def _rows(log=None):
    def compute(pieces):
        for s, e in pieces:
            if log is not None:
                log.append((s, e))
            idx = np.arange(s, e)
            yield {"x": (idx[:, None] * np.ones(3)).astype(np.float32), "i": idx.astype(np.int64)}
    return compute


def test_in_memory_and_stored_rows_agree_and_do_not_depend_on_chunking(tmp_path):
    mem = shadow.fill_store(None, {"k": 1}, 7, SPECS, _rows(), chunk_size=3)
    assert mem.layout is None and mem.count == 7
    stored = shadow.fill_store(str(tmp_path / "s"), {"k": 1}, 7, SPECS, _rows(), chunk_size=2)
    for name in SPECS:
        np.testing.assert_array_equal(mem[name], stored[name])
    assert stored.layout is None and stored.config == {"k": 1}
    assert sorted(os.listdir(tmp_path / "s")) == ["chunks", "i.npy", "manifest.json", "x.npy"]


def test_resume_computes_only_missing_chunks_then_loads(tmp_path, monkeypatch):
    d = str(tmp_path / "s")
    real = shadow.ShadowStore.consolidate
    monkeypatch.setattr(shadow.ShadowStore, "consolidate", lambda self, m: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        shadow.fill_store(d, {"k": 1}, 7, SPECS, _rows(), chunk_size=3)
    monkeypatch.setattr(shadow.ShadowStore, "consolidate", real)
    os.unlink(os.path.join(d, "chunks", "chunk-000000003-000000006.npz"))  # one chunk lost
    log = []
    out = shadow.fill_store(d, {"k": 1}, 7, SPECS, _rows(log), chunk_size=5)  # another chunk size resumes too
    assert log == [(3, 6)]
    np.testing.assert_array_equal(out["i"], np.arange(7))
    log.clear()
    shadow.fill_store(d, {"k": 1}, 7, SPECS, _rows(log), chunk_size=3)
    assert log == []  # complete: loaded, nothing computed
    with pytest.raises(shadow.ShadowStoreMismatchError, match="different configuration"):
        shadow.fill_store(d, {"k": 2}, 7, SPECS, _rows(), chunk_size=3)


def test_chunks_of_the_wrong_shape_or_count_are_refused(tmp_path):
    def bad(pieces):
        for s, e in pieces:
            yield {"x": np.zeros((e - s, 2), np.float32), "i": np.zeros(e - s, np.int64)}

    with pytest.raises(ValueError, match="'x'"):
        shadow.fill_store(str(tmp_path / "s"), {"k": 1}, 4, SPECS, bad, chunk_size=2)
    with pytest.raises(ValueError, match="yielded 1 chunks for 2"):
        shadow.fill_store(None, {"k": 1}, 4, SPECS, lambda pieces: iter([next(_rows()(pieces))]), chunk_size=2)
    with pytest.raises(ValueError, match="chunk_size"):
        shadow.fill_store(None, {"k": 1}, 4, SPECS, _rows(), chunk_size=0)


def test_config_hash_is_stable_hash_and_a_legacy_store_is_refused(tmp_path):
    config = {"k": 1, "name": "rows"}
    assert shadow.config_hash(config) == stable_hash(config)
    d = str(tmp_path / "s")
    shadow.fill_store(d, config, 4, SPECS, _rows(), chunk_size=2)
    with pytest.raises(shadow.ShadowStoreMismatchError, match="different configuration"):
        shadow.fill_store(d, dict(config, k=2), 4, SPECS, _rows(), chunk_size=2)
    # A store of the previous format (an older recon_jax, whose configurations left defaults out and whose older
    # stores carried another digest) is refused, not converted.
    path = os.path.join(d, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest["format"] = "recon_jax.shadow/2"
    with open(path, "w") as f:
        json.dump(manifest, f)
    log = []
    with pytest.raises(shadow.ShadowStoreMismatchError, match="older recon_jax .*delete the directory to regenerate"):
        shadow.fill_store(d, config, 4, SPECS, _rows(log), chunk_size=2)
    assert log == []  # refused before any row was made


def test_key_fingerprint_is_the_engines_key_description():
    key = jax.random.key(3)
    data = np.asarray(jax.random.key_data(key))
    assert shadow.key_fingerprint(key) == [str(jax.random.key_impl(key)), shadow.array_digest(data)]
    assert shadow.key_fingerprint(None) is None
    with pytest.raises(ValueError, match="typed keys"):
        shadow.key_fingerprint(jax.random.PRNGKey(0))
