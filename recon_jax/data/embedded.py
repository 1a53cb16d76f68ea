"""The embedded MNIST: the original IDX files (gzip), vendored as package data, parsed with NumPy.

The files in ``recon_jax/data/embedded/mnist/`` are byte-identical to the original distribution of the MNIST
database (LeCun, Cortes, Burges), made available under CC BY-SA 3.0 (see the README.md beside them). Each ``.gz``
file is checked against ``SHA256SUMS`` on first load.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os

import numpy as np

__all__ = ["MNIST_DIR", "MNIST_FILES", "parse_idx", "load_embedded_mnist", "verify_checksums", "DataIntegrityError"]

MNIST_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "embedded", "mnist")

MNIST_FILES = {
    "train": ("train-images.idx3-ubyte.gz", "train-labels.idx1-ubyte.gz"),
    "test": ("t10k-images.idx3-ubyte.gz", "t10k-labels.idx1-ubyte.gz"),
}

# IDX type codes (third byte of the magic number) -> NumPy big-endian dtypes.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class DataIntegrityError(RuntimeError):
    """A vendored data file is missing, truncated or does not match its recorded checksum."""


def parse_idx(raw: bytes) -> np.ndarray:
    """Parses the bytes of one (uncompressed) IDX file into a NumPy array.

    The format: two zero bytes, a type code, the number of dimensions, one big-endian uint32 per dimension,
    then the data in C order.

    >>> import numpy as np
    >>> header = bytes([0, 0, 0x08, 2]) + (2).to_bytes(4, "big") + (3).to_bytes(4, "big")
    >>> parse_idx(header + bytes(range(6)))
    array([[0, 1, 2],
           [3, 4, 5]], dtype=uint8)
    """
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataIntegrityError("not an IDX file: bad magic number")
    type_code, ndim = raw[2], raw[3]
    if type_code not in _IDX_DTYPES:
        raise DataIntegrityError(f"unknown IDX type code {type_code:#x}")
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise DataIntegrityError("truncated IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[type_code])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header_len != expected:
        raise DataIntegrityError(f"IDX payload has {len(raw) - header_len} bytes, expected {expected} for shape {shape}")
    data = np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def _recorded_checksums(directory: str) -> dict[str, str]:
    path = os.path.join(directory, "SHA256SUMS")
    if not os.path.exists(path):
        raise DataIntegrityError(f"checksum file missing: {path}")
    sums = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                sums[parts[1]] = parts[0]
    return sums


def verify_checksums(directory: str = MNIST_DIR) -> None:
    """Checks every embedded MNIST file exists and matches ``SHA256SUMS``; raises DataIntegrityError if not."""
    sums = _recorded_checksums(directory)
    for images, labels in MNIST_FILES.values():
        for name in (images, labels):
            _read_verified(directory, name, sums)


def _read_verified(directory: str, name: str, sums: dict[str, str]) -> bytes:
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        raise DataIntegrityError(
            f"embedded MNIST file missing: {path}. Reinstall recon-jax (the files ship as package data)."
        )
    with open(path, "rb") as f:
        blob = f.read()
    digest = hashlib.sha256(blob).hexdigest()
    if name not in sums:
        raise DataIntegrityError(f"no recorded checksum for {name} in {directory}/SHA256SUMS")
    if digest != sums[name]:
        raise DataIntegrityError(
            f"embedded MNIST file corrupt: {path} has sha256 {digest}, expected {sums[name]}. "
            "Reinstall recon-jax or restore the file from the repository."
        )
    try:
        return gzip.decompress(blob)
    except (OSError, EOFError) as e:
        raise DataIntegrityError(f"cannot decompress {path}: {e}") from e


@functools.lru_cache(maxsize=4)
def _load_uint8(split: str, directory: str) -> tuple[np.ndarray, np.ndarray]:
    sums = _recorded_checksums(directory)
    images_name, labels_name = MNIST_FILES[split]
    images = parse_idx(_read_verified(directory, images_name, sums))
    labels = parse_idx(_read_verified(directory, labels_name, sums))
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise DataIntegrityError(f"unexpected MNIST shapes {images.shape}, {labels.shape}")
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def load_embedded_mnist(split: str = "train", directory: str = MNIST_DIR) -> tuple[np.ndarray, np.ndarray]:
    """Loads the embedded MNIST split.

    Args:
      split: ``"train"`` (60,000 images) or ``"test"`` (10,000 images).
      directory: where the IDX files live (default: the vendored copy).

    Returns:
      ``(images, labels)``: float32 ``[N, 28, 28, 1]`` in [0, 1] and int32 ``[N]``.

    Raises:
      ValueError: unknown split.
      DataIntegrityError: a file is missing or corrupt.
    """
    if split not in MNIST_FILES:
        raise ValueError(f"split must be one of {sorted(MNIST_FILES)} for the embedded MNIST, got {split!r}")
    images, labels = _load_uint8(split, os.path.abspath(directory))
    return (images.astype(np.float32) / 255.0)[..., None], labels.astype(np.int32)
