"""kill -9 in the middle of generating 2,000 models, then a rerun, yields exactly the uninterrupted models."""

import json
import os
import signal
import subprocess
import sys
import time

import importlib.util

import numpy as np

WORKER = os.path.join(os.path.dirname(__file__), "kill_worker.py")
_spec = importlib.util.spec_from_file_location("recon_jax_tests_kill_worker", WORKER)
kill_worker = importlib.util.module_from_spec(_spec)  # the same problem definition as the subprocess
_spec.loader.exec_module(kill_worker)


def test_kill_dash_nine_then_resume_equals_uninterrupted(tmp_path):
    store = str(tmp_path / "store")
    env = dict(os.environ)  # inherits the conftest's XLA_FLAGS: same 2 devices as this process
    proc = subprocess.Popen([sys.executable, WORKER, store, "0.05"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    chunks = os.path.join(store, "chunks")
    deadline = time.time() + 300
    try:
        while time.time() < deadline and proc.poll() is None:
            if os.path.isdir(chunks) and len([f for f in os.listdir(chunks) if f.startswith("chunk-")]) >= 3:
                break
            time.sleep(0.01)
        assert proc.poll() is None, f"worker ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with open(os.path.join(store, "manifest.json")) as f:
        assert not json.load(f)["complete"]
    n_done = len([f for f in os.listdir(chunks) if f.startswith("chunk-")])
    assert 3 <= n_done < kill_worker.COUNT // kill_worker.CHUNK  # really interrupted in the middle

    resumed = kill_worker.generate(store)  # rerun with the same configuration: resumes
    reference = kill_worker.generate(None)  # uninterrupted, in memory
    assert resumed.count == kill_worker.COUNT
    np.testing.assert_array_equal(resumed["params"], reference["params"])
    np.testing.assert_array_equal(resumed["target_loss"], reference["target_loss"])
