"""The resumable on-disk store of a shadow set: atomic chunk files plus a manifest.

A store holds named outputs of fixed shape per row (``[count, *shape]``), computed and written chunk by chunk. The
shadow-model engine stores one row per model (flat parameters with their :class:`~recon_jax.models.Layout`, probe
logits, ...); the dimensionality-reduction attack stores one row per shadow embedding (no layout). Any other
generator of fixed-shape rows uses :func:`~recon_jax.shadow.fill.fill_store`, which runs the resume / write /
consolidate protocol below through a :class:`ShadowStore`.

Layout of a store directory::

    manifest.json                      format, config hash + description, code, count, layout, output shapes/dtypes
    chunks/chunk-<start>-<stop>.npz    one per finished chunk: every output for models [start, stop) + indices
    <output>.npy                       after completion: one consolidated array per output (memory-mapped)

    <directory>.lock                   next to the directory (not inside it): the writer's exclusive lock

Every file is written atomically (temporary name, fsync, rename; :mod:`recon_jax.io`), so a crash (even
``kill -9``) leaves only complete files. On a re-run with the same configuration the engine recomputes only
the missing models; a chunk that fails to load (truncated, corrupt zip CRC, SHA-256 mismatch, another
configuration's hash, wrong indices or shapes) is deleted and recomputed. A different configuration on the
same directory is refused (:class:`ShadowStoreMismatchError`), and so is the same one asked with another row
count, outputs (names, per-row shapes, dtypes) or parameter layout than its manifest records. The configuration
is identified by :func:`recon_jax.io.stable_hash` of its description (:func:`config_hash`). A store of an older
format (an older recon_jax) is refused with a message to regenerate it; nothing is converted. Chunk size and
device count are not part of the configuration: the rows do not depend on them. Typed keys enter a description as
:func:`key_fingerprint` (implementation name and SHA-256 of the key data), arrays as :func:`array_digest`.

The manifest also records the code that computes the rows (``code``: a :func:`recon_jax.io.code_record`, the hash
of the recon_jax sources on disk with the Python and numeric package versions), and a store made by other code is
refused (:class:`ShadowStoreMismatchError` naming what differs: the sources, or which package versions), so an
upgrade of recon_jax, jax or flax never mixes rows of two codes in one store; a store from before this record
(no ``code``) is refused too. The record covers what can compute the rows, by the package's layers
(``tests/test_layers.py``: no module imports from a layer above its own): for :func:`~recon_jax.shadow.fill_store`
by default all of recon_jax but ``evidence`` and ``report`` (:func:`recon_jax.io.library_code`); for the
shadow-model engine also without ``attacks`` (models enter by the jaxpr of their programs, the algorithm by its
description, both in the configuration), so an edit of an attack or a report keeps shadow models usable. The
configuration names everything else the rows depend on. :func:`recon_jax.io.allow_resume_across_code` resumes a
store made by other code anyway and records each code in its manifest (``resumed_from_code``).
:func:`load_shadow_models` reads a finished store whatever code made it (its manifest says which).

One writer at a time: the writer holds an exclusive ``flock`` on ``<directory>.lock``, a file beside the store,
so the lock outlives a deleted store directory; a second writer waits for it (then resumes, loads the finished
store, or is refused as a mismatch). Before every chunk and before marking the store complete, the writer
re-checks that the directory and manifest it opened are still there (:class:`ShadowStoreLostError` otherwise),
so a run whose directory was deleted stops instead of writing into a successor's store. Each chunk carries its
configuration hash and the SHA-256 of its arrays; the manifest of a complete store records the size and SHA-256
of every consolidated ``.npy``, checked on load (:class:`ShadowStoreCorruptError` names the file). Leftovers of a
crash (temporary files, chunks of a store already consolidated) are removed by the next writer.

This module is the store's on-disk format and its lock, chunk, manifest and consolidation steps (the format's
invariants kept together); the protocol that drives them for a whole shadow set is :mod:`recon_jax.shadow.fill`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import time
import zipfile

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.io import (array_digest, atomic_save_npz, atomic_write_json, code_difference, config_difference,
                          library_code, resume_across_code_allowed, stable_hash)
from recon_jax.models.flatten import Layout

__all__ = ["ShadowSet", "ShadowStore", "ShadowStoreCorruptError", "ShadowStoreLostError", "ShadowStoreMismatchError",
           "load_shadow_models", "config_hash", "host_key_data", "key_fingerprint"]

# 2: chunk checksums + config hash, .npy checksums in the manifest, writer lock; 3: the configuration describes
# every algorithm field and the first-layer path (format 2 left defaults out so that older stores resumed). The
# manifest's "code" (added within format 3) is checked by itself: a format-3 store without it is refused by the code
# check, whose message says so
FORMAT = "recon_jax.shadow/3"
_CHUNK_RE = re.compile(r"^chunk-(\d{9})-(\d{9})\.npz$")
_META = "__meta__"  # chunk member: JSON (uint8) with the config hash and each array's SHA-256
_HASH_BLOCK = 1 << 22
_log = logging.getLogger(__name__)


class ShadowStoreMismatchError(ValueError):
    """Raised when a store directory holds a shadow set with a different configuration."""


class ShadowStoreLostError(RuntimeError):
    """Raised in a writer whose store directory was deleted or replaced while it was running."""


class ShadowStoreCorruptError(RuntimeError):
    """Raised when a consolidated file of a complete store is missing, truncated or fails its checksum."""


@dataclasses.dataclass
class ShadowSet:
    """A set of shadow models' outputs.

    Attributes:
      arrays: output name -> array with a leading model axis ``[K, ...]`` (NumPy; memory-mapped when loaded
        from a completed store). Names: ``params`` ``[K, P]``, ``probe_logits`` ``[K, n_probe, classes]``,
        ``eval_accuracy`` ``[K]``, ``target_loss`` ``[K]``, ``final_loss`` ``[K]``.
      layout: the :class:`~recon_jax.models.Layout` of the flat parameters (None for rows that are not model
        parameters, e.g. the DR attack's shadow embeddings).
      count: K.
      directory: the store directory, if any.
      config: the configuration description that was hashed.
    """

    arrays: dict[str, np.ndarray]
    layout: Layout | None
    count: int
    directory: str | None = None
    config: dict | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    @property
    def params(self) -> np.ndarray:
        """Flat parameters ``[K, P]``."""
        return self.arrays["params"]


def config_hash(config: dict) -> str:
    """Stable hash of a JSON-compatible configuration description (:func:`recon_jax.io.stable_hash`).

    >>> config_hash({"a": 1, "b": [2]}) == config_hash({"b": [2], "a": 1})
    True
    """
    return stable_hash(config)


def host_key_data(key: jax.Array | None) -> np.ndarray | None:
    """The raw data of a typed key as a host array (None for None).

    Raises:
      ValueError: for a legacy ``uint32`` ``PRNGKey`` array (the engine and the stores take typed keys only).

    >>> import jax
    >>> host_key_data(jax.random.key(0)).shape
    (2,)
    """
    if key is None:
        return None
    if not (hasattr(key, "dtype") and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)):
        raise ValueError(f"keys must be typed keys from jax.random.key(seed), not legacy uint32 PRNGKey arrays or "
                         f"ints; got {type(key).__name__} {getattr(key, 'dtype', '')}".rstrip())
    return np.asarray(jax.random.key_data(key))


def key_fingerprint(key: jax.Array | None) -> list[str] | None:
    """How a store configuration names a typed key: ``[implementation, SHA-256 of the key data]`` (None for None).

    >>> import jax
    >>> key_fingerprint(jax.random.key(0)) == key_fingerprint(jax.random.key(0)) != key_fingerprint(jax.random.key(1))
    True
    """
    if key is None:
        return None
    data = host_key_data(key)
    return [str(jax.random.key_impl(key)), array_digest(data)]


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


class ShadowStore:
    """A store directory (see the module docstring). Created by the engine; users call :func:`load_shadow_models`.

    Args:
      directory: path of the store.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)
        self.chunk_dir = os.path.join(self.directory, "chunks")
        self._lock_fd: int | None = None
        self._owned: tuple | None = None  # (st_dev, st_ino, config hash) of what this writer opened
        self._config_hash: str | None = None

    # -- writer lock ------------------------------------------------------------------------------------------
    @property
    def lock_path(self) -> str:
        """``<directory>.lock``: beside the directory, so deleting the directory does not drop the lock."""
        return os.path.normpath(os.path.abspath(self.directory)) + ".lock"

    def acquire(self) -> None:
        """Takes the exclusive writer lock, waiting (with a log message) while another process holds it."""
        if self._lock_fd is not None:
            return
        os.makedirs(os.path.dirname(self.lock_path), exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
                _log.warning("shadow store %s is being written by %s; waiting for it to finish", self.directory,
                             holder)
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.ctime()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def release(self) -> None:
        """Releases the writer lock (the lock file stays: removing it would race with a waiting writer)."""
        self._owned = None
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def check_owner(self) -> None:
        """Raises :class:`ShadowStoreLostError` if the directory or manifest this writer opened is gone/replaced."""
        if self._owned is None:
            return
        dev, ino, digest = self._owned
        try:
            st = os.stat(self.directory)
            manifest = self.read_manifest()
        except (OSError, ValueError):
            st, manifest = None, None
        if st is None or (st.st_dev, st.st_ino) != (dev, ino) or manifest is None \
                or manifest.get("config_hash") != digest:
            raise ShadowStoreLostError(
                f"shadow store {self.directory} was deleted or replaced while this run was writing it; "
                "stopping without writing more (re-run to start a new store there)")

    # -- manifest ---------------------------------------------------------------------------------------------
    @property
    def manifest_path(self) -> str:
        return os.path.join(self.directory, "manifest.json")

    def read_manifest(self) -> dict | None:
        if not os.path.exists(self.manifest_path):
            return None
        with open(self.manifest_path) as f:
            return json.load(f)

    def open(self, config: dict, count: int, layout: Layout | None,
             output_specs: dict[str, tuple[tuple, str]], code: dict | None = None) -> dict:
        """Creates the manifest, or checks that the existing one has the same configuration hash and code.

        Args:
          config: JSON-compatible description of everything that determines the rows (hashed).
          count: number of rows.
          layout: the parameter layout of model rows (None for other rows).
          output_specs: output name -> (per-row shape, dtype string).
          code: the :func:`~recon_jax.io.code_record` of the code that computes the rows (default:
            :func:`~recon_jax.io.library_code`).

        Raises:
          ShadowStoreMismatchError: the directory holds a store of an older format, of another configuration, of
            another count, outputs (names, per-row shapes, dtypes) or layout, or made by other code (unless
            :func:`~recon_jax.io.allow_resume_across_code`).
        """
        digest = config_hash(config)
        code = library_code() if code is None else code
        outputs = {k: {"shape": [int(n) for n in s], "dtype": np.dtype(d).str} for k, (s, d) in output_specs.items()}
        shapes = json.loads(json.dumps({  # the rows' shapes as a manifest reads back, to compare with an existing one
            "count": int(count), "layout": None if layout is None else layout.to_json(), "outputs": outputs}))
        existing = self.read_manifest()
        if existing is not None:
            if existing.get("format") != FORMAT:
                raise ShadowStoreMismatchError(
                    f"{self.directory} was written by an older recon_jax (store format {existing.get('format')!r}, "
                    f"this version reads {FORMAT!r}); delete the directory to regenerate it")
            if existing.get("config_hash") != digest:
                raise ShadowStoreMismatchError(
                    f"{self.directory} holds a shadow set with a different configuration "
                    f"(hash {existing.get('config_hash', '?')[:12]} != {digest[:12]}; differs in "
                    f"{config_difference(existing.get('config'), json.loads(json.dumps(config)))}); "
                    "use a new directory, or delete this one to regenerate")
            differs = [k if k == "layout" else f"{k} ({existing.get(k)} in the store, {v} asked)"
                       for k, v in shapes.items() if existing.get(k) != v]
            if differs:
                raise ShadowStoreMismatchError(f"{self.directory} holds this configuration's shadow set with another "
                                               f"{'; '.join(differs)}; use a new directory, or delete this one")
            difference = code_difference(existing.get("code"), code)
            if difference is not None:
                existing = self._resume_across_code(existing, code, difference)
            self._own(existing["config_hash"])
            return existing
        manifest = {"format": FORMAT, "config_hash": digest, "config": config, "code": code, **shapes,
                    "complete": False}
        os.makedirs(self.chunk_dir, exist_ok=True)
        atomic_write_json(self.manifest_path, manifest)
        self._own(digest)
        return manifest

    def _resume_across_code(self, manifest: dict, code: dict, difference: str) -> dict:
        """Refuses a store made by other code (:func:`~recon_jax.io.allow_resume_across_code`: records the new code
        and keeps the old ones under ``resumed_from_code``)."""
        if not resume_across_code_allowed():
            raise ShadowStoreMismatchError(
                f"{self.directory} was made by other code than the code running now: {difference}. Its rows may "
                "differ from what this code computes, so it is neither resumed nor returned as this code's; use a "
                "new directory, or delete this one to regenerate it (or, knowingly, resume it after "
                "recon_jax.io.allow_resume_across_code() or with --allow_resume_across_code, which record both "
                "codes in its manifest.json)")
        _log.warning("resuming shadow store %s made by other code (%s)", self.directory, difference)
        if self._lock_fd is None:  # a reader (not the writer) leaves the manifest as it is
            return manifest
        manifest = dict(manifest, code=code,
                        resumed_from_code=[*manifest.get("resumed_from_code", []), manifest.get("code")])
        atomic_write_json(self.manifest_path, manifest)
        return manifest

    def _own(self, digest: str) -> None:
        self._config_hash = digest
        if self._lock_fd is not None:
            st = os.stat(self.directory)
            self._owned = (st.st_dev, st.st_ino, digest)

    def clean_leftovers(self, manifest: dict) -> None:
        """Writer only: deletes temporaries of killed writes and, once complete, the chunks already consolidated."""
        if self._owned is None:
            return
        for d in (self.directory, self.chunk_dir):
            if os.path.isdir(d):
                for name in os.listdir(d):
                    if name.startswith(".tmp-") or (manifest.get("complete") and d == self.chunk_dir):
                        os.unlink(os.path.join(d, name))

    # -- chunks -----------------------------------------------------------------------------------------------
    def chunk_path(self, start: int, stop: int) -> str:
        return os.path.join(self.chunk_dir, f"chunk-{start:09d}-{stop:09d}.npz")

    def write_chunk(self, start: int, stop: int, arrays: dict[str, np.ndarray]) -> None:
        """Atomically writes models ``[start, stop)`` with their checksums (after :meth:`open` and ownership check)."""
        if self._config_hash is None:
            raise RuntimeError("ShadowStore.write_chunk before open()")
        self.check_owner()
        arrays = dict(arrays, indices=np.arange(start, stop, dtype=np.int64))
        meta = {"config_hash": self._config_hash, "sha256": {k: array_digest(v) for k, v in arrays.items()}}
        meta = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
        atomic_save_npz(self.chunk_path(start, stop), **{_META: meta}, **arrays)

    def _listed_chunks(self) -> list[tuple[int, int, str]]:
        if not os.path.isdir(self.chunk_dir):
            return []
        out = []
        for name in os.listdir(self.chunk_dir):
            m = _CHUNK_RE.match(name)
            if m:
                out.append((int(m.group(1)), int(m.group(2)), os.path.join(self.chunk_dir, name)))
        return sorted(out)

    def _load_chunk(self, path: str, start: int, stop: int, manifest: dict) -> dict[str, np.ndarray] | None:
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}  # reading every member checks its zip CRC
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError):
            return None
        try:
            meta = json.loads(arrays.pop(_META).tobytes().decode())
        except (KeyError, ValueError, UnicodeDecodeError):
            return None
        if meta.get("config_hash") != manifest["config_hash"] or set(meta.get("sha256", {})) != set(arrays) \
                or any(array_digest(a) != meta["sha256"][k] for k, a in arrays.items()):
            return None
        idx = arrays.pop("indices", None)
        if idx is None or not np.array_equal(idx, np.arange(start, stop)):
            return None
        for name, spec in manifest["outputs"].items():
            a = arrays.get(name)
            if a is None or tuple(a.shape) != (stop - start, *spec["shape"]) or a.dtype.str != np.dtype(spec["dtype"]).str:
                return None
        return arrays

    def valid_chunks(self, manifest: dict) -> list[tuple[int, int]]:
        """Complete, loadable, non-overlapping chunks; the writer deletes invalid or overlapping ones."""
        keep, covered = [], np.zeros(manifest["count"], dtype=bool)
        for start, stop, path in self._listed_chunks():
            ok = 0 <= start < stop <= manifest["count"] and not covered[start:stop].any()
            if ok and self._load_chunk(path, start, stop, manifest) is not None:
                keep.append((start, stop))
                covered[start:stop] = True
            elif self._owned is not None:
                os.unlink(path)
        return keep

    def missing_ranges(self, manifest: dict) -> list[tuple[int, int]]:
        """Maximal index ranges not covered by a valid chunk."""
        covered = np.zeros(manifest["count"], dtype=bool)
        for start, stop in self.valid_chunks(manifest):
            covered[start:stop] = True
        ranges, i, n = [], 0, manifest["count"]
        while i < n:
            if covered[i]:
                i += 1
                continue
            j = i
            while j < n and not covered[j]:
                j += 1
            ranges.append((i, j))
            i = j
        return ranges

    # -- consolidation ----------------------------------------------------------------------------------------
    def consolidate(self, manifest: dict) -> dict:
        """Streams the chunks into one ``<output>.npy`` per output, marks the manifest complete, drops chunks."""
        self.check_owner()
        chunks = [(s, e, self.chunk_path(s, e)) for s, e in self.valid_chunks(manifest)]
        if sum(e - s for s, e, _ in chunks) != manifest["count"]:
            raise RuntimeError(f"{self.directory}: cannot consolidate, chunks do not cover all models")
        checksums = {}
        for name, spec in manifest["outputs"].items():
            final = os.path.join(self.directory, f"{name}.npy")
            tmp = os.path.join(self.directory, f".tmp-{name}.npy")
            dtype = np.dtype(spec["dtype"])
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                      "shape": (manifest["count"], *spec["shape"])}
            # plain sequential writes (not a memmap): the copy passes through the page cache, not our RSS
            with open(tmp, "wb") as f:
                np.lib.format.write_array_header_1_0(f, header)
                for s, e, path in chunks:
                    with np.load(path, allow_pickle=False) as z:
                        f.write(np.ascontiguousarray(z[name], dtype=dtype).tobytes())
                f.flush()
                os.fsync(f.fileno())
            checksums[f"{name}.npy"] = {"bytes": os.path.getsize(tmp), "sha256": _file_sha256(tmp)}
            os.replace(tmp, final)
        manifest = dict(manifest, complete=True, checksums=checksums)
        self.check_owner()
        atomic_write_json(self.manifest_path, manifest)
        for _, _, path in chunks:
            os.unlink(path)
        return manifest

    def verify(self, manifest: dict) -> None:
        """Checks each consolidated ``.npy`` against the size and SHA-256 in the manifest.

        Raises:
          ShadowStoreCorruptError: naming the first file that is missing, has the wrong size or checksum.
        """
        for fname, want in manifest.get("checksums", {}).items():
            path = os.path.join(self.directory, fname)
            hint = "delete the store directory and re-run to regenerate it"
            if not os.path.exists(path):
                raise ShadowStoreCorruptError(f"{path} is missing from the complete shadow store; {hint}")
            size = os.path.getsize(path)
            if size != want["bytes"]:
                raise ShadowStoreCorruptError(f"{path} has {size} bytes, the manifest says {want['bytes']} "
                                              f"(truncated or overwritten); {hint}")
            if _file_sha256(path) != want["sha256"]:
                raise ShadowStoreCorruptError(f"{path} fails its SHA-256 checksum (corrupted); {hint}")

    def load(self, mmap: bool = True, verify: bool = True) -> ShadowSet:
        """Loads a completed store (memory-mapped ``.npy`` arrays if ``mmap``), verifying checksums if ``verify``."""
        manifest = self.read_manifest()
        if manifest is None:
            raise FileNotFoundError(f"no shadow store manifest in {self.directory}")
        if not manifest.get("complete"):
            raise RuntimeError(f"shadow store {self.directory} is incomplete; re-run the call that wrote it "
                               "(e.g. generate_shadow_models) with the same arguments to resume it")
        if verify:
            self.verify(manifest)
        arrays = {}
        for name, spec in manifest["outputs"].items():
            path = os.path.join(self.directory, f"{name}.npy")
            try:
                a = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
            except (OSError, ValueError, EOFError) as e:
                raise ShadowStoreCorruptError(f"cannot read {path}: {e}") from e
            if tuple(a.shape) != (manifest["count"], *spec["shape"]):
                raise ShadowStoreCorruptError(f"{name}.npy in {self.directory} has shape {a.shape}, manifest says "
                                   f"{(manifest['count'], *spec['shape'])}")
            arrays[name] = a
        layout = None if manifest.get("layout") is None else Layout.from_json(manifest["layout"])
        return ShadowSet(arrays=arrays, layout=layout, count=manifest["count"], directory=self.directory,
                         config=manifest["config"])


def load_shadow_models(directory: str | os.PathLike, mmap: bool = True, verify: bool = True) -> ShadowSet:
    """Loads a completed shadow store written by :func:`recon_jax.shadow.generate_shadow_models`.

    Args:
      directory: the store directory.
      mmap: memory-map the arrays (default) instead of reading them into memory.
      verify: check every consolidated file's size and SHA-256 against the manifest (reads each file once).

    Returns:
      The :class:`ShadowSet`.

    Raises:
      FileNotFoundError: if there is no manifest; RuntimeError: if the store is incomplete;
      ShadowStoreCorruptError: if a consolidated file is missing, truncated or corrupted.

    >>> import tempfile
    >>> load_shadow_models(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: no shadow store manifest in ...
    """
    return ShadowStore(directory).load(mmap=mmap, verify=verify)
