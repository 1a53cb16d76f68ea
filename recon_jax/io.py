"""Atomic, crash-safe file writes shared by every long job (shadow store, DR shadow embeddings, reports).

A file is written to a temporary name in the same directory, flushed and fsync'ed, then renamed over the final
name, so a reader sees either the old complete file or the new complete file, never a partial one. Files get the
mode a plain ``open(path, "w")`` would give them (``0o666`` less the process umask, usually ``0o644``), not the
``0o600`` of the temporary file.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import tempfile
from typing import Any

import jax
import numpy as np

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_save_npz",
    "seed_from_key",
    "stable_hash",
    "strict_json",
]


def _process_umask() -> int:
    """The process umask (read once, at import: ``os.umask`` can only be read by setting it, which is not
    thread-safe, so it is never touched again)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_process_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically (temp file + fsync + rename + directory fsync), readable as a file
    made by ``open`` would be (``0o666`` less the umask at import).

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); atomic_write_bytes(os.path.join(d, "atomic"), b"x")
    >>> open(os.path.join(d, "plain"), "wb").close()
    >>> os.stat(os.path.join(d, "atomic")).st_mode == os.stat(os.path.join(d, "plain")).st_mode
    True
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    try:
        os.fchmod(fd, _FILE_MODE)  # mkstemp creates 0o600: others could not read reports or stores
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Writes UTF-8 ``text`` to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Writes ``obj`` as indented JSON to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def atomic_save_npz(path: str | os.PathLike, **arrays: Any) -> None:
    """Saves NumPy arrays to an ``.npz`` file atomically (uncompressed, so it can be read quickly)."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())


def stable_hash(obj: Any) -> str:
    """SHA-256 hex digest of ``obj`` as canonical JSON (sorted keys, no whitespace): the key of caches and stores.

    Arrays and NumPy scalars are hashed by value; anything else JSON cannot encode is hashed by ``str``.

    >>> stable_hash({"b": 1, "a": [1.5, "x"]}) == stable_hash({"a": [1.5, "x"], "b": 1})
    True
    >>> stable_hash({"a": 1}) == stable_hash({"a": 2})
    False
    """
    def default(o: Any) -> Any:
        try:
            return _json_default(o)
        except TypeError:
            return str(o)

    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=default)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def array_digest(a, block_rows: int = 4096) -> str:
    """SHA-256 of an array's dtype, shape and bytes (C order): the identity of data in cache and store keys.

    Reads ``block_rows`` rows at a time, so a memory-mapped array is never copied whole.

    >>> import numpy as np
    >>> array_digest(np.zeros(2)) == array_digest(np.zeros(2)) != array_digest(np.zeros(2, np.float32))
    True
    >>> array_digest(np.arange(10).reshape(5, 2), block_rows=2) == array_digest(np.arange(10).reshape(5, 2))
    True
    """
    a = a if isinstance(a, np.ndarray) else np.asarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    if a.ndim == 0:
        h.update(a.tobytes())
    for start in range(0, a.shape[0] if a.ndim else 0, block_rows):
        h.update(np.ascontiguousarray(a[start:start + block_rows]).tobytes())
    return h.hexdigest()


def strict_json(obj: Any, path: str = "") -> Any:
    """Returns ``obj`` with every float made standard-JSON safe: +-inf become the strings ``"inf"``/``"-inf"``.

    Raises:
      ValueError: if any value is NaN, naming its key path (a NaN is a failed computation, never a result).

    >>> strict_json({"a": [1.0, float("inf")]})
    {'a': [1.0, 'inf']}
    """
    if isinstance(obj, dict):
        return {k: strict_json(v, f"{path}.{k}" if path else str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, np.ndarray) or (hasattr(obj, "__array__") and not isinstance(obj, (str, bytes))):
        arr = np.asarray(obj)
        return strict_json(arr.tolist() if arr.ndim else arr.item(), path)
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        if math.isnan(obj):
            raise ValueError(f"NaN at {path or 'top level'}: a NaN is a failed computation and is not written as a result")
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
    return obj


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if hasattr(obj, "__array__"):
        return np.asarray(obj).tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _seed(key: jax.Array) -> jax.Array:
    return jax.random.randint(key, (), 0, 2**31 - 1)


def seed_from_key(key: jax.Array) -> int | np.ndarray:
    """Non-negative 31-bit integer seeds drawn from typed JAX keys, for host libraries (NumPy, scikit-learn, umap).

    The library's one key-to-seed conversion: a uniform draw from the key, so distinct keys give independent
    seeds (it is used by the data splits and the dimensionality-reduction attack). A scalar key gives an ``int``;
    an array of keys gives an ``int64`` array of the same shape, equal to the per-key seeds. Raw ``uint32`` key
    data is accepted too (wrapped with the default implementation).

    Example:
      >>> import jax
      >>> keys = jax.random.split(jax.random.key(0), 3)
      >>> seed_from_key(keys).tolist() == [seed_from_key(k) for k in keys]
      True
      >>> 0 <= seed_from_key(jax.random.key(1)) < 2**31
      True
    """
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    if key.ndim == 0:
        return int(_seed(key))
    return np.asarray(jax.vmap(_seed)(key.reshape(-1)), dtype=np.int64).reshape(key.shape)
