"""Subprocess worker of tests/shadow/test_store_races.py: writes a small shadow set into a store.

Usage: python tests/shadow/race_worker.py STORE_DIR EPOCHS [GO_FILE]
With GO_FILE, the worker pauses after each chunk write until GO_FILE exists, so the parent can delete the store
directory and start a second writer while this one still holds the lock. Prints ``digest <sha256>`` of the
returned parameters on success.
"""

import hashlib
import os
import sys
import time

import jax
import numpy as np

from recon_jax import models, shadow, training

COUNT = 24
CHUNK = 4


def generate(store, epochs: int):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16 + COUNT, 6)).astype(np.float32)
    y = (np.arange(16 + COUNT) % 3).astype(np.int32)
    fns = models.from_flax(models.MLP(features=(8, 3)))
    alg = training.full_batch_gd(learning_rate=0.3, epochs=epochs)
    p0 = training.initial_params(fns, jax.random.key(0), x[:16])
    # On the host devices whatever the machine: the test compares stores written by separate processes bit for
    # bit, and a GPU's kernels may differ between processes (autotuning); what races is the store, not the device.
    return shadow.generate_shadow_models(fns, alg, (x[:16], y[:16]), (x[16:], y[16:]), jax.random.key(1),
                                         init_params=p0, outputs=("params",), chunk_size=CHUNK, store=store,
                                         progress=False, mesh=shadow.default_mesh(jax.devices("cpu")))


def digest(s) -> str:
    return hashlib.sha256(np.ascontiguousarray(s["params"]).tobytes()).hexdigest()


if __name__ == "__main__":
    if len(sys.argv) > 3:
        go, real = sys.argv[3], shadow.ShadowStore.write_chunk

        def paused_write(self, start, stop, arrays):
            real(self, start, stop, arrays)
            deadline = time.time() + 120
            while not os.path.exists(go) and time.time() < deadline:
                time.sleep(0.05)

        shadow.ShadowStore.write_chunk = paused_write
    print("digest", digest(generate(sys.argv[1], int(sys.argv[2]))), flush=True)
