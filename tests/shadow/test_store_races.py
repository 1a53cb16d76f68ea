"""Writers racing on one shadow store, as real processes: the store ends consistent with its manifest.

- Three writers started together on an empty directory, two with one configuration and one with another: the
  first to take the lock writes the store; the other writer with its configuration waits and loads the same
  models; the writer with the other configuration is refused (ShadowStoreMismatchError). Before the lock, they
  mixed (or the second crashed with FileNotFoundError).
- A writer whose directory is deleted mid-run while a second writer (another configuration) waits for the
  lock: the first stops with ShadowStoreLostError instead of writing into the second's store, and the second
  writes a store whose every model is its own. Before the lock, the first kept writing chunks into the second's
  directory and marked it complete with its own configuration.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

WORKER = os.path.join(os.path.dirname(__file__), "race_worker.py")
_spec = importlib.util.spec_from_file_location("recon_jax_tests_race_worker", WORKER)
race_worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(race_worker)


def _start(store, epochs, tmp_path, tag, go=None):
    err = open(tmp_path / f"{tag}.err", "w")
    args = [sys.executable, WORKER, store, str(epochs)] + ([go] if go else [])
    return subprocess.Popen(args, env=dict(os.environ), stdout=subprocess.PIPE, stderr=err, text=True), err


def _finish(proc, err, tmp_path, tag):
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        err.close()
    return proc.returncode, out, (tmp_path / f"{tag}.err").read_text()


def _assert_store_is(store, epochs):
    """Every model in the (checksum-verified) store equals the in-process run of configuration ``epochs``."""
    from recon_jax import shadow

    loaded = shadow.load_shadow_models(store)
    assert loaded.config["algorithm"]["epochs"] == epochs
    ref = race_worker.generate(None, epochs)
    np.testing.assert_array_equal(loaded["params"], ref["params"])
    return race_worker.digest(ref)


def test_concurrent_writers_one_store_and_mismatch_refused(tmp_path):
    store = str(tmp_path / "store")
    procs = {tag: _start(store, epochs, tmp_path, tag) for tag, epochs in (("a", 5), ("b", 5), ("c", 6))}
    res = {tag: _finish(p, e, tmp_path, tag) for tag, (p, e) in procs.items()}
    with open(os.path.join(store, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["complete"]
    winner_epochs = manifest["config"]["algorithm"]["epochs"]
    want = _assert_store_is(store, winner_epochs)
    for tag, epochs in (("a", 5), ("b", 5), ("c", 6)):
        rc, out, err = res[tag]
        if epochs == winner_epochs:
            assert rc == 0, err[-3000:]
            assert f"digest {want}" in out
        else:
            assert rc != 0 and "ShadowStoreMismatchError" in err, err[-3000:]
    assert not os.listdir(os.path.join(store, "chunks"))


def test_deleted_directory_stops_old_writer_new_writer_owns_store(tmp_path):
    store, go = str(tmp_path / "store"), str(tmp_path / "go")
    a, a_err = _start(store, 5, tmp_path, "a", go=go)
    chunks = os.path.join(store, "chunks")
    deadline = time.time() + 300
    while time.time() < deadline and a.poll() is None:
        # A pauses after each chunk until `go` exists: one chunk on disk means A is paused and holds the lock.
        if os.path.isdir(chunks) and any(f.startswith("chunk-") for f in os.listdir(chunks)):
            break
        time.sleep(0.02)
    assert a.poll() is None, (tmp_path / "a.err").read_text()[-3000:]
    shutil.rmtree(store)  # as the mismatch message suggests, while A is paused after a chunk
    b, b_err = _start(store, 6, tmp_path, "b")
    while time.time() < deadline and b.poll() is None and "being written by" not in (tmp_path / "b.err").read_text():
        time.sleep(0.05)
    assert "being written by" in (tmp_path / "b.err").read_text()  # B waits for A's lock
    open(go, "w").close()  # let A go on: it must notice that its directory is gone
    rc_a, _, err_a = _finish(a, a_err, tmp_path, "a")
    rc_b, out_b, err_b = _finish(b, b_err, tmp_path, "b")
    assert rc_a != 0 and "ShadowStoreLostError" in err_a, err_a[-3000:]
    assert rc_b == 0, err_b[-3000:]
    with open(os.path.join(store, "manifest.json")) as f:
        assert json.load(f)["config"]["algorithm"]["epochs"] == 6
    assert f"digest {_assert_store_is(store, 6)}" in out_b
