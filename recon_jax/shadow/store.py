"""The resumable on-disk store of a shadow set: atomic chunk files plus a manifest.

Layout of a store directory::

    manifest.json                      format, config hash + description, count, layout, output shapes/dtypes
    chunks/chunk-<start>-<stop>.npz    one per finished chunk: every output for models [start, stop) + indices
    <output>.npy                       after completion: one consolidated array per output (memory-mapped)

Every file is written atomically (temporary name, fsync, rename; :mod:`recon_jax.io`), so a crash (even
``kill -9``) leaves only complete files. On a re-run with the same configuration the engine recomputes only
the missing models; a chunk that fails to load (truncated, corrupt zip CRC, wrong indices or shapes) is
deleted and recomputed. A different configuration on the same directory is refused
(:class:`ShadowStoreMismatchError`). Chunk size and device count are not part of the configuration: the models
do not depend on them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import zipfile
from typing import Any

import numpy as np

from recon_jax.io import atomic_save_npz, atomic_write_json
from recon_jax.models.flatten import Layout

__all__ = ["ShadowSet", "ShadowStore", "ShadowStoreMismatchError", "load_shadow_models", "config_hash"]

FORMAT = "recon_jax.shadow/1"
_CHUNK_RE = re.compile(r"^chunk-(\d{9})-(\d{9})\.npz$")


class ShadowStoreMismatchError(ValueError):
    """Raised when a store directory holds a shadow set with a different configuration."""


@dataclasses.dataclass
class ShadowSet:
    """A set of shadow models' outputs.

    Attributes:
      arrays: output name -> array with a leading model axis ``[K, ...]`` (NumPy; memory-mapped when loaded
        from a completed store). Names: ``params`` ``[K, P]``, ``probe_logits`` ``[K, n_probe, classes]``,
        ``eval_accuracy`` ``[K]``, ``target_loss`` ``[K]``, ``final_loss`` ``[K]``.
      layout: the :class:`~recon_jax.models.Layout` of the flat parameters.
      count: K.
      directory: the store directory, if any.
      config: the configuration description that was hashed.
    """

    arrays: dict[str, np.ndarray]
    layout: Layout
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


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def array_digest(a) -> str:
    """SHA-256 of an array's dtype, shape and bytes."""
    a = np.ascontiguousarray(np.asarray(a))
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def config_hash(config: dict) -> str:
    """Stable hash of a JSON-compatible configuration description."""
    return _sha(config)


