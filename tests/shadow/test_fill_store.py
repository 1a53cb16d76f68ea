"""The store protocol for any generator of fixed-shape rows (recon_jax.shadow.fill_store), the configuration hash
(recon_jax.io.stable_hash; a store keyed by the older digest is refused with a message to regenerate it), the code
record (a store made by other code, or before stores recorded their code, is refused) and how keys enter a
config."""

import json
import os

import jax
import numpy as np
import pytest

from recon_jax import io as recon_io
from recon_jax import shadow
from recon_jax.io import stable_hash
from recon_jax.shadow import store as store_module

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


def test_a_store_of_another_count_outputs_or_layout_is_refused(tmp_path, monkeypatch):
    """The configuration hash does not cover the count, outputs and layout a caller asks for: a store of the same
    configuration with other ones is refused, complete (it returned its 5 rows for a request of 10) or interrupted
    (a resume of a 6-row store with count 3 returned 6 rows), naming what differs; the same request resumes."""
    from recon_jax.models import layout_of

    d = str(tmp_path / "s")
    shadow.fill_store(d, {"k": 1}, 5, SPECS, _rows(), chunk_size=2)
    more = dict(SPECS, y=((2,), "float64"))
    for count, specs, what in [(10, SPECS, r"count \(5 in the store, 10 asked\)"), (5, more, "outputs .*'y'"),
                               (5, dict(SPECS, x=((3,), "float64")), "outputs .*'<f8'"),
                               (5, dict(SPECS, x=((4,), "float32")), r"outputs .*\[4\]")]:
        with pytest.raises(shadow.ShadowStoreMismatchError, match=what):
            shadow.fill_store(d, {"k": 1}, count, specs, _rows(), chunk_size=2)
    with pytest.raises(shadow.ShadowStoreMismatchError, match="outputs .*'x'"):  # an output left out
        shadow.fill_store(d, {"k": 1}, 5, {"i": SPECS["i"]}, _rows(), chunk_size=2)
    layout = layout_of({"w": np.zeros((2, 3), np.float32)})
    with pytest.raises(shadow.ShadowStoreMismatchError, match="another layout"):
        shadow.fill_store(d, {"k": 1}, 5, SPECS, _rows(), chunk_size=2, layout=layout)
    log = []  # the same request, its dtypes spelt otherwise, loads the store
    same = shadow.fill_store(d, {"k": 1}, 5, {"x": ((3,), "<f4"), "i": ((), np.int64)}, _rows(log), chunk_size=3)
    assert log == [] and same.count == 5 and same["i"].tolist() == list(range(5))

    # Interrupted before consolidation: resumed only with the count and layout it was begun with.
    d2 = str(tmp_path / "t")
    monkeypatch.setattr(shadow.ShadowStore, "consolidate", lambda self, m: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        shadow.fill_store(d2, {"k": 1}, 6, SPECS, _rows(), chunk_size=2, layout=layout)
    monkeypatch.undo()
    with pytest.raises(shadow.ShadowStoreMismatchError, match=r"count \(6 in the store, 3 asked\)"):
        shadow.fill_store(d2, {"k": 1}, 3, SPECS, _rows(), chunk_size=2, layout=layout)
    with pytest.raises(shadow.ShadowStoreMismatchError, match="another layout"):
        shadow.fill_store(d2, {"k": 1}, 6, SPECS, _rows(), chunk_size=2, layout=layout_of({"w": np.zeros(6)}))
    log = []
    out = shadow.fill_store(d2, {"k": 1}, 6, SPECS, _rows(log), chunk_size=2, layout=layout)
    assert log == [] and out["i"].tolist() == list(range(6)) and out.layout == layout


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


def _interrupted_store(d, config):
    """A store whose writer stopped after its chunks, before consolidating them (what a resume finds)."""
    real = shadow.ShadowStore.consolidate
    shadow.ShadowStore.consolidate = lambda self, m: (_ for _ in ()).throw(KeyboardInterrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            shadow.fill_store(d, config, 4, SPECS, _rows(), chunk_size=2)
    finally:
        shadow.ShadowStore.consolidate = real


def _manifest(d):
    with open(os.path.join(d, "manifest.json")) as f:
        return json.load(f)


def test_a_store_made_by_other_code_is_refused_naming_what_differs(tmp_path, monkeypatch):
    d = str(tmp_path / "s")
    _interrupted_store(d, {"k": 1})
    here = recon_io.library_code()
    assert _manifest(d)["code"] == here  # the sources of recon_jax but the layers above the stores, and versions
    assert here["scope"] == {"roots": ["recon_jax"], "skip": ["recon_jax/evidence", "recon_jax/report"]}
    log = []
    out = shadow.fill_store(d, {"k": 1}, 4, SPECS, _rows(log), chunk_size=2)  # the same code resumes (no row made)
    assert log == [] and out["i"].tolist() == [0, 1, 2, 3]

    _interrupted_store(str(tmp_path / "t"), {"k": 1})
    edited = dict(here, fingerprint="0" * 16, sources="1" * 16)  # an edit of the library
    monkeypatch.setattr(store_module, "library_code", lambda: edited)
    with pytest.raises(shadow.ShadowStoreMismatchError,
                       match=r"made by other code than the code running now: the sources differ \(the \.py files "
                             r"of recon_jax/ without recon_jax/evidence, recon_jax/report: "
                             rf"{here['sources']} then, 1{{16}} now\)\. .*use a new directory, or delete this one"):
        shadow.fill_store(str(tmp_path / "t"), {"k": 1}, 4, SPECS, _rows(log), chunk_size=2)
    upgraded = dict(here, fingerprint="0" * 16, versions=dict(here["versions"], jax="0.0.1", flax=None))
    monkeypatch.setattr(store_module, "library_code", lambda: upgraded)
    with pytest.raises(shadow.ShadowStoreMismatchError,
                       match=rf"other code than the code running now: flax {here['versions']['flax']} then, None "
                             rf"now; jax {here['versions']['jax']} then, 0\.0\.1 now\. "):
        shadow.fill_store(str(tmp_path / "t"), {"k": 1}, 4, SPECS, _rows(log), chunk_size=2)
    with pytest.raises(shadow.ShadowStoreMismatchError, match="other code"):  # a finished store too
        shadow.fill_store(d, {"k": 1}, 4, SPECS, _rows(log), chunk_size=2)
    assert log == []  # refused before any row was made
    assert shadow.load_shadow_models(d)["i"].tolist() == [0, 1, 2, 3]  # reading a finished store is not resuming it


def test_a_store_from_before_the_code_record_is_refused(tmp_path):
    d = str(tmp_path / "s")
    _interrupted_store(d, {"k": 1})
    manifest = _manifest(d)
    del manifest["code"]  # what the previous recon_jax wrote (same format string, no code)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    log = []
    with pytest.raises(shadow.ShadowStoreMismatchError,
                       match=r"other code than the code running now: it records no code fingerprint \(written by a "
                             r"recon_jax from before stores recorded their code\)\. .*delete this one"):
        shadow.fill_store(d, {"k": 1}, 4, SPECS, _rows(log), chunk_size=2)
    assert log == [] and len(os.listdir(os.path.join(d, "chunks"))) == 2  # nothing made, nothing deleted


def test_resuming_across_code_when_asked_records_both_codes(tmp_path, monkeypatch):
    d = str(tmp_path / "s")
    _interrupted_store(d, {"k": 1})
    first = _manifest(d)["code"]
    edited = dict(first, fingerprint="0" * 16, sources="1" * 16)
    monkeypatch.setattr(store_module, "library_code", lambda: edited)
    monkeypatch.setattr(recon_io, "_ACROSS_CODE", [True])  # recon_jax.io.allow_resume_across_code()
    log = []
    out = shadow.fill_store(d, {"k": 1}, 4, SPECS, _rows(log), chunk_size=2)
    assert log == [] and out["i"].tolist() == [0, 1, 2, 3]
    manifest = _manifest(d)
    assert manifest["code"] == edited and manifest["resumed_from_code"] == [first]


def test_a_store_records_the_code_its_caller_names(tmp_path, monkeypatch):
    d = str(tmp_path / "s")
    narrow = recon_io.library_code(without=("attacks", "evidence", "report"))
    shadow.fill_store(d, {"k": 1}, 4, SPECS, _rows(), chunk_size=2, code=narrow)
    assert _manifest(d)["code"] == narrow != recon_io.library_code()
    with pytest.raises(shadow.ShadowStoreMismatchError, match="its fingerprint covers other files"):
        shadow.fill_store(d, {"k": 1}, 4, SPECS, _rows(), chunk_size=2)  # the default covers attacks/ too
