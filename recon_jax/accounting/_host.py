"""float64 on the host for the accounting's host-level routines (the von Mises-Fisher accountant).

The accountant differences log-Bessel values near 1e4, where float32 is not enough, so it computes in float64.
float64 belongs on the host's CPU: a TPU has no native float64, and on a GPU these scalar-sized programs only pay
launch latency. The accounting is host-level (concrete inputs), so nothing is lost by pinning it there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

__all__ = ["host_float64"]


@contextlib.contextmanager
def host_float64() -> Iterator[None]:
    """Within the context, JAX computes in float64 (``jax.enable_x64``) on the host's first CPU device, whatever
    the default device.

    >>> import jax.numpy as jnp
    >>> with host_float64():
    ...     x = jnp.ones(2)
    >>> x.dtype.name, next(iter(x.devices())).platform
    ('float64', 'cpu')
    """
    with jax.enable_x64(True), jax.default_device(jax.local_devices(backend="cpu")[0]):
        yield
