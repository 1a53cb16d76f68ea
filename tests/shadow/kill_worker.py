"""Subprocess worker of tests/shadow/test_kill_resume.py: generates 2,000 small shadow models into a store.

Usage: python tests/shadow/kill_worker.py STORE_DIR [SLOW_SECONDS]
SLOW_SECONDS (default 0) sleeps after each chunk write, so the parent can kill -9 the run mid-way.
"""

import sys
import time

import jax
import numpy as np

from recon_jax import models, shadow, training

COUNT = 2000
CHUNK = 50


def problem():
    """The fixed set, targets, model, algorithm and init shared by the worker and the test."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20 + COUNT, 6)).astype(np.float32)
    y = (np.arange(20 + COUNT) % 4).astype(np.int32)
    fns = models.from_flax(models.MLP(features=(8, 4)))
    alg = training.full_batch_gd(learning_rate=0.3, momentum=0.9, epochs=5)
    p0 = training.initial_params(fns, jax.random.key(0), x[:20])
    return fns, alg, (x[:20], y[:20]), (x[20:], y[20:]), p0


def generate(store=None):
    fns, alg, fixed, targets, p0 = problem()
    return shadow.generate_shadow_models(fns, alg, fixed, targets, jax.random.key(1), init_params=p0,
                                         outputs=("params", "target_loss"), chunk_size=CHUNK, store=store,
                                         progress=False)


if __name__ == "__main__":
    slow = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    if slow:
        real = shadow.ShadowStore.write_chunk

        def slow_write(self, start, stop, arrays):
            real(self, start, stop, arrays)
            time.sleep(slow)

        shadow.ShadowStore.write_chunk = slow_write
    generate(sys.argv[1])
    print("done", flush=True)