class ShadowStore:
    """A store directory (see the module docstring). Created by the engine; users call :func:`load_shadow_models`.

    Args:
      directory: path of the store.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)
        self.chunk_dir = os.path.join(self.directory, "chunks")

    # -- manifest ---------------------------------------------------------------------------------------------
    @property
    def manifest_path(self) -> str:
        return os.path.join(self.directory, "manifest.json")

    def read_manifest(self) -> dict | None:
        if not os.path.exists(self.manifest_path):
            return None
        with open(self.manifest_path) as f:
            return json.load(f)

    def open(self, config: dict, count: int, layout: Layout, output_specs: dict[str, tuple[tuple, str]]) -> dict:
        """Creates the manifest, or checks that the existing one has the same configuration hash."""
        digest = config_hash(config)
        existing = self.read_manifest()
        if existing is not None:
            if existing.get("format") != FORMAT or existing.get("config_hash") != digest:
                raise ShadowStoreMismatchError(
                    f"{self.directory} holds a shadow set with a different configuration "
                    f"(hash {existing.get('config_hash', '?')[:12]} != {digest[:12]}); "
                    "use a new directory, or delete this one to regenerate")
            return existing
        manifest = {
            "format": FORMAT,
            "config_hash": digest,
            "config": config,
            "count": int(count),
            "layout": layout.to_json(),
            "outputs": {k: {"shape": list(s), "dtype": d} for k, (s, d) in output_specs.items()},
            "complete": False,
        }
        os.makedirs(self.chunk_dir, exist_ok=True)
        atomic_write_json(self.manifest_path, manifest)
        return manifest

    # -- chunks -----------------------------------------------------------------------------------------------
    def chunk_path(self, start: int, stop: int) -> str:
        return os.path.join(self.chunk_dir, f"chunk-{start:09d}-{stop:09d}.npz")

    def write_chunk(self, start: int, stop: int, arrays: dict[str, np.ndarray]) -> None:
        """Atomically writes models ``[start, stop)``."""
        atomic_save_npz(self.chunk_path(start, stop), indices=np.arange(start, stop, dtype=np.int64), **arrays)

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
        idx = arrays.pop("indices", None)
        if idx is None or not np.array_equal(idx, np.arange(start, stop)):
            return None
        for name, spec in manifest["outputs"].items():
            a = arrays.get(name)
            if a is None or tuple(a.shape) != (stop - start, *spec["shape"]) or a.dtype.str != np.dtype(spec["dtype"]).str:
                return None
        return arrays

    def valid_chunks(self, manifest: dict) -> list[tuple[int, int]]:
        """Complete, loadable, non-overlapping chunks; invalid or overlapping ones (and stale temporaries) are deleted."""
        if os.path.isdir(self.chunk_dir):
            for name in os.listdir(self.chunk_dir):
                if name.startswith(".tmp-"):  # left by a writer killed mid-write
                    os.unlink(os.path.join(self.chunk_dir, name))
        keep, covered = [], np.zeros(manifest["count"], dtype=bool)
        for start, stop, path in self._listed_chunks():
            ok = 0 <= start < stop <= manifest["count"] and not covered[start:stop].any()
            if ok and self._load_chunk(path, start, stop, manifest) is not None:
                keep.append((start, stop))
                covered[start:stop] = True
            else:
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
        chunks = [(s, e, self.chunk_path(s, e)) for s, e in self.valid_chunks(manifest)]
        if sum(e - s for s, e, _ in chunks) != manifest["count"]:
            raise RuntimeError(f"{self.directory}: cannot consolidate, chunks do not cover all models")
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
            os.replace(tmp, final)
        manifest = dict(manifest, complete=True)
        atomic_write_json(self.manifest_path, manifest)
        for _, _, path in chunks:
            os.unlink(path)
        return manifest

    def load(self, mmap: bool = True) -> ShadowSet:
        """Loads a completed store (memory-mapped ``.npy`` arrays if ``mmap``)."""
        manifest = self.read_manifest()
        if manifest is None:
            raise FileNotFoundError(f"no shadow store manifest in {self.directory}")
        if not manifest.get("complete"):
            raise RuntimeError(f"shadow store {self.directory} is incomplete; re-run generate_shadow_models "
                               "with the same arguments to resume it")
        arrays = {}
        for name, spec in manifest["outputs"].items():
            a = np.load(os.path.join(self.directory, f"{name}.npy"), mmap_mode="r" if mmap else None)
            if tuple(a.shape) != (manifest["count"], *spec["shape"]):
                raise RuntimeError(f"{name}.npy in {self.directory} has shape {a.shape}, manifest says "
                                   f"{(manifest['count'], *spec['shape'])}")
            arrays[name] = a
        return ShadowSet(arrays=arrays, layout=Layout.from_json(manifest["layout"]), count=manifest["count"],
                         directory=self.directory, config=manifest["config"])


def load_shadow_models(directory: str | os.PathLike, mmap: bool = True) -> ShadowSet:
    """Loads a completed shadow store written by :func:`recon_jax.shadow.generate_shadow_models`.

    Args:
      directory: the store directory.
      mmap: memory-map the arrays (default) instead of reading them into memory.

    Returns:
      The :class:`ShadowSet`.

    Raises:
      FileNotFoundError: if there is no manifest; RuntimeError: if the store is incomplete.

    >>> import tempfile
    >>> load_shadow_models(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: no shadow store manifest in ...
    """
    return ShadowStore(directory).load(mmap=mmap)
