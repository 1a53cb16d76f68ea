"""Device meshes for the shadow engine, and the CPU set-up that makes a multi-core host fast.

The engine shards the model axis (named ``"models"``) over a 1-D :class:`jax.sharding.Mesh`. By default the
mesh holds every device of every process (``jax.devices()``): one CPU device, N fake CPU devices, all
GPUs/TPUs, or all hosts after ``jax.distributed.initialize()``.

On a CPU-only host JAX exposes ONE device that uses all cores inside each operation ("1x2" on two cores).
The alternative is one single-threaded device per core ("2x1"), so that each core trains its own slice of the
models. ``benchmarks/shadow.py`` measures both (Balle MLP, 1,024 models, 100 epochs). On the 2-core
development machine, idle (2026-11-22), 2x1 trained 81.1 models/s and 1x2 62.7 models/s (ratio 1.29); earlier
runs on the same machine shared with other jobs (load average 10-18) gave ratios of 0.88-1.13 and equal work per
CPU-second. So on an idle multi-core host, one single-threaded device per core is the faster layout for shadow
generation. It is not forced as a default, because a process can only choose it before JAX initialises its CPU
backend, and because single-threaded devices also make every *unsharded* computation (reconstructor training,
embeddings, bounds) run on one core: the experiments keep JAX's default (one multi-threaded device), and the
engine uses however many devices exist. To use one device per core (as the test suite does) for a
shadow-heavy job, put the option in the environment *before JAX initialises its CPU backend*, i.e. before
``import jax`` to be safe::

    XLA_FLAGS="--xla_force_host_platform_device_count=2 --xla_cpu_multi_thread_eigen=false" \
    python -m experiments.<name> ...

or, in Python, as the very first lines of a script or notebook::

    from recon_jax.shadow.devices import cpu_xla_flags   # imports jax, but does not initialise a backend
    import os; os.environ["XLA_FLAGS"] = cpu_xla_flags(num_devices=2)

:func:`cpu_xla_flags` only builds the string (it never touches JAX state).
"""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.sharding import Mesh

__all__ = ["MODEL_AXIS", "default_mesh", "cpu_xla_flags"]

#: The mesh axis the shadow engine shards its model axis over.
MODEL_AXIS = "models"


def default_mesh(devices=None) -> Mesh:
    """A 1-D mesh with axis ``"models"`` over ``devices`` (default: ``jax.devices()``, all processes).

    >>> default_mesh().axis_names
    ('models',)
    """
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise ValueError("devices must be a non-empty list of jax devices")
    return Mesh(np.array(devices), (MODEL_AXIS,))


def cpu_xla_flags(num_devices: int | None = None, single_threaded: bool = True, existing: str | None = None) -> str:
    """The ``XLA_FLAGS`` value that gives ``num_devices`` host devices, each single-threaded if asked.

    Args:
      num_devices: number of host (CPU) devices; default ``os.cpu_count()``.
      single_threaded: one thread per device (``--xla_cpu_multi_thread_eigen=false``; XLA has no
        ``intra_op_parallelism_threads`` flag: written with ``--`` it aborts at start-up, without it is ignored).
      existing: flags to extend (default: the current ``XLA_FLAGS``); flags already present are kept.

    Returns:
      The flag string; set it as ``os.environ["XLA_FLAGS"]`` before JAX initialises its backend.

    >>> cpu_xla_flags(2, existing="")
    '--xla_force_host_platform_device_count=2 --xla_cpu_multi_thread_eigen=false'
    """
    n = (os.cpu_count() or 1) if num_devices is None else num_devices
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"num_devices must be an integer >= 1, got {num_devices!r}")
    flags = os.environ.get("XLA_FLAGS", "") if existing is None else existing
    if "xla_force_host_platform_device_count" not in flags:
        flags += f" --xla_force_host_platform_device_count={n}"
    if single_threaded and "xla_cpu_multi_thread_eigen" not in flags:
        flags += " --xla_cpu_multi_thread_eigen=false"
    return flags.strip()
