"""Subprocess worker of tests/shadow/test_multiprocess.py: one process of a multi-process (multi-host) JAX job.

Usage: python tests/shadow/multiprocess_worker.py PROCESS_ID NUM_PROCESSES PORT STORE_DIR OUT_NPY

Joins the job through ``jax.distributed.initialize`` on localhost (CPU collectives over gloo), generates the
shadow models of :func:`problem` with the mesh spanning every device of every process, and saves the parameters
this process got back to OUT_NPY. Each process keeps the XLA_FLAGS it inherits (the test suite's two CPU devices).
"""

import sys

import jax
import numpy as np

COUNT = 12
CHUNK = 8


def problem():
    """The fixed set, targets, model, algorithm and init shared by the workers and the test."""
    from recon_jax import models, training

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16 + COUNT, 6)).astype(np.float32)
    y = (np.arange(16 + COUNT) % 3).astype(np.int32)
    fns = models.from_flax(models.MLP(features=(5, 3)))
    alg = training.full_batch_gd(learning_rate=0.3, momentum=0.9, epochs=4)
    p0 = training.initial_params(fns, jax.random.key(0), x[:16])
    return fns, alg, (x[:16], y[:16]), (x[16:], y[16:]), p0


def main(process_id: int, num_processes: int, port: int, store: str, out: str) -> None:
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=num_processes,
                               process_id=process_id, initialization_timeout=120)
    from recon_jax import shadow

    assert jax.process_count() == num_processes
    fns, alg, fixed, targets, p0 = problem()
    res = shadow.generate_shadow_models(fns, alg, fixed, targets, jax.random.key(1), init_params=p0,
                                        chunk_size=CHUNK, store=store, outputs=("params", "target_loss"),
                                        progress=False)
    np.save(out, np.asarray(res["params"]))
    print(f"process {process_id}: {len(jax.local_devices())} local / {len(jax.devices())} global devices, "
          f"{res.count} models", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
