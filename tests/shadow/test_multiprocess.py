"""The multi-host path: two JAX processes joined by jax.distributed.initialize (localhost, CPU, gloo).

The mesh spans the devices of both processes; process 0 writes the store, every process gets all models back.
The result must equal a naive per-model loop in this process, and a second run on the same store must resume
(read, not recompute).
"""

import importlib.util
import os
import socket
import subprocess
import sys

import jax
import numpy as np

from recon_jax import training

WORKER = os.path.join(os.path.dirname(__file__), "multiprocess_worker.py")
_spec = importlib.util.spec_from_file_location("recon_jax_tests_multiprocess_worker", WORKER)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _run_job(store: str, out_prefix: str, num_processes: int = 2) -> list[np.ndarray]:
    port = _free_port()
    # The job is the CPU one (gloo collectives) on any machine: on a one-GPU machine two processes would otherwise
    # both claim the same GPU.
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, WORKER, str(i), str(num_processes), str(port), store,
                               f"{out_prefix}{i}.npy"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(num_processes)]
    logs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        logs.append(out + err[-3000:])
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log
    n_local = len(jax.local_devices(backend="cpu"))  # the workers inherit this process's XLA_FLAGS
    assert all(f"{n_local} local / {n_local * num_processes} global devices" in log for log in logs), logs
    return [np.load(f"{out_prefix}{i}.npy") for i in range(num_processes)]


def _store_files(store: str) -> dict:
    """{relative path: mtime_ns} of every file in the store."""
    out = {}
    for root, _, files in os.walk(store):
        for f in files:
            path = os.path.join(root, f)
            out[os.path.relpath(path, store)] = os.stat(path).st_mtime_ns
    return out


def _naive(fns, alg, fixed, tx, ty, p0, key) -> np.ndarray:
    return np.stack([
        np.asarray(jax.flatten_util.ravel_pytree(training.train(
            fns, alg, fixed, (tx[i], ty[i]), key=jax.random.fold_in(key, i), init_params=p0).params)[0])
        for i in range(worker.COUNT)])


def test_two_processes_equal_naive_loop_and_resume(tmp_path):
    store = str(tmp_path / "store")
    got = _run_job(store, str(tmp_path / "run1_p"))
    with jax.default_device(jax.devices("cpu")[0]):  # the workers' backend (a GPU's products would round to TF32)
        fns, alg, fixed, (tx, ty), p0 = worker.problem()
        naive = _naive(fns, alg, fixed, tx, ty, p0, jax.random.key(1))
    for g in got:  # every process holds every model
        assert g.shape == naive.shape
        np.testing.assert_allclose(g, naive, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(got[0], got[1])

    before = _store_files(store)
    assert "params.npy" in before and "manifest.json" in before, sorted(before)
    again = _run_job(store, str(tmp_path / "run2_p"))  # same configuration: resumes from the complete store
    assert _store_files(store) == before  # nothing recomputed or rewritten
    for g in again:
        np.testing.assert_array_equal(g, got[0])
